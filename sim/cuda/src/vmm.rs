//! Virtual memory management: physical allocations (memfd-backed, charged at cuMemCreate, released
//! at cuMemRelease once also unmapped), address reservations (PROT_NONE mappings) and mappings.

use crate::context::check_dev;
use crate::memory::{Alloc, AllocKind, charge, uncharge};
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out};
use sim_state::GRANULE;
use std::ffi::c_void;

pub(crate) struct PhysHandle {
    pub dev: usize,
    pub size: u64,
    pub fd: i32,
    pub mapped: u32,
    pub released: bool,
    pub prop: CUmemAllocationProp,
    /// Host memory (a host / host-NUMA location): charged to no device.
    pub host: bool,
}

unsafe impl Send for PhysHandle {}

fn destroy(sim: &mut Sim, h: u64) {
    if let Some(p) = sim.phys.remove(&h) {
        unsafe { libc::close(p.fd) };
        if !p.host {
            uncharge(p.dev, p.size);
        }
    }
}

/// The properties, the physical device and whether the memory is on the host: device (1) and
/// device-locality-domain (6, device = low byte of the id) locations are device memory; host (2),
/// host-NUMA (3) and host-NUMA-current (4) are host memory, kept against the first visible device.
fn read_prop(prop: *const CUmemAllocationProp) -> Result<(CUmemAllocationProp, usize, bool), CUresult> {
    nonnull(prop)?;
    let p = unsafe { *prop };
    match p.location.type_ {
        CU_MEM_LOCATION_TYPE_DEVICE => Ok((p, check_dev(p.location.id)?, false)),
        6 => Ok((p, check_dev(p.location.id & 0xFF)?, false)),
        2..=4 => Ok((p, crate::visible().first().copied().ok_or(CUDA_ERROR_INVALID_VALUE)?, true)),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

pub(crate) fn mem_create(
    ph: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(ph)?;
        let (p, dev, host) = read_prop(prop)?;
        let size = size as u64;
        if size == 0 || !size.is_multiple_of(GRANULE) || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut sim = sim::lock();
        if !host {
            charge(dev, size)?;
        }
        let fd = unsafe { libc::memfd_create(c"vgpu-sim-vmm".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 || unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            if fd >= 0 {
                unsafe { libc::close(fd) };
            }
            if !host {
                uncharge(dev, size);
            }
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let h = sim::new_handle();
        sim.phys.insert(h, PhysHandle { dev, size, fd, mapped: 0, released: false, prop: p, host });
        unsafe { out(ph, h) }
    })
}

pub(crate) fn mem_release(h: CUmemGenericAllocationHandle) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        let p = sim.phys.get_mut(&h).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if p.released {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        p.released = true;
        if p.mapped == 0 {
            destroy(&mut sim, h);
        }
        Ok(())
    })
}

pub(crate) fn address_reserve(
    pptr: *mut CUdeviceptr,
    size: usize,
    align: usize,
    _addr: CUdeviceptr,
    _flags: u64,
) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pptr)?;
        let size = size as u64;
        if size == 0 || !size.is_multiple_of(GRANULE) || (align != 0 && !align.is_power_of_two()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let align = (align as u64).max(GRANULE);
        let len = (size + align) as usize;
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let raw = p as u64;
        let base = raw.div_ceil(align) * align;
        unsafe {
            if base > raw {
                libc::munmap(raw as *mut c_void, (base - raw) as usize);
            }
            let end = raw + len as u64;
            if end > base + size {
                libc::munmap((base + size) as *mut c_void, (end - base - size) as usize);
            }
        }
        sim::lock().reservations.insert(base, size);
        unsafe { out(pptr, base) }
    })
}

fn unmap_range(sim: &mut Sim, ptr: u64, size: u64) -> usize {
    let maps: Vec<u64> = sim
        .allocs
        .range(ptr..ptr.saturating_add(size))
        .filter(|(_, a)| matches!(a.kind, AllocKind::Vmm(_)))
        .map(|(b, _)| *b)
        .collect();
    for b in &maps {
        let a = sim.allocs.remove(b).unwrap();
        unsafe {
            libc::mmap(
                *b as *mut c_void,
                a.size as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if let AllocKind::Vmm(h) = a.kind
            && let Some(p) = sim.phys.get_mut(&h)
        {
            p.mapped = p.mapped.saturating_sub(1);
            if p.released && p.mapped == 0 {
                destroy(sim, h);
            }
        }
    }
    maps.len()
}

pub(crate) fn address_free(ptr: CUdeviceptr, size: usize) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        match sim.reservations.get(&ptr) {
            Some(&s) if s == size as u64 => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        unmap_range(&mut sim, ptr, size as u64);
        sim.reservations.remove(&ptr);
        unsafe { libc::munmap(ptr as *mut c_void, size) };
        Ok(())
    })
}

fn in_reservation(sim: &Sim, ptr: u64, size: u64) -> bool {
    match sim.reservations.range(..=ptr).next_back() {
        Some((&b, &s)) => ptr + size <= b + s,
        None => false,
    }
}

pub(crate) fn mem_map(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    h: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    cu_try!({
        check_init()?;
        let (size, offset) = (size as u64, offset as u64);
        if flags != 0 || size == 0 || !ptr.is_multiple_of(GRANULE) || size % GRANULE != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut sim = sim::lock();
        let p = sim.phys.get(&h).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if p.released || offset + size > p.size {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if !in_reservation(&sim, ptr, size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if sim.allocs.range(ptr..ptr + size).next().is_some() || crate::memory::find(&sim, ptr).is_some() {
            return Err(CUDA_ERROR_ALREADY_MAPPED);
        }
        let (fd, dev) = (p.fd, p.dev);
        let r = unsafe {
            libc::mmap(
                ptr as *mut c_void,
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                offset as libc::off_t,
            )
        };
        if r == libc::MAP_FAILED {
            return Err(CUDA_ERROR_MAP_FAILED);
        }
        sim.allocs.insert(ptr, Alloc { size, map_len: 0, charged: 0, dev, ctx: 0, kind: AllocKind::Vmm(h) });
        sim.phys.get_mut(&h).unwrap().mapped += 1;
        Ok(())
    })
}

pub(crate) fn mem_unmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        if unmap_range(&mut sim, ptr, size as u64) == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    })
}

pub(crate) fn mem_set_access(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) -> CUresult {
    cu_try!({
        check_init()?;
        if count == 0 || desc.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..count {
            let d = unsafe { *desc.add(i) };
            if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            check_dev(d.location.id)?;
        }
        let sim = sim::lock();
        // Every byte of the range must be mapped.
        let mut at = ptr;
        let end = ptr + size as u64;
        while at < end {
            match crate::memory::find(&sim, at) {
                Some((b, a)) if matches!(a.kind, AllocKind::Vmm(_)) => at = b + a.size,
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
        Ok(())
    })
}

pub(crate) fn get_granularity(g: *mut usize, prop: *const CUmemAllocationProp, _option: u32) -> CUresult {
    cu_try!({
        check_init()?;
        read_prop(prop)?;
        unsafe { out(g, GRANULE as usize) }
    })
}

pub(crate) fn get_properties_from_handle(prop: *mut CUmemAllocationProp, h: CUmemGenericAllocationHandle) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let p = sim.phys.get(&h).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        unsafe { out(prop, p.prop) }
    })
}
