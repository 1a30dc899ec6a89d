//! A consistent-enough copy of one region file and what it says, read the way HAMi's vGPU
//! monitor reads it (docs/hami-contract.md §3.10, §4.1): a slot counts iff `k < proc_num` and
//! `status != 0`; the device sums are `slots::container_breakdown` over that copy.
//!
//! The file is read with `pread` into private memory, never mapped (`vgpu_core::noderegion`): a
//! file truncated while we read cannot fault us, and nothing we do here can write the region.

use std::path::Path;
use std::sync::atomic::Ordering;
use vgpu_core::counters::{self, Counters};
use vgpu_core::noderegion::{self, Access};
use vgpu_core::region::{EXT_MAGIC, EXT_VERSION, FILE_SIZE, MAX_DEVICES, MAX_PROCS, RegionMap, SharedRegion};
use vgpu_core::slots;

/// A measured SM share older than this is not shown ("over the last seconds").
pub const SHARE_FRESH_NS: u64 = 10_000_000_000;

#[derive(Clone, Debug)]
pub struct DeviceSnap {
    pub index: usize,
    /// `None`: byte 0 of `uuids[d]` is 0 (the monitor skips such a device).
    pub uuid: Option<String>,
    pub limit: u64,
    pub used: u64,
    pub context: u64,
    pub module: u64,
    pub data: u64,
    pub sm_limit: u64,
    /// The burst ceiling, percent (`None` = unset: the SM limit is the cap).
    pub sm_ceiling: Option<u64>,
    /// Container share of the device in ppm, if measured within [`SHARE_FRESH_NS`].
    pub share_ppm: Option<u64>,
    pub counters: Option<counters::DeviceCounters>,
}

impl DeviceSnap {
    /// `None` when unlimited.
    pub fn free(&self) -> Option<u64> {
        (self.limit > 0).then(|| self.limit.saturating_sub(self.used))
    }
}

#[derive(Clone, Debug)]
pub struct ProcSnap {
    pub slot: usize,
    pub pid: i32,
    pub hostpid: i32,
    pub status: i32,
    /// `used[d].total` per device.
    pub used: [u64; MAX_DEVICES],
    /// `device_util[d].sm_util` per device (NVML per-process percent, written by the watcher).
    pub sm_util: [u64; MAX_DEVICES],
    /// Liveness where it can be told (see [`alive`]); `None` = unknown.
    pub alive: Option<bool>,
}

impl ProcSnap {
    pub fn used_total(&self) -> u64 {
        self.used.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }
    pub fn sm_total(&self) -> u64 {
        self.sm_util.iter().sum()
    }
    pub fn status_text(&self) -> &'static str {
        match (self.status, self.alive) {
            (_, Some(false)) => "exited",
            (1, _) => "running",
            (2, _) => "suspended",
            _ => "unknown",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Snapshot {
    pub file_size: u64,
    pub version: (u32, u32),
    pub extension: bool,
    pub device_num: u64,
    pub proc_num: i32,
    pub priority: i32,
    pub recent_kernel: i32,
    pub utilization_switch: i32,
    pub last_kernel_time: u64,
    pub devices: Vec<DeviceSnap>,
    pub procs: Vec<ProcSnap>,
    /// `None` = "no data yet" (no library with counters attached, or no extension).
    pub counters: Option<Counters>,
}

impl Snapshot {
    pub fn blocked(&self) -> bool {
        self.recent_kernel < 0
    }
}

/// Why a file is not a region we can show (also what the monitor would say about it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unusable(pub String);

/// How process liveness is judged: by container PID (same PID namespace as the region's
/// processes) or by host PID (on the node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PidView {
    Container,
    Host,
}

fn pid_alive(pid: i32) -> Option<bool> {
    if pid <= 0 {
        return None;
    }
    Some(!slots::pid_is_dead(pid))
}

/// 8-byte aligned buffer of the whole file, zero-padded to [`FILE_SIZE`].
struct Buf(Vec<u64>);

impl Buf {
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: u64 storage viewed as bytes (no padding, any bit pattern valid).
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), self.0.len() * 8) }
    }
    fn map(&self) -> &RegionMap {
        // SAFETY: FILE_SIZE bytes, 8-aligned; RegionMap is all atomics/byte cells (any bit pattern).
        unsafe { &*self.0.as_ptr().cast::<RegionMap>() }
    }
}

/// Reads and checks `path` as the monitor would, through the node-safe reader
/// (`vgpu_core::noderegion`: no symlink followed, nothing but a regular file read, no mapping).
/// Never panics on content.
pub fn read(path: &Path, view: PidView) -> Result<Snapshot, Unusable> {
    let fd = noderegion::open(path, Access::Read).map_err(|s| Unusable(s.detail))?;
    let mut buf = Buf(vec![0u64; FILE_SIZE / 8]);
    let n = fd.read_at(0, buf.bytes_mut()).map_err(|e| Unusable(format!("cannot read: {e}")))?;
    let meta_len = fd.size();
    // Longer than FILE_SIZE is fine (only the known prefix is read); a file truncated since the
    // fstat counts with the bytes actually read.
    let size = if (n as u64) < meta_len && n < FILE_SIZE { n as u64 } else { meta_len };
    check_header(&buf.bytes_mut()[..n], size)?;
    let map = buf.map();
    let r: &SharedRegion = &map.shared;
    let ext_ok = n >= FILE_SIZE
        && map.ext.ext_magic.load(Ordering::Relaxed) == EXT_MAGIC
        && map.ext.ext_version.load(Ordering::Relaxed) == EXT_VERSION;
    let ext = ext_ok.then_some(&map.ext);
    let counters = ext.and_then(counters::read);
    let device_num = r.device_num.load(Ordering::Relaxed);
    let now = monotonic_ns();
    let mut devices = Vec::new();
    for d in 0..MAX_DEVICES {
        let b = slots::container_breakdown(r, d);
        let limit = r.limit[d].load(Ordering::Relaxed);
        let uuid = r.uuid(d).or_else(|| (r.uuids[d][0].load(Ordering::Relaxed) != 0).then(|| "<invalid>".into()));
        // The monitor's devices (d < device_num), plus any with usage, plus device 0 before the
        // first NVML call has published the device list (a global limit fills all 16 limit[]).
        let listed = (d as u64) < device_num.min(MAX_DEVICES as u64) || b.total > 0 || (device_num == 0 && d == 0);
        if !listed {
            continue;
        }
        let share_ppm = ext.and_then(|e| {
            let l = &e.limiter[d];
            let stamp = l.share_stamp_ns.load(Ordering::Relaxed);
            (stamp != 0 && now >= stamp && now - stamp <= SHARE_FRESH_NS).then(|| l.share_ppm.load(Ordering::Relaxed))
        });
        devices.push(DeviceSnap {
            index: d,
            uuid,
            limit,
            used: b.total,
            context: b.context,
            module: b.module,
            data: b.data,
            sm_limit: r.sm_limit[d].load(Ordering::Relaxed),
            sm_ceiling: sm_ceiling(ext, d),
            share_ppm,
            counters: counters.as_ref().map(|c| c.devices[d]),
        });
    }
    let proc_num = r.proc_num.load(Ordering::Relaxed);
    let mut procs = Vec::new();
    for k in 0..(proc_num.clamp(0, MAX_PROCS as i32) as usize) {
        let s = &r.procs[k];
        let status = s.status.load(Ordering::Relaxed);
        if status == 0 {
            continue;
        }
        let pid = s.pid.load(Ordering::Relaxed);
        let hostpid = s.hostpid.load(Ordering::Relaxed);
        let mut used = [0u64; MAX_DEVICES];
        let mut sm_util = [0u64; MAX_DEVICES];
        for d in 0..MAX_DEVICES {
            used[d] = s.used[d].total.load(Ordering::Relaxed);
            sm_util[d] = s.device_util[d].sm_util.load(Ordering::Relaxed);
        }
        let alive = match view {
            PidView::Container => pid_alive(pid),
            PidView::Host => pid_alive(hostpid),
        };
        procs.push(ProcSnap { slot: k, pid, hostpid, status, used, sm_util, alive });
    }
    Ok(Snapshot {
        file_size: size,
        version: (r.major_version.load(Ordering::Relaxed), r.minor_version.load(Ordering::Relaxed)),
        extension: ext_ok,
        device_num,
        proc_num,
        priority: r.priority.load(Ordering::Relaxed),
        recent_kernel: r.recent_kernel.load(Ordering::Relaxed),
        utilization_switch: r.utilization_switch.load(Ordering::Relaxed),
        last_kernel_time: r.last_kernel_time.load(Ordering::Relaxed),
        devices,
        procs,
        counters,
    })
}

/// The checks of docs/hami-contract.md §4.1, in the monitor's order, with its reasons; a v0
/// region is recognised but not shown here.
pub fn check_header(head: &[u8], size: u64) -> Result<(), Unusable> {
    match noderegion::classify(head, size) {
        Ok(l) if l.version == noderegion::Version::V0 => {
            Err(Unusable(format!("legacy v0 region ({size} bytes): not shown")))
        }
        Ok(_) => Ok(()),
        Err(s) => Err(Unusable(s.detail)),
    }
}

/// The burst ceiling (`CUDA_DEVICE_SM_CEILING`, extension word `sm_ceiling`), percent; `None`
/// while unset (0) or without an extension block.
pub fn sm_ceiling(ext: Option<&vgpu_core::region::RegionExt>, dev: usize) -> Option<u64> {
    ext.map(|e| e.limiter[dev].sm_ceiling.load(Ordering::Relaxed)).filter(|&v| v != 0)
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
