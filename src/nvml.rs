//! NVML views: what `nvidia-smi` and pynvml see inside the container. With a memory limit on a
//! device, memory info shows the container's slice (total = min(limit, physical), used = the
//! container's usage from the region) and the process list shows the container's processes with
//! their accounted usage, PIDs as seen inside the container. Without a limit or region: the
//! driver's answer unchanged.
//!
//! # Safety
//!
//! The hook implementations follow the `hooks` contract (`real` is NVML's function of the same
//! symbol, pointer arguments are the caller's and go to `real` unchanged, out-pointers are
//! touched only after a null check and read only after `NVML_SUCCESS`).

use crate::driver;
use crate::ffi::*;
use crate::state::{self, State};
use cuda_types::pfn;
use std::ffi::c_uint;
use vgpu_core::region::MAX_DEVICES;
use vgpu_core::views::{self, NvmlListAnswer, NvmlMemory, NvmlMemoryV2};

/// NVML pre/post-init of the contract: attach the region, publish `device_num` and `uuids`.
pub unsafe fn init(real: unsafe extern "C" fn() -> nvmlReturn_t) -> nvmlReturn_t {
    after_init(unsafe { real() })
}

pub unsafe fn init_with_flags(real: pfn::nvmlInitWithFlags, flags: c_uint) -> nvmlReturn_t {
    after_init(unsafe { real(flags) })
}

fn after_init(r: nvmlReturn_t) -> nvmlReturn_t {
    if r == NVML_SUCCESS {
        driver::note_nvml_up();
        state::get().publish_nvml_devices();
    }
    r
}

/// Region index of an NVML handle: the region is indexed by in-container NVML index.
fn region_dev(device: nvmlDevice_t) -> Option<usize> {
    let f = driver::nvmlDeviceGetIndex()?;
    let mut i: c_uint = 0;
    // SAFETY: NVML's own function with the caller's handle and a pointer to a local.
    (unsafe { f(device, &mut i) } == NVML_SUCCESS && (i as usize) < MAX_DEVICES).then_some(i as usize)
}

/// After a successful real memory query: (limit, container usage) of the device, if it maps.
fn limit_and_usage(device: nvmlDevice_t) -> Option<(u64, u64)> {
    let st = state::get();
    let dev = region_dev(device)?;
    Some((st.view_limit(dev), st.ledger.usage(dev)))
}

pub unsafe fn memory_info(
    real: pfn::nvmlDeviceGetMemoryInfo,
    device: nvmlDevice_t,
    m: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    let r = unsafe { real(device, m) };
    if r != NVML_SUCCESS || m.is_null() {
        return r;
    }
    let Some((limit, used)) = limit_and_usage(device) else { return r };
    // SAFETY: non-null, and filled by NVML (success): the caller's `nvmlMemory_t`.
    let mm = unsafe { &mut *m };
    let v = views::nvml_memory(limit, NvmlMemory { total: mm.total, free: mm.free, used: mm.used }, used);
    (mm.total, mm.free, mm.used) = (v.total, v.free, v.used);
    r
}

pub unsafe fn memory_info_v2(
    real: pfn::nvmlDeviceGetMemoryInfo_v2,
    device: nvmlDevice_t,
    m: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    let r = unsafe { real(device, m) };
    if r != NVML_SUCCESS || m.is_null() {
        return r;
    }
    let Some((limit, used)) = limit_and_usage(device) else { return r };
    // SAFETY: non-null, and filled by NVML (success): the caller's `nvmlMemory_v2_t`.
    let mm = unsafe { &mut *m };
    let phys = NvmlMemoryV2 { total: mm.total, reserved: mm.reserved, free: mm.free, used: mm.used };
    let v = views::nvml_memory_v2(limit, phys, used);
    (mm.total, mm.reserved, mm.free, mm.used) = (v.total, v.reserved, v.free, v.used);
    r
}

/// (container pid, accounted bytes) of the container's processes with usage on `dev`.
fn container_processes(st: &State, dev: usize) -> Option<Vec<(u32, u64)>> {
    let region = st.region?;
    let out = vgpu_core::slots::live(region.shared())
        .filter(|s| s.pid > 0)
        .map(|s| (s.pid as u32, s.usage(dev).total))
        .filter(|&(_, used)| used > 0)
        .collect();
    Some(out)
}

/// NVML's two-call protocol: report the count; fill only if the caller's array is big enough.
///
/// # Safety
/// `count` is non-null and valid; `infos` is null or, as NVML's API requires of the caller, an
/// array of at least `*count` (on entry) writable entries.
unsafe fn fill<T>(
    count: *mut c_uint,
    infos: *mut T,
    procs: &[(u32, u64)],
    make: impl Fn(u32, u64) -> T,
) -> nvmlReturn_t {
    // SAFETY: `count` is valid (function contract).
    let cap = unsafe { *count } as usize;
    // SAFETY: as above.
    unsafe { *count = procs.len() as c_uint };
    match views::nvml_list_answer(cap, procs.len(), infos.is_null()) {
        NvmlListAnswer::InsufficientSize => return NVML_ERROR_INSUFFICIENT_SIZE,
        NvmlListAnswer::InvalidArgument => return NVML_ERROR_INVALID_ARGUMENT,
        NvmlListAnswer::Fill => {}
    }
    for (i, &(pid, used)) in procs.iter().enumerate() {
        // SAFETY: `infos` is non-null here (checked by the answer) and `i < procs.len() <= cap`,
        // inside the caller's array of `cap` entries.
        unsafe { infos.add(i).write(make(pid, used)) };
    }
    NVML_SUCCESS
}

/// Replace the driver's list (host PIDs of every tenant) with the container's own processes,
/// when a limit makes this a virtual device. Otherwise forward.
///
/// # Safety
/// `count` and `infos` are the caller's arguments of a `nvmlDeviceGetComputeRunningProcesses*`
/// call (the contract of [`fill`] once `count` is non-null).
unsafe fn running<T>(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut T,
    forward: impl FnOnce() -> nvmlReturn_t,
    make: impl Fn(u32, u64) -> T,
) -> nvmlReturn_t {
    if count.is_null() {
        return forward();
    }
    let st = state::get();
    let Some(dev) = region_dev(device) else { return forward() };
    if st.view_limit(dev) == 0 {
        return forward();
    }
    match container_processes(st, dev) {
        // SAFETY: `count` is non-null (checked above); both are the caller's NVML arguments.
        Some(procs) => unsafe { fill(count, infos, &procs, make) },
        None => forward(),
    }
}

pub unsafe fn running_processes_v1(
    real: pfn::nvmlDeviceGetComputeRunningProcesses,
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    unsafe {
        running(
            device,
            count,
            infos,
            || real(device, count, infos),
            |pid, used| nvmlProcessInfo_v1_t { pid, usedGpuMemory: used },
        )
    }
}

fn info_v2(pid: u32, used: u64) -> nvmlProcessInfo_t {
    nvmlProcessInfo_t { pid, usedGpuMemory: used, gpuInstanceId: u32::MAX, computeInstanceId: u32::MAX }
}

pub unsafe fn running_processes_v2(
    real: pfn::nvmlDeviceGetComputeRunningProcesses_v2,
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    unsafe { running(device, count, infos, || real(device, count, infos), info_v2) }
}

pub unsafe fn running_processes_v3(
    real: pfn::nvmlDeviceGetComputeRunningProcesses_v3,
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    unsafe { running(device, count, infos, || real(device, count, infos), info_v2) }
}
