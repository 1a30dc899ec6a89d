//! Thin wrappers over the real driver / NVML calls the compute limiter makes (the functions
//! themselves come from `crate::driver`). The application's variant rules apply: a `_ptsz` launch
//! is followed by `_ptsz` event records and capture queries on the same stream handle.

#![allow(non_snake_case)]

use crate::ffi::*;
use std::ffi::c_uint;

// The driver/NVML functions the limiter calls live in the one list of `crate::driver`.
pub use crate::driver::*;

/// Capture state of `stream` through the variant matching the launch. `true` = the launch must
/// be passed through untouched (capturing, invalidated, or the legacy stream is unusable because
/// another stream captures: `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`).
pub fn capturing(stream: CUstream, ptsz: bool) -> bool {
    match capture_status(stream, ptsz) {
        None => false,
        Some(Ok(st)) => st != CU_STREAM_CAPTURE_STATUS_NONE,
        Some(Err(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) => true,
        // Unknown state (bad handle: the launch will fail anyway): do not instrument.
        Some(Err(_)) => true,
    }
}

/// `cuStreamIsCapturing[_ptsz]` of `stream` (`None`: the driver has no such entry point).
pub fn capture_status(stream: CUstream, ptsz: bool) -> Option<Result<CUstreamCaptureStatus_enum, CUresult>> {
    let f = if ptsz { cuStreamIsCapturing_ptsz().or_else(cuStreamIsCapturing) } else { cuStreamIsCapturing() }?;
    let mut st: CUstreamCaptureStatus_enum = CU_STREAM_CAPTURE_STATUS_NONE;
    Some(match unsafe { f(stream, &mut st) } {
        CUDA_SUCCESS => Ok(st),
        e => Err(e),
    })
}

/// `Some(graph)` while `stream` is actively capturing, into `graph` (null when the driver cannot
/// say which); `None` when it is not, or its state is unknown.
pub fn capture_graph(stream: CUstream, ptsz: bool) -> Option<CUgraph> {
    let info = if ptsz {
        cuStreamGetCaptureInfo_v2_ptsz().or_else(cuStreamGetCaptureInfo_v2)
    } else {
        cuStreamGetCaptureInfo_v2()
    };
    if let Some(f) = info {
        let mut st: CUstreamCaptureStatus_enum = CU_STREAM_CAPTURE_STATUS_NONE;
        let mut g: CUgraph = std::ptr::null_mut();
        let (null_id, null_deps, null_n) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        let r = unsafe { f(stream, &mut st, null_id, &mut g, null_deps, null_n) };
        return (r == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE).then_some(g);
    }
    matches!(capture_status(stream, ptsz), Some(Ok(CU_STREAM_CAPTURE_STATUS_ACTIVE))).then_some(std::ptr::null_mut())
}

/// Has `stream` finished all its work? (`false` when unknown.)
pub fn stream_idle(stream: CUstream, ptsz: bool) -> bool {
    let f = if ptsz { cuStreamQuery_ptsz().or_else(cuStreamQuery) } else { cuStreamQuery() };
    f.is_some_and(|f| unsafe { f(stream) } == CUDA_SUCCESS)
}

pub fn event_record(ev: CUevent, stream: CUstream, ptsz: bool) -> CUresult {
    let f = if ptsz { cuEventRecord_ptsz().or_else(cuEventRecord) } else { cuEventRecord() };
    match f {
        Some(f) => unsafe { f(ev, stream) },
        None => CUDA_ERROR_NOT_SUPPORTED,
    }
}

/// Elapsed ns between two completed events (`Err(NOT_READY)` while pending).
pub fn elapsed_ns(a: CUevent, b: CUevent) -> Result<u64, CUresult> {
    let f = cuEventElapsedTime_v2().or_else(cuEventElapsedTime).ok_or(CUDA_ERROR_NOT_SUPPORTED)?;
    let mut ms: f32 = 0.0;
    match unsafe { f(&mut ms, a, b) } {
        CUDA_SUCCESS => Ok(((ms as f64).max(0.0) * 1e6) as u64),
        e => Err(e),
    }
}

pub fn event_query(ev: CUevent) -> CUresult {
    match cuEventQuery() {
        Some(f) => unsafe { f(ev) },
        None => CUDA_ERROR_NOT_SUPPORTED,
    }
}

pub fn event_create() -> Option<CUevent> {
    let f = cuEventCreate()?;
    let mut ev: CUevent = std::ptr::null_mut();
    (unsafe { f(&mut ev, CU_EVENT_DEFAULT) } == CUDA_SUCCESS && !ev.is_null()).then_some(ev)
}

pub fn event_destroy(ev: CUevent) {
    if let Some(f) = cuEventDestroy_v2() {
        unsafe { f(ev) };
    }
}

/// Puts the calling thread in RELAXED capture mode (the watcher: its event queries must never
/// conflict with an application thread's GLOBAL-mode capture).
pub fn relax_capture_mode() {
    if let Some(f) = cuThreadExchangeStreamCaptureMode() {
        let mut m: CUstreamCaptureMode_enum = CU_STREAM_CAPTURE_MODE_RELAXED;
        unsafe { f(&mut m) };
    }
}

/// Context of a stream (non-null handles only).
pub fn stream_ctx(stream: CUstream, ptsz: bool) -> Option<CUcontext> {
    let f = if ptsz { cuStreamGetCtx_ptsz().or_else(cuStreamGetCtx) } else { cuStreamGetCtx() }?;
    let mut c: CUcontext = std::ptr::null_mut();
    (unsafe { f(stream, &mut c) } == CUDA_SUCCESS && !c.is_null()).then_some(c)
}

/// Outcome of a per-process utilisation query: the device's one NVML sampler, read by the
/// correction (`watcher.rs`) and the burst step (`burst.rs`).
pub enum Util {
    /// The answer's samples newer than the `last_seen` passed, weighed once into busy time per
    /// PID over the span they cover (`limiter::nvmlspan`).
    Span(vgpu_core::limiter::nvmlspan::Span),
    /// Samples came back, none newer than `last_seen`: the answer covers nothing new.
    NothingNew,
    /// No process had non-zero utilisation since `last_seen` (NVML's `NOT_FOUND`).
    NoneBusy,
    /// Per-process utilisation is not available (MIG, vGPU guest, old GPU, simulator knob).
    NotSupported,
    Error(nvmlReturn_t),
}

/// Per-process utilisation since `last_seen_us` (wall µs), weighed into one span.
pub fn nvml_span(h: nvmlDevice_t, last_seen_us: u64) -> Util {
    let Some(f) = nvmlDeviceGetProcessUtilization() else { return Util::NotSupported };
    let mut cap: c_uint = 64;
    for _ in 0..4 {
        let mut buf: Vec<nvmlProcessUtilizationSample_t> = vec![unsafe { std::mem::zeroed() }; cap as usize];
        let mut n = cap;
        match unsafe { f(h, buf.as_mut_ptr(), &mut n, last_seen_us) } {
            NVML_SUCCESS => {
                buf.truncate(n as usize);
                let samples: Vec<_> = buf.iter().map(|s| (s.pid, s.timeStamp, s.smUtil)).collect();
                return vgpu_core::limiter::nvmlspan::Span::weigh(&samples, last_seen_us)
                    .map_or(Util::NothingNew, Util::Span);
            }
            NVML_ERROR_NOT_FOUND => return Util::NoneBusy,
            NVML_ERROR_NOT_SUPPORTED => return Util::NotSupported,
            NVML_ERROR_INSUFFICIENT_SIZE => cap = n.max(cap * 2) + 8,
            e => return Util::Error(e),
        }
    }
    Util::Error(NVML_ERROR_INSUFFICIENT_SIZE)
}
