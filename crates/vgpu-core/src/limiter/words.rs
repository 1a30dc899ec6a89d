//! Named access to the words of [`DeviceLimiterState`] (the per-device block of the region's
//! private extension, shared by every process of the container).
//!
//! `region.rs` names the fields (requested in target/limiter-requests.txt); the limiter reaches
//! them through these accessors so the meaning of each word is documented in one place.
//!
//! | word | name | meaning |
//! |---:|---|---|
//! | 0 | `balance_ns` | token balance, ns of device time (negative = debt) |
//! | 1 | `last_refill_ns` | CLOCK_MONOTONIC of the last lazy refill (0 = never) |
//! | 2 | `generation` | bumped when rate or cap change |
//! | 3 | `rate_ppm` | refill rate in millionths of wall time (0 = unlimited / unset) |
//! | 4 | `cap_ns` | burst cap of the balance |
//! | 5 | `charged_ns` | cumulative device ns charged (metric) |
//! | 6 | `throttled_ns` | cumulative wall ns launches waited for tokens (metric) |
//! | 7 | `throttled_launches` | launches that had to wait (metric) |
//! | 8 | `blocked_ns` | cumulative wall ns launches waited while the monitor blocked |
//! | 9 | `share_ppm` | last measured container share of the device |
//! | 10 | `share_stamp_ns` | CLOCK_MONOTONIC of `share_ppm` (0 = none yet) |
//! | 11 | `sensor` | [`SENSOR_NONE`], [`SENSOR_SELF`], [`SENSOR_NVML`] |
//! | 12 | `correction_ppm` | last outer-loop correction × 1e6 (0 = none yet) |
//! | 13 | `unresolved_pids` | processes of the container without a host PID that hold memory on the device |
//! | 14 | `first_gate` | CLOCK_MONOTONIC deadline of the process whose launch of unknown cost is in flight (0 = none; [`super::cost::claim_first`]) |
//! | 15-18 | `low_costs` | the container's lowest measured cost per launch shape, 4 entries (tag 24 bits << 40 \| ns; [`super::lowcost`]) |
//! | 19 | `burst_seen_us` | burst controller: NVML per-process samples used up to (wall µs) |
//! | 20 | `burst_signals` | burst controller: smoothed others' share, newcomer hold, device busy (3 × 21 bits), bit 63: the last span did not tell our work from others' |
//! | 21 | `burst_stamp_us` | burst controller: wall µs of its last step (CAS = leadership) |
//! | 22 | `burst_rate_ppm` | burst controller: effective rate in [limit, ceiling] (bits 0-19, 0 = the limit; the rest zero) |
//! | 23 | `sm_ceiling` | burst ceiling, percent (0 = unset = the limit); operators may write it |

use crate::region::DeviceLimiterState;
use core::sync::atomic::{AtomicI64, AtomicU64};

pub const SENSOR_NONE: u64 = 0;
/// Shares measured by the processes themselves (timing events), NVML per-process unavailable.
pub const SENSOR_SELF: u64 = 1;
/// Shares measured by NVML per-process utilisation over the container's host PIDs.
pub const SENSOR_NVML: u64 = 2;

/// Typed view of one device's limiter words.
#[derive(Clone, Copy)]
pub struct Words<'a>(pub &'a DeviceLimiterState);

macro_rules! word {
    ($name:ident) => {
        #[inline]
        pub fn $name(&self) -> &'a AtomicU64 {
            &self.0.$name
        }
    };
}

impl<'a> Words<'a> {
    #[inline]
    pub fn balance_ns(&self) -> &'a AtomicI64 {
        &self.0.balance_ns
    }
    #[inline]
    pub fn last_refill_ns(&self) -> &'a AtomicU64 {
        &self.0.last_refill_ns
    }
    #[inline]
    pub fn generation(&self) -> &'a AtomicU64 {
        &self.0.generation
    }
    word!(rate_ppm);
    word!(cap_ns);
    word!(charged_ns);
    word!(throttled_ns);
    word!(throttled_launches);
    word!(blocked_ns);
    word!(share_ppm);
    word!(share_stamp_ns);
    word!(sensor);
    word!(correction_ppm);
    word!(unresolved_pids);
    word!(burst_seen_us);
    word!(burst_signals);
    word!(burst_stamp_us);
    word!(burst_rate_ppm);
    word!(sm_ceiling);
    /// Word 14 (the first of the block's reserved words).
    #[inline]
    pub fn first_gate(&self) -> &'a AtomicU64 {
        &self.0.reserved[0]
    }
    /// Words 15-18: the container's lowest costs per launch shape.
    #[inline]
    pub fn low_costs(&self) -> [&'a AtomicU64; super::cost::lowcost::ENTRIES] {
        let r = &self.0.reserved;
        [&r[1], &r[2], &r[3], &r[4]]
    }
}

/// A zeroed state, for tests and for callers without a region (process-local fallback).
pub fn new_state() -> Box<DeviceLimiterState> {
    // SAFETY: DeviceLimiterState is a repr(C) struct of atomics; all-zero is a valid value.
    unsafe { Box::new(core::mem::zeroed()) }
}
