//! Control verbs: they write the region the way HAMi's vGPU monitor does — plain atomic stores
//! into `limit[]`, `sm_limit[]` (its setters) and `recent_kernel` (its feedback loop,
//! docs/hami-contract.md §4.2/§4.3) — or sweep dead processes' slots with the library's own function.

use crate::snapshot::{self, PidView};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use vgpu_core::region::{EXT_MAGIC, EXT_OFFSET, FILE_SIZE, MAX_DEVICES, RegionExt, SharedRegion, V1_REGION_SIZE};

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

/// The region mapped read-write: the v1.2 bytes, plus our extension block when the file has one.
struct Rw {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Rw {
    fn open(path: &Path) -> Result<Rw, Failure> {
        snapshot::read(path, PidView::Container).map_err(|u| Failure(format!("{}: {}", path.display(), u.0), 2))?;
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Failure("path contains NUL".into(), 1))?;
        // SAFETY: valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(refused(path, std::io::Error::last_os_error()));
        }
        // The extension too when the file is long enough to hold it (a file the C library made
        // has only the v1.2 bytes).
        let size = std::fs::metadata(path).map_or(0, |m| m.len() as usize);
        let len = if size >= FILE_SIZE { FILE_SIZE } else { V1_REGION_SIZE };
        // SAFETY: fd is open; the file is at least `len` bytes (read() checked the v1.2 size).
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        let err = std::io::Error::last_os_error();
        // SAFETY: our descriptor; the mapping keeps the file referenced.
        unsafe { libc::close(fd) };
        if ptr == libc::MAP_FAILED {
            return Err(refused(path, err));
        }
        Ok(Rw { ptr, len })
    }
    fn region(&self) -> &SharedRegion {
        // SAFETY: V1_REGION_SIZE bytes mapped, page aligned; every field is an atomic.
        unsafe { &*self.ptr.cast::<SharedRegion>() }
    }
}

impl Rw {
    /// Our extension block, if mapped and initialised.
    fn ext(&self) -> Option<&RegionExt> {
        if self.len < FILE_SIZE {
            return None;
        }
        // SAFETY: FILE_SIZE bytes are mapped; the extension starts at EXT_OFFSET (page aligned)
        // and every field is an atomic.
        let ext = unsafe { &*self.ptr.cast::<u8>().add(EXT_OFFSET).cast::<RegionExt>() };
        (ext.ext_magic.load(Ordering::Acquire) == EXT_MAGIC).then_some(ext)
    }
}

impl Drop for Rw {
    fn drop(&mut self) {
        // SAFETY: mapped by open() with this length.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

pub enum LimitChange {
    Memory(u64),
    Sm(u64),
    SmCeiling(u64),
}

/// Devices a control applies to: the one given, else every recorded device (at least device 0).
fn target_devices(r: &SharedRegion, device: Option<usize>) -> Result<Vec<usize>, Failure> {
    match device {
        Some(d) if d >= MAX_DEVICES => Err(Failure(format!("device index {d} out of range (0..{MAX_DEVICES})"), 1)),
        Some(d) => Ok(vec![d]),
        None => {
            let n = (r.device_num.load(Ordering::Acquire) as usize).clamp(1, MAX_DEVICES);
            Ok((0..n).collect())
        }
    }
}

pub fn set_limit(path: &Path, device: Option<usize>, change: LimitChange) -> Result<String, Failure> {
    let rw = Rw::open(path)?;
    let r = rw.region();
    let devs = target_devices(r, device)?;
    let mut out = String::new();
    for d in devs {
        let (what, cell, new) = match change {
            LimitChange::Memory(b) => ("memory limit", &r.limit[d], b),
            LimitChange::Sm(p) => ("SM limit", &r.sm_limit[d], p),
            // The burst ceiling lives in our extension (0 = unset: the next process with
            // CUDA_DEVICE_SM_CEILING publishes its value; at or below the SM limit = no burst).
            LimitChange::SmCeiling(p) => match rw.ext() {
                Some(e) => ("SM ceiling", &e.limiter[d].sm_ceiling, p),
                None => {
                    return Err(Failure(
                        format!(
                            "--sm-ceiling {p}: {} has no libvgpu extension block (made by another library?); nothing written",
                            path.display()
                        ),
                        2,
                    ));
                }
            },
        };
        let old = cell.swap(new, Ordering::AcqRel);
        out.push_str(&format!("device {d}: {what} {old} -> {new}\n"));
    }
    Ok(out)
}

/// `block`: `recent_kernel = -1`, as the monitor does for a lower-priority container.
pub fn block(path: &Path) -> Result<String, Failure> {
    let rw = Rw::open(path)?;
    let old = rw.region().recent_kernel.swap(-1, Ordering::AcqRel);
    Ok(format!("recent_kernel {old} -> -1: launches blocked (the monitor may lift it at its next 5 s tick)\n"))
}

/// `unblock`: a negative `recent_kernel` becomes 0, as the monitor does when contention ends.
pub fn unblock(path: &Path) -> Result<String, Failure> {
    let rw = Rw::open(path)?;
    let a = &rw.region().recent_kernel;
    let mut cur = a.load(Ordering::Acquire);
    while cur < 0 {
        match a.compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(format!("recent_kernel {cur} -> 0: launches unblocked\n")),
            Err(v) => cur = v,
        }
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
