//! `cuGetProcAddress` / `cuGetProcAddress_v2`: ask the real driver first, then swap the returned
//! pointer for our hook when it is the real address of a hooked symbol. Mapping by address keeps
//! every (name, ABI version, per-thread flag) variant apart and covers the lookup of
//! `"cuGetProcAddress"` itself (libcudart's path). A driver whose `cuGetProcAddress` hands out
//! other addresses than its exported symbols (a thunk per entry point) is matched by version
//! instead: NVIDIA's thresholds (`pfn_lookup`) name the symbol whose ABI the driver answered with,
//! and a wrapped symbol's hook is handed out for it.

use crate::ffi::*;
use crate::hooks;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use vgpu_core::symname::base_name;
use vgpu_core::sync::OnceBox;

/// (real address, hook address), sorted by real address.
fn address_map() -> &'static [(usize, usize)] {
    // Not a OnceLock: a forked child must never wait for an initialiser of a parent thread.
    static MAP: OnceBox<Vec<(usize, usize)>> = OnceBox::new();
    MAP.get_or_init(|| {
        let mut v: Vec<(usize, usize)> = hooks::CUDA_HOOKS
            .iter()
            .filter_map(|h| {
                let real = h.real_ptr();
                (!real.is_null()).then_some((real as usize, h.hook as usize))
            })
            .collect();
        v.sort_unstable();
        v.dedup_by_key(|e| e.0);
        v
    })
}

/// Our hook for a real driver address, if that address is one we wrap.
pub fn hook_for(real: *mut c_void) -> Option<*mut c_void> {
    let map = address_map();
    map.binary_search_by_key(&(real as usize), |e| e.0).ok().map(|i| map[i].1 as *mut c_void)
}

/// The driver's own version (`cuDriverGetVersion`, asked once; 0 if it cannot say).
fn driver_version() -> c_int {
    static V: AtomicI32 = AtomicI32::new(-1);
    let v = V.load(Ordering::Relaxed);
    if v >= 0 {
        return v;
    }
    let mut d: c_int = 0;
    // SAFETY: the driver's cuDriverGetVersion (valid before cuInit), given a valid out-pointer.
    let ok = crate::driver::cuDriverGetVersion().is_some_and(|f| unsafe { f(&mut d) } == CUDA_SUCCESS);
    let d = if ok { d.max(0) } else { 0 };
    V.store(d, Ordering::Relaxed);
    d
}

/// `p` is the start of a symbol some loaded object exports (then that symbol says which function
/// it is, and no table is needed to know it).
fn is_exported_function(p: *mut c_void) -> bool {
    // SAFETY: `Dl_info` is plain data; all-zero is a valid value for it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads `p` as an address and fills `info`.
    let found = unsafe { libc::dladdr(p, &mut info) } != 0;
    found && !info.dli_sname.is_null() && info.dli_saddr == p
}

/// Our hook for the symbol the driver answered (`name`, `version`, `flags`) with at `got`, by
/// NVIDIA's thresholds: only when `got` is no exported function (a thunk), for a symbol we wrap
/// and the driver exports.
fn hook_by_threshold(name: &[u8], version: c_int, flags: u64, got: *mut c_void) -> Option<*mut c_void> {
    if !name.starts_with(b"cu") {
        return None;
    }
    let sym = crate::pfn_lookup::symbol_for(name, version, driver_version(), flags)?;
    let h = hooks::find(sym.as_bytes()).filter(|h| h.lib == hooks::Lib::Cuda)?;
    if h.real_ptr().is_null() || is_exported_function(got) {
        return None;
    }
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::info!(
            "cuGetProcAddress hands out addresses other than the driver's exported symbols; matching its answers by NVIDIA's version thresholds"
        );
    }
    Some(h.hook as *mut c_void)
}

/// # Safety
/// `pfn` is null or points to the pointer the driver just filled (after `CUDA_SUCCESS`); `symbol`
/// is null or the caller's NUL-terminated symbol name.
unsafe fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) {
    if pfn.is_null() {
        return;
    }
    // SAFETY: `pfn` is non-null and the caller's out-pointer (function contract).
    let got = unsafe { *pfn };
    if got.is_null() {
        return;
    }
    if let Some(h) = hook_for(got) {
        // SAFETY: as above; `h` is our export for exactly the function the driver returned.
        unsafe { *pfn = h };
        return;
    }
    if symbol.is_null() {
        return;
    }
    // SAFETY: non-null, NUL-terminated (the contract of `cuGetProcAddress`'s `symbol`).
    let name = unsafe { CStr::from_ptr(symbol) };
    if let Some(h) = hook_by_threshold(name.to_bytes(), cuda_version, flags, got) {
        // SAFETY: as above; `h` wraps the symbol whose ABI the driver answered this lookup with.
        unsafe { *pfn = h };
        return;
    }
    // Not ours. If the name looks like one we hook, the driver handed out an address we cannot
    // map: say so once, since that call will not be governed.
    if crate::log::enabled(crate::log::WARN) {
        let name = name.to_string_lossy();
        if hooks::CUDA_HOOKS.iter().any(|h| base_name(h.name.to_bytes()) == name.as_bytes()) {
            crate::warn!(
                "cuGetProcAddress({name}, flags={flags}) returned an address libvgpu does not know; calls through it are not governed"
            );
        }
    }
}

/// # Safety
/// The `hooks` contract: `real` is the driver's `cuGetProcAddress`, arguments are the caller's.
pub unsafe fn get_proc_address(
    real: cuda_types::pfn::cuGetProcAddress,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    let r = unsafe { real(symbol, pfn, cuda_version, flags) };
    if r == CUDA_SUCCESS {
        unsafe { substitute(symbol, pfn, cuda_version, flags) };
    }
    r
}

/// # Safety
/// The `hooks` contract: `real` is the driver's `cuGetProcAddress_v2`, arguments are the caller's.
pub unsafe fn get_proc_address_v2(
    real: cuda_types::pfn::cuGetProcAddress_v2,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    let r = unsafe { real(symbol, pfn, cuda_version, flags, status) };
    if r == CUDA_SUCCESS {
        unsafe { substitute(symbol, pfn, cuda_version, flags) };
    }
    r
}
