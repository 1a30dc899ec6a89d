//! Simulated `libcuda.so.1` (test-only). See `sim/README.md` and
//! `docs/driver-loading.md` §6.
//!
//! * [`exports`] holds the one list of exported entry points: every `(base name, ABI version,
//!   per-thread flag)` variant is a distinct exported function, and the `cuGetProcAddress` table is
//!   generated from the same list.
//! * Process-local objects (contexts, allocations, streams, events, modules, graphs, pools, VMM) live
//!   in one [`Sim`] behind a mutex; nothing sleeps while holding it.
//! * Cross-process facts (memory per device and process, device time, busy intervals) live in the
//!   `sim_state` file.
// The exports are the driver's C functions: their contract is NVIDIA's documentation, their
// argument lists are the driver's, and the export macro calls its body closure in place.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, clippy::redundant_closure_call)]

mod array;
mod cgroup;
mod checkpoint;
mod context;
mod counting;
mod cuda13;
mod device;
mod drivercost;
mod exports;
mod exports13;
mod graph;
mod green;
mod launch;
mod mark;
mod memory;
mod module;
mod pool;
mod pool13;
mod procaddr;
mod sim;
mod stream;
mod types;
mod vmm;

use sim_state::SimState;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use types::*;

/// Per-process knobs (the device configuration itself comes from the state file).
pub(crate) struct Knobs {
    pub ctx_bytes: u64,
    /// `VGPU_SIM_CTX_CREATE_MS`: a retain or creation that brings up a device's first context of
    /// the process takes this long, with the context already listed by NVML and its memory held
    /// (default 0).
    pub ctx_create: std::time::Duration,
    /// `VGPU_SIM_ALLOC_MS`: a `cuMemAlloc` takes this long before it makes the allocation (a
    /// real driver's large allocation takes milliseconds; tests widen the window in which a
    /// reading of NVML falls inside one). Default 0.
    pub alloc_delay: std::time::Duration,
    /// `VGPU_SIM_GREEN_CTX_MIB`: device memory a green context costs on top of its context
    /// (default 0).
    pub green_ctx_bytes: u64,
    /// `VGPU_SIM_GREEN_CTX_CREATE_MS`: a green context's creation takes this long, its memory
    /// already held (default 0).
    pub green_ctx_create: std::time::Duration,
    pub ns_per_block: u64,
    pub kernel_ns: Option<u64>,
    pub max_queue_ns: u64,
    pub unknown_stub: bool,
    /// `VGPU_SIM_PROCADDR_THUNKS=1`: `cuGetProcAddress` hands out unexported thunks, not the
    /// exported functions' addresses.
    pub procaddr_thunks: bool,
    /// `VGPU_SIM_LEGACY_CTX=1`: the 2000 ABIs `cuCtxCreate` / `cuCtxDestroy` (the parameters of
    /// their `_v2`) work; otherwise they answer `CUDA_ERROR_NOT_SUPPORTED`.
    pub legacy_ctx: bool,
    pub log: bool,
    pub count_file: Option<String>,
    /// `VGPU_SIM_FAST_OOM=1`: an allocation on a full device is refused the way a real driver
    /// refuses it, from its counters; dead processes are reclaimed as `cuMemGetInfo` reclaims
    /// them (reaped at once, zombies and recycled pids within 100 ms) instead of by a `/proc`
    /// read of every process per refusal. Off by default; the benchmarks near the limit set it.
    pub fast_oom: bool,
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

pub(crate) fn knobs() -> &'static Knobs {
    static K: OnceLock<Knobs> = OnceLock::new();
    K.get_or_init(|| Knobs {
        ctx_bytes: env_u64("VGPU_SIM_CTX_MIB").unwrap_or(256) << 20,
        ctx_create: std::time::Duration::from_millis(env_u64("VGPU_SIM_CTX_CREATE_MS").unwrap_or(0)),
        alloc_delay: std::time::Duration::from_millis(env_u64("VGPU_SIM_ALLOC_MS").unwrap_or(0)),
        green_ctx_bytes: env_u64("VGPU_SIM_GREEN_CTX_MIB").unwrap_or(0) << 20,
        green_ctx_create: std::time::Duration::from_millis(env_u64("VGPU_SIM_GREEN_CTX_CREATE_MS").unwrap_or(0)),
        ns_per_block: env_u64("VGPU_SIM_NS_PER_BLOCK").unwrap_or(1000),
        kernel_ns: env_u64("VGPU_SIM_KERNEL_NS"),
        max_queue_ns: env_u64("VGPU_SIM_MAX_QUEUE_US").unwrap_or(20_000) * 1000,
        unknown_stub: std::env::var("VGPU_SIM_UNKNOWN").map(|v| v.trim() == "stub").unwrap_or(false),
        procaddr_thunks: std::env::var("VGPU_SIM_PROCADDR_THUNKS").map(|v| v.trim() == "1").unwrap_or(false),
        legacy_ctx: std::env::var("VGPU_SIM_LEGACY_CTX").map(|v| v.trim() == "1").unwrap_or(false),
        log: std::env::var("VGPU_SIM_LOG").map(|v| v.trim() == "1").unwrap_or(false),
        count_file: std::env::var("VGPU_SIM_COUNT_FILE").ok().filter(|s| !s.is_empty()),
        fast_oom: std::env::var("VGPU_SIM_FAST_OOM").map(|v| v.trim() == "1").unwrap_or(false),
    })
}

macro_rules! simlog {
    ($($arg:tt)*) => {
        if $crate::knobs().log {
            $crate::log_line(&format!($($arg)*));
        }
    };
}
pub(crate) use simlog;

pub(crate) fn log_line(msg: &str) {
    let line = format!("[sim-cuda] {} {}\n", std::process::id(), msg);
    unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
}

static INITIALIZED: AtomicBool = AtomicBool::new(false);
static STATE: OnceLock<Option<SimState>> = OnceLock::new();

pub(crate) fn state_opt() -> Option<&'static SimState> {
    STATE
        .get_or_init(|| match SimState::open_default() {
            Ok(s) => Some(s),
            Err(e) => {
                log_line(&format!("cannot open state file {}: {}", sim_state::default_path(), e));
                None
            }
        })
        .as_ref()
}

/// The shared state; only valid after a successful cuInit.
pub(crate) fn state() -> &'static SimState {
    state_opt().expect("sim state used before cuInit")
}

/// `CUDA_ERROR_NOT_INITIALIZED` before a successful cuInit.
pub(crate) fn check_init() -> Result<(), CUresult> {
    if INITIALIZED.load(Ordering::Acquire) { Ok(()) } else { Err(CUDA_ERROR_NOT_INITIALIZED) }
}

/// Parse `CUDA_VISIBLE_DEVICES` (`spec`, None = unset) against the physical devices' UUIDs into the
/// physical index of each CUDA ordinal, as the real driver does: a comma list of integer indices or
/// `GPU-<uuid or unique uuid prefix>` (case-insensitive); the first invalid entry (not a number, out
/// of range, unknown or ambiguous UUID, a device already listed) ends the list; empty = no devices;
/// unset = all devices in physical order.
pub(crate) fn parse_visible(spec: Option<&str>, uuids: &[String]) -> Vec<usize> {
    let n = uuids.len();
    let Some(spec) = spec else { return (0..n).collect() };
    let mut v = Vec::new();
    for entry in spec.split(',') {
        let e = entry.trim();
        let dev = if !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit()) {
            e.parse::<usize>().ok().filter(|&i| i < n)
        } else if e.len() > 4 && e.as_bytes()[..4].eq_ignore_ascii_case(b"GPU-") {
            let e = e.as_bytes();
            let mut m =
                (0..n).filter(|&i| uuids[i].as_bytes().get(..e.len()).is_some_and(|u| u.eq_ignore_ascii_case(e)));
            match (m.next(), m.next()) {
                (Some(i), None) => Some(i),
                _ => None,
            }
        } else {
            None
        };
        match dev {
            Some(d) if !v.contains(&d) => v.push(d),
            _ => break,
        }
    }
    v
}

/// CUDA ordinal → physical device index (`CUDA_VISIBLE_DEVICES`, parsed once per process at the
/// first successful cuInit). The state file, the process-local tables and NVML use physical
/// indices; only the CUDA API boundary speaks ordinals (`context::check_dev` maps in,
/// [`ordinal_of`] maps out).
pub(crate) fn visible() -> &'static [usize] {
    static V: OnceLock<Vec<usize>> = OnceLock::new();
    V.get_or_init(|| {
        let st = state();
        let uuids: Vec<String> = (0..st.device_count()).map(|d| st.device_uuid(d)).collect();
        let spec = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let v = parse_visible(spec.as_deref(), &uuids);
        if spec.is_some() {
            simlog!("CUDA_VISIBLE_DEVICES={:?}: ordinals -> physical {:?}", spec.as_deref().unwrap_or(""), v);
        }
        v
    })
}

/// The CUDA ordinal of physical device `dev` (-1 if it is not visible to this process).
pub(crate) fn ordinal_of(dev: usize) -> i32 {
    visible().iter().position(|&d| d == dev).map(|o| o as i32).unwrap_or(-1)
}

pub(crate) fn cu_init(flags: u32) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match state_opt() {
        Some(s) if s.device_count() > 0 && !visible().is_empty() => {
            if !INITIALIZED.swap(true, Ordering::AcqRel) {
                simlog!("cuInit: {} device(s) ({} visible), state {}", s.device_count(), visible().len(), s.path());
            }
            counting::ensure_atexit();
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_NO_DEVICE,
    }
}

/// This process's record in the state file (registered on first use, again after fork).
pub(crate) fn my_slot() -> usize {
    static SLOT: AtomicU32 = AtomicU32::new(u32::MAX);
    static PID: AtomicU32 = AtomicU32::new(0);
    let pid = std::process::id();
    if PID.load(Ordering::Acquire) == pid {
        return SLOT.load(Ordering::Acquire) as usize;
    }
    static REG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = REG.lock().unwrap_or_else(|e| e.into_inner());
    if PID.load(Ordering::Acquire) == pid {
        return SLOT.load(Ordering::Acquire) as usize;
    }
    let slot = state().register(pid).unwrap_or_else(|| {
        log_line("process table full");
        std::process::abort()
    });
    SLOT.store(slot as u32, Ordering::Release);
    PID.store(pid, Ordering::Release);
    slot
}

/// Evaluate `$e` (a `Result<(), CUresult>` block) and turn it into a CUresult.
macro_rules! cu_try {
    ($body:block) => {{
        let r: Result<(), $crate::types::CUresult> = (|| $body)();
        match r {
            Ok(()) => $crate::types::CUDA_SUCCESS,
            Err(e) => e,
        }
    }};
}
pub(crate) use cu_try;

/// Write `v` through an out-pointer, `CUDA_ERROR_INVALID_VALUE` if NULL.
pub(crate) unsafe fn out<T>(p: *mut T, v: T) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    unsafe { p.write_unaligned(v) };
    Ok(())
}

pub(crate) fn nonnull<T>(p: *const T) -> Result<(), CUresult> {
    if p.is_null() { Err(CUDA_ERROR_INVALID_VALUE) } else { Ok(()) }
}

#[cfg(test)]
mod visible_tests {
    use super::parse_visible;

    fn uuids() -> Vec<String> {
        vec![
            "GPU-00000000-0000-4000-8000-000000000000".into(),
            "GPU-00000000-0000-4000-8000-000000000001".into(),
            "GPU-abcdef00-0000-4000-8000-000000000002".into(),
        ]
    }

    #[test]
    fn unset_means_all_and_empty_means_none() {
        assert_eq!(parse_visible(None, &uuids()), vec![0, 1, 2]);
        assert_eq!(parse_visible(Some(""), &uuids()), Vec::<usize>::new());
        assert_eq!(parse_visible(Some(" "), &uuids()), Vec::<usize>::new());
    }

    #[test]
    fn indices_select_and_order() {
        assert_eq!(parse_visible(Some("1,0"), &uuids()), vec![1, 0]);
        assert_eq!(parse_visible(Some("2"), &uuids()), vec![2]);
        assert_eq!(parse_visible(Some(" 2 , 0 "), &uuids()), vec![2, 0]);
    }

    #[test]
    fn an_invalid_entry_ends_the_list() {
        assert_eq!(parse_visible(Some("1,3,0"), &uuids()), vec![1], "out of range");
        assert_eq!(parse_visible(Some("0,x,1"), &uuids()), vec![0], "not a number");
        assert_eq!(parse_visible(Some("-1,0"), &uuids()), Vec::<usize>::new(), "negative");
        assert_eq!(parse_visible(Some("2,,0"), &uuids()), vec![2], "empty entry");
        assert_eq!(parse_visible(Some("1,1,0"), &uuids()), vec![1], "duplicate");
        assert_eq!(parse_visible(Some("1,GPU-ffff,0"), &uuids()), vec![1], "unknown uuid");
        assert_eq!(parse_visible(Some("MIG-0,1"), &uuids()), Vec::<usize>::new(), "no MIG devices");
        assert_eq!(parse_visible(Some("0,GPé-0"), &uuids()), vec![0], "non-ASCII");
    }

    #[test]
    fn uuids_and_unique_prefixes() {
        let u = uuids();
        assert_eq!(parse_visible(Some("GPU-00000000-0000-4000-8000-000000000001,0"), &u), vec![1, 0]);
        assert_eq!(parse_visible(Some("gpu-ABCDEF"), &u), vec![2], "prefix, any case");
        assert_eq!(parse_visible(Some("GPU-a,1"), &u), vec![2, 1]);
        assert_eq!(parse_visible(Some("GPU-0000,2"), &u), Vec::<usize>::new(), "ambiguous prefix");
        assert_eq!(parse_visible(Some("GPU-"), &u), Vec::<usize>::new(), "bare prefix");
        assert_eq!(
            parse_visible(Some("GPU-00000000-0000-4000-8000-0000000000011"), &u),
            Vec::<usize>::new(),
            "too long"
        );
        assert_eq!(parse_visible(Some("2,GPU-abcdef00"), &u), vec![2], "same device twice");
    }
}
