//! Per-variant call counting: every exported entry point has its own counter, registered on its
//! first call; with `VGPU_SIM_COUNT_FILE` set, `<pid> <symbol> <count>` lines are appended at exit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

pub(crate) struct Counter {
    name: &'static str,
    n: AtomicU64,
}

static REGISTRY: Mutex<Vec<&'static Counter>> = Mutex::new(Vec::new());

impl Counter {
    pub const fn new(name: &'static str) -> Counter {
        Counter { name, n: AtomicU64::new(0) }
    }

    #[inline]
    pub fn hit(&'static self) {
        if self.n.fetch_add(1, Ordering::Relaxed) == 0 {
            REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).push(self);
            ensure_atexit();
        }
    }
}

/// Register the exit-time dump once (only when a count file is configured).
pub(crate) fn ensure_atexit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if crate::knobs().count_file.is_some() {
            unsafe { libc::atexit(dump) };
        }
    });
}

extern "C" fn dump() {
    let Some(path) = crate::knobs().count_file.as_ref() else { return };
    let Ok(reg) = REGISTRY.try_lock() else { return };
    let pid = std::process::id();
    let mut s = String::new();
    for c in reg.iter() {
        s.push_str(&format!("{} {} {}\n", pid, c.name, c.n.load(Ordering::Relaxed)));
    }
    drop(reg);
    let Ok(cpath) = std::ffi::CString::new(path.as_str()) else { return };
    unsafe {
        let fd = libc::open(cpath.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC, 0o644);
        if fd >= 0 {
            libc::write(fd, s.as_ptr() as *const libc::c_void, s.len());
            libc::close(fd);
        }
    }
}
