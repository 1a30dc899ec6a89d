//! Green contexts (CUDA 12.4+): a device's SM resource, split by SM count into groups, a
//! descriptor of a group, and a green context created from it. Each green context is a context of
//! its own (its `CUcontext` comes from `cuCtxFromGreenCtx`): it activates its device like any
//! context and, on top, costs `VGPU_SIM_GREEN_CTX_MIB` of device memory while it exists
//! (default 0: no cost of its own). `VGPU_SIM_GREEN_CTX_CREATE_MS` makes a creation take that long
//! with its memory already held, as a real driver's creation takes milliseconds (default 0).

use crate::context::{Ctx, activate, check_dev, deactivate, forget_on_this_thread, teardown};
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, my_slot, nonnull, out, simlog, state};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

pub(crate) type CUgreenCtx = *mut c_void;
pub(crate) type CUdevResourceDesc = *mut c_void;
const CUDA_ERROR_INVALID_RESOURCE_TYPE: CUresult = 914;

/// `CU_DEV_RESOURCE_TYPE_SM`.
const RESOURCE_TYPE_SM: u32 = 1;
/// `sizeof(CUdevResource)` (12.x and 13.x alike) and the offset of its union (`sm.smCount`).
const RESOURCE_SIZE: usize = 144;
const SM_COUNT_OFFSET: usize = 96;

#[derive(Default)]
struct Book {
    /// Resource descriptor → SM count.
    descs: HashMap<u64, u32>,
    /// Green context → (its context handle, physical device, bytes charged for it).
    greens: HashMap<u64, (u64, usize, u64)>,
}

/// Taken only while the sim tables are locked (one lock order: tables, then this).
fn book() -> std::sync::MutexGuard<'static, Book> {
    static B: OnceLock<Mutex<Book>> = OnceLock::new();
    B.get_or_init(|| Mutex::new(Book::default())).lock().unwrap_or_else(|e| e.into_inner())
}

/// Write an SM resource of `sms` SMs at `p` (a `CUdevResource`).
unsafe fn write_sm_resource(p: *mut u8, sms: u32) {
    unsafe {
        std::ptr::write_bytes(p, 0, RESOURCE_SIZE);
        (p as *mut u32).write_unaligned(RESOURCE_TYPE_SM);
        (p.add(SM_COUNT_OFFSET) as *mut u32).write_unaligned(sms);
    }
}

unsafe fn sm_count_of(p: *const u8) -> Result<u32, CUresult> {
    unsafe {
        if (p as *const u32).read_unaligned() != RESOURCE_TYPE_SM {
            return Err(CUDA_ERROR_INVALID_RESOURCE_TYPE);
        }
        Ok((p.add(SM_COUNT_OFFSET) as *const u32).read_unaligned())
    }
}

pub(crate) fn device_get_dev_resource(dev: CUdevice, res: *mut c_void, ty: u32) -> CUresult {
    cu_try!({
        check_dev(dev)?;
        nonnull(res)?;
        if ty != RESOURCE_TYPE_SM {
            return Err(CUDA_ERROR_INVALID_RESOURCE_TYPE);
        }
        unsafe { write_sm_resource(res as *mut u8, state().sm_count()) };
        Ok(())
    })
}

pub(crate) fn sm_resource_split_by_count(
    result: *mut c_void,
    nb_groups: *mut u32,
    input: *const c_void,
    remaining: *mut c_void,
    flags: u32,
    min_count: u32,
) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(nb_groups)?;
        nonnull(input)?;
        if min_count == 0 || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let total = unsafe { sm_count_of(input as *const u8)? };
        let possible = total / min_count;
        if result.is_null() {
            return unsafe { out(nb_groups, possible) };
        }
        let groups = possible.min(unsafe { *nb_groups });
        for i in 0..groups as usize {
            unsafe { write_sm_resource((result as *mut u8).add(i * RESOURCE_SIZE), min_count) };
        }
        if !remaining.is_null() {
            unsafe { write_sm_resource(remaining as *mut u8, total - groups * min_count) };
        }
        unsafe { out(nb_groups, groups) }
    })
}

pub(crate) fn resource_generate_desc(desc: *mut CUdevResourceDesc, res: *const c_void, n: u32) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(desc)?;
        nonnull(res)?;
        if n == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut sms = 0u32;
        for i in 0..n as usize {
            sms = sms.saturating_add(unsafe { sm_count_of((res as *const u8).add(i * RESOURCE_SIZE))? });
        }
        let _tables = sim::lock();
        let h = sim::new_handle();
        book().descs.insert(h, sms);
        unsafe { out(desc, h as CUdevResourceDesc) }
    })
}

pub(crate) fn green_ctx_create(pg: *mut CUgreenCtx, desc: CUdevResourceDesc, dev: CUdevice, flags: u32) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        nonnull(pg)?;
        let mut sim = sim::lock();
        if !book().descs.contains_key(&(desc as u64)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let bytes = crate::knobs().green_ctx_bytes;
        if bytes > 0 && !state().charge(my_slot(), d, bytes) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        if let Err(e) = activate(&mut sim, d) {
            state().uncharge(my_slot(), d, bytes);
            return Err(e);
        }
        let ctx = sim::new_handle();
        sim.ctxs.insert(
            ctx,
            Ctx { dev: d, primary: false, active: true, refcount: 1, flags, max_tail: Default::default() },
        );
        let g = sim::new_handle();
        book().greens.insert(g, (ctx, d, bytes));
        simlog!("green context {:#x} (context {:#x}) on device {} ({} bytes)", g, ctx, d, bytes);
        drop(sim);
        std::thread::sleep(crate::knobs().green_ctx_create);
        unsafe { out(pg, g as CUgreenCtx) }
    })
}

fn destroy(sim: &mut Sim, g: u64) -> Result<(), CUresult> {
    let (ctx, d, bytes) = book().greens.remove(&g).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    teardown(sim, ctx);
    sim.ctxs.remove(&ctx);
    deactivate(sim, d);
    state().uncharge(my_slot(), d, bytes);
    forget_on_this_thread(ctx);
    Ok(())
}

pub(crate) fn green_ctx_destroy(g: CUgreenCtx) -> CUresult {
    cu_try!({
        check_init()?;
        destroy(&mut sim::lock(), g as u64)
    })
}

pub(crate) fn ctx_from_green_ctx(pctx: *mut CUcontext, g: CUgreenCtx) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pctx)?;
        let _tables = sim::lock();
        let ctx = book().greens.get(&(g as u64)).map(|e| e.0).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        unsafe { out(pctx, ctx as CUcontext) }
    })
}
