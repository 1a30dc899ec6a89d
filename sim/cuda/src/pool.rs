//! Stream-ordered allocation pools. A pool reserves device memory in 2 MiB chunks (charged to the
//! process), serves blocks from it, takes freed blocks back, and trims its reservation down to its
//! release threshold (default 0) when the process synchronises a stream, event or context.

use crate::context::{check_dev, current};
use crate::memory::{AllocKind, alloc_tracked, charge, free_tracked, uncharge};
use crate::sim::{self, Sim};
use crate::stream;
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out, simlog};
use sim_state::{GRANULE, round_up};
use std::collections::HashMap;
use std::ffi::c_void;

pub(crate) struct Pool {
    pub dev: usize,
    pub reserved: u64,
    pub used: u64,
    pub reserved_high: u64,
    pub used_high: u64,
    pub threshold: u64,
    pub is_default: bool,
    /// Block address → bytes taken from the reservation.
    pub blocks: HashMap<u64, u64>,
    pub int_attrs: [i32; 3],
    /// `CUmemLocation` type and id, `CUmemAllocationType` (CU_MEMPOOL_ATTR_LOCATION_TYPE, _ID,
    /// ALLOCATION_TYPE).
    pub loc_type: u32,
    pub loc_id: i32,
    pub alloc_type: u32,
    /// Pinned host memory: its reservation is not device memory and is charged to no device.
    pub host: bool,
}

impl Pool {
    fn new(dev: usize, is_default: bool) -> Pool {
        Pool {
            dev,
            reserved: 0,
            used: 0,
            reserved_high: 0,
            used_high: 0,
            threshold: 0,
            is_default,
            blocks: HashMap::new(),
            int_attrs: [1, 1, 1],
            loc_type: CU_MEM_LOCATION_TYPE_DEVICE,
            loc_id: dev as i32,
            alloc_type: CU_MEM_ALLOCATION_TYPE_PINNED,
            host: false,
        }
    }

    /// A pool at location (`loc_type`, `loc_id`) of `alloc_type`; `dev` is the physical device
    /// its reservation is charged to (ignored for pinned host pools).
    pub(crate) fn at(dev: usize, loc_type: u32, loc_id: i32, alloc_type: u32, is_default: bool) -> Pool {
        let host = alloc_type == CU_MEM_ALLOCATION_TYPE_PINNED && matches!(loc_type, 2..=4);
        Pool { loc_type, loc_id, alloc_type, host, ..Pool::new(dev, is_default) }
    }
}

pub(crate) fn default_pool(sim: &mut Sim, dev: usize) -> u64 {
    if let Some(&p) = sim.default_pool.get(&dev) {
        return p;
    }
    let h = sim::new_handle();
    sim.pools.insert(h, Pool::new(dev, true));
    sim.default_pool.insert(dev, h);
    h
}

pub(crate) fn current_pool(sim: &mut Sim, dev: usize) -> u64 {
    match sim.current_pool.get(&dev) {
        Some(&p) if sim.pools.contains_key(&p) => p,
        _ => default_pool(sim, dev),
    }
}

/// Shrink the reservation of `pool` to max(used, keep), in 2 MiB chunks.
fn trim(sim: &mut Sim, pool: u64, keep: u64) {
    let Some(p) = sim.pools.get_mut(&pool) else { return };
    let target = round_up(p.used, GRANULE).max(round_up(keep, GRANULE));
    if p.reserved > target {
        let give = p.reserved - target;
        p.reserved = target;
        let (dev, host) = (p.dev, p.host);
        if !host {
            uncharge(dev, give);
        }
        simlog!("pool {:#x} trimmed by {} bytes", pool, give);
    }
}

/// Trim every pool to its release threshold (at synchronisation points).
pub(crate) fn trim_all(sim: &mut Sim) {
    let ps: Vec<(u64, u64)> = sim.pools.iter().map(|(h, p)| (*h, p.threshold)).collect();
    for (h, t) in ps {
        trim(sim, h, t);
    }
}

/// The last context on `dev` went away: drop all pool reservations there.
pub(crate) fn release_device_pools(sim: &mut Sim, dev: usize) {
    let ps: Vec<u64> = sim.pools.iter().filter(|(_, p)| p.dev == dev && !p.host).map(|(h, _)| *h).collect();
    for h in ps {
        let blocks: Vec<u64> = sim.pools[&h].blocks.keys().copied().collect();
        for b in blocks {
            free_block(sim, h, b);
        }
        trim(sim, h, 0);
    }
}

fn alloc_from(sim: &mut Sim, pool: u64, size: u64, ctx: u64) -> Result<u64, CUresult> {
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = sim.pools.get(&pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let (dev, host) = (p.dev, p.host);
    let b = round_up(size, 512);
    let need = p.used + b;
    if need > p.reserved {
        let grow = round_up(need, GRANULE) - p.reserved;
        if !host {
            charge(dev, grow)?;
        }
        let p = sim.pools.get_mut(&pool).unwrap();
        p.reserved += grow;
        p.reserved_high = p.reserved_high.max(p.reserved);
    }
    let ptr = match alloc_tracked(sim, ctx, dev, size, 0, AllocKind::Pool(pool)) {
        Ok(x) => x,
        Err(e) => {
            trim(sim, pool, sim.pools[&pool].threshold);
            return Err(e);
        }
    };
    let p = sim.pools.get_mut(&pool).unwrap();
    p.used += b;
    p.used_high = p.used_high.max(p.used);
    p.blocks.insert(ptr, b);
    Ok(ptr)
}

/// Return a block to its pool (the reservation stays until the next trim).
pub(crate) fn free_block(sim: &mut Sim, pool: u64, ptr: u64) {
    free_tracked(sim, ptr);
    if let Some(p) = sim.pools.get_mut(&pool)
        && let Some(b) = p.blocks.remove(&ptr)
    {
        p.used -= b;
    }
}

pub(crate) fn mem_alloc_async(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: Option<CUmemoryPool>,
    h: CUstream,
    ptds: bool,
) -> CUresult {
    cu_try!({
        nonnull(dptr)?;
        let mut sim = sim::lock();
        let (ctx, _) = current(&mut sim)?;
        let k = stream::resolve(&mut sim, h, ptds)?;
        let dev = sim.streams[&k].dev;
        let pool = match pool {
            Some(p) => {
                if !sim.pools.contains_key(&(p as u64)) {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                p as u64
            }
            None => current_pool(&mut sim, dev),
        };
        if let Some(c) = sim.streams[&k].capture.as_ref() {
            // Captured: an allocation node of the graph, nothing allocated until its launch (the
            // memory then comes from the graph pool, not from `pool`).
            if size == 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let (g, deps) = (c.graph, c.deps.clone());
            let (node, ptr) = crate::graph::add_alloc_node(&mut sim, g, &deps, size as u64)?;
            sim.streams.get_mut(&k).unwrap().capture.as_mut().unwrap().deps = vec![node];
            simlog!("cuMemAllocAsync captured: {} bytes at {:#x} (node {:#x})", size, ptr, node);
            return unsafe { out(dptr, ptr) };
        }
        let ptr = alloc_from(&mut sim, pool, size as u64, ctx)?;
        stream::enqueue(&mut sim, k, 0);
        unsafe { out(dptr, ptr) }
    })
}

pub(crate) fn mem_free_async(ptr: CUdeviceptr, h: CUstream, ptds: bool) -> CUresult {
    cu_try!({
        let mut sim = sim::lock();
        let k = stream::resolve(&mut sim, h, ptds)?;
        if let Some(c) = sim.streams[&k].capture.as_ref() {
            // Captured: a free node of a graph allocation; nothing is freed now.
            let (g, deps) = (c.graph, c.deps.clone());
            let node = crate::graph::add_free_node(&mut sim, g, &deps, ptr)?;
            sim.streams.get_mut(&k).unwrap().capture.as_mut().unwrap().deps = vec![node];
            return Ok(());
        }
        if crate::drivercost::graph_free(&mut sim, ptr) {
            return Ok(()); // back to the graph pool
        }
        match sim.allocs.get(&ptr).map(|a| a.kind) {
            Some(AllocKind::Pool(p)) => free_block(&mut sim, p, ptr),
            Some(AllocKind::Device | AllocKind::Managed) => {
                free_tracked(&mut sim, ptr);
            }
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    })
}

pub(crate) fn device_get_default_mem_pool(pp: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        nonnull(pp)?;
        let h = default_pool(&mut sim::lock(), d);
        unsafe { out(pp, h as CUmemoryPool) }
    })
}

pub(crate) fn device_get_mem_pool(pp: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        nonnull(pp)?;
        let h = current_pool(&mut sim::lock(), d);
        unsafe { out(pp, h as CUmemoryPool) }
    })
}

pub(crate) fn device_set_mem_pool(dev: CUdevice, pool: CUmemoryPool) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        let mut sim = sim::lock();
        // A pinned host pool is accepted too: cuMemAllocAsync then allocates host memory.
        match sim.pools.get(&(pool as u64)) {
            Some(p) if p.dev == d || p.host => {
                sim.current_pool.insert(d, pool as u64);
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

pub(crate) fn pool_create(pp: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pp)?;
        nonnull(props)?;
        let pr = unsafe { *props };
        let d = crate::pool13::pool_device(pr.location.type_, pr.location.id, pr.alloc_type)?;
        let mut sim = sim::lock();
        let h = sim::new_handle();
        sim.pools.insert(
            h,
            Pool::at(
                d,
                pr.location.type_,
                crate::pool13::normalised_id(pr.location.type_, pr.location.id),
                pr.alloc_type,
                false,
            ),
        );
        unsafe { out(pp, h as CUmemoryPool) }
    })
}

pub(crate) fn pool_destroy(pool: CUmemoryPool) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        let h = pool as u64;
        match sim.pools.get(&h) {
            Some(p) if !p.is_default => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        let blocks: Vec<u64> = sim.pools[&h].blocks.keys().copied().collect();
        for b in blocks {
            free_block(&mut sim, h, b);
        }
        trim(&mut sim, h, 0);
        sim.pools.remove(&h);
        sim.current_pool.retain(|_, p| *p != h);
        Ok(())
    })
}

pub(crate) fn pool_trim_to(pool: CUmemoryPool, keep: usize) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        if !sim.pools.contains_key(&(pool as u64)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        trim(&mut sim, pool as u64, keep as u64);
        Ok(())
    })
}

pub(crate) fn pool_get_attribute(pool: CUmemoryPool, attr: i32, value: *mut c_void) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(value)?;
        let sim = sim::lock();
        let p = sim.pools.get(&(pool as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        unsafe {
            match attr {
                1..=3 => out(value as *mut i32, p.int_attrs[attr as usize - 1]),
                CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => out(value as *mut u64, p.threshold),
                CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => out(value as *mut u64, p.reserved),
                CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => out(value as *mut u64, p.reserved_high),
                CU_MEMPOOL_ATTR_USED_MEM_CURRENT => out(value as *mut u64, p.used),
                CU_MEMPOOL_ATTR_USED_MEM_HIGH => out(value as *mut u64, p.used_high),
                crate::pool13::ATTR_ALLOCATION_TYPE => out(value as *mut u32, p.alloc_type),
                crate::pool13::ATTR_LOCATION_ID => out(value as *mut i32, p.loc_id),
                crate::pool13::ATTR_LOCATION_TYPE => out(value as *mut u32, p.loc_type),
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
    })
}

pub(crate) fn pool_set_attribute(pool: CUmemoryPool, attr: i32, value: *mut c_void) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(value)?;
        let mut sim = sim::lock();
        let p = sim.pools.get_mut(&(pool as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        unsafe {
            match attr {
                1..=3 => p.int_attrs[attr as usize - 1] = *(value as *const i32),
                CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.threshold = *(value as *const u64),
                CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH | CU_MEMPOOL_ATTR_USED_MEM_HIGH => {
                    if *(value as *const u64) != 0 {
                        return Err(CUDA_ERROR_INVALID_VALUE);
                    }
                    if attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH {
                        p.reserved_high = p.reserved;
                    } else {
                        p.used_high = p.used;
                    }
                }
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
        Ok(())
    })
}
