//! The compute (SM-utilisation) limiter's controller logic, free of CUDA calls so it can be
//! unit-tested. The shim (`src/compute/`) feeds it clocks, launches, timing samples and NVML data.
//! Design and reasoning: docs/design.md, "Compute limiter".
//!
//! * [`bucket`]: the container-wide token bucket of device time per device (region extension),
//!   refilled lazily at L × wall time, admission with debt.
//! * [`burst`]: the effective rate in [limit, ceiling] (the limit as a guarantee, idle time
//!   shared up to `CUDA_DEVICE_SM_CEILING`).
//! * [`cost`]: per-signature cost prediction from sparse timing samples, reconciliation of
//!   guessed charges.
//! * [`lowcost`]: the container's lowest measured cost per launch shape, shared by its processes
//!   (a cap on estimates a process has not confirmed yet).
//! * [`correction`]: the slow outer loop correcting this process's charges from NVML.
//! * [`feedback`]: HAMi's `utilization_switch` / `recent_kernel` / `last_kernel_time` and the
//!   `GPU_CORE_UTILIZATION_POLICY` rules.
//! * [`nvmlspan`]: one NVML per-process answer weighed once into a [`nvmlspan::Span`] (busy time
//!   per PID), read by the correction and by the burst step; shares derived from it.
//! * [`pidmap`]: host-PID resolution without extra contexts or serialisation.
//! * [`words`]: named access to the per-device words of the region extension.

pub mod bucket;
pub mod burst;
pub mod correction;
pub mod cost;
pub mod feedback;
pub mod lowcost;
pub mod nvmlspan;
pub mod pidmap;
pub mod words;

#[cfg(test)]
mod vsim;

/// Parts per million.
pub const PPM: u64 = 1_000_000;

/// Refill rate for a limit in percent; `None` = unlimited (0 or ≥ 100, docs/hami-contract.md §1.3).
pub fn limit_to_ppm(pct: u64) -> Option<u64> {
    if pct == 0 || pct >= 100 { None } else { Some(pct * 10_000) }
}

/// Is this limit (percent) a real limit?
pub fn is_limited(pct: u64) -> bool {
    limit_to_ppm(pct).is_some()
}
