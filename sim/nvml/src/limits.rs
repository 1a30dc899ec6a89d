//! `nvmlDeviceGetMemoryLimits_v1` (NVML 13.x, drivers r615+): the memory limits the driver
//! enforces for a cgroup. The simulated driver models one hard limit for every cgroup,
//! `VGPU_SIM_CGROUP_LIMIT_MIB` (unset: no limits are set, `NVML_ERROR_NOT_FOUND`), which the
//! simulated CUDA driver enforces per process (its allocations fail beyond it).

use crate::{NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND, dev_index, nvmlDevice_t, nvmlReturn_t, put, ret};
use std::ffi::c_char;

/// `nvmlGetMemoryLimits_v1_t`.
#[repr(C)]
pub struct nvmlGetMemoryLimits_v1_t {
    pub name_space: *const c_char,
    pub soft_limit: u64,
    pub hard_limit: u64,
    pub current_used: u64,
}

fn hard_limit() -> Option<u64> {
    std::env::var("VGPU_SIM_CGROUP_LIMIT_MIB").ok()?.trim().parse::<u64>().ok().map(|m| m << 20)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryLimits_v1(
    h: nvmlDevice_t,
    l: *mut nvmlGetMemoryLimits_v1_t,
) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, s)| {
        if l.is_null() || unsafe { (*l).name_space.is_null() } {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let hard = hard_limit().ok_or(NVML_ERROR_NOT_FOUND)?;
        let me = std::process::id();
        let used = s.processes().iter().filter(|p| p.pid == me).map(|p| p.used[d]).sum();
        let name_space = unsafe { (*l).name_space };
        unsafe { put(l, nvmlGetMemoryLimits_v1_t { name_space, soft_limit: 0, hard_limit: hard, current_used: used }) }
    }))
}
