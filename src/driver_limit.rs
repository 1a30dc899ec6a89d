//! A memory limit the driver enforces itself (`vgpu_core::driverlimit`): after `cuInit`, NVML 13's
//! `nvmlDeviceGetMemoryLimits_v1` is asked, once per device, for the limits of our cgroup. Where it
//! reports a hard limit the shim enforces no limit of its own on that device (one info line says
//! so) and its views report the driver's; everything is counted as always.
//!
//! The function is newer than the NVML headers the shim's bindings come from, so its argument
//! structure (`nvmlGetMemoryLimits_v1_t`, NVML 13.x `nvml.h`) is declared here.

use crate::driver;
use crate::ffi::*;
use std::ffi::{CString, c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use vgpu_core::driverlimit::{self, DriverLimits};
use vgpu_core::region::MAX_DEVICES;

/// `nvmlGetMemoryLimits_v1_t`.
#[repr(C)]
struct GetMemoryLimitsV1 {
    name_space: *const c_char,
    soft_limit: u64,
    hard_limit: u64,
    current_used: u64,
}

type GetMemoryLimitsFn = unsafe extern "C" fn(nvmlDevice_t, *mut GetMemoryLimitsV1) -> nvmlReturn_t;

/// Per region device: the driver's hard limit for our cgroup (0: none found).
static HARD: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
static PROBED: AtomicBool = AtomicBool::new(false);

fn driver_limits(dev: usize) -> Option<DriverLimits> {
    let h = HARD.get(dev)?.load(Ordering::Relaxed);
    (h != 0).then_some(DriverLimits { soft: 0, hard: h })
}

/// The limit allocations on region device `dev` are refused against, given ours (`ours`).
pub fn enforced(dev: usize, ours: u64) -> u64 {
    driverlimit::plan(ours, driver_limits(dev)).enforced
}

/// The limit the views of region device `dev` report, given ours.
pub fn shown(dev: usize, ours: u64) -> u64 {
    driverlimit::plan(ours, driver_limits(dev)).shown
}

/// Ask the driver (once per process, after `cuInit`); `configured` is our limit of a region device.
pub fn probe(configured: impl Fn(usize) -> u64) {
    if PROBED.swap(true, Ordering::AcqRel) {
        return;
    }
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = driver::resolve(&SLOT, &crate::dl::LIBNVML, c"nvmlDeviceGetMemoryLimits_v1");
    if p.is_null() {
        return; // NVML before 13.x: the driver enforces no memory limit of its own
    }
    // SAFETY: the NVML 13.x symbol of this name has exactly this signature (nvml.h).
    let get = unsafe { std::mem::transmute::<*mut c_void, GetMemoryLimitsFn>(p) };
    let Some(ns) = std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|s| driverlimit::cgroup_namespace(&s))
    else {
        return;
    };
    let Ok(ns_c) = CString::new(ns.clone()) else { return };
    for (d, hard) in HARD.iter().enumerate() {
        let Some(h) = driver::nvml_handle(d) else { break };
        let mut l = GetMemoryLimitsV1 { name_space: ns_c.as_ptr(), soft_limit: 0, hard_limit: 0, current_used: 0 };
        // SAFETY: a handle NVML gave us and a structure that outlives the call.
        if unsafe { get(h, &mut l) } != NVML_SUCCESS {
            continue; // no limits for this cgroup (NOT_FOUND), or not supported
        }
        let ours = configured(d);
        let plan = driverlimit::plan(ours, Some(DriverLimits { soft: l.soft_limit, hard: l.hard_limit }));
        if plan.by_driver {
            hard.store(l.hard_limit, Ordering::Relaxed);
            crate::info!(
                "device {d}: the driver enforces a hard memory limit of {} bytes for cgroup {ns}; it is reported in the views and no second limit is enforced here (configured: {ours})",
                l.hard_limit
            );
        }
    }
}
