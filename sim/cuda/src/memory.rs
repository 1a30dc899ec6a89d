//! Device allocations (backed lazily by `mmap(MAP_NORESERVE)`, charged at 2 MiB granularity against
//! the shared device), host allocations, pointer queries, copies and memsets.

use crate::context::current;
use crate::sim::{self, Sim};
use crate::stream;
use crate::types::*;
use crate::{check_init, cu_try, my_slot, nonnull, out, simlog, state};
use sim_state::{GRANULE, round_up};
use std::ffi::c_void;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum AllocKind {
    Device,
    Managed,
    /// Block of a memory pool (charged by the pool).
    Pool(u64),
    /// Mapping of a VMM physical allocation (charged by the handle).
    Vmm(u64),
    /// A module global (not charged).
    Global(u64),
}

pub(crate) struct Alloc {
    pub size: u64,
    /// Length of the owned backing mapping (0: not owned, e.g. a VMM mapping).
    pub map_len: u64,
    pub charged: u64,
    pub dev: usize,
    pub ctx: u64,
    pub kind: AllocKind,
}

pub(crate) struct HostRange {
    pub size: u64,
    /// Allocated by us (cuMemHostAlloc / cuMemAllocHost) rather than registered.
    pub owned: bool,
    #[allow(dead_code)]
    pub flags: u32,
}

/// Reserve `len` bytes of address space backed on demand.
pub(crate) fn map_backing(len: u64) -> Option<u64> {
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED { None } else { Some(p as u64) }
}

pub(crate) fn unmap_backing(base: u64, len: u64) {
    if len > 0 {
        unsafe { libc::munmap(base as *mut c_void, len as usize) };
    }
}

/// The allocation containing `ptr`.
pub(crate) fn find(sim: &Sim, ptr: u64) -> Option<(u64, &Alloc)> {
    let (&base, a) = sim.allocs.range(..=ptr).next_back()?;
    if ptr < base + a.size.max(1) { Some((base, a)) } else { None }
}

/// `[ptr, ptr+len)` lies inside one device allocation.
pub(crate) fn check_range(sim: &Sim, ptr: u64, len: u64) -> Result<(), CUresult> {
    if ptr == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match find(sim, ptr) {
        Some((base, a)) if ptr.checked_add(len).is_some_and(|e| e <= base + a.size) => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Reclaims of dead processes before a refusal under `VGPU_SIM_FAST_OOM` (see `Knobs`).
static LAST_OOM_RECLAIM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Charge device memory for this process (reclaiming dead processes once if full).
pub(crate) fn charge(dev: usize, bytes: u64) -> Result<(), CUresult> {
    if crate::cgroup::over_limit(dev, bytes) {
        simlog!("out of memory on device {}: the cgroup's hard limit (VGPU_SIM_CGROUP_LIMIT_MIB)", dev);
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    if bytes == 0 {
        return Ok(());
    }
    let st = state();
    let charged = if crate::knobs().fast_oom {
        st.try_charge(my_slot(), dev, bytes)
            || (st.reclaim_dead_rate_limited(&LAST_OOM_RECLAIM, 100_000_000) > 0
                && st.try_charge(my_slot(), dev, bytes))
    } else {
        st.charge(my_slot(), dev, bytes)
    };
    if charged {
        Ok(())
    } else {
        simlog!(
            "out of memory on device {}: {} bytes requested, {} of {} used",
            dev,
            bytes,
            state().device_used(dev),
            state().device_total(dev)
        );
        Err(CUDA_ERROR_OUT_OF_MEMORY)
    }
}

pub(crate) fn uncharge(dev: usize, bytes: u64) {
    if bytes > 0 {
        state().uncharge(my_slot(), dev, bytes);
    }
}

/// Allocate, back and track `size` bytes; charges `charge_bytes`.
pub(crate) fn alloc_tracked(
    sim: &mut Sim,
    ctx: u64,
    dev: usize,
    size: u64,
    charge_bytes: u64,
    kind: AllocKind,
) -> Result<u64, CUresult> {
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    charge(dev, charge_bytes)?;
    let map_len = round_up(size, 4096);
    let Some(base) = map_backing(map_len) else {
        uncharge(dev, charge_bytes);
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    };
    sim.allocs.insert(base, Alloc { size, map_len, charged: charge_bytes, dev, ctx, kind });
    Ok(base)
}

/// Remove the allocation at `base`: unmap its backing, return its charge.
pub(crate) fn free_tracked(sim: &mut Sim, base: u64) -> Option<Alloc> {
    let a = sim.allocs.remove(&base)?;
    unmap_backing(base, a.map_len);
    uncharge(a.dev, a.charged);
    Some(a)
}

pub(crate) fn free_ctx_allocs(sim: &mut Sim, ctx: u64) {
    let bases: Vec<u64> = sim
        .allocs
        .iter()
        .filter(|(_, a)| a.ctx == ctx && matches!(a.kind, AllocKind::Device | AllocKind::Managed | AllocKind::Pool(_)))
        .map(|(b, _)| *b)
        .collect();
    for b in bases {
        if let Some(AllocKind::Pool(p)) = sim.allocs.get(&b).map(|a| a.kind) {
            crate::pool::free_block(sim, p, b);
        } else {
            free_tracked(sim, b);
        }
    }
}

// ---- allocation entry points ---------------------------------------------------------------

pub(crate) fn mem_get_info(free: *mut usize, total: *mut usize) -> CUresult {
    cu_try!({
        nonnull(free)?;
        nonnull(total)?;
        let dev = current(&mut sim::lock())?.1;
        let st = state();
        // Reaped processes at once, zombies and recycled pids within 100 ms: no /proc read per
        // call (sim_state::SimState::reclaim_dead_rate_limited, sim/README.md "Components").
        static LAST_FULL_RECLAIM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        st.reclaim_dead_rate_limited(&LAST_FULL_RECLAIM, 100_000_000);
        let t = st.device_total(dev);
        unsafe {
            out(free, t.saturating_sub(st.device_used(dev)) as usize)?;
            out(total, t as usize)
        }
    })
}

fn alloc_kind(dptr: *mut CUdeviceptr, size: usize, kind: AllocKind) -> CUresult {
    cu_try!({
        nonnull(dptr)?;
        let mut sim = sim::lock();
        let (ctx, dev) = current(&mut sim)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = alloc_tracked(&mut sim, ctx, dev, size as u64, round_up(size as u64, GRANULE), kind)?;
        simlog!("alloc {:#x} {} bytes on device {}", p, size, dev);
        unsafe { out(dptr, p) }
    })
}

pub(crate) fn mem_alloc(dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    let delay = crate::knobs().alloc_delay;
    if !delay.is_zero() {
        std::thread::sleep(delay); // outside the simulator's lock: the device keeps answering
    }
    alloc_kind(dptr, size, AllocKind::Device)
}

pub(crate) fn mem_alloc_managed(dptr: *mut CUdeviceptr, size: usize, flags: u32) -> CUresult {
    if flags != 1 && flags != 2 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    alloc_kind(dptr, size, AllocKind::Managed)
}

pub(crate) fn mem_alloc_pitch(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: u32,
) -> CUresult {
    if pitch.is_null() || !matches!(elem, 4 | 8 | 16) || width == 0 || height == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let p = round_up(width as u64, 512);
    let Some(bytes) = p.checked_mul(height as u64) else { return CUDA_ERROR_INVALID_VALUE };
    let r = alloc_kind(dptr, bytes as usize, AllocKind::Device);
    if r == CUDA_SUCCESS {
        unsafe { *pitch = p as usize };
    }
    r
}

pub(crate) fn mem_free(dptr: CUdeviceptr) -> CUresult {
    cu_try!({
        check_init()?;
        if dptr == 0 {
            return Ok(()); // cuMemFree(0) is a no-op
        }
        let mut sim = sim::lock();
        if crate::drivercost::graph_free(&mut sim, dptr) {
            return Ok(()); // a graph allocation: back to the graph pool
        }
        match sim.allocs.get(&dptr).map(|a| a.kind) {
            Some(AllocKind::Device | AllocKind::Managed) => {
                free_tracked(&mut sim, dptr);
                simlog!("free {:#x}", dptr);
                Ok(())
            }
            Some(AllocKind::Pool(p)) => {
                crate::pool::free_block(&mut sim, p, dptr);
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

pub(crate) fn host_alloc(pp: *mut *mut c_void, size: usize, flags: u32) -> CUresult {
    cu_try!({
        nonnull(pp)?;
        let mut sim = sim::lock();
        current(&mut sim)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        if unsafe { libc::posix_memalign(&mut p, 4096, size) } != 0 {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        sim.host.insert(p as u64, HostRange { size: size as u64, owned: true, flags });
        unsafe { out(pp, p) }
    })
}

pub(crate) fn free_host(p: *mut c_void) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        match sim.host.get(&(p as u64)) {
            Some(h) if h.owned => {
                sim.host.remove(&(p as u64));
                unsafe { libc::free(p) };
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

pub(crate) fn host_register(p: *mut c_void, size: usize, flags: u32) -> CUresult {
    cu_try!({
        let mut sim = sim::lock();
        current(&mut sim)?;
        if p.is_null() || size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if host_find(&sim, p as u64).is_some() {
            return Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        }
        sim.host.insert(p as u64, HostRange { size: size as u64, owned: false, flags });
        Ok(())
    })
}

pub(crate) fn host_unregister(p: *mut c_void) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        match sim.host.get(&(p as u64)) {
            Some(h) if !h.owned => {
                sim.host.remove(&(p as u64));
                Ok(())
            }
            _ => Err(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED),
        }
    })
}

pub(crate) fn host_find(sim: &Sim, p: u64) -> Option<(u64, &HostRange)> {
    let (&b, h) = sim.host.range(..=p).next_back()?;
    if p < b + h.size { Some((b, h)) } else { None }
}

pub(crate) fn host_get_device_pointer(pd: *mut CUdeviceptr, p: *mut c_void, flags: u32) -> CUresult {
    cu_try!({
        check_init()?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let sim = sim::lock();
        host_find(&sim, p as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        unsafe { out(pd, p as u64) }
    })
}

pub(crate) fn get_address_range(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let (b, a) = find(&sim, dptr).ok_or(CUDA_ERROR_NOT_FOUND)?;
        unsafe {
            if !pbase.is_null() {
                *pbase = b;
            }
            if !psize.is_null() {
                *psize = a.size as usize;
            }
        }
        Ok(())
    })
}

// ---- pointer attributes --------------------------------------------------------------------

/// Write attribute `attr` of `ptr` to `data`; Err(INVALID_VALUE) for unknown pointers/attributes.
unsafe fn pointer_attr(sim: &Sim, data: *mut c_void, attr: i32, ptr: u64) -> Result<(), CUresult> {
    nonnull(data)?;
    unsafe {
        if let Some((base, a)) = find(sim, ptr) {
            let managed = a.kind == AllocKind::Managed;
            let pool = if let AllocKind::Pool(p) = a.kind { p } else { 0 };
            match attr {
                CU_POINTER_ATTRIBUTE_CONTEXT => out(data as *mut u64, a.ctx),
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE => out(data as *mut u32, CU_MEMORYTYPE_DEVICE),
                CU_POINTER_ATTRIBUTE_DEVICE_POINTER => out(data as *mut u64, ptr),
                CU_POINTER_ATTRIBUTE_HOST_POINTER if managed => out(data as *mut u64, ptr),
                CU_POINTER_ATTRIBUTE_SYNC_MEMOPS => out(data as *mut u32, 1),
                CU_POINTER_ATTRIBUTE_BUFFER_ID | CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID => out(data as *mut u64, base),
                CU_POINTER_ATTRIBUTE_IS_MANAGED => out(data as *mut u32, managed as u32),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => out(data as *mut i32, crate::ordinal_of(a.dev)),
                CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE => {
                    out(data as *mut u32, (a.kind == AllocKind::Device) as u32)
                }
                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR | CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR => {
                    out(data as *mut u64, base)
                }
                CU_POINTER_ATTRIBUTE_RANGE_SIZE | CU_POINTER_ATTRIBUTE_MAPPING_SIZE => out(data as *mut u64, a.size),
                CU_POINTER_ATTRIBUTE_MAPPED => out(data as *mut u32, 1),
                CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES => out(data as *mut u64, 0),
                CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE => out(data as *mut u32, 0),
                CU_POINTER_ATTRIBUTE_ACCESS_FLAGS => out(data as *mut u32, 3),
                CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE => out(data as *mut u64, pool),
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        } else if let Some((base, h)) = host_find(sim, ptr) {
            match attr {
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE => out(data as *mut u32, CU_MEMORYTYPE_HOST),
                CU_POINTER_ATTRIBUTE_DEVICE_POINTER | CU_POINTER_ATTRIBUTE_HOST_POINTER => out(data as *mut u64, ptr),
                CU_POINTER_ATTRIBUTE_CONTEXT => out(data as *mut u64, crate::context::top().unwrap_or(0)),
                CU_POINTER_ATTRIBUTE_IS_MANAGED => out(data as *mut u32, 0),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => out(data as *mut i32, 0),
                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => out(data as *mut u64, base),
                CU_POINTER_ATTRIBUTE_RANGE_SIZE => out(data as *mut u64, h.size),
                CU_POINTER_ATTRIBUTE_MAPPED => out(data as *mut u32, 1),
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        } else {
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
}

pub(crate) fn pointer_get_attribute(data: *mut c_void, attr: i32, ptr: CUdeviceptr) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        unsafe { pointer_attr(&sim, data, attr, ptr) }
    })
}

pub(crate) fn pointer_get_attributes(n: u32, attrs: *mut i32, data: *mut *mut c_void, ptr: CUdeviceptr) -> CUresult {
    cu_try!({
        check_init()?;
        if n > 0 {
            nonnull(attrs)?;
            nonnull(data)?;
        }
        let sim = sim::lock();
        for i in 0..n as usize {
            let (a, d) = unsafe { (*attrs.add(i), *data.add(i)) };
            if d.is_null() {
                continue;
            }
            if unsafe { pointer_attr(&sim, d, a, ptr) }.is_err() {
                // Unknown pointer / unsupported attribute: zero (memory type 0 = unregistered host).
                let sz = match a {
                    CU_POINTER_ATTRIBUTE_MEMORY_TYPE
                    | CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
                    | CU_POINTER_ATTRIBUTE_IS_MANAGED => 4,
                    CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
                    | CU_POINTER_ATTRIBUTE_MAPPED
                    | CU_POINTER_ATTRIBUTE_ACCESS_FLAGS => 4,
                    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
                    | CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE => 4,
                    _ => 8,
                };
                unsafe { std::ptr::write_bytes(d as *mut u8, 0, sz) };
                if a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL {
                    unsafe { *(d as *mut i32) = -2 };
                }
            }
        }
        Ok(())
    })
}

// ---- copies and memsets --------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Side {
    Dev,
    Host,
    /// Unified addressing: validated if it lies in a device allocation.
    Any,
}

fn check_side(sim: &Sim, p: u64, n: u64, side: Side) -> Result<(), CUresult> {
    match side {
        Side::Dev => check_range(sim, p, n),
        Side::Host => {
            if p == 0 {
                Err(CUDA_ERROR_INVALID_VALUE)
            } else {
                Ok(())
            }
        }
        Side::Any => {
            if p == 0 {
                Err(CUDA_ERROR_INVALID_VALUE)
            } else if find(sim, p).is_some() {
                check_range(sim, p, n)
            } else {
                Ok(())
            }
        }
    }
}

/// Copy `n` bytes now and enqueue `n/25` ns on the stream; `sync`: wait for the stream.
pub(crate) fn copy(dst: u64, ds: Side, src: u64, ss: Side, n: usize, h: CUstream, ptds: bool, sync: bool) -> CUresult {
    cu_try!({
        let end = {
            let mut sim = sim::lock();
            current(&mut sim)?;
            check_side(&sim, dst, n as u64, ds)?;
            check_side(&sim, src, n as u64, ss)?;
            let key = stream::resolve(&mut sim, h, ptds)?;
            if n > 0 {
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
            }
            stream::enqueue(&mut sim, key, n as u64 / 25)
        };
        if sync {
            end.wait();
        }
        Ok(())
    })
}

/// Fill `count` elements of `elem` bytes with `val`.
pub(crate) fn memset(dst: u64, val: u32, elem: usize, count: usize, h: CUstream, ptds: bool, sync: bool) -> CUresult {
    cu_try!({
        let bytes = count.checked_mul(elem).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if elem > 1 && !dst.is_multiple_of(elem as u64) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let end = {
            let mut sim = sim::lock();
            current(&mut sim)?;
            check_range(&sim, dst, bytes as u64)?;
            let key = stream::resolve(&mut sim, h, ptds)?;
            unsafe {
                match elem {
                    1 => std::ptr::write_bytes(dst as *mut u8, val as u8, count),
                    2 => std::slice::from_raw_parts_mut(dst as *mut u16, count).fill(val as u16),
                    _ => std::slice::from_raw_parts_mut(dst as *mut u32, count).fill(val),
                }
            }
            stream::enqueue(&mut sim, key, bytes as u64 / 25)
        };
        if sync {
            end.wait();
        }
        Ok(())
    })
}
