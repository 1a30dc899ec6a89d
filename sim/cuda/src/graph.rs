//! Graphs with kernel and memory nodes (built explicitly or by stream capture: a kernel launch or
//! `cuMemAllocAsync` / `cuMemFreeAsync` on a capturing stream adds a node instead of running). An
//! executable graph is a snapshot of its kernel nodes and memory footprint; a launch draws the
//! memory from the graph pool (sim/README.md "Model") and runs the kernels in
//! sequence on the stream.

use crate::context::current;
use crate::launch::{KParams, launch_seq};
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out};
use std::ffi::c_void;

pub(crate) struct Graph {
    pub nodes: Vec<u64>,
}

pub(crate) struct Node {
    pub graph: u64,
    #[allow(dead_code)]
    pub deps: Vec<u64>,
    pub params: KParams,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: u64,
    pub ctx: u64,
    /// A memory-allocation node: (backing base, backing length, charged footprint).
    pub mem: Option<(u64, u64, u64)>,
    /// A memory-free node: the graph allocation it frees.
    pub free: Option<u64>,
}

unsafe impl Send for Node {}

pub(crate) struct Exec {
    pub kernels: Vec<KParams>,
    /// Device and graph-pool footprint of the memory nodes (0: none).
    pub mem_dev: usize,
    pub mem_bytes: u64,
    /// Allocations the graph does not free (address, footprint): alive after a launch.
    pub keeps: Vec<(u64, u64)>,
    /// Free nodes of allocations made outside the graph (by another graph's launch).
    pub frees: Vec<u64>,
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`: a launch first frees what the last left.
    pub auto_free: bool,
}

pub(crate) fn new_graph(sim: &mut Sim) -> u64 {
    let h = sim::new_handle();
    sim.graphs.insert(h, Graph { nodes: Vec::new() });
    h
}

pub(crate) fn add_kernel_node(sim: &mut Sim, g: u64, deps: &[u64], p: KParams) -> Result<u64, CUresult> {
    add_node(sim, g, deps, p, std::ptr::null_mut(), std::ptr::null_mut(), 0, 0)
}

fn add_node(
    sim: &mut Sim,
    g: u64,
    deps: &[u64],
    p: KParams,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kern: u64,
    ctx: u64,
) -> Result<u64, CUresult> {
    if !sim.graphs.contains_key(&g) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if deps.iter().any(|d| sim.nodes.get(d).is_none_or(|n| n.graph != g)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = sim::new_handle();
    let node =
        Node { graph: g, deps: deps.to_vec(), params: p, kernel_params, extra, kern, ctx, mem: None, free: None };
    sim.nodes.insert(h, node);
    sim.graphs.get_mut(&g).unwrap().nodes.push(h);
    Ok(h)
}

pub(crate) fn graph_create(pg: *mut CUgraph, flags: u32) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pg)?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let g = new_graph(&mut sim::lock());
        unsafe { out(pg, g as CUgraph) }
    })
}

unsafe fn deps_vec(deps: *const CUgraphNode, n: usize) -> Result<Vec<u64>, CUresult> {
    if n == 0 {
        return Ok(Vec::new());
    }
    nonnull(deps)?;
    Ok((0..n).map(|i| unsafe { *deps.add(i) } as u64).collect())
}

pub(crate) fn add_kernel_node_v1(
    pn: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_KERNEL_NODE_PARAMS_v1,
) -> CUresult {
    if p.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let p = unsafe { *p };
    let v2 = CUDA_KERNEL_NODE_PARAMS_v2 {
        func: p.func,
        grid_dim_x: p.grid_dim_x,
        grid_dim_y: p.grid_dim_y,
        grid_dim_z: p.grid_dim_z,
        block_dim_x: p.block_dim_x,
        block_dim_y: p.block_dim_y,
        block_dim_z: p.block_dim_z,
        shared_mem_bytes: p.shared_mem_bytes,
        kernel_params: p.kernel_params,
        extra: p.extra,
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    add_kernel_node_v2(pn, g, deps, n, &v2)
}

pub(crate) fn add_kernel_node_v2(
    pn: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_KERNEL_NODE_PARAMS_v2,
) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pn)?;
        nonnull(p)?;
        let p = unsafe { *p };
        let deps = unsafe { deps_vec(deps, n)? };
        let func = if p.func.is_null() { p.kern as u64 } else { p.func as u64 };
        let kp = KParams {
            func,
            grid: [p.grid_dim_x, p.grid_dim_y, p.grid_dim_z],
            block: [p.block_dim_x, p.block_dim_y, p.block_dim_z],
            shmem: p.shared_mem_bytes,
        };
        let mut sim = sim::lock();
        if !sim.funcs.contains_key(&func) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = add_node(&mut sim, g as u64, &deps, kp, p.kernel_params, p.extra, p.kern as u64, p.ctx as u64)?;
        unsafe { out(pn, h as CUgraphNode) }
    })
}

const NO_KERNEL: KParams = KParams { func: 0, grid: [0; 3], block: [0; 3], shmem: 0 };

/// Add an allocation node of `bytes` to `g`: address space now, device memory from the graph pool
/// at launch. `(node, address)`.
pub(crate) fn add_alloc_node(sim: &mut Sim, g: u64, deps: &[u64], bytes: u64) -> Result<(u64, u64), CUresult> {
    let (base, len) = crate::drivercost::mem_node_backing(bytes)?;
    let h = match add_node(sim, g, deps, NO_KERNEL, std::ptr::null_mut(), std::ptr::null_mut(), 0, 0) {
        Ok(h) => h,
        Err(e) => {
            crate::drivercost::mem_node_unback(base, len);
            return Err(e);
        }
    };
    let footprint = sim_state::round_up(bytes, sim_state::GRANULE);
    sim.nodes.get_mut(&h).unwrap().mem = Some((base, len, footprint));
    Ok((h, base))
}

/// A child-graph node (`cuGraphAddNode` with `CU_GRAPH_NODE_TYPE_GRAPH`): the child's nodes join
/// the parent. Moved (ownership `CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`, 12.9) the child graph
/// becomes the parent's, memory nodes included; cloned, a child with memory nodes is refused
/// (`CUDA_ERROR_NOT_SUPPORTED`, as the driver answers) and its kernel nodes are copied.
pub(crate) fn add_child_graph_node(
    pn: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    child: u64,
    moved: bool,
) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pn)?;
        let deps = unsafe { deps_vec(deps, n)? };
        let g = g as u64;
        let mut sim = sim::lock();
        let kids = sim.graphs.get(&child).ok_or(CUDA_ERROR_INVALID_VALUE)?.nodes.clone();
        let has_mem = kids.iter().any(|k| sim.nodes.get(k).is_some_and(|x| x.mem.is_some() || x.free.is_some()));
        if child == g || (has_mem && !moved) {
            return Err(if child == g { CUDA_ERROR_INVALID_VALUE } else { CUDA_ERROR_NOT_SUPPORTED });
        }
        let h = add_node(&mut sim, g, &deps, NO_KERNEL, std::ptr::null_mut(), std::ptr::null_mut(), 0, 0)?;
        if moved {
            sim.graphs.remove(&child);
            for k in &kids {
                if let Some(x) = sim.nodes.get_mut(k) {
                    x.graph = g;
                }
            }
            sim.graphs.get_mut(&g).unwrap().nodes.extend(kids);
        } else {
            for k in kids {
                let x = &sim.nodes[&k];
                let (p, kp, ex, kern, ctx) = (x.params, x.kernel_params, x.extra, x.kern, x.ctx);
                add_node(&mut sim, g, &[], p, kp, ex, kern, ctx)?;
            }
        }
        unsafe { out(pn, h as CUgraphNode) }
    })
}

/// The allocation node whose address is `addr`, if any.
fn alloc_node_of(sim: &Sim, addr: u64) -> Option<u64> {
    sim.nodes.iter().find(|(_, n)| n.mem.is_some_and(|m| m.0 == addr)).map(|(h, _)| *h)
}

/// Add a free node of graph allocation `addr` to `g` (an allocation node's address in any graph;
/// anything else is `CUDA_ERROR_INVALID_VALUE`, as the driver answers).
pub(crate) fn add_free_node(sim: &mut Sim, g: u64, deps: &[u64], addr: u64) -> Result<u64, CUresult> {
    if alloc_node_of(sim, addr).is_none() && !sim.held.graph_live.contains_key(&addr) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let gr = sim.graphs.get(&g).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if gr.nodes.iter().any(|n| sim.nodes.get(n).is_some_and(|n| n.free == Some(addr))) {
        return Err(CUDA_ERROR_INVALID_VALUE); // freed twice in one graph
    }
    let h = add_node(sim, g, deps, NO_KERNEL, std::ptr::null_mut(), std::ptr::null_mut(), 0, 0)?;
    sim.nodes.get_mut(&h).unwrap().free = Some(addr);
    Ok(h)
}

/// A live graph allocation was freed: drop its address space if its node is gone (graph destroyed).
pub(crate) fn drop_orphan_backing(sim: &mut Sim, addr: u64) {
    if alloc_node_of(sim, addr).is_none() {
        let len = sim.held.orphan_backing.remove(&addr).unwrap_or(0);
        crate::drivercost::mem_node_unback(addr, len);
    }
}

/// `cuGraphAddMemAllocNode`.
pub(crate) fn add_mem_alloc_node(
    pn: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pn)?;
        nonnull(p)?;
        let mut prm = unsafe { p.read_unaligned() };
        if prm.bytesize == 0 || prm.location.type_ != 1 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        crate::context::check_dev(prm.location.id)?;
        let deps = unsafe { deps_vec(deps, n)? };
        let (h, base) = add_alloc_node(&mut sim::lock(), g as u64, &deps, prm.bytesize as u64)?;
        prm.dptr = base;
        unsafe {
            p.write_unaligned(prm);
            out(pn, h as CUgraphNode)
        }
    })
}

/// `cuGraphAddMemFreeNode`.
pub(crate) fn add_mem_free_node(
    pn: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    dptr: CUdeviceptr,
) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pn)?;
        let deps = unsafe { deps_vec(deps, n)? };
        let h = add_free_node(&mut sim::lock(), g as u64, &deps, dptr)?;
        unsafe { out(pn, h as CUgraphNode) }
    })
}

pub(crate) fn graph_get_nodes(g: CUgraph, nodes: *mut CUgraphNode, num: *mut usize) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(num)?;
        let sim = sim::lock();
        let gr = sim.graphs.get(&(g as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let total = gr.nodes.len();
        unsafe {
            if nodes.is_null() {
                *num = total;
            } else {
                let cap = *num;
                for i in 0..cap {
                    *nodes.add(i) = gr.nodes.get(i).map(|&h| h as CUgraphNode).unwrap_or(std::ptr::null_mut());
                }
                if cap > total {
                    *num = total;
                }
            }
        }
        Ok(())
    })
}

pub(crate) fn node_get_type(n: CUgraphNode, t: *mut u32) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let nd = sim.nodes.get(&(n as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let ty = match (nd.mem, nd.free) {
            (Some(_), _) => CU_GRAPH_NODE_TYPE_MEM_ALLOC,
            (_, Some(_)) => CU_GRAPH_NODE_TYPE_MEM_FREE,
            _ => CU_GRAPH_NODE_TYPE_KERNEL,
        };
        unsafe { out(t, ty) }
    })
}

fn node_params(n: CUgraphNode) -> Result<CUDA_KERNEL_NODE_PARAMS_v2, CUresult> {
    check_init()?;
    let sim = sim::lock();
    let nd = sim.nodes.get(&(n as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let p = nd.params;
    Ok(CUDA_KERNEL_NODE_PARAMS_v2 {
        func: p.func as CUfunction,
        grid_dim_x: p.grid[0],
        grid_dim_y: p.grid[1],
        grid_dim_z: p.grid[2],
        block_dim_x: p.block[0],
        block_dim_y: p.block[1],
        block_dim_z: p.block[2],
        shared_mem_bytes: p.shmem,
        kernel_params: nd.kernel_params,
        extra: nd.extra,
        kern: nd.kern as CUkernel,
        ctx: nd.ctx as CUcontext,
    })
}

pub(crate) fn kernel_node_get_params_v2(n: CUgraphNode, out_p: *mut CUDA_KERNEL_NODE_PARAMS_v2) -> CUresult {
    cu_try!({
        let p = node_params(n)?;
        unsafe { out(out_p, p) }
    })
}

pub(crate) fn kernel_node_get_params_v1(n: CUgraphNode, out_p: *mut CUDA_KERNEL_NODE_PARAMS_v1) -> CUresult {
    cu_try!({
        let p = node_params(n)?;
        unsafe {
            out(
                out_p,
                CUDA_KERNEL_NODE_PARAMS_v1 {
                    func: p.func,
                    grid_dim_x: p.grid_dim_x,
                    grid_dim_y: p.grid_dim_y,
                    grid_dim_z: p.grid_dim_z,
                    block_dim_x: p.block_dim_x,
                    block_dim_y: p.block_dim_y,
                    block_dim_z: p.block_dim_z,
                    shared_mem_bytes: p.shared_mem_bytes,
                    kernel_params: p.kernel_params,
                    extra: p.extra,
                },
            )
        }
    })
}

pub(crate) fn instantiate(pe: *mut CUgraphExec, g: CUgraph, flags: u64) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pe)?;
        let mut sim = sim::lock();
        let gr = sim.graphs.get(&(g as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let nodes: Vec<&Node> = gr.nodes.iter().filter_map(|n| sim.nodes.get(n)).collect();
        // Memory and child-graph nodes launch no kernel of their own.
        let kernels = nodes
            .iter()
            .filter(|n| n.mem.is_none() && n.free.is_none() && n.params.func != 0)
            .map(|n| n.params)
            .collect();
        let mem_bytes: u64 = nodes.iter().filter_map(|n| n.mem).map(|m| m.2).sum();
        let freed: Vec<u64> = nodes.iter().filter_map(|n| n.free).collect();
        let allocated: Vec<u64> = nodes.iter().filter_map(|n| n.mem).map(|m| m.0).collect();
        let keeps = nodes.iter().filter_map(|n| n.mem).filter(|m| !freed.contains(&m.0)).map(|m| (m.0, m.2)).collect();
        let frees: Vec<u64> = freed.into_iter().filter(|f| !allocated.contains(f)).collect();
        let mem_dev = if mem_bytes > 0 || !frees.is_empty() { current(&mut sim)?.1 } else { 0 };
        let h = sim::new_handle();
        let auto_free = flags & 1 != 0;
        sim.execs.insert(h, Exec { kernels, mem_dev, mem_bytes, keeps, frees, auto_free });
        unsafe { out(pe, h as CUgraphExec) }
    })
}

pub(crate) fn instantiate_v1(
    pe: *mut CUgraphExec,
    g: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut u8,
    log_size: usize,
) -> CUresult {
    let r = instantiate(pe, g, 0);
    unsafe {
        if !err_node.is_null() {
            *err_node = std::ptr::null_mut();
        }
        if !log.is_null() && log_size > 0 {
            *log = 0;
        }
    }
    r
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS` (12.0).
#[repr(C)]
pub struct InstantiateParams {
    flags: u64,
    upload_stream: CUstream,
    err_node_out: CUgraphNode,
    result_out: u32,
}

/// `cuGraphInstantiateWithParams`: the flags of `params`; the upload flag is accepted (the sim
/// uploads nothing), the result written back.
pub(crate) fn instantiate_with_params(pe: *mut CUgraphExec, g: CUgraph, params: *mut InstantiateParams) -> CUresult {
    if params.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: `params` is the caller's CUDA_GRAPH_INSTANTIATE_PARAMS (the function's contract).
    let flags = unsafe { (*params).flags };
    let mut r = instantiate(pe, g, flags);
    if r == CUDA_SUCCESS && flags & 2 != 0 {
        // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
        r = graph_upload(unsafe { *pe }, std::ptr::null_mut(), false);
        if r != CUDA_SUCCESS {
            sim::lock().execs.remove(&(unsafe { *pe } as u64));
        }
    }
    unsafe {
        (*params).err_node_out = std::ptr::null_mut();
        // CUDA_GRAPH_INSTANTIATE_SUCCESS / CUDA_GRAPH_INSTANTIATE_ERROR
        (*params).result_out = u32::from(r != CUDA_SUCCESS);
    }
    r
}

/// `cuGraphUpload`: the executable's graph memory is backed in the graph pool (stream ordering
/// is not modelled).
pub(crate) fn graph_upload(e: CUgraphExec, h: CUstream, ptds: bool) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        crate::stream::resolve(&mut sim, h, ptds)?;
        let (dev, bytes) =
            sim.execs.get(&(e as u64)).map(|x| (x.mem_dev, x.mem_bytes)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if bytes > 0 {
            crate::drivercost::graph_pool_upload(&mut sim, dev, bytes)?;
        }
        Ok(())
    })
}

pub(crate) fn graph_launch(e: CUgraphExec, h: CUstream, ptds: bool) -> CUresult {
    let kernels = {
        if let Err(e) = check_init() {
            return e;
        }
        let mut sim = sim::lock();
        let (kernels, dev, bytes, keeps, frees) = match sim.execs.get(&(e as u64)) {
            Some(x) => (x.kernels.clone(), x.mem_dev, x.mem_bytes, x.keeps.clone(), x.frees.clone()),
            None => return CUDA_ERROR_INVALID_VALUE,
        };
        if sim.execs[&(e as u64)].auto_free {
            for k in &keeps {
                crate::drivercost::graph_free(&mut sim, k.0);
            }
        }
        if (bytes > 0 || !frees.is_empty())
            && let Err(e) = crate::drivercost::graph_pool_launch(&mut sim, dev, bytes, &keeps, &frees)
        {
            return e;
        }
        kernels
    };
    if kernels.is_empty() {
        return cu_try!({
            let mut sim = sim::lock();
            crate::stream::resolve(&mut sim, h, ptds)?;
            Ok(())
        });
    }
    launch_seq(&kernels, h, ptds, false)
}

pub(crate) fn exec_destroy(e: CUgraphExec) -> CUresult {
    cu_try!({
        check_init()?;
        sim::lock().execs.remove(&(e as u64)).map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
    })
}

pub(crate) fn graph_destroy(g: CUgraph) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        let gr = sim.graphs.remove(&(g as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        for n in gr.nodes {
            if let Some(Node { mem: Some((base, len, _)), .. }) = sim.nodes.remove(&n) {
                if sim.held.graph_live.contains_key(&base) {
                    sim.held.orphan_backing.insert(base, len); // valid until freed
                } else {
                    crate::drivercost::mem_node_unback(base, len);
                }
            }
        }
        Ok(())
    })
}
