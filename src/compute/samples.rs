//! Timing events: a free pool per context (events are created in the application's own context,
//! so no context is added) and the samples in flight. Only the watcher queries events.

use super::{Compute, api, mono_ns};
use crate::ffi::*;
use std::collections::HashMap;
use vgpu_core::limiter::bucket::{Bucket, Params};
use vgpu_core::limiter::cost::Sig;
use vgpu_core::limiter::cost::lowcost;

/// Free events kept per context.
const POOL_MAX: usize = 64;
/// Samples in flight per process (beyond it, no new samples until some complete).
const PENDING_MAX: usize = 256;

pub struct EventPair {
    pub start: CUevent,
    pub end: CUevent,
    ctx: usize,
}

// Event handles are plain driver handles, usable from any thread.
unsafe impl Send for EventPair {}

struct Pending {
    d: usize,
    sig: Sig,
    pair: EventPair,
    since: u64,
    /// Host ns between the start event (on an idle stream) and the launch: not kernel time.
    gap: u64,
}

unsafe impl Send for Pending {}

#[derive(Default)]
pub struct Samples {
    /// ctx → (CUDA ordinal, free events).
    pools: HashMap<usize, (CUdevice, Vec<usize>)>,
    pending: Vec<Pending>,
}

impl Samples {
    /// Two events of context `ctx` (created there if the pool is empty). `None`: no sample now.
    pub fn take_pair(&mut self, ctx: CUcontext, ordinal: CUdevice) -> Option<EventPair> {
        if ctx.is_null() || self.pending.len() >= PENDING_MAX {
            return None;
        }
        let pool = self.pools.entry(ctx as usize).or_insert_with(|| (ordinal, Vec::new()));
        let mut take = || pool.1.pop().map(|e| e as CUevent).or_else(api::event_create);
        let start = take()?;
        let Some(end) = take() else {
            pool.1.push(start as usize);
            return None;
        };
        Some(EventPair { start, end, ctx: ctx as usize })
    }

    /// Back to the pool unused.
    pub fn give_back(&mut self, p: EventPair) {
        match self.pools.get_mut(&p.ctx) {
            Some((_, v)) if v.len() + 2 <= POOL_MAX => {
                v.push(p.start as usize);
                v.push(p.end as usize);
            }
            Some(_) => {
                api::event_destroy(p.start);
                api::event_destroy(p.end);
            }
            None => {} // context gone: the events died with it
        }
    }

    /// Events in an unknown state (a record failed): destroy them.
    pub fn discard(&mut self, p: EventPair) {
        if self.pools.contains_key(&p.ctx) {
            api::event_destroy(p.start);
            api::event_destroy(p.end);
        }
    }

    pub fn push_pending(&mut self, d: usize, sig: Sig, pair: EventPair, gap: u64) {
        self.pending.push(Pending { d, sig, pair, since: mono_ns(), gap });
    }

    /// Samples of a destroyed context fail; its pool is forgotten (not destroyed: it is gone).
    pub fn forget_ctx(&mut self, c: &Compute, ctx: usize) {
        self.pools.remove(&ctx);
        self.fail_where(c, |p| p.pair.ctx == ctx);
    }

    pub fn forget_ordinal(&mut self, c: &Compute, ordinal: CUdevice) {
        let gone: Vec<usize> = self.pools.iter().filter(|(_, (o, _))| *o == ordinal).map(|(k, _)| *k).collect();
        for k in gone {
            self.forget_ctx(c, k);
        }
    }

    fn fail_where(&mut self, c: &Compute, f: impl Fn(&Pending) -> bool) {
        let mut i = 0;
        while i < self.pending.len() {
            if f(&self.pending[i]) {
                let p = self.pending.swap_remove(i);
                c.devs[p.d].ctl.lock().model.sample_failed(p.sig);
            } else {
                i += 1;
            }
        }
    }
}

/// Polls the samples in flight (watcher thread): completed ones update the cost model and charge
/// or refund the re-priced account. Returns whether samples remain in flight.
pub fn poll(c: &Compute) -> bool {
    // Take the list out so no driver call runs under the lock the launch path takes.
    let pending = std::mem::take(&mut c.samples.lock().pending);
    if pending.is_empty() {
        return false;
    }
    let mut keep = Vec::new();
    let mut done: Vec<(Pending, Option<u64>)> = Vec::new();
    for p in pending {
        match api::event_query(p.pair.end) {
            CUDA_SUCCESS => match api::elapsed_ns(p.pair.start, p.pair.end) {
                Ok(ns) => {
                    let ns = ns.saturating_sub(p.gap);
                    done.push((p, Some(ns)))
                }
                Err(CUDA_ERROR_NOT_READY) => keep.push(p),
                Err(_) => done.push((p, None)),
            },
            CUDA_ERROR_NOT_READY => {
                // A sample that never completes (a hung stream) is given up after a minute.
                if mono_ns().saturating_sub(p.since) > 60_000_000_000 {
                    done.push((p, None));
                } else {
                    keep.push(p);
                }
            }
            _ => done.push((p, None)),
        }
    }
    let now = mono_ns();
    for (p, ns) in &done {
        let dev = &c.devs[p.d];
        let mut ctl = dev.ctl.lock();
        match ns {
            Some(ns) => {
                let lw = &c.words(p.d).low_costs;
                let tag = lowcost::tag(&p.sig);
                let delta = ctl.model.sample_done(p.sig, *ns, now, lowcost::lookup(lw, tag, now));
                if let Some((est, confirmed)) = ctl.model.shared_estimate(&p.sig) {
                    lowcost::offer(lw, tag, est, confirmed, now);
                }
                // Completed somewhere in the last poll interval (≤ 1 ms).
                ctl.corr.note_lag(p.since, now.saturating_sub(500_000), *ns);
                let k = ctl.corr.k();
                ctl.corr.add_charge(now, delta);
                drop(ctl);
                if delta != 0
                    && let Some(params) = Params::for_limit(dev.limit.load(std::sync::atomic::Ordering::Relaxed))
                {
                    Bucket::attach(c.words(p.d), params).reprice((delta as f64 * k) as i64);
                }
            }
            None => {
                ctl.model.sample_failed(p.sig);
                drop(ctl);
            }
        }
        c.devs[p.d].ctl.lock().model.release_gate(&c.words(p.d).first_gate);
    }
    let mut s = c.samples.lock();
    for (p, ns) in done {
        if ns.is_some() { s.give_back(p.pair) } else { s.discard(p.pair) }
    }
    // Launch threads may have pushed new samples meanwhile.
    keep.append(&mut s.pending);
    s.pending = keep;
    !s.pending.is_empty()
}
