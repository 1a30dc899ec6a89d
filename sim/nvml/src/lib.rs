//! Simulated `libnvidia-ml.so.1` (test-only): reads the simulated GPU's shared state file.
//!
//! Memory: device-wide used = Σ live processes (dead ones are reclaimed first). Processes: live
//! processes with a context on the device, `usedGpuMemory` including the context, pid +
//! `VGPU_SIM_PID_OFFSET`. Utilisation: exact busy time from the per-process interval rings;
//! CLOCK_MONOTONIC maps to wall-clock µs through the offset fixed in the state file.
// NVML's own names, and its C functions' contract is NVIDIA's documentation.
#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

mod limits;

use sim_state::{SimState, now_mono_ns};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

pub type nvmlReturn_t = u32;
pub type nvmlDevice_t = *mut c_void;

pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: nvmlReturn_t = 9;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

/// The display driver branch that ships each CUDA driver API version the sim can report.
pub fn driver_version_string(cuda_version: i32) -> &'static str {
    if cuda_version >= 13000 { "580.82.07" } else { "575.57.08" }
}
pub const DEVICE_NAME: &str = "NVIDIA H100 80GB HBM3";
const PCI_DEVICE_ID: u32 = 0x2330_10de;
const PCI_SUBSYSTEM_ID: u32 = 0x16c1_10de;

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nvmlMemory_t {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nvmlMemory_v2_t {
    pub version: u32,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

pub const NVML_MEMORY_V2: u32 = std::mem::size_of::<nvmlMemory_v2_t>() as u32 | (2 << 24);

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nvmlProcessInfo_v1_t {
    pub pid: u32,
    pub used_gpu_memory: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nvmlProcessInfo_t {
    pub pid: u32,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nvmlUtilization_t {
    pub gpu: u32,
    pub memory: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: u32,
    pub time_stamp: u64,
    pub sm_util: u32,
    pub mem_util: u32,
    pub enc_util: u32,
    pub dec_util: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct nvmlPciInfo_t {
    pub bus_id_legacy: [c_char; 16],
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub pci_device_id: u32,
    pub pci_sub_system_id: u32,
    pub bus_id: [c_char; 32],
}

const _: () = {
    assert!(std::mem::size_of::<nvmlMemory_t>() == 24);
    assert!(std::mem::size_of::<nvmlMemory_v2_t>() == 40);
    assert!(std::mem::size_of::<nvmlProcessInfo_v1_t>() == 16);
    assert!(std::mem::size_of::<nvmlProcessInfo_t>() == 24);
    assert!(std::mem::size_of::<nvmlUtilization_t>() == 8);
    assert!(std::mem::size_of::<nvmlProcessUtilizationSample_t>() == 32);
    assert!(std::mem::size_of::<nvmlPciInfo_t>() == 68);
};

// ---- state ---------------------------------------------------------------------------------

static INIT_COUNT: AtomicU32 = AtomicU32::new(0);
static STATE: OnceLock<Option<SimState>> = OnceLock::new();

fn log_enabled() -> bool {
    static L: OnceLock<bool> = OnceLock::new();
    *L.get_or_init(|| std::env::var("VGPU_SIM_LOG").map(|v| v.trim() == "1").unwrap_or(false))
}

fn log(msg: &str) {
    if log_enabled() {
        let line = format!("[sim-nvml] {} {}\n", std::process::id(), msg);
        unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
    }
}

fn pid_offset() -> u32 {
    static O: OnceLock<u32> = OnceLock::new();
    *O.get_or_init(|| std::env::var("VGPU_SIM_PID_OFFSET").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0))
}

fn state() -> Result<&'static SimState, nvmlReturn_t> {
    if INIT_COUNT.load(Ordering::Acquire) == 0 {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    STATE.get().and_then(|s| s.as_ref()).ok_or(NVML_ERROR_UNINITIALIZED)
}

#[repr(C)]
struct DevTag {
    _idx: u64,
}

static DEVS: [DevTag; sim_state::MAX_DEVICES] = [
    DevTag { _idx: 0 },
    DevTag { _idx: 1 },
    DevTag { _idx: 2 },
    DevTag { _idx: 3 },
    DevTag { _idx: 4 },
    DevTag { _idx: 5 },
    DevTag { _idx: 6 },
    DevTag { _idx: 7 },
];

fn handle(i: usize) -> nvmlDevice_t {
    &DEVS[i] as *const DevTag as nvmlDevice_t
}

/// Index of a device handle (validated against the device count).
fn dev_index(h: nvmlDevice_t) -> Result<(usize, &'static SimState), nvmlReturn_t> {
    let st = state()?;
    let base = DEVS.as_ptr() as usize;
    let p = h as usize;
    let sz = std::mem::size_of::<DevTag>();
    if p < base || !(p - base).is_multiple_of(sz) || (p - base) / sz >= st.device_count() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok(((p - base) / sz, st))
}

fn ret(r: Result<(), nvmlReturn_t>) -> nvmlReturn_t {
    match r {
        Ok(()) => NVML_SUCCESS,
        Err(e) => e,
    }
}

unsafe fn put<T>(p: *mut T, v: T) -> Result<(), nvmlReturn_t> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    unsafe { p.write_unaligned(v) };
    Ok(())
}

unsafe fn put_str(buf: *mut c_char, len: u32, s: &str) -> Result<(), nvmlReturn_t> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (len as usize) < s.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

fn fill_cstr<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (i, b) in s.bytes().take(N - 1).enumerate() {
        out[i] = b as c_char;
    }
    out
}

// ---- init ----------------------------------------------------------------------------------

fn init() -> nvmlReturn_t {
    let s = STATE.get_or_init(|| match SimState::open_default() {
        Ok(s) => Some(s),
        Err(e) => {
            let line = format!(
                "[sim-nvml] {} cannot open state file {}: {}\n",
                std::process::id(),
                sim_state::default_path(),
                e
            );
            unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
            None
        }
    });
    if s.is_none() {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    INIT_COUNT.fetch_add(1, Ordering::AcqRel);
    log("nvmlInit");
    NVML_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: u32) -> nvmlReturn_t {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    let r = INIT_COUNT.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    if r.is_ok() { NVML_SUCCESS } else { NVML_ERROR_UNINITIALIZED }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(r: nvmlReturn_t) -> *const c_char {
    let s: &'static CStr = match r {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        15 => c"GPU is lost",
        17 => c"Operating System Error",
        20 => c"Insufficient Memory",
        21 => c"No data",
        25 => c"Argument version mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

// ---- system --------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(buf: *mut c_char, len: u32) -> nvmlReturn_t {
    ret(state().and_then(|s| unsafe { put_str(buf, len, driver_version_string(s.driver_version())) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(buf: *mut c_char, len: u32) -> nvmlReturn_t {
    let v = state().map(|s| s.driver_version()).unwrap_or(12090);
    ret(unsafe { put_str(buf, len, &format!("{}.{}", v / 1000, driver_version_string(v))) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut i32) -> nvmlReturn_t {
    ret(state().and_then(|s| unsafe { put(v, s.driver_version()) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut i32) -> nvmlReturn_t {
    unsafe { nvmlSystemGetCudaDriverVersion(v) }
}

// ---- device handles ------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(n: *mut u32) -> nvmlReturn_t {
    ret(state().and_then(|s| unsafe { put(n, s.device_count() as u32) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(n: *mut u32) -> nvmlReturn_t {
    unsafe { nvmlDeviceGetCount(n) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(i: u32, h: *mut nvmlDevice_t) -> nvmlReturn_t {
    ret(state().and_then(|s| {
        if i as usize >= s.device_count() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        unsafe { put(h, handle(i as usize)) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(i: u32, h: *mut nvmlDevice_t) -> nvmlReturn_t {
    unsafe { nvmlDeviceGetHandleByIndex(i, h) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, h: *mut nvmlDevice_t) -> nvmlReturn_t {
    ret(state().and_then(|s| {
        if uuid.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let u = unsafe { CStr::from_ptr(uuid) }.to_string_lossy();
        let i = (0..s.device_count())
            .find(|&i| s.device_uuid(i).eq_ignore_ascii_case(u.trim()))
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        unsafe { put(h, handle(i)) }
    }))
}

fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let s = s.trim();
    let (rest, _func) = s.rsplit_once('.').unwrap_or((s, "0"));
    let parts: Vec<&str> = rest.split(':').collect();
    let p = |x: &str| u32::from_str_radix(x, 16).ok();
    match parts.as_slice() {
        [d, b, dv] => Some((p(d)?, p(b)?, p(dv)?)),
        [b, dv] => Some((0, p(b)?, p(dv)?)),
        _ => None,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(id: *const c_char, h: *mut nvmlDevice_t) -> nvmlReturn_t {
    ret(state().and_then(|s| {
        if id.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let t = unsafe { CStr::from_ptr(id) }.to_string_lossy();
        let (dom, bus, dev) = parse_bus_id(&t).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        let i = (0..s.device_count())
            .find(|&i| dom == 0 && dev == 0 && bus == s.device_pci_bus(i))
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        unsafe { put(h, handle(i)) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(id: *const c_char, h: *mut nvmlDevice_t) -> nvmlReturn_t {
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(id, h) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(h: nvmlDevice_t, i: *mut u32) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, _)| unsafe { put(i, d as u32) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(h: nvmlDevice_t, i: *mut u32) -> nvmlReturn_t {
    unsafe { nvmlDeviceGetIndex(h, i) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(h: nvmlDevice_t, buf: *mut c_char, len: u32) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|_| unsafe { put_str(buf, len, DEVICE_NAME) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(h: nvmlDevice_t, buf: *mut c_char, len: u32) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, s)| unsafe { put_str(buf, len, &s.device_uuid(d)) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(h: nvmlDevice_t, p: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, s)| {
        let bus = s.device_pci_bus(d);
        let info = nvmlPciInfo_t {
            bus_id_legacy: fill_cstr(&format!("0000:{:02X}:00.0", bus)),
            domain: 0,
            bus,
            device: 0,
            pci_device_id: PCI_DEVICE_ID,
            pci_sub_system_id: PCI_SUBSYSTEM_ID,
            bus_id: fill_cstr(&format!("00000000:{:02X}:00.0", bus)),
        };
        unsafe { put(p, info) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(h: nvmlDevice_t, p: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    unsafe { nvmlDeviceGetPciInfo_v3(h, p) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    h: nvmlDevice_t,
    major: *mut i32,
    minor: *mut i32,
) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|_| unsafe {
        put(major, 9)?;
        put(minor, 0)
    }))
}

// ---- memory and processes ------------------------------------------------------------------

/// (total, used = Σ live processes) of device `d`.
fn memory(s: &SimState, d: usize) -> (u64, u64) {
    let used: u64 = s.processes().iter().map(|p| p.used[d]).sum();
    (s.device_total(d), used)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(h: nvmlDevice_t, m: *mut nvmlMemory_t) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, s)| {
        let (total, used) = memory(s, d);
        unsafe { put(m, nvmlMemory_t { total, free: total.saturating_sub(used), used }) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(h: nvmlDevice_t, m: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, s)| {
        if m.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        if unsafe { (*m).version } != NVML_MEMORY_V2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = memory(s, d);
        unsafe {
            put(
                m,
                nvmlMemory_v2_t { version: NVML_MEMORY_V2, total, reserved: 0, free: total.saturating_sub(used), used },
            )
        }
    }))
}

/// `VGPU_SIM_NO_PROC_MEM=1`: processes are listed without a memory figure
/// (`NVML_VALUE_NOT_AVAILABLE`), as NVML does under MIG or WDDM.
fn no_proc_mem() -> bool {
    static O: OnceLock<bool> = OnceLock::new();
    *O.get_or_init(|| std::env::var("VGPU_SIM_NO_PROC_MEM").map(|v| v.trim() == "1").unwrap_or(false))
}

/// (reported pid, used bytes) of live processes with a context on device `d`.
fn compute_processes(s: &SimState, d: usize) -> Vec<(u32, u64)> {
    let na = no_proc_mem();
    s.processes()
        .iter()
        .filter(|p| p.has_ctx[d])
        .map(|p| (p.pid.wrapping_add(pid_offset()), if na { u64::MAX } else { p.used[d] }))
        .collect()
}

unsafe fn running_processes<T>(
    h: nvmlDevice_t,
    count: *mut u32,
    infos: *mut T,
    make: impl Fn(u32, u64) -> T,
) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, s)| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let list = compute_processes(s, d);
        let cap = unsafe { *count } as usize;
        unsafe { *count = list.len() as u32 };
        if list.is_empty() {
            return Ok(());
        }
        if infos.is_null() || cap < list.len() {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (i, (pid, used)) in list.into_iter().enumerate() {
            unsafe { infos.add(i).write_unaligned(make(pid, used)) };
        }
        Ok(())
    }))
}

fn v2(pid: u32, used: u64) -> nvmlProcessInfo_t {
    nvmlProcessInfo_t { pid, used_gpu_memory: used, gpu_instance_id: u32::MAX, compute_instance_id: u32::MAX }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    h: nvmlDevice_t,
    count: *mut u32,
    infos: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    unsafe { running_processes(h, count, infos, |pid, used| nvmlProcessInfo_v1_t { pid, used_gpu_memory: used }) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    h: nvmlDevice_t,
    count: *mut u32,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    unsafe { running_processes(h, count, infos, v2) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    h: nvmlDevice_t,
    count: *mut u32,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    unsafe { running_processes(h, count, infos, v2) }
}

unsafe fn no_processes(h: nvmlDevice_t, count: *mut u32) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|_| unsafe { put(count, 0) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    h: nvmlDevice_t,
    count: *mut u32,
    _i: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    unsafe { no_processes(h, count) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    h: nvmlDevice_t,
    count: *mut u32,
    _i: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    unsafe { no_processes(h, count) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    h: nvmlDevice_t,
    count: *mut u32,
    _i: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    unsafe { no_processes(h, count) }
}

// ---- utilisation ---------------------------------------------------------------------------

const SECOND: u64 = 1_000_000_000;

fn pct(busy: u64, span: u64) -> u32 {
    if span == 0 { 0 } else { ((busy as u128 * 100 + span as u128 / 2) / span as u128).min(100) as u32 }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    h: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut u32,
    last_seen_us: u64,
) -> nvmlReturn_t {
    ret(dev_index(h).and_then(|(d, s)| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        if std::env::var("VGPU_SIM_NO_PROC_UTIL").map(|v| v.trim() == "1").unwrap_or(false) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        let now = now_mono_ns();
        let now_us = s.mono_to_wall_us(now);
        let from = if last_seen_us == 0 || last_seen_us >= now_us {
            now.saturating_sub(SECOND)
        } else {
            s.wall_us_to_mono(last_seen_us)
        };
        let span = now.saturating_sub(from);
        let list: Vec<nvmlProcessUtilizationSample_t> = s
            .processes()
            .iter()
            .filter_map(|p| {
                let busy = s.busy_ns(p.slot, d, now).saturating_sub(s.busy_ns(p.slot, d, from));
                (busy > 0).then(|| {
                    let sm = pct(busy, span).max(1);
                    nvmlProcessUtilizationSample_t {
                        pid: p.pid.wrapping_add(pid_offset()),
                        time_stamp: now_us,
                        sm_util: sm,
                        mem_util: sm / 2,
                        enc_util: 0,
                        dec_util: 0,
                    }
                })
            })
            .collect();
        let cap = unsafe { *count } as usize;
        unsafe { *count = list.len() as u32 };
        if list.is_empty() {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        if samples.is_null() || cap < list.len() {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (i, x) in list.into_iter().enumerate() {
            unsafe { samples.add(i).write_unaligned(x) };
        }
        Ok(())
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(h: nvmlDevice_t, u: *mut nvmlUtilization_t) -> nvmlReturn_t {
    // Per device and calling thread: one thread's query does not shorten another's window (real
    // NVML's figure does not depend on who else asks).
    static LAST: Mutex<Option<HashMap<(usize, std::thread::ThreadId), u64>>> = Mutex::new(None);
    let me = std::thread::current().id();
    ret(dev_index(h).and_then(|(d, s)| {
        if u.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let now = now_mono_ns();
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        let map = last.get_or_insert_with(HashMap::new);
        let from = match map.get(&(d, me)) {
            Some(&t) if now.saturating_sub(t) >= 20_000_000 && now - t <= 10 * SECOND => t,
            _ => now.saturating_sub(SECOND),
        };
        map.insert((d, me), now);
        drop(last);
        s.reclaim_dead();
        let busy = s.device_busy_ns(d, now).saturating_sub(s.device_busy_ns(d, from));
        let gpu = pct(busy, now - from);
        unsafe { put(u, nvmlUtilization_t { gpu, memory: gpu / 2 }) }
    }))
}
