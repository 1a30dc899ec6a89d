//! Driver init and contexts. Each context costs device memory, charged through `memory`.
//! Primary contexts are refcounted by the driver; we mirror the count per device so the charge
//! is made once on the first retain and given back on the last release or a reset. The mirror
//! and the charge are kept under one mutex per device, so no retain returns (and no thread of a
//! runtime that retains per thread allocates in the context) before the context is charged.

use crate::ffi::*;
use crate::memory::{charge_context, uncharge_context};
use crate::state;
use cuda_types::pfn;
use std::ffi::{c_int, c_uint};
use std::sync::atomic::Ordering;
use std::time::Duration;
use vgpu_core::lock::{PidMutex, PidMutexGuard};
use vgpu_core::region::MAX_DEVICES;

/// Per CUDA ordinal: the primary context's reference mirror and its charge change under it
/// (fork-safe: a child frees one a parent's thread held).
static PRIMARY_BOOK: [PidMutex; MAX_DEVICES] = [const { PidMutex::new() }; MAX_DEVICES];
/// Bound on waiting for it (a first charge is one NVML reading).
const BOOK_WAIT: Duration = Duration::from_secs(5);

fn primary_book(d: usize) -> Option<PidMutexGuard<'static>> {
    let g = PRIMARY_BOOK[d].lock_timeout(BOOK_WAIT);
    if g.is_none() {
        crate::once!(
            warn,
            "primary context of device {d}: its charge is taking over {BOOK_WAIT:?}; going on without waiting"
        );
    }
    g
}

pub unsafe fn init(real: pfn::cuInit, flags: c_uint) -> CUresult {
    let r = unsafe { real(flags) };
    if r == CUDA_SUCCESS {
        // Attach the region and take our slot now, so the monitor sees the process early.
        let _ = state::get().devices();
        crate::truth::cuda_initialised();
        crate::driver_limit::probe(|d| state::get().configured_limit(d));
    }
    r
}

fn ordinal_slot(dev: CUdevice) -> Option<usize> {
    usize::try_from(dev).ok().filter(|&d| d < MAX_DEVICES)
}

pub unsafe fn primary_retain(real: pfn::cuDevicePrimaryCtxRetain, pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    // The NVML process-list diff around the application's own first context gives our host PID
    // (no probe context of our own); the context charge below needs it.
    let snap = crate::hostpid::ctx_creating(dev);
    let r = unsafe { real(pctx, dev) };
    context_came_up(dev, snap, r);
    if r != CUDA_SUCCESS {
        return r;
    }
    let Some(d) = ordinal_slot(dev) else { return r };
    let st = state::get();
    if !pctx.is_null() {
        st.primary_ctx[d].store(unsafe { *pctx } as u64, Ordering::Release);
    }
    // Every retainer waits here for a first retainer's charge in progress.
    let _book = primary_book(d);
    if st.primary_refs[d].fetch_add(1, Ordering::AcqRel) == 0 {
        match charge_context(dev) {
            Ok(bytes) => st.primary_bytes[d].store(bytes, Ordering::Release),
            Err(()) => {
                // Undo the retain: the context does not fit under the limit.
                st.primary_refs[d].fetch_sub(1, Ordering::AcqRel);
                if let Some(release) = crate::driver::cuDevicePrimaryCtxRelease_v2() {
                    unsafe { release(dev) };
                }
                crate::memory::context_undone(dev);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    r
}

fn drop_primary(dev: CUdevice, all: bool) {
    let Some(d) = ordinal_slot(dev) else { return };
    let st = state::get();
    let _book = primary_book(d);
    let prev = if all {
        st.primary_refs[d].swap(0, Ordering::AcqRel)
    } else {
        st.primary_refs[d].fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| (v > 0).then(|| v - 1)).unwrap_or(0)
    };
    if prev > 0 && (all || prev == 1) {
        uncharge_context(dev, st.primary_bytes[d].swap(0, Ordering::AcqRel));
        crate::memory::context_torn_down(st.primary_ctx[d].load(Ordering::Acquire));
        crate::compute::device_ctx_gone(dev);
    }
}

pub unsafe fn primary_release(real: pfn::cuDevicePrimaryCtxRelease_v2, dev: CUdevice) -> CUresult {
    let r = unsafe { real(dev) };
    if r == CUDA_SUCCESS {
        drop_primary(dev, false);
    }
    r
}

pub unsafe fn primary_reset(real: pfn::cuDevicePrimaryCtxReset_v2, dev: CUdevice) -> CUresult {
    let r = unsafe { real(dev) };
    if r == CUDA_SUCCESS {
        crate::hostpid::probe::primary_reset(dev);
        drop_primary(dev, true);
    }
    r
}

/// After a hooked creation or retain: our host PID from the diff around it, and the device
/// active for the compute watcher.
fn context_came_up(dev: CUdevice, snap: Option<crate::hostpid::CtxSnapshot>, r: CUresult) {
    crate::hostpid::ctx_created(dev, snap, r);
    if r == CUDA_SUCCESS {
        crate::compute::context_up(dev);
    }
}

/// A created context: charged by handle, uncharged at destroy.
fn created(r: CUresult, pctx: *mut CUcontext, dev: CUdevice, snap: Option<crate::hostpid::CtxSnapshot>) -> CUresult {
    context_came_up(dev, snap, r);
    if r != CUDA_SUCCESS || pctx.is_null() {
        return r;
    }
    // SAFETY: `pctx` is the application's non-null out-pointer, just filled by the driver.
    unsafe {
        book_created(pctx, dev, |c| {
            if let Some(destroy) = crate::driver::cuCtxDestroy_v2() {
                destroy(c);
            }
        })
    }
}

/// Charge a context (created or green) just written to `*p` on `dev` and book it by handle, so its
/// destroy gives the charge back; one that does not fit under the limit is destroyed again with
/// `undo`, `*p` cleared, and the creation fails with `CUDA_ERROR_OUT_OF_MEMORY`.
///
/// # Safety
/// `p` is non-null and points at the handle the driver just created.
unsafe fn book_created<T>(p: *mut *mut T, dev: CUdevice, undo: impl FnOnce(*mut T)) -> CUresult {
    let st = state::get();
    let Ok(bytes) = charge_context(dev) else {
        // SAFETY: the caller's contract: `p` is valid and holds the new handle.
        unsafe {
            undo(*p);
            *p = std::ptr::null_mut();
        }
        crate::memory::context_undone(dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    };
    let rec = vgpu_core::ledger::AllocRecord {
        dev: st.region_index(dev),
        bytes,
        kind: vgpu_core::region::UsageKind::Context,
        owner: 0,
    };
    // SAFETY: as above.
    st.handles.insert(unsafe { *p } as u64, rec);
    CUDA_SUCCESS
}

pub unsafe fn ctx_create_v2(real: pfn::cuCtxCreate_v2, pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult {
    let snap = crate::hostpid::ctx_creating(dev);
    created(unsafe { real(pctx, flags, dev) }, pctx, dev, snap)
}

pub unsafe fn ctx_create_v3(
    real: pfn::cuCtxCreate_v3,
    pctx: *mut CUcontext,
    params: *mut CUexecAffinityParam,
    num: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    let snap = crate::hostpid::ctx_creating(dev);
    created(unsafe { real(pctx, params, num, flags, dev) }, pctx, dev, snap)
}

pub unsafe fn ctx_create_v4(
    real: pfn::cuCtxCreate_v4,
    pctx: *mut CUcontext,
    params: *mut CUctxCreateParams,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    let snap = crate::hostpid::ctx_creating(dev);
    created(unsafe { real(pctx, params, flags, dev) }, pctx, dev, snap)
}

pub unsafe fn ctx_destroy(real: pfn::cuCtxDestroy_v2, ctx: CUcontext) -> CUresult {
    let r = unsafe { real(ctx) };
    if r == CUDA_SUCCESS {
        let st = state::get();
        if let Some(rec) = st.handles.remove(ctx as u64) {
            st.ledger.release(rec.dev, rec.kind, rec.bytes);
        }
        crate::memory::context_torn_down(ctx as u64);
        crate::compute::ctx_destroyed(ctx);
    }
    r
}

// ---- green contexts ----
//
// A green context is a context of its own on its device: charged like a created context (NVML's
// view of what it cost), given back when it is destroyed. `cuCtxFromGreenCtx` only names the
// `CUcontext` it already has; allocations made while that context is current are owned by it and
// go with the green context.

pub unsafe fn green_ctx_create(
    real: pfn::cuGreenCtxCreate,
    pctx: *mut CUgreenCtx,
    desc: CUdevResourceDesc,
    dev: CUdevice,
    flags: c_uint,
) -> CUresult {
    let snap = crate::hostpid::ctx_creating(dev);
    let r = unsafe { real(pctx, desc, dev, flags) };
    context_came_up(dev, snap, r);
    if r != CUDA_SUCCESS || pctx.is_null() {
        return r;
    }
    // SAFETY: `pctx` is the application's non-null out-pointer, just filled by the driver.
    unsafe {
        book_created(pctx, dev, |g| {
            if let Some(destroy) = crate::driver::cuGreenCtxDestroy() {
                destroy(g);
            }
        })
    }
}

pub unsafe fn green_ctx_destroy(real: pfn::cuGreenCtxDestroy, g: CUgreenCtx) -> CUresult {
    // Its context, asked while it still exists: what was allocated in it goes with it.
    let mut ctx: CUcontext = std::ptr::null_mut();
    let have_ctx = crate::driver::cuCtxFromGreenCtx().is_some_and(|f| unsafe { f(&mut ctx, g) } == CUDA_SUCCESS);
    let r = unsafe { real(g) };
    if r == CUDA_SUCCESS {
        let st = state::get();
        if let Some(rec) = st.handles.remove(g as u64) {
            st.ledger.release(rec.dev, rec.kind, rec.bytes);
        }
        if have_ctx && !ctx.is_null() {
            crate::memory::context_torn_down(ctx as u64);
            crate::compute::ctx_destroyed(ctx);
        }
    }
    r
}
