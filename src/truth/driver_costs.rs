//! Memory the driver takes outside every allocation entry point, counted up front where a hook
//! can see it (docs/design.md "Driver-held memory (truth)"): module and library loads and
//! `cuCtxSetLimit` are measured through [`truth::measured`] (NVML's figure for our host PID across the call);
//! graph memory through the driver's own graph-pool attribute around `cuGraphLaunch` and
//! `cuDeviceGraphMemTrim`. What does not fit under the limit is undone and fails with
//! `CUDA_ERROR_OUT_OF_MEMORY`, as on a full GPU. Whatever escapes (no host PID yet, the runtime's
//! own paths) is caught by the periodic reconciliation.

use crate::ffi::*;
use crate::{driver, state, truth};
use cuda_types::pfn;
use std::collections::HashMap;
use std::ffi::{c_char, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vgpu_core::ledger::{Reservation, ReserveError};
use vgpu_core::reconcile;
use vgpu_core::region::{MAX_DEVICES, UsageKind};
use vgpu_core::sync::Mutex;

/// Region device of the current context (modules), or device 0 (context-independent libraries
/// load onto the current device when there is one).
fn region_dev() -> Option<usize> {
    driver::current_ordinal().map(|o| state::get().region_index(o))
}

fn current_ctx() -> u64 {
    driver::current_ctx() as u64
}

// ---- modules and libraries -----------------------------------------------------------------------

fn module_loaded(what: &str, pm: *mut CUmodule, op: impl FnOnce() -> CUresult) -> CUresult {
    let Some(d) = region_dev().filter(|_| !pm.is_null()) else { return op() };
    truth::measured(
        d,
        UsageKind::Module,
        current_ctx(),
        what,
        op,
        || unsafe { *pm } as u64,
        |k| {
            if let Some(unload) = driver::cuModuleUnload() {
                unsafe { unload(k as CUmodule) };
            }
            unsafe { *pm = std::ptr::null_mut() };
        },
    )
}

fn library_loaded(what: &str, pl: *mut CUlibrary, op: impl FnOnce() -> CUresult) -> CUresult {
    if pl.is_null() {
        return op();
    }
    let d = region_dev().unwrap_or(0);
    truth::measured(
        d,
        UsageKind::Module,
        0,
        what,
        op,
        || unsafe { *pl } as u64,
        |k| {
            if let Some(unload) = driver::cuLibraryUnload() {
                unsafe { unload(k as CUlibrary) };
            }
            unsafe { *pl = std::ptr::null_mut() };
        },
    )
}

/// A handle we counted driver memory for is gone.
fn uncount(key: u64) {
    let st = state::get();
    if let Some(rec) = st.handles.remove(key) {
        st.ledger.release(rec.dev, rec.kind, rec.bytes);
    }
}

pub unsafe fn module_load(real: pfn::cuModuleLoad, pm: *mut CUmodule, fname: *const c_char) -> CUresult {
    module_loaded("cuModuleLoad", pm, || unsafe { real(pm, fname) })
}

pub unsafe fn module_load_data(real: pfn::cuModuleLoadData, pm: *mut CUmodule, image: *const c_void) -> CUresult {
    module_loaded("cuModuleLoadData", pm, || unsafe { real(pm, image) })
}

pub unsafe fn module_load_data_ex(
    real: pfn::cuModuleLoadDataEx,
    pm: *mut CUmodule,
    image: *const c_void,
    n: c_uint,
    opts: *mut CUjit_option,
    vals: *mut *mut c_void,
) -> CUresult {
    module_loaded("cuModuleLoadDataEx", pm, || unsafe { real(pm, image, n, opts, vals) })
}

pub unsafe fn module_load_fat_binary(
    real: pfn::cuModuleLoadFatBinary,
    pm: *mut CUmodule,
    fatbin: *const c_void,
) -> CUresult {
    module_loaded("cuModuleLoadFatBinary", pm, || unsafe { real(pm, fatbin) })
}

pub unsafe fn module_unload(real: pfn::cuModuleUnload, m: CUmodule) -> CUresult {
    let r = unsafe { real(m) };
    if r == CUDA_SUCCESS {
        uncount(m as u64);
    }
    r
}

#[allow(clippy::too_many_arguments)] // the driver's own signature
pub unsafe fn library_load_data(
    real: pfn::cuLibraryLoadData,
    pl: *mut CUlibrary,
    code: *const c_void,
    jo: *mut CUjit_option,
    jv: *mut *mut c_void,
    nj: c_uint,
    lo: *mut CUlibraryOption,
    lv: *mut *mut c_void,
    nl: c_uint,
) -> CUresult {
    library_loaded("cuLibraryLoadData", pl, || unsafe { real(pl, code, jo, jv, nj, lo, lv, nl) })
}

#[allow(clippy::too_many_arguments)] // the driver's own signature
pub unsafe fn library_load_from_file(
    real: pfn::cuLibraryLoadFromFile,
    pl: *mut CUlibrary,
    file: *const c_char,
    jo: *mut CUjit_option,
    jv: *mut *mut c_void,
    nj: c_uint,
    lo: *mut CUlibraryOption,
    lv: *mut *mut c_void,
    nl: c_uint,
) -> CUresult {
    library_loaded("cuLibraryLoadFromFile", pl, || unsafe { real(pl, file, jo, jv, nj, lo, lv, nl) })
}

pub unsafe fn library_unload(real: pfn::cuLibraryUnload, l: CUlibrary) -> CUresult {
    let r = unsafe { real(l) };
    if r == CUDA_SUCCESS {
        uncount(l as u64);
    }
    r
}

// ---- context limits ------------------------------------------------------------------------------

/// Handle-table key of (context, limit): context handles are at least 16-byte aligned user
/// addresses, so bit 63 plus the limit in the low bits never collides with a real handle.
fn limit_key(ctx: u64, limit: CUlimit) -> u64 {
    (ctx & !0xF) | (1 << 63) | (limit as u64 & 0xF)
}

pub unsafe fn ctx_set_limit(real: pfn::cuCtxSetLimit, limit: CUlimit, value: usize) -> CUresult {
    let memory_limit = matches!(limit, CU_LIMIT_STACK_SIZE | CU_LIMIT_PRINTF_FIFO_SIZE | CU_LIMIT_MALLOC_HEAP_SIZE);
    let ctx = current_ctx();
    let (true, Some(d), false) = (memory_limit, region_dev(), ctx == 0) else { return unsafe { real(limit, value) } };
    let key = limit_key(ctx, limit);
    let mut old: usize = 0;
    let have_old = driver::cuCtxGetLimit().is_some_and(|g| unsafe { g(&mut old, limit) } == CUDA_SUCCESS);
    let st = state::get();
    // Raising takes what the driver's figure grew by (limit-checked); lowering gives back what it
    // fell by, up to what this (context, limit) was charged.
    let out = truth::with(Some(truth::REFUSAL_WAIT), |t| {
        let before = truth::measure(t, d).ok();
        let r = unsafe { real(limit, value) };
        let (CUDA_SUCCESS, Some(b), Ok(a)) = (r, before, truth::measure(t, d)) else { return (r, false) };
        let Some((up, down)) = reconcile::across(&b, &a) else { return (r, false) };
        let prev = st.handles.get(key).map_or(0, |p| p.bytes);
        let rec = |bytes| vgpu_core::ledger::AllocRecord { dev: d, bytes, kind: UsageKind::Context, owner: ctx };
        if up > 0 {
            match st.ledger.reserve(d, up, UsageKind::Context, st.memory_limit(d)) {
                Ok(res) => {
                    res.commit();
                    st.handles.insert(key, rec(prev + up));
                    crate::debug!("cuCtxSetLimit({limit}, {value}): counted {up} driver-held bytes on device {d}");
                }
                Err(ReserveError::OverLimit(o)) => {
                    crate::warn!(
                        "cuCtxSetLimit({limit}, {value}): the driver holds {up} bytes more for it on device {d}: {} used + {up} > {} limit; undone",
                        o.usage,
                        o.limit
                    );
                    return (CUDA_ERROR_OUT_OF_MEMORY, true);
                }
                Err(e) => crate::error!("cuCtxSetLimit: {e}; left to the reconciliation"),
            }
        } else if down > 0 && prev > 0 {
            let give = down.min(prev);
            st.ledger.release(d, UsageKind::Context, give);
            if prev > give {
                st.handles.insert(key, rec(prev - give));
            } else {
                st.handles.remove(key);
            }
        }
        (r, false)
    });
    match out {
        Some((r, undo)) => {
            if undo && have_old {
                unsafe { real(limit, old) };
            }
            r
        }
        None => unsafe { real(limit, value) },
    }
}

// ---- graph memory --------------------------------------------------------------------------------

/// Footprints of graphs with memory nodes (graph → bytes) and of their executables
/// (exec → (bytes, CUDA ordinal)), the 2 MiB-rounded sums of their allocation nodes.
#[derive(Default)]
struct GraphBook {
    graphs: HashMap<u64, u64>,
    execs: HashMap<u64, (u64, CUdevice)>,
}

static GRAPHS: Mutex<Option<GraphBook>> = Mutex::new(None);
/// Any executable with memory nodes exists: launches check nothing until then.
static ANY_MEM_EXEC: AtomicBool = AtomicBool::new(false);
/// Graph-pool bytes counted per region device (`data_size`: the application's graph allocations).
static GRAPH_HELD: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
const GRANULE: u64 = 2 << 20;

fn book<R>(f: impl FnOnce(&mut GraphBook) -> R) -> R {
    f(GRAPHS.lock().get_or_insert_with(GraphBook::default))
}

pub unsafe fn graph_add_mem_alloc_node(
    real: pfn::cuGraphAddMemAllocNode,
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CUresult {
    let r = unsafe { real(node, graph, deps, n, params) };
    if r == CUDA_SUCCESS && !params.is_null() {
        alloc_node_added(graph, unsafe { (*params).bytesize } as u64);
    }
    r
}

/// A memory-allocation node of `bytes` is part of `graph`: its launches may grow the graph pool.
fn alloc_node_added(graph: CUgraph, bytes: u64) {
    let bytes = bytes.div_ceil(GRANULE) * GRANULE;
    book(|b| *b.graphs.entry(graph as u64).or_default() += bytes);
}

/// The generic node parameters of a node `cuGraphAddNode*` added: a memory-allocation node counts
/// like one of `cuGraphAddMemAllocNode`; a child-graph node brings its child's memory nodes (only
/// a child moved into the graph, `CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`, may have any); other node
/// types allocate nothing.
///
/// # Safety
/// `params` is null or the caller's `CUgraphNodeParams`, valid for reads.
unsafe fn generic_node_added(graph: CUgraph, params: *const CUgraphNodeParams) {
    if params.is_null() {
        return;
    }
    // SAFETY: `params` points to the caller's parameters (the function's contract). The union
    // (`reserved1`, 232 bytes, 8-aligned) holds the member `type` names at its start: `alloc`, a
    // CUDA_MEM_ALLOC_NODE_PARAMS (120 bytes), or `graph`, a CUDA_CHILD_GRAPH_NODE_PARAMS whose
    // first field is the child CUgraph.
    unsafe {
        let member = std::ptr::addr_of!((*params).reserved1);
        match (*params).type_ {
            CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                alloc_node_added(graph, (*(member as *const CUDA_MEM_ALLOC_NODE_PARAMS)).bytesize as u64);
            }
            CU_GRAPH_NODE_TYPE_GRAPH => {
                let child = *(member as *const CUgraph) as u64;
                book(|b| {
                    if let Some(&bytes) = b.graphs.get(&child) {
                        *b.graphs.entry(graph as u64).or_default() += bytes;
                    }
                });
            }
            _ => {}
        }
    }
}

const _: () = assert!(
    size_of::<CUDA_MEM_ALLOC_NODE_PARAMS>() <= size_of::<[i64; 29]>()
        && align_of::<CUDA_MEM_ALLOC_NODE_PARAMS>() <= align_of::<[i64; 29]>()
);

/// `cuGraphAddNode` (12.2).
pub unsafe fn graph_add_node(
    real: pfn::cuGraphAddNode,
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> CUresult {
    let r = unsafe { real(node, graph, deps, n, params) };
    if r == CUDA_SUCCESS {
        unsafe { generic_node_added(graph, params) };
    }
    r
}

/// `cuGraphAddNode_v2` (12.3) and `_v3` (13.4): the same with edge data.
pub unsafe fn graph_add_node_with_edges(
    real: pfn::cuGraphAddNode_v2,
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> CUresult {
    let r = unsafe { real(node, graph, deps, edges, n, params) };
    if r == CUDA_SUCCESS {
        unsafe { generic_node_added(graph, params) };
    }
    r
}

/// `cuMemAllocAsync` captured into `graph`: an allocation node of `bytes` (null graph: the driver
/// could not say which; left to the reconciliation).
pub fn captured_alloc(graph: CUgraph, bytes: u64) {
    if graph.is_null() {
        crate::once!(
            info,
            "a captured stream-ordered allocation's graph is unknown (no cuStreamGetCaptureInfo_v2); its launch is reconciled, not checked"
        );
        return;
    }
    let bytes = bytes.div_ceil(GRANULE) * GRANULE;
    book(|b| *b.graphs.entry(graph as u64).or_default() += bytes);
}

pub unsafe fn graph_instantiate(
    real: pfn::cuGraphInstantiateWithFlags,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> CUresult {
    let r = unsafe { real(exec, graph, flags) };
    if r == CUDA_SUCCESS {
        unsafe { instantiated(exec, graph) };
    }
    r
}

/// `cuGraphInstantiate` (10.0) and `_v2` (11.0), the ABIs with an error node and a log buffer.
pub unsafe fn graph_instantiate_with_log(
    real: pfn::cuGraphInstantiate,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    let r = unsafe { real(exec, graph, error_node, log, log_size) };
    if r == CUDA_SUCCESS {
        unsafe { instantiated(exec, graph) };
    }
    r
}

/// `cuGraphInstantiateWithParams` (12.0, and its per-thread-stream form).
pub unsafe fn graph_instantiate_with_params(
    real: pfn::cuGraphInstantiateWithParams,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
) -> CUresult {
    // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: the new executable is uploaded too (as by cuGraphUpload).
    // SAFETY: `params` is null or the caller's parameters (the function's contract).
    let upload = !params.is_null() && unsafe { (*params).flags } & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD as u64 != 0;
    let bytes = if upload { book(|b| b.graphs.get(&(graph as u64)).copied().unwrap_or(0)) } else { 0 };
    let pool = match (bytes, driver::current_ordinal()) {
        (1.., Some(o)) => match reserve_pool_growth(bytes, o, "cuGraphInstantiateWithParams (upload)") {
            Ok(p) => Some(p),
            Err(code) => return code,
        },
        _ => None,
    };
    let r = unsafe { real(exec, graph, params) };
    if r == CUDA_SUCCESS {
        unsafe { instantiated(exec, graph) };
    }
    graph_launch_end(pool, r);
    r
}

/// `graph` was instantiated into `*exec`: an executable of a graph with memory nodes is checked at
/// its launches.
///
/// # Safety
/// `exec` is null or the caller's out-pointer the driver just filled.
unsafe fn instantiated(exec: *mut CUgraphExec, graph: CUgraph) {
    if exec.is_null() {
        return;
    }
    let bytes = book(|b| b.graphs.get(&(graph as u64)).copied().unwrap_or(0));
    if bytes > 0
        && let Some(o) = driver::current_ordinal()
    {
        // SAFETY: `exec` is valid and the driver wrote the executable there (the contract).
        let e = unsafe { *exec } as u64;
        book(|b| b.execs.insert(e, (bytes, o)));
        ANY_MEM_EXEC.store(true, Ordering::Release);
    }
}

pub unsafe fn graph_exec_destroy(real: pfn::cuGraphExecDestroy, exec: CUgraphExec) -> CUresult {
    let r = unsafe { real(exec) };
    if r == CUDA_SUCCESS && ANY_MEM_EXEC.load(Ordering::Acquire) {
        book(|b| b.execs.remove(&(exec as u64)));
    }
    r
}

/// A graph-memory attribute of CUDA ordinal `o`.
fn graph_mem_attr(o: CUdevice, attr: CUgraphMem_attribute) -> Option<u64> {
    let f = driver::cuDeviceGetGraphMemAttribute()?;
    let mut v: u64 = 0;
    (unsafe { f(o, attr, &mut v as *mut u64 as *mut c_void) } == CUDA_SUCCESS).then_some(v)
}

/// The driver's graph pool of CUDA ordinal `o` (`CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`).
fn pool_reserved(o: CUdevice) -> Option<u64> {
    graph_mem_attr(o, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
}

/// Bring the graph-pool charge of ordinal `o` to what the driver reports.
fn sync_pool(o: CUdevice) {
    let Some(now) = pool_reserved(o) else { return };
    let st = state::get();
    let d = st.region_index(o);
    let held = GRAPH_HELD[d].load(Ordering::Acquire);
    if now > held {
        st.ledger.force(d, UsageKind::Data, now - held);
        GRAPH_HELD[d].fetch_add(now - held, Ordering::AcqRel);
    } else if now < held {
        st.ledger.release(d, UsageKind::Data, held - now);
        GRAPH_HELD[d].fetch_sub(held - now, Ordering::AcqRel);
    }
}

/// Before a graph launch: an executable with memory nodes (explicit or captured) may grow the graph
/// pool by its footprint beyond the pool's unused part; reserve that against the limit (refused:
/// the launch is not made).
pub struct PoolGrowth {
    ordinal: CUdevice,
    res: Option<Reservation<'static, 'static>>,
}

pub fn graph_launch_begin(exec: CUgraphExec) -> Result<Option<PoolGrowth>, CUresult> {
    exec_pool_growth(exec, "cuGraphLaunch")
}

fn exec_pool_growth(exec: CUgraphExec, what: &str) -> Result<Option<PoolGrowth>, CUresult> {
    if !ANY_MEM_EXEC.load(Ordering::Acquire) {
        return Ok(None);
    }
    let Some((bytes, o)) = book(|b| b.execs.get(&(exec as u64)).copied()) else { return Ok(None) };
    reserve_pool_growth(bytes, o, what).map(Some)
}

/// Reserve what a footprint of `bytes` may add to ordinal `o`'s graph pool (refused: `Err`).
fn reserve_pool_growth(bytes: u64, o: CUdevice, what: &str) -> Result<PoolGrowth, CUresult> {
    // What the pool's unused part lacks: allocations of earlier launches the application has not
    // freed yet keep their part of it.
    let reserved = pool_reserved(o).unwrap_or(0);
    let used = graph_mem_attr(o, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT).unwrap_or(0).min(reserved);
    let growth = bytes.saturating_sub(reserved - used);
    if growth == 0 {
        return Ok(PoolGrowth { ordinal: o, res: None });
    }
    let st = state::get();
    let d = st.region_index(o);
    let limit = st.memory_limit(d);
    let mut r = st.ledger.reserve(d, growth, UsageKind::Data, limit);
    if matches!(r, Err(ReserveError::OverLimit(_))) && truth::before_refusal(d) {
        r = st.ledger.reserve(d, growth, UsageKind::Data, limit);
    }
    match r {
        Ok(res) => Ok(PoolGrowth { ordinal: o, res: Some(res) }),
        Err(ReserveError::OverLimit(o)) => {
            crate::warn!(
                "{what}: its graph memory ({growth} more bytes) does not fit on device {d}: {} used of {} limit; refused",
                o.usage,
                o.limit
            );
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
        Err(e) => {
            crate::error!("{what}: {e}");
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
    }
}

/// After it: the reservation becomes the pool charge, settled on the driver's figure.
pub fn graph_launch_end(g: Option<PoolGrowth>, r: CUresult) {
    let Some(g) = g else { return };
    if let Some(res) = g.res {
        if r != CUDA_SUCCESS {
            return; // dropped: rolled back
        }
        let (d, b) = (res.dev(), res.bytes());
        res.commit();
        GRAPH_HELD[d].fetch_add(b, Ordering::AcqRel);
    }
    sync_pool(g.ordinal);
}

/// `cuGraphUpload` (+ `_ptsz`): the upload backs the executable's graph memory in the driver's
/// graph pool ahead of its launches; checked and charged like a launch.
pub unsafe fn graph_upload(real: pfn::cuGraphUpload, exec: CUgraphExec, stream: CUstream) -> CUresult {
    let pool = match exec_pool_growth(exec, "cuGraphUpload") {
        Ok(p) => p,
        Err(code) => return code,
    };
    let r = unsafe { real(exec, stream) };
    graph_launch_end(pool, r);
    r
}

/// Periodic (truth tick): the driver may give a graph pool back on its own (its device's last
/// context went); settle the charge on its figure.
pub fn tick(d: usize) {
    if GRAPH_HELD[d].load(Ordering::Relaxed) == 0 {
        return;
    }
    let st = state::get();
    let ordinals: Vec<CUdevice> = st.devices().ordinals_of(d);
    for o in ordinals {
        sync_pool(o);
    }
}

/// In a forked child: none of the parent's graphs, pools or charges exist here.
pub fn fork_child() {
    // SAFETY: called from the state's atfork child handler (via truth; one thread, forked from
    // outside the shim).
    unsafe {
        GRAPHS.force_unlock_in_child();
        POOLS.force_unlock_in_child();
    }
    // Leak, never drop: a parent thread may have been mid-update at the fork, so the old
    // books are not trusted to be consistent enough to free.
    std::mem::forget(GRAPHS.lock().take());
    std::mem::forget(std::mem::take(&mut *POOLS.lock()));
    ANY_MEM_EXEC.store(false, Ordering::Release);
    crate::pool_place::fork_child();
    for h in &GRAPH_HELD {
        h.store(0, Ordering::Relaxed);
    }
}

pub unsafe fn device_graph_mem_trim(real: pfn::cuDeviceGraphMemTrim, dev: CUdevice) -> CUresult {
    let r = unsafe { real(dev) };
    if r == CUDA_SUCCESS {
        sync_pool(dev);
    }
    r
}

// ---- stream-ordered pools --------------------------------------------------------------------------

/// Pools the application created (pool → CUDA ordinal): their unused reserve is explained memory.
static POOLS: Mutex<Vec<(u64, CUdevice)>> = Mutex::new(Vec::new());

pub unsafe fn mem_pool_create(
    real: pfn::cuMemPoolCreate,
    pool: *mut CUmemoryPool,
    props: *const CUmemPoolProps,
) -> CUresult {
    let r = unsafe { real(pool, props) };
    if r == CUDA_SUCCESS && !pool.is_null() && !props.is_null() {
        let p = unsafe { &*props };
        crate::pool_place::created(unsafe { *pool }, p.location.type_ as _, p.allocType as _);
        if p.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
            POOLS.lock().push((unsafe { *pool } as u64, p.location.id));
        }
    }
    r
}

pub unsafe fn mem_pool_destroy(real: pfn::cuMemPoolDestroy, pool: CUmemoryPool) -> CUresult {
    let r = unsafe { real(pool) };
    if r == CUDA_SUCCESS {
        crate::pool_place::destroyed(pool);
        POOLS.lock().retain(|e| e.0 != pool as u64);
    }
    r
}

fn pool_attr(pool: CUmemoryPool, attr: CUmemPool_attribute) -> Option<u64> {
    let f = driver::cuMemPoolGetAttribute()?;
    let mut v: u64 = 0;
    (unsafe { f(pool, attr as _, &mut v as *mut u64 as *mut c_void) } == CUDA_SUCCESS).then_some(v)
}

/// Unused reserve (reserved − used) of the pools of region device `d`: the default and current
/// pool of each CUDA ordinal mapped to `d`, and the pools the application created there.
pub fn pool_slack(d: usize) -> u64 {
    let st = state::get();
    let ordinals: Vec<CUdevice> = st.devices().ordinals_of(d);
    let mut pools: Vec<u64> = POOLS.lock().iter().filter(|e| ordinals.contains(&e.1)).map(|e| e.0).collect();
    for &o in &ordinals {
        for get in [driver::cuDeviceGetDefaultMemPool(), driver::cuDeviceGetMemPool()].into_iter().flatten() {
            let mut p: CUmemoryPool = std::ptr::null_mut();
            if unsafe { get(&mut p, o) } == CUDA_SUCCESS && !p.is_null() {
                pools.push(p as u64);
            }
        }
    }
    pools.sort_unstable();
    pools.dedup();
    pools
        .into_iter()
        .filter_map(|p| {
            let p = p as CUmemoryPool;
            Some(
                pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?
                    .saturating_sub(pool_attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?),
            )
        })
        .sum()
}
