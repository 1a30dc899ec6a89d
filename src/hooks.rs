//! The one table of everything the shim exports besides `dlsym`.
//!
//! Each line generates: the exported `extern "C"` function (panic-guarded, traced at debug level),
//! a lazily resolved slot holding the real driver function of the same symbol, and an entry in
//! `CUDA_HOOKS` / `NVML_HOOKS` that `dlsym` and `cuGetProcAddress` use to hand out the hook.
//! A line without `=> impl` forwards to the real function unchanged (but is still observable).
//!
//! Line format: `fn <symbol>(<arg>: <type>, ...) [=> <impl path>];`. The argument list must be
//! exactly `cuda_types::pfn::<symbol>` (generated from the prototype in `include/`), which a
//! `const` per line checks at compile time; add the prototype (and regenerate) for a new symbol.
//!
//! # Safety
//!
//! Each generated export is an `unsafe extern "C" fn`: its callers (C code) must pass what the
//! CUDA/NVML documentation of that symbol requires. The export hands its arguments unchanged to the
//! implementation, which is an `unsafe fn(real, args…)` with this contract, relied on by every
//! `unsafe` block in the implementation modules (`context`, `memory`, `launch`, `nvml`, `procaddr`):
//! - `real` is the real driver function of the *same* symbol, of its generated type;
//! - pointer arguments are the application's, passed to `real` unchanged;
//! - out-pointers are read or written only after a null check, and read only after `real`
//!   returned success (when the driver has filled them).

use crate::ffi::*;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::atomic::AtomicPtr;

mod procaddr;

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

// SAFETY: the raw pointers are addresses of functions (ours, and the slot's `AtomicPtr`): never
// written through, valid for the process lifetime, so sharing a `Hook` between threads is sound.
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

// SAFETY (both arms): `$real` is the real function of the export's own symbol and the arguments
// are the export's, unchanged: the contract of the module's `# Safety` section.
macro_rules! call_impl {
    ($real:ident, ($($arg:ident),*), ) => { unsafe { $real($($arg),*) } };
    ($real:ident, ($($arg:ident),*), $imp:path) => { unsafe { $imp($real, $($arg),*) } };
}

macro_rules! hook_table {
    (
        table = $table:ident, lib = $lib:expr, ret = $ret:ty,
        on_panic = $on_panic:expr, on_missing = $on_missing:expr, versioned = $versioned:literal;
        $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(=> $imp:path)? ; )*
    ) => {
        /// Function types of the real functions, one per symbol: the bindgen-generated ones
        /// (`cuda_types::pfn`, from the prototypes in `include/`), never retyped here.
        pub mod pfn {
            $( pub use cuda_types::pfn::$name; )*
        }

        // Compile-time proof, one per line: the export's hand-written parameter list is exactly
        // the generated type of its symbol (a wrong width or signedness is error E0308 here; a
        // symbol without a prototype in `include/` has no `cuda_types::pfn` type and fails too).
        $( const _: cuda_types::pfn::$name = $name; )*

        // Compile-time proof, one per line of a `versioned` (driver) table: the symbol is the ABI
        // of a `PFN_<name>_v<version>` of NVIDIA's headers (`cuda_types::pfn_table`), so a wrapper
        // is handed out only for (name, version, flags) lookups that the driver answers with it;
        // tests/abi_conformance.rs proves our prototype of it is that PFN type.
        $( const _: () = assert!(
            !$versioned || cuda_types::is_pfn_symbol(stringify!($name)),
            concat!(stringify!($name), " is no cuGetProcAddress threshold of NVIDIA's headers")
        ); )*

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
        #[allow(non_snake_case)]
        pub mod real {
            use super::*;
            $(
                pub fn $name() -> Option<pfn::$name> {
                    let p = entries::$name.real_ptr();
                    // SAFETY: `p` is the driver's address of the symbol `$name` itself (not
                    // null), and `pfn::$name` is the type generated from that symbol's prototype,
                    // which the ABI test checks against NVIDIA's header.
                    if p.is_null() { None } else { Some(unsafe { std::mem::transmute::<*mut c_void, pfn::$name>(p) }) }
                }
            )*
        }

        $(
            #[unsafe(no_mangle)]
            #[allow(clippy::too_many_arguments)] // the driver's own signatures
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
    use super::procaddr;
    use super::*;
    use crate::truth::driver_costs;
    use crate::{context, launch, memory, pool_place};

    hook_table! {
        table = CUDA_HOOKS, lib = Lib::Cuda, ret = CUresult,
        on_panic = CUDA_ERROR_UNKNOWN, on_missing = CUDA_ERROR_NOT_INITIALIZED, versioned = true;

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
        fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) => memory::mem_alloc_async_ptsz;
        fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) => memory::mem_alloc_from_pool_async;
        fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) => memory::mem_alloc_from_pool_async_ptsz;
        fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) => memory::mem_free_async;
        fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: CUstream) => memory::mem_free_async_ptsz;
        // Stream capture: after the first, stream-ordered allocations check for capture.
        fn cuStreamBeginCapture(stream: CUstream) => memory::stream_begin_capture;
        fn cuStreamBeginCapture_ptsz(stream: CUstream) => memory::stream_begin_capture;
        fn cuStreamBeginCapture_v2(stream: CUstream, mode: CUstreamCaptureMode) => memory::stream_begin_capture_v2;
        fn cuStreamBeginCapture_v2_ptsz(stream: CUstream, mode: CUstreamCaptureMode) => memory::stream_begin_capture_v2;
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
        // The 2000 ABIs of cuCtxCreate / cuCtxDestroy take the same parameters as their _v2.
        fn cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) => context::ctx_create_v2;
        fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) => context::ctx_create_v2;
        fn cuCtxCreate_v3(pctx: *mut CUcontext, params: *mut CUexecAffinityParam, num_params: c_int, flags: c_uint, dev: CUdevice) => context::ctx_create_v3;
        fn cuCtxCreate_v4(pctx: *mut CUcontext, params: *mut CUctxCreateParams, flags: c_uint, dev: CUdevice) => context::ctx_create_v4;
        fn cuCtxDestroy(ctx: CUcontext) => context::ctx_destroy;
        fn cuCtxDestroy_v2(ctx: CUcontext) => context::ctx_destroy;
        fn cuCtxSetCurrent(ctx: CUcontext);
        fn cuGreenCtxCreate(pctx: *mut CUgreenCtx, desc: CUdevResourceDesc, dev: CUdevice, flags: c_uint) => context::green_ctx_create;
        fn cuGreenCtxDestroy(ctx: CUgreenCtx) => context::green_ctx_destroy;

        // Driver-held memory, counted up front (driver_costs).
        fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) => driver_costs::module_load;
        fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) => driver_costs::module_load_data;
        fn cuModuleLoadDataEx(module: *mut CUmodule, image: *const c_void, n: c_uint, options: *mut CUjit_option, values: *mut *mut c_void) => driver_costs::module_load_data_ex;
        fn cuModuleLoadFatBinary(module: *mut CUmodule, fatbin: *const c_void) => driver_costs::module_load_fat_binary;
        fn cuModuleUnload(module: CUmodule) => driver_costs::module_unload;
        fn cuLibraryLoadData(library: *mut CUlibrary, code: *const c_void, jit_options: *mut CUjit_option, jit_values: *mut *mut c_void, num_jit: c_uint, lib_options: *mut CUlibraryOption, lib_values: *mut *mut c_void, num_lib: c_uint) => driver_costs::library_load_data;
        fn cuLibraryLoadFromFile(library: *mut CUlibrary, file: *const c_char, jit_options: *mut CUjit_option, jit_values: *mut *mut c_void, num_jit: c_uint, lib_options: *mut CUlibraryOption, lib_values: *mut *mut c_void, num_lib: c_uint) => driver_costs::library_load_from_file;
        fn cuLibraryUnload(library: CUlibrary) => driver_costs::library_unload;
        fn cuCtxSetLimit(limit: CUlimit, value: usize) => driver_costs::ctx_set_limit;
        fn cuGraphAddMemAllocNode(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, num_deps: usize, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS) => driver_costs::graph_add_mem_alloc_node;
        fn cuGraphAddNode(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, num_deps: usize, params: *mut CUgraphNodeParams) => driver_costs::graph_add_node;
        fn cuGraphAddNode_v2(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, edges: *const CUgraphEdgeData, num_deps: usize, params: *mut CUgraphNodeParams) => driver_costs::graph_add_node_with_edges;
        fn cuGraphAddNode_v3(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, edges: *const CUgraphEdgeData, num_deps: usize, params: *mut CUgraphNodeParams) => driver_costs::graph_add_node_with_edges;
        fn cuGraphInstantiate(exec: *mut CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode, log: *mut c_char, log_size: usize) => driver_costs::graph_instantiate_with_log;
        fn cuGraphInstantiate_v2(exec: *mut CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode, log: *mut c_char, log_size: usize) => driver_costs::graph_instantiate_with_log;
        fn cuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: CUgraph, flags: u64) => driver_costs::graph_instantiate;
        fn cuGraphInstantiateWithParams(exec: *mut CUgraphExec, graph: CUgraph, params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) => driver_costs::graph_instantiate_with_params;
        fn cuGraphInstantiateWithParams_ptsz(exec: *mut CUgraphExec, graph: CUgraph, params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) => driver_costs::graph_instantiate_with_params;
        fn cuGraphExecDestroy(exec: CUgraphExec) => driver_costs::graph_exec_destroy;
        fn cuGraphUpload(exec: CUgraphExec, stream: CUstream) => driver_costs::graph_upload;
        fn cuGraphUpload_ptsz(exec: CUgraphExec, stream: CUstream) => driver_costs::graph_upload;
        fn cuDeviceGraphMemTrim(dev: CUdevice) => driver_costs::device_graph_mem_trim;
        fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) => driver_costs::mem_pool_create;
        fn cuMemPoolDestroy(pool: CUmemoryPool) => driver_costs::mem_pool_destroy;
        fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) => pool_place::device_set_mem_pool;
        fn cuMemSetMemPool(location: *mut CUmemLocation, alloc_type: CUmemAllocationType, pool: CUmemoryPool) => pool_place::mem_set_mem_pool;

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
        on_panic = NVML_ERROR_UNKNOWN, on_missing = NVML_ERROR_LIBRARY_NOT_FOUND, versioned = false;

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
