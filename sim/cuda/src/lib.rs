//! Simulated `libcuda.so.1` (test-only). See `docs/design.md` "Simulated GPU" and
//! `shared/docs/driver-loading.md` §6.
//!
//! * [`exports`] holds the one list of exported entry points: every `(base name, ABI version,
//!   per-thread flag)` variant is a distinct exported function, and the `cuGetProcAddress` table is
//!   generated from the same list.
//! * Process-local objects (contexts, allocations, streams, events, modules, graphs, pools, VMM) live
//!   in one [`Sim`] behind a mutex; nothing sleeps while holding it.
//! * Cross-process facts (memory per device and process, device time, busy intervals) live in the
//!   `sim_state` file.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, clippy::redundant_closure_call)]

mod array;
mod context;
mod counting;
mod device;
mod exports;
mod graph;
mod launch;
mod memory;
mod module;
mod pool;
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
    pub ns_per_block: u64,
    pub kernel_ns: Option<u64>,
    pub max_queue_ns: u64,
    pub unknown_stub: bool,
    pub log: bool,
    pub count_file: Option<String>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

pub(crate) fn knobs() -> &'static Knobs {
    static K: OnceLock<Knobs> = OnceLock::new();
    K.get_or_init(|| Knobs {
        ctx_bytes: env_u64("VGPU_SIM_CTX_MIB").unwrap_or(256) << 20,
        ns_per_block: env_u64("VGPU_SIM_NS_PER_BLOCK").unwrap_or(1000),
        kernel_ns: env_u64("VGPU_SIM_KERNEL_NS"),
        max_queue_ns: env_u64("VGPU_SIM_MAX_QUEUE_US").unwrap_or(20_000) * 1000,
        unknown_stub: std::env::var("VGPU_SIM_UNKNOWN").map(|v| v.trim() == "stub").unwrap_or(false),
        log: std::env::var("VGPU_SIM_LOG").map(|v| v.trim() == "1").unwrap_or(false),
        count_file: std::env::var("VGPU_SIM_COUNT_FILE").ok().filter(|s| !s.is_empty()),
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

pub(crate) fn cu_init(flags: u32) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match state_opt() {
        Some(s) if s.device_count() > 0 => {
            if !INITIALIZED.swap(true, Ordering::AcqRel) {
                simlog!("cuInit: {} device(s), state {}", s.device_count(), s.path());
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
