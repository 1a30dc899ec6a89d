//! A driver that enforces a memory limit itself (r615+ with NVML 13's per-cgroup limits):
//! `VGPU_SIM_CGROUP_LIMIT_MIB` is the hard limit of the process's cgroup (the simulated NVML
//! reports it), applied here per process to its allocations. Unset (the default): no limit.

use crate::{my_slot, state};
use std::sync::OnceLock;

fn limit() -> Option<u64> {
    static L: OnceLock<Option<u64>> = OnceLock::new();
    *L.get_or_init(|| std::env::var("VGPU_SIM_CGROUP_LIMIT_MIB").ok()?.trim().parse::<u64>().ok().map(|m| m << 20))
}

/// Charging `bytes` more on `dev` would take this process over its cgroup's hard limit.
pub(crate) fn over_limit(dev: usize, bytes: u64) -> bool {
    limit().is_some_and(|l| state().slot_used(my_slot(), dev).saturating_add(bytes) > l)
}
