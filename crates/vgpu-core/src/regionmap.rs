//! A mapped region file: the handle every part of the library reads and writes the shared region
//! through ([`Region`]), and the container lock held on it ([`RegionGuard`]). Opening and creating
//! one is `regionfile`'s protocol; this module only owns the mapping, so `slots` and the anchor
//! link sit above it and below the open protocol.

use crate::lock::{LockError, OfdGuard, OfdLock};
use crate::region::*;
use std::io;
use std::ops::Deref;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A mapped region. Shared between threads; leak it ([`Region::leak`]) for `'static` use.
pub struct Region {
    pub(crate) lock: OfdLock,
    pub(crate) map: NonNull<RegionMap>,
    pub(crate) fd: OwnedFd,
    pub(crate) path: PathBuf,
    pub(crate) ext_ok: bool,
    /// Likely index of this process's slot (always verified against pid).
    pub(crate) slot_hint: AtomicUsize,
    /// Serialises this process's threads writing its own slot / overflow record (the seqlock
    /// has one writer). Process-local, uncontended in the common case: no syscall.
    pub(crate) writer: crate::sync::Mutex<()>,
}

// SAFETY: the mapping is only accessed through atomics; the fd is only used with thread-safe calls.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    pub fn shared(&self) -> &SharedRegion {
        // SAFETY: mapped FILE_SIZE bytes for our lifetime; all fields are atomics.
        unsafe { &self.map.as_ref().shared }
    }

    /// The whole mapping as raw bytes' address (for a kernel-side copy, `regionplace`).
    pub(crate) fn map_addr(&self) -> *const u8 {
        self.map.as_ptr().cast()
    }

    pub(crate) fn ext_raw(&self) -> &RegionExt {
        unsafe { &self.map.as_ref().ext }
    }

    /// The private extension, `None` if it carries an incompatible version.
    pub fn ext(&self) -> Option<&RegionExt> {
        if self.ext_ok { Some(self.ext_raw()) } else { None }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Leaks the handle for process-lifetime use (the shim's global).
    pub fn leak(self) -> &'static Region {
        Box::leak(Box::new(self))
    }

    /// Container-wide lock with the default 1 s bound (see [`crate::lock`]).
    pub fn lock(&self) -> Result<RegionGuard<'_>, LockError> {
        self.lock_timeout(crate::lock::DEFAULT_TIMEOUT)
    }

    pub fn lock_timeout(&self, timeout: Duration) -> Result<RegionGuard<'_>, LockError> {
        let g = self.lock.lock_timeout(timeout)?;
        let me = unsafe { libc::getpid() };
        // Mirror for tools/humans; the kernel, not this word, decides who holds the lock.
        self.shared().owner_pid.store(me as u64, Ordering::Relaxed);
        Ok(RegionGuard { region: self, pid: me, _g: g })
    }

    /// Call in an atfork child handler (see [`OfdLock::reopen_after_fork`]). The mapping itself is
    /// inherited and stays valid; the slot hint is forgotten (the child needs its own slot).
    pub fn reopen_after_fork(&self) -> io::Result<()> {
        self.slot_hint.store(usize::MAX, Ordering::Relaxed);
        // SAFETY: callers are atfork child handlers (see above): the holder is not in this process.
        unsafe { self.writer.force_unlock_in_child() };
        self.lock.reopen_after_fork()
    }

    /// Live memory limit of a device (bytes, 0 = none). Out of range → 0.
    pub fn limit(&self, dev: usize) -> u64 {
        self.shared().limit.get(dev).map_or(0, |a| a.load(Ordering::Acquire))
    }

    /// SM limit of a device in percent.
    pub fn sm_limit(&self, dev: usize) -> u64 {
        self.shared().sm_limit.get(dev).map_or(100, |a| a.load(Ordering::Acquire))
    }

    /// NVML post-init: `device_num` and `uuids` (NUL-terminated, zero-filled), at most 16.
    pub fn set_devices(&self, uuids: &[&str]) {
        let r = self.shared();
        let n = uuids.len().min(MAX_DEVICES);
        for (d, u) in uuids.iter().take(n).enumerate() {
            r.set_uuid(d, u);
        }
        r.device_num.store(n as u64, Ordering::Release);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map.as_ptr().cast(), FILE_SIZE) };
    }
}

/// Holds the container-wide lock; derefs to the shared region. Mirrors `owner_pid`.
pub struct RegionGuard<'a> {
    region: &'a Region,
    pid: i32,
    _g: OfdGuard<'a>,
}

impl<'a> RegionGuard<'a> {
    pub fn region(&self) -> &'a Region {
        self.region
    }
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Deref for RegionGuard<'_> {
    type Target = SharedRegion;
    fn deref(&self) -> &SharedRegion {
        self.region.shared()
    }
}

impl Drop for RegionGuard<'_> {
    fn drop(&mut self) {
        // Before the OFD guard (a field) unlocks.
        let _ =
            self.region.shared().owner_pid.compare_exchange(self.pid as u64, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}
