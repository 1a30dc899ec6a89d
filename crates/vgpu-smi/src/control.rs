//! Control verbs: they write the region the way HAMi's vGPU monitor does — single aligned word
//! stores (one `pwrite` each, never through a mapping) into `limit[]`, `sm_limit[]` (its setters) and `recent_kernel` (its feedback loop,
//! docs/hami-contract.md §4.2/§4.3) — or sweep dead processes' slots with the library's own function.

use crate::snapshot::{self, PidView};
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::sync::atomic::Ordering;
use vgpu_core::noderegion::{self, Access, RegionFd, Skip, SkipReason};
use vgpu_core::region::{DeviceLimiterState, EXT_OFFSET, MAX_DEVICES, RegionExt, SharedRegion};

/// A failed control action: message and exit status (1 bad input, 2 refused / unusable).
pub struct Failure(pub String, pub i32);

fn refused(path: &Path, e: std::io::Error) -> Failure {
    let hint = match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => "; run as the file's owner or root",
        Some(libc::EROFS) => {
            "; the file system is read-only here (inside a container the region is writable, on the node use the host path)"
        }
        _ => "",
    };
    Failure(format!("refused: no write access to {}: {e}{hint}", path.display()), 2)
}

/// The region opened for single-word writes (`vgpu_core::noderegion`: never mapped, so a tenant
/// truncating the file cannot fault us; a truncated file is refused, never grown).
struct Rw {
    fd: RegionFd,
    /// Our extension block is present and initialised.
    ext: bool,
}

impl Rw {
    fn open(path: &Path) -> Result<Rw, Failure> {
        let snap =
            snapshot::read(path, PidView::Container).map_err(|u| Failure(format!("{}: {}", path.display(), u.0), 2))?;
        let fd = noderegion::open(path, Access::ReadWrite).map_err(|s| match s.reason {
            SkipReason::PermissionDenied => refused(path, std::io::Error::from_raw_os_error(libc::EACCES)),
            _ => Failure(format!("{}: {}", path.display(), s.detail), 2),
        })?;
        Ok(Rw { fd, ext: snap.extension })
    }

    fn fail(&self, path: &Path, s: Skip) -> Failure {
        match s.reason {
            SkipReason::PermissionDenied => refused(path, std::io::Error::from_raw_os_error(libc::EACCES)),
            _ => Failure(format!("{}: {}; nothing more written", path.display(), s.detail), 2),
        }
    }

    fn device_num(&self) -> u64 {
        self.fd.load_u64(offset_of!(SharedRegion, device_num) as u64).unwrap_or(0)
    }
}

pub enum LimitChange {
    Memory(u64),
    Sm(u64),
    SmCeiling(u64),
}

/// Devices a control applies to: the one given, else every recorded device (at least device 0).
fn target_devices(device_num: u64, device: Option<usize>) -> Result<Vec<usize>, Failure> {
    match device {
        Some(d) if d >= MAX_DEVICES => Err(Failure(format!("device index {d} out of range (0..{MAX_DEVICES})"), 1)),
        Some(d) => Ok(vec![d]),
        None => Ok((0..(device_num as usize).clamp(1, MAX_DEVICES)).collect()),
    }
}

pub fn set_limit(path: &Path, device: Option<usize>, change: LimitChange) -> Result<String, Failure> {
    let rw = Rw::open(path)?;
    let devs = target_devices(rw.device_num(), device)?;
    let mut out = String::new();
    for d in devs {
        let (what, offset, new) = match change {
            LimitChange::Memory(b) => ("memory limit", offset_of!(SharedRegion, limit) + 8 * d, b),
            LimitChange::Sm(p) => ("SM limit", offset_of!(SharedRegion, sm_limit) + 8 * d, p),
            // The burst ceiling lives in our extension (0 = unset: the next process with
            // CUDA_DEVICE_SM_CEILING publishes its value; at or below the SM limit = no burst).
            LimitChange::SmCeiling(p) if rw.ext => (
                "SM ceiling",
                EXT_OFFSET
                    + offset_of!(RegionExt, limiter)
                    + d * size_of::<DeviceLimiterState>()
                    + offset_of!(DeviceLimiterState, sm_ceiling),
                p,
            ),
            LimitChange::SmCeiling(p) => {
                return Err(Failure(
                    format!(
                        "--sm-ceiling {p}: {} has no libvgpu extension block (made by another library?); nothing written",
                        path.display()
                    ),
                    2,
                ));
            }
        };
        let old = rw.fd.load_u64(offset as u64).map_err(|s| rw.fail(path, s))?;
        rw.fd.store_u64(offset as u64, new).map_err(|s| rw.fail(path, s))?;
        out.push_str(&format!("device {d}: {what} {old} -> {new}\n"));
    }
    Ok(out)
}

const RECENT_KERNEL: u64 = offset_of!(SharedRegion, recent_kernel) as u64;

/// `block`: `recent_kernel = -1`, as the monitor does for a lower-priority container.
pub fn block(path: &Path) -> Result<String, Failure> {
    let rw = Rw::open(path)?;
    let old = rw.fd.load_i32(RECENT_KERNEL).map_err(|s| rw.fail(path, s))?;
    rw.fd.store_i32(RECENT_KERNEL, -1).map_err(|s| rw.fail(path, s))?;
    Ok(format!("recent_kernel {old} -> -1: launches blocked (the monitor may lift it at its next 5 s tick)\n"))
}

/// `unblock`: a negative `recent_kernel` becomes 0, as the monitor does when contention ends.
pub fn unblock(path: &Path) -> Result<String, Failure> {
    let rw = Rw::open(path)?;
    let cur = rw.fd.load_i32(RECENT_KERNEL).map_err(|s| rw.fail(path, s))?;
    if cur < 0 {
        rw.fd.store_i32(RECENT_KERNEL, 0).map_err(|s| rw.fail(path, s))?;
        return Ok(format!("recent_kernel {cur} -> 0: launches unblocked\n"));
    }
    Ok(format!("recent_kernel {cur}: not blocked, nothing written\n"))
}

/// `sweep`: frees dead processes' slots now (judged by PID in this PID namespace, so run it in
/// the container). Attaches like a library process, without taking a slot.
pub fn sweep(path: &Path) -> Result<String, Failure> {
    use vgpu_core::regionfile::{Region, RegionError, RegionInit};
    let before = snapshot::read(path, PidView::Container)
        .map_err(|u| Failure(format!("{}: {}", path.display(), u.0), 2))?
        .last_kernel_time;
    let region = match Region::open(path, &RegionInit::default()) {
        Ok((r, _)) => r,
        Err(RegionError::Open { source, .. }) => return Err(refused(path, source)),
        Err(e) => return Err(Failure(format!("{e}"), 2)),
    };
    // Region::open stamps last_kernel_time for a new attacher; we are not one: put it back.
    let now = region.shared().last_kernel_time.load(Ordering::Relaxed);
    let _ = region.shared().last_kernel_time.compare_exchange(now, before, Ordering::Relaxed, Ordering::Relaxed);
    let me = std::process::id() as i32;
    // The library's own sweep (it also counts itself in the operator counters).
    let freed = vgpu_core::slots::sweep(&region, me, std::time::Duration::from_secs(1))
        .map_err(|e| Failure(format!("sweep: {e}"), 2))?;
    Ok(format!("freed {freed} dead slot(s)\n"))
}
