//! The real dynamic loader and the real driver libraries.
//!
//! Never call `libc::dlsym` in this crate: inside the shim it binds to our own `dlsym` export.
//! The real one is found with `dlvsym`, which we do not intercept.

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Address of glibc's `dlsym`; the naked `dlsym` export tail-jumps through it, so it is a plain
/// word that assembly can read (`AtomicUsize` has the layout of `usize`).
pub static VGPU_REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
}

/// Resolve glibc's `dlsym`. Allocation- and lock-free, callable from inside our `dlsym`.
/// In the two-stage release artifact the first stage filled it in `vgpu_engine_attach`.
pub fn real_dlsym_ptr() -> usize {
    let cur = VGPU_REAL_DLSYM.load(Ordering::Acquire);
    if cur != 0 {
        return cur;
    }
    let versions: &[&CStr] =
        if cfg!(target_arch = "aarch64") { &[c"GLIBC_2.34", c"GLIBC_2.17"] } else { &[c"GLIBC_2.34", c"GLIBC_2.2.5"] };
    for v in versions {
        let p = unsafe { dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
        if !p.is_null() {
            VGPU_REAL_DLSYM.store(p as usize, Ordering::Release);
            return p as usize;
        }
    }
    crate::log::raw_write(b"[libvgpu] ERROR: cannot find glibc's dlsym; aborting\n");
    // No way to forward dlsym calls: the process cannot work correctly in any case.
    unsafe { libc::abort() }
}

/// Call glibc's `dlsym` (the shim is then the caller: fine for explicit handles only).
/// `RTLD_NEXT` means "after the preloaded object": in the two-stage artifact that object is the
/// first stage, so the lookup is made from its code (glibc cannot resolve `RTLD_NEXT` from an
/// object that is not in the global scope).
pub fn real_dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    #[cfg(feature = "engine")]
    if handle == libc::RTLD_NEXT {
        if let Some(next) = stage1::next() {
            return unsafe { next(name.as_ptr()) };
        }
    }
    let f: DlsymFn = unsafe { std::mem::transmute(real_dlsym_ptr()) };
    unsafe { f(handle, name.as_ptr()) }
}

/// The engine half of the two-stage release artifact (docs/design.md "Exec cost"): the preloaded
/// first stage (`loader/stage1.c`) maps this library on the first CUDA/NVML touch and hands
/// over, before any hook runs, glibc's `dlsym` and a lookup made from the first stage's code.
#[cfg(feature = "engine")]
mod stage1 {
    use super::*;

    pub type NextFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;

    /// Layout shared with `struct vgpu_stage1_api` in loader/stage1.c.
    #[repr(C)]
    pub struct Stage1Api {
        /// `size_of::<Stage1Api>()` as the first stage knows it.
        pub size: usize,
        pub real_dlsym: usize,
        pub next: Option<NextFn>,
    }

    static NEXT: AtomicUsize = AtomicUsize::new(0);

    pub fn next() -> Option<NextFn> {
        let p = NEXT.load(Ordering::Acquire);
        // SAFETY: only ever set from a non-null `NextFn` in `vgpu_engine_attach`.
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, NextFn>(p) })
    }

    /// Called once by the first stage right after `dlopen`; returns 0 on success.
    #[unsafe(no_mangle)]
    pub extern "C" fn vgpu_engine_attach(api: *const Stage1Api) -> i32 {
        if api.is_null() {
            return -1;
        }
        // SAFETY: the first stage passes a pointer to a live, initialised struct.
        let api = unsafe { &*api };
        if api.size < std::mem::size_of::<Stage1Api>() || api.real_dlsym == 0 {
            return -1;
        }
        let Some(next) = api.next else { return -1 };
        VGPU_REAL_DLSYM.store(api.real_dlsym, Ordering::Release);
        NEXT.store(next as usize, Ordering::Release);
        0
    }
}

/// One real library (libcuda or libnvidia-ml), opened lazily with `RTLD_NODELETE` so an
/// application's `dlclose` never unmaps what our cached pointers point into.
pub struct RealLib {
    soname: &'static CStr,
    handle: AtomicPtr<c_void>,
    /// Set after a failed open so we do not retry on every call.
    failed: std::sync::atomic::AtomicBool,
}

impl RealLib {
    pub const fn new(soname: &'static CStr) -> Self {
        Self { soname, handle: AtomicPtr::new(std::ptr::null_mut()), failed: std::sync::atomic::AtomicBool::new(false) }
    }

    pub fn handle(&self) -> Option<*mut c_void> {
        let h = self.handle.load(Ordering::Acquire);
        if !h.is_null() {
            return Some(h);
        }
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        self.open(None)
    }

    /// The handle if the library is loaded in this process (adopting it by soname), without ever
    /// loading it.
    pub fn handle_if_loaded(&self) -> Option<*mut c_void> {
        let h = self.handle.load(Ordering::Acquire);
        if !h.is_null() {
            return Some(h);
        }
        let flags = libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE | libc::RTLD_NOLOAD;
        let h = unsafe { libc::dlopen(self.soname.as_ptr(), flags) };
        if h.is_null() {
            return None;
        }
        match self.handle.compare_exchange(std::ptr::null_mut(), h, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(h),
            Err(existing) => {
                unsafe { libc::dlclose(h) };
                Some(existing)
            }
        }
    }

    /// Adopt the exact object an application loaded (found through `dladdr` of one of its
    /// symbols), so we call the same driver it does even if it was loaded by absolute path.
    pub fn adopt_from_symbol(&self, sym: *mut c_void) {
        if !self.handle.load(Ordering::Acquire).is_null() || sym.is_null() {
            return;
        }
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        if unsafe { libc::dladdr(sym, &mut info) } != 0 && !info.dli_fname.is_null() {
            let path = unsafe { CStr::from_ptr(info.dli_fname) };
            self.open(Some(path));
        }
    }

    fn open(&self, path: Option<&CStr>) -> Option<*mut c_void> {
        let name = path.unwrap_or(self.soname);
        // Adopting an object by path must never load a second, different file (a relative path
        // from dladdr resolves against the current directory): NOLOAD.
        let adopt = if path.is_some() { libc::RTLD_NOLOAD } else { 0 };
        let flags = libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE | adopt;
        let h = unsafe { libc::dlopen(name.as_ptr(), flags) };
        if h.is_null() {
            if path.is_none() {
                self.failed.store(true, Ordering::Relaxed);
                crate::info!("{} not available: {}", self.soname.to_string_lossy(), last_dl_error());
            }
            return None;
        }
        match self.handle.compare_exchange(std::ptr::null_mut(), h, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(h),
            Err(existing) => {
                // Lost the race; RTLD_NODELETE keeps the object mapped, dropping our refcount is fine.
                unsafe { libc::dlclose(h) };
                Some(existing)
            }
        }
    }

    pub fn sym(&self, name: &CStr) -> *mut c_void {
        match self.handle() {
            Some(h) => real_dlsym(h, name),
            None => std::ptr::null_mut(),
        }
    }
}

fn last_dl_error() -> String {
    let e = unsafe { libc::dlerror() };
    if e.is_null() { "unknown error".into() } else { unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned() }
}

pub static LIBCUDA: RealLib = RealLib::new(c"libcuda.so.1");
pub static LIBNVML: RealLib = RealLib::new(c"libnvidia-ml.so.1");
