//! Our host PID (docs/design.md "Host PIDs"), the ways it is found: the NVML diff around the
//! application's first context on a device ([`ctx_creating`], [`ctx_created`]), the container's
//! claims in the region (each process records the PID it resolved: [`claim`], [`others`]), and the
//! last-resort [`probe`], and what the memory correlator finds ([`found_by_correlation`]; it is fed
//! by `truth`'s readings). The watcher's NVML evidence (`pidmap`) uses the claims from here.

pub mod probe;

use super::{Compute, api, get};
use crate::ffi::*;
use std::sync::atomic::Ordering;
use vgpu_core::limiter::pidmap::View;

/// What the region says about the other processes of the container.
pub(crate) struct Others {
    /// Host PIDs claimed by other live slots.
    pub claimed: Vec<u32>,
    /// Their (pid, host pid) pairs.
    pub pairs: Vec<(u32, u32)>,
    /// Pids of live slots without a host PID that hold memory on the device (ours included).
    pub unresolved: Vec<u32>,
}

impl Others {
    pub fn view<'a>(&'a self, present: &'a [u32], my_pid: u32) -> View<'a> {
        View { present, claimed: &self.claimed, my_pid, pairs: &self.pairs, unresolved: &self.unresolved }
    }
}

/// The other live slots of the region, as seen from region device `d`. A slot with a lower index
/// that claims the same PID as we do wins it (so two claimants never both yield).
pub(crate) fn others(c: &Compute, d: usize, mine: Option<u32>) -> Others {
    let mut o = Others { claimed: Vec::new(), pairs: Vec::new(), unresolved: vec![c.pid as u32] };
    let Some(r) = c.region else { return o };
    let sh = r.shared();
    let my_idx = vgpu_core::slots::live(sh).find(|s| s.pid == c.pid).map(|s| s.index);
    for s in vgpu_core::slots::live(sh) {
        let (k, pid, h) = (s.index, s.pid, s.hostpid);
        if pid == c.pid || pid <= 0 {
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

/// Host PIDs of the container's live slots (ours included once resolved).
pub(super) fn container_hostpids(c: &Compute) -> Vec<u32> {
    let Some(r) = c.region else { return Vec::new() };
    vgpu_core::slots::live(r.shared()).map(|s| s.hostpid).filter(|&h| h > 0).map(|h| h as u32).collect()
}

/// Our host PID as NVML reports it on region device `d`, once someone resolved it.
pub(crate) fn known(d: usize) -> Option<u32> {
    if let Some(c) = super::try_get()
        && let Some(h) = c.devs[d].ctl.lock().hostpid
    {
        return Some(h);
    }
    let st = crate::state::get();
    st.region.and_then(|r| vgpu_core::slots::hostpid(r, st.pid)).filter(|&h| h > 0).map(|h| h as u32)
}

/// The memory correlator (fed by `truth`'s readings) names `hp` as our host PID on device `d`:
/// adopted and claimed unless another way found it first.
pub(crate) fn found_by_correlation(c: &Compute, d: usize, hp: u32) {
    let mut ctl = c.devs[d].ctl.lock();
    if ctl.hostpid.is_some() {
        return;
    }
    ctl.pids.adopt(hp);
    ctl.hostpid = Some(hp);
    ctl.corr.reset();
    drop(ctl);
    claim(c, d, hp);
    crate::info!("host pid {hp} found by memory correlation on device {d} (context created out of sight)");
}

/// Records our host PID in our slot (other processes then eliminate it).
pub(crate) fn claim(c: &Compute, d: usize, hp: u32) {
    if let Some(r) = c.region
        && let Err(e) = vgpu_core::slots::set_hostpid(r, c.pid, hp as i32)
    {
        crate::debug!("compute: cannot record host pid {hp}: {e}");
    }
    crate::debug!("compute: device {d}: host pid {hp}");
}

/// NVML snapshot taken before the application's first context on a device (host-PID diff).
pub struct CtxSnapshot {
    d: usize,
    before: Vec<u32>,
}

/// Before a real context creation on CUDA ordinal `dev`. Cheap after the first per device.
pub fn ctx_creating(dev: CUdevice) -> Option<CtxSnapshot> {
    crate::guard::ffi("compute::ctx_creating", None, || {
        let c = get();
        let d = c.region_index(dev);
        if c.devs[d].ctl.lock().first_ctx_seen {
            return None;
        }
        // Before the driver's call: a sibling whose diff lists us counts us as unresolved there.
        if let Some(r) = c.region {
            vgpu_core::slots::mark_context(r, c.pid, d);
        }
        let h = api::nvml_handle(d)?;
        let before = api::nvml_processes(h)?.into_iter().map(|(p, _)| p).collect();
        Some(CtxSnapshot { d, before })
    })
}

/// After it, with the driver's result. When the diff names our host PID (alone, or by fork order)
/// it is
/// claimed at once (so the memory side's context charge, which asks NVML about our PID, finds it);
/// otherwise the watcher keeps resolving.
pub fn ctx_created(dev: CUdevice, snap: Option<CtxSnapshot>, r: CUresult) {
    crate::guard::ffi("compute::ctx_created", (), || {
        if r != CUDA_SUCCESS {
            return;
        }
        let c = get();
        let d = snap.as_ref().map_or_else(|| c.region_index(dev), |s| s.d);
        c.devs[d].active.store(true, Ordering::Relaxed);
        let after: Option<Vec<u32>> = snap
            .as_ref()
            .and_then(|_| api::nvml_handle(d))
            .and_then(api::nvml_processes)
            .map(|v| v.into_iter().map(|(p, _)| p).collect());
        let mut ctl = c.devs[d].ctl.lock();
        if ctl.first_ctx_seen {
            return;
        }
        ctl.first_ctx_seen = true;
        if let (Some(s), Some(a)) = (snap, after) {
            ctl.pids.set_before(s.before);
            ctl.pids.set_after(a.clone());
            let oth = others(c, d, None);
            let view = oth.view(&a, c.pid as u32);
            let got = ctl.pids.step(&view);
            crate::debug!("compute: device {d}: context creation diff {:?} -> {got:?}", ctl.pids.candidates(&view));
            if let Some((hp, how)) = got {
                use vgpu_core::limiter::pidmap::How;
                if matches!(how, How::Unique | How::Order) {
                    ctl.hostpid = Some(hp);
                    drop(ctl);
                    claim(c, d, hp);
                    return;
                }
            }
        }
        drop(ctl);
        super::kick();
    })
}
