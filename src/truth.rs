//! Driver-held memory, shim side (docs/design.md "Driver-held memory (truth)"): reads NVML's
//! per-process `usedGpuMemory` for our host PID ("truth") and our ledger count together, and keeps
//! the part the ledger did not count charged to our slot as `context_size`
//! ([`vgpu_core::reconcile`]). Runs from [`tick`] (the watcher thread, at most every 250 ms per
//! device while CUDA is active) and from [`before_refusal`] (the allocation path, at most every
//! 100 ms per device).
//! While our host PID is unknown the same readings feed the memory correlator
//! ([`vgpu_core::hostpid::correlator`]), every 100 ms, so a context created out of our sight still gets its PID.
//!
//! One per-process mutex serialises readings with the up-front measurements of `driver_costs`
//! (a module load measured while the tick reads would be counted twice) and with a new context's
//! charge ([`hand_over`]: the context's memory is the driver's before the shim charges it). The
//! tick never waits for it; the refusal path waits at most [`REFUSAL_WAIT`].

pub(crate) mod driver_costs;

use crate::{compute, hostpid};
use crate::{driver, state};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use vgpu_core::hostpid::correlator::{MemCorrelator, Sample};
use vgpu_core::ledger::ReserveError;
use vgpu_core::reconcile::{self, NoTruth, Reading, Step};
use vgpu_core::region::{MAX_DEVICES, UsageKind};
use vgpu_core::sync::Mutex;

const EVERY_NS: u64 = 250_000_000;
/// `usedGpuMemory` when NVML has no per-process figure (`NVML_VALUE_NOT_AVAILABLE`).
const NVML_VALUE_NOT_AVAILABLE: u64 = u64::MAX;
const RESOLVE_EVERY_NS: u64 = 100_000_000;
pub const REFUSAL_WAIT: Duration = Duration::from_millis(200);
/// The refusal path reconciles a device at most this often (the watcher does every 250 ms):
/// near the limit refusals come by the thousand per second, each reading would be NVML calls.
const REFUSAL_EVERY_NS: u64 = 100_000_000;
/// Per device: when the refusal path may reconcile again (CLOCK_MONOTONIC ns).
static REFUSAL_DUE: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

#[derive(Default)]
pub struct DevTruth {
    /// Bytes our reconciliation holds in the ledger (`context_size`).
    held: u64,
    next: u64,
    nvml: usize,
    nvml_tried: bool,
    corr: MemCorrelator,
    /// Last truth read (diagnostics).
    last_truth: Option<u64>,
    /// The last-resort host-PID probe (`hostpid::probe`).
    probe: hostpid::probe::Probe,
    /// NVML lists per-process figures the correlator can match (not MIG, NVML usable): only then
    /// can a probe tell anything.
    correlatable: bool,
}

pub struct Truth {
    pid: i32,
    devs: [DevTruth; MAX_DEVICES],
}

static TRUTH: Mutex<Option<Truth>> = Mutex::new(None);
/// Held bytes per device, readable without the lock (diagnostics, logs).
static HELD: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
/// Reconciliation steps taken (diagnostics).
pub static STEPS: AtomicU64 = AtomicU64::new(0);

/// Run `f` with this process's truth state (fresh after a fork), waiting at most `wait`
/// (None: never wait). `None` when busy.
pub fn with<R>(wait: Option<Duration>, f: impl FnOnce(&mut Truth) -> R) -> Option<R> {
    register_fork_handler();
    let mut g = match wait {
        None => TRUTH.try_lock()?,
        Some(w) => TRUTH.try_lock_for(w)?,
    };
    let pid = state::get().pid;
    if g.as_ref().is_none_or(|t| t.pid != pid) {
        for h in &HELD {
            h.store(0, Ordering::Relaxed);
        }
        // A forked child's inherited book is leaked, not dropped (a parent thread may have been
        // mid-update at the fork).
        std::mem::forget(g.replace(Truth { pid, devs: Default::default() }));
    }
    Some(f(g.as_mut().expect("set above")))
}

/// Registers [`on_fork_child`] once per process image (an inherited registration stays: an
/// atomic, not `Once`), at `cuInit`: before any of the books it resets can be locked.
fn register_fork_handler() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.load(Ordering::Relaxed) || DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registers a child handler that touches only this module's and its children's statics.
    unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
}

/// In a forked child: the parent's watcher may have held the books' locks at the fork.
extern "C" fn on_fork_child() {
    // SAFETY: an atfork child handler (one thread, forked from outside the shim).
    unsafe { TRUTH.force_unlock_in_child() };
    driver_costs::fork_child();
    crate::checkpoint::fork_child();
}

/// CUDA is initialised in this process: make sure the watcher runs [`tick`], so a context created
/// out of our sight still gets a host PID and its memory reconciled.
pub fn cuda_initialised() {
    crate::guard::ffi("truth::cuda_initialised", (), || {
        register_fork_handler();
        // Driver-held memory and host-PID correlation are due per device every 100-250 ms, so
        // they ride the watcher's 20 ms cadence (housekeeping's 250 ms would slow PID resolution).
        compute::watcher::also_run(tick);
        let _ = compute::get();
    })
}

fn now_ns() -> u64 {
    crate::clock::mono_ns()
}

struct Raw {
    before: u64,
    procs: Vec<(u32, u64)>,
    explained: u64,
    after: u64,
    /// No allocation or free of ours in flight around the NVML call (the correlator's condition).
    settled: bool,
}

/// One consistent (own before, NVML list, allowance, own after) reading of region device `d`: the
/// allowance is read inside the window too, so a stable reading has all four from one moment.
fn read(dt: &mut DevTruth, d: usize) -> Result<Raw, NoTruth> {
    let st = state::get();
    if !dt.nvml_tried {
        dt.nvml_tried = true;
        dt.nvml = driver::nvml_handle(d).map_or(0, |h| h as usize);
    }
    if dt.nvml == 0 {
        return Err(NoTruth::Nvml);
    }
    let h = dt.nvml as crate::ffi::nvmlDevice_t;
    // A held probe block is ours but not in the ledger (never charged to the container): our own
    // count includes it, so the correlator sees it move and the reconciliation never charges it.
    let probe = dt.probe.held_bytes();
    let mut last = None;
    for _ in 0..3 {
        let mark = st.ledger.change_mark();
        let before = st.ledger.own_usage(d).saturating_add(probe);
        let procs = driver::nvml_processes(h).ok_or(NoTruth::Nvml)?;
        let explained = allowance(d);
        let after = st.ledger.own_usage(d).saturating_add(probe);
        let settled = mark.settled_until(st.ledger.change_mark());
        last = Some(Raw { before, procs, explained, after, settled });
        if before == after && settled {
            break;
        }
    }
    Ok(last.expect("loop ran"))
}

/// Driver-held bytes on region device `d` that the ledger explains without counting them: the
/// rounding of every counted data allocation, the unused reserve of stream-ordered pools and the
/// `CUDA_OVERSUBSCRIBE` spills.
/// (Walks the allocation tables: O(allocations), every 250 ms at most.)
fn allowance(d: usize) -> u64 {
    let st = state::get();
    let round =
        |r: &vgpu_core::ledger::AllocRecord| if r.kind == UsageKind::Data { reconcile::rounding(r.bytes) } else { 0 };
    st.allocs
        .sum_on(d, round)
        .saturating_add(st.handles.sum_on(d, round))
        .saturating_add(driver_costs::pool_slack(d))
        .saturating_add(st.spilled_on(d))
}

/// (truth, counted) of region device `d` now, if measurable.
pub fn measure(t: &mut Truth, d: usize) -> Result<Reading, NoTruth> {
    let hp = hostpid::known(d).ok_or(NoTruth::PidUnresolved)?;
    let dt = &mut t.devs[d];
    let Raw { before, procs, explained, after, settled } = read(dt, d)?;
    let truth = procs.iter().find(|p| p.0 == hp).map(|p| p.1).ok_or(NoTruth::NotListed)?;
    if truth == NVML_VALUE_NOT_AVAILABLE {
        return Err(NoTruth::Mig); // MIG (and WDDM) report no per-process figure
    }
    dt.last_truth = Some(truth);
    Ok(Reading { truth, counted_before: before, counted_after: after, allowance: explained, settled })
}

fn note_no_truth(d: usize, why: NoTruth) {
    match why {
        NoTruth::PidUnresolved => crate::once!(
            info,
            "driver-held memory: {why} yet on device {d}; the limit applies to what was counted until it is"
        ),
        _ => crate::once!(
            info,
            "driver-held memory is not reconciled on device {d}: {why}; the limit applies to what was counted"
        ),
    }
}

/// Reconcile region device `d` once. Returns the step applied.
pub fn reconcile(t: &mut Truth, d: usize) -> Result<Step, NoTruth> {
    let r = measure(t, d)?;
    let st = state::get();
    let dt = &mut t.devs[d];
    let step = reconcile::step(&r, dt.held);
    match step {
        Step::Keep => {}
        Step::Charge(b) => {
            st.ledger.force(d, UsageKind::Context, b);
            dt.held += b;
            vgpu_core::counters::record_reconcile(st.region.and_then(|r| r.ext()), d, b);
        }
        Step::Release(b) => {
            st.ledger.release(d, UsageKind::Context, b);
            dt.held -= b;
        }
    }
    if step != Step::Keep {
        STEPS.fetch_add(1, Ordering::Relaxed);
        crate::debug!(
            "truth: device {d}: driver holds {} bytes, counted {} (+{} explained) → reconciliation holds {} ({step:?})",
            r.truth,
            r.counted_after,
            r.allowance,
            dt.held
        );
    }
    HELD[d].store(dt.held, Ordering::Relaxed);
    Ok(step)
}

/// A new context's charge on region device `d` takes over what the reconciliation holds there:
/// `charge(held, probe)` measures the context with the book held (so no reconciliation charges the
/// same memory meanwhile) and returns `(bytes, taken)`; `taken`: `held` is part of `bytes`, the
/// context's charge from now on (given back with the context), so the reconciliation holds none.
/// `probe`: the bytes of a host-PID probe block held on `d` (in the driver's figure, never in the
/// ledger), which the measurement explains as ours, never as the context's.
pub fn hand_over(t: &mut Truth, d: usize, charge: impl FnOnce(u64, u64) -> Result<(u64, bool), ()>) -> Result<u64, ()> {
    let Some(dt) = t.devs.get_mut(d) else { return charge(0, 0).map(|(bytes, _)| bytes) };
    let (bytes, taken) = charge(dt.held, dt.probe.held_bytes())?;
    if taken {
        dt.held = 0;
        HELD[d].store(0, Ordering::Relaxed);
    }
    Ok(bytes)
}

/// Reconcile region device `d` now (waiting at most [`REFUSAL_WAIT`] for the book): driver-held
/// memory just given back, not at the next tick.
pub fn reconcile_now(d: usize) {
    if d >= MAX_DEVICES {
        return;
    }
    crate::guard::ffi("truth::reconcile_now", (), || {
        let _ = with(Some(REFUSAL_WAIT), |t| reconcile(t, d));
    })
}

/// Feed the memory correlator of region device `d` (host PID unknown). Claims the PID when found.
fn correlate(t: &mut Truth, d: usize) {
    let dt = &mut t.devs[d];
    let Ok(Raw { before, mut procs, after, settled, .. }) = read(dt, d) else { return };
    procs.retain(|p| p.1 != NVML_VALUE_NOT_AVAILABLE);
    dt.correlatable = !procs.is_empty();
    let claimed = hostpid::claimed_by_others(d);
    let s = Sample { own_before: before, own_after: after, settled, procs: &procs, claimed: &claimed };
    let Some(hp) = dt.corr.observe(&s) else { return };
    hostpid::found_by_correlation(d, hp);
}

/// Is CUDA active on region device `d` in this process (something counted, or a context seen)?
fn active(d: usize) -> bool {
    let st = state::get();
    if st.ledger.own_usage(d) > 0 {
        if let Some(c) = compute::try_get() {
            // The compute side's NVML work (sm_util, host-PID evidence) follows memory activity.
            c.devs[d].active.store(true, Ordering::Relaxed);
        }
        return true;
    }
    compute::try_get().is_some_and(|c| c.devs[d].active.load(Ordering::Relaxed))
}

/// The periodic reconciliation (on the compute watcher, which every CUDA process runs from
/// `cuInit` on: registered by [`cuda_initialised`]). Never blocks: skipped while an up-front measurement holds the lock.
pub fn tick() {
    if state::try_get().is_none() {
        return;
    }
    let now = now_ns();
    if crate::checkpoint::tick(now) {
        return; // checkpointed: nothing of ours is on the device
    }
    let _ = with(None, |t| {
        for d in 0..MAX_DEVICES {
            if now < t.devs[d].next || !active(d) {
                continue;
            }
            let resolved = hostpid::known(d).is_some();
            t.devs[d].next = now + if resolved { EVERY_NS } else { RESOLVE_EVERY_NS };
            if !resolved {
                correlate(t, d);
            }
            driver_costs::tick(d);
            if let Err(why) = reconcile(t, d) {
                note_no_truth(d, why);
            }
            // After the correlator's sample, so its next one sees a probe's move.
            let unresolved = hostpid::known(d).is_none() && t.devs[d].correlatable;
            t.devs[d].probe.step(d, now, unresolved);
        }
    });
}

/// The allocation path is about to refuse on region device `d`: reconcile first, unless the
/// refusal path did within [`REFUSAL_EVERY_NS`] (no lock, no system call then). True when the
/// reconciliation gave bytes back (the caller then checks again).
pub fn before_refusal(d: usize) -> bool {
    let Some(due) = REFUSAL_DUE.get(d) else { return false };
    let now = now_ns();
    let next = due.load(Ordering::Relaxed);
    if now < next || due.compare_exchange(next, now + REFUSAL_EVERY_NS, Ordering::Relaxed, Ordering::Relaxed).is_err() {
        return false;
    }
    crate::guard::ffi("truth::before_refusal", false, || {
        with(Some(REFUSAL_WAIT), |t| {
            // A held probe block is not in the ledger (it never refuses anything); freeing it
            // gives the device back the room it may hold beyond the container's limit.
            t.devs[d].probe.release_now(d);
            matches!(reconcile(t, d), Ok(Step::Release(_)))
        })
        .unwrap_or(false)
    })
}

/// Up-front measurement of one driver operation on region device `d` that makes the driver hold
/// memory (`op`: the real call). Its cost (NVML's figure across the call, less our own counting meanwhile) is
/// charged as `kind` against the limit and recorded under `key()` in the handle table (owner
/// `owner`, so a context teardown gives it back). A cost over the limit runs `undo(key)` and
/// returns `CUDA_ERROR_OUT_OF_MEMORY`. Without a usable truth, or with an allocation or free of
/// ours in flight at either reading, the operation just runs (the periodic reconciliation catches
/// up).
pub fn measured(
    d: usize,
    kind: UsageKind,
    owner: u64,
    what: &str,
    op: impl FnOnce() -> crate::ffi::CUresult,
    key: impl FnOnce() -> u64,
    undo: impl FnOnce(u64),
) -> crate::ffi::CUresult {
    use crate::ffi::*;
    let st = state::get();
    let mut undo_key = None;
    let mut op = Some(op);
    let r = with(Some(REFUSAL_WAIT), |t| {
        let before = measure(t, d).ok();
        let r = op.take().expect("run once")();
        if r != CUDA_SUCCESS {
            return r;
        }
        let k = key();
        let (Some(b), Ok(a)) = (before, measure(t, d)) else { return r };
        let Some((cost, _)) = reconcile::across(&b, &a) else {
            crate::debug!(
                "{what}: an allocation or free of ours was in flight across its measurement: left to the reconciliation"
            );
            return r;
        };
        if cost == 0 {
            return r;
        }
        let limit = st.memory_limit(d);
        let res = match st.ledger.reserve(d, cost, kind, limit) {
            Ok(res) => res,
            Err(ReserveError::OverLimit(o)) => {
                crate::warn!(
                    "{what}: the driver holds {cost} bytes for it on device {d}: {} used + {cost} > {} limit; undone",
                    o.usage,
                    o.limit
                );
                undo_key = Some(k);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            Err(e) => {
                crate::error!("{what}: {e}; its {cost} bytes are left to the reconciliation");
                return r;
            }
        };
        res.commit();
        let rec = vgpu_core::ledger::AllocRecord { dev: d, bytes: cost, kind, owner };
        if let Some(stale) = st.handles.insert(k, rec) {
            st.ledger.release(stale.dev, stale.kind, stale.bytes);
        }
        crate::debug!("{what}: counted {cost} driver-held bytes on device {d} (key {k:#x})");
        r
    });
    let r = match (r, op.take()) {
        (Some(r), _) => r,
        // Lock busy for long (another measurement stuck in the driver): run uncounted up front.
        (None, Some(op)) => op(),
        (None, None) => CUDA_ERROR_UNKNOWN,
    };
    if let Some(k) = undo_key {
        undo(k);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn book(held: u64) -> Truth {
        let mut t = Truth { pid: 1, devs: Default::default() };
        t.devs[0].held = held;
        t
    }

    #[test]
    fn a_context_charge_takes_over_what_the_reconciliation_holds() {
        let mut t = book(62 * MIB);
        let r = hand_over(&mut t, 0, |held, probe| {
            assert_eq!(held, 62 * MIB, "the charge sees what the reconciliation holds");
            assert_eq!(probe, 0, "no probe block held");
            Ok((64 * MIB, true))
        });
        assert_eq!(r, Ok(64 * MIB));
        assert_eq!(t.devs[0].held, 0, "the context's charge owns those bytes now");
        assert_eq!(t.devs[1].held, 0);
    }

    #[test]
    fn a_refused_or_unmeasured_context_leaves_the_reconciliation_its_charge() {
        let mut t = book(62 * MIB);
        assert_eq!(hand_over(&mut t, 0, |_, _| Err(())), Err(()));
        assert_eq!(t.devs[0].held, 62 * MIB);
        assert_eq!(hand_over(&mut t, 0, |_, _| Ok((0, false))), Ok(0));
        assert_eq!(t.devs[0].held, 62 * MIB);
        // A device index out of range is measured alone.
        assert_eq!(hand_over(&mut t, MAX_DEVICES, |held, probe| Ok((held + probe + 5, true))), Ok(5));
    }
}
