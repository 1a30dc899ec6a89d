//! The region file mapped as a monitor maps it: raw words at byte offsets, for tests that read or
//! write the region the way HAMi's monitor or an operator does.

use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU64};

pub struct RegionMap {
    base: *mut u8,
    len: usize,
}

impl RegionMap {
    pub fn open(path: &Path) -> RegionMap {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open region");
        let len = f.metadata().unwrap().len() as usize;
        assert!(len >= vgpu_core::region::FILE_SIZE, "region file too small: {len}");
        // SAFETY: a shared read-write mapping of the whole file; unmapped in `drop`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        RegionMap { base: p as *mut u8, len }
    }

    /// The 4-byte word at byte offset `off` (aligned in the layout).
    pub fn i32(&self, off: usize) -> &AtomicI32 {
        assert!(off + 4 <= self.len);
        // SAFETY: in bounds (checked), aligned by the layout, alive as long as `self`.
        unsafe { &*(self.base.add(off) as *const AtomicI32) }
    }

    /// The 8-byte word at byte offset `off` (aligned in the layout).
    pub fn u64(&self, off: usize) -> &AtomicU64 {
        assert!(off + 8 <= self.len);
        // SAFETY: in bounds (checked), aligned by the layout, alive as long as `self`.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }
}

impl Drop for RegionMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
