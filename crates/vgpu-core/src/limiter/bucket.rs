//! The container-wide GPU-time token bucket of one device, kept in the region's extension block
//! and shared by every process of the container.
//!
//! * Tokens are nanoseconds of device time. The balance refills at `rate` = L × wall time, lazily:
//!   whoever touches the bucket advances `last_refill_ns` by CAS and adds the tokens for the
//!   elapsed interval, so no thread is needed for refill and a dead process leaves nothing behind.
//!   The refill is computed as `⌊now·r⌋ − ⌊last·r⌋`, so rounding never accumulates.
//! * The balance is capped at `cap` (the burst a container gets after being idle) and may go
//!   negative (debt): a launch is admitted while the balance is ≥ 0 and then pays its predicted
//!   cost, so a 20 ms kernel under a 2 ms cap still runs and its debt is repaid by waiting.
//! * A launch that finds debt waits until the balance is back at a small positive quantum (about
//!   1 ms of wall time worth of tokens), so short kernels are admitted in small batches instead of
//!   one sleep per launch; sleeps are capped so limit and policy changes are seen quickly.
//! * Reconciliation (measured minus predicted cost) is charged later through [`Bucket::charge`].
//!   A refund may lift the balance above the cap (it returns a past over-charge), up to twice
//!   the cap; refills never add above the cap but do not take such a refund away.

use super::PPM;
use crate::region::DeviceLimiterState;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// The cap is `rate × BURST_WINDOW_NS`: after an idle period a container may use its whole share
/// of this window at once (50 ms: a limit-50 container may run 25 ms back to back).
pub const BURST_WINDOW_NS: u64 = 50_000_000;
/// Lower bound of the cap.
pub const MIN_CAP_NS: u64 = 1_000_000;
/// A waiting launch sleeps until the balance is worth this much wall time.
pub const WAKE_QUANTUM_NS: u64 = 1_000_000;
/// Longest single sleep of a waiting launch (limit/policy/monitor changes are seen this fast).
pub const MAX_SLEEP_NS: u64 = 50_000_000;
/// Refunds may lift the balance up to this many caps.
pub const REFUND_CAPS: i64 = 2;
/// A clock more than this far behind `last_refill_ns` is treated as a new time base.
pub const CLOCK_JUMP_NS: u64 = 10_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Refill rate in millionths of wall time (1..PPM).
    pub rate_ppm: u64,
    /// Balance cap, ns of device time.
    pub cap_ns: i64,
}

impl Params {
    /// Parameters for a limit in percent; `None` when the limit means "unlimited" (0 or ≥ 100).
    pub fn for_limit(pct: u64) -> Option<Params> {
        let rate_ppm = super::limit_to_ppm(pct)?;
        Some(Params::for_rate(rate_ppm))
    }

    pub fn for_rate(rate_ppm: u64) -> Params {
        let rate_ppm = rate_ppm.clamp(1, PPM);
        let cap = mul_div(BURST_WINDOW_NS, rate_ppm, PPM).max(MIN_CAP_NS);
        Params { rate_ppm, cap_ns: cap as i64 }
    }

    /// Tokens that accrue in `wall_ns`.
    pub fn tokens_for(&self, wall_ns: u64) -> i64 {
        mul_div(wall_ns, self.rate_ppm, PPM).min(i64::MAX as u64 / 2) as i64
    }

    /// Wall time needed to accrue `tokens` (rounded up).
    pub fn wall_for(&self, tokens: u64) -> u64 {
        ((tokens as u128 * PPM as u128).div_ceil(self.rate_ppm as u128)).min(u64::MAX as u128 / 2) as u64
    }

    /// Balance a waiter waits for before retrying.
    pub fn wake_quantum(&self) -> i64 {
        self.tokens_for(WAKE_QUANTUM_NS).min(self.cap_ns / 2).max(1)
    }
}

pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    ((a as u128 * b as u128) / c as u128).min(u64::MAX as u128) as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead; the cost has been charged. `waited` is false.
    Admitted,
    /// Sleep until this CLOCK_MONOTONIC time, then try again.
    Wait { until: u64 },
}

/// One device's bucket, as seen by one process with its parameters.
#[derive(Clone, Copy)]
pub struct Bucket<'a> {
    w: &'a DeviceLimiterState,
    p: Params,
}

impl<'a> Bucket<'a> {
    /// Attaches to the shared state and publishes `p` (rate/cap words, generation bump on change).
    pub fn new(st: &'a DeviceLimiterState, p: Params) -> Bucket<'a> {
        let b = Bucket { w: st, p };
        b.publish();
        b
    }

    /// Attaches without publishing (hot path, after [`Bucket::new`] ran once in this process).
    pub fn attach(st: &'a DeviceLimiterState, p: Params) -> Bucket<'a> {
        Bucket { w: st, p }
    }

    fn publish(&self) {
        let w = self.w;
        let old_rate = w.rate_ppm.swap(self.p.rate_ppm, AcqRel);
        let old_cap = w.cap_ns.swap(self.p.cap_ns as u64, AcqRel);
        if old_rate != self.p.rate_ppm || old_cap != self.p.cap_ns as u64 {
            w.generation.fetch_add(1, AcqRel);
        }
    }

    pub fn params(&self) -> Params {
        self.p
    }

    pub fn balance(&self) -> i64 {
        self.w.balance_ns.load(Acquire)
    }

    /// Lazy refill up to `now` (CLOCK_MONOTONIC ns); returns the balance afterwards.
    pub fn refill(&self, now: u64) -> i64 {
        let w = self.w;
        let mut last = w.last_refill_ns.load(Acquire);
        loop {
            if last == 0 {
                // First use of this bucket: start the clock with an empty (zero) balance.
                match w.last_refill_ns.compare_exchange(0, now.max(1), AcqRel, Acquire) {
                    Ok(_) => break,
                    Err(v) => {
                        last = v;
                        continue;
                    }
                }
            }
            if now <= last {
                if last > now.saturating_add(CLOCK_JUMP_NS) {
                    // A different time base (the region outlived a reboot): restart the clock.
                    if w.last_refill_ns.compare_exchange(last, now.max(1), AcqRel, Acquire).is_ok() {
                        let cap = self.p.cap_ns;
                        let _ = w.balance_ns.fetch_update(AcqRel, Acquire, |b| Some(b.clamp(0, cap)));
                    }
                }
                break;
            }
            match w.last_refill_ns.compare_exchange_weak(last, now, AcqRel, Acquire) {
                Ok(_) => {
                    let r = self.p.rate_ppm as u128;
                    let add = (now as u128 * r / PPM as u128) - (last as u128 * r / PPM as u128);
                    let add = add.min(self.p.cap_ns as u128 * 4 + 1) as i64;
                    let nb = w.balance_ns.fetch_add(add, AcqRel) + add;
                    if nb > self.p.cap_ns {
                        // Refill never lifts the balance above the cap, but does not take away
                        // what refunds put above it either: remove only this refill's excess.
                        w.balance_ns.fetch_sub((nb - self.p.cap_ns).min(add), AcqRel);
                    }
                    break;
                }
                Err(v) => last = v,
            }
        }
        w.balance_ns.load(Acquire)
    }

    /// Admission of a launch predicted to cost `cost_ns`.
    pub fn try_admit(&self, now: u64, cost_ns: u64) -> Admission {
        let b = self.refill(now);
        if b >= 0 {
            self.charge(cost_ns as i64);
            Admission::Admitted
        } else {
            let need = (self.p.wake_quantum() - b) as u64;
            let sleep = self.p.wall_for(need).clamp(1, MAX_SLEEP_NS);
            Admission::Wait { until: now + sleep }
        }
    }

    /// Charges `delta_ns` (positive: more debt; negative: refund). Counted in `charged_ns`.
    pub fn charge(&self, delta_ns: i64) {
        if delta_ns == 0 {
            return;
        }
        let w = self.w;
        // No floor on the debt: a refund returns exactly a past over-charge (cost accounts,
        // `super::cost`), and dropping debt would make refunds leak tokens. A refund may lift the
        // balance above the cap (the container catches up what it was wrongly made to wait for),
        // but not above REFUND_CAPS × cap: a large start-up over-charge is not paid back as a
        // burst far above the limit (erring on the side of the limit).
        let nb = w.balance_ns.fetch_sub(delta_ns, AcqRel) - delta_ns;
        if delta_ns > 0 {
            w.charged_ns.fetch_add(delta_ns as u64, Relaxed);
        } else {
            let top = self.p.cap_ns.saturating_mul(REFUND_CAPS);
            if nb > top {
                w.balance_ns.fetch_min(top, AcqRel);
            }
            let _ = w.charged_ns.fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_sub((-delta_ns) as u64)));
        }
    }

    /// Charges a re-pricing from the cost model (`super::cost`): exact, in both directions.
    pub fn reprice(&self, delta_ns: i64) {
        self.charge(delta_ns);
    }

    /// Adds wall time spent waiting for tokens to the metrics.
    pub fn note_throttled(&self, waited_ns: u64) {
        self.w.throttled_ns.fetch_add(waited_ns, Relaxed);
        self.w.throttled_launches.fetch_add(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::words::new_state;
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn params() {
        assert_eq!(Params::for_limit(0), None);
        assert_eq!(Params::for_limit(100), None);
        assert_eq!(Params::for_limit(250), None);
        let p = Params::for_limit(30).unwrap();
        assert_eq!(p.rate_ppm, 300_000);
        assert_eq!(p.cap_ns, 15 * MS as i64);
        assert_eq!(p.tokens_for(10 * MS), 3 * MS as i64);
        assert_eq!(p.wall_for(3 * MS), 10 * MS);
        assert_eq!(Params::for_limit(1).unwrap().cap_ns, MIN_CAP_NS as i64);
        assert!(p.wake_quantum() > 0 && p.wake_quantum() <= p.cap_ns / 2);
    }

    #[test]
    fn starts_empty_and_refills_exactly() {
        let st = new_state();
        let b = Bucket::new(&st, Params::for_limit(25).unwrap());
        let t0 = 1_000 * MS;
        assert_eq!(b.refill(t0), 0);
        // Many small refills add up exactly to the same as one big one (no rounding drift).
        let mut t = t0;
        for _ in 0..10_000 {
            t += 333; // 333 ns steps
            b.refill(t);
        }
        let expect = ((t as u128 * 250_000 / PPM as u128) - (t0 as u128 * 250_000 / PPM as u128)) as i64;
        assert_eq!(b.balance(), expect.min(b.params().cap_ns));
    }

    #[test]
    fn cap_and_debt() {
        let st = new_state();
        let p = Params::for_limit(50).unwrap();
        let b = Bucket::new(&st, p);
        let t0 = 5_000 * MS;
        b.refill(t0);
        assert_eq!(b.refill(t0 + 10_000 * MS), p.cap_ns);
        // Admitted while >= 0, even for a cost larger than the balance.
        assert_eq!(b.try_admit(t0 + 10_000 * MS, 100 * MS), Admission::Admitted);
        assert_eq!(b.balance(), p.cap_ns - 100 * MS as i64);
        match b.try_admit(t0 + 10_000 * MS, 1) {
            Admission::Wait { until } => {
                // debt 75 ms at rate 0.5 -> 150 ms, plus the quantum (1 ms wall), capped at MAX_SLEEP.
                assert_eq!(until, t0 + 10_000 * MS + MAX_SLEEP_NS);
            }
            a => panic!("{a:?}"),
        }
        // After repaying the debt it admits again.
        let t1 = t0 + 10_000 * MS + 151 * MS;
        assert_eq!(b.try_admit(t1, 1), Admission::Admitted);
        // A refund may exceed the cap, and a refill does not take it away (nor add to it).
        b.refill(t1 + 1_000 * MS);
        assert_eq!(b.balance(), p.cap_ns);
        b.charge(-(10 * MS as i64));
        assert_eq!(b.balance(), p.cap_ns + 10 * MS as i64);
        b.refill(t1 + 2_000 * MS);
        assert_eq!(b.balance(), p.cap_ns + 10 * MS as i64);
        // ... but not above REFUND_CAPS caps.
        b.charge(-(1_000 * MS as i64));
        assert_eq!(b.balance(), REFUND_CAPS * p.cap_ns);
        // Charges and refunds are symmetric (no floor) below the refund ceiling.
        b.charge(3 * p.cap_ns);
        let before = b.balance();
        b.charge(10_000 * MS as i64);
        b.charge(-(10_000 * MS as i64));
        assert_eq!(b.balance(), before);
    }

    #[test]
    fn wait_time_matches_rate() {
        let st = new_state();
        let p = Params::for_limit(10).unwrap();
        let b = Bucket::new(&st, p);
        let t0 = 77 * MS;
        b.refill(t0);
        b.charge(2 * MS as i64);
        match b.try_admit(t0, 1) {
            Admission::Wait { until } => {
                // 2 ms debt + 0.1 ms quantum at 10 % = 21 ms.
                assert_eq!(until - t0, 21 * MS);
            }
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn clock_jump_restarts() {
        let st = new_state();
        let p = Params::for_limit(50).unwrap();
        let b = Bucket::new(&st, p);
        b.refill(100_000 * MS);
        b.charge(10 * MS as i64);
        // Time base went backwards by far more than CLOCK_JUMP_NS: debt forgiven, clock restarted.
        assert_eq!(b.refill(5 * MS), 0);
        assert_eq!(b.refill(7 * MS), MS as i64);
    }

    #[test]
    fn generation_bumps_on_change() {
        let st = new_state();
        let g0 = st.generation.load(Relaxed);
        let _ = Bucket::new(&st, Params::for_limit(50).unwrap());
        let g1 = st.generation.load(Relaxed);
        let _ = Bucket::new(&st, Params::for_limit(50).unwrap());
        assert_eq!(st.generation.load(Relaxed), g1);
        let _ = Bucket::new(&st, Params::for_limit(20).unwrap());
        assert!(g1 > g0 && st.generation.load(Relaxed) > g1);
    }

    #[test]
    fn concurrent_refill_is_exact() {
        // Several threads refilling and charging concurrently: tokens in = rate × elapsed.
        let st = new_state();
        let p = Params { rate_ppm: 500_000, cap_ns: i64::MAX / 8 };
        let b = Bucket::attach(&st, p);
        let t0 = 1_000 * MS;
        b.refill(t0);
        let clock = std::sync::atomic::AtomicU64::new(t0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let t = clock.fetch_add(7, Relaxed) + 7;
                        b.refill(t);
                        b.charge(1);
                    }
                });
            }
        });
        let end = clock.load(Relaxed);
        b.refill(end);
        let expect = (end - t0) as i64 / 2 - 80_000;
        assert!((b.balance() - expect).abs() <= 1, "{} vs {}", b.balance(), expect);
    }
}
