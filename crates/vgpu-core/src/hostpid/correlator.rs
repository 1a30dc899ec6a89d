//! Host PID from memory correlation, whoever created the context (docs/design.md "Host PIDs").
//!
//! NVIDIA's runtime may bring its primary context up through a private export-table entry, so the
//! shim never sees a context creation to diff NVML's process list around ([`super::resolver`]).
//! What it always sees are its own allocations and frees: the ledger's count for this process. The
//! watcher samples that count and NVML's per-process `usedGpuMemory` together; whenever our count
//! moved between two samples, a candidate PID whose NVML figure did not move the same way (same
//! sign, at least our change less one granule, at most our change plus a quarter or one granule)
//! gets a strike. The PID is ours when it is the only unclaimed listed PID without a strike and has
//! matched at least [`MIN_HITS`] of our moves. PIDs claimed by other slots are never candidates, so
//! two processes can never both claim one PID; if every candidate has a strike (a race between our
//! count and the driver's), the evidence starts over.
//!
//! Limits: processes whose allocation streams move identically in the same sample periods stay
//! unresolved until they diverge (the fallback is then "what we counted"); many small allocations in
//! one period (rounding above a quarter) count as a strike for us too and delay the result.

use std::collections::HashMap;

/// Our moves a candidate must have matched before it is claimed.
pub const MIN_HITS: u32 = 1;
/// Allocation granule of the driver (rounding tolerance).
pub const GRANULE: u64 = 2 << 20;

/// One sample: our counted bytes on the device (read before and after the NVML call; unequal =
/// discarded) and NVML's (pid, usedGpuMemory) list of the device.
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    pub own_before: u64,
    pub own_after: u64,
    /// No allocation or free of ours was in flight around the NVML call
    /// ([`crate::ledger::ChangeMark::settled_until`]): the ledger counts an allocation before the
    /// driver makes it, so a sample inside that call would see our count move and our own PID's
    /// figure not yet (a strike for us, and perhaps a hit for another process whose identical
    /// allocation landed meanwhile).
    pub settled: bool,
    pub procs: &'a [(u32, u64)],
    /// Host PIDs claimed by other live slots (any container's region we can see: ours).
    pub claimed: &'a [u32],
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Score {
    hits: u32,
    strikes: u32,
}

#[derive(Clone, Debug, Default)]
pub struct MemCorrelator {
    last_own: Option<u64>,
    last: Vec<(u32, u64)>,
    score: HashMap<u32, Score>,
    moves: u32,
}

/// Does an NVML change `d_nv` match our own change `d_own` (both non-zero-signed bytes)?
pub fn matches(d_own: i128, d_nv: i128) -> bool {
    if d_own == 0 || d_nv.signum() != d_own.signum() {
        return false;
    }
    let (o, n) = (d_own.unsigned_abs(), d_nv.unsigned_abs());
    let g = GRANULE as u128;
    n + g >= o && n <= o + (o / 4).max(g)
}

impl MemCorrelator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Our moves observed so far (diagnostics).
    pub fn moves(&self) -> u32 {
        self.moves
    }

    /// Feed one sample; returns our host PID once it is the only consistent candidate.
    pub fn observe(&mut self, s: &Sample) -> Option<u32> {
        if s.own_before != s.own_after || !s.settled {
            // Our count moved, or could have, during the NVML call: this sample cannot be paired.
            self.last_own = None;
            return None;
        }
        let own = s.own_after;
        if let Some(prev) = self.last_own {
            let d_own = own as i128 - prev as i128;
            if d_own != 0 {
                self.moves += 1;
                for &(pid, used) in s.procs {
                    let Some(&(_, before)) = self.last.iter().find(|x| x.0 == pid) else { continue };
                    let e = self.score.entry(pid).or_default();
                    if matches(d_own, used as i128 - before as i128) {
                        e.hits += 1;
                    } else {
                        e.strikes += 1;
                    }
                }
            }
        }
        self.last_own = Some(own);
        self.last = s.procs.to_vec();
        self.verdict(s)
    }

    fn verdict(&mut self, s: &Sample) -> Option<u32> {
        let cands: Vec<u32> = s.procs.iter().map(|p| p.0).filter(|p| !s.claimed.contains(p)).collect();
        let clean: Vec<u32> =
            cands.iter().copied().filter(|p| self.score.get(p).is_none_or(|x| x.strikes == 0)).collect();
        if clean.is_empty() && !cands.is_empty() && self.moves > 0 {
            // Everyone contradicted (ours included, by a race): start over.
            self.score.clear();
            return None;
        }
        match clean.as_slice() {
            [p] if self.score.get(p).is_some_and(|x| x.hits >= MIN_HITS) => Some(*p),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MIB: u64 = 1 << 20;

    fn s<'a>(own: u64, procs: &'a [(u32, u64)], claimed: &'a [u32]) -> Sample<'a> {
        Sample { own_before: own, own_after: own, settled: true, procs, claimed }
    }

    #[test]
    fn matching_rules() {
        let m = MIB as i128;
        assert!(matches(8 * m, 8 * m));
        assert!(matches(8 * m, 10 * m), "rounding up to a granule");
        assert!(matches(1, 2 * m), "a tiny allocation rounds to one granule");
        assert!(matches(-8 * m, -8 * m));
        assert!(!matches(8 * m, 0), "idle candidate");
        assert!(!matches(8 * m, -8 * m), "opposite move");
        assert!(!matches(8 * m, 16 * m), "twice our move");
        assert!(!matches(16 * m, 8 * m), "half our move");
        assert!(!matches(4 * m, 8 * m), "small moves: one granule of rounding, not more");
        assert!(!matches(0, 8 * m), "we did not move");
    }

    #[test]
    fn the_candidate_that_follows_our_moves_is_us() {
        let mut c = MemCorrelator::new();
        // 300 = us (context 256 MiB already there), 301 = another process, idle.
        assert_eq!(c.observe(&s(0, &[(300, 256 * MIB), (301, 300 * MIB)], &[])), None);
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 264 * MIB), (301, 300 * MIB)], &[])), Some(300));
    }

    #[test]
    fn a_sample_inside_our_driver_call_is_not_evidence() {
        let mut c = MemCorrelator::new();
        // 300 = us, 301 = a process of another container with the same workload.
        c.observe(&s(0, &[(300, 256 * MIB), (301, 256 * MIB)], &[]));
        // Our 8 MiB is counted, the driver has not made it yet; 301's identical allocation landed.
        let inside = Sample { settled: false, ..s(8 * MIB, &[(300, 256 * MIB), (301, 264 * MIB)], &[]) };
        assert_eq!(c.observe(&inside), None);
        // Our allocation lands: no baseline from the discarded sample, no evidence yet.
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 264 * MIB), (301, 264 * MIB)], &[])), None);
        // The streams diverge: we are named, never 301.
        assert_eq!(c.observe(&s(16 * MIB, &[(300, 272 * MIB), (301, 264 * MIB)], &[])), Some(300));
        // The same readings taken as settled hand us 301 (what the mark prevents).
        let mut c = MemCorrelator::new();
        c.observe(&s(0, &[(300, 256 * MIB), (301, 256 * MIB)], &[]));
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 256 * MIB), (301, 264 * MIB)], &[])), Some(301));
    }

    #[test]
    fn a_candidate_that_moved_the_same_way_keeps_it_open_until_it_diverges() {
        let mut c = MemCorrelator::new();
        c.observe(&s(0, &[(300, 256 * MIB), (301, 256 * MIB)], &[]));
        // Both grew by 8 MiB (two processes starting together).
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 264 * MIB), (301, 264 * MIB)], &[])), None);
        // We free, the other one allocates more.
        assert_eq!(c.observe(&s(0, &[(300, 256 * MIB), (301, 280 * MIB)], &[])), Some(300));
    }

    #[test]
    fn claimed_pids_are_never_candidates() {
        let mut c = MemCorrelator::new();
        c.observe(&s(0, &[(300, 256 * MIB), (301, 256 * MIB)], &[]));
        // Both moved identically, but 301 is claimed by another slot: 300 is left.
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 264 * MIB), (301, 264 * MIB)], &[301])), Some(300));
        // The reverse: the PID that matched is claimed by someone else; the other never matched.
        let mut c = MemCorrelator::new();
        c.observe(&s(0, &[(300, 256 * MIB), (301, 256 * MIB)], &[]));
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 264 * MIB), (301, 256 * MIB)], &[300])), None);
    }

    #[test]
    fn no_verdict_without_our_own_move_or_with_a_newcomer() {
        let mut c = MemCorrelator::new();
        assert_eq!(c.observe(&s(0, &[(300, 256 * MIB)], &[])), None);
        assert_eq!(c.observe(&s(0, &[(300, 300 * MIB)], &[])), None, "we did not move: no evidence");
        // A PID first listed now has no strike yet: it blocks the verdict.
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 308 * MIB), (302, 256 * MIB)], &[])), None);
        assert_eq!(c.observe(&s(16 * MIB, &[(300, 316 * MIB), (302, 256 * MIB)], &[])), Some(300));
    }

    #[test]
    fn unstable_samples_are_discarded_and_races_start_over() {
        let mut c = MemCorrelator::new();
        c.observe(&s(0, &[(300, 256 * MIB)], &[]));
        let racy =
            Sample { own_before: 0, own_after: 8 * MIB, settled: true, procs: &[(300, 264 * MIB)], claimed: &[] };
        assert_eq!(c.observe(&racy), None);
        // Next sample has no baseline: no verdict from it alone.
        assert_eq!(c.observe(&s(8 * MIB, &[(300, 264 * MIB)], &[])), None);
        // Our count ahead of the driver (allocation in flight): a strike for the only candidate,
        // so everything starts over; the next clean move resolves.
        assert_eq!(c.observe(&s(16 * MIB, &[(300, 264 * MIB)], &[])), None);
        assert_eq!(c.observe(&s(24 * MIB, &[(300, 272 * MIB)], &[])), Some(300));
    }

    #[test]
    fn never_claims_a_foreign_pid_when_we_are_not_listed() {
        // We are not in NVML's list at all (another namespace's view, MIG...): the only listed PID
        // is someone else's, idle or moving differently.
        let mut c = MemCorrelator::new();
        c.observe(&s(0, &[(400, 1000 * MIB)], &[]));
        for k in 1..20u64 {
            let other = 1000 * MIB + (k % 3) * 64 * MIB;
            assert_eq!(c.observe(&s(k * 8 * MIB, &[(400, other)], &[])), None);
        }
    }
}
