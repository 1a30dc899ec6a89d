//! Shim side of the burst controller (`vgpu_core::limiter::burst`): once per step, the one process
//! of the container that wins the step's CAS measures the span since the previous step and
//! publishes the new effective rate. Sensors, best first:
//! 1. NVML per-process utilisation since the previous step: device busy = all PIDs, own = the
//!    container's host PIDs (one call gives both over the same span);
//! 2. NVML device utilisation since this process's previous call, own = the container's charges
//!    over the same span;
//! 3. neither: no burst (the guarantee is the cap), logged once.

use super::{Compute, api, mono_ns, wall_ns};
use std::sync::atomic::Ordering;
use vgpu_core::limiter::burst::{self, Limits, Observation, State};
use vgpu_core::region::DeviceLimiterState;

/// Per-device, per-process bookkeeping (in `Ctl`).
#[derive(Default)]
pub struct Local {
    /// Device-utilisation path: (CLOCK_MONOTONIC, container charged_ns) at this process's previous call.
    prev_util: Option<(u64, u64)>,
    no_sensor_logged: bool,
}

/// The device's guarantee and ceiling now (`None`: not limited).
pub fn limits(c: &Compute, d: usize) -> Option<Limits> {
    let dev = &c.devs[d];
    Limits::new(dev.limit.load(Ordering::Relaxed), dev.ceiling.load(Ordering::Relaxed))
}

/// One controller step for device `d` if it bursts and this process leads the step.
pub fn tick(c: &Compute, d: usize) {
    let dev = &c.devs[d];
    if !dev.active.load(Ordering::Relaxed) || !dev.enforce.load(Ordering::Relaxed) {
        return;
    }
    let Some(lim) = limits(c, d) else { return };
    if !lim.bursting() {
        return;
    }
    let w = c.words(d);
    let now_us = wall_ns() / 1000;
    if burst::try_lead(w, now_us).is_none() {
        return;
    }
    let per_process = dev.ctl.lock().nvml_supported != Some(false);
    let hostpids = crate::hostpid::container_hostpids();
    let obs = {
        let mut guard = dev.burst.lock();
        let loc = &mut *guard;
        let h = c.nvml_handle(d);
        let via_processes = h.filter(|_| per_process).and_then(|h| from_processes(h, w, now_us, &hostpids));
        let obs = via_processes.or_else(|| h.and_then(|h| from_device(h, loc, w.charged_ns.load(Ordering::Relaxed))));
        if obs.is_none() {
            no_sensor(loc, d);
        }
        obs
    };
    let st = match obs {
        Some(Some(o)) => {
            let n = burst::step(State::load(w), lim, o);
            crate::debug!(
                "compute: device {d}: burst t={} span={} busy={} own={} others={} present={} -> {:?}",
                now_us,
                o.span_ns / 1000,
                o.busy_ppm(),
                o.own_ppm(),
                o.others_ppm(),
                o.others_present,
                n
            );
            n
        }
        Some(None) => return, // first span of this sensor: nothing to compare yet
        None => State { rate_ppm: lim.limit_ppm, ..State::load(w) },
    };
    burst::publish(w, st);
}

fn no_sensor(loc: &mut Local, d: usize) {
    if !loc.no_sensor_logged {
        loc.no_sensor_logged = true;
        crate::warn!(
            "compute: device {d}: no NVML utilisation available: no burst above the SM limit (CUDA_DEVICE_SM_CEILING ignored)"
        );
    }
}

/// Per-process NVML samples newer than the container's `burst_seen_us`. `None`: not available;
/// `Some(None)`: nothing new (the driver samples every few tens of ms or more on hardware: a span
/// without samples says nothing, and the next query starts from the same point).
fn from_processes(
    h: crate::ffi::nvmlDevice_t,
    w: &DeviceLimiterState,
    now_us: u64,
    ours: &[u32],
) -> Option<Option<Observation>> {
    let prev_us = w.burst_seen_us.load(Ordering::Acquire);
    if prev_us == 0 || prev_us >= now_us || now_us - prev_us > burst::MAX_SPAN_NS / 1000 {
        w.burst_seen_us.store(now_us, Ordering::Release);
        return Some(None);
    }
    let span = match api::nvml_span(h, prev_us) {
        api::Util::Span(s) if s.end_us > prev_us => s,
        api::Util::Span(_) | api::Util::NothingNew | api::Util::NoneBusy => return Some(None),
        api::Util::NotSupported | api::Util::Error(_) => return None,
    };
    w.burst_seen_us.store(span.end_us, Ordering::Release);
    // The own busy time covers the container's work only when every process has a host PID.
    let attributed = w.unresolved_pids.load(Ordering::Relaxed) == 0 && !ours.is_empty();
    Some(Some(Observation {
        span_ns: (span.end_us - prev_us) * 1000,
        device_busy_ns: span.device_busy() * 1000,
        own_busy_ns: span.busy_of(ours) * 1000,
        others_present: span.others_busy(ours),
        attributed,
    }))
}

/// Device utilisation since this process's previous call and the container's charges over it.
fn from_device(h: crate::ffi::nvmlDevice_t, loc: &mut Local, charged: u64) -> Option<Option<Observation>> {
    let f = api::nvmlDeviceGetUtilizationRates()?;
    let mut u = crate::ffi::nvmlUtilization_t { gpu: 0, memory: 0 };
    // SAFETY: `u` is a valid out-pointer for the call's duration.
    if unsafe { f(h, &mut u) } != crate::ffi::NVML_SUCCESS {
        return None;
    }
    let now = mono_ns();
    let prev = loc.prev_util.replace((now, charged));
    let Some((t, ch)) = prev else { return Some(None) };
    let span_ns = now.saturating_sub(t);
    Some(Some(Observation {
        span_ns,
        device_busy_ns: span_ns * u.gpu.min(100) as u64 / 100,
        own_busy_ns: charged.saturating_sub(ch),
        others_present: false,
        attributed: true,
    }))
}
