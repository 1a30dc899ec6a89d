//! Logging to stderr with a recognisable prefix, levels as HAMi-core's `LIBCUDA_LOG_LEVEL`:
//! errors always; >= 2 warnings; >= 3 info; >= 4 debug. A disabled level costs one relaxed load.

use std::sync::atomic::{AtomicI32, Ordering};
use vgpu_core::config::{DEFAULT_LOG_LEVEL, parse_log_level};

pub const ERROR: i32 = 0;
pub const WARN: i32 = 2;
pub const INFO: i32 = 3;
pub const DEBUG: i32 = 4;

/// -1 = not read yet.
static LEVEL: AtomicI32 = AtomicI32::new(-1);

/// The level in force: `LIBCUDA_LOG_LEVEL` of the process environment until the process state is
/// built, then the configuration's value ([`set_level`]), which also honours `/overrideEnv` and the
/// pid-1 fallback. Both are parsed by `vgpu_core::config::parse_log_level`.
#[inline]
pub fn level() -> i32 {
    let l = LEVEL.load(Ordering::Relaxed);
    if l >= 0 { l } else { read_level() }
}

#[cold]
fn read_level() -> i32 {
    // getenv does not allocate; safe even on paths where allocation must be avoided.
    // SAFETY: a NUL-terminated literal; getenv only reads the environment.
    let raw = unsafe { libc::getenv(c"LIBCUDA_LOG_LEVEL".as_ptr()) };
    let l = if raw.is_null() {
        DEFAULT_LOG_LEVEL
    } else {
        // SAFETY: getenv returned a non-null pointer to a NUL-terminated string owned by the
        // environment; it is only read here, before anything could change that variable.
        let s = unsafe { std::ffi::CStr::from_ptr(raw) }.to_bytes();
        // Malformed: the default, silently here; the configuration reports it once.
        std::str::from_utf8(s).ok().and_then(parse_log_level).unwrap_or(DEFAULT_LOG_LEVEL)
    };
    LEVEL.store(l, Ordering::Relaxed);
    l
}

/// Adopt the configuration's level (`Config::log_level`) once the process state is built.
pub fn set_level(l: i32) {
    LEVEL.store(l.max(0), Ordering::Relaxed);
}

#[inline]
pub fn enabled(lvl: i32) -> bool {
    lvl == ERROR || level() >= lvl
}

pub fn level_name(lvl: i32) -> &'static str {
    match lvl {
        ERROR => "ERROR",
        WARN => "WARN",
        INFO => "INFO",
        _ => "DEBUG",
    }
}

/// One `write(2)` per line so lines from threads and processes do not interleave.
pub fn emit(lvl: i32, msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut buf = Vec::with_capacity(160);
    let _ = write!(buf, "[libvgpu {}] {}: ", std::process::id(), level_name(lvl));
    let _ = buf.write_fmt(msg);
    buf.push(b'\n');
    raw_write(&buf);
}

/// Allocation-free write for paths that must not allocate (the `dlsym` hook).
pub fn raw_write(bytes: &[u8]) {
    let mut off = 0;
    while off < bytes.len() {
        // SAFETY: the pointer and length describe the live slice `bytes[off..]`.
        let n = unsafe { libc::write(2, bytes[off..].as_ptr().cast(), bytes.len() - off) };
        if n <= 0 {
            return;
        }
        off += n as usize;
    }
}

/// Debug trace of a hooked call (tests look for `DEBUG: hook <name>`).
#[inline]
pub fn hook_called(name: &str) {
    if level() >= DEBUG {
        emit(DEBUG, format_args!("hook {name}"));
    }
}

#[macro_export]
macro_rules! log_at {
    ($lvl:expr, $($arg:tt)*) => {
        if $crate::log::enabled($lvl) { $crate::log::emit($lvl, format_args!($($arg)*)); }
    };
}
#[macro_export]
macro_rules! error { ($($arg:tt)*) => { $crate::log_at!($crate::log::ERROR, $($arg)*) }; }
#[macro_export]
macro_rules! warn { ($($arg:tt)*) => { $crate::log_at!($crate::log::WARN, $($arg)*) }; }
#[macro_export]
macro_rules! info { ($($arg:tt)*) => { $crate::log_at!($crate::log::INFO, $($arg)*) }; }
#[macro_export]
macro_rules! debug { ($($arg:tt)*) => { $crate::log_at!($crate::log::DEBUG, $($arg)*) }; }

/// Log a message once per call site.
#[macro_export]
macro_rules! once {
    ($mac:ident, $($arg:tt)*) => {{
        static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !DONE.swap(true, std::sync::atomic::Ordering::Relaxed) { $crate::$mac!($($arg)*); }
    }};
}
