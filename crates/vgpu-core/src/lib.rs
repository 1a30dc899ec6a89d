//! Pure logic of libvgpu (no hooks live here).
