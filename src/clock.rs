//! The clocks every periodic part of the shim reads (a leaf: no module of the shim below it).

/// CLOCK_MONOTONIC ns.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

pub fn wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(c: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(c, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
