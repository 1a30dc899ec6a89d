//! Truth reconciliation (docs/design.md "Driver-held memory (truth)").
//!
//! The driver holds memory for a process outside every allocation entry point: contexts, loaded
//! modules, local memory for the stack limit, heaps, graph pools, rounding. NVML's per-process
//! `usedGpuMemory` for our host PID is the figure the host sees ("truth"). The shim charges the part
//! of it that the ledger did not count to the process's slot, as `context_size`, and gives it back
//! when the driver's figure falls, so the container's sum, the limit check, every view and the
//! monitor see it. This module decides how much to hold; the shim does the reading and charging.
//!
//! Invariant after a step: `truth ≤ counted + SLACK`, where `counted` is everything the ledger holds
//! for this process (our reconciliation charge included). With `counted ≤ limit` that is the
//! promise "the driver's per-process figure never exceeds the limit by more than one granule".

/// Driver-held bytes tolerated without a charge: one 2 MiB allocation granule.
pub const SLACK: u64 = 2 << 20;
/// The driver's allocation granule.
pub const GRANULE: u64 = 2 << 20;

/// What the driver may hold for one counted allocation of `bytes` beyond them by rounding it up to
/// its granule: the ledger counts what the application asked for (exactly, as the monitor
/// expects), so this much of the driver's figure is explained and never charged again.
pub fn rounding(bytes: u64) -> u64 {
    bytes.div_ceil(GRANULE).saturating_mul(GRANULE).saturating_sub(bytes)
}

/// One consistent reading of this process on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// NVML's `usedGpuMemory` for our host PID.
    pub truth: u64,
    /// The ledger's bytes for this process on the device, read before and after `truth`.
    pub counted_before: u64,
    pub counted_after: u64,
    /// Driver-held bytes the ledger explains without counting them: the rounding of counted
    /// allocations ([`rounding`]) and the unused reserve of stream-ordered pools (uncounted at
    /// `cuMemFreeAsync` by design).
    pub allowance: u64,
    /// No allocation or free of ours was in flight around the truth read
    /// ([`crate::ledger::ChangeMark::settled_until`]). An allocation is counted before the
    /// driver makes it and a free uncounted after it, so inside either call the ledger is ahead
    /// of the driver: an unsettled reading can only understate the target. It may charge (never
    /// too much), never give back (that would understate the container's usage and lift the
    /// limit until the next step); a process that always has an allocation in flight still gets
    /// its driver-held memory charged.
    pub settled: bool,
}

impl Reading {
    /// Both counted reads agree: no allocation or free of ours completed during the truth read.
    pub fn stable(&self) -> bool {
        self.counted_before == self.counted_after
    }
}

/// What the reconciliation should do with its charge (`held`, part of `counted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Keep,
    /// Charge this much more (the memory is already held by the driver: unchecked).
    Charge(u64),
    /// Give this much back.
    Release(u64),
}

/// The charge the reconciliation should hold: `max(0, truth - (counted - held) - allowance - SLACK)`.
pub fn target(truth: u64, counted: u64, held: u64, allowance: u64) -> u64 {
    let base = counted.saturating_sub(held).saturating_add(allowance);
    truth.saturating_sub(base).saturating_sub(SLACK)
}

/// Step from the current charge `held` to the [`target`]. An unstable reading keeps everything;
/// an unsettled one only charges ([`Reading::settled`]).
pub fn step(r: &Reading, held: u64) -> Step {
    if !r.stable() {
        return Step::Keep;
    }
    let t = target(r.truth, r.counted_after, held, r.allowance);
    match t.cmp(&held) {
        std::cmp::Ordering::Equal => Step::Keep,
        std::cmp::Ordering::Greater => Step::Charge(t - held),
        std::cmp::Ordering::Less if r.settled => Step::Release(held - t),
        std::cmp::Ordering::Less => Step::Keep,
    }
}

/// Why no per-process figure is usable (the ledger then keeps what it counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoTruth {
    /// NVML missing or failing.
    Nvml,
    /// MIG (or WDDM): NVML lists us without a per-process figure (`NVML_VALUE_NOT_AVAILABLE`).
    Mig,
    /// Our host PID is not known (yet).
    PidUnresolved,
    /// NVML does not list our host PID on this device.
    NotListed,
}

impl std::fmt::Display for NoTruth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NoTruth::Nvml => "NVML is not available",
            NoTruth::Mig => "the device is in MIG mode",
            NoTruth::PidUnresolved => "this process's host PID is not resolved",
            NoTruth::NotListed => "NVML does not list this process",
        })
    }
}

/// Up-front measurement of one driver operation (module load, limit change, graph launch):
/// the cost is what the driver's figure grew by, less what our own counting grew by meanwhile
/// (other threads allocating), never negative.
pub fn measured_cost(truth_before: u64, truth_after: u64, counted_before: u64, counted_after: u64) -> u64 {
    truth_after.saturating_sub(truth_before).saturating_sub(counted_after.saturating_sub(counted_before))
}

/// What one operation made the driver hold, from readings `before` and `after` it: `(grown,
/// fallen)`, each [`measured_cost`]. `None` unless both readings are settled: another thread's
/// allocation in flight at either would count as the operation's cost or hide it (left to the
/// reconciliation then).
pub fn across(before: &Reading, after: &Reading) -> Option<(u64, u64)> {
    if !before.settled || !after.settled {
        return None;
    }
    let grown = measured_cost(before.truth, after.truth, before.counted_after, after.counted_before);
    let fallen = measured_cost(after.truth, before.truth, after.counted_before, before.counted_after);
    Some((grown, fallen))
}

#[cfg(test)]
mod tests {
    use super::*;
    const MIB: u64 = 1 << 20;

    fn r(truth: u64, counted: u64) -> Reading {
        Reading { truth, counted_before: counted, counted_after: counted, allowance: 0, settled: true }
    }

    #[test]
    fn nothing_to_do_when_the_ledger_knows_everything() {
        assert_eq!(step(&r(100 * MIB, 100 * MIB), 0), Step::Keep);
        // One granule of rounding is tolerated.
        assert_eq!(step(&r(102 * MIB, 100 * MIB), 0), Step::Keep);
        // The ledger counting more than the driver holds (lazy backing) is never "corrected" down.
        assert_eq!(step(&r(50 * MIB, 100 * MIB), 0), Step::Keep);
    }

    #[test]
    fn driver_held_bytes_are_charged_beyond_the_slack() {
        assert_eq!(step(&r(400 * MIB, 100 * MIB), 0), Step::Charge(298 * MIB));
        // Already holding it: keep.
        assert_eq!(step(&r(400 * MIB, 398 * MIB), 298 * MIB), Step::Keep);
        // The driver holds more now: charge the difference only.
        assert_eq!(step(&r(420 * MIB, 398 * MIB), 298 * MIB), Step::Charge(20 * MIB));
    }

    #[test]
    fn charges_fall_when_the_driver_figure_falls() {
        // Held 298 of 398 counted; the driver gives back a 200 MiB module.
        assert_eq!(step(&r(200 * MIB, 398 * MIB), 298 * MIB), Step::Release(200 * MIB));
        // Everything goes: all of it back, never below zero.
        assert_eq!(step(&r(0, 398 * MIB), 298 * MIB), Step::Release(298 * MIB));
    }

    #[test]
    fn invariant_holds_after_every_step() {
        // Random walk of truth and of our own counting; after applying each step the invariant
        // truth <= counted + SLACK holds and held never goes negative.
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rnd = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut own, mut held) = (0u64, 0u64);
        for _ in 0..10_000 {
            own = (own + rnd(64) * MIB).saturating_sub(rnd(64) * MIB);
            let extra = rnd(600) * MIB;
            let truth = own + extra;
            let counted = own + held;
            match step(&r(truth, counted), held) {
                Step::Keep => {}
                Step::Charge(b) => held += b,
                Step::Release(b) => held -= b,
            }
            assert!(truth <= own + held + SLACK, "truth {truth} own {own} held {held}");
            assert!(held <= extra, "never holds more than the driver does beyond our counting");
        }
    }

    #[test]
    fn rounding_and_pool_reserve_are_explained_not_charged() {
        assert_eq!(rounding(0), 0);
        assert_eq!(rounding(1), 2 * MIB - 1);
        assert_eq!(rounding(2 * MIB), 0);
        assert_eq!(rounding(3 * MIB), MIB);
        // 8 MiB context + three 1 MiB allocations the driver rounds to 2 MiB each.
        let r = Reading {
            truth: 14 * MIB,
            counted_before: 11 * MIB,
            counted_after: 11 * MIB,
            allowance: 3 * MIB,
            settled: true,
        };
        assert_eq!(step(&r, 0), Step::Keep);
        // A module of 64 MiB on top is still charged in full.
        let r = Reading { truth: 78 * MIB, ..r };
        assert_eq!(step(&r, 0), Step::Charge(62 * MIB));
    }

    #[test]
    fn unstable_readings_change_nothing() {
        let x = Reading {
            truth: 500 * MIB,
            counted_before: 10 * MIB,
            counted_after: 20 * MIB,
            allowance: 0,
            settled: true,
        };
        assert!(!x.stable());
        assert_eq!(step(&x, 0), Step::Keep);
    }

    #[test]
    fn a_reading_inside_an_allocation_gives_nothing_back() {
        // 64 MiB held for a hidden context; a 256 MiB allocation counted, not made yet.
        let r = Reading {
            truth: 72 * MIB,
            counted_before: 328 * MIB,
            counted_after: 328 * MIB,
            allowance: 0,
            settled: false,
        };
        assert_eq!(step(&r, 64 * MIB), Step::Keep);
        // The same figures taken as settled would release the whole charge.
        assert_eq!(step(&Reading { settled: true, ..r }, 64 * MIB), Step::Release(64 * MIB));
        // Still unsettled, a module loaded meanwhile is charged (understated, never overstated).
        let r = Reading { truth: 400 * MIB, ..r };
        assert_eq!(step(&r, 64 * MIB), Step::Charge(400 * MIB - 264 * MIB - SLACK - 64 * MIB));
    }

    #[test]
    fn an_operation_is_measured_only_across_settled_readings() {
        let b = Reading {
            truth: 100 * MIB,
            counted_before: 10 * MIB,
            counted_after: 10 * MIB,
            allowance: 0,
            settled: true,
        };
        let a = Reading { truth: 164 * MIB, ..b };
        assert_eq!(across(&b, &a), Some((64 * MIB, 0)));
        assert_eq!(across(&a, &b), Some((0, 64 * MIB)));
        assert_eq!(across(&Reading { settled: false, ..b }, &a), None);
        assert_eq!(across(&b, &Reading { settled: false, ..a }), None);
    }

    #[test]
    fn measured_cost_discounts_our_own_allocations() {
        assert_eq!(measured_cost(100 * MIB, 164 * MIB, 10 * MIB, 10 * MIB), 64 * MIB);
        assert_eq!(measured_cost(100 * MIB, 164 * MIB, 10 * MIB, 40 * MIB), 34 * MIB);
        assert_eq!(measured_cost(164 * MIB, 100 * MIB, 10 * MIB, 10 * MIB), 0);
    }
}
