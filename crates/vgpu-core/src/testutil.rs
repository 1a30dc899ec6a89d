//! Test helpers: temporary paths and forked children talking over a pipe.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A unique path under the temp dir, removed (file or directory tree) on drop.
pub struct TempPath(PathBuf);

impl Deref for TempPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
        // A region file's hidden second link (regionanchor), made beside it.
        let _ = std::fs::remove_file(crate::regionanchor::anchor_path(&self.0));
    }
}

/// A fresh region (default limits) at a [`temp_path`]; keep the path alive as long as the region.
pub fn temp_region(name: &str) -> (TempPath, crate::regionfile::Region) {
    let p = temp_path(name);
    let (r, _) = crate::regionfile::Region::open(&p, &crate::regionfile::RegionInit::default()).unwrap();
    (p, r)
}

/// A fresh directory at a [`temp_path`] (removed with it) and the region path `r.cache` in it.
pub fn region_in_new_dir(name: &str) -> (TempPath, std::path::PathBuf) {
    let dir = temp_path(name);
    std::fs::create_dir(&*dir).unwrap();
    let p = dir.join("r.cache");
    (dir, p)
}

pub fn temp_path(name: &str) -> TempPath {
    static N: AtomicU32 = AtomicU32::new(0);
    let p = std::env::temp_dir().join(format!(
        "vgpu-core-test-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        name
    ));
    let _ = std::fs::remove_file(&p);
    TempPath(p)
}

/// Forks; the child runs `f(send)` then `_exit(0)` (101 on panic). The parent gets the pid and a
/// receiver returning the child's next byte (`None` on EOF or after 20 s).
pub fn fork_child<F: FnOnce(&dyn Fn(u8))>(f: F) -> (i32, impl Fn() -> Option<u8>) {
    let mut fds = [0i32; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        unsafe { libc::close(fds[0]) };
        let w = fds[1];
        let send = move |b: u8| {
            unsafe { libc::write(w, [b].as_ptr().cast(), 1) };
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&send)));
        unsafe { libc::_exit(if r.is_ok() { 0 } else { 101 }) };
    }
    unsafe { libc::close(fds[1]) };
    let rfd = fds[0];
    let recv = move || {
        let mut pfd = libc::pollfd { fd: rfd, events: libc::POLLIN, revents: 0 };
        if unsafe { libc::poll(&mut pfd, 1, 20_000) } <= 0 {
            return None;
        }
        let mut b = [0u8];
        (unsafe { libc::read(rfd, b.as_mut_ptr().cast(), 1) } == 1).then_some(b[0])
    };
    (pid, recv)
}

/// Reaps `pid`; returns its exit code (128 + signal if killed).
pub fn wait_child(pid: i32) -> i32 {
    let mut st = 0;
    loop {
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return -1;
        }
    }
    if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 128 + libc::WTERMSIG(st) }
}

/// Non-blocking reap: `Some(exit code)` once `pid` has exited.
pub fn try_wait(pid: i32) -> Option<i32> {
    let mut st = 0;
    let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
    if r != pid {
        return None;
    }
    Some(if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 128 + libc::WTERMSIG(st) })
}
