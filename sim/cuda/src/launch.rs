//! Kernel launches in simulated time. Duration = `VGPU_SIM_KERNEL_NS`, else
//! gridX·gridY·gridZ × `VGPU_SIM_NS_PER_BLOCK` (min 1 µs). The device runs kernels of all processes
//! one at a time: start = max(now, stream tail, device tail), reserved by CAS on the shared device
//! tail; the interval is recorded for this process. A launch sleeps while its stream has more than
//! `VGPU_SIM_MAX_QUEUE_US` of queued work (driver back-pressure). A launch into a capturing stream
//! adds a kernel node to the capture graph instead.
//!
//! Time-sliced (`VGPU_SIM_TIMESLICE_US`): a launch queues the kernel in this process's backlog of
//! the device's round-robin schedule (`sim_state::Slicer`, all streams of the process in launch
//! order) and the stream's tail takes its ticket; back-pressure applies to the process's backlog.

use crate::sim::{self, Sim};
use crate::stream::{self, SKey};
use crate::types::*;
use crate::{check_init, cu_try, knobs, my_slot, nonnull, simlog, state};

#[derive(Clone, Copy, Debug)]
pub(crate) struct KParams {
    pub func: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shmem: u32,
}

impl KParams {
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }

    fn validate(&self) -> Result<(), CUresult> {
        if self.grid.contains(&0) || self.block.contains(&0) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let threads: u64 = self.block.iter().map(|&b| b as u64).product();
        if threads > 1024 || self.block[2] > 64 || self.grid[1] > 65535 || self.grid[2] > 65535 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    }
}

pub(crate) fn duration_ns(p: &KParams) -> u64 {
    let k = knobs();
    match k.kernel_ns {
        Some(ns) => ns.max(1),
        None => (p.blocks() * k.ns_per_block).max(1000),
    }
}

/// Max co-resident blocks per SM for a block of `threads` threads.
pub(crate) fn max_blocks_per_sm(threads: u64) -> u64 {
    (2048 / threads.max(1)).clamp(1, 32)
}

/// Schedule one kernel on stream `k` (caller holds the lock; back-pressure already applied).
fn submit(sim: &mut Sim, k: SKey, p: &KParams) {
    let s = sim.streams.get_mut(&k).expect("resolved stream");
    let dur = duration_ns(p);
    let dev = s.dev;
    if state().timeslice_ns() > 0 {
        let ticket = state().queue(my_slot(), dev, dur);
        s.tail.work[dev] = ticket;
        simlog!("kernel {:#x} grid {:?} on dev {}: ticket {} ({} ns)", p.func, p.grid, dev, ticket, dur);
    } else {
        let earliest = sim::now().max(s.tail.at);
        let (start, end) = state().submit(my_slot(), dev, earliest, dur);
        s.tail.at = end;
        simlog!("kernel {:#x} grid {:?} on dev {}: [{}, {}) {} ns", p.func, p.grid, dev, start, end, dur);
    }
    let (ctx, tail) = (s.ctx, s.tail);
    crate::context::note_tail(sim, ctx, tail);
}

/// Time-sliced: how long to wait before queuing more on `dev` (this process's backlog beyond
/// `max_q`; the backlog drains at most in real time).
fn backlog_wait(dev: usize, max_q: u64) -> u64 {
    let (served, queued) = state().served_ns(my_slot(), dev);
    (queued - served).saturating_sub(max_q)
}

/// Launch kernels in sequence on one stream (graph launches pass several).
pub(crate) fn launch_seq(ps: &[KParams], h: CUstream, ptds: bool, check_func: bool) -> CUresult {
    cu_try!({
        check_init()?;
        for p in ps {
            p.validate()?;
        }
        my_slot(); // register before taking the lock
        let max_q = knobs().max_queue_ns;
        for p in ps {
            loop {
                let mut sim = sim::lock();
                let k = stream::resolve(&mut sim, h, ptds)?;
                if check_func && !sim.funcs.contains_key(&p.func) {
                    return Err(CUDA_ERROR_INVALID_HANDLE);
                }
                if let Some(c) = sim.streams.get(&k).and_then(|s| s.capture.as_ref()) {
                    let (g, deps) = (c.graph, c.deps.clone());
                    let node = crate::graph::add_kernel_node(&mut sim, g, &deps, *p)?;
                    sim.streams.get_mut(&k).unwrap().capture.as_mut().unwrap().deps = vec![node];
                    break;
                }
                let now = sim::now();
                let tail = sim.streams[&k].tail.at;
                if state().timeslice_ns() > 0 {
                    let w = backlog_wait(sim.streams[&k].dev, max_q);
                    if w > 0 {
                        drop(sim);
                        sim::sleep_until(now + w);
                        continue;
                    }
                } else if tail > now + max_q {
                    drop(sim);
                    sim::sleep_until(tail - max_q);
                    continue;
                }
                submit(&mut sim, k, p);
                break;
            }
        }
        Ok(())
    })
}

pub(crate) fn launch_kernel(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shmem: u32,
    h: CUstream,
    ptds: bool,
) -> CUresult {
    launch_seq(&[KParams { func: f as u64, grid, block, shmem }], h, ptds, true)
}

pub(crate) fn launch_cooperative(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shmem: u32,
    h: CUstream,
    ptds: bool,
) -> CUresult {
    if check_init().is_ok() {
        let p = KParams { func: f as u64, grid, block, shmem };
        let threads: u64 = block.iter().map(|&b| b as u64).product();
        if p.blocks() > max_blocks_per_sm(threads) * state().sm_count() as u64 {
            return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
        }
    }
    launch_kernel(f, grid, block, shmem, h, ptds)
}

pub(crate) fn launch_kernel_ex(cfg: *const CUlaunchConfig, f: CUfunction, ptds: bool) -> CUresult {
    if let Err(e) = nonnull(cfg) {
        return e;
    }
    let c = unsafe { *cfg };
    let grid = [c.grid_dim_x, c.grid_dim_y, c.grid_dim_z];
    let block = [c.block_dim_x, c.block_dim_y, c.block_dim_z];
    let mut coop = false;
    if c.num_attrs > 0 {
        if c.attrs.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        for i in 0..c.num_attrs as usize {
            let a = unsafe { *c.attrs.add(i) };
            if a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && (a.value[0] & 0xffff_ffff) != 0 {
                coop = true;
            }
        }
    }
    if coop {
        launch_cooperative(f, grid, block, c.shared_mem_bytes, c.h_stream, ptds)
    } else {
        launch_kernel(f, grid, block, c.shared_mem_bytes, c.h_stream, ptds)
    }
}

pub(crate) fn launch_cooperative_multi_device(list: *mut CUDA_LAUNCH_PARAMS, n: u32, _flags: u32) -> CUresult {
    if list.is_null() || n == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for i in 0..n as usize {
        let p = unsafe { *list.add(i) };
        let r = launch_cooperative(
            p.function,
            [p.grid_dim_x, p.grid_dim_y, p.grid_dim_z],
            [p.block_dim_x, p.block_dim_y, p.block_dim_z],
            p.shared_mem_bytes,
            p.h_stream,
            false,
        );
        if r != CUDA_SUCCESS {
            return r;
        }
    }
    CUDA_SUCCESS
}

pub(crate) fn occupancy(nblocks: *mut i32, _f: CUfunction, block_size: i32, _shmem: usize) -> CUresult {
    cu_try!({
        check_init()?;
        if block_size <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        unsafe { crate::out(nblocks, max_blocks_per_sm(block_size as u64) as i32) }
    })
}
