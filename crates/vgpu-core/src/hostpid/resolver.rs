//! Host-PID resolution: which PID does NVML report for this process?
//!
//! NVML reports host PIDs; inside a container `getpid()` is a namespace PID (docs/hami-contract.md §5.2,
//! docs/known-failures.md #5). The incumbent retains an extra primary context under a container-wide
//! semaphore to diff NVML's process list (~300 ms per process, serialised). Here nothing is
//! created and nothing is serialised:
//!
//! 1. **Diff around the application's own first context.** The shim snapshots NVML's process list
//!    of the device just before the application's first context creation on it and just after.
//!    The new PIDs contain ours.
//! 2. **Eliminate** PIDs that other live slots of the region have already claimed, PIDs that are
//!    gone, and PIDs ruled out by evidence (below). One left: resolved ([`How::Unique`]).
//! 3. **Fork order** tie-break: a fork allocates the new PID in every namespace at once, so within
//!    one container host PIDs increase with container PIDs (barring wrap-around). Candidates that
//!    contradict the order of the container's already resolved (pid, host pid) pairs are dropped
//!    ([`How::Order`]). When as many candidates remain as the container has unresolved processes
//!    (`View::unresolved`: no host PID, memory on the device), they are matched by rank.
//! 4. **Identity** tie-break: if several remain and our own `getpid()` is among them, we share the
//!    PID namespace with NVML ([`How::Identity`]).
//! 5. **Evidence**, gathered by the watcher every NVML period, resolves what is still ambiguous
//!    (processes of this or another container that created contexts at the same moment): a
//!    candidate busy while this process had no work at all, or idle while this process was
//!    measurably busy, is not us ([`PidResolver::observe`]). Two contradicting periods are needed,
//!    and evidence against an already resolved PID revokes it.
//!    Without a diff (the context predates the shim's snapshot) the candidates are all listed PIDs
//!    that are not claimed, and the same elimination applies.
//!
//! The caller claims the result in its slot's `hostpid`; other processes then eliminate it.

use std::collections::{HashMap, HashSet};

/// Contradicting periods needed to rule a candidate out.
pub const EXCLUDE_AFTER: u32 = 2;
/// A period in which this process was at least this busy (self-measured) expects util > 0.
pub const BUSY_FRAC: f64 = 0.3;
/// A candidate at or above this SM util while we had no work in flight is not us.
pub const FOREIGN_UTIL: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    Unique,
    Order,
    Identity,
    Evidence,
    /// Matched by memory correlation ([`super::correlator`]): the context was created out of sight.
    Memory,
}

#[derive(Clone, Debug, Default)]
pub struct PidResolver {
    before: Option<Vec<u32>>,
    after: Option<Vec<u32>>,
    strikes: HashMap<u32, u32>,
    excluded: HashSet<u32>,
    resolved: Option<(u32, How)>,
}

/// What the watcher knows at one step.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// PIDs NVML lists on the device now (compute processes).
    pub present: &'a [u32],
    /// Host PIDs claimed by *other* live slots of the region.
    pub claimed: &'a [u32],
    /// `getpid()`.
    pub my_pid: u32,
    /// (container pid, host pid) of the other live slots that have a host PID.
    pub pairs: &'a [(u32, u32)],
    /// Container pids of the live slots without a host PID that hold memory on the device (ours
    /// included).
    pub unresolved: &'a [u32],
}

impl PidResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// NVML's list just before the application's first context on the device.
    pub fn set_before(&mut self, pids: Vec<u32>) {
        self.before = Some(pids);
    }

    /// NVML's list just after it.
    pub fn set_after(&mut self, pids: Vec<u32>) {
        self.after = Some(pids);
    }

    pub fn has_diff(&self) -> bool {
        self.before.is_some() && self.after.is_some()
    }

    pub fn resolved(&self) -> Option<(u32, How)> {
        self.resolved
    }

    /// Adopt a PID resolved elsewhere ([`How::Memory`]); [`step`](Self::step) keeps it while it
    /// stays listed, unclaimed by others and not ruled out by evidence.
    pub fn adopt(&mut self, h: u32) {
        self.resolved = Some((h, How::Memory));
    }

    /// Current candidates for our host PID.
    pub fn candidates(&self, v: &View) -> Vec<u32> {
        let ok = |p: &u32| v.present.contains(p) && !v.claimed.contains(p) && !self.excluded.contains(p);
        let mut c: Vec<u32> = match (&self.before, &self.after) {
            (Some(b), Some(a)) => a.iter().copied().filter(|p| !b.contains(p)).filter(ok).collect(),
            _ => Vec::new(),
        };
        if c.is_empty() {
            // No diff, or everything in it is gone or taken: fall back to every unclaimed PID that
            // was not already there before our context.
            c = v
                .present
                .iter()
                .copied()
                .filter(|p| self.before.as_ref().is_none_or(|b| !b.contains(p)))
                .filter(ok)
                .collect();
        }
        c.sort_unstable();
        c.dedup();
        c
    }

    /// One resolution step. Returns the host PID once known.
    pub fn step(&mut self, v: &View) -> Option<(u32, How)> {
        if let Some((h, how)) = self.resolved {
            if v.present.contains(&h) && !v.claimed.contains(&h) && !self.excluded.contains(&h) {
                return Some((h, how));
            }
            self.resolved = None;
        }
        let c = self.candidates(v);
        let ordered: Vec<u32> = c
            .iter()
            .copied()
            .filter(|&h| v.pairs.iter().all(|&(p, hp)| p == v.my_pid || (p < v.my_pid) == (hp < h)))
            .collect();
        let r = match c.len() {
            0 => None,
            1 => Some((c[0], if self.strikes.is_empty() { How::Unique } else { How::Evidence })),
            _ if ordered.len() == 1 => Some((ordered[0], How::Order)),
            _ if c.contains(&v.my_pid) => Some((v.my_pid, How::Identity)),
            // As many candidates as unresolved processes: match them by fork order.
            n if n == v.unresolved.len() && v.unresolved.contains(&v.my_pid) => {
                let mut u = v.unresolved.to_vec();
                u.sort_unstable();
                u.iter().position(|&p| p == v.my_pid).map(|i| (c[i], How::Order))
            }
            _ => None,
        };
        self.resolved = r;
        r
    }

    /// Evidence from one NVML sample period: `my_busy` = this process's self-measured busy fraction
    /// of the period (None: unknown), `my_inflight` = it had work queued or running at some point of
    /// the period, `util` = SM util per PID in that period (absent = 0).
    pub fn observe(&mut self, v: &View, my_busy: Option<f64>, my_inflight: bool, util: &[(u32, u32)]) {
        let Some(busy) = my_busy else { return };
        let util_of = |p: u32| util.iter().filter(|(q, _)| *q == p).map(|(_, u)| *u).max().unwrap_or(0);
        let mut cands = self.candidates(v);
        if let Some((h, _)) = self.resolved
            && !cands.contains(&h)
        {
            cands.push(h);
        }
        if cands.len() <= 1 && self.resolved.is_none_or(|(_, how)| how == How::Unique) {
            return; // nothing to disambiguate (a unique diff is trusted)
        }
        for p in cands {
            let u = util_of(p);
            let contradicts = (!my_inflight && busy <= 0.0 && u >= FOREIGN_UTIL) || (busy >= BUSY_FRAC && u == 0);
            if contradicts {
                let s = self.strikes.entry(p).or_insert(0);
                *s += 1;
                if *s >= EXCLUDE_AFTER {
                    self.excluded.insert(p);
                    if self.resolved.is_some_and(|(h, _)| h == p) {
                        self.resolved = None;
                    }
                }
            }
        }
    }

    /// Another process with the same claim won (lower slot index keeps it): forget ours.
    pub fn lost_claim(&mut self, pid: u32) {
        if self.resolved.is_some_and(|(h, _)| h == pid) {
            self.resolved = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(present: &'a [u32], claimed: &'a [u32], my_pid: u32) -> View<'a> {
        View { present, claimed, my_pid, pairs: &[], unresolved: &[] }
    }

    #[test]
    fn unique_diff() {
        let mut r = PidResolver::new();
        r.set_before(vec![100, 200]);
        r.set_after(vec![100, 200, 1042]);
        assert_eq!(r.step(&view(&[100, 200, 1042], &[], 42)), Some((1042, How::Unique)));
    }

    #[test]
    fn concurrent_starts_resolve_by_elimination() {
        // A, B, C start together (container PIDs 10, 11, 12; host 1010, 1011, 1012).
        let present = [1010, 1011, 1012];
        let mut a = PidResolver::new();
        a.set_before(vec![]);
        a.set_after(vec![1010]);
        let mut b = PidResolver::new();
        b.set_before(vec![]);
        b.set_after(vec![1010, 1011]);
        let mut c = PidResolver::new();
        c.set_before(vec![1010]);
        c.set_after(vec![1010, 1011, 1012]);
        // B and C are ambiguous until A claims.
        assert_eq!(b.step(&view(&present, &[], 11)), None);
        assert_eq!(c.step(&view(&present, &[], 12)), None);
        assert_eq!(a.step(&view(&present, &[], 10)), Some((1010, How::Unique)));
        assert_eq!(b.step(&view(&present, &[1010], 11)), Some((1011, How::Unique)));
        assert_eq!(c.step(&view(&present, &[1010, 1011], 12)), Some((1012, How::Unique)));
    }

    #[test]
    fn fork_order_tie_break() {
        // Container pids 2..=5 (namespace), host pids 1002..=1005 (offset); 3 and 5 resolved.
        // 2 and 4 both see {1002, 1004}: the order of the resolved pairs tells them apart.
        let present = [1002, 1003, 1004, 1005];
        let claimed = [1003, 1005];
        let pairs = [(3, 1003), (5, 1005)];
        for (me, want) in [(2, 1002), (4, 1004)] {
            let mut r = PidResolver::new();
            r.set_before(vec![]);
            r.set_after(vec![1002, 1004]);
            let v = View { present: &present, claimed: &claimed, my_pid: me, pairs: &pairs, unresolved: &[] };
            assert_eq!(r.step(&v), Some((want, How::Order)));
        }
        // Nobody resolved yet: two unresolved processes, two candidates, matched by rank.
        for (me, want) in [(2, 1002), (4, 1004)] {
            let mut r = PidResolver::new();
            r.set_before(vec![]);
            r.set_after(vec![1002, 1004]);
            let v = View { present: &present, claimed: &[], my_pid: me, pairs: &[], unresolved: &[4, 2] };
            assert_eq!(r.step(&v), Some((want, How::Order)));
        }
    }

    #[test]
    fn identity_tie_break() {
        let mut r = PidResolver::new();
        r.set_before(vec![]);
        r.set_after(vec![500, 501]);
        assert_eq!(r.step(&view(&[500, 501], &[], 501)), Some((501, How::Identity)));
    }

    #[test]
    fn symmetric_ambiguity_resolved_by_evidence() {
        // Two processes (ours host 2000, a foreign one 3000) created contexts at the same moment.
        let present = [2000, 3000];
        let mut r = PidResolver::new();
        r.set_before(vec![]);
        r.set_after(vec![2000, 3000]);
        let v = view(&present, &[], 7);
        assert_eq!(r.step(&v), None);
        // We are busy 50 %, the foreign one is idle: one period is not enough...
        r.observe(&v, Some(0.5), true, &[(2000, 50)]);
        assert_eq!(r.step(&v), None);
        // ... two are.
        r.observe(&v, Some(0.5), true, &[(2000, 48)]);
        assert_eq!(r.step(&v), Some((2000, How::Evidence)));
    }

    #[test]
    fn foreign_busy_while_we_idle_is_excluded() {
        let present = [2000, 3000];
        let mut r = PidResolver::new();
        let v = view(&present, &[], 7);
        assert_eq!(r.step(&v), None); // no diff at all: both candidates
        for _ in 0..2 {
            r.observe(&v, Some(0.0), false, &[(3000, 40)]);
        }
        assert_eq!(r.step(&v), Some((2000, How::Evidence)));
    }

    #[test]
    fn wrong_identity_is_revoked_by_evidence() {
        // Our container PID 3000 happens to equal a foreign host PID in the candidate set.
        let present = [2000, 3000];
        let mut r = PidResolver::new();
        r.set_before(vec![]);
        r.set_after(vec![2000, 3000]);
        let v = view(&present, &[], 3000);
        assert_eq!(r.step(&v), Some((3000, How::Identity)));
        for _ in 0..2 {
            r.observe(&v, Some(0.6), true, &[(2000, 60)]);
        }
        assert_eq!(r.step(&v), Some((2000, How::Evidence)));
    }

    #[test]
    fn gone_or_claimed_resolution_is_redone() {
        let mut r = PidResolver::new();
        r.set_before(vec![]);
        r.set_after(vec![10]);
        assert_eq!(r.step(&view(&[10, 11], &[], 1)), Some((10, How::Unique)));
        // 10 now claimed by another slot (it was theirs); our context must be 11.
        assert_eq!(r.step(&view(&[10, 11], &[10], 1)), Some((11, How::Unique)));
    }
}
