//! Kernel launches: the compute limiter's gate.

use crate::ffi::*;
use crate::hooks::cuda::pfn;
use std::ffi::{c_uint, c_void};

macro_rules! launch_fn {
    ($fname:ident, $pfn:ident) => {
        pub unsafe fn $fname(
            real: pfn::$pfn, f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
            bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void,
        ) -> CUresult {
            unsafe { real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) }
        }
    };
}
launch_fn!(launch_kernel, cuLaunchKernel);
launch_fn!(launch_kernel_ptsz, cuLaunchKernel_ptsz);

macro_rules! coop_fn {
    ($fname:ident, $pfn:ident) => {
        pub unsafe fn $fname(
            real: pfn::$pfn, f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
            bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void,
        ) -> CUresult {
            unsafe { real(f, gx, gy, gz, bx, by, bz, shmem, stream, params) }
        }
    };
}
coop_fn!(launch_cooperative, cuLaunchCooperativeKernel);
coop_fn!(launch_cooperative_ptsz, cuLaunchCooperativeKernel_ptsz);

pub unsafe fn launch_kernel_ex(real: pfn::cuLaunchKernelEx, cfg: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult {
    unsafe { real(cfg, f, params, extra) }
}
pub unsafe fn launch_kernel_ex_ptsz(real: pfn::cuLaunchKernelEx_ptsz, cfg: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult {
    unsafe { real(cfg, f, params, extra) }
}
pub unsafe fn launch_cooperative_multi(real: pfn::cuLaunchCooperativeKernelMultiDevice, list: *mut CUDA_LAUNCH_PARAMS, n: c_uint, flags: c_uint) -> CUresult {
    unsafe { real(list, n, flags) }
}
pub unsafe fn graph_launch(real: pfn::cuGraphLaunch, exec: CUgraphExec, stream: CUstream) -> CUresult {
    unsafe { real(exec, stream) }
}
pub unsafe fn graph_launch_ptsz(real: pfn::cuGraphLaunch_ptsz, exec: CUgraphExec, stream: CUstream) -> CUresult {
    unsafe { real(exec, stream) }
}
