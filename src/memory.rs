//! Device-memory hooks. Every counted path reserves against the container limit BEFORE the real
//! allocation (so concurrent processes can never overshoot together), rolls the reservation back
//! if the driver fails, and uncounts exactly what was counted, on the recorded device, when the
//! memory is freed. A free of something we did not count always reaches the driver and uncounts
//! nothing. Host allocations are not device memory and are not hooked.

use crate::driver;
use crate::ffi::*;
use crate::state::{self, State};
use cuda_types::pfn;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vgpu_core::ledger::{AllocRecord, AllocTable, ReserveError};
use vgpu_core::region::UsageKind;
use vgpu_core::{slots, views};

/// The calling thread's current context: the owner of what it allocates (0 if none).
fn current_ctx() -> u64 {
    driver::current_ctx() as u64
}

/// `Ok(key)` from what a successful real allocation wrote, else its error.
fn produced(r: CUresult, key: impl FnOnce() -> u64) -> Result<u64, CUresult> {
    if r == CUDA_SUCCESS { Ok(key()) } else { Err(r) }
}

/// Reserve `bytes` on region device `dev`, run the real allocation, record it under the key it
/// returns. `Err(code)` from `alloc` rolls the reservation back and is returned unchanged.
// Eight plain inputs of one accounting step, each from a different hook; a struct would only
// rename them at every call site.
#[allow(clippy::too_many_arguments)]
fn counted(
    st: &State,
    table: &AllocTable,
    dev: usize,
    bytes: u64,
    kind: UsageKind,
    owner: u64,
    what: &str,
    alloc: impl FnOnce() -> Result<u64, CUresult>,
) -> CUresult {
    if st.closed {
        return CUDA_ERROR_OUT_OF_MEMORY; // logged once when the state was built
    }
    let limit = st.memory_limit(dev);
    let mut reserved = st.ledger.reserve(dev, bytes, kind, limit);
    if matches!(reserved, Err(ReserveError::OverLimit(_))) && crate::truth::before_refusal(dev) {
        reserved = st.ledger.reserve(dev, bytes, kind, limit); // driver-held bytes went back
    }
    let reservation = match reserved {
        Ok(r) => r,
        Err(ReserveError::OverLimit(o)) => {
            log_refusal(what, dev, bytes, o.usage, o.limit);
            vgpu_core::counters::record_refusal(st.region.and_then(|r| r.ext()), dev, bytes);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        Err(e) => {
            crate::error!("{what}: {e}");
            vgpu_core::counters::record_refusal(st.region.and_then(|r| r.ext()), dev, bytes);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    };
    match alloc() {
        Ok(key) => {
            if let Some(stale) = table.insert(key, AllocRecord { dev, bytes, kind, owner }) {
                // The driver reused an address we still counted: its free was missed.
                st.ledger.release(stale.dev, stale.kind, stale.bytes);
            }
            reservation.commit();
            crate::debug!("{what}: counted {bytes} bytes on device {dev} (key {key:#x})");
            CUDA_SUCCESS
        }
        Err(code) => code,
    }
}

/// Runs the driver's free `free` and, when it succeeds, `then` (the uncount), as one change of
/// this process's memory: a context measurement never sees the driver's figure without the
/// ledger's (`Ledger::change`).
fn freeing(free: impl FnOnce() -> CUresult, then: impl FnOnce(&State)) -> CUresult {
    let st = state::get();
    let _change = st.ledger.change();
    let r = free();
    if r == CUDA_SUCCESS {
        then(st);
    }
    r
}

/// Refusals not logged since the last refusal line.
static REFUSALS_UNLOGGED: AtomicU64 = AtomicU64::new(0);
/// When the next refusal line may be written (CLOCK_MONOTONIC ns).
static REFUSAL_LINE_DUE: AtomicU64 = AtomicU64::new(0);
const REFUSAL_LINE_EVERY_NS: u64 = 1_000_000_000;

/// One warning line per refusal, at most one per second: near the limit refusals come by the
/// thousand per second, and each line is a write to stderr. The next line counts the others.
fn log_refusal(what: &str, dev: usize, bytes: u64, usage: u64, limit: u64) {
    if !crate::log::enabled(crate::log::WARN) {
        return;
    }
    let now = crate::clock::mono_ns();
    let due = REFUSAL_LINE_DUE.load(Ordering::Relaxed);
    if now < due
        || REFUSAL_LINE_DUE
            .compare_exchange(due, now + REFUSAL_LINE_EVERY_NS, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        REFUSALS_UNLOGGED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let more = REFUSALS_UNLOGGED.swap(0, Ordering::Relaxed);
    crate::warn!(
        "{what}: {bytes} bytes refused on device {dev}: {usage} used + {bytes} > {limit} limit{}",
        if more > 0 { format!(" ({more} more refused since the last line)") } else { String::new() }
    );
}

/// Uncount what `key` counted (nothing if unknown).
fn uncount(st: &State, table: &AllocTable, key: u64) {
    if let Some(rec) = table.remove(key) {
        st.ledger.release(rec.dev, rec.kind, rec.bytes);
    }
}

/// Region device of the current context, or `None` (then the real call decides, uncounted: it
/// fails without a context anyway).
fn current_region_dev(st: &State) -> Option<usize> {
    driver::current_ordinal().map(|o| st.region_index(o))
}

// ---- views ----

pub unsafe fn mem_get_info(real: pfn::cuMemGetInfo_v2, free: *mut usize, total: *mut usize) -> CUresult {
    let r = unsafe { real(free, total) };
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() {
        return r;
    }
    let st = state::get();
    let Some(dev) = current_region_dev(st) else { return r };
    let limit = st.view_limit(dev);
    if limit > 0 {
        let usage = st.ledger.usage(dev);
        if usage >= limit {
            // Full (a process outside our protocol, or driver-held memory): no lease may let
            // an allocation through unchecked.
            st.ledger.revoke_leases(dev);
        }
        let (f, t) = views::mem_info(limit, unsafe { *total } as u64, unsafe { *free } as u64, usage);
        unsafe {
            *free = f as usize;
            *total = t as usize;
        }
    }
    r
}

pub unsafe fn device_total_mem(real: pfn::cuDeviceTotalMem_v2, bytes: *mut usize, ordinal: CUdevice) -> CUresult {
    let r = unsafe { real(bytes, ordinal) };
    if r != CUDA_SUCCESS || bytes.is_null() {
        return r;
    }
    let st = state::get();
    let limit = st.view_limit(st.region_index(ordinal));
    unsafe { *bytes = views::device_total_mem(limit, *bytes as u64) as usize };
    r
}

// ---- linear allocations ----

pub unsafe fn mem_alloc(real: pfn::cuMemAlloc_v2, dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    let st = state::get();
    let (Some(dev), false) = (current_region_dev(st), dptr.is_null() || size == 0) else {
        return unsafe { real(dptr, size) };
    };
    let r = counted(st, &st.allocs, dev, size as u64, UsageKind::Data, current_ctx(), "cuMemAlloc", || {
        produced(unsafe { real(dptr, size) }, || unsafe { *dptr })
    });
    if r == CUDA_ERROR_OUT_OF_MEMORY && st.config.oversubscribe {
        return unsafe { spill_to_host(st, dev, dptr, size) };
    }
    r
}

/// `CUDA_OVERSUBSCRIBE=true`: an allocation that does not fit is served from managed memory whose
/// preferred location is host RAM, so the excess lives in host memory (slower to reach from the
/// GPU) instead of failing. It is not device memory and is not counted against the limit; the
/// application frees it with `cuMemFree` as usual.
unsafe fn spill_to_host(st: &State, dev: usize, dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    const PREFERRED_LOCATION: u32 = 3; // CU_MEM_ADVISE_SET_PREFERRED_LOCATION
    let Some(managed) = crate::driver::cuMemAllocManaged() else { return CUDA_ERROR_OUT_OF_MEMORY };
    // The driver's figure for this process includes the spill from the allocation on: announced
    // before it (and kept until it is in the table), so no measurement of ours charges it.
    let _change = st.ledger.change();
    let spilling = &st.spilling[dev];
    spilling.fetch_add(size as u64, Ordering::SeqCst);
    let r = unsafe { managed(dptr, size, CU_MEM_ATTACH_GLOBAL) };
    if r == CUDA_SUCCESS {
        let rec = AllocRecord { dev, bytes: size as u64, kind: UsageKind::Data, owner: current_ctx() };
        st.spilled.insert(unsafe { *dptr }, rec);
    }
    spilling.fetch_sub(size as u64, Ordering::SeqCst);
    if r != CUDA_SUCCESS {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let advised = driver::cuMemAdvise()
        .is_some_and(|advise| unsafe { advise(*dptr, size, PREFERRED_LOCATION, CU_DEVICE_CPU) } == CUDA_SUCCESS);
    crate::info!(
        "CUDA_OVERSUBSCRIBE: {size} bytes over the limit served from managed memory{}",
        if advised { " preferring host RAM" } else { " (driver could not be advised to prefer host RAM)" }
    );
    CUDA_SUCCESS
}

pub unsafe fn mem_alloc_pitch(
    real: pfn::cuMemAllocPitch_v2,
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> CUresult {
    let st = state::get();
    let (Some(dev), false) = (current_region_dev(st), dptr.is_null() || pitch.is_null() || width == 0 || height == 0)
    else {
        return unsafe { real(dptr, pitch, width, height, elem) };
    };
    // Reserve a pessimistic estimate (pitch alignment is at most 512 bytes on current GPUs), then
    // settle on the driver's real pitch × height.
    let estimate = (width as u64).div_ceil(512).saturating_mul(512).saturating_mul(height as u64);
    let r = counted(st, &st.allocs, dev, estimate, UsageKind::Data, current_ctx(), "cuMemAllocPitch", || {
        produced(unsafe { real(dptr, pitch, width, height, elem) }, || unsafe { *dptr })
    });
    if r == CUDA_SUCCESS {
        let actual = (unsafe { *pitch } as u64).saturating_mul(height as u64);
        let key = unsafe { *dptr };
        if actual != estimate {
            if actual > estimate {
                // Force-count the (tiny) excess: the memory exists, the ledger must say so.
                st.ledger.force(dev, UsageKind::Data, actual - estimate);
            } else {
                st.ledger.release(dev, UsageKind::Data, estimate - actual);
            }
            st.allocs.insert(key, AllocRecord { dev, bytes: actual, kind: UsageKind::Data, owner: current_ctx() });
        }
    }
    r
}

pub unsafe fn mem_alloc_managed(
    real: pfn::cuMemAllocManaged,
    dptr: *mut CUdeviceptr,
    size: usize,
    flags: c_uint,
) -> CUresult {
    let st = state::get();
    let (Some(dev), false) = (current_region_dev(st), dptr.is_null() || size == 0) else {
        return unsafe { real(dptr, size, flags) };
    };
    // Managed memory can migrate wholly onto the device: count it in full (as the incumbent).
    counted(st, &st.allocs, dev, size as u64, UsageKind::Data, current_ctx(), "cuMemAllocManaged", || {
        produced(unsafe { real(dptr, size, flags) }, || unsafe { *dptr })
    })
}

pub unsafe fn mem_free(real: pfn::cuMemFree_v2, dptr: CUdeviceptr) -> CUresult {
    if dptr == 0 {
        return unsafe { real(dptr) };
    }
    freeing(
        || unsafe { real(dptr) },
        |st| {
            uncount(st, &st.allocs, dptr);
            // Spills exist only under CUDA_OVERSUBSCRIBE: no second table lock on every free.
            if st.config.oversubscribe {
                st.spilled.remove(dptr);
            }
        },
    )
}

// ---- stream-ordered allocations ----
//
// On a capturing stream the driver allocates nothing: `cuMemAllocAsync` adds an allocation node to
// the graph being captured and `cuMemFreeAsync` a free node. Neither is counted; the graph's
// footprint is recorded (driver_costs) and charged when a launch grows the graph pool.

/// Some stream of this process began a capture: until then nothing can be captured and the
/// stream-ordered paths ask the driver nothing more.
static CAPTURE_BEGUN: AtomicBool = AtomicBool::new(false);

pub unsafe fn stream_begin_capture(real: pfn::cuStreamBeginCapture, stream: CUstream) -> CUresult {
    // Set before the capture exists, so an allocation that follows it on any thread checks.
    CAPTURE_BEGUN.store(true, Ordering::Release);
    unsafe { real(stream) }
}

pub unsafe fn stream_begin_capture_v2(
    real: pfn::cuStreamBeginCapture_v2,
    stream: CUstream,
    mode: CUstreamCaptureMode,
) -> CUresult {
    CAPTURE_BEGUN.store(true, Ordering::Release);
    unsafe { real(stream, mode) }
}

/// The graph `stream` is capturing into (null: capturing, graph unknown), if it captures.
fn capture_of(stream: CUstream, ptsz: bool) -> Option<CUgraph> {
    if !CAPTURE_BEGUN.load(Ordering::Acquire) {
        return None;
    }
    crate::compute::api::capture_graph(stream, ptsz)
}

/// A stream-ordered allocation of `size` bytes on `stream` through `alloc` (the real call), from
/// `pool` (`None`: the current pool of the stream's device). Pinned host pools are not counted.
fn alloc_async(
    what: &str,
    dptr: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
    ptsz: bool,
    pool: Option<CUmemoryPool>,
    alloc: impl FnOnce() -> CUresult,
) -> CUresult {
    let st = state::get();
    let (Some(dev), false) = (current_region_dev(st), dptr.is_null() || size == 0) else { return alloc() };
    if let Some(graph) = capture_of(stream, ptsz) {
        let r = alloc();
        if r == CUDA_SUCCESS {
            crate::truth::driver_costs::captured_alloc(graph, size as u64);
            crate::debug!("{what}: {size} bytes captured into graph {graph:p}: counted when the graph pool grows");
        }
        return r;
    }
    let device_memory = match pool {
        Some(p) => crate::pool_place::counts(p),
        None => crate::pool_place::current_counts(driver::current_ordinal),
    };
    if !device_memory {
        return alloc(); // pinned host memory: not device memory
    }
    counted(st, &st.allocs, dev, size as u64, UsageKind::Data, current_ctx(), what, || {
        produced(alloc(), || unsafe { *dptr })
    })
}

pub unsafe fn mem_alloc_async(
    real: pfn::cuMemAllocAsync,
    dptr: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
) -> CUresult {
    alloc_async("cuMemAllocAsync", dptr, size, stream, false, None, || unsafe { real(dptr, size, stream) })
}

pub unsafe fn mem_alloc_async_ptsz(
    real: pfn::cuMemAllocAsync_ptsz,
    dptr: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
) -> CUresult {
    alloc_async("cuMemAllocAsync_ptsz", dptr, size, stream, true, None, || unsafe { real(dptr, size, stream) })
}

pub unsafe fn mem_alloc_from_pool_async(
    real: pfn::cuMemAllocFromPoolAsync,
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    alloc_async("cuMemAllocFromPoolAsync", dptr, size, stream, false, Some(pool), || unsafe {
        real(dptr, size, pool, stream)
    })
}

pub unsafe fn mem_alloc_from_pool_async_ptsz(
    real: pfn::cuMemAllocFromPoolAsync_ptsz,
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    alloc_async("cuMemAllocFromPoolAsync_ptsz", dptr, size, stream, true, Some(pool), || unsafe {
        real(dptr, size, pool, stream)
    })
}

fn free_async(dptr: CUdeviceptr, stream: CUstream, ptsz: bool, free: impl FnOnce() -> CUresult) -> CUresult {
    // Captured: a free node, nothing freed now (and it can only free graph memory, never counted
    // here).
    if dptr == 0 || capture_of(stream, ptsz).is_some() {
        return free();
    }
    // Uncounted when the free is enqueued: the block is the application's no longer, and the
    // pool may hand it to the next allocation of the same stream at once. A graph allocation
    // freed here was never in the table: it goes back to the graph pool, which driver_costs follows.
    freeing(free, |st| uncount(st, &st.allocs, dptr))
}

pub unsafe fn mem_free_async(real: pfn::cuMemFreeAsync, dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    free_async(dptr, stream, false, || unsafe { real(dptr, stream) })
}

pub unsafe fn mem_free_async_ptsz(real: pfn::cuMemFreeAsync_ptsz, dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    free_async(dptr, stream, true, || unsafe { real(dptr, stream) })
}

// ---- virtual memory management ----

pub unsafe fn mem_create(
    real: pfn::cuMemCreate,
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    if handle.is_null() || prop.is_null() || size == 0 {
        return unsafe { real(handle, size, prop, flags) };
    }
    let p = unsafe { &*prop };
    let (loc_type, id) = (p.location.type_ as i32, p.location.id);
    if !vgpu_core::locations::location_counts(loc_type) {
        return unsafe { real(handle, size, prop, flags) }; // host / NUMA memory: not device memory
    }
    let st = state::get();
    let Some(ordinal) = vgpu_core::locations::location_device(loc_type, id).or_else(driver::current_ordinal) else {
        return unsafe { real(handle, size, prop, flags) }; // no device to count it on
    };
    let dev = st.region_index(ordinal);
    counted(st, &st.handles, dev, size as u64, UsageKind::Data, 0, "cuMemCreate", || {
        produced(unsafe { real(handle, size, prop, flags) }, || unsafe { *handle })
    })
}

pub unsafe fn mem_release(real: pfn::cuMemRelease, handle: CUmemGenericAllocationHandle) -> CUresult {
    freeing(
        || unsafe { real(handle) },
        |st| {
            if st.vmm.lock().released(handle) {
                uncount(st, &st.handles, handle);
            }
        },
    )
}

pub unsafe fn mem_map(
    real: pfn::cuMemMap,
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    let r = unsafe { real(ptr, size, offset, handle, flags) };
    if r == CUDA_SUCCESS {
        let st = state::get();
        if st.handles.get(handle).is_some() {
            st.vmm.lock().mapped(ptr, size as u64, handle);
        }
    }
    r
}

pub unsafe fn mem_unmap(real: pfn::cuMemUnmap, ptr: CUdeviceptr, size: usize) -> CUresult {
    freeing(
        || unsafe { real(ptr, size) },
        |st| {
            let free = st.vmm.lock().unmapped(ptr, size as u64);
            for h in free {
                uncount(st, &st.handles, h);
            }
        },
    )
}

/// A context is gone (destroyed, last primary release, reset): the driver freed everything
/// allocated in it, so give back what we counted for it.
pub fn context_torn_down(ctx: u64) {
    if ctx == 0 {
        return;
    }
    let st = state::get();
    let mut bytes = 0u64;
    for table in [&st.allocs, &st.handles] {
        for (_, rec) in table.remove_owned_by(ctx) {
            st.ledger.release(rec.dev, rec.kind, rec.bytes);
            bytes = bytes.saturating_add(rec.bytes);
        }
    }
    // Spills die with their context too (never counted: nothing to give back).
    st.spilled.remove_owned_by(ctx);
    if bytes > 0 {
        crate::debug!("context {ctx:#x} torn down: uncounted {bytes} bytes it owned");
    }
}

// ---- arrays ----

fn array_bytes(width: usize, height: usize, depth: usize, format: CUarray_format, channels: c_uint) -> u64 {
    vgpu_core::arrays::array_bytes(width, height, depth, cuda_types::array_format_channel_bytes(format), channels)
}

fn count_array(st: &State, bytes: u64, what: &str, alloc: impl FnOnce() -> Result<u64, CUresult>) -> Option<CUresult> {
    let dev = current_region_dev(st)?;
    Some(counted(st, &st.handles, dev, bytes, UsageKind::Data, current_ctx(), what, alloc))
}

pub unsafe fn array_create(real: pfn::cuArrayCreate_v2, h: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult {
    if h.is_null() || d.is_null() {
        return unsafe { real(h, d) };
    }
    let desc = unsafe { &*d };
    let bytes = array_bytes(desc.Width, desc.Height, 1, desc.Format, desc.NumChannels);
    let alloc = || produced(unsafe { real(h, d) }, || unsafe { *h } as u64);
    count_array(state::get(), bytes, "cuArrayCreate", alloc).unwrap_or_else(|| unsafe { real(h, d) })
}

pub unsafe fn array3d_create(
    real: pfn::cuArray3DCreate_v2,
    h: *mut CUarray,
    d: *const CUDA_ARRAY3D_DESCRIPTOR,
) -> CUresult {
    if h.is_null() || d.is_null() {
        return unsafe { real(h, d) };
    }
    let desc = unsafe { &*d };
    let bytes = array_bytes(desc.Width, desc.Height, desc.Depth, desc.Format, desc.NumChannels);
    let alloc = || produced(unsafe { real(h, d) }, || unsafe { *h } as u64);
    count_array(state::get(), bytes, "cuArray3DCreate", alloc).unwrap_or_else(|| unsafe { real(h, d) })
}

pub unsafe fn array_destroy(real: pfn::cuArrayDestroy, h: CUarray) -> CUresult {
    freeing(|| unsafe { real(h) }, |st| uncount(st, &st.handles, h as u64))
}

/// Bytes of a full mip chain: each level halves every dimension (layers do not shrink).
fn mipmap_bytes(desc: &CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) -> u64 {
    let layered = desc.Flags & CUDA_ARRAY3D_LAYERED != 0;
    let elem = cuda_types::array_format_channel_bytes(desc.Format);
    vgpu_core::arrays::mipmap_bytes(desc.Width, desc.Height, desc.Depth, layered, levels, elem, desc.NumChannels)
}

pub unsafe fn mipmapped_array_create(
    real: pfn::cuMipmappedArrayCreate,
    h: *mut CUmipmappedArray,
    d: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
) -> CUresult {
    if h.is_null() || d.is_null() {
        return unsafe { real(h, d, levels) };
    }
    let bytes = mipmap_bytes(unsafe { &*d }, levels);
    let alloc = || produced(unsafe { real(h, d, levels) }, || unsafe { *h } as u64);
    count_array(state::get(), bytes, "cuMipmappedArrayCreate", alloc).unwrap_or_else(|| unsafe { real(h, d, levels) })
}

pub unsafe fn mipmapped_array_destroy(real: pfn::cuMipmappedArrayDestroy, h: CUmipmappedArray) -> CUresult {
    freeing(|| unsafe { real(h) }, |st| uncount(st, &st.handles, h as u64))
}

// ---- contexts ----

/// This process's device memory on region device `dev` according to NVML (the driver's truth,
/// context overhead included), if NVML and our host PID can tell.
fn nvml_own_usage(st: &State, dev: usize) -> Option<u64> {
    let me = host_pid(st) as u32;
    let procs = driver::nvml_processes(driver::nvml_handle(dev)?)?;
    // NVML_VALUE_NOT_AVAILABLE (MIG, WDDM): no figure.
    procs.into_iter().find(|&(pid, _)| pid == me).map(|(_, used)| used).filter(|&u| u != u64::MAX)
}

/// Our PID as NVML reports it: the slot's host PID once known, else our own.
pub fn host_pid(st: &State) -> i32 {
    st.region.and_then(|r| slots::hostpid(r, st.pid)).filter(|&h| h > 0).unwrap_or(st.pid)
}

/// How long a context charge waits for the reconciliation's book (`truth::with`).
const CONTEXT_BOOK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Charge what a new context costs on CUDA ordinal `ordinal`, measured as NVML's view of this
/// process minus what we already count there, with no allocation or free of this process half
/// done meanwhile (`Ledger::quiesced`: they wait for the measurement, and it for them), so the
/// two figures describe one moment. The reconciliation's book is held meanwhile
/// (`truth::hand_over`): it would otherwise charge the new context as driver-held memory of its
/// own, counted twice with this charge or shrunk by it to one granule less later; what it
/// already charged for the context becomes part of this charge. A context is device memory like
/// any other: if it does not fit under the container's limit the caller undoes the creation and
/// reports `CUDA_ERROR_OUT_OF_MEMORY`, as a full GPU would. `Ok(bytes charged)`.
pub fn charge_context(ordinal: CUdevice) -> Result<u64, ()> {
    let st = state::get();
    if st.closed {
        return Err(()); // logged once when the state was built
    }
    let dev = st.region_index(ordinal);
    let measure = |held: u64, probe: u64| {
        st.ledger.quiesced(|quiet| {
            if !quiet {
                crate::once!(
                    warn,
                    "context on device {dev}: allocations still in flight after 2 s; its charge may be off by them"
                );
            }
            charge_measured(st, dev, held, probe)
        })
    };
    match crate::truth::with(Some(CONTEXT_BOOK_WAIT), |t| crate::truth::hand_over(t, dev, measure)) {
        Some(r) => r,
        None => {
            crate::once!(warn, "context on device {dev}: reconciliation busy for 2 s; measured without it");
            measure(0, 0).map(|(bytes, _)| bytes)
        }
    }
}

/// The context's cost: NVML's figure less what the ledger counts beside the reconciliation's
/// `held` bytes (already charged, as driver-held memory), less the memory the shim holds for
/// itself uncounted (`probe`: a host-PID probe block) and the `CUDA_OVERSUBSCRIBE` spills.
/// `Ok((cost, whether held is part of it))`.
fn charge_measured(st: &State, dev: usize, held: u64, probe: u64) -> Result<(u64, bool), ()> {
    let Some(truth) = nvml_own_usage(st, dev) else {
        crate::once!(info, "context size not measurable (no NVML view of this process); contexts are not charged");
        return Ok((0, false));
    };
    let theirs = st.ledger.own_usage(dev).saturating_sub(held).saturating_add(st.spilled_on(dev)).saturating_add(probe);
    let cost = truth.saturating_sub(theirs);
    if cost < held {
        st.ledger.release(dev, UsageKind::Context, held - cost);
    }
    let bytes = cost.saturating_sub(held);
    if bytes > 0 {
        match st.ledger.reserve_quiesced(dev, bytes, UsageKind::Context, st.memory_limit(dev)) {
            Ok(res) => {
                res.commit();
                vgpu_core::counters::record_reconcile(st.region.and_then(|r| r.ext()), dev, bytes);
            }
            Err(ReserveError::OverLimit(o)) => {
                vgpu_core::counters::record_refusal(st.region.and_then(|r| r.ext()), dev, bytes);
                crate::warn!(
                    "context on device {dev} refused: it costs {bytes} bytes and the container uses {} of its {} limit",
                    o.usage,
                    o.limit
                );
                return Err(());
            }
            Err(e) => {
                crate::error!("context on device {dev}: {e}");
                return Err(());
            }
        }
    }
    crate::debug!(
        "context on device {dev}: charged {cost} bytes ({} of them held by the reconciliation)",
        held.min(cost)
    );
    Ok((cost, true))
}

/// A context [`charge_context`] refused has been destroyed again. While the driver held it, the
/// periodic reconciliation may have charged its memory as driver-held (unchecked, past the limit);
/// reconciled again now, so the refusal leaves the counts as they were instead of until the next
/// tick.
pub fn context_undone(ordinal: CUdevice) {
    crate::truth::reconcile_now(state::get().region_index(ordinal));
}

pub fn uncharge_context(ordinal: CUdevice, bytes: u64) {
    if bytes == 0 {
        return;
    }
    let st = state::get();
    st.ledger.release(st.region_index(ordinal), UsageKind::Context, bytes);
}
