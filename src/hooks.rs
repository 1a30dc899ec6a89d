//! The one table of everything the shim exports besides `dlsym`.
//!
//! Each line generates: the exported `extern "C"` function (panic-guarded, traced at debug level),
//! a lazily resolved slot holding the real driver function of the same symbol, and an entry in
//! `CUDA_HOOKS` / `NVML_HOOKS` that `dlsym` and `cuGetProcAddress` use to hand out the hook.
//! A line without `=> impl` forwards to the real function unchanged (but is still observable).

use crate::ffi::*;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::atomic::AtomicPtr;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lib {
    Cuda,
    Nvml,
}

pub struct Hook {
    /// Exported symbol name, e.g. `cuLaunchKernel_ptsz`.
    pub name: &'static CStr,
    pub lib: Lib,
    /// Our exported function.
    pub hook: *const c_void,
    /// The real function of the same symbol in the driver (resolved lazily).
    pub real: &'static AtomicPtr<c_void>,
}

// The raw pointers are addresses of functions: immutable and valid for the process lifetime.
unsafe impl Sync for Hook {}

impl Hook {
    /// The real driver function, resolving it on first use. Null when the driver lacks it.
    pub fn real_ptr(&self) -> *mut c_void {
        let lib = match self.lib {
            Lib::Cuda => &crate::dl::LIBCUDA,
            Lib::Nvml => &crate::dl::LIBNVML,
        };
        crate::driver::resolve(self.real, lib, self.name)
    }

    /// Like [`real_ptr`](Self::real_ptr), but null unless the driver library is already loaded
    /// (never loads it).
    pub fn real_ptr_if_loaded(&self) -> *mut c_void {
        let lib = match self.lib {
            Lib::Cuda => &crate::dl::LIBCUDA,
            Lib::Nvml => &crate::dl::LIBNVML,
        };
        if lib.handle_if_loaded().is_none() {
            return std::ptr::null_mut();
        }
        self.real_ptr()
    }
}

/// Find a hook by exported name. Allocation-free (used inside `dlsym`).
pub fn find(name: &[u8]) -> Option<&'static Hook> {
    let table: &[&Hook] = if name.starts_with(b"nvml") {
        NVML_HOOKS
    } else if name.starts_with(b"cu") {
        CUDA_HOOKS
    } else {
        return None;
    };
    table.iter().copied().find(|h| h.name.to_bytes() == name)
}


macro_rules! call_impl {
    ($real:ident, ($($arg:ident),*), ) => { unsafe { $real($($arg),*) } };
    ($real:ident, ($($arg:ident),*), $imp:path) => { unsafe { $imp($real, $($arg),*) } };
}

macro_rules! hook_table {
    (
        table = $table:ident, lib = $lib:expr, ret = $ret:ty,
        on_panic = $on_panic:expr, on_missing = $on_missing:expr;
        $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(=> $imp:path)? ; )*
    ) => {
        /// Typed function-pointer types of the real functions, one per symbol.
        #[allow(non_camel_case_types, dead_code)]
        pub mod pfn {
            use super::*;
            $( pub type $name = unsafe extern "C" fn($($ty),*) -> $ret; )*
        }

        /// One `Hook` per symbol, named like the symbol.
        #[allow(non_upper_case_globals)]
        pub mod entries {
            use super::*;
            $(
                pub static $name: Hook = Hook {
                    name: match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                        Ok(c) => c,
                        Err(_) => panic!("bad hook name"),
                    },
                    lib: $lib,
                    hook: super::$name as *const c_void,
                    real: {
                        static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
                        &SLOT
                    },
                };
            )*
        }

        /// Typed accessors for the real functions (for the shim's own calls).
        #[allow(non_snake_case, dead_code)]
        pub mod real {
            use super::*;
            $(
                pub fn $name() -> Option<pfn::$name> {
                    let p = entries::$name.real_ptr();
                    if p.is_null() { None } else { Some(unsafe { std::mem::transmute::<*mut c_void, pfn::$name>(p) }) }
                }
            )*
        }

        $(
            #[unsafe(no_mangle)]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                crate::log::hook_called(stringify!($name));
                crate::guard::ffi(stringify!($name), $on_panic, || {
                    let Some(real) = real::$name() else { return $on_missing; };
                    call_impl!(real, ($($arg),*), $($imp)?)
                })
            }
        )*

        pub static $table: &[&Hook] = &[ $( &entries::$name, )* ];
    };
}

pub mod cuda {
    use super::*;
    use crate::{context, launch, memory, procaddr};

    hook_table! {
        table = CUDA_HOOKS, lib = Lib::Cuda, ret = CUresult,
        on_panic = CUDA_ERROR_UNKNOWN, on_missing = CUDA_ERROR_NOT_INITIALIZED;

        // Entry points.
        fn cuInit(flags: c_uint) => context::init;
        fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) => procaddr::get_proc_address;
        fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64, status: *mut CUdriverProcAddressQueryResult) => procaddr::get_proc_address_v2;

        // Memory views.
        fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => memory::mem_get_info;
        fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) => memory::device_total_mem;

        // Device allocations.
        fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) => memory::mem_alloc;
        fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint) => memory::mem_alloc_pitch;
        fn cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) => memory::mem_alloc_managed;
        fn cuMemFree_v2(dptr: CUdeviceptr) => memory::mem_free;
        fn cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64) => memory::mem_create;
        fn cuMemRelease(handle: CUmemGenericAllocationHandle) => memory::mem_release;
        fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64) => memory::mem_map;
        fn cuMemUnmap(ptr: CUdeviceptr, size: usize) => memory::mem_unmap;
        fn cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) => memory::mem_alloc_async;
        fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) => memory::mem_alloc_async;
        fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) => memory::mem_alloc_from_pool_async;
        fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) => memory::mem_alloc_from_pool_async;
        fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) => memory::mem_free_async;
        fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: CUstream) => memory::mem_free_async;
        fn cuArrayCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) => memory::array_create;
        fn cuArray3DCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) => memory::array3d_create;
        fn cuArrayDestroy(handle: CUarray) => memory::array_destroy;
        fn cuMipmappedArrayCreate(handle: *mut CUmipmappedArray, desc: *const CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) => memory::mipmapped_array_create;
        fn cuMipmappedArrayDestroy(handle: CUmipmappedArray) => memory::mipmapped_array_destroy;

        // Contexts (each costs device memory).
        fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) => context::primary_retain;
        fn cuDevicePrimaryCtxRelease(dev: CUdevice) => context::primary_release;
        fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) => context::primary_release;
        fn cuDevicePrimaryCtxReset(dev: CUdevice) => context::primary_reset;
        fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) => context::primary_reset;
        fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) => context::ctx_create_v2;
        fn cuCtxCreate_v3(pctx: *mut CUcontext, params: *mut CUexecAffinityParam, num_params: c_int, flags: c_uint, dev: CUdevice) => context::ctx_create_v3;
        fn cuCtxCreate_v4(pctx: *mut CUcontext, params: *mut CUctxCreateParams, flags: c_uint, dev: CUdevice) => context::ctx_create_v4;
        fn cuCtxDestroy_v2(ctx: CUcontext) => context::ctx_destroy;
        fn cuCtxSetCurrent(ctx: CUcontext);

        // Launches (compute limit).
        fn cuLaunchKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) => launch::launch_kernel;
        fn cuLaunchKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) => launch::launch_kernel_ptsz;
        fn cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) => launch::launch_kernel_ex;
        fn cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) => launch::launch_kernel_ex_ptsz;
        fn cuLaunchCooperativeKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void) => launch::launch_cooperative;
        fn cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void) => launch::launch_cooperative_ptsz;
        fn cuLaunchCooperativeKernelMultiDevice(list: *mut CUDA_LAUNCH_PARAMS, num_devices: c_uint, flags: c_uint) => launch::launch_cooperative_multi;
        fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) => launch::graph_launch;
        fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) => launch::graph_launch_ptsz;
    }
}

pub mod nvml {
    use super::*;
    use crate::nvml as imp;

    hook_table! {
        table = NVML_HOOKS, lib = Lib::Nvml, ret = nvmlReturn_t,
        on_panic = NVML_ERROR_UNKNOWN, on_missing = NVML_ERROR_LIBRARY_NOT_FOUND;

        fn nvmlInit() => imp::init;
        fn nvmlInit_v2() => imp::init;
        fn nvmlInitWithFlags(flags: c_uint) => imp::init_with_flags;
        fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) => imp::memory_info;
        fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) => imp::memory_info_v2;
        fn nvmlDeviceGetComputeRunningProcesses(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) => imp::running_processes_v1;
        fn nvmlDeviceGetComputeRunningProcesses_v2(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) => imp::running_processes_v2;
        fn nvmlDeviceGetComputeRunningProcesses_v3(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) => imp::running_processes_v3;
    }
}

pub use cuda::CUDA_HOOKS;
pub use nvml::NVML_HOOKS;
