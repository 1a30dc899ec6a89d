//! Streams, events and host callbacks in simulated time: each stream has a tail ([`Mark`]) at which
//! its queued work completes; queries compare it with now and synchronisation sleeps until it.
//! Stream handles 0 (legacy, or per-thread through a `_ptsz`/`_ptds` entry point),
//! `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` map to per-context implicit streams.

use crate::context::current;
use crate::mark::Mark;
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out};
use std::ffi::c_void;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

#[derive(Hash, Eq, PartialEq, Clone, Copy, Debug)]
pub(crate) enum SKey {
    Explicit(u64),
    Legacy(u64),
    PerThread(u64, i32),
}

pub(crate) struct Capture {
    pub graph: u64,
    pub id: u64,
    /// Last node added by the capture (the next one depends on it).
    pub deps: Vec<u64>,
}

pub(crate) struct Stream {
    pub ctx: u64,
    pub dev: usize,
    pub tail: Mark,
    pub flags: u32,
    pub priority: i32,
    pub capture: Option<Capture>,
}

pub(crate) struct Event {
    pub ctx: u64,
    pub flags: u32,
    /// Completion time of the work captured by the last record (None: never recorded).
    pub time: Option<Mark>,
}

/// Map a stream handle to its key, creating implicit streams on first use.
pub(crate) fn resolve(sim: &mut Sim, h: CUstream, ptds: bool) -> Result<SKey, CUresult> {
    let hv = h as usize;
    if hv > CU_STREAM_PER_THREAD {
        let k = SKey::Explicit(hv as u64);
        return if sim.streams.contains_key(&k) { Ok(k) } else { Err(CUDA_ERROR_INVALID_HANDLE) };
    }
    let (ctx, dev) = current(sim)?;
    let per_thread = hv == CU_STREAM_PER_THREAD || (hv == 0 && ptds);
    let k = if per_thread { SKey::PerThread(ctx, unsafe { libc::gettid() }) } else { SKey::Legacy(ctx) };
    sim.streams.entry(k).or_insert(Stream { ctx, dev, tail: Mark::default(), flags: 0, priority: 0, capture: None });
    Ok(k)
}

/// Append `dur` ns of (non-kernel) work to a stream; returns its end. Time-sliced, it starts
/// after the stream's earlier copies, not after its queued kernels (their end is not known yet).
pub(crate) fn enqueue(sim: &mut Sim, k: SKey, dur: u64) -> Mark {
    let s = sim.streams.get_mut(&k).expect("resolved stream");
    let end = Mark { at: sim::now().max(s.tail.at) + dur, work: s.tail.work };
    s.tail = end;
    let ctx = s.ctx;
    crate::context::note_tail(sim, ctx, end);
    end
}

pub(crate) fn ctx_tail(sim: &Sim, ctx: u64) -> Mark {
    sim.ctxs.get(&ctx).map(|c| c.max_tail).unwrap_or_default()
}

pub(crate) fn stream_create(ph: *mut CUstream, flags: u32, priority: i32) -> CUresult {
    cu_try!({
        nonnull(ph)?;
        let mut sim = sim::lock();
        let (ctx, dev) = current(&mut sim)?;
        let h = sim::new_handle();
        sim.streams.insert(
            SKey::Explicit(h),
            Stream { ctx, dev, tail: Mark::default(), flags, priority: priority.clamp(-5, 0), capture: None },
        );
        unsafe { out(ph, h as CUstream) }
    })
}

pub(crate) fn stream_destroy(h: CUstream) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        if (h as usize) <= CU_STREAM_PER_THREAD || sim.streams.remove(&SKey::Explicit(h as u64)).is_none() {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        Ok(())
    })
}

pub(crate) fn stream_synchronize(h: CUstream, ptds: bool) -> CUresult {
    cu_try!({
        let t = {
            let mut sim = sim::lock();
            let k = resolve(&mut sim, h, ptds)?;
            sim.streams[&k].tail
        };
        t.wait();
        crate::pool::trim_all(&mut sim::lock());
        Ok(())
    })
}

pub(crate) fn stream_query(h: CUstream, ptds: bool) -> CUresult {
    cu_try!({
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        if sim.streams[&k].tail.done() { Ok(()) } else { Err(CUDA_ERROR_NOT_READY) }
    })
}

pub(crate) fn stream_wait_event(h: CUstream, ev: CUevent, _flags: u32, ptds: bool) -> CUresult {
    cu_try!({
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        let t = sim.events.get(&(ev as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?.time.unwrap_or_default();
        let s = sim.streams.get_mut(&k).unwrap();
        s.tail = s.tail.max(t);
        Ok(())
    })
}

pub(crate) fn stream_get_priority(h: CUstream, p: *mut i32, ptds: bool) -> CUresult {
    cu_try!({
        nonnull(p)?;
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        unsafe { out(p, sim.streams[&k].priority) }
    })
}

pub(crate) fn stream_get_flags(h: CUstream, p: *mut u32, ptds: bool) -> CUresult {
    cu_try!({
        nonnull(p)?;
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        unsafe { out(p, sim.streams[&k].flags) }
    })
}

pub(crate) fn stream_get_ctx(h: CUstream, p: *mut CUcontext, ptds: bool) -> CUresult {
    cu_try!({
        nonnull(p)?;
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        unsafe { out(p, sim.streams[&k].ctx as CUcontext) }
    })
}

pub(crate) fn ctx_stream_priority_range(least: *mut i32, greatest: *mut i32) -> CUresult {
    cu_try!({
        check_init()?;
        unsafe {
            if !least.is_null() {
                *least = 0;
            }
            if !greatest.is_null() {
                *greatest = -5;
            }
        }
        Ok(())
    })
}

// ---- capture -------------------------------------------------------------------------------

pub(crate) fn is_capturing(h: CUstream, status: *mut i32, ptds: bool) -> CUresult {
    cu_try!({
        nonnull(status)?;
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        let st = if sim.streams[&k].capture.is_some() {
            CU_STREAM_CAPTURE_STATUS_ACTIVE
        } else {
            CU_STREAM_CAPTURE_STATUS_NONE
        };
        unsafe { out(status, st) }
    })
}

pub(crate) fn begin_capture(h: CUstream, _mode: u32, ptds: bool) -> CUresult {
    cu_try!({
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        if matches!(k, SKey::Legacy(_)) {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if sim.streams[&k].capture.is_some() {
            return Err(CUDA_ERROR_ILLEGAL_STATE);
        }
        let g = crate::graph::new_graph(&mut sim);
        sim.next_capture_id += 1;
        let id = sim.next_capture_id;
        sim.streams.get_mut(&k).unwrap().capture = Some(Capture { graph: g, id, deps: Vec::new() });
        Ok(())
    })
}

pub(crate) fn end_capture(h: CUstream, pg: *mut CUgraph, ptds: bool) -> CUresult {
    cu_try!({
        nonnull(pg)?;
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        let c = sim.streams.get_mut(&k).unwrap().capture.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        unsafe { out(pg, c.graph as CUgraph) }
    })
}

pub(crate) fn get_capture_info(
    h: CUstream,
    status: *mut i32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    ndeps: *mut usize,
    ptds: bool,
) -> CUresult {
    cu_try!({
        nonnull(status)?;
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        let s = &sim.streams[&k];
        unsafe {
            match &s.capture {
                Some(c) => {
                    out(status, CU_STREAM_CAPTURE_STATUS_ACTIVE)?;
                    if !id.is_null() {
                        *id = c.id;
                    }
                    if !graph.is_null() {
                        *graph = c.graph as CUgraph;
                    }
                    if !deps.is_null() {
                        *deps = c.deps.as_ptr() as *const CUgraphNode;
                    }
                    if !ndeps.is_null() {
                        *ndeps = c.deps.len();
                    }
                }
                None => {
                    out(status, CU_STREAM_CAPTURE_STATUS_NONE)?;
                    if !ndeps.is_null() {
                        *ndeps = 0;
                    }
                }
            }
        }
        Ok(())
    })
}

// ---- events --------------------------------------------------------------------------------

pub(crate) fn event_create(ph: *mut CUevent, flags: u32) -> CUresult {
    cu_try!({
        nonnull(ph)?;
        let mut sim = sim::lock();
        let (ctx, _) = current(&mut sim)?;
        let h = sim::new_handle();
        sim.events.insert(h, Event { ctx, flags, time: None });
        unsafe { out(ph, h as CUevent) }
    })
}

pub(crate) fn event_record(ev: CUevent, h: CUstream, ptds: bool) -> CUresult {
    cu_try!({
        let mut sim = sim::lock();
        let k = resolve(&mut sim, h, ptds)?;
        if !sim.events.contains_key(&(ev as u64)) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let s = &sim.streams[&k];
        if s.capture.is_some() {
            return Ok(()); // becomes part of the captured graph; no time stamp
        }
        let t = Mark { at: sim::now().max(s.tail.at), work: s.tail.work };
        sim.events.get_mut(&(ev as u64)).unwrap().time = Some(t);
        Ok(())
    })
}

pub(crate) fn event_query(ev: CUevent) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let e = sim.events.get(&(ev as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        match e.time {
            Some(t) if !t.done() => Err(CUDA_ERROR_NOT_READY),
            _ => Ok(()),
        }
    })
}

pub(crate) fn event_synchronize(ev: CUevent) -> CUresult {
    cu_try!({
        check_init()?;
        let t = {
            let sim = sim::lock();
            sim.events.get(&(ev as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?.time.unwrap_or_default()
        };
        t.wait();
        crate::pool::trim_all(&mut sim::lock());
        Ok(())
    })
}

pub(crate) fn event_elapsed(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(ms)?;
        let sim = sim::lock();
        let a = sim.events.get(&(start as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let b = sim.events.get(&(end as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if (a.flags | b.flags) & CU_EVENT_DISABLE_TIMING != 0 {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let (Some(ta), Some(tb)) = (a.time, b.time) else { return Err(CUDA_ERROR_INVALID_HANDLE) };
        if !ta.done() || !tb.done() {
            return Err(CUDA_ERROR_NOT_READY);
        }
        let (ta, tb) = (ta.time(), tb.time());
        unsafe { out(ms, ((tb as i128 - ta as i128) as f64 / 1e6) as f32) }
    })
}

pub(crate) fn event_destroy(ev: CUevent) -> CUresult {
    cu_try!({
        check_init()?;
        sim::lock().events.remove(&(ev as u64)).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

// ---- host callbacks ------------------------------------------------------------------------

struct HostCall {
    at: Mark,
    call: Box<dyn FnOnce() + Send>,
}

/// One worker thread runs host callbacks in submission order, each once its stream reaches it.
fn host_worker() -> &'static Mutex<mpsc::Sender<HostCall>> {
    static TX: OnceLock<Mutex<mpsc::Sender<HostCall>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<HostCall>();
        std::thread::Builder::new()
            .name("sim-cuda-host".into())
            .spawn(move || {
                for c in rx {
                    c.at.wait();
                    (c.call)();
                }
            })
            .expect("host callback thread");
        Mutex::new(tx)
    })
}

struct SendPtr(*mut c_void);
unsafe impl Send for SendPtr {}

fn schedule_host(h: CUstream, ptds: bool, call: impl FnOnce() + Send + 'static) -> CUresult {
    cu_try!({
        let at = {
            let mut sim = sim::lock();
            let k = resolve(&mut sim, h, ptds)?;
            enqueue(&mut sim, k, 0)
        };
        let _ = host_worker().lock().unwrap_or_else(|e| e.into_inner()).send(HostCall { at, call: Box::new(call) });
        Ok(())
    })
}

pub(crate) fn launch_host_func(h: CUstream, f: CUhostFn, data: *mut c_void, ptds: bool) -> CUresult {
    let Some(f) = f else { return CUDA_ERROR_INVALID_VALUE };
    let d = SendPtr(data);
    schedule_host(h, ptds, move || {
        let d = d;
        unsafe { f(d.0) }
    })
}

pub(crate) type StreamCallback = Option<unsafe extern "C" fn(CUstream, CUresult, *mut c_void)>;

pub(crate) fn add_callback(h: CUstream, cb: StreamCallback, data: *mut c_void, ptds: bool) -> CUresult {
    let Some(cb) = cb else { return CUDA_ERROR_INVALID_VALUE };
    let d = SendPtr(data);
    let hs = SendPtr(h);
    schedule_host(h, ptds, move || {
        let (d, hs) = (d, hs);
        unsafe { cb(hs.0, CUDA_SUCCESS, d.0) }
    })
}
