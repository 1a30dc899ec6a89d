//! Driver init and contexts. (Context memory is charged in the memory module.)

use crate::ffi::*;
use crate::hooks::cuda::pfn;
use std::ffi::{c_int, c_uint};

pub unsafe fn init(real: pfn::cuInit, flags: c_uint) -> CUresult {
    unsafe { real(flags) }
}

pub unsafe fn primary_retain(real: pfn::cuDevicePrimaryCtxRetain, pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    unsafe { real(pctx, dev) }
}

pub unsafe fn primary_release(real: pfn::cuDevicePrimaryCtxRelease_v2, dev: CUdevice) -> CUresult {
    unsafe { real(dev) }
}

pub unsafe fn primary_reset(real: pfn::cuDevicePrimaryCtxReset_v2, dev: CUdevice) -> CUresult {
    unsafe { real(dev) }
}

pub unsafe fn ctx_create_v2(real: pfn::cuCtxCreate_v2, pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult {
    unsafe { real(pctx, flags, dev) }
}

pub unsafe fn ctx_create_v3(
    real: pfn::cuCtxCreate_v3,
    pctx: *mut CUcontext,
    params: *mut CUexecAffinityParam,
    num: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    unsafe { real(pctx, params, num, flags, dev) }
}

pub unsafe fn ctx_create_v4(
    real: pfn::cuCtxCreate_v4,
    pctx: *mut CUcontext,
    params: *mut CUctxCreateParams,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    unsafe { real(pctx, params, flags, dev) }
}

pub unsafe fn ctx_destroy(real: pfn::cuCtxDestroy_v2, ctx: CUcontext) -> CUresult {
    unsafe { real(ctx) }
}

pub unsafe fn ctx_set_current(real: pfn::cuCtxSetCurrent, ctx: CUcontext) -> CUresult {
    unsafe { real(ctx) }
}
