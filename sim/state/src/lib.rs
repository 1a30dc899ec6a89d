//! Simulated GPU shared state ("the node"), test-only.
//!
//! One mmap'd file (path `VGPU_SIM_STATE`, default `/dev/shm/vgpu-sim-<uid>.state`) shared by every
//! process that loads the simulated `libcuda.so.1` / `libnvidia-ml.so.1`, and by `simctl`.
//!
//! * The first process creates it atomically (fully initialised temp file, then `link(2)` to the final
//!   name) with the device configuration taken from its environment; later processes read the
//!   configuration from the file.
//! * Per device: total bytes, used bytes (atomic, charged by CAS against the total), the device tail
//!   (CLOCK_MONOTONIC ns; kernels of all processes run one at a time) and the busy time of reclaimed
//!   processes; time-sliced (`VGPU_SIM_TIMESLICE_US`), the round-robin schedule ([`Slicer`]) under
//!   a lock instead of the tail.
//! * A process table of [`MAX_PROCS`] records: pid, per-device used bytes, per-device context flag and
//!   per-device ring of execution intervals (contiguous intervals merged; intervals pushed out of the
//!   ring are added to a retired counter). Each record is written only by its owning process (which
//!   serialises its own writers) under a seqlock, and read lock-free by anyone.
//! * Dead processes (`kill(pid,0)` = ESRCH, zombie, or pid reused) are reclaimed by whoever scans: their
//!   memory goes back to the device and their busy time to the device's retired counter.

use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering, fence};

pub mod checkpoint;
pub mod ring;
pub mod slice;
pub use ring::{Interval, busy_in_intervals};
pub use slice::Slicer;

pub const MAX_DEVICES: usize = 8;
pub const MAX_PROCS: usize = 256;
/// Intervals kept per (process, device).
pub const RING: usize = 512;
pub const MAGIC: u64 = 0x5647_5055_5349_4d31; // "VGPUSIM1"
pub const LAYOUT_VERSION: u32 = 6;
pub const GRANULE: u64 = 2 << 20;

// A record's state word: the state in the low bits, above them the generation, advanced by each
// registration. Claiming a record by CAS on the whole word fails when the record was recycled
// since the claimer read it (a scanner that judged the previous owner dead must not free it).
const ST_FREE: u32 = 0;
const ST_INIT: u32 = 1;
const ST_ALIVE: u32 = 2;
const ST_RECLAIM: u32 = 3;
const ST_MASK: u32 = 3;
const GEN_ONE: u32 = ST_MASK + 1;

/// The state part of a record's state word.
fn st_of(word: u32) -> u32 {
    word & ST_MASK
}

/// `word` with its state replaced by `st` (same generation).
fn with_st(word: u32, st: u32) -> u32 {
    (word & !ST_MASK) | st
}

/// Monotonic clock in ns (CLOCK_MONOTONIC, system wide).
pub fn now_mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Wall clock in ns (CLOCK_REALTIME).
pub fn now_wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clk: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(clk, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn round_up(v: u64, g: u64) -> u64 {
    v.div_ceil(g) * g
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Device configuration, fixed by the process that creates the state file.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceConfig {
    pub mem_bytes: Vec<u64>,
    pub uuids: Vec<String>,
    pub sm_count: u32,
    pub driver_version: i32,
    /// `VGPU_SIM_TIMESLICE_US` in ns; 0: one FIFO across processes.
    pub timeslice_ns: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

pub fn default_uuid(i: usize) -> String {
    format!("GPU-00000000-0000-4000-8000-{:012x}", i)
}

impl DeviceConfig {
    pub fn from_env() -> DeviceConfig {
        let n = env_u64("VGPU_SIM_DEVICES").unwrap_or(1).clamp(1, MAX_DEVICES as u64) as usize;
        let mems: Vec<u64> = std::env::var("VGPU_SIM_MEM_MIB")
            .ok()
            .map(|v| v.split(',').filter_map(|s| s.trim().parse::<u64>().ok()).collect())
            .unwrap_or_default();
        let mut mem_bytes = Vec::with_capacity(n);
        for i in 0..n {
            let mib = mems.get(i).or(mems.last()).copied().unwrap_or(16384);
            mem_bytes.push(mib << 20);
        }
        let given: Vec<String> = std::env::var("VGPU_SIM_UUIDS")
            .ok()
            .map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        let uuids = (0..n).map(|i| given.get(i).cloned().unwrap_or_else(|| default_uuid(i))).collect();
        DeviceConfig {
            mem_bytes,
            uuids,
            sm_count: env_u64("VGPU_SIM_SM_COUNT").unwrap_or(132).clamp(1, 100_000) as u32,
            driver_version: env_u64("VGPU_SIM_DRIVER_VERSION").unwrap_or(12090) as i32,
            timeslice_ns: env_u64("VGPU_SIM_TIMESLICE_US").unwrap_or(0).saturating_mul(1000),
        }
    }
}

/// `VGPU_SIM_STATE` or `/dev/shm/vgpu-sim-<uid>.state`.
pub fn default_path() -> String {
    match std::env::var("VGPU_SIM_STATE") {
        Ok(p) if !p.is_empty() => p,
        _ => format!("/dev/shm/vgpu-sim-{}.state", unsafe { libc::getuid() }),
    }
}

// ---------------------------------------------------------------------------------------------
// Layout
// ---------------------------------------------------------------------------------------------

#[repr(C)]
struct DevShared {
    total: AtomicU64,
    used: AtomicU64,
    /// End of the last kernel submitted to this device (CLOCK_MONOTONIC ns).
    tail: AtomicU64,
    /// Busy ns of reclaimed processes.
    retired_busy: AtomicU64,
    pci_bus: AtomicU32,
    _pad: u32,
    uuid: [u8; 64],
}

#[repr(C)]
struct DevRing {
    /// Busy ns of intervals pushed out of the ring.
    retired: AtomicU64,
    /// Number of intervals pushed (not counting merges); slot of interval k is k % RING.
    count: AtomicU64,
    ring: [[AtomicU64; 2]; RING],
}

#[repr(C)]
struct Rec {
    /// State and generation (see `ST_MASK`).
    state: AtomicU32,
    pid: AtomicU32,
    seq: AtomicU32,
    /// Bit d set: the process has an active context on device d.
    ctx_mask: AtomicU32,
    starttime: AtomicU64,
    used: [AtomicU64; MAX_DEVICES],
    dev: [DevRing; MAX_DEVICES],
    /// Checkpoint state (`checkpoint.rs`): 0 running, 1 locked, 2 checkpointed.
    ckpt: AtomicU32,
    _ckpt_pad: u32,
    /// While checkpointed: the bytes `used` held, given back to the device.
    saved: [AtomicU64; MAX_DEVICES],
}

/// One device's time-sliced schedule ([`Slicer`]), read and written under `Shared::sched_lock`.
#[repr(C)]
struct SchedShared {
    clock: AtomicU64,
    cur: AtomicU64,
    turn_left: AtomicU64,
    /// Bit p: record p had queued work at the last update (only those are loaded to run the
    /// schedule; every other record's backlog is empty).
    busy_mask: [AtomicU64; MAX_PROCS / 64],
    /// Per record: the state word its figures belong to (a recycled record starts from zero).
    owner: [AtomicU32; MAX_PROCS],
    queued: [AtomicU64; MAX_PROCS],
    served: [AtomicU64; MAX_PROCS],
}

#[repr(C)]
struct Shared {
    magic: AtomicU64,
    version: AtomicU32,
    ndev: AtomicU32,
    driver_version: AtomicU32,
    sm_count: AtomicU32,
    /// CLOCK_REALTIME - CLOCK_MONOTONIC at creation, ns.
    wall_minus_mono: AtomicI64,
    boot_id: [u8; 40],
    /// Slice length in ns; 0: kernels of all processes run in one FIFO.
    timeslice_ns: AtomicU64,
    /// Pid of the process holding the schedules (0: free).
    sched_lock: AtomicU32,
    _lock_pad: u32,
    _reserved: [u64; 6],
    devices: [DevShared; MAX_DEVICES],
    procs: [Rec; MAX_PROCS],
    sched: [SchedShared; MAX_DEVICES],
}

pub const FILE_SIZE: usize = std::mem::size_of::<Shared>();

fn boot_id() -> [u8; 40] {
    let mut out = [0u8; 40];
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let b = s.trim().as_bytes();
        let n = b.len().min(40);
        out[..n].copy_from_slice(&b[..n]);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Public views
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub index: usize,
    pub total: u64,
    pub used: u64,
    pub uuid: String,
    pub pci_bus: u32,
}

#[derive(Clone, Debug)]
pub struct ProcInfo {
    pub slot: usize,
    pub pid: u32,
    /// Per device: used bytes (context + allocations).
    pub used: Vec<u64>,
    /// Per device: has an active context.
    pub has_ctx: Vec<bool>,
    /// Per device: busy ns up to the time of the call.
    pub busy_ns: Vec<u64>,
}

/// A mapped state file.
pub struct SimState {
    sh: *mut Shared,
    path: String,
}

unsafe impl Send for SimState {}
unsafe impl Sync for SimState {}

impl Drop for SimState {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.sh as *mut libc::c_void, FILE_SIZE) };
    }
}

fn cpath(p: &str) -> io::Result<CString> {
    CString::new(p).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn map_fd(fd: i32) -> io::Result<*mut Shared> {
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), FILE_SIZE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut Shared)
}

impl SimState {
    /// Open (or create) the state file at [`default_path`] with the configuration from the environment.
    pub fn open_default() -> io::Result<SimState> {
        SimState::open(&default_path(), &DeviceConfig::from_env())
    }

    /// Open an existing, valid state file; never creates one.
    pub fn open_existing(path: &str) -> io::Result<SimState> {
        let cp = cpath(path)?;
        let fd = unsafe { libc::open(cp.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        unsafe { libc::fstat(fd, &mut st) };
        if st.st_size as usize != FILE_SIZE {
            unsafe { libc::close(fd) };
            return Err(io::Error::new(io::ErrorKind::InvalidData, "state file has another layout"));
        }
        let sh = map_fd(fd);
        unsafe { libc::close(fd) };
        let s = SimState { sh: sh?, path: path.to_string() };
        if s.sh().magic.load(Ordering::Acquire) != MAGIC || s.sh().version.load(Ordering::Relaxed) != LAYOUT_VERSION {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "state file has another layout"));
        }
        Ok(s)
    }

    /// Open an existing state file, or create it with `cfg`.
    pub fn open(path: &str, cfg: &DeviceConfig) -> io::Result<SimState> {
        let cp = cpath(path)?;
        for _ in 0..20 {
            let fd = unsafe { libc::open(cp.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ENOENT) {
                    return Err(e);
                }
                match Self::create(path, cfg, false) {
                    Ok(s) => return Ok(s),
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                    Err(e) => return Err(e),
                }
            }
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            unsafe { libc::fstat(fd, &mut st) };
            if st.st_size as usize != FILE_SIZE {
                unsafe { libc::close(fd) };
                return Self::create(path, cfg, true);
            }
            let sh = map_fd(fd);
            unsafe { libc::close(fd) };
            let s = SimState { sh: sh?, path: path.to_string() };
            let h = s.sh();
            if h.magic.load(Ordering::Acquire) == MAGIC
                && h.version.load(Ordering::Relaxed) == LAYOUT_VERSION
                && h.boot_id == boot_id()
            {
                return Ok(s);
            }
            drop(s);
            // Stale (older layout or previous boot): replace it.
            return Self::create(path, cfg, true);
        }
        Err(io::Error::other("could not open simulated GPU state"))
    }

    /// Create a fully initialised temp file, then publish it with link (or rename when `replace`).
    fn create(path: &str, cfg: &DeviceConfig, replace: bool) -> io::Result<SimState> {
        let tmp = format!("{}.tmp.{}.{}", path, std::process::id(), now_mono_ns());
        let ctmp = cpath(&tmp)?;
        let cp = cpath(path)?;
        let fd =
            unsafe { libc::open(ctmp.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o666) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        unsafe { libc::fchmod(fd, 0o666) };
        let cleanup = |fd: i32| unsafe {
            libc::close(fd);
            libc::unlink(ctmp.as_ptr());
        };
        if unsafe { libc::ftruncate(fd, FILE_SIZE as libc::off_t) } != 0 {
            let e = io::Error::last_os_error();
            cleanup(fd);
            return Err(e);
        }
        let sh = match map_fd(fd) {
            Ok(p) => p,
            Err(e) => {
                cleanup(fd);
                return Err(e);
            }
        };
        let s = SimState { sh, path: path.to_string() };
        s.init_header(cfg);
        let rc = if replace {
            unsafe { libc::rename(ctmp.as_ptr(), cp.as_ptr()) }
        } else {
            let r = unsafe { libc::link(ctmp.as_ptr(), cp.as_ptr()) };
            if r != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                // File systems without hard links: fall back to rename when still absent.
                if unsafe { libc::access(cp.as_ptr(), libc::F_OK) } != 0 {
                    unsafe { libc::rename(ctmp.as_ptr(), cp.as_ptr()) }
                } else {
                    unsafe { *libc::__errno_location() = libc::EEXIST };
                    -1
                }
            } else {
                r
            }
        };
        let err = if rc != 0 { Some(io::Error::last_os_error()) } else { None };
        cleanup(fd);
        match err {
            None => Ok(s),
            Some(e) => Err(e),
        }
    }

    fn init_header(&self, cfg: &DeviceConfig) {
        let h = self.sh();
        let n = cfg.mem_bytes.len().clamp(1, MAX_DEVICES);
        h.ndev.store(n as u32, Ordering::Relaxed);
        h.driver_version.store(cfg.driver_version as u32, Ordering::Relaxed);
        h.sm_count.store(cfg.sm_count, Ordering::Relaxed);
        h.timeslice_ns.store(cfg.timeslice_ns, Ordering::Relaxed);
        h.wall_minus_mono.store(now_wall_ns() as i64 - now_mono_ns() as i64, Ordering::Relaxed);
        let bid = boot_id();
        unsafe { std::ptr::write(std::ptr::addr_of!(h.boot_id) as *mut [u8; 40], bid) };
        for i in 0..n {
            let d = &h.devices[i];
            d.total.store(cfg.mem_bytes[i], Ordering::Relaxed);
            d.pci_bus.store(pci_bus_for(i), Ordering::Relaxed);
            let mut u = [0u8; 64];
            let b = cfg.uuids.get(i).cloned().unwrap_or_else(|| default_uuid(i));
            let b = b.as_bytes();
            let k = b.len().min(63);
            u[..k].copy_from_slice(&b[..k]);
            unsafe { std::ptr::write(std::ptr::addr_of!(d.uuid) as *mut [u8; 64], u) };
        }
        h.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
    }

    fn sh(&self) -> &Shared {
        unsafe { &*self.sh }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    // ---- configuration -------------------------------------------------------------------

    pub fn device_count(&self) -> usize {
        self.sh().ndev.load(Ordering::Relaxed) as usize
    }

    pub fn driver_version(&self) -> i32 {
        self.sh().driver_version.load(Ordering::Relaxed) as i32
    }

    pub fn sm_count(&self) -> u32 {
        self.sh().sm_count.load(Ordering::Relaxed)
    }

    pub fn device_total(&self, dev: usize) -> u64 {
        self.sh().devices[dev].total.load(Ordering::Relaxed)
    }

    /// Device used bytes (all processes, as charged; call [`reclaim_dead`](Self::reclaim_dead) first
    /// for an up-to-date value).
    pub fn device_used(&self, dev: usize) -> u64 {
        self.sh().devices[dev].used.load(Ordering::Relaxed)
    }

    pub fn device_uuid(&self, dev: usize) -> String {
        let u = &self.sh().devices[dev].uuid;
        let n = u.iter().position(|&c| c == 0).unwrap_or(u.len());
        String::from_utf8_lossy(&u[..n]).into_owned()
    }

    pub fn device_pci_bus(&self, dev: usize) -> u32 {
        self.sh().devices[dev].pci_bus.load(Ordering::Relaxed)
    }

    pub fn device_info(&self, dev: usize) -> DeviceInfo {
        DeviceInfo {
            index: dev,
            total: self.device_total(dev),
            used: self.device_used(dev),
            uuid: self.device_uuid(dev),
            pci_bus: self.device_pci_bus(dev),
        }
    }

    /// CLOCK_MONOTONIC ns → wall clock µs (fixed offset stored at creation: consistent everywhere).
    pub fn mono_to_wall_us(&self, mono_ns: u64) -> u64 {
        ((mono_ns as i64 + self.sh().wall_minus_mono.load(Ordering::Relaxed)) / 1000).max(0) as u64
    }

    pub fn wall_us_to_mono(&self, wall_us: u64) -> u64 {
        (wall_us as i64 * 1000 - self.sh().wall_minus_mono.load(Ordering::Relaxed)).max(0) as u64
    }

    // ---- device time ---------------------------------------------------------------------

    pub fn device_tail(&self, dev: usize) -> u64 {
        self.sh().devices[dev].tail.load(Ordering::Acquire)
    }

    /// Busy ns of `dev` up to `until` (CLOCK_MONOTONIC): all live records plus reclaimed ones.
    pub fn device_busy_ns(&self, dev: usize, until: u64) -> u64 {
        self.settle(dev);
        let h = self.sh();
        let mut sum = h.devices[dev].retired_busy.load(Ordering::Acquire);
        for slot in 0..MAX_PROCS {
            let st = st_of(h.procs[slot].state.load(Ordering::Acquire));
            if st == ST_INIT || st == ST_ALIVE {
                sum += self.ring_busy_ns(slot, dev, until);
            }
        }
        sum
    }

    // ---- process records -----------------------------------------------------------------

    /// Claim a record for `pid` (normally the caller). Reclaims dead records when the table is full.
    pub fn register(&self, pid: u32) -> Option<usize> {
        let h = self.sh();
        let start = proc_starttime(pid).unwrap_or(0);
        for attempt in 0..2 {
            for slot in 0..MAX_PROCS {
                let r = &h.procs[slot];
                let word = r.state.load(Ordering::Acquire);
                if st_of(word) != ST_FREE {
                    continue;
                }
                let generation = with_st(word, ST_FREE).wrapping_add(GEN_ONE);
                if r.state.compare_exchange(word, generation | ST_INIT, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    r.pid.store(pid, Ordering::Relaxed);
                    r.starttime.store(start, Ordering::Relaxed);
                    r.ctx_mask.store(0, Ordering::Relaxed);
                    r.ckpt.store(0, Ordering::Relaxed);
                    r.seq.fetch_add(1, Ordering::AcqRel);
                    for d in 0..MAX_DEVICES {
                        r.used[d].store(0, Ordering::Relaxed);
                        r.saved[d].store(0, Ordering::Relaxed);
                        r.dev[d].retired.store(0, Ordering::Relaxed);
                        r.dev[d].count.store(0, Ordering::Relaxed);
                    }
                    r.seq.fetch_add(1, Ordering::AcqRel);
                    r.state.store(generation | ST_ALIVE, Ordering::Release);
                    return Some(slot);
                }
            }
            if attempt == 0 {
                self.reclaim_dead();
            }
        }
        None
    }

    /// Release a record now (the owner exits cleanly). Memory returns to the device.
    pub fn unregister(&self, slot: usize) {
        let r = &self.sh().procs[slot];
        let word = r.state.load(Ordering::Acquire);
        if st_of(word) == ST_ALIVE
            && r.state.compare_exchange(word, with_st(word, ST_RECLAIM), Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            self.retire_record(slot);
        }
    }

    /// Charge `bytes` on `dev` to record `slot`; false if the device is full.
    pub fn try_charge(&self, slot: usize, dev: usize, bytes: u64) -> bool {
        let d = &self.sh().devices[dev];
        let total = d.total.load(Ordering::Relaxed);
        let mut cur = d.used.load(Ordering::Relaxed);
        loop {
            if cur.saturating_add(bytes) > total {
                return false;
            }
            match d.used.compare_exchange_weak(cur, cur + bytes, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(v) => cur = v,
            }
        }
        self.sh().procs[slot].used[dev].fetch_add(bytes, Ordering::AcqRel);
        true
    }

    /// Like [`try_charge`](Self::try_charge), reclaiming dead processes and retrying once when full.
    pub fn charge(&self, slot: usize, dev: usize, bytes: u64) -> bool {
        self.try_charge(slot, dev, bytes) || (self.reclaim_dead() > 0 && self.try_charge(slot, dev, bytes))
    }

    pub fn uncharge(&self, slot: usize, dev: usize, bytes: u64) {
        let r = &self.sh().procs[slot];
        let mut cur = r.used[dev].load(Ordering::Relaxed);
        let take = loop {
            let take = bytes.min(cur);
            match r.used[dev].compare_exchange_weak(cur, cur - take, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break take,
                Err(v) => cur = v,
            }
        };
        sat_sub(&self.sh().devices[dev].used, take);
    }

    pub fn set_ctx_active(&self, slot: usize, dev: usize, active: bool) {
        let r = &self.sh().procs[slot];
        if active {
            r.ctx_mask.fetch_or(1 << dev, Ordering::AcqRel);
        } else {
            r.ctx_mask.fetch_and(!(1 << dev), Ordering::AcqRel);
        }
    }

    /// Schedule `dur` ns of work on `dev`, not before `earliest`: start = max(earliest, device tail),
    /// reserved by CAS on the device tail, then recorded for `slot`. The owning process must serialise
    /// its calls for one slot (the record has a single writer).
    pub fn submit(&self, slot: usize, dev: usize, earliest: u64, dur: u64) -> (u64, u64) {
        let d = &self.sh().devices[dev];
        let mut tail = d.tail.load(Ordering::Acquire);
        let (start, end) = loop {
            let start = earliest.max(tail);
            let end = start + dur;
            match d.tail.compare_exchange_weak(tail, end, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break (start, end),
                Err(v) => tail = v,
            }
        };
        self.record_interval(slot, dev, start, end);
        (start, end)
    }

    /// Append an interval to the record's ring (single writer).
    pub fn record_interval(&self, slot: usize, dev: usize, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let r = &self.sh().procs[slot];
        let dr = &r.dev[dev];
        r.seq.fetch_add(1, Ordering::AcqRel); // odd: writing
        fence(Ordering::Release);
        let n = dr.count.load(Ordering::Relaxed);
        let last = if n > 0 { Some(&dr.ring[((n - 1) % RING as u64) as usize]) } else { None };
        match last {
            Some(l) if l[1].load(Ordering::Relaxed) == start => l[1].store(end, Ordering::Relaxed),
            _ => {
                let e = &dr.ring[(n % RING as u64) as usize];
                if n >= RING as u64 {
                    let (s0, e0) = (e[0].load(Ordering::Relaxed), e[1].load(Ordering::Relaxed));
                    dr.retired.fetch_add(e0.saturating_sub(s0), Ordering::Relaxed);
                }
                e[0].store(start, Ordering::Relaxed);
                e[1].store(end, Ordering::Relaxed);
                dr.count.store(n + 1, Ordering::Relaxed);
            }
        }
        r.seq.fetch_add(1, Ordering::Release); // even: stable
    }

    /// Busy ns of record `slot` on `dev` up to `until` (CLOCK_MONOTONIC). Exact for any `until` at or
    /// after the end of the newest interval that has been pushed out of the ring.
    /// Time-sliced: the schedule is run up to now first (later work is not known yet).
    pub fn busy_ns(&self, slot: usize, dev: usize, until: u64) -> u64 {
        self.settle(dev);
        self.ring_busy_ns(slot, dev, until)
    }

    fn ring_busy_ns(&self, slot: usize, dev: usize, until: u64) -> u64 {
        let r = &self.sh().procs[slot];
        let dr = &r.dev[dev];
        let mut spins = 0u32;
        loop {
            let s1 = r.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 && spins < 10_000 {
                spins += 1;
                std::hint::spin_loop();
                if spins.is_multiple_of(100) {
                    std::thread::yield_now();
                }
                continue;
            }
            let mut sum = dr.retired.load(Ordering::Relaxed);
            let n = dr.count.load(Ordering::Relaxed);
            let k = n.min(RING as u64);
            for i in (n - k)..n {
                let e = &dr.ring[(i % RING as u64) as usize];
                let (s, e) = (e[0].load(Ordering::Relaxed), e[1].load(Ordering::Relaxed));
                if s < until {
                    sum += e.min(until).saturating_sub(s);
                }
            }
            fence(Ordering::Acquire);
            if r.seq.load(Ordering::Relaxed) == s1 || spins >= 10_000 {
                return sum;
            }
            spins += 1;
        }
    }

    /// Snapshot of the intervals of record `slot` on `dev` still in the ring (oldest first) and the
    /// retired busy ns.
    pub fn intervals(&self, slot: usize, dev: usize) -> (u64, Vec<Interval>) {
        let r = &self.sh().procs[slot];
        let dr = &r.dev[dev];
        loop {
            let s1 = r.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::thread::yield_now();
                continue;
            }
            let retired = dr.retired.load(Ordering::Relaxed);
            let n = dr.count.load(Ordering::Relaxed);
            let k = n.min(RING as u64);
            let v: Vec<Interval> = ((n - k)..n)
                .map(|i| {
                    let e = &dr.ring[(i % RING as u64) as usize];
                    Interval { start: e[0].load(Ordering::Relaxed), end: e[1].load(Ordering::Relaxed) }
                })
                .collect();
            fence(Ordering::Acquire);
            if r.seq.load(Ordering::Relaxed) == s1 {
                return (retired, v);
            }
        }
    }

    pub fn slot_pid(&self, slot: usize) -> u32 {
        self.sh().procs[slot].pid.load(Ordering::Relaxed)
    }

    pub fn slot_used(&self, slot: usize, dev: usize) -> u64 {
        self.sh().procs[slot].used[dev].load(Ordering::Relaxed)
    }

    pub fn slot_is_live(&self, slot: usize) -> bool {
        let st = st_of(self.sh().procs[slot].state.load(Ordering::Acquire));
        st == ST_ALIVE || st == ST_INIT
    }

    /// Reclaim every record whose process is gone. Returns the number reclaimed.
    pub fn reclaim_dead(&self) -> usize {
        let mut n = 0;
        for slot in 0..MAX_PROCS {
            if self.reclaim_if(slot, |pid, start| !process_alive(pid, start)) {
                n += 1;
            }
        }
        n
    }

    /// Reclaim record `slot` if it is live and `dead(pid, starttime)` says its process is gone.
    /// The claim succeeds only on the generation that was judged: a record recycled meanwhile
    /// (freed by another scanner and registered by a starting process) belongs to a live process.
    fn reclaim_if(&self, slot: usize, dead: impl FnOnce(u32, u64) -> bool) -> bool {
        let r = &self.sh().procs[slot];
        let word = r.state.load(Ordering::Acquire);
        if st_of(word) != ST_ALIVE {
            return false;
        }
        let pid = r.pid.load(Ordering::Relaxed);
        if pid == 0 || !dead(pid, r.starttime.load(Ordering::Relaxed)) {
            return false;
        }
        if r.state.compare_exchange(word, with_st(word, ST_RECLAIM), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            self.retire_record(slot);
            return true;
        }
        false
    }

    /// The reclaim of hot query paths (`cuMemGetInfo`): a real driver frees a dead process's
    /// memory at its teardown and answers the query from a counter, it does not scan `/proc` per
    /// call. Here: a record of a reaped process (`kill(pid, 0)` fails with `ESRCH`) is reclaimed
    /// at once; the full check (`/proc/<pid>/stat`: zombie, recycled pid) runs at most every
    /// `period` per process (`last_full`: CLOCK_MONOTONIC ns of the last one, the caller's).
    /// The caller's own record is never probed. Returns the number reclaimed.
    pub fn reclaim_dead_rate_limited(&self, last_full: &AtomicU64, period_ns: u64) -> usize {
        let now = now_mono_ns();
        let prev = last_full.load(Ordering::Relaxed);
        if now.saturating_sub(prev) >= period_ns
            && last_full.compare_exchange(prev, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            return self.reclaim_dead();
        }
        let me = std::process::id();
        let mut n = 0;
        for slot in 0..MAX_PROCS {
            if self.reclaim_if(slot, |pid, _| pid != me && process_reaped(pid)) {
                n += 1;
            }
        }
        n
    }

    /// Caller owns the record in state RECLAIM.
    fn retire_record(&self, slot: usize) {
        let _sched = self.sched_guard();
        let h = self.sh();
        let r = &h.procs[slot];
        let ndev = self.device_count();
        for d in 0..MAX_DEVICES {
            let used = r.used[d].swap(0, Ordering::AcqRel);
            if d < ndev {
                sat_sub(&h.devices[d].used, used);
                let busy = self.ring_busy_ns(slot, d, u64::MAX);
                h.devices[d].retired_busy.fetch_add(busy, Ordering::AcqRel);
            }
            r.dev[d].count.store(0, Ordering::Relaxed);
            r.dev[d].retired.store(0, Ordering::Relaxed);
            r.saved[d].store(0, Ordering::Relaxed);
        }
        r.ckpt.store(0, Ordering::Relaxed);
        r.ctx_mask.store(0, Ordering::Relaxed);
        r.pid.store(0, Ordering::Relaxed);
        let word = r.state.load(Ordering::Relaxed);
        r.state.store(with_st(word, ST_FREE), Ordering::Release);
    }

    /// Live processes (after reclaiming dead ones), with per-device used bytes and busy ns up to now.
    pub fn processes(&self) -> Vec<ProcInfo> {
        self.reclaim_dead();
        for d in 0..self.device_count() {
            self.settle(d);
        }
        let now = now_mono_ns();
        let h = self.sh();
        let ndev = self.device_count();
        let mut out = Vec::new();
        for slot in 0..MAX_PROCS {
            let r = &h.procs[slot];
            if st_of(r.state.load(Ordering::Acquire)) != ST_ALIVE {
                continue;
            }
            let mask = r.ctx_mask.load(Ordering::Relaxed);
            out.push(ProcInfo {
                slot,
                pid: r.pid.load(Ordering::Relaxed),
                used: (0..ndev).map(|d| r.used[d].load(Ordering::Relaxed)).collect(),
                has_ctx: (0..ndev).map(|d| mask & (1 << d) != 0).collect(),
                busy_ns: (0..ndev).map(|d| self.ring_busy_ns(slot, d, now)).collect(),
            });
        }
        out
    }

    /// Busy ns of `pid` on `dev` up to `until` (0 when the pid has no live record).
    pub fn pid_busy_ns(&self, pid: u32, dev: usize, until: u64) -> u64 {
        self.settle(dev);
        let h = self.sh();
        (0..MAX_PROCS)
            .filter(|&s| {
                st_of(h.procs[s].state.load(Ordering::Acquire)) == ST_ALIVE
                    && h.procs[s].pid.load(Ordering::Relaxed) == pid
            })
            .map(|s| self.ring_busy_ns(s, dev, until))
            .sum()
    }

    // ---- time-sliced schedule (`VGPU_SIM_TIMESLICE_US`) ------------------------------------

    /// Slice length in ns; 0 when kernels of all processes run in one FIFO ([`submit`](Self::submit)).
    pub fn timeslice_ns(&self) -> u64 {
        self.sh().timeslice_ns.load(Ordering::Relaxed)
    }

    /// Hold the schedules (all devices) while time-sliced; nothing otherwise. A holder that died
    /// with it is skipped.
    fn sched_guard(&self) -> Option<SchedGuard<'_>> {
        if self.timeslice_ns() == 0 {
            return None;
        }
        let l = &self.sh().sched_lock;
        let me = std::process::id();
        let mut spins = 0u32;
        loop {
            let cur = l.load(Ordering::Relaxed);
            let free = cur == 0 || (spins >= 2000 && spins.is_multiple_of(2000) && process_reaped(cur));
            if free && l.compare_exchange(cur, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Some(SchedGuard(l));
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// The schedule of `dev` (caller holds the guard): the records with queued work and `want`;
    /// records recycled since their figures were written start from zero.
    fn load_slicer(&self, dev: usize, want: Option<usize>) -> Loaded {
        let h = self.sh();
        let sc = &h.sched[dev];
        let mut s = Slicer::new(self.timeslice_ns(), MAX_PROCS);
        s.clock = sc.clock.load(Ordering::Relaxed);
        s.cur = sc.cur.load(Ordering::Relaxed) as usize % MAX_PROCS;
        s.turn_left = sc.turn_left.load(Ordering::Relaxed);
        let mut mask: [u64; MAX_PROCS / 64] = std::array::from_fn(|i| sc.busy_mask[i].load(Ordering::Relaxed));
        if let Some(p) = want {
            mask[p / 64] |= 1 << (p % 64);
        }
        let mut slots = Vec::new();
        for (i, &m) in mask.iter().enumerate() {
            let mut m = m;
            while m != 0 {
                let p = i * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                let word = h.procs[p].state.load(Ordering::Acquire);
                if st_of(word) == ST_ALIVE && sc.owner[p].load(Ordering::Relaxed) == word {
                    s.queued[p] = sc.queued[p].load(Ordering::Relaxed);
                    s.served[p] = sc.served[p].load(Ordering::Relaxed);
                }
                slots.push((p, word));
            }
        }
        Loaded { s, slots }
    }

    fn store_slicer(&self, dev: usize, l: &Loaded) {
        let sc = &self.sh().sched[dev];
        let s = &l.s;
        sc.clock.store(s.clock, Ordering::Relaxed);
        sc.cur.store(s.cur as u64, Ordering::Relaxed);
        sc.turn_left.store(s.turn_left, Ordering::Relaxed);
        let mut mask = [0u64; MAX_PROCS / 64];
        for &(p, word) in &l.slots {
            sc.owner[p].store(word, Ordering::Relaxed);
            sc.queued[p].store(s.queued[p], Ordering::Relaxed);
            sc.served[p].store(s.served[p], Ordering::Relaxed);
            if s.backlog(p) > 0 {
                mask[p / 64] |= 1 << (p % 64);
            }
        }
        for (w, m) in sc.busy_mask.iter().zip(mask) {
            w.store(m, Ordering::Relaxed);
        }
    }

    /// Run the schedule of `dev` up to now (caller holds the guard), recording what ran.
    fn run_slicer(&self, dev: usize, want: Option<usize>) -> Loaded {
        let mut l = self.load_slicer(dev, want);
        l.s.advance(now_mono_ns(), |p, a, b| self.record_interval(p, dev, a, b));
        l
    }

    /// Time-sliced: run the schedule of `dev` up to now, so that the busy intervals cover it.
    pub fn settle(&self, dev: usize) {
        if let Some(_g) = self.sched_guard() {
            let l = self.run_slicer(dev, None);
            self.store_slicer(dev, &l);
        }
    }

    /// Time-sliced: queue `dur` ns of work for record `slot` on `dev` now; returns its ticket
    /// (complete once [`served_ns`](Self::served_ns) reaches it).
    pub fn queue(&self, slot: usize, dev: usize, dur: u64) -> u64 {
        let _g = self.sched_guard();
        let mut l = self.run_slicer(dev, Some(slot));
        let t = l.s.queue(slot, dur);
        self.store_slicer(dev, &l);
        t
    }

    /// Time-sliced: (served, queued) device time of record `slot` on `dev` up to now.
    pub fn served_ns(&self, slot: usize, dev: usize) -> (u64, u64) {
        let _g = self.sched_guard();
        let l = self.run_slicer(dev, Some(slot));
        self.store_slicer(dev, &l);
        (l.s.served[slot], l.s.queued[slot])
    }

    /// Time-sliced: the earliest time record `slot` can reach `ticket` on `dev` (exact unless other
    /// work is queued meanwhile); the time it reached it when it already has (from the record's
    /// intervals; now when they no longer reach back or the record never queued that much).
    pub fn ticket_time(&self, slot: usize, dev: usize, ticket: u64) -> u64 {
        let _g = self.sched_guard();
        let l = self.run_slicer(dev, Some(slot));
        self.store_slicer(dev, &l);
        let s = &l.s;
        if s.served[slot] < ticket {
            return if s.queued[slot] >= ticket { s.predict(slot, ticket) } else { s.clock };
        }
        let (_, iv) = self.intervals(slot, dev);
        let mut cum = s.served[slot];
        for i in iv.iter().rev() {
            let before = cum.saturating_sub(i.end - i.start);
            if before < ticket {
                return i.start + (ticket - before);
            }
            cum = before;
        }
        s.clock
    }
}

struct SchedGuard<'a>(&'a AtomicU32);

/// A device's schedule as loaded: the slicer and the records loaded into it (with the state word
/// each was read under).
struct Loaded {
    s: Slicer,
    slots: Vec<(usize, u32)>,
}

impl Drop for SchedGuard<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

fn sat_sub(a: &AtomicU64, v: u64) {
    let mut cur = a.load(Ordering::Relaxed);
    loop {
        match a.compare_exchange_weak(cur, cur.saturating_sub(v), Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return,
            Err(x) => cur = x,
        }
    }
}

/// PCI bus number of device `i` (NVML and CUDA agree on it).
pub fn pci_bus_for(i: usize) -> u32 {
    0x18 + 0x10 * i as u32
}

/// Field 22 (starttime) of /proc/<pid>/stat, and the state letter. Opened relative to `/proc`, so
/// that under qemu-user a process reads its own start time from the kernel, as every other
/// process does (qemu answers an absolute path naming the caller itself with its own figure).
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    let proc = std::fs::File::open("/proc").ok()?;
    let rel = CString::new(format!("{pid}/stat")).ok()?;
    // SAFETY: `rel` is NUL-terminated, `proc` an open directory; the File below owns the result.
    let fd = unsafe { libc::openat(proc.as_raw_fd(), rel.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut s = String::new();
    // SAFETY: `fd` was just opened and nothing else owns it.
    unsafe { std::fs::File::from_raw_fd(fd) }.read_to_string(&mut s).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    // rest starts at field 3 (state); starttime is field 22 → 19 more.
    let start = it.nth(18)?.parse().ok()?;
    Some((state, start))
}

fn proc_starttime(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, s)| s)
}

/// `pid` no longer exists at all (exited and reaped): `kill(pid, 0)` fails with `ESRCH`.
fn process_reaped(pid: u32) -> bool {
    if pid > i32::MAX as u32 {
        return true;
    }
    let r = unsafe { libc::kill(pid as i32, 0) };
    r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Is `pid` alive (not a zombie) and still the process that registered (same start time)?
pub fn process_alive(pid: u32, starttime: u64) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    let r = unsafe { libc::kill(pid as i32, 0) };
    if r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match proc_stat(pid) {
        Some((st, start)) => !(st == 'Z' || st == 'X' || (starttime != 0 && start != starttime)),
        // No stat although kill() found it: /proc missing (assume alive) or it just vanished.
        None => !std::path::Path::new("/proc/self").exists(),
    }
}

#[cfg(test)]
mod tests;
