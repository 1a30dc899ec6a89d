//! Our `dlsym`: hands out hooks for hooked `cu*`/`nvml*` names, and otherwise IS glibc's `dlsym`.
//!
//! It is a naked function: it asks `decide` for a replacement and, if there is none, tail-jumps to
//! the real `dlsym` with the application's return address still on the stack, because glibc
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

/// Returns the hook to hand out, `RETURN_NULL`, or 0 to let the real `dlsym` answer.
/// Must fill `VGPU_REAL_DLSYM` before returning 0.
extern "C" fn decide(handle: *mut c_void, symbol: *const c_char) -> usize {
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
    // Past this point the name is one of ours: doing real work is fine.
    std::panic::catch_unwind(|| redirect(handle, hook)).unwrap_or(0)
}

fn redirect(handle: *mut c_void, hook: &'static hooks::Hook) -> usize {
    let lib = match hook.lib {
        hooks::Lib::Cuda => &dl::LIBCUDA,
        hooks::Lib::Nvml => &dl::LIBNVML,
    };
    if handle == libc::RTLD_NEXT {
        // "The next definition after the caller": leave it to glibc.
        return 0;
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
    if real as *const c_void == hook.hook {
        return 0; // the handle is our own library (or the global scope): glibc gives our export
    }
    lib.adopt_from_symbol(real);
    hook.hook as usize
}
