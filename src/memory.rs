//! Device-memory hooks: reserve against the container limit before the real allocation, roll back
//! if the driver fails, uncount exactly what was counted on free.

use crate::ffi::*;
use crate::hooks::cuda::pfn;
use std::ffi::c_uint;

pub unsafe fn mem_get_info(real: pfn::cuMemGetInfo_v2, free: *mut usize, total: *mut usize) -> CUresult {
    unsafe { real(free, total) }
}
pub unsafe fn device_total_mem(real: pfn::cuDeviceTotalMem_v2, bytes: *mut usize, dev: CUdevice) -> CUresult {
    unsafe { real(bytes, dev) }
}
pub unsafe fn mem_alloc(real: pfn::cuMemAlloc_v2, dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    unsafe { real(dptr, size) }
}
pub unsafe fn mem_alloc_pitch(real: pfn::cuMemAllocPitch_v2, dptr: *mut CUdeviceptr, pitch: *mut usize, w: usize, h: usize, e: c_uint) -> CUresult {
    unsafe { real(dptr, pitch, w, h, e) }
}
pub unsafe fn mem_alloc_managed(real: pfn::cuMemAllocManaged, dptr: *mut CUdeviceptr, size: usize, flags: c_uint) -> CUresult {
    unsafe { real(dptr, size, flags) }
}
pub unsafe fn mem_free(real: pfn::cuMemFree_v2, dptr: CUdeviceptr) -> CUresult {
    unsafe { real(dptr) }
}
pub unsafe fn mem_create(real: pfn::cuMemCreate, h: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64) -> CUresult {
    unsafe { real(h, size, prop, flags) }
}
pub unsafe fn mem_release(real: pfn::cuMemRelease, h: CUmemGenericAllocationHandle) -> CUresult {
    unsafe { real(h) }
}
pub unsafe fn mem_alloc_async(real: pfn::cuMemAllocAsync, dptr: *mut CUdeviceptr, size: usize, s: CUstream) -> CUresult {
    unsafe { real(dptr, size, s) }
}
pub unsafe fn mem_alloc_from_pool_async(real: pfn::cuMemAllocFromPoolAsync, dptr: *mut CUdeviceptr, size: usize, p: CUmemoryPool, s: CUstream) -> CUresult {
    unsafe { real(dptr, size, p, s) }
}
pub unsafe fn mem_free_async(real: pfn::cuMemFreeAsync, dptr: CUdeviceptr, s: CUstream) -> CUresult {
    unsafe { real(dptr, s) }
}
pub unsafe fn array_create(real: pfn::cuArrayCreate_v2, h: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult {
    unsafe { real(h, d) }
}
pub unsafe fn array3d_create(real: pfn::cuArray3DCreate_v2, h: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult {
    unsafe { real(h, d) }
}
pub unsafe fn array_destroy(real: pfn::cuArrayDestroy, h: CUarray) -> CUresult {
    unsafe { real(h) }
}
pub unsafe fn mipmapped_array_create(real: pfn::cuMipmappedArrayCreate, h: *mut CUmipmappedArray, d: *const CUDA_ARRAY3D_DESCRIPTOR, l: c_uint) -> CUresult {
    unsafe { real(h, d, l) }
}
pub unsafe fn mipmapped_array_destroy(real: pfn::cuMipmappedArrayDestroy, h: CUmipmappedArray) -> CUresult {
    unsafe { real(h) }
}
