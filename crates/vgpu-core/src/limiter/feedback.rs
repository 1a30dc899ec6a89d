//! HAMi's control words (docs/hami-contract.md §3.2, §4.2-§4.3) and the core-utilisation policy.
//!
//! * `utilization_switch` (monitor-owned): 1 = enforce the SM limit, 0 = don't, under the default
//!   policy. `GPU_CORE_UTILIZATION_POLICY=force` enforces regardless, `disable` never enforces.
//! * `recent_kernel`: the library marks the container active by writing 2 at launches (only when
//!   it is not 2 already, so the shared line is not dirtied on every launch, and never over a
//!   negative value); the monitor decrements it every 5 s and sets −1 to block a lower-priority
//!   container, 0 to release it. While it is negative launches wait (polled every
//!   [`BLOCK_POLL_NS`]). The library never resets a negative value itself.
//! * `last_kernel_time` (Unix seconds): raised at launches at most once per
//!   `RECORD_KERNEL_INTERVAL` seconds, only ever increased (CAS).
//!
//! Blocking applies whatever the SM limit (a low-priority container without a limit is still
//! paused while a higher-priority one runs: docs/known-failures.md #26), except under `disable`.

use crate::config::CorePolicy;
use core::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Poll interval while the monitor blocks the container (release seen within this).
pub const BLOCK_POLL_NS: u64 = 20_000_000;
/// Value written to `recent_kernel` at launches.
pub const RECENT_KERNEL_ACTIVE: i32 = 2;

/// Is the SM limit enforced? `limited` = the device has 0 < limit < 100.
pub fn enforce(policy: CorePolicy, utilization_switch: i32, limited: bool) -> bool {
    limited
        && match policy {
            CorePolicy::Force => true,
            CorePolicy::Disable => false,
            CorePolicy::Default => utilization_switch != 0,
        }
}

/// Does the monitor's priority blocking apply to this process at all?
pub fn honours_blocking(policy: CorePolicy) -> bool {
    policy != CorePolicy::Disable
}

pub fn blocked(recent_kernel: &AtomicI32) -> bool {
    recent_kernel.load(Ordering::Acquire) < 0
}

/// Marks the container active: writes 2 unless it is already 2 or negative (blocked).
/// Returns true if it wrote.
pub fn mark_active(recent_kernel: &AtomicI32) -> bool {
    let write = |cur: i32| (cur != RECENT_KERNEL_ACTIVE && cur >= 0).then_some(RECENT_KERNEL_ACTIVE);
    recent_kernel.fetch_update(Ordering::AcqRel, Ordering::Relaxed, write).is_ok()
}

/// Does `recent_kernel` need a write at the next launch?
pub fn needs_mark(recent_kernel: &AtomicI32) -> bool {
    let v = recent_kernel.load(Ordering::Relaxed);
    v != RECENT_KERNEL_ACTIVE && v >= 0
}

/// Raises `last_kernel_time` to `now_s` if that increases it. Returns true if it wrote.
pub fn bump_last_kernel_time(last_kernel_time: &AtomicU64, now_s: u64) -> bool {
    last_kernel_time.fetch_max(now_s, Ordering::AcqRel) < now_s
}

/// Process-local rate limiter for `last_kernel_time` writes: due when `now_s` ≥ the next time.
#[derive(Debug, Default)]
pub struct KernelTimeRecorder {
    next_s: AtomicU64,
}

impl KernelTimeRecorder {
    pub const fn new() -> Self {
        KernelTimeRecorder { next_s: AtomicU64::new(0) }
    }

    pub fn due(&self, now_s: u64) -> bool {
        now_s >= self.next_s.load(Ordering::Relaxed)
    }

    /// Records a launch at `now_s` (Unix seconds) with the contract's minimum interval.
    pub fn record(&self, word: &AtomicU64, now_s: u64, interval_s: u64) -> bool {
        let next = self.next_s.load(Ordering::Relaxed);
        if now_s < next {
            return false;
        }
        if self.next_s.compare_exchange(next, now_s + interval_s.max(1), Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false; // another thread of this process is recording
        }
        bump_last_kernel_time(word, now_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_table() {
        use CorePolicy::*;
        assert!(enforce(Force, 0, true));
        assert!(!enforce(Force, 1, false));
        assert!(!enforce(Disable, 1, true));
        assert!(enforce(Default, 1, true));
        assert!(!enforce(Default, 0, true));
        assert!(!enforce(Default, 1, false));
        assert!(honours_blocking(Default) && honours_blocking(Force) && !honours_blocking(Disable));
    }

    #[test]
    fn recent_kernel_rules() {
        let rk = AtomicI32::new(1);
        assert!(needs_mark(&rk));
        assert!(mark_active(&rk));
        assert_eq!(rk.load(Ordering::Relaxed), 2);
        assert!(!needs_mark(&rk));
        assert!(!mark_active(&rk)); // already 2: no write
        rk.store(-1, Ordering::Relaxed);
        assert!(blocked(&rk));
        assert!(!needs_mark(&rk));
        assert!(!mark_active(&rk)); // never resets a negative value
        assert_eq!(rk.load(Ordering::Relaxed), -1);
        rk.store(0, Ordering::Relaxed);
        assert!(!blocked(&rk));
        assert!(mark_active(&rk));
    }

    #[test]
    fn last_kernel_time_only_increases_and_is_rate_limited() {
        let w = AtomicU64::new(1000);
        assert!(!bump_last_kernel_time(&w, 999));
        assert!(bump_last_kernel_time(&w, 1001));
        let r = KernelTimeRecorder::new();
        assert!(r.record(&w, 1002, 5));
        assert_eq!(w.load(Ordering::Relaxed), 1002);
        assert!(!r.due(1006));
        assert!(!r.record(&w, 1006, 5));
        assert!(r.due(1007));
        assert!(r.record(&w, 1007, 5));
        assert_eq!(w.load(Ordering::Relaxed), 1007);
        // Someone else already wrote a later time: not decreased.
        w.store(2000, Ordering::Relaxed);
        assert!(!r.record(&w, 1012, 5));
        assert_eq!(w.load(Ordering::Relaxed), 2000);
    }
}
