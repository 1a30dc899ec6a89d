//! The slow path of a launch: HAMi feedback words, the monitor's block, the capture check, and
//! admission against the device's bucket with a predicted cost (optionally measured with a timing
//! event pair). [`before`] runs before the real launch, [`after`] with its result.

use super::samples::EventPair;
use super::{Compute, api, get, mono_ns, now_unix_s, sleep_until};
use crate::ffi::*;
use std::sync::atomic::Ordering;
use vgpu_core::limiter::bucket::{Admission, Bucket, Params};
use vgpu_core::limiter::cost::lowcost;
use vgpu_core::limiter::cost::{Prediction, Sig};
use vgpu_core::limiter::feedback::{self, BLOCK_POLL_NS};

/// Longest wait for the first sample of a signature that has no basis for a guess.
const FIRST_SAMPLE_WAIT_NS: u64 = 1_000_000_000;
const FIRST_SAMPLE_POLL_NS: u64 = 1_000_000;

/// What [`after`] needs to finish a charged launch.
pub struct Ticket {
    d: usize,
    sig: Sig,
    pred: Prediction,
    /// Charged to the bucket (prediction × correction).
    charged: u64,
    params: Params,
    sample: Option<(EventPair, CUstream, bool)>,
    /// Host time the start event was recorded on an idle stream (0: the stream was busy).
    idle_rec_ns: u64,
    /// Host time just before the real launch call.
    launch_ns: u64,
}

/// Before a launch of `sig` on `stream` (`ptsz`: through a per-thread-default-stream entry point).
/// `None`: pass the launch through with nothing to do afterwards.
pub fn before(stream: CUstream, ptsz: bool, sig: Sig) -> Option<Ticket> {
    crate::guard::ffi("compute::before", None, || before_inner(stream, ptsz, sig, None))
}

pub fn after(t: Option<Ticket>, r: CUresult) {
    if let Some(t) = t {
        crate::guard::ffi("compute::after", (), || after_inner(t, r));
    }
}

fn before_inner(stream: CUstream, ptsz: bool, sig: Sig, ctx_dev: Option<(CUcontext, CUdevice)>) -> Option<Ticket> {
    let c = get();
    // A launch into a capturing stream does not run: no feedback, no wait, no charge, no event.
    if api::capturing(stream, ptsz) {
        return None;
    }
    feedback_words(c);
    wait_unblocked(c);
    let ordinal = match ctx_dev {
        Some((_, o)) => o,
        None => api::current_ordinal()?,
    };
    let d = c.region_index(ordinal);
    let dev = &c.devs[d];
    dev.active.store(true, Ordering::Relaxed);
    if !dev.enforce.load(Ordering::Relaxed) {
        if !c.gate_needed() {
            super::GATE.store(false, Ordering::Relaxed);
        }
        return None;
    }
    let mut params: Params;
    let t0 = mono_ns();
    let mut waited = false;
    let mut first_wait_until = 0u64;
    let low_tag = lowcost::tag(&sig);
    let (pred, charged) = loop {
        let now = mono_ns();
        // Re-read every round: a live limit change or the burst controller's rate applies to
        // launches already waiting.
        params = c.params(d)?;
        let bucket = Bucket::attach(c.words(d), params);
        // The container's lowest cost of this launch shape (`limiter::lowcost`): a cap on
        // estimates this process has not confirmed yet (or confirmed on a queue).
        let low = lowcost::lookup(&c.words(d).low_costs, low_tag, now);
        let (pred, k, gated) = {
            let mut ctl = dev.ctl.lock();
            let pred = ctl.model.predict(sig, now, low);
            // One launch of unknown cost in flight per container, too (`cost::claim_first`).
            let gated = pred.unknown && !ctl.model.take_gate(&c.words(d).first_gate, now);
            (pred, ctl.corr.k(), gated)
        };
        if pred.wait_for_first || gated {
            if first_wait_until == 0 {
                first_wait_until = now + FIRST_SAMPLE_WAIT_NS;
            }
            if now < first_wait_until {
                super::kick();
                sleep_until(now + FIRST_SAMPLE_POLL_NS);
                continue;
            }
        }
        let cost = ((pred.cost_ns as f64) * k) as u64;
        match bucket.try_admit(now, cost) {
            Admission::Admitted => {
                let mut ctl = dev.ctl.lock();
                ctl.model.admitted(sig, &pred);
                ctl.corr.add_charge(now, pred.cost_ns as i64);
                break (pred, cost);
            }
            Admission::Wait { until } => {
                waited = true;
                sleep_until(until);
                // Limit lifted, switch turned off or the monitor blocks us meanwhile?
                if !dev.enforce.load(Ordering::Relaxed) {
                    bucket.note_throttled(mono_ns() - t0);
                    return None;
                }
                wait_unblocked(c);
            }
        }
    };
    if waited {
        Bucket::attach(c.words(d), params).note_throttled(mono_ns().saturating_sub(t0));
    }
    // A sample: start event now, end event right after the launch. A launch queued behind our own
    // work is preferred (`defer_sample`): its start event completes when our previous kernel does,
    // exactly when this one can start. On an idle stream the start event completes at once, so the
    // host time between it and the launch call is not kernel time: it is measured and subtracted.
    let mut idle_rec_ns = 0;
    let sample = if pred.sample {
        let idle = api::stream_idle(stream, ptsz);
        if dev.ctl.lock().model.defer_sample(sig, idle) {
            None
        } else {
            let ctx = ctx_dev.map_or_else(api::current_ctx, |(c, _)| c);
            let pair = c.samples.lock().take_pair(ctx, ordinal);
            pair.and_then(|p| {
                if api::event_record(p.start, stream, ptsz) == CUDA_SUCCESS {
                    // Taken after the record returned: the event's time stamp is not later, so
                    // the subtracted gap can only under-state (never deflate a sample below the
                    // kernel's duration, which the minimum-based estimate would keep).
                    if idle {
                        idle_rec_ns = mono_ns();
                    }
                    Some((p, stream, ptsz))
                } else {
                    c.samples.lock().discard(p);
                    None
                }
            })
        }
    } else {
        None
    };
    Some(Ticket { d, sig, pred, charged, params, sample, idle_rec_ns, launch_ns: mono_ns() })
}

fn after_inner(t: Ticket, r: CUresult) {
    let c = get();
    let d = t.d;
    after_launch(c, t, r);
    c.devs[d].ctl.lock().model.release_gate(&c.words(d).first_gate);
}

fn after_launch(c: &Compute, t: Ticket, r: CUresult) {
    let dev = &c.devs[t.d];
    if r != CUDA_SUCCESS {
        // The launch did not happen: refund it and take it out of its account.
        Bucket::attach(c.words(t.d), t.params).charge(-(t.charged as i64));
        let mut ctl = dev.ctl.lock();
        ctl.model.cancelled(t.sig, &t.pred);
        ctl.corr.add_charge(mono_ns(), -(t.pred.cost_ns as i64));
        drop(ctl);
        if let Some((p, _, _)) = t.sample {
            c.samples.lock().give_back(p);
        }
        return;
    }
    if let Some((p, stream, ptsz)) = t.sample {
        if api::event_record(p.end, stream, ptsz) == CUDA_SUCCESS {
            dev.ctl.lock().model.sample_started(t.sig, mono_ns());
            let gap = if t.idle_rec_ns != 0 { t.launch_ns.saturating_sub(t.idle_rec_ns) } else { 0 };
            c.samples.lock().push_pending(t.d, t.sig, p, gap);
            super::kick();
        } else {
            c.samples.lock().discard(p);
        }
    }
}

/// `recent_kernel` = 2 (when not already 2 and not blocked), `last_kernel_time` at most once per
/// interval.
fn feedback_words(c: &Compute) {
    let Some(r) = c.region else { return };
    let sh = r.shared();
    feedback::mark_active(&sh.recent_kernel);
    let now_s = now_unix_s();
    if c.kt.due(now_s) {
        c.kt.record(&sh.last_kernel_time, now_s, c.interval_s);
    }
}

/// While the monitor blocks the container: sleep in short polls (release seen within
/// [`BLOCK_POLL_NS`]), then mark the container active again.
fn wait_unblocked(c: &Compute) {
    let Some(r) = c.region else { return };
    if !feedback::honours_blocking(c.policy) {
        return;
    }
    let rk = &r.shared().recent_kernel;
    if !feedback::blocked(rk) {
        return;
    }
    let t0 = mono_ns();
    crate::debug!("compute: launches blocked by the monitor (recent_kernel < 0)");
    while feedback::blocked(rk) && feedback::honours_blocking(c.policy) {
        sleep_until(mono_ns() + BLOCK_POLL_NS);
    }
    let waited = mono_ns() - t0;
    c.blocked.store(false, Ordering::Relaxed);
    for d in 0..c.devs.len() {
        if c.devs[d].active.load(Ordering::Relaxed) {
            c.words(d).blocked_ns.fetch_add(waited, Ordering::Relaxed);
        }
    }
    feedback::mark_active(rk);
    crate::debug!("compute: released after {} ms", waited / 1_000_000);
}

/// `cuLaunchCooperativeKernelMultiDevice`: each entry is admitted on its own stream's device.
pub fn before_multi(list: *mut CUDA_LAUNCH_PARAMS, n: u32) -> Vec<Option<Ticket>> {
    crate::guard::ffi("compute::before_multi", Vec::new(), || {
        let mut out = Vec::new();
        if list.is_null() {
            return out;
        }
        for i in 0..n as usize {
            let p = unsafe { &*list.add(i) };
            let sig = Sig::kernel(
                p.function as u64,
                [p.gridDimX, p.gridDimY, p.gridDimZ],
                [p.blockDimX, p.blockDimY, p.blockDimZ],
                p.sharedMemBytes,
            );
            let t = match api::stream_ctx(p.hStream, false) {
                Some(ctx) => api::with_ctx(ctx, || {
                    let ord = api::current_ordinal();
                    ord.and_then(|o| before_inner(p.hStream, false, sig, Some((ctx, o))))
                })
                .flatten(),
                None => before_inner(p.hStream, false, sig, None),
            };
            out.push(t);
        }
        out
    })
}

pub fn after_multi(ts: Vec<Option<Ticket>>, list: *mut CUDA_LAUNCH_PARAMS, r: CUresult) {
    crate::guard::ffi("compute::after_multi", (), || {
        for (i, t) in ts.into_iter().enumerate() {
            let Some(t) = t else { continue };
            let stream = unsafe { (*list.add(i)).hStream };
            match api::stream_ctx(stream, false) {
                Some(ctx) => {
                    let _ = api::with_ctx(ctx, || after_inner(t, r));
                }
                None => after_inner(t, r),
            }
        }
    })
}
