//! libvgpu
