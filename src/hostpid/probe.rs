//! Host-PID probe (docs/design.md "Host PIDs", the probe): the last resort of host-PID resolution.
//!
//! Two containers that start together with the same workload can leave every other path without
//! an answer: their contexts come up in the same instant (the creation diff lists both PIDs), both
//! saturate the device (the utilisation evidence never sees one idle while the other works) and
//! their allocations move NVML's figures in step (the memory correlator matches both). Then, while
//! a device stays active and our host PID unknown for [`AFTER_NS`], the watcher (`truth::tick`, every
//! 100 ms while unresolved) allocates a block of a size of its own in the device's primary
//! context, holds it for [`HOLD_NS`] and frees it. Our own count moves by exactly that much and so does
//! our PID's `usedGpuMemory`, which the memory correlator matches; another container probing at
//! the same moment most likely drew another size, and its PID gets a strike.
//!
//! Off unless `VGPU_HOST_PID_PROBE=1` (vgpu-core `config`): the block is memory the application
//! never asked for, and on a real driver its free waits for the device's queued work.
//!
//! Bounded: at most [`MAX_PROBES`] per device and process, one held at a time, only with four
//! times its size free under the limit, only while NVML lists per-process figures (not MIG),
//! only in a primary context that is already active (never creating one), on the watcher thread.
//!
//! Not charged to the container: an allocation that fits the application's own usage is never
//! refused because of it, in this process or any other of the container. Only this process's
//! readings of its own count for the truth reconciliation, the correlator and a new context's
//! measurement (`truth::hand_over`) include it ([`Probe::held_bytes`]), so our count moves by
//! exactly the block and the driver's figure beside it is explained, never charged. While it is held, the container may hold up to the
//! block beyond its limit on the device: the watcher frees it at its next step once the
//! container's usage leaves less room than the block, and a refusal in this process frees it at
//! once (`truth::before_refusal`). It is not in the allocation table, so nothing the application
//! frees can match it. A `cuDevicePrimaryCtxReset` meanwhile destroys it with the context: the
//! probe then only forgets it.

use crate::driver;
use crate::ffi::*;
use crate::state;
use std::sync::atomic::{AtomicU32, Ordering};
use vgpu_core::reconcile::GRANULE;
use vgpu_core::region::MAX_DEVICES;

/// Unresolved this long after the device became active (the creation diff, the evidence and the
/// correlator of the application's own allocations had their chance) before the first probe.
pub const AFTER_NS: u64 = 600_000_000;
/// How long a probe block is held: three correlator samples (100 ms apart) see it.
pub const HOLD_NS: u64 = 350_000_000;
/// Pause between two probes of one device.
const GAP_NS: u64 = 400_000_000;
pub const MAX_PROBES: u32 = 8;
/// Probe sizes in 2 MiB granules: any two differ by more than the correlator's tolerance (our
/// move less one granule below, plus a quarter or one granule above), so two containers probing
/// at once are told apart unless they drew the same size (then both probe again).
const SIZES: [u64; 6] = [2, 4, 7, 12, 20, 33];

/// `cuDevicePrimaryCtxReset` calls per CUDA ordinal (a held probe died with its context).
static RESETS: [AtomicU32; MAX_DEVICES] = [const { AtomicU32::new(0) }; MAX_DEVICES];

/// The application reset the primary context of `ordinal` (called from the reset hook).
pub fn primary_reset(ordinal: CUdevice) {
    if let Some(r) = usize::try_from(ordinal).ok().and_then(|o| RESETS.get(o)) {
        r.fetch_add(1, Ordering::AcqRel);
    }
}

struct Held {
    ptr: CUdeviceptr,
    bytes: u64,
    ordinal: CUdevice,
    ctx: CUcontext,
    resets: u32,
    until: u64,
}

/// Probe state of one region device (inside the truth book; a forked child starts afresh).
#[derive(Default)]
pub struct Probe {
    held: Option<Held>,
    /// When the first probe may run (0: the device was not seen unresolved yet).
    next: u64,
    done: u32,
}

// SAFETY: the context handle is an opaque driver token, used only under the truth lock.
unsafe impl Send for Probe {}

impl Probe {
    /// One step for region device `d` at `now` (CLOCK_MONOTONIC ns): free a block that is due
    /// (or that the container's usage has caught up with), or, while `unresolved` and the probe
    /// is switched on, start one when it is time.
    pub fn step(&mut self, d: usize, now: u64, unresolved: bool) {
        if let Some(h) = &self.held {
            if now >= h.until || !room_beside(d, h.bytes) {
                self.release_now(d);
            }
            return;
        }
        if !unresolved || self.done >= MAX_PROBES || !state::get().config.host_pid_probe {
            return;
        }
        if self.next == 0 {
            self.next = now + AFTER_NS;
            return;
        }
        if now < self.next {
            return;
        }
        self.next = now + HOLD_NS + GAP_NS;
        self.done += 1;
        let bytes = GRANULE * SIZES[draw(now) % SIZES.len()];
        match acquire(d, bytes, now + HOLD_NS) {
            Ok(h) => {
                crate::debug!("host pid probe on device {d}: holding {bytes} bytes");
                self.held = Some(h);
            }
            Err(why) => crate::debug!("host pid probe on device {d} skipped: {why}"),
        }
        if self.done == MAX_PROBES {
            crate::once!(
                info,
                "host PID still unresolved on device {d} after {MAX_PROBES} probes: the limiter runs on self-measured time"
            );
        }
    }

    /// Bytes of the block held now (0: none): part of this process's own count in its truth
    /// readings, never in the ledger.
    pub fn held_bytes(&self) -> u64 {
        self.held.as_ref().map_or(0, |h| h.bytes)
    }

    /// Free a held block now (on the calling thread). True if one was held.
    pub fn release_now(&mut self, d: usize) -> bool {
        match self.held.take() {
            Some(h) => {
                release(d, h);
                true
            }
            None => false,
        }
    }
}

/// A size index of our own: pid and time mixed (splitmix64), so two processes probing at the
/// same moment rarely draw alike.
fn draw(now: u64) -> usize {
    let mut z = now ^ ((state::get().pid as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as usize
}

/// Runs `f` with `ctx` current and this thread's stream-capture mode relaxed (the watcher's is
/// already; a release before a refusal runs on an application thread).
fn in_ctx<R>(ctx: CUcontext, f: impl FnOnce() -> R) -> Option<R> {
    driver::with_relaxed_capture(|| driver::with_ctx(ctx, f))
}

/// The container's usage of region device `d` leaves at least `bytes` under its limit.
fn room_beside(d: usize, bytes: u64) -> bool {
    let st = state::get();
    let limit = st.memory_limit(d);
    limit == 0 || st.ledger.usage(d).saturating_add(bytes) <= limit
}

fn acquire(d: usize, bytes: u64, until: u64) -> Result<Held, &'static str> {
    if !room_beside(d, bytes.saturating_mul(4)) {
        return Err("not enough room under the limit");
    }
    let st = state::get();
    let first = st.devices().ordinals_of(d).first().copied();
    let ordinal = first.filter(|&o| (o as usize) < MAX_DEVICES).ok_or("no CUDA ordinal")?;
    let (Some(state_of), Some(retain), Some(alloc)) =
        (driver::cuDevicePrimaryCtxGetState(), driver::cuDevicePrimaryCtxRetain(), driver::cuMemAlloc_v2())
    else {
        return Err("driver entry points missing");
    };
    let (mut flags, mut active) = (0u32, 0i32);
    if unsafe { state_of(ordinal, &mut flags, &mut active) } != CUDA_SUCCESS || active == 0 {
        return Err("no active primary context");
    }
    let resets = RESETS[ordinal as usize].load(Ordering::Acquire);
    let mut ctx: CUcontext = std::ptr::null_mut();
    // The real retain: our hook would count a reference the application does not hold.
    if unsafe { retain(&mut ctx, ordinal) } != CUDA_SUCCESS {
        return Err("primary context retain failed");
    }
    let mut ptr: CUdeviceptr = 0;
    let r = in_ctx(ctx, || unsafe { alloc(&mut ptr, bytes as usize) });
    if r != Some(CUDA_SUCCESS) {
        release_ctx(ordinal);
        return Err("allocation failed");
    }
    Ok(Held { ptr, bytes, ordinal, ctx, resets, until })
}

fn release(d: usize, h: Held) {
    let reset = RESETS[h.ordinal as usize].load(Ordering::Acquire) != h.resets;
    if !reset {
        if let Some(free) = driver::cuMemFree_v2() {
            in_ctx(h.ctx, || unsafe { free(h.ptr) });
        }
        release_ctx(h.ordinal);
    }
    crate::debug!("host pid probe on device {d}: released {} bytes", h.bytes);
}

fn release_ctx(ordinal: CUdevice) {
    if let Some(rel) = driver::cuDevicePrimaryCtxRelease_v2() {
        unsafe { rel(ordinal) };
    }
}
