//! Where a stream-ordered pool's memory lives, so that only device memory is counted: pools at a
//! device or device-locality-domain location count, pinned host / host-NUMA pools do not, managed
//! pools count as managed memory does (`vgpu_core::locations`).
//!
//! A pool's place is remembered from `cuMemPoolCreate`, else asked of the driver once
//! (`CU_MEMPOOL_ATTR_LOCATION_TYPE` / `_ALLOCATION_TYPE`, CUDA 13; a driver that does not know
//! them has device pools only) and kept until `cuMemPoolDestroy`. `cuMemAllocAsync` allocates
//! from the current pool of the stream's device: until a pool is made current (both ways to
//! do so, `cuDeviceSetMemPool` and `cuMemSetMemPool`, are hooked) that is the device's default
//! pool, which is device memory, and nothing is asked.

use crate::driver;
use crate::ffi::*;
use cuda_types::pfn;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use vgpu_core::locations;
use vgpu_core::sync::Mutex;

/// Pools whose place is known: (pool, counts against the device limit).
static KNOWN: Mutex<Vec<(u64, bool)>> = Mutex::new(Vec::new());
/// A device's current pool may be other than its default pool.
static CURRENT_MAY_DIFFER: AtomicBool = AtomicBool::new(false);

fn known(pool: u64) -> Option<bool> {
    KNOWN.lock().iter().find(|e| e.0 == pool).map(|e| e.1)
}

fn remember_counts(pool: u64, counts: bool) {
    let mut k = KNOWN.lock();
    match k.iter_mut().find(|e| e.0 == pool) {
        Some(e) => e.1 = counts,
        None => k.push((pool, counts)),
    }
}

/// `cuMemPoolCreate` made `pool` at location type `loc_type` for `alloc_type` allocations.
pub fn created(pool: CUmemoryPool, loc_type: c_int, alloc_type: c_int) {
    let counts = locations::pool_counts(Some(loc_type), Some(alloc_type));
    if !counts {
        CURRENT_MAY_DIFFER.store(true, Ordering::Release);
    }
    remember_counts(pool as u64, counts);
}

/// `pool` is destroyed: its handle may come back for another pool.
pub fn destroyed(pool: CUmemoryPool) {
    KNOWN.lock().retain(|e| e.0 != pool as u64);
}

fn int_attr(pool: CUmemoryPool, attr: i32) -> Option<i32> {
    let f = driver::cuMemPoolGetAttribute()?;
    let mut v: c_int = 0;
    // SAFETY: both attributes are `int`-valued (cuda.h 13); `v` outlives the call.
    (unsafe { f(pool, attr as _, &mut v as *mut c_int as *mut c_void) } == CUDA_SUCCESS).then_some(v)
}

/// Do allocations from `pool` count against the device limit?
pub fn counts(pool: CUmemoryPool) -> bool {
    if pool.is_null() {
        return true;
    }
    if let Some(c) = known(pool as u64) {
        return c;
    }
    let loc = int_attr(pool, locations::POOL_ATTR_LOCATION_TYPE);
    let alloc = int_attr(pool, locations::POOL_ATTR_ALLOCATION_TYPE);
    let c = locations::pool_counts(loc, alloc);
    if !c {
        crate::debug!("pool {pool:p} holds host memory (location type {loc:?}): its allocations are not counted");
    }
    remember_counts(pool as u64, c);
    c
}

/// Do `cuMemAllocAsync` allocations on the current device (`ordinal`, asked only when a current
/// pool may be other than the default) count?
pub fn current_counts(ordinal: impl FnOnce() -> Option<CUdevice>) -> bool {
    if !CURRENT_MAY_DIFFER.load(Ordering::Acquire) {
        return true;
    }
    let Some(o) = ordinal() else { return true };
    let Some(get) = driver::cuDeviceGetMemPool() else { return true };
    let mut p: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer for the call's duration.
    if unsafe { get(&mut p, o) } != CUDA_SUCCESS {
        return true;
    }
    counts(p)
}

pub unsafe fn device_set_mem_pool(real: pfn::cuDeviceSetMemPool, dev: CUdevice, pool: CUmemoryPool) -> CUresult {
    // Before the call: an allocation racing with it must already look the current pool up.
    CURRENT_MAY_DIFFER.store(true, Ordering::Release);
    unsafe { real(dev, pool) }
}

/// `cuMemSetMemPool` (13.0): the current pool of a location for one allocation type; for a
/// device location, the pool `cuMemAllocAsync` allocates from.
pub unsafe fn mem_set_mem_pool(
    real: pfn::cuMemSetMemPool,
    location: *mut CUmemLocation,
    alloc_type: CUmemAllocationType,
    pool: CUmemoryPool,
) -> CUresult {
    // Before the call, whatever the location: an allocation racing with it must already look the
    // current pool up.
    CURRENT_MAY_DIFFER.store(true, Ordering::Release);
    unsafe { real(location, alloc_type, pool) }
}

/// In a forked child: no pool of the parent exists there.
pub fn fork_child() {
    // SAFETY: called from the atfork child handler (one thread).
    unsafe { KNOWN.force_unlock_in_child() };
    std::mem::forget(std::mem::take(&mut *KNOWN.lock()));
}
