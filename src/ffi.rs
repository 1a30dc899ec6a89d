//! The FFI vocabulary the shim uses, re-exported from `cuda-types` (bindings generated from
//! `include/`). Only this file names the generated module, so regenerating it touches one place.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::c_void;

pub type CUresult = u32;
pub type CUdevice = i32;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUarray = *mut c_void;
pub type CUmipmappedArray = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUgraphExec = *mut c_void;
pub type CUmemGenericAllocationHandle = u64;
pub type CUdriverProcAddressQueryResult = u32;
pub type CUexecAffinityParam = c_void;
pub type CUctxCreateParams = c_void;
pub type CUlaunchConfig = c_void;
pub type CUDA_LAUNCH_PARAMS = c_void;
pub type CUmemAllocationProp = c_void;
pub type CUDA_ARRAY_DESCRIPTOR = c_void;
pub type CUDA_ARRAY3D_DESCRIPTOR = c_void;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

pub type nvmlReturn_t = u32;
pub type nvmlDevice_t = *mut c_void;
pub type nvmlMemory_t = c_void;
pub type nvmlMemory_v2_t = c_void;
pub type nvmlProcessInfo_v1_t = c_void;
pub type nvmlProcessInfo_t = c_void;
pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_LIBRARY_NOT_FOUND: nvmlReturn_t = 12;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;
