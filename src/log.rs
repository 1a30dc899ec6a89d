//! Logging to stderr with a recognisable prefix, levels as HAMi-core's `LIBCUDA_LOG_LEVEL`:
//! errors always; >= 2 warnings; >= 3 info; >= 4 debug. A disabled level costs one relaxed load.

use std::sync::atomic::{AtomicI32, Ordering};

pub const ERROR: i32 = 0;
pub const WARN: i32 = 2;
pub const INFO: i32 = 3;
pub const DEBUG: i32 = 4;

/// -1 = not read yet.
static LEVEL: AtomicI32 = AtomicI32::new(-1);

#[inline]
pub fn level() -> i32 {
    let l = LEVEL.load(Ordering::Relaxed);
    if l >= 0 { l } else { read_level() }
}

#[cold]
fn read_level() -> i32 {
    // getenv does not allocate; safe even on paths where allocation must be avoided.
    let raw = unsafe { libc::getenv(c"LIBCUDA_LOG_LEVEL".as_ptr()) };
    let l = if raw.is_null() {
        2
    } else {
        let s = unsafe { std::ffi::CStr::from_ptr(raw) }.to_bytes();
        parse_level(s)
    };
    LEVEL.store(l, Ordering::Relaxed);
    l
}

fn parse_level(s: &[u8]) -> i32 {
    let s = std::str::from_utf8(s).unwrap_or("").trim();
    if s.is_empty() {
        return 2; // set but empty = unset
    }
    match s.parse::<i32>() {
        Ok(v) if v >= 0 => v.min(10),
        // Malformed: keep the default; said once, at warning level.
        _ => {
            raw_write(b"[libvgpu] WARN: LIBCUDA_LOG_LEVEL is not a non-negative integer; using 2\n");
            2
        }
    }
}

#[inline]
pub fn enabled(lvl: i32) -> bool {
    lvl == ERROR || level() >= lvl
}

/// Re-read the level (after /overrideEnv was applied).
pub fn reset() {
    LEVEL.store(-1, Ordering::Relaxed);
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
