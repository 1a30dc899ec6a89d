//! A checkpointed process holds no device memory (`cuda-checkpoint`, or any tool calling
//! `cuCheckpointProcessCheckpoint` on our PID: never through our hooks). While the driver reports
//! our process `CU_PROCESS_STATE_CHECKPOINTED`, its usage leaves our slot so the container gets that
//! room back; once it reports anything else (restoring, locked after a restore, running, failed)
//! the same bytes are charged again, per kind, even over the limit (they are the process's own
//! memory again; every lease is revoked so the next allocations are checked against the new total).
//!
//! The driver is asked on a thread of its own (every [`EVERY_NS`]), since a driver may hold the
//! calls of a locked process until it is unlocked; the truth tick (the watcher thread) reads the
//! answer and never waits for it. While that question is held (over [`STUCK_NS`]: the process is
//! locked), NVML decides instead: our host PID (once resolved) listed with no memory on every
//! device we had memory on, twice in a row, is a checkpoint; listed with memory again, a restore.
//! The room comes back within one poll of the checkpoint, the charge within one poll of the
//! restore. The reconciliation pauses while checkpointed, so NVML's 0 for us and then its restored
//! figure are never read as driver-held memory coming and going.

use crate::{driver, state};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use vgpu_core::region::{MAX_DEVICES, UsageKind};
use vgpu_core::sync::Mutex;

const EVERY_NS: u64 = 250_000_000;
const STUCK_NS: u64 = 1_000_000_000;
const KINDS: [UsageKind; 3] = [UsageKind::Context, UsageKind::Module, UsageKind::Data];

/// Per device, `[context, module, data]` bytes taken off our slot while checkpointed.
static SUSPENDED: Mutex<Option<[[u64; 3]; MAX_DEVICES]>> = Mutex::new(None);
static IS_SUSPENDED: AtomicBool = AtomicBool::new(false);
static NEXT_NS: AtomicU64 = AtomicU64::new(0);
/// The asking thread runs (in this process: reset in a forked child).
static ASKER: AtomicBool = AtomicBool::new(false);
/// Its last answer (`CUprocessState`; -1: none yet or the call failed).
static LAST_STATE: AtomicI64 = AtomicI64::new(-1);
/// CLOCK_MONOTONIC ns at which its call in progress began (0: none in progress).
static CALL_SINCE: AtomicU64 = AtomicU64::new(0);
/// NVML showed us without memory this many ticks in a row (while the driver's answer is held).
static GONE_TICKS: AtomicU64 = AtomicU64::new(0);

/// Our usage is off the slot (checkpointed): the reconciliation must not run.
pub fn suspended() -> bool {
    IS_SUSPENDED.load(Ordering::Acquire)
}

/// Start the thread that asks the driver for our checkpoint state (once; false when the driver
/// has no checkpointing, which then cannot happen).
fn start_asker() -> bool {
    let Some(get) = driver::cuCheckpointProcessGetState() else { return false };
    if ASKER.swap(true, Ordering::AcqRel) {
        return true;
    }
    let spawned = std::thread::Builder::new().name("vgpu-ckpt".into()).spawn(move || {
        loop {
            CALL_SINCE.store(crate::clock::mono_ns().max(1), Ordering::Release);
            let mut s: cuda_types::CUprocessState = 0;
            // SAFETY: `s` is a valid out-pointer for the call's duration; our own PID.
            let r = unsafe { get(std::process::id() as i32, &mut s) };
            CALL_SINCE.store(0, Ordering::Release);
            LAST_STATE.store(if r == cuda_types::CUDA_SUCCESS { i64::from(s) } else { -1 }, Ordering::Release);
            std::thread::sleep(std::time::Duration::from_nanos(EVERY_NS));
        }
    });
    if spawned.is_err() {
        crate::once!(warn, "checkpoint state thread not started: a checkpoint of this process frees no room");
        return false;
    }
    true
}

/// Does NVML show our (resolved) host PID holding memory on the devices in `devs`? `None`: it
/// cannot tell (no host PID, no NVML, no per-process figures).
fn nvml_holds(st: &state::State, devs: &[usize]) -> Option<bool> {
    let me = st.region.and_then(|r| vgpu_core::slots::hostpid(r, st.pid)).filter(|&h| h > 0)? as u32;
    let mut any = false;
    for &d in devs {
        let procs = driver::nvml_processes(driver::nvml_handle(d)?)?;
        match procs.into_iter().find(|&(pid, _)| pid == me).map(|(_, used)| used) {
            // Not listed (a list taken in passing, a PID namespace NVML does not resolve) or no
            // figure (NVML_VALUE_NOT_AVAILABLE): no evidence either way. Reading absence as a
            // checkpoint would give the container room the process still holds.
            None | Some(u64::MAX) => return None,
            Some(used) if used > 0 => any = true,
            Some(_) => {}
        }
    }
    Some(any)
}

/// Devices this process has (or, suspended, had) memory on.
fn devices_in_use(st: &state::State) -> Vec<usize> {
    match *SUSPENDED.lock() {
        Some(taken) => (0..MAX_DEVICES).filter(|&d| taken[d].iter().any(|&b| b > 0)).collect(),
        None => (0..MAX_DEVICES).filter(|&d| st.ledger.own_usage(d) > 0).collect(),
    }
}

/// The driver has held our state question for over [`STUCK_NS`]: the process is locked.
fn locked(now: u64) -> bool {
    let since = CALL_SINCE.load(Ordering::Acquire);
    since != 0 && now.saturating_sub(since) > STUCK_NS
}

/// Periodic (truth tick, `now` CLOCK_MONOTONIC ns). True while the reconciliation must not run:
/// suspended, or locked (NVML's figures for us are in flux then).
pub fn tick(now: u64) -> bool {
    if now >= NEXT_NS.load(Ordering::Relaxed) {
        NEXT_NS.store(now + EVERY_NS, Ordering::Relaxed);
        if start_asker() {
            poll(now);
        }
    }
    suspended() || locked(now)
}

fn poll(now: u64) {
    let checkpointed = if locked(now) {
        // Locked: the driver holds our question; NVML tells whether our memory is gone.
        let st = state::get();
        let devs = devices_in_use(st);
        match (devs.is_empty(), nvml_holds(st, &devs)) {
            (false, Some(false)) => GONE_TICKS.fetch_add(1, Ordering::Relaxed) + 1 >= 2,
            (false, Some(true)) => {
                GONE_TICKS.store(0, Ordering::Relaxed);
                false
            }
            _ => return,
        }
    } else {
        GONE_TICKS.store(0, Ordering::Relaxed);
        match LAST_STATE.load(Ordering::Acquire) {
            -1 => return,
            s => s == i64::from(cuda_types::CU_PROCESS_STATE_CHECKPOINTED),
        }
    };
    if checkpointed != suspended() {
        if checkpointed { suspend() } else { resume() }
    }
}

fn suspend() {
    let st = state::get();
    let mut taken = [[0u64; 3]; MAX_DEVICES];
    let mut total = 0u64;
    for (d, t) in taken.iter_mut().enumerate() {
        *t = st.ledger.own_usage_by_kind(d);
        for (i, kind) in KINDS.into_iter().enumerate() {
            st.ledger.release(d, kind, t[i]);
            total = total.saturating_add(t[i]);
        }
    }
    *SUSPENDED.lock() = Some(taken);
    IS_SUSPENDED.store(true, Ordering::Release);
    crate::info!(
        "process checkpointed: its {total} bytes of device memory are given back to the container until it is restored"
    );
}

fn resume() {
    let st = state::get();
    let Some(taken) = SUSPENDED.lock().take() else { return };
    let mut total = 0u64;
    for (d, t) in taken.iter().enumerate() {
        for (i, kind) in KINDS.into_iter().enumerate() {
            st.ledger.force(d, kind, t[i]);
            total = total.saturating_add(t[i]);
        }
    }
    IS_SUSPENDED.store(false, Ordering::Release);
    crate::info!("process restored: its {total} bytes of device memory are charged again");
}

/// In a forked child: the parent's checkpoint state is not the child's.
pub fn fork_child() {
    // SAFETY: called from the atfork child handler (one thread).
    unsafe { SUSPENDED.force_unlock_in_child() };
    *SUSPENDED.lock() = None;
    IS_SUSPENDED.store(false, Ordering::Release);
    NEXT_NS.store(0, Ordering::Relaxed);
    // The asking thread is not in the child: a new one starts at the child's first tick.
    ASKER.store(false, Ordering::Release);
    LAST_STATE.store(-1, Ordering::Release);
    CALL_SINCE.store(0, Ordering::Release);
    GONE_TICKS.store(0, Ordering::Relaxed);
}
