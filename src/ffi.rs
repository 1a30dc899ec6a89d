//! The FFI vocabulary the shim uses: re-exported from `cuda-types` (bindings generated from
//! `include/`), so the shim and the ABI conformance test share one source of truth.

pub use cuda_types::*;
