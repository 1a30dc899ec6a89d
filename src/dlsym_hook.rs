//! Our `dlsym`: hands out hooks for hooked `cu*`/`nvml*` names, and otherwise IS glibc's `dlsym`.
//!
//! It is a naked function: it asks `decide` for a replacement and, if there is none, tail-jumps to
//! the real `dlsym` with the application's return address where it found it (on the stack on
//! x86_64, in the link register x30 on aarch64), because glibc
//! resolves `RTLD_NEXT` and the `RTLD_DEFAULT` scope relative to the caller's address
//! (docs/shim-notes.md §2). `decide` never allocates or locks unless the name is a hooked one.

use crate::dl;
use crate::hooks;
use std::ffi::{CStr, c_char, c_void};

/// `decide` result meaning "return NULL" (a hooked name whose driver is not loaded at all).
const RETURN_NULL: usize = 1;

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        // Third argument: the caller's return address (where glibc's RTLD_NEXT starts from).
        "mov rdx, [rsp + 24]",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "cmp rax, 1",
        "je 3f",
        "ret",
        "3:",
        "xor eax, eax",
        "ret",
        "2:",
        "jmp qword ptr [rip + {real}]",
        decide = sym decide,
        real = sym dl::VGPU_REAL_DLSYM,
    )
}

// aarch64: the caller's return address is in x30, which the tail jump must leave as it found it;
// x0/x1 (the arguments) are restored from the frame before it.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "stp x29, x30, [sp, -32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, 16]",
        // Third argument: the caller's return address (where glibc's RTLD_NEXT starts from).
        "mov x2, x30",
        "bl {decide}",
        "mov x16, x0",
        "ldp x0, x1, [sp, 16]",
        "ldp x29, x30, [sp], 32",
        "cbz x16, 2f",
        "cmp x16, 1",
        "b.eq 3f",
        "mov x0, x16",
        "ret",
        "3:",
        "mov x0, xzr",
        "ret",
        "2:",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "br x16",
        decide = sym decide,
        real = sym dl::VGPU_REAL_DLSYM,
    )
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "libvgpu supports x86_64 and aarch64 only: its `dlsym` export (src/dlsym_hook.rs) and the \
     first stage's trampolines (loader/) are written per architecture, and without them `dlsym` \
     interception would be silently lost"
);

/// Returns the hook to hand out, `RETURN_NULL`, or 0 to let the real `dlsym` answer.
/// Must fill `VGPU_REAL_DLSYM` before returning 0. `caller`: the application's return address.
extern "C" fn decide(handle: *mut c_void, symbol: *const c_char, caller: usize) -> usize {
    dl::real_dlsym_ptr();
    if symbol.is_null() {
        return 0;
    }
    // Cheap prefix test first: the overwhelmingly common case leaves here.
    let first = unsafe { *symbol as u8 };
    if first != b'c' && first != b'n' {
        return 0;
    }
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let Some(hook) = hooks::find(name) else { return 0 };
    // Past this point the name is one of ours: doing real work is fine. An internal error fails
    // closed: the caller gets our hook (governed), never the driver's function.
    std::panic::catch_unwind(|| redirect(handle, hook, caller)).unwrap_or_else(|_| {
        crate::once!(error, "internal error (panic) while answering dlsym; handing out the governed hooks");
        hook.hook as usize
    })
}

fn redirect(handle: *mut c_void, hook: &'static hooks::Hook, caller: usize) -> usize {
    crate::faults::maybe_panic("dlsym_panic");
    let lib = match hook.lib {
        hooks::Lib::Cuda => &dl::LIBCUDA,
        hooks::Lib::Nvml => &dl::LIBNVML,
    };
    if handle == libc::RTLD_NEXT {
        return next_after(caller, hook);
    }
    if handle == libc::RTLD_DEFAULT {
        // The global scope always contains our (preloaded) export. Without the shim this lookup
        // finds the driver's definition only if the driver is in the global scope, and programs
        // probe for CUDA this way: answer exactly that. `RTLD_NEXT` from here searches the
        // global scope after us, i.e. what the caller would have found without the shim.
        let next = dl::real_dlsym(libc::RTLD_NEXT, hook.name);
        if next.is_null() {
            return RETURN_NULL;
        }
        lib.adopt_from_symbol(next);
        return hook.hook as usize;
    }
    // An explicit handle: redirect only if that object really provides the symbol.
    let real = dl::real_dlsym(handle, hook.name);
    if real.is_null() {
        return 0;
    }
    if std::ptr::eq(real, hook.hook) {
        return 0; // the handle is our own library (or the global scope): glibc gives our export
    }
    lib.adopt_from_symbol(real);
    hook.hook as usize
}

/// The public head of glibc's `struct link_map` (`<link.h>`; stable ABI).
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
    l_ld: *const c_void,
    l_next: *const LinkMap,
    l_prev: *const LinkMap,
}

/// `dladdr1` flag `RTLD_DL_LINKMAP` (`<dlfcn.h>`).
const RTLD_DL_LINKMAP: libc::c_int = 2;

/// The loaded object containing `addr`.
fn object_of(addr: usize) -> Option<*const LinkMap> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut lm: *const LinkMap = std::ptr::null();
    // SAFETY: dladdr1 only reads `addr` as a number and writes the two out-parameters.
    let ok = unsafe {
        libc::dladdr1(addr as *const c_void, &mut info, (&mut lm as *mut *const LinkMap).cast(), RTLD_DL_LINKMAP)
    };
    (ok != 0 && !lm.is_null()).then_some(lm)
}

/// `name`'s definition in object `l` itself (not one of its dependencies), if it has one.
fn defined_in(l: *const LinkMap, name: &std::ffi::CStr) -> Option<*mut c_void> {
    // A proper handle of the loaded object (never loads anything); objects without a name (the
    // vDSO, the main program) cannot be opened this way and are skipped.
    let path = unsafe { (*l).l_name };
    if path.is_null() || unsafe { *path } == 0 {
        return None;
    }
    let h = unsafe { libc::dlopen(path, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    let d = dl::real_dlsym(h, name);
    let own = !d.is_null() && object_of(d as usize) == Some(l);
    unsafe { libc::dlclose(h) };
    own.then_some(d)
}

/// `dlsym(RTLD_NEXT, name)`: glibc answers with the first definition in the objects after the
/// caller's. When that is the driver's own function (a tracing or pooling library loaded after
/// the shim reaching for "the real" `cuMemAlloc_v2`), hand out our hook instead, so that library
/// is governed like the application (docs/design.md "dlsym(RTLD_NEXT)"). Any other answer — our own export (callers
/// before the shim), another wrapper, nothing — is glibc's to give, unchanged.
///
/// The objects after the caller are walked in link-map order, asking each whether it defines the
/// name itself; only the first definer matters, and only whether it is the driver's function.
fn next_after(caller: usize, hook: &'static hooks::Hook) -> usize {
    let real = hook.real_ptr_if_loaded();
    if real.is_null() {
        return 0; // the driver is not loaded: glibc's answer cannot be its function
    }
    let Some(me) = object_of(decide as *const () as usize) else { return 0 };
    let Some(from) = object_of(caller) else { return 0 };
    if from == me {
        return 0;
    }
    // SAFETY: link maps of loaded objects stay valid while we hold no lock that dlclose needs;
    // the chain is read the way glibc's own `dl_iterate_phdr` users read it.
    let mut l = unsafe { (*from).l_next };
    let mut steps = 0;
    while !l.is_null() && steps < 4096 {
        if let Some(d) = defined_in(l, hook.name) {
            return if d == real { hook.hook as usize } else { 0 };
        }
        l = unsafe { (*l).l_next };
        steps += 1;
    }
    0
}
