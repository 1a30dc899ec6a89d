//! Contexts: primary contexts (one per device, fixed handle, usable by cuCtxSetCurrent before any
//! retain), created contexts, the per-thread context stack, and context memory accounting: a device
//! costs `VGPU_SIM_CTX_MIB` while this process has any active context on it.

use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, knobs, my_slot, out, simlog, state};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct Ctx {
    pub dev: usize,
    pub primary: bool,
    /// Created contexts: always; primary: refcount > 0.
    pub active: bool,
    pub refcount: u32,
    pub flags: u32,
    /// Latest end of any work submitted in this context.
    pub max_tail: crate::mark::Mark,
}

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// `(generation, context, device)` of this thread's last `cuCtxGetDevice`: a real driver
    /// answers it from the thread's current context without a global lock; so do we while no
    /// context was torn down since (any teardown bumps [`GENERATION`]).
    static DEVICE_OF_CURRENT: Cell<(u64, u64, usize)> = const { Cell::new((0, 0, 0)) };
}

/// Bumped by every context teardown: invalidates every thread's [`DEVICE_OF_CURRENT`].
static GENERATION: AtomicU64 = AtomicU64::new(1);

pub(crate) fn primary_handle(dev: usize) -> u64 {
    0x5000_0000_0000 + dev as u64 * 0x40
}

fn primary_dev(h: u64) -> Option<usize> {
    let base = 0x5000_0000_0000u64;
    if h >= base && (h - base).is_multiple_of(0x40) {
        let d = ((h - base) / 0x40) as usize;
        if d < state().device_count() {
            return Some(d);
        }
    }
    None
}

/// Validate CUDA ordinal `dev` and map it to its physical device index (`CUDA_VISIBLE_DEVICES`).
pub(crate) fn check_dev(dev: CUdevice) -> Result<usize, CUresult> {
    check_init()?;
    if dev < 0 {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    crate::visible().get(dev as usize).copied().ok_or(CUDA_ERROR_INVALID_DEVICE)
}

/// The context for handle `h`, creating the (inactive) primary context record on first sight.
pub(crate) fn ctx_entry(sim: &mut Sim, h: u64) -> Option<&mut Ctx> {
    match sim.ctxs.entry(h) {
        std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
        std::collections::hash_map::Entry::Vacant(e) => {
            let dev = primary_dev(h)?;
            Some(e.insert(Ctx {
                dev,
                primary: true,
                active: false,
                refcount: 0,
                flags: 0,
                max_tail: Default::default(),
            }))
        }
    }
}

pub(crate) fn top() -> Option<u64> {
    STACK.with(|s| s.borrow().last().copied())
}

/// The current context (handle, device); `CUDA_ERROR_INVALID_CONTEXT` if none or not active.
pub(crate) fn current(sim: &mut Sim) -> Result<(u64, usize), CUresult> {
    check_init()?;
    let h = top().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    match ctx_entry(sim, h) {
        Some(c) if c.active => Ok((h, c.dev)),
        _ => Err(CUDA_ERROR_INVALID_CONTEXT),
    }
}

pub(crate) fn activate(sim: &mut Sim, dev: usize) -> Result<(), CUresult> {
    if sim.dev_ctx_count[dev] == 0 {
        let bytes = knobs().ctx_bytes;
        if bytes > 0 && !state().charge(my_slot(), dev, bytes) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        state().set_ctx_active(my_slot(), dev, true);
        simlog!("context active on device {} ({} bytes)", dev, bytes);
    }
    sim.dev_ctx_count[dev] += 1;
    Ok(())
}

/// A device's first context of this process takes `VGPU_SIM_CTX_CREATE_MS` to come up (listed and
/// charged already, as a real driver's context is while its creation runs), sim lock released.
fn bringing_up(first: bool) {
    let t = knobs().ctx_create;
    if first && !t.is_zero() {
        std::thread::sleep(t);
    }
}

pub(crate) fn deactivate(sim: &mut Sim, dev: usize) {
    if sim.dev_ctx_count[dev] == 0 {
        return;
    }
    sim.dev_ctx_count[dev] -= 1;
    if sim.dev_ctx_count[dev] == 0 {
        crate::pool::release_device_pools(sim, dev);
        crate::drivercost::graph_pool_release(sim, dev);
        state().uncharge(my_slot(), dev, knobs().ctx_bytes);
        state().set_ctx_active(my_slot(), dev, false);
        simlog!("no context left on device {}", dev);
    }
}

/// Free everything owned by context `h` (allocations, streams, events, modules, arrays).
pub(crate) fn teardown(sim: &mut Sim, h: u64) {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    crate::memory::free_ctx_allocs(sim, h);
    sim.streams.retain(|_, s| s.ctx != h);
    sim.events.retain(|_, e| e.ctx != h);
    crate::module::unload_ctx_modules(sim, h);
    crate::array::free_ctx_arrays(sim, h);
    crate::drivercost::ctx_gone(sim, h);
}

pub(crate) fn primary_retain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        crate::nonnull(pctx)?;
        let mut sim = sim::lock();
        let h = primary_handle(d);
        let first = sim.dev_ctx_count[d] == 0;
        let c = ctx_entry(&mut sim, h).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        if c.refcount == 0 {
            activate(&mut sim, d)?;
        }
        let c = sim.ctxs.get_mut(&h).unwrap();
        c.refcount += 1;
        c.active = true;
        drop(sim);
        bringing_up(first);
        unsafe { out(pctx, h as CUcontext) }
    })
}

pub(crate) fn primary_release(dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        let mut sim = sim::lock();
        let h = primary_handle(d);
        let c = ctx_entry(&mut sim, h).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        if c.refcount == 0 {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        c.refcount -= 1;
        if c.refcount == 0 {
            c.active = false;
            teardown(&mut sim, h);
            deactivate(&mut sim, d);
        }
        Ok(())
    })
}

pub(crate) fn primary_reset(dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        let mut sim = sim::lock();
        let h = primary_handle(d);
        let c = ctx_entry(&mut sim, h).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        let was_active = c.active;
        c.active = false;
        c.refcount = 0;
        c.flags = 0;
        teardown(&mut sim, h);
        if was_active {
            deactivate(&mut sim, d);
        }
        Ok(())
    })
}

pub(crate) fn primary_get_state(dev: CUdevice, flags: *mut u32, active: *mut i32) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        crate::nonnull(flags)?;
        crate::nonnull(active)?;
        let mut sim = sim::lock();
        let c = ctx_entry(&mut sim, primary_handle(d)).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        unsafe {
            out(flags, c.flags)?;
            out(active, c.active as i32)
        }
    })
}

pub(crate) fn primary_set_flags(dev: CUdevice, flags: u32) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        let mut sim = sim::lock();
        let c = ctx_entry(&mut sim, primary_handle(d)).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        c.flags = flags;
        Ok(())
    })
}

pub(crate) fn ctx_create(pctx: *mut CUcontext, flags: u32, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        crate::nonnull(pctx)?;
        let mut sim = sim::lock();
        let first = sim.dev_ctx_count[d] == 0;
        activate(&mut sim, d)?;
        let h = sim::new_handle();
        sim.ctxs
            .insert(h, Ctx { dev: d, primary: false, active: true, refcount: 1, flags, max_tail: Default::default() });
        STACK.with(|s| s.borrow_mut().push(h));
        drop(sim);
        bringing_up(first);
        unsafe { out(pctx, h as CUcontext) }
    })
}

pub(crate) fn ctx_destroy(ctx: CUcontext) -> CUresult {
    cu_try!({
        check_init()?;
        let h = ctx as u64;
        let mut sim = sim::lock();
        let c = sim.ctxs.get(&h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if c.primary {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let dev = c.dev;
        teardown(&mut sim, h);
        sim.ctxs.remove(&h);
        deactivate(&mut sim, dev);
        STACK.with(|s| s.borrow_mut().retain(|&x| x != h));
        Ok(())
    })
}

/// Take context `h` off this thread's stack (it is gone).
pub(crate) fn forget_on_this_thread(h: u64) {
    STACK.with(|s| s.borrow_mut().retain(|&x| x != h));
}

pub(crate) fn set_current(ctx: CUcontext) -> CUresult {
    cu_try!({
        check_init()?;
        let h = ctx as u64;
        if h == 0 {
            STACK.with(|s| s.borrow_mut().pop());
            return Ok(());
        }
        let mut sim = sim::lock();
        ctx_entry(&mut sim, h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            s.push(h);
        });
        Ok(())
    })
}

pub(crate) fn get_current(pctx: *mut CUcontext) -> CUresult {
    cu_try!({
        check_init()?;
        unsafe { out(pctx, top().unwrap_or(0) as CUcontext) }
    })
}

pub(crate) fn push_current(ctx: CUcontext) -> CUresult {
    cu_try!({
        check_init()?;
        let h = ctx as u64;
        let mut sim = sim::lock();
        ctx_entry(&mut sim, h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        STACK.with(|s| s.borrow_mut().push(h));
        Ok(())
    })
}

pub(crate) fn pop_current(pctx: *mut CUcontext) -> CUresult {
    cu_try!({
        check_init()?;
        let h = STACK.with(|s| s.borrow_mut().pop()).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if !pctx.is_null() {
            unsafe { out(pctx, h as CUcontext)? };
        }
        Ok(())
    })
}

pub(crate) fn get_device(dev: *mut CUdevice) -> CUresult {
    cu_try!({
        crate::nonnull(dev)?;
        check_init()?;
        let top = top().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let generation = GENERATION.load(Ordering::Acquire);
        let (g, h, d) = DEVICE_OF_CURRENT.get();
        let d = if (g, h) == (generation, top) {
            d
        } else {
            let mut sim = sim::lock();
            let (h, d) = current(&mut sim)?;
            DEVICE_OF_CURRENT.set((generation, h, d));
            d
        };
        unsafe { out(dev, crate::ordinal_of(d) as CUdevice) }
    })
}

pub(crate) fn get_api_version(ctx: CUcontext, version: *mut u32) -> CUresult {
    cu_try!({
        check_init()?;
        crate::nonnull(version)?;
        let mut sim = sim::lock();
        if ctx.is_null() {
            current(&mut sim)?;
        } else {
            ctx_entry(&mut sim, ctx as u64).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        }
        unsafe { out(version, state().driver_version() as u32) }
    })
}

pub(crate) fn get_flags(flags: *mut u32) -> CUresult {
    cu_try!({
        crate::nonnull(flags)?;
        let mut sim = sim::lock();
        let (h, _) = current(&mut sim)?;
        let f = sim.ctxs[&h].flags;
        unsafe { out(flags, f) }
    })
}

pub(crate) fn synchronize() -> CUresult {
    cu_try!({
        let t = {
            let mut sim = sim::lock();
            let (h, _) = current(&mut sim)?;
            crate::stream::ctx_tail(&sim, h)
        };
        t.wait();
        crate::pool::trim_all(&mut sim::lock());
        Ok(())
    })
}

/// Record that work in context `h` ends at `t`.
pub(crate) fn note_tail(sim: &mut Sim, h: u64, t: crate::mark::Mark) {
    if let Some(c) = sim.ctxs.get_mut(&h) {
        c.max_tail = c.max_tail.max(t);
    }
}
