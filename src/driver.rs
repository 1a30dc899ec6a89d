//! Typed access to real driver and NVML functions that the shim calls but does not hook.
//! One list of names; each entry is a lazily resolved, cached pointer typed by `cuda_types::pfn`.
//! Below it, the few small queries several modules make through them (current context and device,
//! NVML handles and processes).

#![allow(non_snake_case)]

use crate::dl::{LIBCUDA, LIBNVML, RealLib};
use crate::ffi::*;
use std::ffi::{CStr, c_uint, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

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

/// One line per function: `LIBCUDA fn <symbol>;` or `LIBNVML fn <symbol>;`. Each becomes
/// `fn <symbol>() -> Option<cuda_types::pfn::<symbol>>`, typed by the bindgen-generated type of the
/// symbol's prototype in `include/` (checked against NVIDIA's headers by the ABI test), so no
/// signature is written here; a symbol without a prototype does not compile.
macro_rules! called {
    ($( $lib:ident fn $name:ident ; )*) => {
        $(
            pub fn $name() -> Option<cuda_types::pfn::$name> {
                static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
                // A constant: no strlen on every call (these run on the allocation hot path).
                const NAME: &CStr = match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(c) => c,
                    Err(_) => panic!("bad symbol name"),
                };
                let p = resolve(&SLOT, &$lib, NAME);
                // SAFETY: `p` is the address of the symbol `$name` in the real library (not null);
                // `cuda_types::pfn::$name` is the type generated from that symbol's prototype.
                if p.is_null() { None } else { Some(unsafe { std::mem::transmute::<*mut c_void, cuda_types::pfn::$name>(p) }) }
            }
        )*
    };
}

called! {
    LIBCUDA fn cuDriverGetVersion;
    LIBCUDA fn cuDeviceGetCount;
    LIBCUDA fn cuDeviceGet;
    LIBCUDA fn cuDeviceGetUuid_v2;
    LIBCUDA fn cuDeviceGetUuid;
    LIBCUDA fn cuCtxGetCurrent;
    LIBCUDA fn cuCtxGetDevice;
    LIBCUDA fn cuCtxPushCurrent_v2;
    LIBCUDA fn cuCtxPopCurrent_v2;
    LIBCUDA fn cuMemAdvise;
    LIBCUDA fn cuMemPoolGetAttribute;
    LIBCUDA fn cuStreamIsCapturing;
    LIBCUDA fn cuStreamIsCapturing_ptsz;
    LIBCUDA fn cuStreamGetCaptureInfo_v2;
    LIBCUDA fn cuStreamGetCaptureInfo_v2_ptsz;
    LIBNVML fn nvmlInit_v2;
    LIBNVML fn nvmlDeviceGetCount_v2;
    LIBNVML fn nvmlDeviceGetHandleByIndex_v2;
    LIBNVML fn nvmlDeviceGetIndex;
    LIBNVML fn nvmlDeviceGetUUID;
    LIBNVML fn nvmlDeviceGetComputeRunningProcesses_v3;
    LIBNVML fn nvmlDeviceGetProcessUtilization;
    LIBNVML fn nvmlDeviceGetUtilizationRates;
    LIBNVML fn nvmlDeviceGetMemoryInfo;
    LIBCUDA fn cuStreamGetCtx;
    LIBCUDA fn cuStreamGetCtx_ptsz;
    LIBCUDA fn cuStreamQuery;
    LIBCUDA fn cuStreamQuery_ptsz;
    LIBCUDA fn cuEventCreate;
    LIBCUDA fn cuEventDestroy_v2;
    LIBCUDA fn cuEventRecord;
    LIBCUDA fn cuEventRecord_ptsz;
    LIBCUDA fn cuEventQuery;
    LIBCUDA fn cuEventElapsedTime;
    LIBCUDA fn cuEventElapsedTime_v2;
    LIBCUDA fn cuThreadExchangeStreamCaptureMode;
    LIBCUDA fn cuDeviceGetDefaultMemPool;
    LIBCUDA fn cuDeviceGetMemPool;
    LIBCUDA fn cuCtxGetLimit;
    LIBCUDA fn cuDevicePrimaryCtxGetState;
    LIBCUDA fn cuDeviceGetGraphMemAttribute;
    LIBNVML fn nvmlDeviceGetComputeRunningProcesses_v2;
    LIBCUDA fn cuCtxFromGreenCtx;
    LIBCUDA fn cuCheckpointProcessGetState;
    // Hooked symbols the shim also calls itself (undoing a charge it could not book, unloading
    // what it measured, the host-PID probe): the driver's function, never our hook.
    LIBCUDA fn cuDevicePrimaryCtxRetain;
    LIBCUDA fn cuDevicePrimaryCtxRelease_v2;
    LIBCUDA fn cuCtxDestroy_v2;
    LIBCUDA fn cuGreenCtxDestroy;
    LIBCUDA fn cuMemAlloc_v2;
    LIBCUDA fn cuMemAllocManaged;
    LIBCUDA fn cuMemFree_v2;
    LIBCUDA fn cuModuleUnload;
    LIBCUDA fn cuLibraryUnload;
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

/// Pid of the process in which NVML was initialised successfully (by the application through
/// our hook, or by the shim itself); 0 = never. A forked child has another pid.
static NVML_UP_IN: AtomicU32 = AtomicU32::new(0);

/// Records that NVML answered an init in this process.
pub fn note_nvml_up() {
    NVML_UP_IN.store(std::process::id(), Ordering::Relaxed);
}

/// Whether NVML has been initialised in this process (nothing is loaded or initialised here).
pub fn nvml_up() -> bool {
    let pid = NVML_UP_IN.load(Ordering::Relaxed);
    pid != 0 && pid == std::process::id()
}

/// Initialises NVML (NVML refcounts its init).
pub fn nvml_init() -> bool {
    let Some(init) = nvmlInit_v2() else { return false };
    // SAFETY: NVML's own init, no arguments.
    let ok = unsafe { init() } == NVML_SUCCESS;
    if ok {
        note_nvml_up();
    }
    ok
}

/// NVML handle of device `index` (initialising NVML; NVML refcounts its init).
pub fn nvml_handle(index: usize) -> Option<nvmlDevice_t> {
    if !nvml_init() {
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

/// Runs `f` with the calling thread in RELAXED capture mode, then restores the mode it had (an
/// application thread: a driver call of ours while another thread captures in GLOBAL mode would
/// be refused and invalidate that capture).
pub fn with_relaxed_capture<R>(f: impl FnOnce() -> R) -> R {
    let exchange = cuThreadExchangeStreamCaptureMode();
    let mut mode: CUstreamCaptureMode_enum = CU_STREAM_CAPTURE_MODE_RELAXED;
    if let Some(x) = exchange {
        // SAFETY: `mode` is a valid in/out pointer for the call; the driver swaps this thread's mode.
        unsafe { x(&mut mode) };
    }
    let r = f();
    if let Some(x) = exchange {
        // SAFETY: as above; `mode` now holds the mode the thread had, which this puts back.
        unsafe { x(&mut mode) };
    }
    r
}

/// Runs `f` with `ctx` current on this thread (push/pop), for work on another context's stream.
pub fn with_ctx<R>(ctx: CUcontext, f: impl FnOnce() -> R) -> Option<R> {
    let push = cuCtxPushCurrent_v2()?;
    let pop = cuCtxPopCurrent_v2()?;
    // SAFETY: `ctx` is a context handle of the caller's; the driver validates it.
    if unsafe { push(ctx) } != CUDA_SUCCESS {
        return None;
    }
    let r = f();
    let mut old: CUcontext = std::ptr::null_mut();
    // SAFETY: `old` is a valid out-pointer; pops the context pushed above.
    unsafe { pop(&mut old) };
    Some(r)
}
