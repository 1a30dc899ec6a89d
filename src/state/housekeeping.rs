//! Periodic upkeep of a CUDA-using process: one small thread, started when the process state is
//! built (the first CUDA/NVML call), never in a process that does not use CUDA.
//!
//! [`tick`] runs every [`PERIOD`]; add new periodic checks there. Today it:
//! - sweeps the slots (and overflow records) of dead processes, so their memory leaves the limit
//!   check, every process's views and the region the monitor reads within ~1 s of the death,
//!   without anyone allocating (docs/design.md "Memory ledger"). One process of the container
//!   scans per period (`slots::take_scan_turn`, a due time in the extension); the scan is
//!   lock-free; the container lock is only taken, briefly and bounded, when something is to be
//!   freed;
//! - checks that our own slot is still ours (a foreign writer could free it) and re-attaches;
//! - warns once per device when the container's usage is above a (shrunk) live limit, and
//!   revokes every lease on a device that is full (docs/design.md "Memory ledger", leases).
//! - publishes the host GPU sample for the node agent where NVML is initialised anyway, once per
//!   5 s for the container (`hostgpu`).
//!
//! The thread only sleeps and calls `tick`: it holds nothing across a `fork`, and a forked child
//! starts its own when it builds its own state.

use crate::state::{self, State};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;
use vgpu_core::ledger::Reseat;
use vgpu_core::region::MAX_DEVICES;
use vgpu_core::slots;

/// Sweep period: a dead process is gone after at most one period plus the sweep itself.
pub const PERIOD: Duration = Duration::from_millis(250);
/// Bound on the container lock for a sweep (a stopped holder must not stall upkeep for long).
const SWEEP_LOCK_TIMEOUT: Duration = Duration::from_millis(100);
/// Slots that get the full liveness check (a `/proc/<pid>/stat` read: zombie, recycled pid) per
/// tick, rotating; every other slot gets `kill(pid, 0)` only. Up to this many processes every
/// death is seen within one period; beyond, a zombie or a recycled pid within
/// ⌈processes / FULL_CHECKS_PER_TICK⌉ periods (a reaped process always within one).
const FULL_CHECKS_PER_TICK: usize = 64;
static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// Pid that started the thread (a forked child has another pid and starts its own).
static STARTED_BY: AtomicI32 = AtomicI32::new(0);
/// Devices already warned about "usage above the limit" in this process.
static OVER_LIMIT_WARNED: AtomicU32 = AtomicU32::new(0);

/// Starts the thread once per process (called right after the state is built).
pub fn start(st: &'static State) {
    if st.region.is_none() || STARTED_BY.swap(st.pid, Ordering::AcqRel) == st.pid {
        return;
    }
    OVER_LIMIT_WARNED.store(0, Ordering::Relaxed);
    let pid = st.pid;
    let r = std::thread::Builder::new().name("vgpu-housekeep".into()).spawn(move || {
        loop {
            std::thread::sleep(PERIOD);
            // A forked child never runs this thread; the check guards against a stale state.
            match state::try_get() {
                Some(st) if st.pid == pid => crate::guard::ffi("housekeeping", (), || tick(st)),
                _ => return,
            }
        }
    });
    if let Err(e) = r {
        STARTED_BY.store(0, Ordering::Release);
        crate::warn!(
            "cannot start the housekeeping thread ({e}): dead processes' memory is reclaimed only when an allocation would be refused"
        );
    }
}

/// One round of upkeep.
pub fn tick(st: &State) {
    let Some(region) = st.region else { return };
    sweep_dead(st, region);
    keep_own_seat(st, region);
    crate::state::region_tick();
    warn_over_limit(st);
    crate::hostgpu::tick(region);
}

fn sweep_dead(st: &State, region: &vgpu_core::regionfile::Region) {
    // One scan per period for the whole container (each probe is a system call or two per
    // slot: every process scanning every slot would cost the node n² probes per period).
    if !slots::take_scan_turn(region, crate::clock::mono_ns(), PERIOD.as_nanos() as u64) {
        return;
    }
    let n = region.shared().proc_num.load(Ordering::Relaxed).clamp(0, 1024) as usize;
    let from = CURSOR.fetch_add(FULL_CHECKS_PER_TICK, Ordering::Relaxed) % n.max(1);
    let full = |k: usize| k == usize::MAX || n <= FULL_CHECKS_PER_TICK || (k + n - from) % n < FULL_CHECKS_PER_TICK;
    let probe = |k: usize, pid: i32, start: u64| if full(k) { slots::is_dead(pid, start) } else { slots::is_gone(pid) };
    if !slots::has_sweepable_by(region, st.pid, &probe) {
        return;
    }
    match slots::sweep(region, st.pid, SWEEP_LOCK_TIMEOUT) {
        Ok(n) if n > 0 => crate::info!("reclaimed {n} slot(s) of exited processes"),
        Ok(_) => {}
        Err(e) => crate::debug!("sweep skipped: {e}"),
    }
}

/// Our slot must still carry our pid; if someone freed it, attach again (usage since then is
/// lost to the region, logged once).
fn keep_own_seat(st: &State, region: &vgpu_core::regionfile::Region) {
    if let Reseat::Taken { slot, .. } = st.ledger.keep_seat() {
        crate::once!(
            error,
            "our slot {slot} in {} was taken by another writer; re-attaching (usage counted before is lost)",
            region.path().display()
        );
    }
}

/// Live limits (docs/design.md "Memory ledger"): a limit shrunk below the usage frees nothing; say so once.
fn warn_over_limit(st: &State) {
    for d in 0..MAX_DEVICES {
        let limit = st.memory_limit(d);
        if limit == 0 {
            continue;
        }
        let used = st.ledger.usage(d);
        if used >= limit {
            // Full or over (a lowered limit, a process outside our protocol): no lease may let
            // an allocation through unchecked.
            st.ledger.revoke_leases(d);
        }
        let bit = 1u32 << d;
        if used > limit && OVER_LIMIT_WARNED.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            crate::warn!(
                "device {d}: container uses {used} bytes, above its memory limit of {limit} bytes (the limit was lowered?): nothing is freed, new allocations are refused until usage falls below it"
            );
        }
    }
}
