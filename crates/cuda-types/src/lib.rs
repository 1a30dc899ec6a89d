//! CUDA driver API / NVML FFI types and constants used by libvgpu.
//!
//! `generated.rs` is produced by bindgen from `include/vgpu_cuda.h` and `include/vgpu_nvml.h`
//! (regenerate with `ci/gen-bindings.sh`; normal builds need no libclang). It holds types,
//! constants and `PFN_<exported symbol>` function-pointer types, never `extern "C"` function
//! declarations (`pfn::<symbol>` below is the bare function type of each `PFN_`). C enums are
//! plain integer type aliases plus constants (`CUresult` is `u32`, `nvmlReturn_t` is `u32`): the
//! driver may return values no enum lists.
//!
//! Names and layouts are NVIDIA's; `tests/abi_conformance.rs` (root package) checks the C headers
//! against NVIDIA's cuda.h / nvml.h, and `tests/abi_table.rs` here checks these Rust types against
//! the same table (`tests/abi/table.rs`).
#![no_std]
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#![allow(clippy::all)]

include!("generated.rs");

/// The function type inside a bindgen `PFN_<symbol>` (`Option<unsafe extern "C" fn(...) -> R>`).
pub trait FnOf {
    type F;
}
impl<F> FnOf for Option<F> {
    type F = F;
}

/// `pfn::<symbol>`: the bare `unsafe extern "C" fn(...)` type of each `PFN_<symbol>`, one alias
/// per `PFN_` type, derived by `build.rs` from `generated.rs`. The shim types its exports and the
/// real functions it calls with these, so each Rust signature is the one bindgen generated from a
/// prototype in `include/` that `tests/abi_conformance.rs` checks against NVIDIA's headers.
pub mod pfn {
    include!(concat!(env!("OUT_DIR"), "/pfn.rs"));
}

use core::ffi::c_void;

// ---- Macros bindgen cannot translate (casts to pointer / handle types, sizeof) ----

/// `CU_STREAM_LEGACY` — `((CUstream)0x1)`.
pub const CU_STREAM_LEGACY: CUstream = 0x1 as CUstream;
/// `CU_STREAM_PER_THREAD` — `((CUstream)0x2)`.
pub const CU_STREAM_PER_THREAD: CUstream = 0x2 as CUstream;
/// `CU_DEVICE_CPU` — `((CUdevice)-1)`.
pub const CU_DEVICE_CPU: CUdevice = -1;
/// `CU_DEVICE_INVALID` — `((CUdevice)-2)`.
pub const CU_DEVICE_INVALID: CUdevice = -2;
/// `CU_LAUNCH_PARAM_END` — `((void*)0x00)`.
pub const CU_LAUNCH_PARAM_END: *mut c_void = CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void;
/// `CU_LAUNCH_PARAM_BUFFER_POINTER` — `((void*)0x01)`.
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void = CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void;
/// `CU_LAUNCH_PARAM_BUFFER_SIZE` — `((void*)0x02)`.
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: *mut c_void = CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void;

/// `NVML_STRUCT_VERSION(data, ver)`: `sizeof(struct) | ver << 24`.
pub const fn nvml_struct_version(size: usize, ver: u32) -> u32 {
    (size as u32) | (ver << 24)
}
/// `nvmlMemory_v2` — `NVML_STRUCT_VERSION(Memory, 2)` = `0x0200_0028`.
pub const nvmlMemory_v2: u32 = nvml_struct_version(core::mem::size_of::<nvmlMemory_v2_t>(), 2);

/// `CUDA_SUCCESS` typed as `CUresult` (same value; convenience for `match`).
pub const CU_OK: CUresult = CUDA_SUCCESS;

/// Bytes of one element of a CUDA array per channel, for the formats whose element size is a
/// whole number of bytes (`CUDA_ARRAY_DESCRIPTOR::NumChannels` channels per element).
/// For the packed `*X1/X2/X4` formats the returned size is per element (channels included);
/// block-compressed, planar and video formats return `None`.
pub const fn array_format_channel_bytes(format: CUarray_format) -> Option<usize> {
    match format {
        CU_AD_FORMAT_UNSIGNED_INT8 | CU_AD_FORMAT_SIGNED_INT8 => Some(1),
        CU_AD_FORMAT_UNSIGNED_INT16 | CU_AD_FORMAT_SIGNED_INT16 | CU_AD_FORMAT_HALF => Some(2),
        CU_AD_FORMAT_UNSIGNED_INT32 | CU_AD_FORMAT_SIGNED_INT32 | CU_AD_FORMAT_FLOAT => Some(4),
        CU_AD_FORMAT_UNORM_INT8X1 | CU_AD_FORMAT_SNORM_INT8X1 => Some(1),
        CU_AD_FORMAT_UNORM_INT8X2 | CU_AD_FORMAT_SNORM_INT8X2 => Some(2),
        CU_AD_FORMAT_UNORM_INT8X4 | CU_AD_FORMAT_SNORM_INT8X4 => Some(4),
        CU_AD_FORMAT_UNORM_INT16X1 | CU_AD_FORMAT_SNORM_INT16X1 => Some(2),
        CU_AD_FORMAT_UNORM_INT16X2 | CU_AD_FORMAT_SNORM_INT16X2 => Some(4),
        CU_AD_FORMAT_UNORM_INT16X4 | CU_AD_FORMAT_SNORM_INT16X4 => Some(8),
        CU_AD_FORMAT_UNORM_INT_101010_2 => Some(4),
        _ => None,
    }
}
