//! CUDA driver / NVML FFI types.
