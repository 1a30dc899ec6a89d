//! Burst: the SM limit L as a guarantee, idle device time used up to a ceiling C.
//! Reasoning (why the rule is stable and fair) and figures: docs/design.md "Burst".
//!
//! The container's bucket refills at an effective rate `r ∈ [L, C]` (word `burst_rate_ppm`),
//! adjusted every [`STEP_NS`] by the one process that advances `burst_stamp_us` by CAS, from one
//! span's device busy time and the container's own (`others = device − own`). AIMD on the excess
//! `x = r − L`, weighted by the guarantee:
//! * idle time on the device (smoothed `busy < SATURATED`): `x += GROWTH · idle · L`;
//! * no idle time and another tenant active: `x ×= BACKOFF` per step;
//! * saturated by ourselves alone: hold.
//!
//! Bounds on top: `r ≤ 1 − hold + PEAK_SLACK` (the hold is armed when a newcomer appears and
//! decays at `PEAK_DECAY_PER_S`) and `r ≤ MAX_RATE_PPM` (the burster's driver queues drain). The
//! rate is in charged ns, which the per-process correction keeps equal to device time.

use super::PPM;
use crate::region::DeviceLimiterState;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// The highest effective rate: a burster admits a little less than the device can run, so its
/// driver queues drain instead of holding tens of ms of work that a newcomer's first kernels (and
/// its first timing samples) would wait behind.
pub const MAX_RATE_PPM: u64 = 970_000;
/// One controller step per this much wall time (the watcher's control period).
pub const STEP_NS: u64 = 20_000_000;
/// A span longer than this says nothing about now (nobody led for a while): no step.
pub const MAX_SPAN_NS: u64 = 500_000_000;
/// Device busy at or above this (ppm of the span) = no idle time.
pub const SATURATED_PPM: u64 = 970_000;
/// Other tenants' busy time at or above this (ppm of the span) = someone else wants the device.
pub const OTHERS_ACTIVE_PPM: u64 = 30_000;
/// Others' share that marks a newcomer when per-process NVML cannot name it.
pub const NEWCOMER_PPM: u64 = 100_000;
/// Growth per step: this × the span's idle time (in steps) × L.
pub const GROWTH: f64 = 1.0;
/// The excess kept per congested step.
pub const BACKOFF: f64 = 0.8;
/// Smoothing of the device's busy fraction per step.
pub const BUSY_SMOOTH: f64 = 0.5;
/// Smoothing of the others' share per step, while it rises ...
pub const OTHERS_SMOOTH: f64 = 0.3;
/// ... and while it falls: slowly, so a tenant that runs one long kernel now and then (a 20 %
/// guarantee with 20 ms kernels: one kernel per 100 ms, most 20 ms spans without it) is still
/// "there" between its kernels and is not taken for a newcomer when the next one runs (which armed
/// the hold in a co-burster and kept it at its guarantee for a second). A tenant absent for
/// ~0.75 s is gone (from a 20 % share to below [`OTHERS_ACTIVE_PPM`]).
pub const OTHERS_DECAY: f64 = 0.05;
/// The newcomer hold (armed at the whole device) decays by this fraction of the device per second.
pub const PEAK_DECAY_PER_S: f64 = 0.5;
/// The rate stays below `1 − peak + PEAK_SLACK` (never below the limit).
pub const PEAK_SLACK: f64 = 0.1;
/// Guarantee and ceiling of one device, ppm of wall time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub limit_ppm: u64,
    pub ceiling_ppm: u64,
}

impl Limits {
    /// `limit` and `ceiling` in percent; a ceiling of 0 (unset) or at/below the limit means no
    /// burst, above 100 means 100. `None` when the limit is not a limit (0 or ≥ 100).
    pub fn new(limit_pct: u64, ceiling_pct: u64) -> Option<Limits> {
        let limit_ppm = super::limit_to_ppm(limit_pct)?;
        let ceiling_ppm = (ceiling_pct.min(100) * 10_000).min(MAX_RATE_PPM).max(limit_ppm);
        Some(Limits { limit_ppm, ceiling_ppm })
    }

    pub fn bursting(&self) -> bool {
        self.ceiling_ppm > self.limit_ppm
    }

    /// `rate` clamped into [limit, ceiling] (0 = none yet = the limit).
    pub fn clamp(&self, rate_ppm: u64) -> u64 {
        if rate_ppm == 0 { self.limit_ppm } else { rate_ppm.clamp(self.limit_ppm, self.ceiling_ppm) }
    }
}

/// What the sensors say about one span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    pub span_ns: u64,
    /// Device busy time (all tenants).
    pub device_busy_ns: u64,
    /// This container's busy time.
    pub own_busy_ns: u64,
    /// Another tenant ran at all in the span (per-process NVML lists a busy PID that is not
    /// ours). A newcomer whose first timing samples are inflated by our queued work may run very
    /// little: its presence alone is a reason to back off when the device is saturated.
    pub others_present: bool,
    /// `own_busy_ns` covers every process of the container (each has a host PID, or own is the
    /// container's charges). Before that the container's own work counts as others' work.
    pub attributed: bool,
}

impl Observation {
    fn frac(&self, v: u64) -> u64 {
        (v.min(self.span_ns) as u128 * PPM as u128 / self.span_ns.max(1) as u128) as u64
    }
    pub fn busy_ppm(&self) -> u64 {
        self.frac(self.device_busy_ns)
    }
    pub fn own_ppm(&self) -> u64 {
        self.frac(self.own_busy_ns)
    }
    pub fn others_ppm(&self) -> u64 {
        self.frac(self.device_busy_ns.saturating_sub(self.own_busy_ns))
    }
}

/// The controller's shared state (words of the extension block).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Effective rate (0 = none yet = the limit).
    pub rate_ppm: u64,
    /// Other tenants' busy fraction, smoothed.
    pub others_ppm: u64,
    /// The newcomer hold: armed at PPM when a newcomer appears, decaying at [`PEAK_DECAY_PER_S`].
    pub peak_ppm: u64,
    /// Device busy fraction, smoothed.
    pub busy_ppm: u64,
    /// The last span was not attributed ([`Observation::attributed`]): `others_ppm` includes our
    /// own work and is replaced, not smoothed, by the first attributed span's.
    pub unattributed: bool,
}

const FIELD: u32 = 21;
const MASK: u64 = (1 << FIELD) - 1;
/// The signals word's top bit: [`State::unattributed`].
const UNATTRIBUTED: u64 = 1 << 63;
/// The rate word: rate ppm in bits 0-19 (the rest zero).
const RATE_MASK: u64 = (1 << 20) - 1;

impl State {
    pub fn load(w: &DeviceLimiterState) -> State {
        let s = w.burst_signals.load(Relaxed);
        let r = w.burst_rate_ppm.load(Relaxed);
        State {
            rate_ppm: r & RATE_MASK,
            others_ppm: s & MASK,
            peak_ppm: (s >> FIELD) & MASK,
            busy_ppm: (s >> (2 * FIELD)) & MASK,
            unattributed: s & UNATTRIBUTED != 0,
        }
    }

    /// No step has run yet.
    fn fresh(&self) -> bool {
        self.signals() & !UNATTRIBUTED == 0
    }

    fn signals(&self) -> u64 {
        let flag = if self.unattributed { UNATTRIBUTED } else { 0 };
        self.others_ppm.min(PPM) | self.peak_ppm.min(PPM) << FIELD | self.busy_ppm.min(PPM) << (2 * FIELD) | flag
    }

    fn rate_word(&self) -> u64 {
        self.rate_ppm.min(PPM)
    }
}

/// One controller step: the new state from the current one and a span's observation.
pub fn step(st: State, lim: Limits, obs: Observation) -> State {
    if !lim.bursting() {
        return State { rate_ppm: lim.limit_ppm, ..st };
    }
    let r = lim.clamp(st.rate_ppm);
    if obs.span_ns == 0 || obs.span_ns > MAX_SPAN_NS {
        return State { rate_ppm: r, ..st };
    }
    // A longer span (leadership moved, the watcher was late) counts as that many steps.
    let steps = (obs.span_ns as f64 / STEP_NS as f64).clamp(0.25, 4.0);
    // Others' share, smoothed over a few steps (one 20 ms span of long kernels is all or nothing),
    // and its recent peak.
    let rising = obs.others_ppm() > st.others_ppm;
    let a = (if rising { OTHERS_SMOOTH } else { OTHERS_DECAY } * steps).min(1.0);
    // The first span that tells our work from others' replaces the share learnt before it, which
    // counted our own work (a burster alone whose PID resolved after 200 ms still had 3 % of
    // "others" 1.5 s later, decaying slowly, and took a newcomer then for an old tenant).
    let a = if obs.attributed && st.unattributed { 1.0 } else { a };
    let others = st.others_ppm as f64 + a * (obs.others_ppm() as f64 - st.others_ppm as f64);
    let x = (r - lim.limit_ppm) as f64;
    // Device busy, smoothed: with long kernels a single span is all busy or not at all.
    let ab = if st.fresh() { 1.0 } else { (BUSY_SMOOTH * steps).min(1.0) };
    let busy_s = st.busy_ppm as f64 + ab * (obs.busy_ppm() as f64 - st.busy_ppm as f64);
    let busy = busy_s.round() as u64;
    let saturated = busy >= SATURATED_PPM;
    // Another tenant is active if it ran in this span or recently (its slowly decaying smoothed
    // share): one with a small share and long kernels is absent from most 20 ms spans, and a
    // burster that backed off only in the spans that showed it held the device oversubscribed
    // (A 20/100 beside D 60/100 with 20 ms kernels: D admitted 97 %, A got 17 % of the FIFO).
    let others_active =
        obs.others_ppm() >= OTHERS_ACTIVE_PPM || obs.others_present || others >= OTHERS_ACTIVE_PPM as f64;
    // A tenant that was not there before (a newcomer) on a saturated device: the hold is armed
    // (peak = the whole device, decaying), which takes the rate to the guarantee at once and gives
    // the room back gradually. A newcomer needs it: its first timing samples, queued behind our
    // work, put it in debt for a while, so what it uses at first says little about what it needs.
    // (Without per-process NVML only a clear share counts: the own share from charges is noisy.)
    let arrived = obs.others_present || obs.others_ppm() >= NEWCOMER_PPM;
    let newcomer = saturated && arrived && st.others_ppm < OTHERS_ACTIVE_PPM && !st.fresh();
    let decay = PEAK_DECAY_PER_S * PPM as f64 * obs.span_ns as f64 / 1e9;
    let peak = if newcomer { PPM as f64 } else { (st.peak_ppm as f64 - decay).max(0.0) };
    let mut nx = if saturated {
        if others_active { x * backoff(steps) } else { x }
    } else {
        // The span's own idle time, in steps and without a cap: the excess added is proportional
        // to the idle time the container saw, so containers whose spans differ in length or phase
        // add the same per idle ns. (With growth capped at 1.5 steps, the container whose watcher
        // ticked late more often, a quarter of its spans 25-40 ms long, grew less but backed off
        // in full: 47.8 / 45.1 with 20 ms kernels.)
        let idle_steps = (PPM - obs.busy_ppm()) as f64 * steps;
        x + GROWTH * idle_steps * lim.limit_ppm as f64 / PPM as f64
    };
    let room = PPM as f64 + PEAK_SLACK * PPM as f64 - peak - lim.limit_ppm as f64;
    nx = nx.min(room.max(0.0));
    State {
        rate_ppm: lim.clamp((lim.limit_ppm as f64 + nx.max(0.0)).round() as u64),
        others_ppm: others.round() as u64,
        peak_ppm: peak.round() as u64,
        busy_ppm: busy,
        unattributed: !obs.attributed,
    }
}

/// `BACKOFF^steps` without libm (`powf` would add a NEEDED libm.so.6 to the shim): whole steps
/// multiplied, the fraction interpolated.
fn backoff(steps: f64) -> f64 {
    let mut f = 1.0;
    let mut n = steps;
    while n >= 1.0 {
        f *= BACKOFF;
        n -= 1.0;
    }
    f * (1.0 - n * (1.0 - BACKOFF))
}

/// The effective rate the bucket refills at now.
pub fn effective_rate(w: &DeviceLimiterState, lim: Limits) -> u64 {
    if !lim.bursting() {
        return lim.limit_ppm;
    }
    lim.clamp(w.burst_rate_ppm.load(Relaxed) & RATE_MASK)
}

/// A step may be led this long after the previous one: a little less than [`STEP_NS`], so a
/// watcher on a 20 ms grid whose wake-up was quicker this time than last does not miss its turn
/// (the step would come 20 ms late, and one span twice as long).
pub const LEAD_AFTER_NS: u64 = STEP_NS * 3 / 4;

/// Leadership of the step due at `now_us` (wall µs): `Some(previous stamp)` to the one caller
/// that advanced the stamp, `None` to everybody else and before [`LEAD_AFTER_NS`] has passed.
pub fn try_lead(w: &DeviceLimiterState, now_us: u64) -> Option<u64> {
    let prev = w.burst_stamp_us.load(Acquire);
    if prev != 0 && now_us < prev.saturating_add(LEAD_AFTER_NS / 1000) && now_us >= prev {
        return None;
    }
    w.burst_stamp_us.compare_exchange(prev, now_us.max(1), AcqRel, Acquire).ok()
}

/// Publishes a step's state (by its leader). A lower rate also lowers the balance to the new cap
/// at once (the tokens saved at the higher rate would otherwise delay the yield).
pub fn publish(w: &DeviceLimiterState, st: State) {
    w.burst_signals.store(st.signals(), Relaxed);
    let new_rate_ppm = st.rate_ppm;
    let old = w.burst_rate_ppm.swap(st.rate_word(), AcqRel) & RATE_MASK;
    if old != 0 && new_rate_ppm < old {
        let cap = super::bucket::Params::for_rate(new_rate_ppm).cap_ns;
        w.balance_ns.fetch_min(cap, AcqRel);
    }
}

/// The ceiling word: the first process publishes its environment's ceiling (CAS from 0), and
/// from then on the region's word is the ceiling (operators may change it live). Returns the
/// ceiling in percent (0 = unset).
pub fn ceiling_pct(w: &DeviceLimiterState, env_pct: u64) -> u64 {
    let cur = w.sm_ceiling.load(Relaxed);
    if cur == 0 && env_pct != 0 {
        return match w.sm_ceiling.compare_exchange(0, env_pct, AcqRel, Relaxed) {
            Ok(_) => env_pct,
            Err(v) => v,
        };
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::super::words::new_state;
    use super::*;

    const MS: u64 = 1_000_000;

    fn obs(busy_pct: f64, own_pct: f64) -> Observation {
        let span = STEP_NS;
        Observation {
            span_ns: span,
            device_busy_ns: (span as f64 * busy_pct / 100.0) as u64,
            own_busy_ns: (span as f64 * own_pct / 100.0) as u64,
            others_present: false,
            attributed: true,
        }
    }

    #[test]
    fn backoff_per_steps() {
        assert_eq!(backoff(1.0), BACKOFF);
        assert!((backoff(3.0) - BACKOFF * BACKOFF * BACKOFF).abs() < 1e-12);
        let h = backoff(0.5);
        assert!(h < 1.0 && h > BACKOFF);
    }

    #[test]
    fn limits() {
        assert_eq!(Limits::new(0, 100), None);
        assert_eq!(Limits::new(100, 100), None);
        let l = Limits::new(30, 0).unwrap();
        assert!(!l.bursting());
        assert_eq!(l.ceiling_ppm, 300_000);
        assert!(!Limits::new(30, 20).unwrap().bursting());
        let l = Limits::new(30, 250).unwrap();
        assert_eq!(l.ceiling_ppm, MAX_RATE_PPM);
        assert_eq!(l.clamp(0), 300_000);
        assert_eq!(l.clamp(5), 300_000);
        assert_eq!(l.clamp(2 * PPM), MAX_RATE_PPM);
    }

    fn rate(r: u64) -> State {
        State { rate_ppm: r, ..State::default() }
    }

    #[test]
    fn no_ceiling_is_the_limit() {
        let l = Limits::new(30, 0).unwrap();
        assert_eq!(step(rate(900_000), l, obs(10.0, 10.0)).rate_ppm, 300_000);
        let st = new_state();
        st.burst_rate_ppm.store(900_000, Relaxed);
        assert_eq!(effective_rate(&st, l), 300_000);
    }

    #[test]
    fn alone_grows_to_the_ceiling() {
        let l = Limits::new(30, 100).unwrap();
        let mut s = rate(l.limit_ppm);
        // Alone and saturating: own = min(r, 100 %), idle = the rest.
        for _ in 0..100 {
            let own = s.rate_ppm as f64 / 1e4;
            s = step(s, l, obs(own, own));
        }
        assert!(s.rate_ppm >= 970_000, "{s:?}");
        // Saturated by ourselves: held, not backed off.
        assert_eq!(step(s, l, obs(100.0, 100.0)).rate_ppm, s.rate_ppm);
        // A ceiling below 100 is respected.
        let l = Limits::new(30, 60).unwrap();
        let mut s = rate(l.limit_ppm);
        for _ in 0..100 {
            let own = s.rate_ppm as f64 / 1e4;
            s = step(s, l, obs(own, own));
        }
        assert_eq!(s.rate_ppm, 600_000);
    }

    #[test]
    fn yields_within_100ms_when_another_tenant_appears() {
        let l = Limits::new(30, 100).unwrap();
        // Alone at the ceiling (signals say: saturated by ourselves).
        let mut s = rate(l.limit_ppm);
        for _ in 0..100 {
            let own = s.rate_ppm as f64 / 1e4;
            s = step(s, l, obs(own, own));
        }
        assert!(s.rate_ppm >= 960_000, "{s:?}");
        // A newcomer that barely runs yet (its first kernels queued behind ours): back to the
        // guarantee in one step.
        let n = step(s, l, Observation { others_present: true, ..obs(100.0, 99.5) });
        assert_eq!(n.rate_ppm, l.limit_ppm, "{n:?}");
        // The room comes back gradually while the newcomer is quiet (idle device) ...
        let mut q = n;
        for _ in 0..10 {
            q = step(q, l, obs(35.0, 30.0));
        }
        assert!(q.rate_ppm <= l.limit_ppm + 100_000, "200 ms after: {q:?}");
        // ... and is all back within about 2 s.
        for _ in 0..100 {
            let own = q.rate_ppm as f64 / 1e4;
            q = step(q, l, obs(own, own));
        }
        assert!(q.rate_ppm >= 950_000, "{q:?}");
        // A tenant already there (a co-burster): the gradual back-off, 2/3 of the excess in 100 ms.
        let mut c = State { others_ppm: 300_000, busy_ppm: PPM, ..rate(PPM) };
        for _ in 0..5 {
            c = step(c, l, obs(100.0, 70.0));
        }
        assert!(c.rate_ppm - l.limit_ppm <= 700_000 / 3 && c.rate_ppm > l.limit_ppm, "{c:?}");
        // Never below the guarantee.
        for _ in 0..50 {
            c = step(c, l, obs(100.0, 30.0));
        }
        assert!(c.rate_ppm - l.limit_ppm < 100, "{c:?}");
    }

    #[test]
    fn a_newcomer_is_seen_although_our_own_work_counted_as_others_at_first() {
        let l = Limits::new(30, 100).unwrap();
        // Our PID unknown for the first 200 ms: all the device's busy time looks like others'.
        let mut s = rate(l.limit_ppm);
        for _ in 0..10 {
            s = step(s, l, Observation { others_present: true, attributed: false, ..obs(97.0, 0.0) });
        }
        assert!(s.unattributed && s.others_ppm > 500_000, "{s:?}");
        // Then alone and known: the share learnt before is dropped, not decayed over seconds.
        s = step(s, l, obs(97.0, 97.0));
        assert_eq!(s.others_ppm, 0, "{s:?}");
        assert!(!s.unattributed);
        for _ in 0..60 {
            let own = s.rate_ppm as f64 / 1e4;
            s = step(s, l, obs(own.max(97.0), own.max(97.0)));
        }
        // 1.2 s later a newcomer arrives: the hold, at once.
        let n = step(s, l, Observation { others_present: true, ..obs(100.0, 99.0) });
        assert_eq!((n.peak_ppm, n.rate_ppm), (PPM, l.limit_ppm), "{n:?}");
        // Without the reset the same history still had > 3 % of "others" then: no hold.
        let mut s = rate(l.limit_ppm);
        for _ in 0..10 {
            s = step(s, l, Observation { others_present: true, attributed: false, ..obs(97.0, 0.0) });
        }
        s.unattributed = false;
        for _ in 0..61 {
            s = step(s, l, obs(97.0, 97.0));
        }
        assert!(s.others_ppm >= OTHERS_ACTIVE_PPM, "{s:?}");
        assert_eq!(step(s, l, Observation { others_present: true, ..obs(100.0, 99.0) }).peak_ppm, 0);
    }

    #[test]
    fn a_sparse_co_tenant_is_not_a_newcomer() {
        // A co-burster with 20 ms kernels and a small share: absent from most 20 ms spans.
        let l = Limits::new(60, 100).unwrap();
        let mut s = State { others_ppm: 200_000, busy_ppm: PPM, ..rate(750_000) };
        for _ in 0..6 {
            s = step(s, l, obs(100.0, 100.0));
        }
        assert!(s.others_ppm >= OTHERS_ACTIVE_PPM, "{s:?}");
        // Between its kernels it still counts as active: the saturated burster backs off.
        assert!(s.rate_ppm < 750_000, "{s:?}");
        let before = s.rate_ppm;
        // Its next kernel runs: no hold, the ordinary back-off.
        let n = step(s, l, Observation { others_present: true, ..obs(100.0, 0.0) });
        assert_eq!(n.peak_ppm, 0, "{n:?}");
        assert!(n.rate_ppm > l.limit_ppm && n.rate_ppm < before, "{n:?}");
        // Gone for a second: then it is a newcomer again (and meanwhile the burster held, then
        // grew in the idle spans).
        for _ in 0..50 {
            s = step(s, l, obs(100.0, 100.0));
        }
        assert!(s.others_ppm < OTHERS_ACTIVE_PPM, "{s:?}");
        let n = step(s, l, Observation { others_present: true, ..obs(100.0, 99.0) });
        assert_eq!(n.peak_ppm, PPM, "{n:?}");
    }

    /// Two bursting containers with a shared device model (capacity 100 %, each uses its rate
    /// scaled down proportionally when oversubscribed): excesses converge to the guarantees' ratio.
    fn pair(l1: u64, l2: u64, steps: usize) -> (f64, f64) {
        let (a, b) = (Limits::new(l1, 100).unwrap(), Limits::new(l2, 100).unwrap());
        let (mut ra, mut rb) = (rate(PPM), rate(a.limit_ppm));
        let (mut sa, mut sb) = (0.0, 0.0);
        for i in 0..steps {
            let tot = (ra.rate_ppm + rb.rate_ppm) as f64;
            let k = if tot > PPM as f64 { PPM as f64 / tot } else { 1.0 };
            let (ua, ub) = (ra.rate_ppm as f64 * k / 1e4, rb.rate_ppm as f64 * k / 1e4);
            if i >= steps / 2 {
                sa += ua;
                sb += ub;
            }
            ra = step(ra, a, obs(ua + ub, ua));
            rb = step(rb, b, obs(ua + ub, ub));
        }
        let n = (steps - steps / 2) as f64;
        (sa / n, sb / n)
    }

    #[test]
    fn two_bursting_share_in_proportion_to_guarantees() {
        let (a, c) = pair(30, 30, 400);
        assert!((a - 50.0).abs() < 3.0 && (c - 50.0).abs() < 3.0, "{a} {c}");
        assert!(a + c > 95.0);
        let (a, d) = pair(20, 60, 400);
        assert!((a - 25.0).abs() < 3.0 && (d - 75.0).abs() < 3.0, "{a} {d}");
    }

    #[test]
    fn rate_word_carries_the_rate_and_effective_rate_masks_it() {
        let st = new_state();
        let w = &st;
        publish(w, State { rate_ppm: 612_345, ..State::default() });
        assert_eq!(State::load(w).rate_ppm, 612_345);
        assert_eq!(effective_rate(w, Limits::new(30, 100).unwrap()), 612_345);
        // Bits above the rate (a word written by another build) are ignored.
        w.burst_rate_ppm.store(0xdead_beef << 20 | 400_000, Relaxed);
        assert_eq!(effective_rate(w, Limits::new(30, 100).unwrap()), 400_000);
    }

    #[test]
    fn long_spans_count_as_several_steps_and_stale_spans_as_none() {
        let l = Limits::new(30, 100).unwrap();
        let one = step(rate(PPM), l, obs(100.0, 90.0));
        let long = step(
            rate(PPM),
            l,
            Observation {
                span_ns: 3 * STEP_NS,
                device_busy_ns: 3 * STEP_NS,
                own_busy_ns: 27 * STEP_NS / 10,
                others_present: false,
                attributed: true,
            },
        );
        assert!(long.rate_ppm < one.rate_ppm, "{long:?} {one:?}");
        assert_eq!(
            step(rate(PPM), l, Observation { span_ns: 2 * MAX_SPAN_NS, ..Observation::default() }).rate_ppm,
            MAX_RATE_PPM
        );
    }

    #[test]
    fn leadership_and_publish() {
        let st = new_state();
        let w = &st;
        assert_eq!(try_lead(w, 1_000_000), Some(0));
        assert_eq!(try_lead(w, 1_000_000 + 5_000), None, "within a step");
        assert_eq!(try_lead(w, 1_000_000 + 20_000), Some(1_000_000));
        // A clock far behind (wall clock stepped back) takes the lead again.
        assert_eq!(try_lead(w, 10), Some(1_020_000));
        // Lowering the rate lowers the balance to the new cap.
        w.balance_ns.store(50 * MS as i64, Relaxed);
        publish(w, rate(PPM));
        assert_eq!(w.balance_ns.load(Relaxed), 50 * MS as i64);
        publish(w, rate(300_000));
        assert_eq!(w.balance_ns.load(Relaxed), 15 * MS as i64);
    }

    #[test]
    fn ceiling_word_is_published_once_and_then_authoritative() {
        let st = new_state();
        let w = &st;
        assert_eq!(ceiling_pct(w, 0), 0);
        assert_eq!(ceiling_pct(w, 80), 80);
        assert_eq!(ceiling_pct(w, 100), 80, "the region wins");
        w.sm_ceiling.store(60, Relaxed); // an operator's live change
        assert_eq!(ceiling_pct(w, 80), 60);
    }
}
