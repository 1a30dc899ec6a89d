//! The arithmetic of the watcher's NVML tick (`src/compute/watcher.rs`): how the samples of one
//! `nvmlDeviceGetProcessUtilization(lastSeen)` answer are weighed into busy time per process over
//! the span they cover, the percentages and container share derived from them, and the
//! self-measured share used when NVML has no per-process data.

use super::PPM;

/// One NVML sample: (pid, timestamp µs, SM %).
pub type Sample = (u32, u64, u32);

/// One answer of `nvmlDeviceGetProcessUtilization(lastSeen)` weighed once: busy µs per PID over
/// `[from_us, end_us]` (wall µs). The correction and the burst step both read these.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub from_us: u64,
    pub end_us: u64,
    pub busy: Vec<(u32, u64)>,
}

impl Span {
    /// The samples of an answer to a query from `from_us`. Distinct time stamps newer than
    /// `from_us` delimit the periods (one in the simulator, one per driver sample period on
    /// hardware); each sample weighs its own period, from the previous distinct stamp (or
    /// `from_us`) to its own, by its SM % (capped at 100). Samples not newer than `from_us` were
    /// counted by an earlier answer. `None` when no sample is newer: it covers nothing new.
    pub fn weigh(samples: &[Sample], from_us: u64) -> Option<Span> {
        let mut ts: Vec<u64> = samples.iter().map(|s| s.1).filter(|&t| t > from_us).collect();
        ts.sort_unstable();
        ts.dedup();
        let &end_us = ts.last()?;
        let mut busy: Vec<(u32, u64)> = Vec::new();
        for &(pid, t, u) in samples.iter().filter(|s| s.1 > from_us) {
            let i = ts.binary_search(&t).unwrap_or(0);
            let start = if i == 0 { from_us } else { ts[i - 1] };
            let b = (t - start) * u.min(100) as u64 / 100;
            match busy.iter_mut().find(|x| x.0 == pid) {
                Some(x) => x.1 += b,
                None => busy.push((pid, b)),
            }
        }
        Some(Span { from_us, end_us, busy })
    }

    /// Its length in µs, at least 1 (a wall clock that stood still or went back).
    pub fn len_us(&self) -> u64 {
        self.end_us.saturating_sub(self.from_us).max(1)
    }

    /// The share (ppm, at most [`PPM`]) of the PIDs in `ours`: the container's share.
    pub fn share_ppm(&self, ours: &[u32]) -> u64 {
        (self.busy_of(ours) as u128 * PPM as u128 / self.len_us() as u128).min(PPM as u128) as u64
    }

    /// Busy µs of the PIDs in `pids`.
    pub fn busy_of(&self, pids: &[u32]) -> u64 {
        self.busy.iter().filter(|(p, _)| pids.contains(p)).map(|&(_, b)| b).sum()
    }

    /// Busy µs of every PID (the device's busy time: contexts do not run concurrently).
    pub fn device_busy(&self) -> u64 {
        self.busy.iter().map(|&(_, b)| b).sum()
    }

    /// Some PID outside `ours` was busy.
    pub fn others_busy(&self, ours: &[u32]) -> bool {
        self.busy.iter().any(|&(p, b)| b > 0 && !ours.contains(&p))
    }
}

/// `busy` of `span` as a rounded percentage, at most 100.
pub fn percent(busy: u64, span: u64) -> u32 {
    let span = span.max(1) as u128;
    ((busy as u128 * 100 + span / 2) / span).min(100) as u32
}

/// `busy_ns` of the monotonic span `[start, end)` as a rounded percentage, not capped (the outer
/// loop wants the exact figure, not the displayed one).
pub fn exact_percent(busy_ns: u64, start: u64, end: u64) -> u32 {
    let span = end.saturating_sub(start).max(1) as u128;
    ((busy_ns as u128 * 100 + span / 2) / span).min(u32::MAX as u128) as u32
}

/// Self-measured share (ppm, at most [`PPM`]) of the time since the last tick: the container's
/// charges (ns) grew from `last_charged` to `charged` between `last_at` and `now` (monotonic ns).
/// `None` on the first tick (`last_at` 0) or when the clock did not advance.
pub fn self_share_ppm(charged: u64, last_charged: u64, last_at: u64, now: u64) -> Option<u64> {
    if last_at == 0 || now <= last_at {
        return None;
    }
    let grown = charged.saturating_sub(last_charged) as u128;
    Some((grown * PPM as u128 / (now - last_at) as u128).min(PPM as u128) as u64)
}

/// This process's `sm_util` (0..=100) from its own charges over the last second, `busy_ns`,
/// scaled by the outer loop's correction `k`.
pub fn self_sm_util(busy_ns: u64, k: f64) -> u64 {
    (busy_ns as f64 * k / 1e7).round().clamp(0.0, 100.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_answer_or_only_old_samples_cover_nothing() {
        assert_eq!(Span::weigh(&[], 1_000), None);
        assert_eq!(Span::weigh(&[(1, 900, 50), (2, 1_000, 80)], 1_000), None);
    }

    #[test]
    fn one_stamp_weighs_each_sample_over_the_whole_span() {
        // Simulator shape: every pid's sample carries the same stamp.
        let Span { busy, end_us: end, .. } = Span::weigh(&[(10, 2_000, 50), (20, 2_000, 25)], 1_000).unwrap();
        assert_eq!(end, 2_000);
        assert_eq!(busy, vec![(10, 500), (20, 250)]);
    }

    #[test]
    fn distinct_stamps_delimit_periods_and_old_samples_are_skipped() {
        // Hardware shape: one sample per driver period; the one at 1_000 was seen last time.
        let v = [(7, 1_000, 100), (7, 1_200, 100), (7, 1_500, 50), (8, 1_500, 10), (7, 2_000, 0)];
        let Span { busy, end_us: end, .. } = Span::weigh(&v, 1_000).unwrap();
        assert_eq!(end, 2_000);
        // pid 7: 200 µs at 100 % + 300 µs at 50 % + 500 µs at 0 %; pid 8: 300 µs at 10 %.
        assert_eq!(busy, vec![(7, 200 + 150), (8, 30)]);
    }

    #[test]
    fn unordered_samples_and_percentages_over_100_are_weighed_the_same() {
        let a = Span::weigh(&[(1, 1_500, 100), (1, 1_200, 100)], 1_000).unwrap();
        let b = Span::weigh(&[(1, 1_200, 250), (1, 1_500, 100)], 1_000).unwrap();
        assert_eq!(a, b);
        assert_eq!((a.busy, a.end_us), (vec![(1, 500)], 1_500));
    }

    #[test]
    fn a_zero_last_seen_weighs_from_the_epoch() {
        let Span { busy, end_us: end, .. } = Span::weigh(&[(3, 100, 50)], 0).unwrap();
        assert_eq!((busy, end), (vec![(3, 50)], 100));
    }

    #[test]
    fn a_span_tells_device_own_and_others_busy_time() {
        assert_eq!(Span::weigh(&[(1, 900, 50)], 1_000), None, "nothing newer");
        let s = Span::weigh(&[(1, 2_000, 50), (2, 2_000, 25), (3, 2_000, 0)], 1_000).unwrap();
        assert_eq!((s.from_us, s.end_us, s.len_us()), (1_000, 2_000, 1_000));
        assert_eq!((s.device_busy(), s.busy_of(&[1]), s.busy_of(&[1, 2]), s.busy_of(&[])), (750, 500, 750, 0));
        assert!(s.others_busy(&[1]) && !s.others_busy(&[1, 2]), "an idle PID is not another tenant");
    }

    #[test]
    fn spans_never_divide_by_zero() {
        let span = |from_us, end_us| Span { from_us, end_us, busy: vec![(1, 0)] };
        assert_eq!(span(1_000, 3_000).len_us(), 2_000);
        assert_eq!(span(1_000, 1_000).len_us(), 1);
        assert_eq!(span(5_000, 1_000).len_us(), 1, "a wall clock that went back");
        assert_eq!(percent(0, 0), 0);
        assert_eq!(exact_percent(0, 10, 5), 0);
        assert_eq!(span(1_000, 1_000).share_ppm(&[1]), 0);
    }

    #[test]
    fn percentages_round_to_nearest_and_cap_where_displayed() {
        assert_eq!(percent(249, 1_000), 25);
        assert_eq!(percent(244, 1_000), 24);
        assert_eq!(percent(1_000, 1_000), 100);
        assert_eq!(percent(3_000, 1_000), 100, "sm_util is at most 100");
        assert_eq!(exact_percent(250_000, 1_000_000, 2_000_000), 25);
        assert_eq!(exact_percent(3_000, 0, 1_000), 300, "the outer loop sees the real ratio");
        assert_eq!(exact_percent(u64::MAX, 0, 1), u32::MAX, "saturates, never wraps");
    }

    #[test]
    fn the_container_share_counts_only_its_own_pids_and_caps_at_ppm() {
        let span = |end_us, busy| Span { from_us: 0, end_us, busy };
        let per_pid = vec![(1, 200), (2, 300), (99, 500)];
        assert_eq!(span(1_000, per_pid.clone()).share_ppm(&[1, 2]), 500_000);
        assert_eq!(span(1_000, per_pid.clone()).share_ppm(&[]), 0);
        assert_eq!(span(1_000, vec![]).share_ppm(&[1]), 0);
        assert_eq!(span(500, per_pid).share_ppm(&[1, 2, 99]), PPM);
    }

    #[test]
    fn self_share_needs_a_previous_tick_and_an_advancing_clock() {
        assert_eq!(self_share_ppm(500, 0, 0, 1_000), None, "first tick");
        assert_eq!(self_share_ppm(500, 0, 1_000, 1_000), None, "clock stood still");
        assert_eq!(self_share_ppm(500, 0, 2_000, 1_000), None, "clock went back");
        assert_eq!(self_share_ppm(1_250, 1_000, 1_000, 2_000), Some(250_000));
    }

    #[test]
    fn self_share_of_shrunk_or_huge_charges_stays_in_range() {
        assert_eq!(self_share_ppm(100, 1_000, 1_000, 2_000), Some(0), "charges reset (fork, new region)");
        assert_eq!(self_share_ppm(5_000, 1_000, 1_000, 2_000), Some(PPM), "several processes' charges");
        assert_eq!(self_share_ppm(u64::MAX, 0, 1, 2), Some(PPM), "saturates, never wraps");
    }

    #[test]
    fn self_sm_util_scales_by_k_and_stays_in_0_to_100() {
        assert_eq!(self_sm_util(0, 1.0), 0);
        assert_eq!(self_sm_util(250_000_000, 1.0), 25);
        assert_eq!(self_sm_util(250_000_000, 2.0), 50);
        assert_eq!(self_sm_util(2_000_000_000, 1.0), 100);
        assert_eq!(self_sm_util(250_000_000, -1.0), 0);
    }
}
