//! Kernel launches: the compute limiter's gate (docs/design.md "Compute limiter").
//!
//! Every launch entry point first tests one process-local flag ([`compute::fast`]). Clear (no
//! device limited and enforced, the monitor not blocking, no feedback word due): the real call,
//! nothing else. Set: [`compute::before`] admits the launch (may sleep), the real call runs, and
//! [`compute::after`] finishes it (timing event, refund of a failed launch).

// The driver's own signatures.
#![allow(clippy::too_many_arguments)]

use crate::compute;
use crate::ffi::*;
use cuda_types::pfn;
use std::ffi::{c_uint, c_void};
use vgpu_core::limiter::cost::Sig;

/// The grid launches: `cuLaunchKernel` (with `extra`) and `cuLaunchCooperativeKernel` (without),
/// each also per-thread-default-stream (`_ptsz`).
macro_rules! grid_launch_fn {
    ($fname:ident, $pfn:ident, $ptsz:expr $(, $extra:ident)?) => {
        pub unsafe fn $fname(
            real: pfn::$pfn,
            f: CUfunction,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            shmem: c_uint,
            stream: CUstream,
            params: *mut *mut c_void,
            $($extra: *mut *mut c_void,)?
        ) -> CUresult {
            if compute::fast() {
                return unsafe { real(f, gx, gy, gz, bx, by, bz, shmem, stream, params $(, $extra)?) };
            }
            let t = compute::before(stream, $ptsz, Sig::kernel(f as u64, [gx, gy, gz], [bx, by, bz], shmem));
            let r = unsafe { real(f, gx, gy, gz, bx, by, bz, shmem, stream, params $(, $extra)?) };
            compute::after(t, r);
            r
        }
    };
}
grid_launch_fn!(launch_kernel, cuLaunchKernel, false, extra);
grid_launch_fn!(launch_kernel_ptsz, cuLaunchKernel_ptsz, true, extra);
grid_launch_fn!(launch_cooperative, cuLaunchCooperativeKernel, false);
grid_launch_fn!(launch_cooperative_ptsz, cuLaunchCooperativeKernel_ptsz, true);

/// Signature and stream of a `cuLaunchKernelEx` configuration (None: invalid, let the driver say so).
fn ex_sig(cfg: *const CUlaunchConfig, f: CUfunction) -> Option<(Sig, CUstream)> {
    if cfg.is_null() {
        return None;
    }
    let c = unsafe { &*cfg };
    Some((
        Sig::kernel(
            f as u64,
            [c.gridDimX, c.gridDimY, c.gridDimZ],
            [c.blockDimX, c.blockDimY, c.blockDimZ],
            c.sharedMemBytes,
        ),
        c.hStream,
    ))
}

macro_rules! ex_fn {
    ($fname:ident, $pfn:ident, $ptsz:expr) => {
        pub unsafe fn $fname(
            real: pfn::$pfn,
            cfg: *const CUlaunchConfig,
            f: CUfunction,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CUresult {
            if compute::fast() {
                return unsafe { real(cfg, f, params, extra) };
            }
            let t = ex_sig(cfg, f).and_then(|(sig, stream)| compute::before(stream, $ptsz, sig));
            let r = unsafe { real(cfg, f, params, extra) };
            compute::after(t, r);
            r
        }
    };
}
ex_fn!(launch_kernel_ex, cuLaunchKernelEx, false);
ex_fn!(launch_kernel_ex_ptsz, cuLaunchKernelEx_ptsz, true);

pub unsafe fn launch_cooperative_multi(
    real: pfn::cuLaunchCooperativeKernelMultiDevice,
    list: *mut CUDA_LAUNCH_PARAMS,
    n: c_uint,
    flags: c_uint,
) -> CUresult {
    if compute::fast() {
        return unsafe { real(list, n, flags) };
    }
    let ts = compute::before_multi(list, n);
    let r = unsafe { real(list, n, flags) };
    compute::after_multi(ts, list, r);
    r
}

macro_rules! graph_fn {
    ($fname:ident, $pfn:ident, $ptsz:expr) => {
        pub unsafe fn $fname(real: pfn::$pfn, exec: CUgraphExec, stream: CUstream) -> CUresult {
            // Graph memory the launch may add to the driver's pool (driver_costs).
            let pool = match crate::truth::driver_costs::graph_launch_begin(exec) {
                Ok(p) => p,
                Err(code) => return code,
            };
            let r = if compute::fast() {
                unsafe { real(exec, stream) }
            } else {
                let t = compute::before(stream, $ptsz, Sig::graph(exec as u64));
                let r = unsafe { real(exec, stream) };
                compute::after(t, r);
                r
            };
            crate::truth::driver_costs::graph_launch_end(pool, r);
            r
        }
    };
}
graph_fn!(graph_launch, cuGraphLaunch, false);
graph_fn!(graph_launch_ptsz, cuGraphLaunch_ptsz, true);
