//! A checkpointed process holds no device memory (`cuda-checkpoint`, or any tool calling
//! `cuCheckpointProcessCheckpoint` on our PID: never through our hooks). While the driver reports
//! our process `CU_PROCESS_STATE_CHECKPOINTED`, its usage leaves our slot so the container gets that
//! room back; once it reports anything else (restoring, locked after a restore, running, failed)
//! the same bytes are charged again, per kind, even over the limit (they are the process's own
//! memory again; every lease is revoked so the next allocations are checked against the new total).
//!
//! Polled from the truth tick (the watcher thread, every [`EVERY_NS`]): the room comes back within
//! one poll of the checkpoint, the charge within one poll of the restore. The reconciliation
//! pauses while checkpointed, so NVML's 0 for us and then its restored figure are never read as
//! driver-held memory coming and going.

use crate::{driver, state};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vgpu_core::region::{MAX_DEVICES, UsageKind};
use vgpu_core::sync::Mutex;

const EVERY_NS: u64 = 250_000_000;
const KINDS: [UsageKind; 3] = [UsageKind::Context, UsageKind::Module, UsageKind::Data];

/// Per device, `[context, module, data]` bytes taken off our slot while checkpointed.
static SUSPENDED: Mutex<Option<[[u64; 3]; MAX_DEVICES]>> = Mutex::new(None);
static IS_SUSPENDED: AtomicBool = AtomicBool::new(false);
static NEXT_NS: AtomicU64 = AtomicU64::new(0);

/// Our usage is off the slot (checkpointed): the reconciliation must not run.
pub fn suspended() -> bool {
    IS_SUSPENDED.load(Ordering::Acquire)
}

/// The driver's checkpoint state of this process (`None`: no checkpoint support or no answer).
fn driver_state() -> Option<cuda_types::CUprocessState> {
    let f = driver::cuCheckpointProcessGetState()?;
    let mut s: cuda_types::CUprocessState = 0;
    // SAFETY: `s` is a valid out-pointer for the call's duration; our own PID.
    (unsafe { f(std::process::id() as i32, &mut s) } == cuda_types::CUDA_SUCCESS).then_some(s)
}

/// Periodic (truth tick, `now` CLOCK_MONOTONIC ns). True while suspended.
pub fn tick(now: u64) -> bool {
    if now < NEXT_NS.load(Ordering::Relaxed) {
        return suspended();
    }
    NEXT_NS.store(now + EVERY_NS, Ordering::Relaxed);
    let Some(s) = driver_state() else { return suspended() };
    let checkpointed = s == cuda_types::CU_PROCESS_STATE_CHECKPOINTED;
    if checkpointed != suspended() {
        if checkpointed { suspend() } else { resume() }
    }
    suspended()
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
}
