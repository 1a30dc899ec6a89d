//! Modules, libraries, functions/kernels. Images are not parsed: any name resolves, with a stable
//! handle per (module, name); globals get a stable address inside a tracked (uncharged) allocation.

use crate::context::current;
use crate::memory::{AllocKind, alloc_tracked, free_tracked};
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};

pub(crate) const GLOBAL_BYTES: u64 = 64 << 10;

pub(crate) struct Module {
    /// Owning context (0 for a library's module: context-independent).
    pub ctx: u64,
    pub funcs: HashMap<String, u64>,
    pub globals: HashMap<String, u64>,
}

pub(crate) struct Func {
    pub module: u64,
    #[allow(dead_code)]
    pub name: String,
    pub attrs: HashMap<i32, i32>,
}

pub(crate) struct Library {
    pub module: u64,
}

fn new_module(sim: &mut Sim, ctx: u64) -> u64 {
    let h = sim::new_handle();
    sim.modules.insert(h, Module { ctx, funcs: HashMap::new(), globals: HashMap::new() });
    h
}

fn unload(sim: &mut Sim, h: u64) -> bool {
    let Some(m) = sim.modules.remove(&h) else { return false };
    crate::drivercost::module_unloaded(sim, h);
    for f in m.funcs.values() {
        sim.funcs.remove(f);
    }
    for g in m.globals.values() {
        free_tracked(sim, *g);
    }
    true
}

pub(crate) fn unload_ctx_modules(sim: &mut Sim, ctx: u64) {
    let hs: Vec<u64> = sim.modules.iter().filter(|(_, m)| m.ctx == ctx).map(|(h, _)| *h).collect();
    for h in hs {
        unload(sim, h);
    }
}

fn cstr(p: *const c_char) -> Result<String, CUresult> {
    nonnull(p)?;
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

pub(crate) fn module_load(pm: *mut CUmodule, fname: *const c_char) -> CUresult {
    cu_try!({
        nonnull(pm)?;
        let path = cstr(fname)?;
        let mut sim = sim::lock();
        let (ctx, dev) = current(&mut sim)?;
        if !std::path::Path::new(&path).is_file() {
            return Err(CUDA_ERROR_FILE_NOT_FOUND);
        }
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        let h = new_module(&mut sim, ctx);
        if let Err(e) = crate::drivercost::module_loaded(&mut sim, h, dev, len) {
            unload(&mut sim, h);
            return Err(e);
        }
        unsafe { out(pm, h as CUmodule) }
    })
}

pub(crate) fn module_load_data(pm: *mut CUmodule, image: *const c_void) -> CUresult {
    cu_try!({
        nonnull(pm)?;
        nonnull(image)?;
        let mut sim = sim::lock();
        let (ctx, dev) = current(&mut sim)?;
        let h = new_module(&mut sim, ctx);
        if let Err(e) =
            crate::drivercost::module_loaded(&mut sim, h, dev, unsafe { crate::drivercost::image_len(image) })
        {
            unload(&mut sim, h);
            return Err(e);
        }
        unsafe { out(pm, h as CUmodule) }
    })
}

pub(crate) fn module_unload(m: CUmodule) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        if sim.libs.values().any(|l| l.module == m as u64) || !unload(&mut sim, m as u64) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        Ok(())
    })
}

fn function_in(sim: &mut Sim, m: u64, name: String) -> Result<u64, CUresult> {
    let md = sim.modules.get_mut(&m).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if let Some(&f) = md.funcs.get(&name) {
        return Ok(f);
    }
    let f = sim::new_handle();
    md.funcs.insert(name.clone(), f);
    sim.funcs.insert(f, Func { module: m, name, attrs: HashMap::new() });
    Ok(f)
}

pub(crate) fn module_get_function(pf: *mut CUfunction, m: CUmodule, name: *const c_char) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pf)?;
        let name = cstr(name)?;
        let mut sim = sim::lock();
        let f = function_in(&mut sim, m as u64, name)?;
        unsafe { out(pf, f as CUfunction) }
    })
}

pub(crate) fn module_get_global(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    m: CUmodule,
    name: *const c_char,
) -> CUresult {
    cu_try!({
        check_init()?;
        let name = cstr(name)?;
        let mut sim = sim::lock();
        let md = sim.modules.get(&(m as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let addr = match md.globals.get(&name) {
            Some(&a) => a,
            None => {
                let mctx = md.ctx;
                let (cur, dev) = current(&mut sim)?;
                let owner = if mctx == 0 { cur } else { mctx };
                let a = alloc_tracked(&mut sim, owner, dev, GLOBAL_BYTES, 0, AllocKind::Global(m as u64))?;
                sim.modules.get_mut(&(m as u64)).unwrap().globals.insert(name, a);
                a
            }
        };
        unsafe {
            if !dptr.is_null() {
                *dptr = addr;
            }
            if !bytes.is_null() {
                *bytes = GLOBAL_BYTES as usize;
            }
        }
        Ok(())
    })
}

pub(crate) fn module_get_loading_mode(mode: *mut u32) -> CUresult {
    cu_try!({
        check_init()?;
        unsafe { out(mode, 2) } // CU_MODULE_LAZY_LOADING
    })
}

pub(crate) fn library_load_data(pl: *mut CUlibrary, code: *const c_void, len: u64) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pl)?;
        nonnull(code)?;
        let mut sim = sim::lock();
        let m = new_module(&mut sim, 0);
        let dev = crate::drivercost::library_device(&mut sim);
        if let Err(e) = crate::drivercost::module_loaded(&mut sim, m, dev, len) {
            unload(&mut sim, m);
            return Err(e);
        }
        let l = sim::new_handle();
        sim.libs.insert(l, Library { module: m });
        unsafe { out(pl, l as CUlibrary) }
    })
}

pub(crate) fn library_unload(l: CUlibrary) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        let lib = sim.libs.remove(&(l as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        unload(&mut sim, lib.module);
        Ok(())
    })
}

pub(crate) fn library_get_module(pm: *mut CUmodule, l: CUlibrary) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let lib = sim.libs.get(&(l as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        unsafe { out(pm, lib.module as CUmodule) }
    })
}

pub(crate) fn library_get_kernel(pk: *mut CUkernel, l: CUlibrary, name: *const c_char) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pk)?;
        let name = cstr(name)?;
        let mut sim = sim::lock();
        let m = sim.libs.get(&(l as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?.module;
        let f = function_in(&mut sim, m, name)?;
        unsafe { out(pk, f as CUkernel) }
    })
}

/// A kernel handle is its function handle (so kernels can also be passed to cuLaunchKernel).
pub(crate) fn kernel_get_function(pf: *mut CUfunction, k: CUkernel) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pf)?;
        let sim = sim::lock();
        if !sim.funcs.contains_key(&(k as u64)) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        unsafe { out(pf, k as CUfunction) }
    })
}

pub(crate) fn func_get_module(pm: *mut CUmodule, f: CUfunction) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let func = sim.funcs.get(&(f as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        unsafe { out(pm, func.module as CUmodule) }
    })
}

fn default_func_attr(a: i32) -> Option<i32> {
    Some(match a {
        0 => 1024,    // MAX_THREADS_PER_BLOCK
        1 => 0,       // SHARED_SIZE_BYTES
        2 => 0,       // CONST_SIZE_BYTES
        3 => 0,       // LOCAL_SIZE_BYTES
        4 => 32,      // NUM_REGS
        5 => 90,      // PTX_VERSION
        6 => 90,      // BINARY_VERSION
        7 => 0,       // CACHE_MODE_CA
        8 => 49152,   // MAX_DYNAMIC_SHARED_SIZE_BYTES
        9 => -1,      // PREFERRED_SHARED_MEMORY_CARVEOUT
        10 => 0,      // CLUSTER_SIZE_MUST_BE_SET
        11..=13 => 0, // REQUIRED_CLUSTER_WIDTH/HEIGHT/DEPTH
        14 => 0,      // NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        15 => 0,      // CLUSTER_SCHEDULING_POLICY_PREFERENCE
        _ => return None,
    })
}

pub(crate) fn func_get_attribute(pi: *mut i32, attr: i32, f: CUfunction) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(pi)?;
        let sim = sim::lock();
        let func = sim.funcs.get(&(f as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let v = func.attrs.get(&attr).copied().or_else(|| default_func_attr(attr)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        unsafe { out(pi, v) }
    })
}

pub(crate) fn func_set_attribute(f: CUfunction, attr: i32, value: i32) -> CUresult {
    cu_try!({
        check_init()?;
        let mut sim = sim::lock();
        let func = sim.funcs.get_mut(&(f as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        match attr {
            8 if (0..=232_448).contains(&value) => {}
            9 if (-1..=100).contains(&value) => {}
            10..=15 => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        func.attrs.insert(attr, value);
        Ok(())
    })
}
