//! Pools by location (CUDA 13.0): `cuMemGetDefaultMemPool`, `cuMemGetMemPool`, `cuMemSetMemPool`
//! for device, locality-domain, host, host-NUMA and managed locations, and the location checks of
//! `cuMemPoolCreate`. A device location with pinned allocations is the device's own default /
//! current pool (`pool.rs`); every other (location, allocation type) has its own default pool,
//! created on first use, and its own current pool.

use crate::context::check_dev;
use crate::pool::{Pool, current_pool, default_pool};
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// `CU_MEMPOOL_ATTR_ALLOCATION_TYPE`, `_LOCATION_ID`, `_LOCATION_TYPE` (13.0).
pub(crate) const ATTR_ALLOCATION_TYPE: i32 = 9;
pub(crate) const ATTR_LOCATION_ID: i32 = 11;
pub(crate) const ATTR_LOCATION_TYPE: i32 = 12;

const LOC_NONE: u32 = 0;
const LOC_DEVICE: u32 = 1;
const LOC_HOST: u32 = 2;
const LOC_HOST_NUMA: u32 = 3;
const LOC_HOST_NUMA_CURRENT: u32 = 4;
const LOC_DEVICE_LOCALITY_DOMAIN: u32 = 6;
const MANAGED: u32 = 2;

/// (location type, normalised id, allocation type).
type Key = (u32, i32, u32);

#[derive(Default)]
struct Book {
    defaults: HashMap<Key, u64>,
    current: HashMap<Key, u64>,
}

/// Taken only while the sim tables are locked (one lock order: tables, then this).
fn book() -> std::sync::MutexGuard<'static, Book> {
    static B: OnceLock<Mutex<Book>> = OnceLock::new();
    B.get_or_init(|| Mutex::new(Book::default())).lock().unwrap_or_else(|e| e.into_inner())
}

/// The physical device a pool at this location charges (any visible one for host and managed
/// pools without a device); `CUDA_ERROR_INVALID_VALUE` for a combination the driver refuses.
pub(crate) fn pool_device(loc_type: u32, id: i32, alloc_type: u32) -> Result<usize, CUresult> {
    check_init()?;
    let bad = |_| CUDA_ERROR_INVALID_VALUE;
    let first = || crate::visible().first().copied().ok_or(CUDA_ERROR_INVALID_VALUE);
    match (alloc_type, loc_type) {
        (CU_MEM_ALLOCATION_TYPE_PINNED | MANAGED, LOC_DEVICE) => check_dev(id).map_err(bad),
        (CU_MEM_ALLOCATION_TYPE_PINNED, LOC_DEVICE_LOCALITY_DOMAIN) => check_dev(id & 0xFF).map_err(bad),
        (CU_MEM_ALLOCATION_TYPE_PINNED | MANAGED, LOC_HOST | LOC_HOST_NUMA_CURRENT) => first(),
        (CU_MEM_ALLOCATION_TYPE_PINNED | MANAGED, LOC_HOST_NUMA) if id >= 0 => first(),
        (MANAGED, LOC_NONE) => first(),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// The id of a location as the pool keeps it (ignored kinds read as 0).
pub(crate) fn normalised_id(loc_type: u32, id: i32) -> i32 {
    match loc_type {
        LOC_DEVICE | LOC_HOST_NUMA | LOC_DEVICE_LOCALITY_DOMAIN => id,
        _ => 0,
    }
}

fn key(loc: &CUmemLocation, alloc_type: u32) -> Key {
    (loc.type_, normalised_id(loc.type_, loc.id), alloc_type)
}

/// The device's own pool table answers for pinned device locations.
fn device_location(loc: &CUmemLocation, alloc_type: u32) -> Result<Option<usize>, CUresult> {
    if loc.type_ == LOC_DEVICE && alloc_type == CU_MEM_ALLOCATION_TYPE_PINNED {
        return check_dev(loc.id).map(Some);
    }
    Ok(None)
}

fn default_of(sim: &mut Sim, loc: &CUmemLocation, alloc_type: u32) -> Result<u64, CUresult> {
    if let Some(d) = device_location(loc, alloc_type)? {
        return Ok(default_pool(sim, d));
    }
    let dev = pool_device(loc.type_, loc.id, alloc_type)?;
    let k = key(loc, alloc_type);
    if let Some(&p) = book().defaults.get(&k) {
        return Ok(p);
    }
    let h = sim::new_handle();
    sim.pools.insert(h, Pool::at(dev, loc.type_, k.1, alloc_type, true));
    book().defaults.insert(k, h);
    Ok(h)
}

pub(crate) fn mem_get_default_mem_pool(pp: *mut CUmemoryPool, loc: *const CUmemLocation, ty: u32) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pp)?;
        nonnull(loc)?;
        let loc = unsafe { *loc };
        let h = default_of(&mut sim::lock(), &loc, ty)?;
        unsafe { out(pp, h as CUmemoryPool) }
    })
}

pub(crate) fn mem_get_mem_pool(pp: *mut CUmemoryPool, loc: *const CUmemLocation, ty: u32) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pp)?;
        nonnull(loc)?;
        let loc = unsafe { *loc };
        let mut sim = sim::lock();
        let h = match device_location(&loc, ty)? {
            Some(d) => current_pool(&mut sim, d),
            None => {
                let cur = book().current.get(&key(&loc, ty)).copied().filter(|p| sim.pools.contains_key(p));
                match cur {
                    Some(p) => p,
                    None => default_of(&mut sim, &loc, ty)?,
                }
            }
        };
        unsafe { out(pp, h as CUmemoryPool) }
    })
}

pub(crate) fn mem_set_mem_pool(loc: *const CUmemLocation, ty: u32, pool: CUmemoryPool) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(loc)?;
        let loc = unsafe { *loc };
        if let Some(d) = device_location(&loc, ty)? {
            // The equivalent of cuDeviceSetMemPool.
            let ordinal = crate::ordinal_of(d);
            let r = crate::pool::device_set_mem_pool(ordinal, pool);
            return if r == CUDA_SUCCESS { Ok(()) } else { Err(r) };
        }
        let sim = sim::lock();
        let k = key(&loc, ty);
        match sim.pools.get(&(pool as u64)) {
            Some(p) if (p.loc_type, p.loc_id, p.alloc_type) == k => {
                book().current.insert(k, pool as u64);
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}
