//! The per-process watcher thread: polls timing samples (every 1 ms while some are in flight),
//! re-reads the control words (every 20 ms: limits, `utilization_switch`, `recent_kernel`,
//! `last_kernel_time` due) and re-arms the launch gate, and every 250 ms per active device reads
//! NVML: resolves our host PID, feeds the outer correction loop, writes our slot's `sm_util` and
//! the container's measured share. It runs in RELAXED capture mode and never holds a lock across a
//! driver call that the launch path needs.

use super::{Compute, KICK, api, mono_ns, samples, wall_ns};
use crate::hostpid;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::Duration;
use vgpu_core::limiter::PPM;
use vgpu_core::limiter::nvmlspan::{self, Span};
use vgpu_core::limiter::words::{SENSOR_NVML, SENSOR_SELF};
use vgpu_core::region::MAX_DEVICES;

const SAMPLE_POLL: Duration = Duration::from_millis(1);
const IDLE_POLL: Duration = Duration::from_millis(20);
const CONTROL_EVERY_NS: u64 = 20_000_000;
const NVML_EVERY_NS: u64 = 250_000_000;

/// Work of a module above this one that rides this thread's 20 ms cadence (`truth::tick`,
/// registered at `cuInit`), so the watcher runs it without depending on that module.
static ALSO_RUN: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Runs `f` on the watcher every round from now on (one function; a later call replaces it).
pub(crate) fn also_run(f: fn()) {
    ALSO_RUN.store(f as *mut (), Ordering::Release);
}

pub fn start(c: &'static Compute) {
    if c.watcher.swap(1, Ordering::AcqRel) != 0 {
        return;
    }
    let r = std::thread::Builder::new().name("vgpu-compute".into()).spawn(move || {
        crate::guard::ffi("compute watcher", (), || run(c));
    });
    if let Err(e) = r {
        crate::error!(
            "compute: cannot start the watcher thread ({e}); limits still apply, samples and NVML feedback are off"
        );
        c.watcher.store(0, Ordering::Release);
    }
    // Once per process image (a forked child inherits the registration); an atomic, not a
    // `Once`, so a child never waits for a registration a parent thread was running.
    static AT_EXIT: AtomicBool = AtomicBool::new(false);
    if !AT_EXIT.swap(true, Ordering::AcqRel) {
        unsafe { libc::atexit(on_exit) };
    }
}

extern "C" fn on_exit() {
    if let Some(c) = super::try_get() {
        c.stop.store(true, Ordering::Release);
    }
}

/// Per-device NVML bookkeeping of the watcher.
#[derive(Default, Clone, Copy)]
struct NvmlDev {
    next: u64,
    last_charged: u64,
    last_charged_at: u64,
}

fn run(c: &'static Compute) {
    api::relax_capture_mode();
    let mut next_ctl = 0u64;
    let mut nv = [NvmlDev::default(); MAX_DEVICES];
    loop {
        if c.stop.load(Ordering::Acquire)
            || !std::ptr::eq(super::try_get().map_or(std::ptr::null(), |p| p as *const _), c)
        {
            return;
        }
        let pending = samples::poll(c);
        let now = mono_ns();
        if now >= next_ctl {
            c.refresh_control();
            // On a fixed 20 ms grid (unless a whole period was missed): the burst step's span is
            // the time between two of these ticks, and a tick that waited for the next poll came
            // up to 20 ms late (a quarter of the spans were 25-40 ms long).
            next_ctl = if next_ctl != 0 && now < next_ctl + CONTROL_EVERY_NS {
                next_ctl + CONTROL_EVERY_NS
            } else {
                now + CONTROL_EVERY_NS
            };
            (0..MAX_DEVICES).for_each(|d| super::burst::tick(c, d));
        }
        let also = ALSO_RUN.load(Ordering::Acquire);
        if !also.is_null() {
            // SAFETY: only `also_run` stores here, and what it stores is a `fn()`.
            let f = unsafe { std::mem::transmute::<*mut (), fn()>(also) };
            f();
        }
        for (d, n) in nv.iter_mut().enumerate() {
            if c.devs[d].active.load(Ordering::Relaxed) && now >= n.next {
                n.next = now + NVML_EVERY_NS;
                nvml_tick(c, d, n, now);
            }
        }
        let poll = if pending { SAMPLE_POLL } else { IDLE_POLL };
        KICK.wait_timeout(poll.min(Duration::from_nanos(next_ctl.saturating_sub(mono_ns()))));
    }
}

fn wall_us_to_mono(us: u64) -> u64 {
    let off = wall_ns() as i128 - mono_ns() as i128;
    (us as i128 * 1000 - off).max(0) as u64
}

fn write_sm_util(c: &Compute, d: usize, v: u64, last: &mut Option<u64>) {
    if *last == Some(v) {
        return;
    }
    let Some(r) = c.region else { return };
    if vgpu_core::slots::set_sm_util(r, c.pid, d, v) {
        *last = Some(v);
    }
}

/// One NVML round for device `d`: our host PID, the span since the previous answer, then its
/// consumers (host-PID evidence, the correction and our `sm_util`, the container's share); the
/// self-measured fallback where NVML has no per-process data.
fn nvml_tick(c: &Compute, d: usize, nv: &mut NvmlDev, now: u64) {
    let self_share = nv.self_share(c.words(d), now);
    let Some(h) = c.nvml_handle(d) else {
        return self_measured(c, d, &mut c.devs[d].ctl.lock(), self_share, now);
    };
    let present: Option<Vec<u32>> = api::nvml_processes(h).map(|v| v.into_iter().map(|(p, _)| p).collect());
    let mut ctl = c.devs[d].ctl.lock();
    if let Some(present) = &present {
        resolve_hostpid(d, &mut ctl, present);
    }
    publish_unresolved(c, d);
    let Some(span) = next_span(c, d, h, &mut ctl) else {
        if ctl.nvml_supported == Some(false) {
            self_measured(c, d, &mut ctl, self_share, now);
        }
        return;
    };
    let (start, end) = (wall_us_to_mono(span.from_us), wall_us_to_mono(span.end_us));
    if let Some(present) = &present {
        pid_evidence(d, &mut ctl, present, &span, start, end);
    }
    if let Some(hp) = ctl.hostpid {
        correct(c, d, &mut ctl, &span, hp, start, end, now);
    }
    drop(ctl);
    let w = c.words(d);
    let ours = hostpid::container_hostpids();
    w.share_ppm.store(span.share_ppm(&ours), Ordering::Relaxed);
    w.share_stamp_ns.store(now, Ordering::Relaxed);
    w.sensor.store(SENSOR_NVML, Ordering::Relaxed);
}

impl NvmlDev {
    /// The container's self-measured share (all processes' charges) since the previous round.
    fn self_share(&mut self, w: &vgpu_core::region::DeviceLimiterState, now: u64) -> Option<u64> {
        let charged = w.charged_ns.load(Ordering::Relaxed);
        let s = nvmlspan::self_share_ppm(charged, self.last_charged, self.last_charged_at, now);
        (self.last_charged, self.last_charged_at) = (charged, now);
        s
    }
}

/// Without per-process NVML: the container's share and our `sm_util` from the charges.
fn self_measured(c: &Compute, d: usize, ctl: &mut super::Ctl, self_share: Option<u64>, now: u64) {
    let w = c.words(d);
    if let Some(s) = self_share {
        w.share_ppm.store(s.min(PPM), Ordering::Relaxed);
        w.share_stamp_ns.store(now, Ordering::Relaxed);
    }
    w.sensor.store(SENSOR_SELF, Ordering::Relaxed);
    // Our own share from our charges over the last second.
    let mine = nvmlspan::self_sm_util(ctl.corr.self_busy(now.saturating_sub(1_000_000_000), now), ctl.corr.k());
    write_sm_util(c, d, mine, &mut ctl.sm_util);
}

/// Host PID: one resolver step on NVML's process list; a new answer restarts the correction.
fn resolve_hostpid(d: usize, ctl: &mut super::Ctl, present: &[u32]) {
    let got = hostpid::resolve(d, present);
    if got != ctl.hostpid {
        ctl.corr.reset();
        ctl.hostpid = got;
    }
}

/// The container's processes NVML may list on `d` without a host PID (the burst step trusts its
/// own share only at 0).
fn publish_unresolved(c: &Compute, d: usize) {
    if let Some(r) = c.region {
        let unresolved = vgpu_core::slots::live(r.shared()).filter(|s| s.awaits_host_pid_on(d)).count();
        c.words(d).unresolved_pids.store(unresolved as u64, Ordering::Relaxed);
    }
}

/// The span since our previous answer (`None`: nothing new, the first round, or not supported;
/// a `NOT_SUPPORTED` switches this device to self-measured time for good).
fn next_span(c: &Compute, d: usize, h: crate::ffi::nvmlDevice_t, ctl: &mut super::Ctl) -> Option<Span> {
    if ctl.nvml_supported == Some(false) {
        return None;
    }
    let now_us = wall_ns() / 1000;
    if ctl.nvml_last_us == 0 {
        ctl.nvml_last_us = now_us;
        return None;
    }
    let from_us = ctl.nvml_last_us;
    let span = match api::nvml_span(h, from_us) {
        api::Util::Span(s) => s,
        api::Util::NoneBusy => Span { from_us, end_us: now_us, busy: Vec::new() },
        api::Util::NothingNew => return None,
        api::Util::NotSupported => {
            crate::warn!(
                "compute: NVML per-process utilisation not supported on device {d}: the SM limit is enforced from self-measured time only"
            );
            ctl.nvml_supported = Some(false);
            ctl.corr.reset();
            c.words(d).correction_ppm.store(PPM, Ordering::Relaxed);
            return None;
        }
        api::Util::Error(e) => {
            crate::debug!("compute: nvmlDeviceGetProcessUtilization: error {e}");
            return None;
        }
    };
    ctl.nvml_supported = Some(true);
    ctl.nvml_last_us = span.end_us;
    Some(span)
}

/// Evidence for the host-PID resolver: which listed PIDs were busy while we were (or were not).
fn pid_evidence(d: usize, ctl: &mut super::Ctl, present: &[u32], span: &Span, start: u64, end: u64) {
    let util: Vec<(u32, u32)> = span.busy.iter().map(|&(p, b)| (p, nvmlspan::percent(b, span.len_us()))).collect();
    let mine = ctl.corr.self_busy(start, end);
    let busy = (end > start).then(|| mine as f64 / (end - start) as f64);
    hostpid::evidence(d, present, busy, mine > 0, &util);
}

/// The outer loop on our host PID's busy time, and our `sm_util`.
#[allow(clippy::too_many_arguments)]
fn correct(c: &Compute, d: usize, ctl: &mut super::Ctl, span: &Span, hp: u32, start: u64, end: u64, now: u64) {
    let my_busy_ns = span.busy_of(&[hp]) * 1000;
    // Exact busy ns for the correction (not the rounded percent).
    ctl.corr.observe(start, end, nvmlspan::exact_percent(my_busy_ns, start, end));
    let before = ctl.corr.last_ratio();
    let changed = ctl.corr.update(now).is_some();
    if changed || ctl.corr.last_ratio() != before {
        crate::debug!(
            "compute: device {d}: correction {} k = {:.3} (ratio {:?}, band {:.4})",
            if changed { "set" } else { "kept" },
            ctl.corr.k(),
            ctl.corr.last_ratio(),
            ctl.corr.last_tol()
        );
    }
    c.words(d).correction_ppm.store(ctl.corr.k_ppm(), Ordering::Relaxed);
    write_sm_util(c, d, nvmlspan::percent(my_busy_ns / 1000, span.len_us()) as u64, &mut ctl.sm_util);
}
