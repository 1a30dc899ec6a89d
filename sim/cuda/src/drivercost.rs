//! Memory the driver holds for a process outside every allocation entry point (docs/design.md
//! "Simulated GPU knobs"), each cost off by default:
//!
//! * modules and libraries (`VGPU_SIM_MODULE_MIB`): each load costs at least that many MiB, or its
//!   image size rounded up to 2 MiB when larger (file size for the `*FromFile`/`cuModuleLoad`
//!   paths, the ELF / fatbin header's size for in-memory images);
//! * `cuCtxSetLimit` (`VGPU_SIM_LIMIT_COSTS=1`): a stack size above the default reserves
//!   `(size - 1024) × 2048 resident threads × SM count` of local memory; a malloc heap or printf FIFO
//!   above its default reserves the excess; per context, given back when the limit is lowered or the
//!   context goes;
//! * graph memory: a launch of an executable graph with memory-allocation nodes grows the process's
//!   graph pool on that device to the graph's footprint; `cuDeviceGraphMemTrim` gives it back
//!   (always on: it only matters to graphs with memory nodes, which nothing used before);
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
    /// Graph pool per device: (reserved now, reserved high).
    pub graph_pool: [(u64, u64); MAX_DEVICES],
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

/// Grow device `dev`'s graph pool to hold `bytes` (a launch of a graph with that footprint).
pub(crate) fn graph_pool_grow(sim: &mut Sim, dev: usize, bytes: u64) -> Result<(), CUresult> {
    let (reserved, high) = sim.held.graph_pool[dev];
    if bytes <= reserved {
        return Ok(());
    }
    charge(dev, bytes - reserved)?;
    sim.held.graph_pool[dev] = (bytes, high.max(bytes));
    simlog!("graph pool on device {} grew to {} bytes", dev, bytes);
    Ok(())
}

/// Give device `dev`'s graph pool back (trim, or the last context on the device went).
pub(crate) fn graph_pool_release(sim: &mut Sim, dev: usize) {
    let (reserved, high) = sim.held.graph_pool[dev];
    if reserved > 0 {
        uncharge(dev, reserved);
        simlog!("graph pool on device {} trimmed ({} bytes)", dev, reserved);
    }
    sim.held.graph_pool[dev] = (0, high);
}

pub(crate) fn device_graph_mem_trim(dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        graph_pool_release(&mut sim::lock(), d);
        Ok(())
    })
}

/// `cuDeviceGetGraphMemAttribute`: USED_MEM_CURRENT (0), USED_MEM_HIGH (1), RESERVED_MEM_CURRENT
/// (2), RESERVED_MEM_HIGH (3), as `cuuint64_t`. The pool is fully used while it exists.
pub(crate) fn device_get_graph_mem_attribute(dev: CUdevice, attr: i32, value: *mut c_void) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        nonnull(value)?;
        let (cur, high) = sim::lock().held.graph_pool[d];
        let v = match attr {
            0 | 2 => cur,
            1 | 3 => high,
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
