//! Entry points of the memory paths CUDA 12.4–13.x added: green contexts (`green`), pools by
//! location (`pool13`) and checkpointing (`checkpoint`). Same format as `exports`.
#![allow(non_snake_case)]

use crate::exports::exports;
use crate::green::{CUdevResourceDesc, CUgreenCtx};
use crate::procaddr::Entry;
use crate::types::*;
use crate::*;
use std::ffi::c_void;

exports! {
    // ---- green contexts (12.4) -----------------------------------------------------------------
    "cuDeviceGetDevResource" @ 12040 => fn cuDeviceGetDevResource(dev: CUdevice, res: *mut c_void, ty: u32) {
        green::device_get_dev_resource(dev, res, ty)
    }
    "cuDevSmResourceSplitByCount" @ 12040 => fn cuDevSmResourceSplitByCount(
        result: *mut c_void, nb: *mut u32, input: *const c_void, remaining: *mut c_void, flags: u32, min_count: u32,
    ) {
        green::sm_resource_split_by_count(result, nb, input, remaining, flags, min_count)
    }
    "cuDevResourceGenerateDesc" @ 12040 => fn cuDevResourceGenerateDesc(desc: *mut CUdevResourceDesc, res: *const c_void, n: u32) {
        green::resource_generate_desc(desc, res, n)
    }
    "cuGreenCtxCreate" @ 12040 => fn cuGreenCtxCreate(g: *mut CUgreenCtx, desc: CUdevResourceDesc, dev: CUdevice, flags: u32) {
        green::green_ctx_create(g, desc, dev, flags)
    }
    "cuGreenCtxDestroy" @ 12040 => fn cuGreenCtxDestroy(g: CUgreenCtx) { green::green_ctx_destroy(g) }
    "cuCtxFromGreenCtx" @ 12040 => fn cuCtxFromGreenCtx(ctx: *mut CUcontext, g: CUgreenCtx) { green::ctx_from_green_ctx(ctx, g) }

    // ---- pools by location (13.0) --------------------------------------------------------------
    "cuMemGetDefaultMemPool" @ 13000 => fn cuMemGetDefaultMemPool(p: *mut CUmemoryPool, loc: *const CUmemLocation, ty: u32) {
        pool13::mem_get_default_mem_pool(p, loc, ty)
    }
    "cuMemGetMemPool" @ 13000 => fn cuMemGetMemPool(p: *mut CUmemoryPool, loc: *const CUmemLocation, ty: u32) {
        pool13::mem_get_mem_pool(p, loc, ty)
    }
    // ---- checkpointing (12.8): any process's, by PID -------------------------------------------
    "cuCheckpointProcessGetState" @ 12080 => fn cuCheckpointProcessGetState(pid: i32, state: *mut u32) {
        checkpoint::get_state(pid, state)
    }
    "cuCheckpointProcessLock" @ 12080 => fn cuCheckpointProcessLock(pid: i32, args: *mut c_void) {
        let _ = args;
        checkpoint::step(pid, sim_state::SimState::checkpoint_lock)
    }
    "cuCheckpointProcessCheckpoint" @ 12080 => fn cuCheckpointProcessCheckpoint(pid: i32, args: *mut c_void) {
        let _ = args;
        checkpoint::step(pid, sim_state::SimState::checkpoint)
    }
    "cuCheckpointProcessRestore" @ 12080 => fn cuCheckpointProcessRestore(pid: i32, args: *mut c_void) {
        let _ = args;
        checkpoint::step(pid, sim_state::SimState::checkpoint_restore)
    }
    "cuCheckpointProcessUnlock" @ 12080 => fn cuCheckpointProcessUnlock(pid: i32, args: *mut c_void) {
        let _ = args;
        checkpoint::step(pid, sim_state::SimState::checkpoint_unlock)
    }

    "cuMemSetMemPool" @ 13000 => fn cuMemSetMemPool(loc: *const CUmemLocation, ty: u32, p: CUmemoryPool) {
        pool13::mem_set_mem_pool(loc, ty, p)
    }
}
