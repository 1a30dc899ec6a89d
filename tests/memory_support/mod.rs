//! Support for the memory tests (tests/memory_*.rs): the interactive C client
//! (`tests/c/mem_client.c`), an independent reader of the v1.2 region file (byte offsets written
//! out here from docs/hami-contract.md §3, deliberately NOT taken from `vgpu_core::region`), and the
//! container lock taken from the test side for consistent snapshots.
// Included by several test binaries; each uses a part.
#![allow(dead_code)]

use crate::common::{Sandbox, Spawned};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;
pub const CUDA_SUCCESS: i64 = 0;
pub const CUDA_ERROR_INVALID_VALUE: i64 = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: i64 = 2;

// ------------------------------------------------------------------------------------------------
// Independent offset table (docs/hami-contract.md §3.2-§3.4).

pub mod off {
    pub const MAGIC: usize = 0;
    pub const MAJOR: usize = 4;
    pub const MINOR: usize = 8;
    pub const SM_INIT_FLAG: usize = 12;
    pub const OWNER_PID: usize = 16;
    pub const SEM: usize = 24;
    pub const DEVICE_NUM: usize = 56;
    pub const UUIDS: usize = 64;
    pub const UUID_LEN: usize = 96;
    pub const LIMIT: usize = 1600;
    pub const SM_LIMIT: usize = 1728;
    pub const PROCS: usize = 1856;
    pub const SLOT_SIZE: usize = 1960;
    pub const PROC_NUM: usize = 2_008_896;
    pub const UTILIZATION_SWITCH: usize = 2_008_900;
    pub const RECENT_KERNEL: usize = 2_008_904;
    pub const PRIORITY: usize = 2_008_908;
    pub const LAST_KERNEL_TIME: usize = 2_008_912;
    pub const SEM_POSTINIT: usize = 2_008_920;
    pub const REGION_SIZE: usize = 2_008_952;
    /// File size the C library writes (sizeof + 1).
    pub const C_FILE_SIZE: usize = REGION_SIZE + 1;
    pub const V0_FILE_SIZE: usize = 1_197_897;

    // Slot-relative.
    pub const S_PID: usize = 0;
    pub const S_HOSTPID: usize = 4;
    pub const S_USED: usize = 8;
    pub const DEVMEM_SIZE: usize = 64;
    pub const S_MONITORUSED: usize = 1032;
    pub const S_DEVICE_UTIL: usize = 1160;
    pub const S_STATUS: usize = 1928;
    pub const S_SEQLOCK: usize = 1936;

    // device_memory_t-relative.
    pub const D_CONTEXT: usize = 0;
    pub const D_MODULE: usize = 8;
    pub const D_DATA: usize = 16;
    pub const D_OFFSET: usize = 24;
    pub const D_TOTAL: usize = 32;

    pub const MAGIC_VALUE: i32 = 19_920_718;
    pub const MAX_PROCS: usize = 1024;

    pub const fn slot(k: usize) -> usize {
        PROCS + SLOT_SIZE * k
    }
    pub const fn used(k: usize, dev: usize, field: usize) -> usize {
        slot(k) + S_USED + DEVMEM_SIZE * dev + field
    }
}

/// One device_memory_t of a slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevMem {
    pub context: u64,
    pub module: u64,
    pub data: u64,
    pub offset: u64,
    pub total: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub index: usize,
    pub pid: i32,
    pub hostpid: i32,
    pub status: i32,
    pub seqlock: u64,
    pub used: Vec<DevMem>,
}

/// The bytes of a region file and typed accessors at the contract's offsets.
#[derive(Clone)]
pub struct Snap {
    pub bytes: Vec<u8>,
    pub file_len: u64,
}

impl Snap {
    pub fn read(path: &Path) -> Snap {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read region {}: {e}", path.display()));
        let file_len = bytes.len() as u64;
        assert!(bytes.len() >= off::REGION_SIZE, "region file {} is only {} bytes", path.display(), bytes.len());
        Snap { bytes, file_len }
    }
    pub fn u32(&self, o: usize) -> u32 {
        u32::from_le_bytes(self.bytes[o..o + 4].try_into().unwrap())
    }
    pub fn i32(&self, o: usize) -> i32 {
        i32::from_le_bytes(self.bytes[o..o + 4].try_into().unwrap())
    }
    pub fn u64(&self, o: usize) -> u64 {
        u64::from_le_bytes(self.bytes[o..o + 8].try_into().unwrap())
    }
    pub fn magic(&self) -> i32 {
        self.i32(off::MAGIC)
    }
    pub fn proc_num(&self) -> usize {
        self.i32(off::PROC_NUM).clamp(0, off::MAX_PROCS as i32) as usize
    }
    pub fn limit(&self, dev: usize) -> u64 {
        self.u64(off::LIMIT + 8 * dev)
    }
    pub fn sm_limit(&self, dev: usize) -> u64 {
        self.u64(off::SM_LIMIT + 8 * dev)
    }
    pub fn device_num(&self) -> u64 {
        self.u64(off::DEVICE_NUM)
    }
    pub fn priority(&self) -> i32 {
        self.i32(off::PRIORITY)
    }
    /// The raw 96-byte uuid field of device `d`.
    pub fn uuid_field(&self, d: usize) -> &[u8] {
        let o = off::UUIDS + off::UUID_LEN * d;
        &self.bytes[o..o + off::UUID_LEN]
    }
    /// The NUL-terminated string of device `d`'s uuid field.
    pub fn uuid(&self, d: usize) -> String {
        let f = self.uuid_field(d);
        let n = f.iter().position(|&b| b == 0).unwrap_or(f.len());
        String::from_utf8_lossy(&f[..n]).into_owned()
    }
    pub fn devmem(&self, k: usize, dev: usize) -> DevMem {
        DevMem {
            context: self.u64(off::used(k, dev, off::D_CONTEXT)),
            module: self.u64(off::used(k, dev, off::D_MODULE)),
            data: self.u64(off::used(k, dev, off::D_DATA)),
            offset: self.u64(off::used(k, dev, off::D_OFFSET)),
            total: self.u64(off::used(k, dev, off::D_TOTAL)),
        }
    }
    pub fn slot(&self, k: usize) -> Slot {
        let b = off::slot(k);
        Slot {
            index: k,
            pid: self.i32(b + off::S_PID),
            hostpid: self.i32(b + off::S_HOSTPID),
            status: self.i32(b + off::S_STATUS),
            seqlock: self.u64(b + off::S_SEQLOCK),
            used: (0..16).map(|d| self.devmem(k, d)).collect(),
        }
    }
    /// Slots the monitor counts: `k < proc_num` and `status != 0`.
    pub fn live_slots(&self) -> Vec<Slot> {
        (0..self.proc_num()).map(|k| self.slot(k)).filter(|s| s.status != 0).collect()
    }
    /// The slot of `pid` among `[0, proc_num)` (panics if it appears more than once).
    pub fn slot_of(&self, pid: u32) -> Option<Slot> {
        let v: Vec<Slot> = (0..self.proc_num()).map(|k| self.slot(k)).filter(|s| s.pid == pid as i32).collect();
        assert!(v.len() <= 1, "pid {pid} has {} slots: {v:?}", v.len());
        v.into_iter().next()
    }
    /// What the monitor sums for a device: Σ used[dev].total over live slots.
    pub fn container_total(&self, dev: usize) -> u64 {
        self.live_slots().iter().map(|s| s.used[dev].total).sum()
    }
    pub fn container_data(&self, dev: usize) -> u64 {
        self.live_slots().iter().map(|s| s.used[dev].data).sum()
    }
    pub fn container_context(&self, dev: usize) -> u64 {
        self.live_slots().iter().map(|s| s.used[dev].context).sum()
    }
    /// `used[dev]` of `pid`'s slot (panics if it has none).
    #[track_caller]
    pub fn used_of(&self, pid: u32, dev: usize) -> DevMem {
        self.slot_of(pid).unwrap_or_else(|| panic!("pid {pid} has no slot; slots: {:?}", self.live_slots())).used[dev]
    }
}

/// Write a little-endian value into a byte buffer at `o`.
pub fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_i32(b: &mut [u8], o: usize, v: i32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

// ------------------------------------------------------------------------------------------------
// The container lock, from the test side: an OFD write lock on the byte right after the v1.2
// region (design.md "The usage region"; the shim holds it for every slot/usage change). Holding
// it gives an instant-consistent snapshot of all slots.

pub const LOCK_BYTE: i64 = off::REGION_SIZE as i64;

pub struct RegionLock {
    file: std::fs::File,
}

fn ofd(fd: i32, cmd: i32, ty: i16) -> std::io::Result<()> {
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = ty;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = LOCK_BYTE;
    fl.l_len = 1;
    if unsafe { libc::fcntl(fd, cmd, &mut fl) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

impl RegionLock {
    /// Take the lock, failing the test if it cannot be had within `bound` (the lock-hold bound
    /// the issue asks for is < 1 s).
    #[track_caller]
    pub fn take(path: &Path, bound: Duration) -> RegionLock {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open region for lock");
        let start = Instant::now();
        loop {
            match ofd(file.as_raw_fd(), libc::F_OFD_SETLK, libc::F_WRLCK as i16) {
                Ok(()) => return RegionLock { file },
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => {
                    assert!(
                        start.elapsed() < bound,
                        "region lock of {} not obtainable within {bound:?}",
                        path.display()
                    );
                    std::thread::yield_now();
                }
                Err(e) => panic!("OFD lock on {}: {e}", path.display()),
            }
        }
    }
    /// The lock if it can be had within `bound`, else `None`.
    pub fn try_take(path: &Path, bound: Duration) -> Option<RegionLock> {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).ok()?;
        let start = Instant::now();
        loop {
            match ofd(file.as_raw_fd(), libc::F_OFD_SETLK, libc::F_WRLCK as i16) {
                Ok(()) => return Some(RegionLock { file }),
                Err(_) if start.elapsed() < bound => std::thread::yield_now(),
                Err(_) => return None,
            }
        }
    }
    /// Snapshot of the header, the first `nslots` slots and the tail (the rest reads as zero):
    /// cheap enough to take many times a second while processes allocate.
    pub fn snap_prefix(&self, nslots: usize) -> Snap {
        let len = self.file.metadata().unwrap().len();
        let mut bytes = vec![0u8; off::REGION_SIZE];
        let head = off::slot(nslots.min(off::MAX_PROCS));
        self.file.read_exact_at(&mut bytes[..head], 0).expect("read region head");
        self.file.read_exact_at(&mut bytes[off::PROC_NUM..], off::PROC_NUM as u64).expect("read region tail");
        Snap { bytes, file_len: len }
    }
    /// Snapshot while holding the lock.
    pub fn snap(&self) -> Snap {
        let len = self.file.metadata().unwrap().len();
        let mut bytes = vec![0u8; len as usize];
        self.file.read_exact_at(&mut bytes, 0).expect("read region");
        Snap { bytes, file_len: len }
    }
}

impl Drop for RegionLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        let _ = ofd(self.file.as_raw_fd(), libc::F_OFD_SETLK, libc::F_UNLCK as i16);
    }
}

/// A consistent snapshot (taken under the container lock).
#[track_caller]
pub fn locked_snap(path: &Path) -> Snap {
    RegionLock::take(path, Duration::from_secs(2)).snap()
}

// ------------------------------------------------------------------------------------------------
// Building the client.

/// `testbin/mem_client` (the shared on-demand builder: once per test binary, atomically replaced).
#[track_caller]
pub fn mem_client() -> PathBuf {
    crate::common::c_program("mem_client", &["mem_client.c", "mem13_cmds.c"], &["-lcuda", "-lnvidia-ml", "-lpthread"])
}

// ------------------------------------------------------------------------------------------------
// The interactive client.

pub struct Spawn<'a> {
    sb: &'a Sandbox,
    env: Vec<(String, Option<String>)>,
    shim: bool,
    region: PathBuf,
}

/// Start describing a client in sandbox `sb` (shim preloaded by default; region = the sandbox's).
pub fn client(sb: &Sandbox) -> Spawn<'_> {
    Spawn { sb, env: Vec::new(), shim: true, region: sb.region() }
}

impl<'a> Spawn<'a> {
    pub fn env(mut self, k: &str, v: impl ToString) -> Self {
        self.env.push((k.to_string(), Some(v.to_string())));
        self
    }
    pub fn env_remove(mut self, k: &str) -> Self {
        self.env.push((k.to_string(), None));
        self
    }
    pub fn shim(mut self, on: bool) -> Self {
        self.shim = on;
        self
    }
    pub fn region(mut self, p: impl Into<PathBuf>) -> Self {
        self.region = p.into();
        self
    }
    /// Spawn through the harness's runner ([`crate::common::Run::spawn`]), without the
    /// simulator's call-count file.
    pub fn spawn(self) -> Client {
        let mut run = self
            .sb
            .run(mem_client())
            .shim(self.shim)
            .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", &self.region)
            .env_remove("VGPU_SIM_COUNT_FILE");
        for (k, v) in self.env {
            run = match v {
                Some(v) => run.env(k, v),
                None => run.env_remove(k),
            };
        }
        let p = run.spawn();
        let mut c = Client { pid: p.pid, p, timeout: Duration::from_secs(15) };
        let r = c.read_line("startup");
        assert_eq!(r.get("ready").map(String::as_str), Some("1"), "client did not start: {}", c.stderr());
        c
    }
}

/// One reply line parsed into key → value.
#[derive(Clone, Debug, Default)]
pub struct Resp {
    pub line: String,
    pub map: HashMap<String, String>,
}

impl Resp {
    fn parse(line: String) -> Resp {
        let map = line
            .split_whitespace()
            .filter_map(|t| t.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Resp { line, map }
    }
    pub fn get(&self, k: &str) -> Option<&String> {
        self.map.get(k)
    }
    #[track_caller]
    pub fn s(&self, k: &str) -> &str {
        self.map.get(k).unwrap_or_else(|| panic!("key {k} missing in reply `{}`", self.line))
    }
    #[track_caller]
    pub fn u64(&self, k: &str) -> u64 {
        self.s(k).parse().unwrap_or_else(|e| panic!("key {k} in `{}`: {e}", self.line))
    }
    #[track_caller]
    pub fn i64(&self, k: &str) -> i64 {
        self.s(k).parse().unwrap_or_else(|e| panic!("key {k} in `{}`: {e}", self.line))
    }
    #[track_caller]
    pub fn rc(&self) -> i64 {
        self.i64("rc")
    }
    #[track_caller]
    pub fn id(&self) -> i64 {
        self.i64("id")
    }
    /// `procs=pid:used,...` of `nvml_procs`.
    pub fn procs(&self) -> Vec<(u32, u64)> {
        let v = self.map.get("procs").map(String::as_str).unwrap_or("");
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(|e| {
                let (p, u) = e.split_once(':').expect("pid:used");
                (p.parse().unwrap(), u.parse().unwrap())
            })
            .collect()
    }
}

pub struct Client {
    p: Spawned,
    pub pid: u32,
    pub timeout: Duration,
}

/// How a client ended.
#[derive(Debug)]
pub struct Ended {
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr: String,
}

impl Ended {
    /// Shim log lines `(level, message)`.
    pub fn shim_logs(&self) -> Vec<(String, String)> {
        shim_logs(&self.stderr)
    }
}

pub fn shim_logs(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[libvgpu ")?;
            let (_pid, rest) = rest.split_once("] ")?;
            let (level, msg) = rest.split_once(": ")?;
            Some((level.to_string(), msg.to_string()))
        })
        .collect()
}

impl Client {
    pub fn stderr(&self) -> String {
        self.p.stderr()
    }

    fn ended(&self, status: ExitStatus) -> Ended {
        Ended { pid: self.pid, code: status.code(), signal: status.signal(), stderr: self.stderr() }
    }

    #[track_caller]
    fn read_line(&mut self, what: &str) -> Resp {
        match self.p.recv_line(self.timeout) {
            Ok(l) => Resp::parse(l),
            Err(RecvTimeoutError::Timeout) => {
                let e = self.stderr();
                self.kill();
                panic!("client {} did not answer `{what}` within {:?}\n--- stderr ---\n{e}", self.pid, self.timeout)
            }
            Err(RecvTimeoutError::Disconnected) => {
                let st = self.p.wait_blocking();
                panic!(
                    "client {} exited ({st:?}) before answering `{what}`\n--- stderr ---\n{}",
                    self.pid,
                    self.stderr()
                )
            }
        }
    }

    /// Send a command, return its reply.
    #[track_caller]
    pub fn cmd(&mut self, line: &str) -> Resp {
        self.send(line);
        self.read_line(line)
    }

    /// Send without waiting for the reply (collect it with [`Client::reply`]).
    #[track_caller]
    pub fn send(&mut self, line: &str) {
        if let Err(e) = self.p.send_line(line) {
            panic!("client {} cannot take `{line}`: {e}\n{}", self.pid, self.stderr());
        }
    }

    /// The reply of a command sent with [`Client::send`], waiting at most `timeout`.
    #[track_caller]
    pub fn reply(&mut self, what: &str, timeout: Duration) -> Resp {
        let t = std::mem::replace(&mut self.timeout, timeout);
        let r = self.read_line(what);
        self.timeout = t;
        r
    }

    /// Non-blocking: the reply if it has arrived.
    pub fn try_reply(&mut self) -> Option<Resp> {
        self.p.try_line().map(Resp::parse)
    }

    /// `cmd` that must return rc=0.
    #[track_caller]
    pub fn ok(&mut self, line: &str) -> Resp {
        let r = self.cmd(line);
        assert_eq!(r.get("rc").map(String::as_str), Some("0"), "`{line}` failed: `{}`\n{}", r.line, self.stderr());
        r
    }

    /// `init` + `ctx ord`.
    #[track_caller]
    pub fn init_ctx(&mut self, ord: i32) {
        self.ok("init");
        self.ok(&format!("ctx {ord}"));
    }

    /// Ask the client to exit normally and wait for it (bounded).
    #[track_caller]
    pub fn exit(mut self) -> Ended {
        self.send("exit");
        let r = self.read_line("exit");
        assert_eq!(r.get("bye").map(String::as_str), Some("1"));
        self.p.close_stdin();
        self.wait(Duration::from_secs(10))
    }

    /// Wait for the process to end by itself within `deadline`.
    #[track_caller]
    pub fn wait(&mut self, deadline: Duration) -> Ended {
        match self.p.wait_within(deadline) {
            Ok(status) => self.ended(status),
            Err(()) => panic!("client {} did not exit within {deadline:?}\n{}", self.pid, self.stderr()),
        }
    }

    /// SIGKILL the client and reap it.
    pub fn kill(&mut self) -> Option<Ended> {
        let status = self.p.kill()?;
        Some(self.ended(status))
    }

    /// Raw signal (SIGSTOP/SIGCONT/SIGKILL) without reaping.
    pub fn signal(&self, sig: i32) {
        self.p.signal(sig);
    }

    pub fn is_running(&mut self) -> bool {
        self.p.is_running()
    }
}

/// Process state letter from /proc/<pid>/stat (`R`, `S`, `T`, `Z` …).
pub fn proc_state(pid: u32) -> Option<u8> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = s.iter().rposition(|&b| b == b')')?;
    s.get(close + 2).copied()
}

/// Whether `pid` holds an OFD lock on the region's lock byte, from its /proc fdinfo.
pub fn holds_region_lock(pid: u32, region: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    let canon = std::fs::canonicalize(region).unwrap_or_else(|_| region.to_path_buf());
    for e in dir.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else { continue };
        if target != canon {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy()))
            .unwrap_or_default();
        for l in info.lines().filter(|l| l.starts_with("lock:")) {
            // lock:	1: OFDLCK  ADVISORY  WRITE -1 00:2e:1234 2008952 2008952
            let f: Vec<&str> = l.split_whitespace().collect();
            if l.contains("OFDLCK") && f.len() >= 2 && f[f.len() - 2] == LOCK_BYTE.to_string() {
                return true;
            }
        }
    }
    false
}

/// A reaped pid that is certainly dead (for stale slots).
pub fn dead_pid() -> i32 {
    let mut c = Command::new("true").spawn().expect("spawn true");
    let pid = c.id() as i32;
    c.wait().unwrap();
    pid
}

pub fn round_up(v: u64, g: u64) -> u64 {
    v.div_ceil(g) * g
}
