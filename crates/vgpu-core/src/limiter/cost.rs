//! Cost prediction: how much device time a launch will take, learnt from sparse timing samples.
//! Reasoning and figures: docs/design.md "Cost prediction".
//!
//! * A launch is charged a **prediction** per signature ([`Sig`]: function and launch shape, or a
//!   `CUgraphExec`) before it runs: the [`Estimator`]'s mean of the *low cluster* of recent samples
//!   (a sample is queue wait + duration, so inflated samples lie above the cluster), else a
//!   **guess** from confirmed estimates (per-block time of another grid, the latest estimate).
//! * **Accounts.** Admitted launches join their signature's open account; each sample re-prices
//!   it at the new estimate ([`REPRICE_LAUNCHES`] launches' worth at most) and returns the debt or
//!   refund; a clean sample that confirms the estimate closes it.
//! * **Launches of unknown cost** (no basis for a guess) are one at a time per process
//!   ([`Prediction::wait_for_first`]) and per container ([`claim_first`]), so first samples do not
//!   queue behind each other.

pub mod lowcost;

use lowcost::Low;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire};

/// Samples kept per signature.
pub const RING: usize = 32;
/// The floor of the estimate: smallest sample per bucket, over this many buckets of this length.
pub const FLOOR_BUCKETS: usize = 16;
pub const FLOOR_BUCKET_NS: u64 = 1_000_000_000;
/// A due sample is deferred while the launch stream is idle, at most this many times in a row
/// (a launch behind our own queued work measures its own duration; one on an idle stream may
/// first wait behind other processes' work).
pub const MAX_IDLE_DEFERS: u8 = 3;
/// ... for kernels shorter than this (longer ones are sampled at every due launch: their samples
/// are few and the event pair costs nothing relative to them).
pub const DEFER_BELOW_NS: u64 = 1_000_000;
/// The low cluster: samples ≤ min × (1 + CLUSTER_PPM/1e6).
pub const CLUSTER_PPM: u64 = 100_000;
/// Samples older than this are dropped (the newest [`KEEP_MIN`] always stay).
pub const MAX_AGE_NS: u64 = 5_000_000_000;
pub const KEEP_MIN: usize = 4;
/// Sample every launch until a signature has this many samples.
pub const WARMUP: usize = 4;
/// Then at most one sample per signature per this interval.
pub const SAMPLE_INTERVAL_NS: u64 = 5_000_000;
/// And at most one sample start per process per this gap (while warm).
pub const MIN_SAMPLE_GAP_NS: u64 = 250_000;
/// Guess for the first kernel ever seen.
pub const INITIAL_GUESS_NS: u64 = 100_000;
/// Samples are clamped into this range (a broken timer must not produce absurd debts).
pub const MIN_SAMPLE_NS: u64 = 500;
pub const MAX_SAMPLE_NS: u64 = 10_000_000_000;
/// One sample re-prices the open account by at most this many launches at the new estimate, or
/// [`REPRICE_MIN_NS`] (what is left is charged or refunded by the next samples).
pub const REPRICE_LAUNCHES: u64 = 2;
pub const REPRICE_MIN_NS: u64 = 20_000_000;
/// An account's amounts are kept below this (ns), so its signed arithmetic cannot overflow.
const ACCT_MAX: u64 = i64::MAX as u64 / 4;
/// Entries kept; beyond it, entries unused for [`EVICT_AGE_NS`] are dropped.
pub const MAX_ENTRIES: usize = 4096;
pub const EVICT_AGE_NS: u64 = 10_000_000_000;
/// A claim of the container's first-sample gate lapses after this (a holder that died or whose
/// kernel runs long does not hold the others' first launches for longer).
pub const FIRST_GATE_HOLD_NS: u64 = 500_000_000;
/// A signature is young in a process for this long after its first prediction: the container's
/// lowest cost of its shape caps even a confirmed estimate ([`lowcost`]).
pub const YOUNG_NS: u64 = 2_000_000_000;
/// ... then the cap rises linearly from the container's lowest cost to the process's own
/// estimate over this long.
pub const RAMP_NS: u64 = 8_000_000_000;

/// Claims the container's first-sample gate (`gate`: a word shared by its processes holding the
/// current holder's deadline, 0 = free) for a launch of unknown cost at `now`. `Some(token)`: ours
/// (release it with [`release_first`] when the sample is in); `None`: another process's unknown
/// launch is in flight, wait for it (as for [`Prediction::wait_for_first`]).
pub fn claim_first(gate: &AtomicU64, now: u64) -> Option<u64> {
    let cur = gate.load(Acquire);
    if cur != 0 && cur > now && cur <= now.saturating_add(FIRST_GATE_HOLD_NS) {
        return None;
    }
    let token = now.saturating_add(FIRST_GATE_HOLD_NS).max(1);
    gate.compare_exchange(cur, token, AcqRel, Acquire).ok().map(|_| token)
}

/// Frees the gate if `token` still holds it.
pub fn release_first(gate: &AtomicU64, token: u64) {
    let _ = gate.compare_exchange(token, 0, AcqRel, Acquire);
}

pub const KIND_KERNEL: u8 = 0;
pub const KIND_GRAPH: u8 = 1;

/// What a launch is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sig {
    pub kind: u8,
    /// `CUfunction` or `CUgraphExec` address.
    pub obj: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shmem: u32,
}

impl Sig {
    pub fn kernel(func: u64, grid: [u32; 3], block: [u32; 3], shmem: u32) -> Sig {
        Sig { kind: KIND_KERNEL, obj: func, grid, block, shmem }
    }

    pub fn graph(exec: u64) -> Sig {
        Sig { kind: KIND_GRAPH, obj: exec, grid: [0; 3], block: [0; 3], shmem: 0 }
    }

    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| g.max(1) as u64).product()
    }
}

/// Low-cluster estimator: the recent samples within [`CLUSTER_PPM`] of a floor, where the floor
/// is the smallest sample of the last [`FLOOR_BUCKETS`] × [`FLOOR_BUCKET_NS`] (so a stretch of
/// contended samples longer than the ring does not lift the estimate).
#[derive(Clone, Debug, Default)]
pub struct Estimator {
    vals: [u64; RING],
    at: [u64; RING],
    /// Samples pushed (slot of sample i is i % RING).
    n: usize,
    /// (bucket epoch, smallest sample in it).
    floor: [(u64, u64); FLOOR_BUCKETS],
    est: Option<u64>,
    /// Upper edge of the cluster and how many recent samples lie in it.
    lim: u64,
    cluster_n: u32,
}

impl Estimator {
    pub fn push(&mut self, v: u64, now: u64) {
        let v = v.clamp(MIN_SAMPLE_NS, MAX_SAMPLE_NS);
        let i = self.n % RING;
        self.vals[i] = v;
        self.at[i] = now;
        self.n += 1;
        let ep = now / FLOOR_BUCKET_NS + 1; // 0 = empty bucket
        let b = &mut self.floor[(ep % FLOOR_BUCKETS as u64) as usize];
        if b.0 != ep {
            *b = (ep, v);
        } else {
            b.1 = b.1.min(v);
        }
        self.recompute(now);
    }

    fn live(&self, now: u64) -> impl Iterator<Item = u64> + '_ {
        let k = self.n.min(RING);
        (0..k).filter_map(move |j| {
            // j = 0 is the newest.
            let i = (self.n - 1 - j) % RING;
            let fresh = now.saturating_sub(self.at[i]) <= MAX_AGE_NS;
            (j < KEEP_MIN || fresh).then_some(self.vals[i])
        })
    }

    fn recompute(&mut self, now: u64) {
        let ep = now / FLOOR_BUCKET_NS + 1;
        let oldest = ep.saturating_sub(FLOOR_BUCKETS as u64 - 1);
        let bucket_min = self.floor.iter().filter(|(e, _)| *e != 0 && *e >= oldest && *e <= ep).map(|(_, v)| *v).min();
        let Some(floor) = self.live(now).min().into_iter().chain(bucket_min).min() else {
            self.est = None;
            return;
        };
        let lim = floor + (floor as u128 * CLUSTER_PPM as u128 / 1_000_000) as u64;
        let (mut sum, mut cnt) = (0u128, 0u128);
        for v in self.live(now).filter(|&v| v <= lim) {
            sum += v as u128;
            cnt += 1;
        }
        self.est = Some(sum.checked_div(cnt).map_or(floor, |m| m as u64));
        self.lim = lim;
        self.cluster_n = cnt as u32;
    }

    /// At least two recent samples agree on the estimate (within the cluster band). Inflated
    /// samples wait for different lengths and rarely agree; clean ones do.
    pub fn confirmed(&self) -> bool {
        self.cluster_n >= 2
    }

    /// Is `v` a sample inside the current cluster?
    pub fn in_cluster(&self, v: u64) -> bool {
        self.est.is_some() && v.clamp(MIN_SAMPLE_NS, MAX_SAMPLE_NS) <= self.lim
    }

    pub fn value(&self) -> Option<u64> {
        self.est
    }

    pub fn count(&self) -> usize {
        self.n
    }
}

#[derive(Clone, Debug, Default)]
struct Entry {
    est: Estimator,
    pending: bool,
    last_sample_at: u64,
    /// The open account: launches admitted since it opened and what they have been charged so far
    /// (including earlier reconciliations). Every sample re-prices the account at the new
    /// estimate; the account closes when a clean sample confirms the estimate.
    acct_n: u64,
    acct_charged: u64,
    last_use: u64,
    idle_defers: u8,
    /// A first sample (no estimate, no basis for a guess) is in flight.
    first_pending: bool,
    /// The latest prediction without an estimate had a basis (a confirmed grid of the function or
    /// the container's lowest cost of the shape).
    based: bool,
    /// First prediction (CLOCK_MONOTONIC).
    born: u64,
}

/// The prediction for one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prediction {
    /// ns of device time to charge now.
    pub cost_ns: u64,
    /// Measure this launch (record a timing event pair around it), then call
    /// [`CostModel::sample_started`] (or nothing if recording failed).
    pub sample: bool,
    /// The cost is a guess (no sample of this signature yet).
    pub guessed: bool,
    /// The first sample of this signature is still in flight and there is no basis for a guess:
    /// the caller should wait (bounded) for it before launching more of this signature.
    pub wait_for_first: bool,
    /// No estimate and no basis for the guess: this launch would take the signature's first
    /// sample, so the container's first-sample gate applies ([`claim_first`]).
    pub unknown: bool,
}

/// Per-process cost model.
#[derive(Debug)]
pub struct CostModel {
    map: HashMap<Sig, Entry>,
    /// Per (kind, function): picoseconds per block of the latest estimate.
    per_block_ps: HashMap<(u8, u64), u64>,
    last_estimate: u64,
    last_sample_start: u64,
    /// Signatures whose first sample is in flight with no basis for their guess.
    unknown_in_flight: u32,
    /// Token of the container's first-sample gate while this process holds it (0 = not).
    gate_token: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel::new()
    }
}

impl CostModel {
    pub fn new() -> CostModel {
        CostModel {
            map: HashMap::new(),
            per_block_ps: HashMap::new(),
            last_estimate: INITIAL_GUESS_NS,
            last_sample_start: 0,
            unknown_in_flight: 0,
            gate_token: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Current estimate of a signature (None before its first sample).
    pub fn estimate(&self, sig: &Sig) -> Option<u64> {
        self.map.get(sig).and_then(|e| e.est.value())
    }

    fn guess(&self, sig: &Sig) -> (u64, bool) {
        if sig.kind == KIND_KERNEL
            && let Some(&ps) = self.per_block_ps.get(&(sig.kind, sig.obj))
        {
            let g = (ps as u128 * sig.blocks() as u128 / 1000) as u64;
            return (g.clamp(MIN_SAMPLE_NS, MAX_SAMPLE_NS), true);
        }
        (self.last_estimate, false)
    }

    /// The most an estimate of `sig` is charged (samples only over-state, so a lower bound from
    /// elsewhere is the better one). An unconfirmed estimate: the container's lowest cost of the
    /// shape and the per-block time of a confirmed grid. A confirmed one: the container's value
    /// while the signature is young here ([`YOUNG_NS`]: on a FIFO device two samples may agree on
    /// a queue), then rising to the own estimate over [`RAMP_NS`] (lifted at once, the re-priced
    /// account became a debt that stalled the container). The confirming sample re-prices the
    /// whole account at the own estimate, so a cap that was too low is paid back; two kernels of
    /// one shape under-charge the slower one for `YOUNG_NS + RAMP_NS / 2` of its time at most.
    fn cap(&self, sig: &Sig, low: Option<Low>, now: u64) -> Option<u64> {
        if let Some(e) = self.map.get(sig)
            && e.est.confirmed()
        {
            let age = now.saturating_sub(e.born);
            let own = e.est.value().unwrap_or(0);
            return low.and_then(|l| match age.checked_sub(YOUNG_NS) {
                None => Some(l.ns),
                Some(old) if old < RAMP_NS && own > l.ns => {
                    Some(l.ns + ((own - l.ns) as u128 * old as u128 / RAMP_NS as u128) as u64)
                }
                Some(_) => None,
            });
        }
        let pb = match self.guess(sig) {
            (g, true) => Some(g),
            _ => None,
        };
        match (low.map(|l| l.ns), pb) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn evict(&mut self, now: u64) {
        if self.map.len() < MAX_ENTRIES {
            return;
        }
        self.map.retain(|_, e| e.pending || now.saturating_sub(e.last_use) < EVICT_AGE_NS);
        if self.map.len() >= MAX_ENTRIES {
            self.map.retain(|_, e| e.pending);
        }
        self.unknown_in_flight = self.map.values().filter(|e| e.first_pending).count() as u32;
        if self.per_block_ps.len() >= MAX_ENTRIES {
            self.per_block_ps.clear();
        }
    }

    /// Prediction for a launch of `sig` at `now`, given the container's lowest cost of its shape
    /// ([`lowcost`]): an unconfirmed (or young) estimate is charged at most that, and a signature
    /// without an estimate is guessed at a *confirmed* one (a basis: no first-sample wait, no
    /// gate). Nothing is recorded until the launch is admitted ([`CostModel::admitted`]).
    pub fn predict(&mut self, sig: Sig, now: u64, low: Option<Low>) -> Prediction {
        if !self.map.contains_key(&sig) {
            self.evict(now);
        }
        let gap_ok = now.saturating_sub(self.last_sample_start) >= MIN_SAMPLE_GAP_NS;
        let cap = self.cap(&sig, low, now);
        let (guess, based) = match (self.guess(&sig), low) {
            ((g, true), _) => (g, true),
            (_, Some(l)) if l.confirmed => (l.ns, true),
            (g, _) => g,
        };
        let e = self.map.entry(sig).or_default();
        if e.last_use == 0 {
            e.born = now;
        }
        e.last_use = now;
        match e.est.value() {
            Some(v) => {
                let v = cap.map_or(v, |l| l.min(v));
                let due = if e.est.count() < WARMUP {
                    true
                } else {
                    gap_ok && now.saturating_sub(e.last_sample_at) >= SAMPLE_INTERVAL_NS
                };
                Prediction {
                    cost_ns: v,
                    sample: !e.pending && due,
                    guessed: false,
                    wait_for_first: false,
                    unknown: false,
                }
            }
            None => {
                e.based = based;
                // At most one launch of unknown cost in flight per process: a second unknown
                // signature also waits for the first one's sample.
                let wait = !based && (e.pending || (self.unknown_in_flight > 0 && !e.first_pending));
                Prediction {
                    cost_ns: guess,
                    sample: !e.pending,
                    guessed: true,
                    wait_for_first: wait,
                    unknown: !based && !wait && !e.pending,
                }
            }
        }
    }

    /// A launch predicted as `p` was admitted and charged `p.cost_ns`: it joins the signature's
    /// open account, re-priced when the next sample arrives.
    pub fn admitted(&mut self, sig: Sig, p: &Prediction) {
        let e = self.map.entry(sig).or_default();
        e.acct_n += 1;
        e.acct_charged = e.acct_charged.saturating_add(p.cost_ns);
    }

    /// An admitted launch did not happen after all (the driver refused it): out of its account.
    pub fn cancelled(&mut self, sig: Sig, p: &Prediction) {
        if let Some(e) = self.map.get_mut(&sig)
            && e.acct_n > 0
        {
            e.acct_n -= 1;
            e.acct_charged = e.acct_charged.saturating_sub(p.cost_ns);
        }
    }

    /// A sample is due (`Prediction::sample`) and the launch stream is `idle`: should it wait for
    /// a launch that queues behind our own work? (Never during warm-up; at most
    /// [`MAX_IDLE_DEFERS`] times in a row, so synchronous workloads are still sampled.)
    pub fn defer_sample(&mut self, sig: Sig, idle: bool) -> bool {
        let Some(e) = self.map.get_mut(&sig) else { return false };
        let short = e.est.value().is_some_and(|v| v < DEFER_BELOW_NS);
        if !idle || !short || e.est.count() < WARMUP || e.idle_defers >= MAX_IDLE_DEFERS {
            e.idle_defers = 0;
            return false;
        }
        e.idle_defers += 1;
        true
    }

    /// Takes the container's first-sample gate (`word`, [`claim_first`]) for a launch of unknown
    /// cost, or holds it already; false: another process's launch of unknown cost is in flight.
    pub fn take_gate(&mut self, word: &AtomicU64, now: u64) -> bool {
        if self.gate_token == 0 {
            self.gate_token = claim_first(word, now).unwrap_or(0);
        }
        self.gate_token != 0
    }

    /// Frees the gate once this process's launches of unknown cost have all been measured (or
    /// their samples failed).
    pub fn release_gate(&mut self, word: &AtomicU64) {
        if self.gate_token != 0 && self.unknown_in_flight == 0 {
            release_first(word, std::mem::take(&mut self.gate_token));
        }
    }

    /// The timing events of a sample for `sig` were recorded.
    pub fn sample_started(&mut self, sig: Sig, now: u64) {
        let based = self.guess(&sig).1;
        let e = self.map.entry(sig).or_default();
        if e.est.value().is_none() && !based && !e.based && !e.first_pending {
            e.first_pending = true;
            self.unknown_in_flight += 1;
        }
        e.pending = true;
        e.last_sample_at = now;
        self.last_sample_start = now;
    }

    /// This process's estimate of `sig` and whether its samples confirm it (what it offers to the
    /// container's lowest costs, [`lowcost::offer`]).
    pub fn shared_estimate(&self, sig: &Sig) -> Option<(u64, bool)> {
        let e = self.map.get(sig)?;
        e.est.value().map(|v| (v, e.est.confirmed()))
    }

    /// Is a sample of `sig` in flight?
    pub fn pending(&self, sig: &Sig) -> bool {
        self.map.get(sig).is_some_and(|e| e.pending)
    }

    /// A sample could not be completed (event error, context gone).
    pub fn sample_failed(&mut self, sig: Sig) {
        if let Some(e) = self.map.get_mut(&sig) {
            e.pending = false;
            if e.first_pending {
                e.first_pending = false;
                self.unknown_in_flight = self.unknown_in_flight.saturating_sub(1);
            }
        }
    }

    /// A sample of `sig` measured `measured_ns`. Returns the reconciliation to charge the bucket
    /// (ns; negative = refund): the open account re-priced at the new estimate, at most
    /// [`REPRICE_LAUNCHES`] launches' worth per sample, and while this process's estimate is
    /// unconfirmed at most at the container's lowest cost `low`; the confirming sample re-prices
    /// it at the process's own estimate (so nothing charged too low is lost).
    pub fn sample_done(&mut self, sig: Sig, measured_ns: u64, now: u64, low: Option<Low>) -> i64 {
        let e = self.map.entry(sig).or_default();
        e.pending = false;
        if e.first_pending {
            e.first_pending = false;
            self.unknown_in_flight = self.unknown_in_flight.saturating_sub(1);
        }
        e.est.push(measured_ns, now);
        // After the push: the sample may have confirmed the estimate.
        let cap = self.cap(&sig, low, now);
        let e = self.map.entry(sig).or_default();
        let own = e.est.value().unwrap_or(measured_ns);
        let est = cap.map_or(own, |l| l.min(own));
        let target = (e.acct_n as u128 * est as u128).min(ACCT_MAX as u128) as i64;
        let charged = e.acct_charged.min(ACCT_MAX) as i64;
        let owed = target - charged;
        // At most a couple of launches per sample: the rest stays owed in the account for the next
        // samples, so a re-pricing of many launches (an estimate that changes after a long open
        // account) reaches the bucket and the correction's window gradually.
        let bound = est.saturating_mul(REPRICE_LAUNCHES).clamp(REPRICE_MIN_NS, ACCT_MAX) as i64;
        let delta = owed.clamp(-bound, bound);
        e.acct_charged = (charged + delta) as u64;
        if !e.est.confirmed() {
            return delta;
        }
        if e.est.in_cluster(measured_ns) && delta == owed {
            // A clean sample confirms the estimate: what was charged so far stands.
            e.acct_n = 0;
            e.acct_charged = 0;
        }
        self.last_estimate = est;
        if sig.kind == KIND_KERNEL {
            let ps = (est as u128 * 1000 / sig.blocks() as u128) as u64;
            self.per_block_ps.insert((sig.kind, sig.obj), ps.max(1));
        }
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    fn k(grid: u32) -> Sig {
        Sig::kernel(0x1000, [grid, 1, 1], [128, 1, 1], 0)
    }

    #[test]
    fn low_cluster_ignores_inflated_samples() {
        let mut e = Estimator::default();
        let t = 10 * MS;
        for v in [120, 50, 300, 51, 49, 200, 50] {
            e.push(v * US, t);
        }
        // Cluster: 49, 50, 50, 51 (<= 49 × 1.1 = 53.9) -> 50.
        assert_eq!(e.value(), Some(50 * US));
    }

    #[test]
    fn floor_survives_a_stretch_of_contended_samples() {
        let mut e = Estimator::default();
        e.push(50 * US, 0);
        // 40 contended samples in a row (more than the ring), within the floor's horizon.
        for i in 1..=40u64 {
            e.push((100 + i) * US, i * MS);
        }
        assert_eq!(e.value(), Some(50 * US));
        // A clean sample joins the cluster.
        e.push(52 * US, 41 * MS);
        assert_eq!(e.value(), Some(52 * US));
    }

    #[test]
    fn idle_stream_samples_are_deferred_after_warmup() {
        let mut m = CostModel::new();
        let s = k(50);
        m.predict(s, 0, None);
        // Warm-up: never deferred.
        assert!(!m.defer_sample(s, true));
        for i in 0..WARMUP as u64 {
            m.sample_started(s, i);
            m.sample_done(s, 50 * US, i + 1, None);
        }
        for _ in 0..MAX_IDLE_DEFERS {
            assert!(m.defer_sample(s, true));
        }
        assert!(!m.defer_sample(s, true)); // then sampled anyway
        assert!(m.defer_sample(s, true));
        assert!(!m.defer_sample(s, false)); // a busy stream is sampled at once
    }

    #[test]
    fn old_samples_age_out_but_newest_stay() {
        let mut e = Estimator::default();
        for i in 0..RING as u64 {
            e.push(10 * US, i);
        }
        // The kernel got slower; once the floor horizon has passed the old fast samples are gone.
        let later = (FLOOR_BUCKETS as u64 + 1) * FLOOR_BUCKET_NS + MAX_AGE_NS;
        for i in 0..KEEP_MIN as u64 {
            e.push(20 * US, later + i);
        }
        assert_eq!(e.value(), Some(20 * US));
        // Even much later the newest KEEP_MIN samples still give an estimate.
        e.recompute(later * 10);
        assert_eq!(e.value(), Some(20 * US));
    }

    #[test]
    fn first_launches_are_guessed_then_reconciled() {
        let mut m = CostModel::new();
        let t = MS;
        let p = m.predict(k(50), t, None);
        assert!(p.guessed && p.sample && !p.wait_for_first);
        assert_eq!(p.cost_ns, INITIAL_GUESS_NS);
        // A prediction that is not admitted (the launch waited) records nothing.
        let _ = m.predict(k(50), t, None);
        m.admitted(k(50), &p);
        m.sample_started(k(50), t);
        // While the first sample is in flight and there is no basis for a guess: wait.
        let p2 = m.predict(k(50), t + 1, None);
        assert!(p2.wait_for_first && !p2.sample);
        assert_eq!(p2.cost_ns, INITIAL_GUESS_NS);
        // The wait timed out: launched with the guess.
        m.admitted(k(50), &p2);
        // Measured 20 ms: two launches charged 100 µs each -> 2 × 20 ms − 200 µs more debt.
        let d = m.sample_done(k(50), 20 * MS, t + 30 * MS, None);
        assert_eq!(d, (40 * MS - 200 * US) as i64);
        let p3 = m.predict(k(50), t + 31 * MS, None);
        assert_eq!(p3.cost_ns, 20 * MS);
        assert!(!p3.guessed);
    }

    #[test]
    fn one_unknown_launch_in_flight_per_process() {
        let mut m = CostModel::new();
        let (a, b) = (k(50), Sig::kernel(0x2000, [20000, 1, 1], [128, 1, 1], 0));
        let pa = m.predict(a, 0, None);
        m.admitted(a, &pa);
        m.sample_started(a, 0);
        // Another unknown signature waits for a's first sample...
        assert!(m.predict(b, 1, None).wait_for_first);
        m.sample_done(a, 50 * US, 100 * US, None);
        // ... and goes once it is in.
        let pb = m.predict(b, 200 * US, None);
        assert!(!pb.wait_for_first && pb.sample);
        m.admitted(b, &pb);
        m.sample_started(b, 200 * US);
        assert!(m.predict(Sig::kernel(0x3000, [1, 1, 1], [1, 1, 1], 0), 300 * US, None).wait_for_first);
        m.sample_failed(b);
        assert!(!m.predict(Sig::kernel(0x3000, [1, 1, 1], [1, 1, 1], 0), 400 * US, None).wait_for_first);
    }

    #[test]
    fn one_unknown_launch_in_flight_per_container() {
        let gate = AtomicU64::new(0);
        // Process 1 takes the gate for its first (unknown) launch; process 2 must wait.
        let (mut m1, mut m2) = (CostModel::new(), CostModel::new());
        let p1 = m1.predict(k(50), MS, None);
        assert!(p1.unknown && !p1.wait_for_first);
        assert!(m1.take_gate(&gate, MS));
        let t1 = gate.load(Acquire);
        assert!(m1.take_gate(&gate, MS + 1), "held already");
        assert!(m2.predict(k(50), MS, None).unknown);
        assert!(!m2.take_gate(&gate, MS + 1));
        // Admitted and measured: released only once its sample is in.
        m1.admitted(k(50), &p1);
        m1.sample_started(k(50), MS);
        m1.release_gate(&gate);
        assert_eq!(gate.load(Acquire), t1);
        m1.sample_done(k(50), 50 * US, 2 * MS, None);
        m1.release_gate(&gate);
        assert_eq!(gate.load(Acquire), 0);
        // A known signature is not gated; process 2 gets the gate now.
        assert!(!m1.predict(k(50), 3 * MS, None).unknown);
        let t2 = claim_first(&gate, 3 * MS).unwrap();
        // A holder that never releases (died) stops holding after FIRST_GATE_HOLD_NS; a stale
        // token does not free a newer claim.
        assert_eq!(claim_first(&gate, 3 * MS + FIRST_GATE_HOLD_NS - 1), None);
        let t3 = claim_first(&gate, 3 * MS + FIRST_GATE_HOLD_NS).unwrap();
        release_first(&gate, t2);
        assert_eq!(gate.load(Acquire), t3);
        // A deadline far in the future (clock went backwards, garbage) does not block either.
        gate.store(u64::MAX, std::sync::atomic::Ordering::Release);
        assert!(claim_first(&gate, 5 * MS).is_some());
    }

    fn low(ns: u64, confirmed: bool) -> Option<Low> {
        Some(Low { ns, confirmed })
    }

    #[test]
    fn container_low_caps_an_unconfirmed_estimate() {
        let mut m = CostModel::new();
        let s = k(20000);
        let p = m.predict(s, MS, None);
        assert!(p.unknown);
        m.admitted(s, &p);
        m.sample_started(s, MS);
        // The first sample queued behind 40 ms of other processes' work; another process of the
        // container measured 20 ms (not confirmed yet): the account is re-priced at 20 ms.
        let d = m.sample_done(s, 60 * MS, 70 * MS, low(20 * MS, false));
        assert_eq!(d, (20 * MS - INITIAL_GUESS_NS) as i64);
        assert_eq!(m.estimate(&s), Some(60 * MS), "the own estimate is kept");
        let p = m.predict(s, 71 * MS, low(20 * MS, false));
        assert_eq!(p.cost_ns, 20 * MS);
        assert_eq!(m.predict(s, 71 * MS, None).cost_ns, 60 * MS);
    }

    #[test]
    fn only_a_confirmed_container_low_is_a_basis_for_a_first_guess() {
        let mut m = CostModel::new();
        let s = k(20000);
        // A single (maybe inflated) sample elsewhere: still unknown here, the gate applies.
        let p = m.predict(s, MS, low(60 * MS, false));
        assert!(p.unknown && p.guessed);
        assert_eq!(p.cost_ns, INITIAL_GUESS_NS);
        // Confirmed elsewhere: guessed at it, no first-sample wait, no gate.
        let p = m.predict(s, MS, low(20 * MS, true));
        assert!(p.guessed && !p.unknown && !p.wait_for_first && p.sample);
        assert_eq!(p.cost_ns, 20 * MS);
        m.admitted(s, &p);
        m.sample_started(s, MS);
        // Its sample in flight does not count as an unknown launch: another unknown kernel of
        // this process is not held for it.
        assert!(!m.predict(Sig::kernel(0x2000, [7, 1, 1], [1, 1, 1], 0), 2 * MS, None).wait_for_first);
    }

    #[test]
    fn a_confirmed_container_low_caps_a_young_estimate_confirmed_on_a_queue() {
        let mut m = CostModel::new();
        let s = k(20000);
        let l = low(20 * MS, true);
        let mut charged = 0i64;
        for (i, v) in [114 * MS, 120 * MS].into_iter().enumerate() {
            let t = (i as u64 + 1) * 200 * MS;
            let p = m.predict(s, t, l);
            charged += p.cost_ns as i64;
            m.admitted(s, &p);
            m.sample_started(s, t);
            charged += m.sample_done(s, v, t + v, l);
        }
        // Two samples agree on a 100 ms queue: confirmed here, but young: charged 20 ms each.
        assert_eq!(charged, 40 * MS as i64);
        assert_eq!(m.predict(s, 500 * MS, l).cost_ns, 20 * MS);
        // Once the signature is no longer young the cap rises to the process's own estimate,
        // halfway after half the ramp, all the way after it.
        let own = m.estimate(&s).unwrap();
        assert_eq!(m.predict(s, 200 * MS + YOUNG_NS + RAMP_NS / 2, l).cost_ns, 20 * MS + (own - 20 * MS) / 2);
        assert_eq!(m.predict(s, 200 * MS + YOUNG_NS + RAMP_NS, l).cost_ns, own);
    }

    #[test]
    fn a_lower_container_low_caps_while_young_then_ramps_out() {
        // Another kernel of the same shape runs 5 ms; ours runs 20 ms.
        let mut m = CostModel::new();
        let s = k(20000);
        let l = low(5 * MS, false);
        let launch = |m: &mut CostModel, t: u64| -> i64 {
            let p = m.predict(s, t, l);
            m.admitted(s, &p);
            m.sample_started(s, t);
            p.cost_ns as i64 + m.sample_done(s, 20 * MS, t + 20 * MS, l)
        };
        let young: i64 = (1..=3u64).map(|i| launch(&mut m, i * 30 * MS)).sum();
        // Young: charged the container's value (the under-charge of the start-up aid) ...
        assert_eq!(young, 15 * MS as i64);
        // ... then a charge rising to the process's own confirmed estimate over the ramp (the
        // account is re-priced a little at each sample, not at once) ...
        let mid = launch(&mut m, 30 * MS + YOUNG_NS + RAMP_NS / 2);
        assert!(mid > 5 * MS as i64 && mid < 20 * MS as i64, "{mid}");
        // ... and after it the own estimate.
        assert_eq!(launch(&mut m, 30 * MS + YOUNG_NS + RAMP_NS), 20 * MS as i64);
        assert_eq!(m.predict(s, 40 * MS + YOUNG_NS + RAMP_NS, l).cost_ns, 20 * MS);
    }

    #[test]
    fn a_re_pricing_reaches_the_bucket_a_couple_of_launches_per_sample() {
        // Ten launches charged a 100 µs guess, then the kernel measures 20 ms: 199 ms owed.
        let mut m = CostModel::new();
        let s = k(20000);
        let p = m.predict(s, MS, None);
        for _ in 0..10 {
            m.admitted(s, &p);
        }
        let owed = (10 * 20 * MS - 10 * INITIAL_GUESS_NS) as i64;
        let mut got = Vec::new();
        for i in 0..8u64 {
            got.push(m.sample_done(s, 20 * MS, (i + 2) * 30 * MS, None));
        }
        // At most two launches at the new estimate per sample, nothing lost, then closed.
        assert!(got.iter().all(|&d| (0..=40 * MS as i64).contains(&d)), "{got:?}");
        assert_eq!(got.iter().sum::<i64>(), owed, "{got:?}");
        assert_eq!(got[0], 40 * MS as i64);
        assert_eq!(*got.last().unwrap(), 0, "{got:?}");
        // A refund is bounded the same way.
        for _ in 0..10 {
            m.admitted(s, &Prediction { cost_ns: 100 * MS, ..p });
        }
        let d = m.sample_done(s, 20 * MS, 400 * MS, None);
        assert_eq!(d, -40 * MS as i64);
    }

    #[test]
    fn other_grid_of_known_function_is_scaled() {
        let mut m = CostModel::new();
        for i in 0..WARMUP as u64 {
            m.predict(k(50), i, None);
            m.sample_started(k(50), i);
            m.sample_done(k(50), 50 * US, i + 100 * US, None);
        }
        let p = m.predict(k(200), MS, None);
        assert!(p.guessed && !p.wait_for_first);
        assert_eq!(p.cost_ns, 200 * US);
        m.admitted(k(200), &p);
        m.sample_started(k(200), MS);
        // Second launch of k(200) while its sample is pending: no wait (there is a basis).
        let p2 = m.predict(k(200), MS + 1, None);
        assert!(!p2.wait_for_first && !p2.sample);
        m.admitted(k(200), &p2);
        // Measured exactly as guessed: nothing to reconcile.
        assert_eq!(m.sample_done(k(200), 200 * US, 2 * MS, None), 0);
    }

    #[test]
    fn sampling_cadence() {
        let mut m = CostModel::new();
        let mut t = 0;
        let mut samples = 0;
        // 50 µs kernels launched back to back for 100 ms, samples complete 60 µs after start.
        let mut pending_until: Option<u64> = None;
        while t < 100 * MS {
            if let Some(u) = pending_until
                && t >= u
            {
                m.sample_done(k(50), 50 * US, t, None);
                pending_until = None;
            }
            let p = m.predict(k(50), t, None);
            if p.sample {
                m.sample_started(k(50), t);
                samples += 1;
                pending_until = Some(t + 60 * US);
            }
            t += 50 * US;
        }
        // WARMUP samples quickly, then one per SAMPLE_INTERVAL.
        let expect = WARMUP as u64 + 100 * MS / SAMPLE_INTERVAL_NS;
        assert!((samples as i64 - expect as i64).abs() <= 2, "{samples} samples, expected about {expect}");
    }

    #[test]
    fn samples_are_clamped_into_range() {
        let mut e = Estimator::default();
        e.push(0, 1);
        assert_eq!(e.value(), Some(MIN_SAMPLE_NS));
        let mut e = Estimator::default();
        e.push(u64::MAX, 1);
        assert_eq!(e.value(), Some(MAX_SAMPLE_NS), "a broken timer makes no absurd debt");
    }

    #[test]
    fn one_sample_start_per_process_per_gap() {
        let mut m = CostModel::new();
        let (a, b) = (k(50), k(60));
        for s in [a, b] {
            for i in 0..WARMUP as u64 {
                m.sample_started(s, i);
                m.sample_done(s, 50 * US, i + 1, None);
            }
        }
        let t = 100 * MS;
        assert!(m.predict(a, t, None).sample);
        m.sample_started(a, t);
        assert!(!m.predict(b, t + MIN_SAMPLE_GAP_NS - 1, None).sample, "within the gap");
        assert!(m.predict(b, t + MIN_SAMPLE_GAP_NS, None).sample);
    }

    #[test]
    fn graphs_have_their_own_entries() {
        let mut m = CostModel::new();
        let g = Sig::graph(0xabc);
        let p = m.predict(g, 0, None);
        assert!(p.guessed && p.sample);
        m.admitted(g, &p);
        m.sample_started(g, 0);
        assert_eq!(m.sample_done(g, 3 * MS, MS, None), (3 * MS - INITIAL_GUESS_NS) as i64);
        assert_eq!(m.estimate(&g), Some(3 * MS));
        // One sample is not settled: unknown kernels are still guessed at the initial guess...
        assert_eq!(m.predict(k(7), 2 * MS, None).cost_ns, INITIAL_GUESS_NS);
        for i in 1..WARMUP as u64 {
            m.sample_started(g, i * MS);
            m.sample_done(g, 3 * MS, i * MS + 1, None);
        }
        // ... and at the latest settled estimate once it is.
        assert_eq!(m.predict(k(7), 9 * MS, None).cost_ns, 3 * MS);
    }

    #[test]
    fn eviction_bounds_the_table() {
        let mut m = CostModel::new();
        for i in 0..(MAX_ENTRIES as u32 + 10) {
            m.predict(k(i + 1), i as u64, None);
        }
        m.predict(k(1_000_000), EVICT_AGE_NS * 2, None);
        assert!(m.len() <= MAX_ENTRIES);
    }
}
