//! The one list of exported entry points. Each line gives the base name and ABI version that
//! `cuGetProcAddress` answers with it (and `[ptds]` for the per-thread default-stream variant), the
//! exported symbol with its C signature, and the body. The `exports!` macro emits every function
//! (unmangled, with its own call counter) and the `cuGetProcAddress` table from the same list, so
//! the table address of a variant is exactly its `dlsym` address (or, with
//! `VGPU_SIM_PROCADDR_THUNKS=1`, the address of an unexported thunk forwarding to it, as a driver
//! that hands out other addresses than its symbols would).
#![allow(non_snake_case)]

use crate::procaddr::Entry;
use crate::types::*;
use crate::*;
use std::ffi::{c_char, c_void};

macro_rules! exports {
    ($( $base:literal @ $ver:literal $([$pt:ident])? => fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) $body:block )*) => {
        $(
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> CUresult {
                static C: counting::Counter = counting::Counter::new(stringify!($name));
                C.hit();
                #[allow(unused_unsafe)]
                unsafe { $body }
            }
        )*

        /// A second, unexported entry point per function (`VGPU_SIM_PROCADDR_THUNKS=1`: what
        /// `cuGetProcAddress` hands out then), forwarding to the exported one.
        mod thunk {
            use super::*;
            $(
                #[allow(clippy::too_many_arguments)]
                #[inline(never)]
                pub(super) unsafe extern "C" fn $name($($a: $t),*) -> CUresult {
                    unsafe { super::$name($($a),*) }
                }
            )*
        }

        /// This list's rows of the `cuGetProcAddress` table.
        pub(crate) fn own_entries() -> Vec<Entry> {
            vec![$( Entry {
                base: $base,
                ver: $ver,
                ptds: exports!(@pt $($pt)?),
                sym: stringify!($name),
                f: $name as *const c_void,
                thunk: thunk::$name as *const c_void,
            } ),*]
        }
    };
    (@pt) => { false };
    (@pt ptds) => { true };
}
pub(crate) use exports;

/// Every row of the `cuGetProcAddress` table: this list's and the CUDA 13 memory paths'
/// (`exports13`).
pub(crate) fn entries() -> Vec<Entry> {
    let mut v = own_entries();
    v.extend(crate::exports13::own_entries());
    v
}

/// Extra (base, version) → existing symbol rows of the cuGetProcAddress table.
pub(crate) const ALIASES: &[(&str, u32, &str)] = &[
    // CUDA 12 headers map cuGraphInstantiate to the 3-argument ABI.
    ("cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags"),
];

const ST0: CUstream = std::ptr::null_mut();

exports! {
    // ---- init, version, errors, entry points -------------------------------------------------
    "cuInit" @ 2000 => fn cuInit(flags: u32) { cu_init(flags) }
    "cuDriverGetVersion" @ 2020 => fn cuDriverGetVersion(v: *mut i32) { device::driver_get_version(v) }
    "cuGetErrorString" @ 6000 => fn cuGetErrorString(e: CUresult, p: *mut *const c_char) { device::get_error_name(e, p, true) }
    "cuGetErrorName" @ 6000 => fn cuGetErrorName(e: CUresult, p: *mut *const c_char) { device::get_error_name(e, p, false) }
    "cuGetExportTable" @ 3000 => fn cuGetExportTable(pp: *mut *const c_void, id: *const CUuuid) { drivercost::get_export_table(pp, id) }
    "cuGetProcAddress" @ 11030 => fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, ver: i32, flags: u64) {
        procaddr::get_proc_address(symbol, pfn, ver, flags, std::ptr::null_mut())
    }
    "cuGetProcAddress" @ 12000 => fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, ver: i32, flags: u64, status: *mut i32) {
        procaddr::get_proc_address(symbol, pfn, ver, flags, status)
    }

    // ---- devices -------------------------------------------------------------------------------
    "cuDeviceGetCount" @ 2000 => fn cuDeviceGetCount(n: *mut i32) { device::device_get_count(n) }
    "cuDeviceGet" @ 2000 => fn cuDeviceGet(d: *mut CUdevice, ordinal: i32) { device::device_get(d, ordinal) }
    "cuDeviceGetName" @ 2000 => fn cuDeviceGetName(name: *mut c_char, len: i32, dev: CUdevice) { device::device_get_name(name, len, dev) }
    "cuDeviceTotalMem" @ 3020 => fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) { device::device_total_mem(bytes, dev) }
    "cuDeviceGetUuid" @ 9020 => fn cuDeviceGetUuid(u: *mut CUuuid, dev: CUdevice) { device::device_get_uuid(u, dev) }
    "cuDeviceGetUuid" @ 11040 => fn cuDeviceGetUuid_v2(u: *mut CUuuid, dev: CUdevice) { device::device_get_uuid(u, dev) }
    "cuDeviceGetAttribute" @ 2000 => fn cuDeviceGetAttribute(pi: *mut i32, attr: i32, dev: CUdevice) { device::device_get_attribute(pi, attr, dev) }
    "cuDeviceGetPCIBusId" @ 4010 => fn cuDeviceGetPCIBusId(buf: *mut c_char, len: i32, dev: CUdevice) { device::device_get_pci_bus_id(buf, len, dev) }
    "cuDeviceGetByPCIBusId" @ 4010 => fn cuDeviceGetByPCIBusId(dev: *mut CUdevice, id: *const c_char) { device::device_get_by_pci_bus_id(dev, id) }
    "cuDeviceComputeCapability" @ 2000 => fn cuDeviceComputeCapability(major: *mut i32, minor: *mut i32, dev: CUdevice) {
        device::device_compute_capability(major, minor, dev)
    }

    // ---- contexts ------------------------------------------------------------------------------
    "cuDevicePrimaryCtxRetain" @ 7000 => fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) { context::primary_retain(pctx, dev) }
    "cuDevicePrimaryCtxRelease" @ 7000 => fn cuDevicePrimaryCtxRelease(dev: CUdevice) { context::primary_release(dev) }
    "cuDevicePrimaryCtxRelease" @ 11000 => fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) { context::primary_release(dev) }
    "cuDevicePrimaryCtxReset" @ 7000 => fn cuDevicePrimaryCtxReset(dev: CUdevice) { context::primary_reset(dev) }
    "cuDevicePrimaryCtxReset" @ 11000 => fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) { context::primary_reset(dev) }
    "cuDevicePrimaryCtxSetFlags" @ 7000 => fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: u32) { context::primary_set_flags(dev, flags) }
    "cuDevicePrimaryCtxSetFlags" @ 11000 => fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: u32) { context::primary_set_flags(dev, flags) }
    "cuDevicePrimaryCtxGetState" @ 7000 => fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut u32, active: *mut i32) {
        context::primary_get_state(dev, flags, active)
    }
    "cuCtxCreate" @ 2000 => fn cuCtxCreate(pctx: *mut CUcontext, flags: u32, dev: CUdevice) {
        if !crate::knobs().legacy_ctx {
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        context::ctx_create(pctx, flags, dev)
    }
    "cuCtxDestroy" @ 2000 => fn cuCtxDestroy(ctx: CUcontext) {
        if !crate::knobs().legacy_ctx {
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        context::ctx_destroy(ctx)
    }
    "cuCtxCreate" @ 3020 => fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: u32, dev: CUdevice) { context::ctx_create(pctx, flags, dev) }
    "cuCtxCreate" @ 11040 => fn cuCtxCreate_v3(pctx: *mut CUcontext, params: *mut c_void, n: i32, flags: u32, dev: CUdevice) {
        let _ = (params, n);
        context::ctx_create(pctx, flags, dev)
    }
    "cuCtxCreate" @ 12050 => fn cuCtxCreate_v4(pctx: *mut CUcontext, params: *mut c_void, flags: u32, dev: CUdevice) {
        let _ = params;
        context::ctx_create(pctx, flags, dev)
    }
    "cuCtxDestroy" @ 4000 => fn cuCtxDestroy_v2(ctx: CUcontext) { context::ctx_destroy(ctx) }
    "cuCtxSetCurrent" @ 4000 => fn cuCtxSetCurrent(ctx: CUcontext) { context::set_current(ctx) }
    "cuCtxGetCurrent" @ 4000 => fn cuCtxGetCurrent(pctx: *mut CUcontext) { context::get_current(pctx) }
    "cuCtxPushCurrent" @ 4000 => fn cuCtxPushCurrent_v2(ctx: CUcontext) { context::push_current(ctx) }
    "cuCtxPopCurrent" @ 4000 => fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) { context::pop_current(pctx) }
    "cuCtxGetDevice" @ 2000 => fn cuCtxGetDevice(dev: *mut CUdevice) { context::get_device(dev) }
    "cuCtxGetApiVersion" @ 3020 => fn cuCtxGetApiVersion(ctx: CUcontext, v: *mut u32) { context::get_api_version(ctx, v) }
    "cuCtxGetFlags" @ 7000 => fn cuCtxGetFlags(flags: *mut u32) { context::get_flags(flags) }
    "cuCtxSynchronize" @ 2000 => fn cuCtxSynchronize() { context::synchronize() }
    "cuCtxGetStreamPriorityRange" @ 5050 => fn cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) {
        stream::ctx_stream_priority_range(least, greatest)
    }
    "cuCtxGetLimit" @ 3010 => fn cuCtxGetLimit(v: *mut usize, limit: u32) { drivercost::ctx_get_limit(v, limit) }
    "cuCtxSetLimit" @ 3010 => fn cuCtxSetLimit(limit: u32, v: usize) { drivercost::ctx_set_limit(limit, v) }
    "cuModuleGetLoadingMode" @ 11070 => fn cuModuleGetLoadingMode(mode: *mut u32) { module::module_get_loading_mode(mode) }

    // ---- memory --------------------------------------------------------------------------------
    "cuMemGetInfo" @ 3020 => fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) { memory::mem_get_info(free, total) }
    "cuMemAlloc" @ 3020 => fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) { memory::mem_alloc(dptr, size) }
    "cuMemAllocPitch" @ 3020 => fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, w: usize, h: usize, elem: u32) {
        memory::mem_alloc_pitch(dptr, pitch, w, h, elem)
    }
    "cuMemFree" @ 3020 => fn cuMemFree_v2(dptr: CUdeviceptr) { memory::mem_free(dptr) }
    "cuMemAllocManaged" @ 6000 => fn cuMemAllocManaged(dptr: *mut CUdeviceptr, size: usize, flags: u32) { memory::mem_alloc_managed(dptr, size, flags) }
    "cuMemHostAlloc" @ 2020 => fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: u32) { memory::host_alloc(pp, size, flags) }
    "cuMemAllocHost" @ 3020 => fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) { memory::host_alloc(pp, size, 0) }
    "cuMemFreeHost" @ 2000 => fn cuMemFreeHost(p: *mut c_void) { memory::free_host(p) }
    "cuMemHostRegister" @ 6050 => fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: u32) { memory::host_register(p, size, flags) }
    "cuMemHostUnregister" @ 4000 => fn cuMemHostUnregister(p: *mut c_void) { memory::host_unregister(p) }
    "cuMemHostGetDevicePointer" @ 3020 => fn cuMemHostGetDevicePointer_v2(pd: *mut CUdeviceptr, p: *mut c_void, flags: u32) {
        memory::host_get_device_pointer(pd, p, flags)
    }
    "cuMemGetAddressRange" @ 3020 => fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, dptr: CUdeviceptr) {
        memory::get_address_range(base, size, dptr)
    }
    "cuPointerGetAttribute" @ 4000 => fn cuPointerGetAttribute(data: *mut c_void, attr: i32, ptr: CUdeviceptr) { memory::pointer_get_attribute(data, attr, ptr) }
    "cuPointerGetAttributes" @ 7000 => fn cuPointerGetAttributes(n: u32, attrs: *mut i32, data: *mut *mut c_void, ptr: CUdeviceptr) {
        memory::pointer_get_attributes(n, attrs, data, ptr)
    }

    // ---- virtual memory management -------------------------------------------------------------
    "cuMemCreate" @ 10020 => fn cuMemCreate(h: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64) {
        vmm::mem_create(h, size, prop, flags)
    }
    "cuMemRelease" @ 10020 => fn cuMemRelease(h: CUmemGenericAllocationHandle) { vmm::mem_release(h) }
    "cuMemAddressReserve" @ 10020 => fn cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, align: usize, addr: CUdeviceptr, flags: u64) {
        vmm::address_reserve(ptr, size, align, addr, flags)
    }
    "cuMemAddressFree" @ 10020 => fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) { vmm::address_free(ptr, size) }
    "cuMemMap" @ 10020 => fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, h: CUmemGenericAllocationHandle, flags: u64) {
        vmm::mem_map(ptr, size, offset, h, flags)
    }
    "cuMemUnmap" @ 10020 => fn cuMemUnmap(ptr: CUdeviceptr, size: usize) { vmm::mem_unmap(ptr, size) }
    "cuMemSetAccess" @ 10020 => fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) {
        vmm::mem_set_access(ptr, size, desc, count)
    }
    "cuMemGetAllocationGranularity" @ 10020 => fn cuMemGetAllocationGranularity(g: *mut usize, prop: *const CUmemAllocationProp, option: u32) {
        vmm::get_granularity(g, prop, option)
    }
    "cuMemGetAllocationPropertiesFromHandle" @ 10020 => fn cuMemGetAllocationPropertiesFromHandle(prop: *mut CUmemAllocationProp, h: CUmemGenericAllocationHandle) {
        vmm::get_properties_from_handle(prop, h)
    }

    // ---- memory pools --------------------------------------------------------------------------
    "cuDeviceGetDefaultMemPool" @ 11020 => fn cuDeviceGetDefaultMemPool(p: *mut CUmemoryPool, dev: CUdevice) { pool::device_get_default_mem_pool(p, dev) }
    "cuDeviceGetMemPool" @ 11020 => fn cuDeviceGetMemPool(p: *mut CUmemoryPool, dev: CUdevice) { pool::device_get_mem_pool(p, dev) }
    "cuDeviceSetMemPool" @ 11020 => fn cuDeviceSetMemPool(dev: CUdevice, p: CUmemoryPool) { pool::device_set_mem_pool(dev, p) }
    "cuMemPoolCreate" @ 11020 => fn cuMemPoolCreate(p: *mut CUmemoryPool, props: *const CUmemPoolProps) { pool::pool_create(p, props) }
    "cuMemPoolDestroy" @ 11020 => fn cuMemPoolDestroy(p: CUmemoryPool) { pool::pool_destroy(p) }
    "cuMemPoolGetAttribute" @ 11020 => fn cuMemPoolGetAttribute(p: CUmemoryPool, attr: i32, v: *mut c_void) { pool::pool_get_attribute(p, attr, v) }
    "cuMemPoolSetAttribute" @ 11020 => fn cuMemPoolSetAttribute(p: CUmemoryPool, attr: i32, v: *mut c_void) { pool::pool_set_attribute(p, attr, v) }
    "cuMemPoolTrimTo" @ 11020 => fn cuMemPoolTrimTo(p: CUmemoryPool, keep: usize) { pool::pool_trim_to(p, keep) }
    "cuMemAllocAsync" @ 11020 => fn cuMemAllocAsync(dptr: *mut CUdeviceptr, size: usize, h: CUstream) { pool::mem_alloc_async(dptr, size, None, h, false) }
    "cuMemAllocAsync" @ 11020 [ptds] => fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, size: usize, h: CUstream) { pool::mem_alloc_async(dptr, size, None, h, true) }
    "cuMemAllocFromPoolAsync" @ 11020 => fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, size: usize, p: CUmemoryPool, h: CUstream) {
        pool::mem_alloc_async(dptr, size, Some(p), h, false)
    }
    "cuMemAllocFromPoolAsync" @ 11020 [ptds] => fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, size: usize, p: CUmemoryPool, h: CUstream) {
        pool::mem_alloc_async(dptr, size, Some(p), h, true)
    }
    "cuMemFreeAsync" @ 11020 => fn cuMemFreeAsync(dptr: CUdeviceptr, h: CUstream) { pool::mem_free_async(dptr, h, false) }
    "cuMemFreeAsync" @ 11020 [ptds] => fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, h: CUstream) { pool::mem_free_async(dptr, h, true) }

    // ---- arrays --------------------------------------------------------------------------------
    "cuArrayCreate" @ 3020 => fn cuArrayCreate_v2(h: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR) { array::array_create(h, d) }
    "cuArray3DCreate" @ 3020 => fn cuArray3DCreate_v2(h: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR) { array::array3d_create(h, d) }
    "cuArrayDestroy" @ 2000 => fn cuArrayDestroy(h: CUarray) { array::array_destroy(h) }
    "cuArrayGetDescriptor" @ 3020 => fn cuArrayGetDescriptor_v2(d: *mut CUDA_ARRAY_DESCRIPTOR, h: CUarray) { array::array_get_descriptor(d, h) }
    "cuArray3DGetDescriptor" @ 3020 => fn cuArray3DGetDescriptor_v2(d: *mut CUDA_ARRAY3D_DESCRIPTOR, h: CUarray) { array::array3d_get_descriptor(d, h) }
    "cuMipmappedArrayCreate" @ 5000 => fn cuMipmappedArrayCreate(h: *mut CUmipmappedArray, d: *const CUDA_ARRAY3D_DESCRIPTOR, levels: u32) {
        array::mipmapped_create(h, d, levels)
    }
    "cuMipmappedArrayDestroy" @ 5000 => fn cuMipmappedArrayDestroy(h: CUmipmappedArray) { array::mipmapped_destroy(h) }

    // ---- copies and memsets --------------------------------------------------------------------
    "cuMemcpy" @ 4000 => fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) { memory::copy(dst, memory::Side::Any, src, memory::Side::Any, n, ST0, false, true) }
    "cuMemcpy" @ 7000 [ptds] => fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) { memory::copy(dst, memory::Side::Any, src, memory::Side::Any, n, ST0, true, true) }
    "cuMemcpyAsync" @ 4000 => fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, h: CUstream) {
        memory::copy(dst, memory::Side::Any, src, memory::Side::Any, n, h, false, false)
    }
    "cuMemcpyAsync" @ 7000 [ptds] => fn cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, h: CUstream) {
        memory::copy(dst, memory::Side::Any, src, memory::Side::Any, n, h, true, false)
    }
    "cuMemcpyHtoD" @ 3020 => fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) {
        memory::copy(dst, memory::Side::Dev, src as u64, memory::Side::Host, n, ST0, false, true)
    }
    "cuMemcpyHtoD" @ 7000 [ptds] => fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, n: usize) {
        memory::copy(dst, memory::Side::Dev, src as u64, memory::Side::Host, n, ST0, true, true)
    }
    "cuMemcpyDtoH" @ 3020 => fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        memory::copy(dst as u64, memory::Side::Host, src, memory::Side::Dev, n, ST0, false, true)
    }
    "cuMemcpyDtoH" @ 7000 [ptds] => fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        memory::copy(dst as u64, memory::Side::Host, src, memory::Side::Dev, n, ST0, true, true)
    }
    "cuMemcpyDtoD" @ 3020 => fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        memory::copy(dst, memory::Side::Dev, src, memory::Side::Dev, n, ST0, false, true)
    }
    "cuMemcpyDtoD" @ 7000 [ptds] => fn cuMemcpyDtoD_v2_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        memory::copy(dst, memory::Side::Dev, src, memory::Side::Dev, n, ST0, true, true)
    }
    "cuMemcpyHtoDAsync" @ 3020 => fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, h: CUstream) {
        memory::copy(dst, memory::Side::Dev, src as u64, memory::Side::Host, n, h, false, false)
    }
    "cuMemcpyHtoDAsync" @ 7000 [ptds] => fn cuMemcpyHtoDAsync_v2_ptsz(dst: CUdeviceptr, src: *const c_void, n: usize, h: CUstream) {
        memory::copy(dst, memory::Side::Dev, src as u64, memory::Side::Host, n, h, true, false)
    }
    "cuMemcpyDtoHAsync" @ 3020 => fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, h: CUstream) {
        memory::copy(dst as u64, memory::Side::Host, src, memory::Side::Dev, n, h, false, false)
    }
    "cuMemcpyDtoHAsync" @ 7000 [ptds] => fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CUdeviceptr, n: usize, h: CUstream) {
        memory::copy(dst as u64, memory::Side::Host, src, memory::Side::Dev, n, h, true, false)
    }
    "cuMemcpyDtoDAsync" @ 3020 => fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, h: CUstream) {
        memory::copy(dst, memory::Side::Dev, src, memory::Side::Dev, n, h, false, false)
    }
    "cuMemcpyDtoDAsync" @ 7000 [ptds] => fn cuMemcpyDtoDAsync_v2_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, h: CUstream) {
        memory::copy(dst, memory::Side::Dev, src, memory::Side::Dev, n, h, true, false)
    }
    "cuMemsetD8" @ 3020 => fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) { memory::memset(dst, v as u32, 1, n, ST0, false, true) }
    "cuMemsetD8" @ 7000 [ptds] => fn cuMemsetD8_v2_ptds(dst: CUdeviceptr, v: u8, n: usize) { memory::memset(dst, v as u32, 1, n, ST0, true, true) }
    "cuMemsetD16" @ 3020 => fn cuMemsetD16_v2(dst: CUdeviceptr, v: u16, n: usize) { memory::memset(dst, v as u32, 2, n, ST0, false, true) }
    "cuMemsetD16" @ 7000 [ptds] => fn cuMemsetD16_v2_ptds(dst: CUdeviceptr, v: u16, n: usize) { memory::memset(dst, v as u32, 2, n, ST0, true, true) }
    "cuMemsetD32" @ 3020 => fn cuMemsetD32_v2(dst: CUdeviceptr, v: u32, n: usize) { memory::memset(dst, v, 4, n, ST0, false, true) }
    "cuMemsetD32" @ 7000 [ptds] => fn cuMemsetD32_v2_ptds(dst: CUdeviceptr, v: u32, n: usize) { memory::memset(dst, v, 4, n, ST0, true, true) }
    "cuMemsetD8Async" @ 3020 => fn cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, h: CUstream) { memory::memset(dst, v as u32, 1, n, h, false, false) }
    "cuMemsetD8Async" @ 7000 [ptds] => fn cuMemsetD8Async_ptsz(dst: CUdeviceptr, v: u8, n: usize, h: CUstream) { memory::memset(dst, v as u32, 1, n, h, true, false) }
    "cuMemsetD16Async" @ 3020 => fn cuMemsetD16Async(dst: CUdeviceptr, v: u16, n: usize, h: CUstream) { memory::memset(dst, v as u32, 2, n, h, false, false) }
    "cuMemsetD16Async" @ 7000 [ptds] => fn cuMemsetD16Async_ptsz(dst: CUdeviceptr, v: u16, n: usize, h: CUstream) { memory::memset(dst, v as u32, 2, n, h, true, false) }
    "cuMemsetD32Async" @ 3020 => fn cuMemsetD32Async(dst: CUdeviceptr, v: u32, n: usize, h: CUstream) { memory::memset(dst, v, 4, n, h, false, false) }
    "cuMemsetD32Async" @ 7000 [ptds] => fn cuMemsetD32Async_ptsz(dst: CUdeviceptr, v: u32, n: usize, h: CUstream) { memory::memset(dst, v, 4, n, h, true, false) }

    // ---- modules, libraries, functions ---------------------------------------------------------
    "cuModuleLoad" @ 2000 => fn cuModuleLoad(m: *mut CUmodule, fname: *const c_char) { module::module_load(m, fname) }
    "cuModuleLoadData" @ 2000 => fn cuModuleLoadData(m: *mut CUmodule, image: *const c_void) { module::module_load_data(m, image) }
    "cuModuleLoadDataEx" @ 2010 => fn cuModuleLoadDataEx(m: *mut CUmodule, image: *const c_void, n: u32, opts: *mut i32, vals: *mut *mut c_void) {
        let _ = (n, opts, vals);
        module::module_load_data(m, image)
    }
    "cuModuleLoadFatBinary" @ 2000 => fn cuModuleLoadFatBinary(m: *mut CUmodule, fatbin: *const c_void) { module::module_load_data(m, fatbin) }
    "cuModuleUnload" @ 2000 => fn cuModuleUnload(m: CUmodule) { module::module_unload(m) }
    "cuModuleGetFunction" @ 2000 => fn cuModuleGetFunction(f: *mut CUfunction, m: CUmodule, name: *const c_char) { module::module_get_function(f, m, name) }
    "cuModuleGetGlobal" @ 3020 => fn cuModuleGetGlobal_v2(dptr: *mut CUdeviceptr, bytes: *mut usize, m: CUmodule, name: *const c_char) {
        module::module_get_global(dptr, bytes, m, name)
    }
    "cuLibraryLoadData" @ 12000 => fn cuLibraryLoadData(
        lib: *mut CUlibrary, code: *const c_void,
        jit_opts: *mut i32, jit_vals: *mut *mut c_void, n_jit: u32,
        lib_opts: *mut i32, lib_vals: *mut *mut c_void, n_lib: u32,
    ) {
        let _ = (jit_opts, jit_vals, n_jit, lib_opts, lib_vals, n_lib);
        module::library_load_data(lib, code, drivercost::image_len(code))
    }
    "cuLibraryLoadFromFile" @ 12000 => fn cuLibraryLoadFromFile(
        lib: *mut CUlibrary, fname: *const c_char,
        jit_opts: *mut i32, jit_vals: *mut *mut c_void, n_jit: u32,
        lib_opts: *mut i32, lib_vals: *mut *mut c_void, n_lib: u32,
    ) {
        let _ = (jit_opts, jit_vals, n_jit, lib_opts, lib_vals, n_lib);
        if !fname.is_null() && !std::path::Path::new(&*std::ffi::CStr::from_ptr(fname).to_string_lossy()).is_file() {
            CUDA_ERROR_FILE_NOT_FOUND
        } else {
            let len = std::fs::metadata(&*std::ffi::CStr::from_ptr(fname).to_string_lossy()).map_or(0, |m| m.len());
            module::library_load_data(lib, fname as *const c_void, len)
        }
    }
    "cuLibraryUnload" @ 12000 => fn cuLibraryUnload(lib: CUlibrary) { module::library_unload(lib) }
    "cuLibraryGetModule" @ 12000 => fn cuLibraryGetModule(m: *mut CUmodule, lib: CUlibrary) { module::library_get_module(m, lib) }
    "cuLibraryGetKernel" @ 12000 => fn cuLibraryGetKernel(k: *mut CUkernel, lib: CUlibrary, name: *const c_char) { module::library_get_kernel(k, lib, name) }
    "cuKernelGetFunction" @ 12000 => fn cuKernelGetFunction(f: *mut CUfunction, k: CUkernel) { module::kernel_get_function(f, k) }
    "cuFuncGetAttribute" @ 2020 => fn cuFuncGetAttribute(pi: *mut i32, attr: i32, f: CUfunction) { module::func_get_attribute(pi, attr, f) }
    "cuFuncSetAttribute" @ 9000 => fn cuFuncSetAttribute(f: CUfunction, attr: i32, v: i32) { module::func_set_attribute(f, attr, v) }
    "cuFuncGetModule" @ 11000 => fn cuFuncGetModule(m: *mut CUmodule, f: CUfunction) { module::func_get_module(m, f) }
    "cuOccupancyMaxActiveBlocksPerMultiprocessor" @ 6050 => fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
        n: *mut i32, f: CUfunction, block: i32, shmem: usize,
    ) {
        launch::occupancy(n, f, block, shmem)
    }
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags" @ 7000 => fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        n: *mut i32, f: CUfunction, block: i32, shmem: usize, flags: u32,
    ) {
        let _ = flags;
        launch::occupancy(n, f, block, shmem)
    }

    // ---- streams -------------------------------------------------------------------------------
    "cuStreamCreate" @ 2000 => fn cuStreamCreate(ph: *mut CUstream, flags: u32) { stream::stream_create(ph, flags, 0) }
    "cuStreamCreateWithPriority" @ 5050 => fn cuStreamCreateWithPriority(ph: *mut CUstream, flags: u32, prio: i32) { stream::stream_create(ph, flags, prio) }
    "cuStreamDestroy" @ 4000 => fn cuStreamDestroy_v2(h: CUstream) { stream::stream_destroy(h) }
    "cuStreamSynchronize" @ 2000 => fn cuStreamSynchronize(h: CUstream) { stream::stream_synchronize(h, false) }
    "cuStreamSynchronize" @ 7000 [ptds] => fn cuStreamSynchronize_ptsz(h: CUstream) { stream::stream_synchronize(h, true) }
    "cuStreamQuery" @ 2000 => fn cuStreamQuery(h: CUstream) { stream::stream_query(h, false) }
    "cuStreamQuery" @ 7000 [ptds] => fn cuStreamQuery_ptsz(h: CUstream) { stream::stream_query(h, true) }
    "cuStreamWaitEvent" @ 3020 => fn cuStreamWaitEvent(h: CUstream, ev: CUevent, flags: u32) { stream::stream_wait_event(h, ev, flags, false) }
    "cuStreamWaitEvent" @ 7000 [ptds] => fn cuStreamWaitEvent_ptsz(h: CUstream, ev: CUevent, flags: u32) { stream::stream_wait_event(h, ev, flags, true) }
    "cuStreamGetPriority" @ 5050 => fn cuStreamGetPriority(h: CUstream, p: *mut i32) { stream::stream_get_priority(h, p, false) }
    "cuStreamGetPriority" @ 7000 [ptds] => fn cuStreamGetPriority_ptsz(h: CUstream, p: *mut i32) { stream::stream_get_priority(h, p, true) }
    "cuStreamGetFlags" @ 5050 => fn cuStreamGetFlags(h: CUstream, p: *mut u32) { stream::stream_get_flags(h, p, false) }
    "cuStreamGetFlags" @ 7000 [ptds] => fn cuStreamGetFlags_ptsz(h: CUstream, p: *mut u32) { stream::stream_get_flags(h, p, true) }
    "cuStreamGetCtx" @ 9020 => fn cuStreamGetCtx(h: CUstream, p: *mut CUcontext) { stream::stream_get_ctx(h, p, false) }
    "cuStreamGetCtx" @ 9020 [ptds] => fn cuStreamGetCtx_ptsz(h: CUstream, p: *mut CUcontext) { stream::stream_get_ctx(h, p, true) }
    "cuStreamAddCallback" @ 5000 => fn cuStreamAddCallback(h: CUstream, cb: stream::StreamCallback, data: *mut c_void, flags: u32) {
        let _ = flags;
        stream::add_callback(h, cb, data, false)
    }
    "cuStreamAddCallback" @ 7000 [ptds] => fn cuStreamAddCallback_ptsz(h: CUstream, cb: stream::StreamCallback, data: *mut c_void, flags: u32) {
        let _ = flags;
        stream::add_callback(h, cb, data, true)
    }
    "cuLaunchHostFunc" @ 10000 => fn cuLaunchHostFunc(h: CUstream, f: CUhostFn, data: *mut c_void) { stream::launch_host_func(h, f, data, false) }
    "cuLaunchHostFunc" @ 10000 [ptds] => fn cuLaunchHostFunc_ptsz(h: CUstream, f: CUhostFn, data: *mut c_void) { stream::launch_host_func(h, f, data, true) }

    // ---- stream capture ------------------------------------------------------------------------
    "cuStreamIsCapturing" @ 10000 => fn cuStreamIsCapturing(h: CUstream, st: *mut i32) { stream::is_capturing(h, st, false) }
    "cuStreamIsCapturing" @ 10000 [ptds] => fn cuStreamIsCapturing_ptsz(h: CUstream, st: *mut i32) { stream::is_capturing(h, st, true) }
    "cuStreamBeginCapture" @ 10000 => fn cuStreamBeginCapture(h: CUstream) { stream::begin_capture(h, 0, false) }
    "cuStreamBeginCapture" @ 10000 [ptds] => fn cuStreamBeginCapture_ptsz(h: CUstream) { stream::begin_capture(h, 0, true) }
    "cuStreamBeginCapture" @ 10010 => fn cuStreamBeginCapture_v2(h: CUstream, mode: u32) { stream::begin_capture(h, mode, false) }
    "cuStreamBeginCapture" @ 10010 [ptds] => fn cuStreamBeginCapture_v2_ptsz(h: CUstream, mode: u32) { stream::begin_capture(h, mode, true) }
    "cuStreamEndCapture" @ 10000 => fn cuStreamEndCapture(h: CUstream, g: *mut CUgraph) { stream::end_capture(h, g, false) }
    "cuStreamEndCapture" @ 10000 [ptds] => fn cuStreamEndCapture_ptsz(h: CUstream, g: *mut CUgraph) { stream::end_capture(h, g, true) }
    "cuStreamGetCaptureInfo" @ 10010 => fn cuStreamGetCaptureInfo(h: CUstream, st: *mut i32, id: *mut u64) {
        stream::get_capture_info(h, st, id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), false)
    }
    "cuStreamGetCaptureInfo" @ 10010 [ptds] => fn cuStreamGetCaptureInfo_ptsz(h: CUstream, st: *mut i32, id: *mut u64) {
        stream::get_capture_info(h, st, id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), true)
    }
    "cuStreamGetCaptureInfo" @ 11030 => fn cuStreamGetCaptureInfo_v2(
        h: CUstream, st: *mut i32, id: *mut u64, g: *mut CUgraph, deps: *mut *const CUgraphNode, n: *mut usize,
    ) {
        stream::get_capture_info(h, st, id, g, deps, n, false)
    }
    "cuStreamGetCaptureInfo" @ 11030 [ptds] => fn cuStreamGetCaptureInfo_v2_ptsz(
        h: CUstream, st: *mut i32, id: *mut u64, g: *mut CUgraph, deps: *mut *const CUgraphNode, n: *mut usize,
    ) {
        stream::get_capture_info(h, st, id, g, deps, n, true)
    }

    // ---- events --------------------------------------------------------------------------------
    "cuEventCreate" @ 2000 => fn cuEventCreate(ph: *mut CUevent, flags: u32) { stream::event_create(ph, flags) }
    "cuEventRecord" @ 2000 => fn cuEventRecord(ev: CUevent, h: CUstream) { stream::event_record(ev, h, false) }
    "cuEventRecord" @ 7000 [ptds] => fn cuEventRecord_ptsz(ev: CUevent, h: CUstream) { stream::event_record(ev, h, true) }
    "cuEventRecordWithFlags" @ 11010 => fn cuEventRecordWithFlags(ev: CUevent, h: CUstream, flags: u32) {
        let _ = flags;
        stream::event_record(ev, h, false)
    }
    "cuEventRecordWithFlags" @ 11010 [ptds] => fn cuEventRecordWithFlags_ptsz(ev: CUevent, h: CUstream, flags: u32) {
        let _ = flags;
        stream::event_record(ev, h, true)
    }
    "cuEventQuery" @ 2000 => fn cuEventQuery(ev: CUevent) { stream::event_query(ev) }
    "cuEventSynchronize" @ 2000 => fn cuEventSynchronize(ev: CUevent) { stream::event_synchronize(ev) }
    "cuEventElapsedTime" @ 2000 => fn cuEventElapsedTime(ms: *mut f32, a: CUevent, b: CUevent) { stream::event_elapsed(ms, a, b) }
    "cuEventElapsedTime" @ 12080 => fn cuEventElapsedTime_v2(ms: *mut f32, a: CUevent, b: CUevent) { stream::event_elapsed(ms, a, b) }
    "cuEventDestroy" @ 4000 => fn cuEventDestroy_v2(ev: CUevent) { stream::event_destroy(ev) }

    // ---- launches ------------------------------------------------------------------------------
    "cuLaunchKernel" @ 4000 => fn cuLaunchKernel(
        f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, h: CUstream,
        params: *mut *mut c_void, extra: *mut *mut c_void,
    ) {
        let _ = (params, extra);
        launch::launch_kernel(f, [gx, gy, gz], [bx, by, bz], shmem, h, false)
    }
    "cuLaunchKernel" @ 7000 [ptds] => fn cuLaunchKernel_ptsz(
        f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, h: CUstream,
        params: *mut *mut c_void, extra: *mut *mut c_void,
    ) {
        let _ = (params, extra);
        launch::launch_kernel(f, [gx, gy, gz], [bx, by, bz], shmem, h, true)
    }
    "cuLaunchKernelEx" @ 11060 => fn cuLaunchKernelEx(cfg: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) {
        let _ = (params, extra);
        launch::launch_kernel_ex(cfg, f, false)
    }
    "cuLaunchKernelEx" @ 11060 [ptds] => fn cuLaunchKernelEx_ptsz(cfg: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) {
        let _ = (params, extra);
        launch::launch_kernel_ex(cfg, f, true)
    }
    "cuLaunchCooperativeKernel" @ 9000 => fn cuLaunchCooperativeKernel(
        f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, h: CUstream, params: *mut *mut c_void,
    ) {
        let _ = params;
        launch::launch_cooperative(f, [gx, gy, gz], [bx, by, bz], shmem, h, false)
    }
    "cuLaunchCooperativeKernel" @ 9000 [ptds] => fn cuLaunchCooperativeKernel_ptsz(
        f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, h: CUstream, params: *mut *mut c_void,
    ) {
        let _ = params;
        launch::launch_cooperative(f, [gx, gy, gz], [bx, by, bz], shmem, h, true)
    }
    "cuLaunchCooperativeKernelMultiDevice" @ 9000 => fn cuLaunchCooperativeKernelMultiDevice(list: *mut CUDA_LAUNCH_PARAMS, n: u32, flags: u32) {
        launch::launch_cooperative_multi_device(list, n, flags)
    }

    // ---- ABIs of the 12.2+ and 13.x headers (cuda13.rs) ----------------------------------------
    "cuCtxGetDevice" @ 13000 => fn cuCtxGetDevice_v2(dev: *mut CUdevice, ctx: CUcontext) { cuda13::ctx_get_device_v2(dev, ctx) }
    "cuCtxSynchronize" @ 13000 => fn cuCtxSynchronize_v2(ctx: CUcontext) { cuda13::ctx_synchronize_v2(ctx) }
    "cuMemAdvise" @ 8000 => fn cuMemAdvise(p: CUdeviceptr, n: usize, advice: u32, dev: CUdevice) { cuda13::mem_advise(p, n, advice, dev) }
    "cuMemAdvise" @ 12020 => fn cuMemAdvise_v2(p: CUdeviceptr, n: usize, advice: u32, loc: CUmemLocation) { cuda13::mem_advise_v2(p, n, advice, loc) }
    "cuMemPrefetchAsync" @ 8000 => fn cuMemPrefetchAsync(p: CUdeviceptr, n: usize, dev: CUdevice, h: CUstream) { cuda13::mem_prefetch(p, n, dev, h, false) }
    "cuMemPrefetchAsync" @ 8000 [ptds] => fn cuMemPrefetchAsync_ptsz(p: CUdeviceptr, n: usize, dev: CUdevice, h: CUstream) {
        cuda13::mem_prefetch(p, n, dev, h, true)
    }
    "cuMemPrefetchAsync" @ 12020 => fn cuMemPrefetchAsync_v2(p: CUdeviceptr, n: usize, loc: CUmemLocation, flags: u32, h: CUstream) {
        cuda13::mem_prefetch_v2(p, n, loc, flags, h, false)
    }
    "cuMemPrefetchAsync" @ 12020 [ptds] => fn cuMemPrefetchAsync_v2_ptsz(p: CUdeviceptr, n: usize, loc: CUmemLocation, flags: u32, h: CUstream) {
        cuda13::mem_prefetch_v2(p, n, loc, flags, h, true)
    }
    "cuStreamGetCaptureInfo" @ 12030 => fn cuStreamGetCaptureInfo_v3(
        h: CUstream, st: *mut i32, id: *mut u64, g: *mut CUgraph, deps: *mut *const CUgraphNode, edges: *mut *const c_void, n: *mut usize,
    ) {
        cuda13::get_capture_info_v3(h, st, id, g, deps, edges, n, false)
    }
    "cuStreamGetCaptureInfo" @ 12030 [ptds] => fn cuStreamGetCaptureInfo_v3_ptsz(
        h: CUstream, st: *mut i32, id: *mut u64, g: *mut CUgraph, deps: *mut *const CUgraphNode, edges: *mut *const c_void, n: *mut usize,
    ) {
        cuda13::get_capture_info_v3(h, st, id, g, deps, edges, n, true)
    }
    "cuLaunchHostFunc" @ 13010 => fn cuLaunchHostFunc_v2(h: CUstream, f: CUhostFn, data: *mut c_void, mode: u32) {
        cuda13::launch_host_func_v2(h, f, data, mode, false)
    }
    "cuLaunchHostFunc" @ 13010 [ptds] => fn cuLaunchHostFunc_v2_ptsz(h: CUstream, f: CUhostFn, data: *mut c_void, mode: u32) {
        cuda13::launch_host_func_v2(h, f, data, mode, true)
    }
    "cuMemcpyBatchAsync" @ 12080 => fn cuMemcpyBatchAsync(
        dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, sizes: *const usize, count: usize,
        attrs: *const c_void, idxs: *const usize, num_attrs: usize, fail: *mut usize, h: CUstream,
    ) {
        cuda13::memcpy_batch(dsts, srcs, sizes, count, attrs, idxs, num_attrs, fail, h, false)
    }
    "cuMemcpyBatchAsync" @ 12080 [ptds] => fn cuMemcpyBatchAsync_ptsz(
        dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, sizes: *const usize, count: usize,
        attrs: *const c_void, idxs: *const usize, num_attrs: usize, fail: *mut usize, h: CUstream,
    ) {
        cuda13::memcpy_batch(dsts, srcs, sizes, count, attrs, idxs, num_attrs, fail, h, true)
    }
    "cuMemcpyBatchAsync" @ 13000 => fn cuMemcpyBatchAsync_v2(
        dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, sizes: *const usize, count: usize,
        attrs: *const c_void, idxs: *const usize, num_attrs: usize, h: CUstream,
    ) {
        cuda13::memcpy_batch(dsts, srcs, sizes, count, attrs, idxs, num_attrs, std::ptr::null_mut(), h, false)
    }
    "cuMemcpyBatchAsync" @ 13000 [ptds] => fn cuMemcpyBatchAsync_v2_ptsz(
        dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, sizes: *const usize, count: usize,
        attrs: *const c_void, idxs: *const usize, num_attrs: usize, h: CUstream,
    ) {
        cuda13::memcpy_batch(dsts, srcs, sizes, count, attrs, idxs, num_attrs, std::ptr::null_mut(), h, true)
    }
    "cuGraphAddNode" @ 12020 => fn cuGraphAddNode(
        node: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, p: *mut cuda13::CUgraphNodeParams,
    ) {
        cuda13::graph_add_node(node, g, deps, n, p)
    }
    "cuGraphAddNode" @ 12030 => fn cuGraphAddNode_v2(
        node: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, edges: *const c_void, n: usize, p: *mut cuda13::CUgraphNodeParams,
    ) {
        let _ = edges;
        cuda13::graph_add_node(node, g, deps, n, p)
    }
    "cuGraphAddNode" @ 13040 => fn cuGraphAddNode_v3(
        node: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, edges: *const c_void, n: usize, p: *mut cuda13::CUgraphNodeParams,
    ) {
        let _ = edges;
        cuda13::graph_add_node(node, g, deps, n, p)
    }
    "cuLibraryGetGlobal" @ 12000 => fn cuLibraryGetGlobal(dptr: *mut CUdeviceptr, bytes: *mut usize, lib: CUlibrary, name: *const c_char) {
        cuda13::library_get_global(dptr, bytes, lib, name)
    }

    // ---- graphs --------------------------------------------------------------------------------
    "cuGraphCreate" @ 10000 => fn cuGraphCreate(g: *mut CUgraph, flags: u32) { graph::graph_create(g, flags) }
    "cuGraphAddKernelNode" @ 10000 => fn cuGraphAddKernelNode(
        node: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, p: *const CUDA_KERNEL_NODE_PARAMS_v1,
    ) {
        graph::add_kernel_node_v1(node, g, deps, n, p)
    }
    "cuGraphAddKernelNode" @ 12000 => fn cuGraphAddKernelNode_v2(
        node: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, p: *const CUDA_KERNEL_NODE_PARAMS_v2,
    ) {
        graph::add_kernel_node_v2(node, g, deps, n, p)
    }
    "cuGraphGetNodes" @ 10000 => fn cuGraphGetNodes(g: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) { graph::graph_get_nodes(g, nodes, n) }
    "cuGraphNodeGetType" @ 10000 => fn cuGraphNodeGetType(node: CUgraphNode, t: *mut u32) { graph::node_get_type(node, t) }
    "cuGraphKernelNodeGetParams" @ 10000 => fn cuGraphKernelNodeGetParams(node: CUgraphNode, p: *mut CUDA_KERNEL_NODE_PARAMS_v1) {
        graph::kernel_node_get_params_v1(node, p)
    }
    "cuGraphKernelNodeGetParams" @ 12000 => fn cuGraphKernelNodeGetParams_v2(node: CUgraphNode, p: *mut CUDA_KERNEL_NODE_PARAMS_v2) {
        graph::kernel_node_get_params_v2(node, p)
    }
    "cuGraphInstantiate" @ 10000 => fn cuGraphInstantiate(e: *mut CUgraphExec, g: CUgraph, err: *mut CUgraphNode, log: *mut u8, size: usize) {
        graph::instantiate_v1(e, g, err, log, size)
    }
    "cuGraphInstantiate" @ 11000 => fn cuGraphInstantiate_v2(e: *mut CUgraphExec, g: CUgraph, err: *mut CUgraphNode, log: *mut u8, size: usize) {
        graph::instantiate_v1(e, g, err, log, size)
    }
    "cuGraphInstantiateWithFlags" @ 11040 => fn cuGraphInstantiateWithFlags(e: *mut CUgraphExec, g: CUgraph, flags: u64) { graph::instantiate(e, g, flags) }
    "cuGraphInstantiateWithParams" @ 12000 => fn cuGraphInstantiateWithParams(e: *mut CUgraphExec, g: CUgraph, p: *mut graph::InstantiateParams) {
        graph::instantiate_with_params(e, g, p)
    }
    "cuGraphInstantiateWithParams" @ 12000 [ptds] => fn cuGraphInstantiateWithParams_ptsz(e: *mut CUgraphExec, g: CUgraph, p: *mut graph::InstantiateParams) {
        graph::instantiate_with_params(e, g, p)
    }
    "cuGraphUpload" @ 11010 => fn cuGraphUpload(e: CUgraphExec, h: CUstream) { graph::graph_upload(e, h, false) }
    "cuGraphUpload" @ 11010 [ptds] => fn cuGraphUpload_ptsz(e: CUgraphExec, h: CUstream) { graph::graph_upload(e, h, true) }
    "cuGraphLaunch" @ 10000 => fn cuGraphLaunch(e: CUgraphExec, h: CUstream) { graph::graph_launch(e, h, false) }
    "cuGraphLaunch" @ 10000 [ptds] => fn cuGraphLaunch_ptsz(e: CUgraphExec, h: CUstream) { graph::graph_launch(e, h, true) }
    "cuGraphAddMemAllocNode" @ 11040 => fn cuGraphAddMemAllocNode(
        node: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, p: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
    ) {
        graph::add_mem_alloc_node(node, g, deps, n, p)
    }
    "cuGraphAddMemFreeNode" @ 11040 => fn cuGraphAddMemFreeNode(
        node: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, dptr: CUdeviceptr,
    ) {
        graph::add_mem_free_node(node, g, deps, n, dptr)
    }
    "cuDeviceGraphMemTrim" @ 11040 => fn cuDeviceGraphMemTrim(dev: CUdevice) { drivercost::device_graph_mem_trim(dev) }
    "cuDeviceGetGraphMemAttribute" @ 11040 => fn cuDeviceGetGraphMemAttribute(dev: CUdevice, attr: i32, v: *mut c_void) {
        drivercost::device_get_graph_mem_attribute(dev, attr, v)
    }
    "cuGraphExecDestroy" @ 10000 => fn cuGraphExecDestroy(e: CUgraphExec) { graph::exec_destroy(e) }
    "cuGraphDestroy" @ 10000 => fn cuGraphDestroy(g: CUgraph) { graph::graph_destroy(g) }
}
