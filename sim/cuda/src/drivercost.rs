//! Memory the driver holds for a process outside every allocation entry point
//! (sim/README.md "Knobs"), each cost off by default:
//!
//! * modules and libraries (`VGPU_SIM_MODULE_MIB`): each load costs at least that many MiB, or its
//!   image size rounded up to 2 MiB when larger (file size for the `*FromFile`/`cuModuleLoad`
//!   paths, the ELF / fatbin header's size for in-memory images);
//! * `cuCtxSetLimit` (`VGPU_SIM_LIMIT_COSTS=1`): a stack size above the default reserves
//!   `(size - 1024) × 2048 resident threads × SM count` of local memory; a malloc heap or printf FIFO
//!   above its default reserves the excess; per context, given back when the limit is lowered or the
//!   context goes;
//! * graph memory: a launch of an executable graph with memory-allocation nodes (explicit, or
//!   `cuMemAllocAsync` captured from a stream) grows the process's graph pool on that device by
//!   what the pool's free part lacks for the graph's footprint; allocations the graph does not free
//!   stay used until freed outside it; `cuDeviceGraphMemTrim` gives the unused part back (always
//!   on: it only matters to graphs with memory nodes, which nothing used before);
//! * a hidden primary context (`VGPU_SIM_HIDDEN_PRIMARY=1`): `cuGetExportTable` with
//!   [`HIDDEN_TABLE_ID`] hands out a private table whose entry 1 retains the primary context of an
//!   ordinal and makes it current, as NVIDIA's runtime does through its own export table, so no
//!   hooked entry point sees the context come to be.
//!
//! All of it is charged to the process's record in the state file: visible in NVML per-process
//! memory and the device's free memory.

use crate::context::{check_dev, current};
use crate::memory::{charge, map_backing, uncharge, unmap_backing};
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out, simlog};
use sim_state::{GRANULE, MAX_DEVICES, round_up};
use std::ffi::c_void;
use std::sync::OnceLock;

/// Resident threads per SM the stack reservation is sized for (Hopper / Ampere: 2048).
pub(crate) const THREADS_PER_SM: u64 = 2048;
pub(crate) const DEFAULT_STACK: u64 = 1024;
pub(crate) const DEFAULT_PRINTF_FIFO: u64 = 1 << 20;
pub(crate) const DEFAULT_MALLOC_HEAP: u64 = 8 << 20;
/// `cuGetExportTable` id of the hidden-primary table: the ASCII bytes "vgpu-sim-hidden!".
pub(crate) const HIDDEN_TABLE_ID: [u8; 16] = *b"vgpu-sim-hidden!";

struct CostKnobs {
    module_bytes: Option<u64>,
    limit_costs: bool,
    hidden_primary: bool,
}

fn cost_knobs() -> &'static CostKnobs {
    static K: OnceLock<CostKnobs> = OnceLock::new();
    K.get_or_init(|| {
        let on = |n: &str| std::env::var(n).map(|v| v.trim() == "1").unwrap_or(false);
        CostKnobs {
            module_bytes: std::env::var("VGPU_SIM_MODULE_MIB")
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|m| m << 20),
            limit_costs: on("VGPU_SIM_LIMIT_COSTS"),
            hidden_primary: on("VGPU_SIM_HIDDEN_PRIMARY"),
        }
    })
}

/// What the driver holds per process, besides allocations.
#[derive(Default)]
pub(crate) struct Held {
    /// Module handle → (device, bytes).
    pub modules: std::collections::HashMap<u64, (usize, u64)>,
    /// (context, CUlimit) → (value, device, bytes charged).
    pub limits: std::collections::HashMap<(u64, u32), (u64, usize, u64)>,
    /// Graph pool per device.
    pub graph_pool: [GraphPool; MAX_DEVICES],
    /// Graph allocations alive after their launch (not freed inside the graph): address →
    /// (device, bytes of the pool they use).
    pub graph_live: std::collections::HashMap<u64, (usize, u64)>,
    /// Address space of live graph allocations whose graph was destroyed: address → length.
    pub orphan_backing: std::collections::HashMap<u64, u64>,
}

/// A device's graph memory pool: `reserved` is charged to the process, `used` by live graph
/// allocations (during a launch the whole footprint is used).
#[derive(Default, Clone, Copy)]
pub(crate) struct GraphPool {
    pub reserved: u64,
    pub reserved_high: u64,
    pub used: u64,
    pub used_high: u64,
}

// ---- modules -------------------------------------------------------------------------------------

/// Size of an in-memory image from its header: ELF (section header table end) or fatbin
/// (header size + fat size); 0 when unknown (PTX text and anything else).
pub(crate) unsafe fn image_len(image: *const c_void) -> u64 {
    if image.is_null() {
        return 0;
    }
    let b = image as *const u8;
    // SAFETY: an image passed to the driver is readable for at least its header.
    unsafe {
        let head = std::slice::from_raw_parts(b, 16);
        if head[..4] == [0x7f, b'E', b'L', b'F'] && head[4] == 2 {
            let rd64 = |o: usize| (b.add(o) as *const u64).read_unaligned();
            let rd16 = |o: usize| (b.add(o) as *const u16).read_unaligned() as u64;
            return rd64(0x28) + rd16(0x3a) * rd16(0x3c);
        }
        if (b as *const u32).read_unaligned() == 0xBA55_ED50 {
            let hsize = (b.add(6) as *const u16).read_unaligned() as u64;
            let fsize = (b.add(8) as *const u64).read_unaligned();
            return hsize + fsize;
        }
    }
    0
}

/// Charge a module load of `len` image bytes on `dev` (nothing when the knob is off).
pub(crate) fn module_loaded(sim: &mut Sim, module: u64, dev: usize, len: u64) -> Result<(), CUresult> {
    let Some(min) = cost_knobs().module_bytes else { return Ok(()) };
    let bytes = min.max(round_up(len, GRANULE));
    if bytes == 0 {
        return Ok(());
    }
    charge(dev, bytes)?;
    sim.held.modules.insert(module, (dev, bytes));
    simlog!("module {:#x}: {} bytes held on device {}", module, bytes, dev);
    Ok(())
}

pub(crate) fn module_unloaded(sim: &mut Sim, module: u64) {
    if let Some((dev, bytes)) = sim.held.modules.remove(&module) {
        uncharge(dev, bytes);
    }
}

/// Device a context-independent library is loaded onto: the current context's, else device 0.
pub(crate) fn library_device(sim: &mut Sim) -> usize {
    current(sim).map(|(_, d)| d).unwrap_or(crate::visible()[0])
}

// ---- context limits ------------------------------------------------------------------------------

fn limit_cost(limit: u32, v: u64) -> u64 {
    let sms = crate::state().sm_count() as u64;
    let raw = match limit {
        0 => v.saturating_sub(DEFAULT_STACK).saturating_mul(THREADS_PER_SM).saturating_mul(sms),
        1 => v.saturating_sub(DEFAULT_PRINTF_FIFO),
        2 => v.saturating_sub(DEFAULT_MALLOC_HEAP),
        _ => 0,
    };
    round_up(raw, GRANULE)
}

fn default_limit(limit: u32) -> Option<u64> {
    Some(match limit {
        0 => DEFAULT_STACK,
        1 => DEFAULT_PRINTF_FIFO,
        2 => DEFAULT_MALLOC_HEAP,
        3 => 2,
        4 => 2048,
        5 | 6 => 0,
        _ => return None,
    })
}

pub(crate) fn ctx_get_limit(v: *mut usize, limit: u32) -> CUresult {
    cu_try!({
        check_init()?;
        let d = default_limit(limit).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut sim = sim::lock();
        let x = match current(&mut sim) {
            Ok((h, _)) => sim.held.limits.get(&(h, limit)).map_or(d, |e| e.0),
            Err(_) => d,
        };
        unsafe { out(v, x as usize) }
    })
}

pub(crate) fn ctx_set_limit(limit: u32, v: usize) -> CUresult {
    cu_try!({
        check_init()?;
        default_limit(limit).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut sim = sim::lock();
        let (h, dev) = current(&mut sim)?;
        let want = if cost_knobs().limit_costs { limit_cost(limit, v as u64) } else { 0 };
        let had = sim.held.limits.get(&(h, limit)).map_or(0, |e| e.2);
        if want > had {
            charge(dev, want - had)?;
        } else {
            uncharge(dev, had - want);
        }
        sim.held.limits.insert((h, limit), (v as u64, dev, want));
        if want != had {
            simlog!("cuCtxSetLimit({}, {}): {} bytes held on device {}", limit, v, want, dev);
        }
        Ok(())
    })
}

/// Context `h` is gone: its limits' reservations go with it.
pub(crate) fn ctx_gone(sim: &mut Sim, h: u64) {
    let keys: Vec<(u64, u32)> = sim.held.limits.keys().filter(|k| k.0 == h).copied().collect();
    for k in keys {
        if let Some((_, dev, bytes)) = sim.held.limits.remove(&k) {
            uncharge(dev, bytes);
        }
    }
}

// ---- graph memory --------------------------------------------------------------------------------

/// A launch of a graph with `footprint` bytes of allocation nodes on `dev`: the pool grows by what
/// its free part lacks (refused: nothing launched), the allocations in `keeps` (address, bytes; not
/// freed inside the graph) stay used after it, and the live graph allocations in `frees` (freed by
/// the graph's free nodes) go back to the pool.
pub(crate) fn graph_pool_launch(
    sim: &mut Sim,
    dev: usize,
    footprint: u64,
    keeps: &[(u64, u64)],
    frees: &[u64],
) -> Result<(), CUresult> {
    if keeps.iter().any(|k| sim.held.graph_live.contains_key(&k.0)) {
        return Err(CUDA_ERROR_INVALID_VALUE); // an allocation of its last launch was not freed
    }
    let p = sim.held.graph_pool[dev];
    let free = p.reserved - p.used;
    if footprint > free {
        charge(dev, footprint - free)?;
        let p = &mut sim.held.graph_pool[dev];
        p.reserved += footprint - free;
        p.reserved_high = p.reserved_high.max(p.reserved);
        simlog!("graph pool on device {} grew to {} bytes", dev, p.reserved);
    }
    let p = &mut sim.held.graph_pool[dev];
    p.used_high = p.used_high.max(p.used + footprint);
    for f in frees {
        graph_free(sim, *f);
    }
    for &(addr, bytes) in keeps {
        sim.held.graph_live.insert(addr, (dev, bytes));
        sim.held.graph_pool[dev].used += bytes;
    }
    Ok(())
}

/// `cuGraphUpload` of an executable with a graph-memory footprint on `dev`: the graph pool grows
/// to back it (as its launch would), nothing is allocated yet.
pub(crate) fn graph_pool_upload(sim: &mut Sim, dev: usize, footprint: u64) -> Result<(), CUresult> {
    let p = sim.held.graph_pool[dev];
    let free = p.reserved - p.used;
    if footprint > free {
        charge(dev, footprint - free)?;
        let p = &mut sim.held.graph_pool[dev];
        p.reserved += footprint - free;
        p.reserved_high = p.reserved_high.max(p.reserved);
        simlog!("graph pool on device {} grew to {} bytes (upload)", dev, p.reserved);
    }
    Ok(())
}

/// A live graph allocation is freed (outside its graph, or by another graph's free node): its
/// memory goes back to the graph pool, not to the device. `false`: not a live graph allocation.
pub(crate) fn graph_free(sim: &mut Sim, addr: u64) -> bool {
    let Some((dev, bytes)) = sim.held.graph_live.remove(&addr) else { return false };
    let p = &mut sim.held.graph_pool[dev];
    p.used = p.used.saturating_sub(bytes);
    crate::graph::drop_orphan_backing(sim, addr);
    true
}

/// `cuDeviceGraphMemTrim`: give the unused part of device `dev`'s graph pool back.
pub(crate) fn graph_pool_trim(sim: &mut Sim, dev: usize) {
    let p = &mut sim.held.graph_pool[dev];
    let give = p.reserved - p.used;
    if give > 0 {
        p.reserved = p.used;
        uncharge(dev, give);
        simlog!("graph pool on device {} trimmed by {} bytes", dev, give);
    }
}

/// The last context on device `dev` went: its graph pool and live graph allocations go with it.
pub(crate) fn graph_pool_release(sim: &mut Sim, dev: usize) {
    let live: Vec<u64> = sim.held.graph_live.iter().filter(|e| e.1.0 == dev).map(|e| *e.0).collect();
    for a in live {
        graph_free(sim, a);
    }
    graph_pool_trim(sim, dev);
}

pub(crate) fn device_graph_mem_trim(dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        graph_pool_trim(&mut sim::lock(), d);
        Ok(())
    })
}

/// `cuDeviceGetGraphMemAttribute`: USED_MEM_CURRENT (0), USED_MEM_HIGH (1), RESERVED_MEM_CURRENT
/// (2), RESERVED_MEM_HIGH (3), as `cuuint64_t`.
pub(crate) fn device_get_graph_mem_attribute(dev: CUdevice, attr: i32, value: *mut c_void) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        nonnull(value)?;
        let p = sim::lock().held.graph_pool[d];
        let v = match attr {
            0 => p.used,
            1 => p.used_high,
            2 => p.reserved,
            3 => p.reserved_high,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        unsafe { out(value as *mut u64, v) }
    })
}

/// Address space for a memory-allocation node (backed lazily; charged through the graph pool).
pub(crate) fn mem_node_backing(bytes: u64) -> Result<(u64, u64), CUresult> {
    let len = round_up(bytes.max(1), 4096);
    map_backing(len).map(|b| (b, len)).ok_or(CUDA_ERROR_OUT_OF_MEMORY)
}

pub(crate) fn mem_node_unback(base: u64, len: u64) {
    unmap_backing(base, len);
}

// ---- hidden primary context ----------------------------------------------------------------------

/// Entry 1 of the hidden table: retain the primary context of `ordinal` and make it current on
/// the calling thread (what the runtime's lazy initialisation does).
unsafe extern "C" fn hidden_retain(pctx: *mut CUcontext, ordinal: CUdevice) -> CUresult {
    let mut c: CUcontext = std::ptr::null_mut();
    let r = crate::context::primary_retain(&mut c, ordinal);
    if r != CUDA_SUCCESS {
        return r;
    }
    let r = crate::context::set_current(c);
    if r == CUDA_SUCCESS && !pctx.is_null() {
        unsafe { *pctx = c };
    }
    r
}

#[repr(C)]
struct HiddenTable {
    size: usize,
    retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult,
}

static HIDDEN: HiddenTable = HiddenTable { size: std::mem::size_of::<HiddenTable>(), retain: hidden_retain };

/// `cuGetExportTable`: the hidden-primary table when enabled, else refused as before.
pub(crate) unsafe fn get_export_table(pp: *mut *const c_void, id: *const CUuuid) -> CUresult {
    if pp.is_null() || id.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let u = unsafe { (*id).bytes };
    if cost_knobs().hidden_primary && u == HIDDEN_TABLE_ID {
        unsafe { *pp = &HIDDEN as *const HiddenTable as *const c_void };
        return CUDA_SUCCESS;
    }
    unsafe { *pp = std::ptr::null() };
    simlog!("cuGetExportTable({:02x?}) refused", u);
    CUDA_ERROR_NOT_SUPPORTED
}
