//! Typed access to real driver and NVML functions that the shim calls but does not hook.
//! One list; each entry is a lazily resolved, cached pointer. Below it, the few small queries
//! several modules make through them (current context and device, NVML handles and processes).

#![allow(non_snake_case, dead_code)]

use crate::dl::{LIBCUDA, LIBNVML, RealLib};
use crate::ffi::*;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The cached function in `slot`, resolving `name` in `lib` on first use (null if absent).
pub fn resolve(slot: &AtomicPtr<c_void>, lib: &RealLib, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    let p = lib.sym(name);
    if !p.is_null() {
        slot.store(p, Ordering::Release);
    }
    p
}

macro_rules! called {
    ($( $lib:ident fn $name:ident ( $($ty:ty),* ) -> $ret:ty ; )*) => {
        $(
            pub fn $name() -> Option<unsafe extern "C" fn($($ty),*) -> $ret> {
                static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
                let name = match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(c) => c,
                    Err(_) => return None,
                };
                let p = resolve(&SLOT, &$lib, name);
                if p.is_null() { None } else { Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> $ret>(p) }) }
            }
        )*
    };
}

called! {
    LIBCUDA fn cuDriverGetVersion(*mut c_int) -> CUresult;
    LIBCUDA fn cuDeviceGetCount(*mut c_int) -> CUresult;
    LIBCUDA fn cuDeviceGet(*mut CUdevice, c_int) -> CUresult;
    LIBCUDA fn cuDeviceGetAttribute(*mut c_int, c_int, CUdevice) -> CUresult;
    LIBCUDA fn cuDeviceGetUuid_v2(*mut CUuuid, CUdevice) -> CUresult;
    LIBCUDA fn cuDeviceGetUuid(*mut CUuuid, CUdevice) -> CUresult;
    LIBCUDA fn cuCtxGetCurrent(*mut CUcontext) -> CUresult;
    LIBCUDA fn cuCtxGetDevice(*mut CUdevice) -> CUresult;
    LIBCUDA fn cuCtxPushCurrent_v2(CUcontext) -> CUresult;
    LIBCUDA fn cuCtxPopCurrent_v2(*mut CUcontext) -> CUresult;
    LIBCUDA fn cuDevicePrimaryCtxGetState(CUdevice, *mut c_uint, *mut c_int) -> CUresult;
    // cuMemAdvise (v1 ABI): (ptr, bytes, CUmem_advise, device).
    LIBCUDA fn cuMemAdvise(CUdeviceptr, usize, u32, CUdevice) -> CUresult;
    LIBCUDA fn cuPointerGetAttribute(*mut c_void, c_int, CUdeviceptr) -> CUresult;
    LIBCUDA fn cuMemGetAllocationPropertiesFromHandle(*mut CUmemAllocationProp, CUmemGenericAllocationHandle) -> CUresult;
    LIBCUDA fn cuMemPoolGetAttribute(CUmemoryPool, c_int, *mut c_void) -> CUresult;
    LIBCUDA fn cuStreamIsCapturing(CUstream, *mut CUstreamCaptureStatus_enum) -> CUresult;
    LIBCUDA fn cuStreamIsCapturing_ptsz(CUstream, *mut CUstreamCaptureStatus_enum) -> CUresult;
    LIBNVML fn nvmlInit_v2() -> nvmlReturn_t;
    LIBNVML fn nvmlDeviceGetCount_v2(*mut c_uint) -> nvmlReturn_t;
    LIBNVML fn nvmlDeviceGetHandleByIndex_v2(c_uint, *mut nvmlDevice_t) -> nvmlReturn_t;
    LIBNVML fn nvmlDeviceGetIndex(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    LIBNVML fn nvmlDeviceGetUUID(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    LIBNVML fn nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
    LIBNVML fn nvmlDeviceGetProcessUtilization(nvmlDevice_t, *mut nvmlProcessUtilizationSample_t, *mut c_uint, u64) -> nvmlReturn_t;
    LIBNVML fn nvmlDeviceGetUtilizationRates(nvmlDevice_t, *mut nvmlUtilization_t) -> nvmlReturn_t;
    LIBCUDA fn cuStreamGetCtx(CUstream, *mut CUcontext) -> CUresult;
    LIBCUDA fn cuStreamGetCtx_ptsz(CUstream, *mut CUcontext) -> CUresult;
    LIBCUDA fn cuStreamQuery(CUstream) -> CUresult;
    LIBCUDA fn cuStreamQuery_ptsz(CUstream) -> CUresult;
    LIBCUDA fn cuEventCreate(*mut CUevent, c_uint) -> CUresult;
    LIBCUDA fn cuEventDestroy_v2(CUevent) -> CUresult;
    LIBCUDA fn cuEventRecord(CUevent, CUstream) -> CUresult;
    LIBCUDA fn cuEventRecord_ptsz(CUevent, CUstream) -> CUresult;
    LIBCUDA fn cuEventQuery(CUevent) -> CUresult;
    LIBCUDA fn cuEventElapsedTime(*mut f32, CUevent, CUevent) -> CUresult;
    LIBCUDA fn cuEventElapsedTime_v2(*mut f32, CUevent, CUevent) -> CUresult;
    LIBCUDA fn cuThreadExchangeStreamCaptureMode(*mut CUstreamCaptureMode_enum) -> CUresult;
    LIBNVML fn nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
}

/// The calling thread's current context (null if none).
pub fn current_ctx() -> CUcontext {
    let mut c: CUcontext = std::ptr::null_mut();
    if let Some(f) = cuCtxGetCurrent()
        && unsafe { f(&mut c) } != CUDA_SUCCESS
    {
        c = std::ptr::null_mut();
    }
    c
}

/// CUDA ordinal of the current context.
pub fn current_ordinal() -> Option<CUdevice> {
    let f = cuCtxGetDevice()?;
    let mut d: CUdevice = 0;
    (unsafe { f(&mut d) } == CUDA_SUCCESS).then_some(d)
}

/// NVML handle of device `index` (initialising NVML; NVML refcounts its init).
pub fn nvml_handle(index: usize) -> Option<nvmlDevice_t> {
    let init = nvmlInit_v2()?;
    if unsafe { init() } != NVML_SUCCESS {
        return None;
    }
    let f = nvmlDeviceGetHandleByIndex_v2()?;
    let mut h: nvmlDevice_t = std::ptr::null_mut();
    (unsafe { f(index as c_uint, &mut h) } == NVML_SUCCESS).then_some(h)
}

/// (pid, used bytes) of the compute processes NVML lists on a device.
pub fn nvml_processes(h: nvmlDevice_t) -> Option<Vec<(u32, u64)>> {
    let f = nvmlDeviceGetComputeRunningProcesses_v3().or_else(nvmlDeviceGetComputeRunningProcesses_v2)?;
    let mut cap: c_uint = 64;
    for _ in 0..4 {
        let mut buf: Vec<nvmlProcessInfo_t> = vec![unsafe { std::mem::zeroed() }; cap as usize];
        let mut n = cap;
        match unsafe { f(h, &mut n, buf.as_mut_ptr()) } {
            NVML_SUCCESS => {
                buf.truncate(n as usize);
                return Some(buf.iter().map(|p| (p.pid, p.usedGpuMemory)).collect());
            }
            NVML_ERROR_INSUFFICIENT_SIZE => cap = n.max(cap * 2) + 8,
            _ => return None,
        }
    }
    None
}
