//! The slow outer loop: corrects this process's charges with NVML's per-process busy time of
//! our host PID ([`Correction::observe`]) against the raw charges made over the same interval
//! ([`Correction::add_charge`] bins, shifted by the measured admission-to-execution lag).
//! Reasoning: docs/design.md "Outer loop".
//!
//! `r = Σ NVML busy / Σ raw charges` over the last [`WINDOW_NS`] is a pure ratio (no integrator,
//! no wind-up). `k` (charge = raw × k) moves halfway to `r` when `|r − 1|` exceeds NVML's
//! resolution (an integer percent per period, which a steady workload rounds the same way every
//! time) plus one launch at each end of the window and [`TOL_MARGIN`], and back to 1 inside it.
//! `r` outside [`R_MIN`, `R_MAX`] does not describe this process and is ignored; `k` stays in
//! [`K_MIN`, `K_MAX`].

use std::collections::VecDeque;

pub const BIN_NS: u64 = 10_000_000;
pub const HORIZON_NS: u64 = 12_000_000_000;
pub const WINDOW_NS: u64 = 3_000_000_000;
pub const UPDATE_EVERY_NS: u64 = 500_000_000;
/// Smoothing per update.
pub const ALPHA: f64 = 0.5;
pub const K_MIN: f64 = 0.5;
pub const K_MAX: f64 = 2.0;
pub const R_MIN: f64 = 0.33;
pub const R_MAX: f64 = 3.0;
/// Below this self-measured busy fraction of the window, no update (too little signal).
pub const MIN_BUSY_FRAC: f64 = 0.02;
/// The comparison window starts at least this long after the first charge (start-up transients:
/// first samples inflated by a start-up queue are re-priced later).
pub const SKIP_START_NS: u64 = 1_000_000_000;
/// Observations must cover at least this fraction of the window.
pub const MIN_COVER: f64 = 0.5;
/// Extra tolerance on top of NVML's quantisation.
pub const TOL_MARGIN: f64 = 0.005;

#[derive(Clone, Copy, Debug)]
struct Obs {
    start: u64,
    end: u64,
    nvml_ns: u64,
    /// Resolution of `nvml_ns`: half a percent of the period (integer percent).
    quant_ns: u64,
}

#[derive(Clone, Debug)]
pub struct Correction {
    /// (bin index, raw ns charged in it (refunds make it negative), largest single charge),
    /// oldest first.
    bins: VecDeque<(u64, i64, u64)>,
    /// Mean time from admission to the middle of execution (queueing), ns: charges are compared
    /// with NVML shifted by it.
    lag_ns: u64,
    /// First charge seen (start-up transients are kept out of the comparison).
    first_charge: u64,
    obs: VecDeque<Obs>,
    k: f64,
    last_update: u64,
    last_ratio: Option<f64>,
    last_tol: f64,
}

impl Default for Correction {
    fn default() -> Self {
        Correction::new()
    }
}

impl Correction {
    pub fn new() -> Self {
        Correction {
            bins: VecDeque::new(),
            obs: VecDeque::new(),
            lag_ns: 0,
            first_charge: 0,
            k: 1.0,
            last_update: 0,
            last_ratio: None,
            last_tol: 0.0,
        }
    }

    /// Charges are multiplied by this.
    pub fn k(&self) -> f64 {
        self.k
    }

    pub fn k_ppm(&self) -> u64 {
        (self.k * 1e6).round() as u64
    }

    pub fn last_ratio(&self) -> Option<f64> {
        self.last_ratio
    }

    /// The tolerance band of the last update (relative).
    pub fn last_tol(&self) -> f64 {
        self.last_tol
    }

    /// Back to no correction (sensor lost or PID changed).
    pub fn reset(&mut self) {
        self.obs.clear();
        self.k = 1.0;
        self.last_ratio = None;
    }

    /// `raw_ns` (before correction) charged at `now`; negative values are reconciliation refunds.
    pub fn add_charge(&mut self, now: u64, raw_ns: i64) {
        if self.first_charge == 0 {
            self.first_charge = now.max(1);
        }
        let b = now / BIN_NS;
        let m = raw_ns.max(0) as u64;
        match self.bins.back_mut() {
            Some((i, v, mx)) if *i == b => {
                *v = v.saturating_add(raw_ns);
                *mx = (*mx).max(m);
            }
            _ => self.bins.push_back((b, raw_ns, m)),
        }
        let oldest = b.saturating_sub(HORIZON_NS / BIN_NS);
        while self.bins.front().is_some_and(|(i, _, _)| *i < oldest) {
            self.bins.pop_front();
        }
    }

    /// A launch admitted at `admitted` ran until about `ended` and took `dur_ns`: updates the mean
    /// admission-to-execution lag (EMA).
    pub fn note_lag(&mut self, admitted: u64, ended: u64, dur_ns: u64) {
        let mid = ended.saturating_sub(dur_ns / 2);
        let lag = mid.saturating_sub(admitted).min(2_000_000_000);
        self.lag_ns = if self.lag_ns == 0 { lag } else { (self.lag_ns * 7 + lag) / 8 };
    }

    pub fn lag_ns(&self) -> u64 {
        self.lag_ns
    }

    /// Largest single charge made in `[start, end)`.
    fn max_charge(&self, start: u64, end: u64) -> u64 {
        self.bins
            .iter()
            .filter(|(i, _, _)| (i + 1) * BIN_NS > start && i * BIN_NS < end)
            .map(|&(_, _, m)| m)
            .max()
            .unwrap_or(0)
    }

    /// Raw ns charged in `[start, end)` (bins prorated).
    pub fn self_busy(&self, start: u64, end: u64) -> u64 {
        if end <= start {
            return 0;
        }
        let mut sum = 0i128;
        for &(i, v, _) in &self.bins {
            let (bs, be) = (i * BIN_NS, (i + 1) * BIN_NS);
            let (s, e) = (bs.max(start), be.min(end));
            if e > s {
                sum += v as i128 * (e - s) as i128 / BIN_NS as i128;
            }
        }
        sum.max(0) as u64
    }

    /// NVML busy time of our PID for the sample period `(start, end]` (util% × period).
    pub fn observe(&mut self, start: u64, end: u64, util_pct: u32) {
        if end <= start {
            return;
        }
        let p = end - start;
        if self.obs.back().is_some_and(|o| end <= o.end) {
            return; // already seen
        }
        self.obs.push_back(Obs { start, end, nvml_ns: p * util_pct.min(100) as u64 / 100, quant_ns: p / 200 });
        while self.obs.front().is_some_and(|o| o.end + HORIZON_NS < end) {
            self.obs.pop_front();
        }
    }

    /// Re-estimates `k` at most every [`UPDATE_EVERY_NS`]. Returns the new `k` if it changed.
    pub fn update(&mut self, now: u64) -> Option<f64> {
        if now.saturating_sub(self.last_update) < UPDATE_EVERY_NS {
            return None;
        }
        self.last_update = now;
        let newest = self.obs.back()?.end;
        let from = newest.saturating_sub(WINDOW_NS);
        if self.first_charge == 0 || from < self.first_charge + SKIP_START_NS {
            return None;
        }
        let (mut n, mut s, mut q, mut cover) = (0u64, 0u64, 0u64, 0u64);
        let mut first = u64::MAX;
        for o in self.obs.iter().filter(|o| o.start >= from) {
            n += o.nvml_ns;
            q += o.quant_ns;
            cover += o.end - o.start;
            first = first.min(o.start);
        }
        let mut lumps = 0;
        if first != u64::MAX {
            // Charges (with refunds) over the whole covered span, not period by period: a refund
            // then meets the charge it corrects. Charges happen at admission, execution later:
            // the span is shifted back by the measured lag.
            let (a, b) = (first.saturating_sub(self.lag_ns), newest.saturating_sub(self.lag_ns));
            s = self.self_busy(a, b);
            lumps = self.max_charge(a, b);
        }
        if (cover as f64) < MIN_COVER * WINDOW_NS as f64 || (s as f64) < MIN_BUSY_FRAC * cover as f64 {
            return None;
        }
        let r = n as f64 / s as f64;
        self.last_ratio = Some(r);
        if !(R_MIN..=R_MAX).contains(&r) {
            return None;
        }
        // Worst case of the summed rounding errors relative to the busy time (a steady workload
        // rounds the same way in every period, so the errors do not average out), plus what one
        // whole launch at each end of the window can shift between the two measurements.
        let tol = q as f64 / n.max(1) as f64 + 2.0 * lumps as f64 / s as f64 + TOL_MARGIN;
        self.last_tol = tol;
        // Consistent with the events within NVML's resolution: no correction (k back to 1).
        let target = if (r - 1.0).abs() <= tol * r { 1.0 } else { r };
        if (target - self.k).abs() < 1e-3 {
            return None;
        }
        let k = (self.k + ALPHA * (target - self.k)).clamp(K_MIN, K_MAX);
        if (k - self.k).abs() < 1e-9 {
            return None;
        }
        self.k = k;
        Some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds `secs` of a process that charges `raw_per_ms` per ms while NVML sees `true_frac`.
    fn run(c: &mut Correction, t0: u64, secs: u64, raw_frac: f64, true_frac: f64, period: u64) -> u64 {
        let mut t = t0;
        let end = t0 + secs * 1000 * MS;
        let mut next_period = t0 + period;
        while t < end {
            c.add_charge(t, (raw_frac * MS as f64) as i64);
            t += MS;
            if t >= next_period {
                c.observe(next_period - period, next_period, (true_frac * 100.0).round() as u32);
                next_period += period;
                c.update(t);
            }
        }
        t
    }

    #[test]
    fn returns_to_one_when_consistent_again() {
        let mut c = Correction::new();
        let t = run(&mut c, 1_000 * MS, 8, 0.6, 0.4, 166 * MS);
        assert!(c.k() < 0.8);
        run(&mut c, t, 12, 0.5, 0.5, 166 * MS);
        assert!((c.k() - 1.0).abs() < 0.01, "k = {}", c.k());
    }

    #[test]
    fn consistent_sensor_leaves_k_alone() {
        let mut c = Correction::new();
        run(&mut c, 1_000 * MS, 10, 0.5, 0.5, 166 * MS);
        assert_eq!(c.k(), 1.0);
        // A small disagreement inside NVML's resolution is ignored too.
        run(&mut c, 20_000 * MS, 10, 0.125, 0.12, 166 * MS);
        assert_eq!(c.k(), 1.0);
    }

    #[test]
    fn inflated_charges_are_corrected() {
        let mut c = Correction::new();
        // Charges say 60 %, truth is 40 %: k -> 2/3.
        run(&mut c, 1_000 * MS, 8, 0.6, 0.4, 166 * MS);
        assert!((c.k() - 0.4 / 0.6).abs() < 0.03, "k = {}", c.k());
    }

    #[test]
    fn under_charging_is_corrected_upwards_and_bounded() {
        let mut c = Correction::new();
        run(&mut c, 1_000 * MS, 8, 0.3, 0.36, 166 * MS);
        assert!((c.k() - 1.2).abs() < 0.03, "k = {}", c.k());
        // Absurd ratios (wrong PID) are ignored.
        let mut d = Correction::new();
        run(&mut d, 1_000 * MS, 8, 0.3, 0.0, 166 * MS);
        assert_eq!(d.k(), 1.0);
        assert_eq!(d.last_ratio(), Some(0.0));
    }

    #[test]
    fn idle_process_does_not_update() {
        let mut c = Correction::new();
        run(&mut c, 1_000 * MS, 5, 0.001, 0.0, 166 * MS);
        assert_eq!(c.k(), 1.0);
    }

    #[test]
    fn self_busy_prorates_bins() {
        let mut c = Correction::new();
        c.add_charge(5 * BIN_NS + 1, 1000);
        assert_eq!(c.self_busy(5 * BIN_NS, 6 * BIN_NS), 1000);
        assert_eq!(c.self_busy(5 * BIN_NS, 5 * BIN_NS + BIN_NS / 2), 500);
        c.add_charge(5 * BIN_NS + 2, -400);
        assert_eq!(c.self_busy(0, 10 * BIN_NS), 600);
    }
}
