//! A container-wide lock that the kernel releases when its holder dies (docs/known-failures.md #4).
//!
//! Mechanism: an OFD lock (`F_OFD_SETLK`, Linux ≥ 3.15) on one byte of the region file,
//! [`crate::region::LOCK_BYTE_OFFSET`] — outside the incumbent's `lockf` range, so create/attach
//! locking by C or Rust processes never conflicts with it. The kernel drops an OFD lock when the
//! last descriptor of its open file description is closed, in particular when the holder dies.
//!
//! Two properties of OFD locks shape this module:
//! - They are owned by the *open file description*, so threads sharing one fd do not exclude
//!   each other: a process-local mutex is taken first.
//! - A forked child shares its parent's descriptions, so parent and child would not exclude each
//!   other either. A forked child must therefore re-open the file: [`OfdLock::reopen_after_fork`]
//!   (call it from an atfork child handler); as a safety net, every acquisition checks whether the
//!   descriptor was opened by the current pid and re-opens it if not.
//!
//! Waits are bounded ([`DEFAULT_TIMEOUT`]): on timeout [`LockError::Timeout`] is returned and the
//! caller applies its documented fallback (see `slots`/`ledger`).

use crate::sync::Mutex;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub enum LockError {
    /// Another holder kept the lock past the deadline.
    Timeout,
    /// fcntl/open failed (e.g. the file system does not support OFD locks).
    Io(io::Error),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Timeout => write!(f, "timed out waiting for the region lock"),
            LockError::Io(e) => write!(f, "region lock failed: {e}"),
        }
    }
}

impl std::error::Error for LockError {}

fn getpid() -> i32 {
    unsafe { libc::getpid() }
}

fn open_rw(path: &Path) -> io::Result<i32> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 { Err(io::Error::last_os_error()) } else { Ok(fd) }
}

/// A process-local mutex that survives `fork`: it records the holder's pid, and a waiter that
/// finds it held by another pid (the thread that held it at fork time exists only in the parent)
/// frees it instead of waiting forever. Waits are bounded.
pub struct PidMutex {
    m: Mutex<()>,
    holder: AtomicI32,
}

pub struct PidMutexGuard<'a> {
    owner: &'a PidMutex,
    _g: crate::sync::MutexGuard<'a, ()>,
}

impl Default for PidMutex {
    fn default() -> Self {
        Self::new()
    }
}

impl PidMutex {
    pub const fn new() -> Self {
        PidMutex { m: Mutex::new(()), holder: AtomicI32::new(0) }
    }

    /// `None` on timeout.
    pub fn lock_timeout(&self, timeout: Duration) -> Option<PidMutexGuard<'_>> {
        let deadline = Instant::now() + timeout;
        let me = getpid();
        loop {
            if let Some(g) = self.m.try_lock() {
                self.holder.store(me, Ordering::Release);
                return Some(PidMutexGuard { owner: self, _g: g });
            }
            let holder = self.holder.load(Ordering::Acquire);
            if holder != 0 && holder != me {
                self.reset_after_fork();
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if let Some(g) = self.m.try_lock_for((deadline - now).min(Duration::from_millis(10))) {
                self.holder.store(me, Ordering::Release);
                return Some(PidMutexGuard { owner: self, _g: g });
            }
        }
    }

    /// Forked child only: frees the mutex if a (parent's) thread held it at fork.
    pub fn reset_after_fork(&self) {
        // SAFETY: forked child only (this function's contract): the holder is not in this process.
        unsafe { self.m.force_unlock_in_child() };
        self.holder.store(0, Ordering::Release);
    }
}

impl Drop for PidMutexGuard<'_> {
    fn drop(&mut self) {
        self.owner.holder.store(0, Ordering::Release);
    }
}

/// One-byte OFD lock on a file.
pub struct OfdLock {
    path: PathBuf,
    /// fd whose `/proc/self/fd/N` re-opens the same inode even if the path was replaced
    /// (owned by the caller, must outlive this lock), or -1.
    anchor_fd: i32,
    offset: i64,
    fd: AtomicI32,
    /// Pid that opened `fd` (a different pid means we are a forked child).
    fd_pid: AtomicI32,
    local: PidMutex,
}

/// RAII guard: unlocks on drop.
pub struct OfdGuard<'a> {
    lock: &'a OfdLock,
    _local: PidMutexGuard<'a>,
}

impl OfdLock {
    /// Opens its own description of `path` (a new open file description, not a dup).
    pub fn open(path: &Path, offset: i64) -> io::Result<OfdLock> {
        Self::open_anchored(path, -1, offset)
    }

    /// Like [`open`](Self::open), re-opening through `/proc/self/fd/<anchor_fd>` when possible.
    pub fn open_anchored(path: &Path, anchor_fd: i32, offset: i64) -> io::Result<OfdLock> {
        let l = OfdLock {
            path: path.to_owned(),
            anchor_fd,
            offset,
            fd: AtomicI32::new(-1),
            fd_pid: AtomicI32::new(0),
            local: PidMutex::new(),
        };
        l.fd.store(l.open_fd()?, Ordering::Relaxed);
        l.fd_pid.store(getpid(), Ordering::Relaxed);
        Ok(l)
    }

    fn open_fd(&self) -> io::Result<i32> {
        if self.anchor_fd >= 0 {
            let p = format!("/proc/self/fd/{}", self.anchor_fd);
            if let Ok(fd) = open_rw(Path::new(&p)) {
                return Ok(fd);
            }
        }
        open_rw(&self.path)
    }

    /// For a forked child: re-opens the file (new description, so the child no longer shares the
    /// parent's lock ownership) and frees the local mutex if the parent's thread held it at fork.
    /// Closing the inherited descriptor does not release a lock the parent holds (the parent's
    /// descriptor keeps the description alive).
    pub fn reopen_after_fork(&self) -> io::Result<()> {
        self.local.reset_after_fork();
        let fd = self.open_fd()?;
        let old = self.fd.swap(fd, Ordering::AcqRel);
        self.fd_pid.store(getpid(), Ordering::Release);
        if old >= 0 {
            unsafe { libc::close(old) };
        }
        Ok(())
    }

    fn fcntl_lock(&self, fd: i32, ty: i32, wait: bool) -> io::Result<()> {
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = ty as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        fl.l_start = self.offset;
        fl.l_len = 1;
        fl.l_pid = 0; // required for OFD locks
        let cmd = if wait { libc::F_OFD_SETLKW } else { libc::F_OFD_SETLK };
        loop {
            let r = unsafe { libc::fcntl(fd, cmd, &fl) };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Acquires with [`DEFAULT_TIMEOUT`].
    pub fn lock(&self) -> Result<OfdGuard<'_>, LockError> {
        self.lock_timeout(DEFAULT_TIMEOUT)
    }

    /// Acquires, polling with short sleeps until `timeout`.
    pub fn lock_timeout(&self, timeout: Duration) -> Result<OfdGuard<'_>, LockError> {
        let deadline = Instant::now() + timeout;
        let me = getpid();
        let local = self.local.lock_timeout(timeout).ok_or(LockError::Timeout)?;
        if self.fd_pid.load(Ordering::Acquire) != me {
            // Forked child that did not call reopen_after_fork: fix it now.
            let fd = self.open_fd().map_err(LockError::Io)?;
            let old = self.fd.swap(fd, Ordering::AcqRel);
            self.fd_pid.store(me, Ordering::Release);
            if old >= 0 {
                unsafe { libc::close(old) };
            }
        }
        let fd = self.fd.load(Ordering::Acquire);
        let mut sleep = Duration::from_micros(200);
        loop {
            match self.fcntl_lock(fd, libc::F_WRLCK, false) {
                Ok(()) => break,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(LockError::Timeout);
                    }
                    std::thread::sleep(sleep.min(deadline - now));
                    sleep = (sleep * 2).min(Duration::from_millis(5));
                }
                Err(e) => return Err(LockError::Io(e)),
            }
        }
        Ok(OfdGuard { lock: self, _local: local })
    }

    /// Raw fd (tests).
    pub fn raw_fd(&self) -> i32 {
        self.fd.load(Ordering::Relaxed)
    }
}

impl Drop for OfdGuard<'_> {
    fn drop(&mut self) {
        let fd = self.lock.fd.load(Ordering::Acquire);
        let _ = self.lock.fcntl_lock(fd, libc::F_UNLCK, false);
    }
}

impl Drop for OfdLock {
    fn drop(&mut self) {
        let fd = *self.fd.get_mut();
        if fd >= 0 {
            unsafe { libc::close(fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{fork_child, temp_path, wait_child};

    fn mkfile(name: &str) -> crate::testutil::TempPath {
        let p = temp_path(name);
        std::fs::write(&p, [0u8; 16]).unwrap();
        p
    }

    #[test]
    fn threads_exclude_each_other() {
        let p = mkfile("lock-threads");
        let l = OfdLock::open(&p, 8).unwrap();
        let counter = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let _g = l.lock().unwrap();
                        let v = counter.load(Ordering::Relaxed);
                        std::hint::spin_loop();
                        counter.store(v + 1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(counter.load(Ordering::Relaxed), 800);
    }

    #[test]
    fn second_description_times_out_then_succeeds() {
        let p = mkfile("lock-two");
        let a = OfdLock::open(&p, 8).unwrap();
        let b = OfdLock::open(&p, 8).unwrap();
        let g = a.lock().unwrap();
        let t = Instant::now();
        assert!(matches!(b.lock_timeout(Duration::from_millis(100)), Err(LockError::Timeout)));
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert!(t.elapsed() < Duration::from_millis(900));
        drop(g);
        drop(b.lock_timeout(Duration::from_millis(100)).unwrap());
        // Different byte: independent.
        let c = OfdLock::open(&p, 9).unwrap();
        let _g = a.lock().unwrap();
        drop(c.lock_timeout(Duration::from_millis(50)).unwrap());
    }

    #[test]
    fn sigkilled_holder_releases_within_1s() {
        let p = mkfile("lock-kill");
        let l = OfdLock::open(&p, 8).unwrap();
        // The child inherits `l` (same description): it must re-open by itself (pid check).
        let (pid, rx) = fork_child(|tx| {
            let _g = l.lock().unwrap();
            tx(b'L');
            loop {
                unsafe { libc::pause() };
            }
        });
        assert_eq!(rx(), Some(b'L'));
        // The child holds it: we cannot get it.
        assert!(matches!(l.lock_timeout(Duration::from_millis(100)), Err(LockError::Timeout)));
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let t = Instant::now();
        let g = l.lock_timeout(Duration::from_secs(1)).expect("lock after holder died");
        assert!(t.elapsed() < Duration::from_secs(1));
        drop(g);
        wait_child(pid);
    }

    #[test]
    fn parent_and_child_exclude_after_fork_even_if_parent_holds() {
        let p = mkfile("lock-fork");
        let l = OfdLock::open(&p, 8).unwrap();
        let g = l.lock().unwrap();
        let (pid, rx) = fork_child(|tx| {
            // Parent's thread held the local mutex at fork: reopen_after_fork frees it here.
            l.reopen_after_fork().unwrap();
            let r = l.lock_timeout(Duration::from_millis(200));
            tx(if matches!(r, Err(LockError::Timeout)) { b'T' } else { b'X' });
            drop(r);
            // After the parent releases, we get it.
            let r = l.lock_timeout(Duration::from_secs(5));
            tx(if r.is_ok() { b'O' } else { b'X' });
        });
        assert_eq!(rx(), Some(b'T'));
        drop(g);
        assert_eq!(rx(), Some(b'O'));
        assert_eq!(wait_child(pid), 0);
    }
}
