//! Values of the limiter's words in the region extension ([`DeviceLimiterState`], whose fields
//! document each word).

use crate::region::DeviceLimiterState;

pub const SENSOR_NONE: u64 = 0;
/// Shares measured by the processes themselves (timing events), NVML per-process unavailable.
pub const SENSOR_SELF: u64 = 1;
/// Shares measured by NVML per-process utilisation over the container's host PIDs.
pub const SENSOR_NVML: u64 = 2;

/// A zeroed state, for tests and for callers without a region (process-local fallback).
pub fn new_state() -> Box<DeviceLimiterState> {
    // SAFETY: DeviceLimiterState is a repr(C) struct of atomics; all-zero is a valid value.
    unsafe { Box::new(core::mem::zeroed()) }
}
