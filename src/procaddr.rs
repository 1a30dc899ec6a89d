//! `cuGetProcAddress` / `cuGetProcAddress_v2`: ask the real driver first, then swap the returned
//! pointer for our hook when it is the real address of a hooked symbol. Mapping by address keeps
//! every (name, ABI version, per-thread flag) variant apart without a copy of NVIDIA's version
//! table, and covers the lookup of `"cuGetProcAddress"` itself (libcudart's path).

use crate::ffi::*;
use crate::hooks;
use std::ffi::{CStr, c_char, c_int, c_void};
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

/// # Safety
/// `pfn` is null or points to the pointer the driver just filled (after `CUDA_SUCCESS`); `symbol`
/// is null or the caller's NUL-terminated symbol name.
unsafe fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, flags: u64) {
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
    // Not ours. If the name looks like one we hook, the driver handed out an address we cannot
    // map: say so once, since that call will not be governed.
    if !symbol.is_null() && crate::log::enabled(crate::log::WARN) {
        // SAFETY: non-null, NUL-terminated (the contract of `cuGetProcAddress`'s `symbol`).
        let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
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
    real: crate::hooks::cuda::pfn::cuGetProcAddress,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    let r = unsafe { real(symbol, pfn, cuda_version, flags) };
    if r == CUDA_SUCCESS {
        unsafe { substitute(symbol, pfn, flags) };
    }
    r
}

/// # Safety
/// The `hooks` contract: `real` is the driver's `cuGetProcAddress_v2`, arguments are the caller's.
pub unsafe fn get_proc_address_v2(
    real: crate::hooks::cuda::pfn::cuGetProcAddress_v2,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    let r = unsafe { real(symbol, pfn, cuda_version, flags, status) };
    if r == CUDA_SUCCESS {
        unsafe { substitute(symbol, pfn, flags) };
    }
    r
}
