//! Entry points whose ABI changed in CUDA 12.x/13.x headers and that CUDA 13 clients request:
//! the 13.0 context-taking `cuCtxGetDevice_v2` / `cuCtxSynchronize_v2`, location-based
//! `cuMemAdvise_v2` / `cuMemPrefetchAsync_v2`, `cuStreamGetCaptureInfo_v3` (edge data),
//! `cuLaunchHostFunc_v2` (sync mode), `cuMemcpyBatchAsync` (12.8 with `failIdx`, 13.0 without),
//! `cuLibraryGetGlobal` and `cuGraphAddNode` (12.2, with edge data 12.3 / 13.4). Each behaves like
//! its older sibling in the other modules.

use crate::context::{ctx_entry, current};
use crate::memory::{self, Side, find};
use crate::sim;
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out};
use std::ffi::{c_char, c_void};

/// `CU_MEM_LOCATION_TYPE_*` values the sim accepts for advice and prefetch.
const LOC_DEVICE: u32 = 1;
const LOC_HOST: u32 = 2;
const LOC_HOST_NUMA: u32 = 3;
const LOC_HOST_NUMA_CURRENT: u32 = 4;

/// The context `ctx` names (NULL: the calling thread's current one), as (handle, device).
fn ctx_or_current(sim: &mut sim::Sim, ctx: CUcontext) -> Result<(u64, usize), CUresult> {
    if ctx.is_null() {
        return current(sim);
    }
    match ctx_entry(sim, ctx as u64) {
        Some(c) if c.active => Ok((ctx as u64, c.dev)),
        _ => Err(CUDA_ERROR_INVALID_CONTEXT),
    }
}

/// `cuCtxGetDevice_v2(device, ctx)`.
pub(crate) fn ctx_get_device_v2(dev: *mut CUdevice, ctx: CUcontext) -> CUresult {
    if ctx.is_null() {
        return crate::context::get_device(dev);
    }
    cu_try!({
        nonnull(dev)?;
        check_init()?;
        let d = ctx_or_current(&mut sim::lock(), ctx)?.1;
        unsafe { out(dev, crate::ordinal_of(d) as CUdevice) }
    })
}

/// `cuCtxSynchronize_v2(ctx)`: wait for the work of `ctx` (NULL: the current context).
pub(crate) fn ctx_synchronize_v2(ctx: CUcontext) -> CUresult {
    if ctx.is_null() {
        return crate::context::synchronize();
    }
    cu_try!({
        check_init()?;
        let t = {
            let mut sim = sim::lock();
            let (h, _) = ctx_or_current(&mut sim, ctx)?;
            crate::stream::ctx_tail(&sim, h)
        };
        t.wait();
        Ok(())
    })
}

/// A managed (or device) range for advice/prefetch: it must lie inside one allocation.
fn check_managed_range(ptr: CUdeviceptr, count: usize) -> Result<(), CUresult> {
    let mut sim = sim::lock();
    current(&mut sim)?;
    match find(&sim, ptr) {
        Some(_) => memory::check_range(&sim, ptr, count as u64),
        None => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn check_device_ordinal(dev: CUdevice) -> Result<(), CUresult> {
    // CU_DEVICE_CPU (-1) is a valid target of the v1 ABIs.
    if dev == -1 { Ok(()) } else { crate::context::check_dev(dev).map(|_| ()) }
}

fn check_location(loc: CUmemLocation) -> Result<(), CUresult> {
    match loc.type_ {
        LOC_DEVICE => crate::context::check_dev(loc.id).map(|_| ()),
        LOC_HOST | LOC_HOST_NUMA | LOC_HOST_NUMA_CURRENT => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuMemAdvise` (v1: device ordinal, `CU_DEVICE_CPU` for the host).
pub(crate) fn mem_advise(ptr: CUdeviceptr, count: usize, _advice: u32, dev: CUdevice) -> CUresult {
    cu_try!({
        check_device_ordinal(dev)?;
        check_managed_range(ptr, count)
    })
}

/// `cuMemAdvise_v2` (a `CUmemLocation`).
pub(crate) fn mem_advise_v2(ptr: CUdeviceptr, count: usize, _advice: u32, loc: CUmemLocation) -> CUresult {
    cu_try!({
        check_location(loc)?;
        check_managed_range(ptr, count)
    })
}

/// A prefetch costs what a copy of `count` bytes costs on `h`.
fn prefetch(ptr: CUdeviceptr, count: usize, h: CUstream, ptds: bool) -> CUresult {
    cu_try!({
        check_managed_range(ptr, count)?;
        let mut sim = sim::lock();
        let k = crate::stream::resolve(&mut sim, h, ptds)?;
        crate::stream::enqueue(&mut sim, k, count as u64 / 25);
        Ok(())
    })
}

/// `cuMemPrefetchAsync` (v1: device ordinal).
pub(crate) fn mem_prefetch(ptr: CUdeviceptr, count: usize, dev: CUdevice, h: CUstream, ptds: bool) -> CUresult {
    if let Err(e) = check_device_ordinal(dev) {
        return e;
    }
    prefetch(ptr, count, h, ptds)
}

/// `cuMemPrefetchAsync_v2` (a `CUmemLocation` and flags, which must be 0).
pub(crate) fn mem_prefetch_v2(
    ptr: CUdeviceptr,
    count: usize,
    loc: CUmemLocation,
    flags: u32,
    h: CUstream,
    ptds: bool,
) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = check_location(loc) {
        return e;
    }
    prefetch(ptr, count, h, ptds)
}

/// `cuStreamGetCaptureInfo_v3`: v2 plus edge data; the sim's captured edges are all default
/// edges, for which the driver returns NULL edge data.
#[allow(clippy::too_many_arguments)]
pub(crate) fn get_capture_info_v3(
    h: CUstream,
    status: *mut i32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    ndeps: *mut usize,
    ptds: bool,
) -> CUresult {
    let r = crate::stream::get_capture_info(h, status, id, graph, deps, ndeps, ptds);
    if r == CUDA_SUCCESS && !edges.is_null() {
        unsafe { *edges = std::ptr::null() };
    }
    r
}

/// `CU_LAUNCH_HOST_FUNC_SYNC_MODE_*` known to 13.1 headers: 0 (blocking) and 1 (non-blocking).
pub(crate) fn launch_host_func_v2(h: CUstream, f: CUhostFn, data: *mut c_void, sync_mode: u32, ptds: bool) -> CUresult {
    if sync_mode > 1 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    crate::stream::launch_host_func(h, f, data, ptds)
}

/// `cuMemcpyBatchAsync`: `count` unified-address copies on `h`; on failure `fail_idx` (12.8 ABI
/// only) names the first copy that failed. The attributes only describe access hints.
#[allow(clippy::too_many_arguments)]
pub(crate) fn memcpy_batch(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const c_void,
    attr_idxs: *const usize,
    num_attrs: usize,
    fail_idx: *mut usize,
    h: CUstream,
    ptds: bool,
) -> CUresult {
    if count == 0 || dsts.is_null() || srcs.is_null() || sizes.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if num_attrs == 0 || num_attrs > count || attrs.is_null() || attr_idxs.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for i in 0..count {
        // SAFETY: the caller passes arrays of `count` elements (the function's contract).
        let (d, s, n) = unsafe { (*dsts.add(i), *srcs.add(i), *sizes.add(i)) };
        let r = memory::copy(d, Side::Any, s, Side::Any, n, h, ptds, false);
        if r != CUDA_SUCCESS {
            if !fail_idx.is_null() {
                unsafe { *fail_idx = i };
            }
            return r;
        }
    }
    if !fail_idx.is_null() {
        unsafe { *fail_idx = usize::MAX };
    }
    CUDA_SUCCESS
}

/// `cuLibraryGetGlobal`: the global of the library's module (for the current context).
pub(crate) fn library_get_global(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    l: CUlibrary,
    name: *const c_char,
) -> CUresult {
    let m = {
        let sim = sim::lock();
        match sim.libs.get(&(l as u64)) {
            Some(lib) => lib.module,
            None => return CUDA_ERROR_INVALID_HANDLE,
        }
    };
    crate::module::module_get_global(dptr, bytes, m as CUmodule, name)
}

/// `CUgraphNodeParams` (256 bytes): the node type, then a union of the per-type parameter structs
/// at offset 16.
#[repr(C)]
pub(crate) struct CUgraphNodeParams {
    pub type_: u32,
    reserved0: [i32; 3],
    union: [u64; 29],
    reserved2: i64,
}

const _: () = assert!(std::mem::size_of::<CUgraphNodeParams>() == 256);

const NODE_KERNEL: u32 = 0;
const NODE_GRAPH: u32 = 4;
const NODE_MEM_ALLOC: u32 = 10;
const NODE_MEM_FREE: u32 = 11;

/// `cuGraphAddNode` (12.2) and its `_v2`/`_v3` (edge data, 12.3 / 13.4): the node types the sim
/// models (kernel, child graph, memory allocation, memory free) as their own `cuGraphAdd*Node`; edge data is
/// accepted and ignored (every sim edge is a default edge). Other types: not supported.
pub(crate) fn graph_add_node(
    pn: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> CUresult {
    if params.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: `params` is the caller's CUgraphNodeParams (the function's contract).
    let ty = unsafe { (*params).type_ };
    let body = unsafe { std::ptr::addr_of_mut!((*params).union) } as *mut u8;
    match ty {
        NODE_KERNEL => {
            // SAFETY: the kernel member (CUDA_KERNEL_NODE_PARAMS_v3, laid out as v2) is at the union.
            let k = unsafe { (body as *const CUDA_KERNEL_NODE_PARAMS_v2).read_unaligned() };
            crate::graph::add_kernel_node_v2(pn, g, deps, n, &k)
        }
        NODE_MEM_ALLOC => crate::graph::add_mem_alloc_node(pn, g, deps, n, body as *mut CUDA_MEM_ALLOC_NODE_PARAMS),
        NODE_GRAPH => {
            // SAFETY: the child-graph member (CUDA_CHILD_GRAPH_NODE_PARAMS: the CUgraph, then the
            // ownership) is at the union.
            let child = unsafe { (body as *const u64).read_unaligned() };
            let ownership = unsafe { (body.add(8) as *const i32).read_unaligned() };
            crate::graph::add_child_graph_node(pn, g, deps, n, child, ownership == 1)
        }
        NODE_MEM_FREE => {
            // SAFETY: the free member (CUDA_MEM_FREE_NODE_PARAMS: one CUdeviceptr) is at the union.
            let dptr = unsafe { (body as *const CUdeviceptr).read_unaligned() };
            crate::graph::add_mem_free_node(pn, g, deps, n, dptr)
        }
        _ => {
            crate::simlog!("cuGraphAddNode: node type {ty} is not modelled");
            CUDA_ERROR_NOT_SUPPORTED
        }
    }
}
