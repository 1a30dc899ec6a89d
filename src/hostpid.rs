//! Our host PID: the PID NVML reports for this process (docs/design.md "Host PIDs"), which keys
//! every per-process figure the memory reconciliation (`truth`) and the compute correction
//! (`compute`) read. The ways it is found: the NVML diff around the application's first context
//! on a device ([`ctx_creating`], [`ctx_created`]), the container's claims in the region (each
//! process records the PID it resolved: [`claim`]), the watcher's NVML rounds ([`resolve`],
//! [`evidence`]), what the memory correlator finds ([`found_by_correlation`], fed by `truth`'s
//! readings) and the last-resort [`probe`]. The decisions are `vgpu_core::hostpid`'s.
//!
//! One resolver per device, process-local, abandoned in a forked child (its host PID is not the
//! parent's) by this module's own fork handler.

pub mod probe;

use crate::driver;
use crate::ffi::*;
use crate::state;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use vgpu_core::hostpid::resolver::{How, PidResolver, View};
use vgpu_core::region::MAX_DEVICES;
use vgpu_core::sync::Mutex;

/// One device's resolution in this process.
#[derive(Default)]
struct Resolve {
    pids: PidResolver,
    /// Our host PID on the device, once resolved.
    hostpid: Option<u32>,
    /// The application's first context on the device was seen (its diff taken or missed).
    first_ctx_seen: bool,
}

static DEVS: AtomicPtr<[Mutex<Resolve>; MAX_DEVICES]> = AtomicPtr::new(std::ptr::null_mut());
static INIT: Mutex<()> = Mutex::new(());

/// The resolver of region device `d`, built on first use.
fn dev(d: usize) -> &'static Mutex<Resolve> {
    let p = DEVS.load(Ordering::Acquire);
    // SAFETY: a non-null `DEVS` points to a leaked box that lives for the rest of the process.
    let devs = if p.is_null() { init_slow() } else { unsafe { &*p } };
    &devs[d.min(MAX_DEVICES - 1)]
}

#[cold]
fn init_slow() -> &'static [Mutex<Resolve>; MAX_DEVICES] {
    register_fork_handling();
    let _g = INIT.lock();
    let p = DEVS.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as in `dev`.
        return unsafe { &*p };
    }
    let b: &'static mut [Mutex<Resolve>; MAX_DEVICES] = Box::leak(Box::new(std::array::from_fn(|_| Mutex::default())));
    DEVS.store(b, Ordering::Release);
    b
}

/// A forked child resolves its own host PID: the parent's resolvers are abandoned (leaked; a
/// parent thread may have held one of their locks at the fork).
fn register_fork_handling() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if !DONE.swap(true, Ordering::AcqRel) {
        extern "C" fn on_fork_child() {
            DEVS.store(std::ptr::null_mut(), Ordering::Release);
            // SAFETY: atfork child handler; the forking thread was not inside `init_slow` (fork is
            // called by the application, not from within the shim).
            unsafe { INIT.force_unlock_in_child() };
        }
        // SAFETY: registers a plain `extern "C"` function with no arguments, as glibc expects.
        unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
    }
}

/// What the region says about the other processes of the container.
struct Others {
    /// Host PIDs claimed by other live slots.
    claimed: Vec<u32>,
    /// Their (pid, host pid) pairs.
    pairs: Vec<(u32, u32)>,
    /// Pids of live slots without a host PID that hold memory on the device (ours included).
    unresolved: Vec<u32>,
}

impl Others {
    fn view<'a>(&'a self, present: &'a [u32], my_pid: u32) -> View<'a> {
        View { present, claimed: &self.claimed, my_pid, pairs: &self.pairs, unresolved: &self.unresolved }
    }
}

/// The other live slots of the region, as seen from region device `d`. A slot with a lower index
/// that claims the same PID as we do wins it (so two claimants never both yield).
fn others(d: usize, mine: Option<u32>) -> Others {
    let st = state::get();
    let me = st.pid;
    let mut o = Others { claimed: Vec::new(), pairs: Vec::new(), unresolved: vec![me as u32] };
    let Some(r) = st.region else { return o };
    let sh = r.shared();
    let my_idx = vgpu_core::slots::live(sh).find(|s| s.pid == me).map(|s| s.index);
    for s in vgpu_core::slots::live(sh) {
        let (k, pid, h) = (s.index, s.pid, s.hostpid);
        if pid == me || pid <= 0 {
            continue;
        }
        if h <= 0 {
            if s.awaits_host_pid_on(d) {
                o.unresolved.push(pid as u32);
            }
            continue;
        }
        let h = h as u32;
        if Some(h) == mine && my_idx.is_some_and(|m| m < k) {
            continue; // we keep it
        }
        o.claimed.push(h);
        o.pairs.push((pid as u32, h));
    }
    o
}

/// Host PIDs claimed by other live slots, as seen from region device `d` (the memory correlator
/// never names one).
pub(crate) fn claimed_by_others(d: usize) -> Vec<u32> {
    others(d, None).claimed
}

/// Host PIDs of the container's live slots (ours included once resolved).
pub(crate) fn container_hostpids() -> Vec<u32> {
    let Some(r) = state::get().region else { return Vec::new() };
    vgpu_core::slots::live(r.shared()).map(|s| s.hostpid).filter(|&h| h > 0).map(|h| h as u32).collect()
}

/// Our host PID as NVML reports it on region device `d`, once someone resolved it.
pub(crate) fn known(d: usize) -> Option<u32> {
    if let Some(h) = dev(d).lock().hostpid {
        return Some(h);
    }
    let st = state::get();
    st.region.and_then(|r| vgpu_core::slots::hostpid(r, st.pid)).filter(|&h| h > 0).map(|h| h as u32)
}

/// One resolver step on NVML's process list of region device `d` (the watcher's NVML round).
/// Returns our host PID there now; a new answer is claimed in our slot.
pub(crate) fn resolve(d: usize, present: &[u32]) -> Option<u32> {
    let mut rs = dev(d).lock();
    let oth = others(d, rs.hostpid);
    let got = rs.pids.step(&oth.view(present, state::get().pid as u32)).map(|(h, _)| h);
    if got != rs.hostpid {
        rs.hostpid = got;
        if let Some(hp) = got {
            crate::debug!("host pid: device {d}: resolved {:?}", rs.pids.resolved());
            drop(rs);
            claim(d, hp);
        }
    }
    got
}

/// Evidence from one NVML span of region device `d`: which listed PIDs were busy while we were
/// (`my_busy`: our self-measured busy fraction of the span; `my_inflight`: we had work queued or
/// running in it) or were not; `util`: SM percent per PID in the span.
pub(crate) fn evidence(d: usize, present: &[u32], my_busy: Option<f64>, my_inflight: bool, util: &[(u32, u32)]) {
    let mut rs = dev(d).lock();
    let oth = others(d, rs.hostpid);
    rs.pids.observe(&oth.view(present, state::get().pid as u32), my_busy, my_inflight, util);
}

/// The memory correlator (fed by `truth`'s readings) names `hp` as our host PID on device `d`:
/// adopted and claimed unless another way found it first.
pub(crate) fn found_by_correlation(d: usize, hp: u32) {
    let mut rs = dev(d).lock();
    if rs.hostpid.is_some() {
        return;
    }
    rs.pids.adopt(hp);
    rs.hostpid = Some(hp);
    drop(rs);
    claim(d, hp);
    crate::info!("host pid {hp} found by memory correlation on device {d} (context created out of sight)");
}

/// Records our host PID in our slot (other processes then eliminate it).
fn claim(d: usize, hp: u32) {
    let st = state::get();
    if let Some(r) = st.region
        && let Err(e) = vgpu_core::slots::set_hostpid(r, st.pid, hp as i32)
    {
        crate::debug!("host pid: cannot record {hp}: {e}");
    }
    crate::debug!("host pid: device {d}: {hp}");
}

/// NVML snapshot taken before the application's first context on a device (host-PID diff).
pub struct CtxSnapshot {
    d: usize,
    before: Vec<u32>,
}

/// Before a real context creation on CUDA ordinal `dev`. Cheap after the first per device.
pub fn ctx_creating(ordinal: CUdevice) -> Option<CtxSnapshot> {
    crate::guard::ffi("hostpid::ctx_creating", None, || {
        let st = state::get();
        let d = st.region_index(ordinal);
        if dev(d).lock().first_ctx_seen {
            return None;
        }
        // Before the driver's call: a sibling whose diff lists us counts us as unresolved there.
        if let Some(r) = st.region {
            vgpu_core::slots::mark_context(r, st.pid, d);
        }
        let h = driver::nvml_handle(d)?;
        let before = driver::nvml_processes(h)?.into_iter().map(|(p, _)| p).collect();
        Some(CtxSnapshot { d, before })
    })
}

/// After it, with the driver's result. When the diff names our host PID (alone, or by fork order)
/// it is claimed at once (so the memory side's context charge, which asks NVML about our PID,
/// finds it); otherwise the watcher keeps resolving.
pub fn ctx_created(ordinal: CUdevice, snap: Option<CtxSnapshot>, r: CUresult) {
    crate::guard::ffi("hostpid::ctx_created", (), || {
        if r != CUDA_SUCCESS {
            return;
        }
        let d = snap.as_ref().map_or_else(|| state::get().region_index(ordinal), |s| s.d);
        let after: Option<Vec<u32>> = snap
            .as_ref()
            .and_then(|_| driver::nvml_handle(d))
            .and_then(driver::nvml_processes)
            .map(|v| v.into_iter().map(|(p, _)| p).collect());
        let mut rs = dev(d).lock();
        if rs.first_ctx_seen {
            return;
        }
        rs.first_ctx_seen = true;
        let (Some(s), Some(a)) = (snap, after) else { return };
        rs.pids.set_before(s.before);
        rs.pids.set_after(a.clone());
        let oth = others(d, None);
        let view = oth.view(&a, state::get().pid as u32);
        let got = rs.pids.step(&view);
        crate::debug!("host pid: device {d}: context creation diff {:?} -> {got:?}", rs.pids.candidates(&view));
        if let Some((hp, How::Unique | How::Order)) = got {
            rs.hostpid = Some(hp);
            drop(rs);
            claim(d, hp);
        }
    })
}
