//! Region files as a privileged reader on the node sees them: the one reader shared by
//! `vgpu-smi` and `vgpu-agent`.
//!
//! A tenant controls what is in its container directory, and the node side runs as root (or with
//! write access to every tenant's directory). So a region file is opened with `O_NOFOLLOW |
//! O_NONBLOCK` (a symlink is refused, a FIFO or device never blocks the open), checked with
//! `fstat` on the opened descriptor (regular file, its size), read with `pread` into private memory
//! and written only with `pwrite` of single aligned words. Nothing here maps a region: a file
//! truncated under a mapping raises SIGBUS in its reader, while a short `pread` is just a short read.
//!
//! Where `/proc/self/fd` is available the file is first opened `O_PATH` (which opens nothing:
//! no device driver, no FIFO is touched), checked, and only a regular file is re-opened through
//! its descriptor, so even a device node swapped in at the last moment is never opened for I/O.
//!
//! Layouts (docs/hami-contract.md §3, §4.1): v1.2 and the legacy v0 (read-only: the monitor still
//! reads it, so the agent does; nothing writes it here except the two feedback words).

use crate::region::{MAJOR_VERSION, MAX_DEVICES, MAX_PROCS, REGION_MAGIC, UUID_LEN, V0_REGION_SIZE, V1_REGION_SIZE};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Why a file was not used (also the `reason` label of the agent's skip counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    Missing,
    PermissionDenied,
    Symlink,
    NotRegular,
    Io,
    TooSmall,
    Uninitialised,
    Foreign,
    UnknownLayout,
    Truncated,
}

impl SkipReason {
    pub const ALL: [SkipReason; 10] = [
        SkipReason::Missing,
        SkipReason::PermissionDenied,
        SkipReason::Symlink,
        SkipReason::NotRegular,
        SkipReason::Io,
        SkipReason::TooSmall,
        SkipReason::Uninitialised,
        SkipReason::Foreign,
        SkipReason::UnknownLayout,
        SkipReason::Truncated,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SkipReason::Missing => "missing",
            SkipReason::PermissionDenied => "permission_denied",
            SkipReason::Symlink => "symlink",
            SkipReason::NotRegular => "not_regular",
            SkipReason::Io => "io_error",
            SkipReason::TooSmall => "too_small",
            SkipReason::Uninitialised => "uninitialised",
            SkipReason::Foreign => "foreign",
            SkipReason::UnknownLayout => "unknown_layout",
            SkipReason::Truncated => "truncated",
        }
    }
}

/// A file skipped, with the reason (for a counter) and a sentence (for a log line or a view).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub reason: SkipReason,
    pub detail: String,
}

impl Skip {
    pub fn new(reason: SkipReason, detail: impl Into<String>) -> Skip {
        Skip { reason, detail: detail.into() }
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

fn open_error(what: &str, e: std::io::Error) -> Skip {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => Skip::new(SkipReason::Missing, format!("cannot {what}: {e}")),
        Some(n @ (libc::EACCES | libc::EPERM)) => {
            Skip::new(SkipReason::PermissionDenied, format!("cannot {what}: permission denied (os error {n})"))
        }
        Some(libc::ELOOP) => Skip::new(SkipReason::Symlink, "a symbolic link (not followed)"),
        Some(libc::ENXIO) | Some(libc::ENODEV) | Some(libc::EISDIR) => {
            Skip::new(SkipReason::NotRegular, format!("not a regular file: {e}"))
        }
        _ => Skip::new(SkipReason::Io, format!("cannot {what}: {e}")),
    }
}

/// How the file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    /// Read and write single words ([`RegionFd::store_i32`], [`RegionFd::store_u64`]).
    ReadWrite,
}

/// An opened, checked region file.
#[derive(Debug)]
pub struct RegionFd {
    file: File,
    size: u64,
    /// `(st_dev, st_ino)` of the opened file.
    identity: (u64, u64),
}

fn fstat_fd(fd: libc::c_int) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid out-buffer; fd is ours.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn file_kind(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFLNK => "a symbolic link",
        _ => "not a regular file",
    }
}

fn check_regular(st: &libc::stat) -> Result<(), Skip> {
    if st.st_mode & libc::S_IFMT == libc::S_IFREG {
        return Ok(());
    }
    let reason = if st.st_mode & libc::S_IFMT == libc::S_IFLNK { SkipReason::Symlink } else { SkipReason::NotRegular };
    let kind = file_kind(st.st_mode);
    Err(Skip::new(reason, format!("{kind}, not a regular file (not read)")))
}

/// Opens `path` without following a symlink, without blocking, and only if it is a regular file.
pub fn open(path: &Path, access: Access) -> Result<RegionFd, Skip> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Skip::new(SkipReason::Io, "path contains NUL"))?;
    let mode = match access {
        Access::Read => libc::O_RDONLY,
        Access::ReadWrite => libc::O_RDWR,
    };
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    // First a descriptor that opens nothing (O_PATH: no driver's open, no FIFO), checked...
    // SAFETY: valid C string.
    let pfd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if pfd < 0 {
        return Err(open_error("open", std::io::Error::last_os_error()));
    }
    // SAFETY: pfd was just opened and is owned here.
    let pfile = unsafe { File::from_raw_fd(pfd) };
    let st = fstat_fd(pfd).map_err(|e| open_error("stat", e))?;
    check_regular(&st)?;
    // ... then the same inode re-opened through it: what was checked is what is read.
    let via = CString::new(format!("/proc/self/fd/{pfd}")).expect("no NUL");
    // SAFETY: valid C string. No O_NOFOLLOW: the /proc magic link is the checked inode itself.
    let mut fd = unsafe { libc::open(via.as_ptr(), mode | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            return Err(open_error("open", e));
        }
        // No /proc here: the direct open, its result checked below.
        // SAFETY: valid C string.
        fd = unsafe { libc::open(c.as_ptr(), mode | flags) };
        if fd < 0 {
            return Err(open_error("open", std::io::Error::last_os_error()));
        }
    }
    drop(pfile);
    // SAFETY: fd was just opened and is owned here.
    let file = unsafe { File::from_raw_fd(fd) };
    let st = fstat_fd(fd).map_err(|e| open_error("stat", e))?;
    check_regular(&st)?;
    Ok(RegionFd { file, size: st.st_size.max(0) as u64, identity: (st.st_dev, st.st_ino) })
}

/// The layout a file was recognised as (docs/hami-contract.md §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V0,
}

/// Byte offsets of the fields the node side reads, per layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: Version,
    pub region_size: usize,
    pub device_num: usize,
    pub uuids: usize,
    pub limit: usize,
    pub procs: usize,
    pub slot_size: usize,
    /// `used[d]` at `slot + used + mem_size·d`: context, module, data, offset, total (u64 each).
    pub used: usize,
    pub mem_size: usize,
    /// `device_util[d].sm_util` at `slot + util + util_size·d + 16`.
    pub util: usize,
    pub util_size: usize,
    pub status: usize,
    pub proc_num: usize,
    pub utilization_switch: usize,
    pub recent_kernel: usize,
    pub priority: usize,
    /// `None` in v0 (the monitor reports 0).
    pub last_kernel_time: Option<usize>,
}

pub const V1_LAYOUT: Layout = Layout {
    version: Version::V1,
    region_size: V1_REGION_SIZE,
    device_num: 56,
    uuids: 64,
    limit: 1600,
    procs: 1856,
    slot_size: 1960,
    used: 8,
    mem_size: 64,
    util: 1160,
    util_size: 48,
    status: 1928,
    proc_num: 2_008_896,
    utilization_switch: 2_008_900,
    recent_kernel: 2_008_904,
    priority: 2_008_908,
    last_kernel_time: Some(2_008_912),
};

pub const V0_LAYOUT: Layout = Layout {
    version: Version::V0,
    region_size: V0_REGION_SIZE,
    device_num: 48,
    uuids: 56,
    limit: 1592,
    procs: 1848,
    slot_size: 1168,
    used: 8,
    mem_size: 40,
    util: 776,
    util_size: 24,
    status: 1160,
    proc_num: 1_197_880,
    utilization_switch: 1_197_884,
    recent_kernel: 1_197_888,
    priority: 1_197_892,
    last_kernel_time: None,
};

impl Layout {
    pub fn slot(&self, k: usize) -> usize {
        self.procs + self.slot_size * k
    }
    /// Start of the tail words (`proc_num` … `priority`/`last_kernel_time`).
    pub fn tail(&self) -> usize {
        self.proc_num
    }
}

/// The monitor's checks of §4.1 on the first 12 bytes and the size.
pub fn classify(head: &[u8], size: u64) -> Result<Layout, Skip> {
    if head.len() < 12 || size < 12 {
        return Err(Skip::new(SkipReason::TooSmall, format!("{size} bytes: smaller than the 12-byte header")));
    }
    let word = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap());
    let magic = word(0) as i32;
    if magic != REGION_MAGIC {
        return Err(if magic == 0 {
            Skip::new(SkipReason::Uninitialised, format!("not initialised (magic 0, {size} bytes)"))
        } else {
            Skip::new(
                SkipReason::Foreign,
                format!("foreign content: first word {:#010x} is not the region magic", magic as u32),
            )
        });
    }
    let (major, minor) = (word(4), word(8));
    if size >= V0_REGION_SIZE as u64 && size < V1_REGION_SIZE as u64 {
        return Ok(V0_LAYOUT);
    }
    if major == MAJOR_VERSION && size >= V1_REGION_SIZE as u64 {
        return Ok(V1_LAYOUT);
    }
    Err(Skip::new(SkipReason::UnknownLayout, format!("unknown cache file size {size} / version {major}.{minor}")))
}

impl RegionFd {
    /// Size seen by `fstat` at open.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `(st_dev, st_ino)`: the same file when opened again (not a replacement).
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    /// `pread` until `buf` is full or end of file; returns the bytes read.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut n = 0;
        while n < buf.len() {
            match self.file.read_at(&mut buf[n..], offset + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or says the file was truncated.
    pub fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Skip> {
        match self.read_at(offset, buf) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(n) => Err(Skip::new(
                SkipReason::Truncated,
                format!("truncated while read ({} bytes short at offset {offset})", buf.len() - n),
            )),
            Err(e) => Err(Skip::new(SkipReason::Io, format!("cannot read: {e}"))),
        }
    }

    /// Reads the header and recognises the layout.
    pub fn layout(&self) -> Result<Layout, Skip> {
        let mut head = [0u8; 12];
        let n = self.read_at(0, &mut head).map_err(|e| Skip::new(SkipReason::Io, format!("cannot read: {e}")))?;
        classify(&head[..n], self.size)
    }

    /// Hard links of the opened file now (0: unlinked or replaced by a rename since it was opened).
    pub fn links(&self) -> Result<u64, Skip> {
        let st = fstat_fd(self.file.as_raw_fd()).map_err(|e| Skip::new(SkipReason::Io, format!("cannot stat: {e}")))?;
        Ok(st.st_nlink as u64)
    }

    /// Current size by `fstat` (a truncation since open shows here).
    pub fn current_size(&self) -> Result<u64, Skip> {
        let st = fstat_fd(self.file.as_raw_fd()).map_err(|e| Skip::new(SkipReason::Io, format!("cannot stat: {e}")))?;
        Ok(st.st_size.max(0) as u64)
    }

    fn store(&self, offset: u64, bytes: &[u8]) -> Result<(), Skip> {
        use std::os::unix::fs::FileExt;
        assert!(offset.is_multiple_of(bytes.len() as u64), "unaligned control word");
        // A file truncated below the word is not written (pwrite would grow it again).
        let size = self.current_size()?;
        if size < offset + bytes.len() as u64 {
            return Err(Skip::new(
                SkipReason::Truncated,
                format!("truncated to {size} bytes: word at {offset} not written"),
            ));
        }
        match self.file.write_at(bytes, offset) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(n) => Err(Skip::new(SkipReason::Io, format!("short write of {n} bytes at {offset}"))),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EBADF)) => {
                Err(Skip::new(SkipReason::PermissionDenied, format!("permission denied: {e}")))
            }
            Err(e) => Err(Skip::new(SkipReason::Io, format!("cannot write: {e}"))),
        }
    }

    /// One aligned 4-byte store (a single `pwrite`).
    pub fn store_i32(&self, offset: u64, v: i32) -> Result<(), Skip> {
        self.store(offset, &v.to_le_bytes())
    }

    /// One aligned 8-byte store (a single `pwrite`).
    pub fn store_u64(&self, offset: u64, v: u64) -> Result<(), Skip> {
        self.store(offset, &v.to_le_bytes())
    }

    pub fn load_i32(&self, offset: u64) -> Result<i32, Skip> {
        let mut b = [0u8; 4];
        self.read_exact_at(offset, &mut b)?;
        Ok(i32::from_le_bytes(b))
    }

    pub fn load_u64(&self, offset: u64) -> Result<u64, Skip> {
        let mut b = [0u8; 8];
        self.read_exact_at(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// What the node side reads of one region: header, tail words and the live slots' sums, read
/// with a few `pread`s (not the whole 2 MB file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub v0: bool,
    pub device_num: u64,
    /// The whole 96-byte field per device (the monitor's matching key), and whether byte 0 ≠ 0.
    pub uuids: Vec<[u8; UUID_LEN]>,
    pub limit: [u64; MAX_DEVICES],
    pub proc_num: i32,
    pub utilization_switch: i32,
    pub recent_kernel: i32,
    pub priority: i32,
    pub last_kernel_time: u64,
    /// Sums over live slots (`k < proc_num`, `status != 0`) per device.
    pub used: [DeviceSums; MAX_DEVICES],
    /// Live slots.
    pub processes: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceSums {
    pub total: u64,
    pub context: u64,
    pub module: u64,
    pub data: u64,
    pub offset: u64,
    pub sm_util: u64,
}

impl Summary {
    /// The UUID label: the first 40 bytes of the field, as the monitor takes it; `None` if byte 0 is 0.
    pub fn uuid_label(&self, d: usize) -> Option<String> {
        let f = self.uuids.get(d)?;
        if f[0] == 0 {
            return None;
        }
        let n = f[..40].iter().position(|&c| c == 0).unwrap_or(40);
        std::str::from_utf8(&f[..n]).ok().map(str::to_owned)
    }
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn i32_at(b: &[u8], o: usize) -> i32 {
    i32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// What [`summarise`] reads: the header and tail only (feedback), or the slots too (metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    Control,
    Usage,
}

/// Reads `layout`'s fields of an opened file into a [`Summary`]; `scratch` is reused between files.
pub fn summarise(fd: &RegionFd, layout: &Layout, depth: Depth, scratch: &mut Vec<u8>) -> Result<Summary, Skip> {
    let l = layout;
    let mut head = [0u8; 1856];
    let head = &mut head[..l.procs];
    fd.read_exact_at(0, head)?;
    let tail_len = if l.last_kernel_time.is_some() { 24 } else { 16 };
    let mut tail = [0u8; 24];
    fd.read_exact_at(l.tail() as u64, &mut tail[..tail_len])?;
    let mut s = Summary {
        v0: l.version == Version::V0,
        device_num: u64_at(head, l.device_num),
        proc_num: i32_at(&tail, 0),
        utilization_switch: i32_at(&tail, 4),
        recent_kernel: i32_at(&tail, 8),
        priority: i32_at(&tail, 12),
        last_kernel_time: if tail_len == 24 { u64_at(&tail, 16) } else { 0 },
        ..Summary::default()
    };
    for d in 0..MAX_DEVICES {
        let o = l.uuids + UUID_LEN * d;
        s.uuids.push(head[o..o + UUID_LEN].try_into().unwrap());
        s.limit[d] = u64_at(head, l.limit + 8 * d);
    }
    if depth == Depth::Control {
        return Ok(s);
    }
    let n = s.proc_num.clamp(0, MAX_PROCS as i32) as usize;
    scratch.resize(n * l.slot_size, 0);
    fd.read_exact_at(l.procs as u64, scratch)?;
    for k in 0..n {
        let slot = &scratch[k * l.slot_size..(k + 1) * l.slot_size];
        if i32_at(slot, l.status) == 0 {
            continue;
        }
        s.processes += 1;
        for d in 0..MAX_DEVICES {
            let m = l.used + l.mem_size * d;
            let u = &mut s.used[d];
            u.context = u.context.wrapping_add(u64_at(slot, m));
            u.module = u.module.wrapping_add(u64_at(slot, m + 8));
            u.data = u.data.wrapping_add(u64_at(slot, m + 16));
            u.offset = u.offset.wrapping_add(u64_at(slot, m + 24));
            u.total = u.total.wrapping_add(u64_at(slot, m + 32));
            u.sm_util = u.sm_util.wrapping_add(u64_at(slot, l.util + l.util_size * d + 16));
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::{SharedRegion, slot_offset};
    use core::mem::offset_of;

    #[test]
    fn v1_offsets_match_the_struct() {
        let l = V1_LAYOUT;
        assert_eq!(l.device_num, offset_of!(SharedRegion, device_num));
        assert_eq!(l.uuids, offset_of!(SharedRegion, uuids));
        assert_eq!(l.limit, offset_of!(SharedRegion, limit));
        assert_eq!(l.procs, slot_offset(0));
        assert_eq!(l.slot(1), slot_offset(1));
        assert_eq!(l.proc_num, offset_of!(SharedRegion, proc_num));
        assert_eq!(l.utilization_switch, offset_of!(SharedRegion, utilization_switch));
        assert_eq!(l.recent_kernel, offset_of!(SharedRegion, recent_kernel));
        assert_eq!(l.priority, offset_of!(SharedRegion, priority));
        assert_eq!(l.last_kernel_time, Some(offset_of!(SharedRegion, last_kernel_time)));
        assert_eq!(l.status, offset_of!(crate::region::ProcSlot, status));
        assert_eq!(l.util, offset_of!(crate::region::ProcSlot, device_util));
    }

    #[test]
    fn v0_layout_is_consistent() {
        let l = V0_LAYOUT;
        assert_eq!(l.procs + l.slot_size * MAX_PROCS, l.proc_num);
        assert_eq!(l.priority + 4, l.region_size);
        assert_eq!(l.used + l.mem_size * MAX_DEVICES + 8 * MAX_DEVICES, l.util);
        assert_eq!(l.util + l.util_size * MAX_DEVICES, l.status);
    }

    fn head(magic: i32, major: u32) -> Vec<u8> {
        let mut h = magic.to_le_bytes().to_vec();
        h.extend(major.to_le_bytes());
        h.extend(2u32.to_le_bytes());
        h
    }

    #[test]
    fn classify_follows_the_monitor() {
        assert_eq!(classify(&head(REGION_MAGIC, 1)[..8], 8).unwrap_err().reason, SkipReason::TooSmall);
        assert_eq!(classify(&head(0, 1), 5000).unwrap_err().reason, SkipReason::Uninitialised);
        assert_eq!(classify(&head(7, 1), 5000).unwrap_err().reason, SkipReason::Foreign);
        assert_eq!(classify(&head(REGION_MAGIC, 1), V0_REGION_SIZE as u64).unwrap().version, Version::V0);
        assert_eq!(classify(&head(REGION_MAGIC, 9), V0_REGION_SIZE as u64 + 1).unwrap().version, Version::V0);
        assert_eq!(classify(&head(REGION_MAGIC, 1), V1_REGION_SIZE as u64).unwrap().version, Version::V1);
        assert_eq!(
            classify(&head(REGION_MAGIC, 2), V1_REGION_SIZE as u64).unwrap_err().reason,
            SkipReason::UnknownLayout
        );
        assert_eq!(classify(&head(REGION_MAGIC, 1), 4096).unwrap_err().reason, SkipReason::UnknownLayout);
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("noderegion-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn refuses_symlink_fifo_directory() {
        let d = tmp("kinds");
        let fifo = d.join("f.cache");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open(&fifo, Access::ReadWrite).unwrap_err();
        assert_eq!(e.reason, SkipReason::NotRegular, "{e:?}");
        std::os::unix::fs::symlink(&fifo, d.join("l.cache")).unwrap();
        assert_eq!(open(&d.join("l.cache"), Access::Read).unwrap_err().reason, SkipReason::Symlink);
        std::fs::write(d.join("real"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("l2.cache")).unwrap();
        assert_eq!(open(&d.join("l2.cache"), Access::Read).unwrap_err().reason, SkipReason::Symlink);
        assert_eq!(open(&d, Access::Read).unwrap_err().reason, SkipReason::NotRegular);
        assert_eq!(open(&d.join("none"), Access::Read).unwrap_err().reason, SkipReason::Missing);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A legacy v0 file (as HAMi-core 2024-04 wrote it) is recognised, summed at its own offsets,
    /// and its control words are where the monitor writes them.
    #[test]
    fn v0_region_is_read_at_its_offsets() {
        let l = V0_LAYOUT;
        let mut b = vec![0u8; V0_REGION_SIZE];
        b[0..4].copy_from_slice(&REGION_MAGIC.to_le_bytes());
        b[l.device_num..l.device_num + 8].copy_from_slice(&2u64.to_le_bytes());
        b[l.uuids + UUID_LEN..l.uuids + UUID_LEN + 5].copy_from_slice(b"GPU-1");
        b[l.limit + 8..l.limit + 16].copy_from_slice(&(1u64 << 30).to_le_bytes());
        for (k, status) in [1i32, 0, 2].iter().enumerate() {
            let slot = l.slot(k);
            let m = slot + l.used + l.mem_size;
            b[m..m + 8].copy_from_slice(&10u64.to_le_bytes()); // context
            b[m + 16..m + 24].copy_from_slice(&20u64.to_le_bytes()); // data
            b[m + 32..m + 40].copy_from_slice(&35u64.to_le_bytes()); // total
            let u = slot + l.util + l.util_size + 16;
            b[u..u + 8].copy_from_slice(&7u64.to_le_bytes());
            b[slot + l.status..slot + l.status + 4].copy_from_slice(&status.to_le_bytes());
        }
        b[l.proc_num..l.proc_num + 4].copy_from_slice(&3i32.to_le_bytes());
        b[l.recent_kernel..l.recent_kernel + 4].copy_from_slice(&2i32.to_le_bytes());
        b[l.priority..l.priority + 4].copy_from_slice(&5i32.to_le_bytes());
        let d = tmp("v0");
        let p = d.join("v0.cache");
        std::fs::write(&p, &b).unwrap();
        let fd = open(&p, Access::ReadWrite).unwrap();
        let layout = fd.layout().unwrap();
        assert_eq!(layout.version, Version::V0);
        let s = summarise(&fd, &layout, Depth::Usage, &mut Vec::new()).unwrap();
        assert!(s.v0);
        assert_eq!((s.device_num, s.processes, s.priority, s.recent_kernel), (2, 2, 5, 2));
        assert_eq!(s.uuid_label(1).as_deref(), Some("GPU-1"));
        assert_eq!(s.uuid_label(0), None);
        assert_eq!(s.limit[1], 1 << 30);
        assert_eq!(s.used[1], DeviceSums { total: 70, context: 20, module: 0, data: 40, offset: 0, sm_util: 14 });
        assert_eq!(s.last_kernel_time, 0);
        fd.store_i32(l.recent_kernel as u64, -1).unwrap();
        let after = std::fs::read(&p).unwrap();
        assert_eq!(&after[l.recent_kernel..l.recent_kernel + 4], &(-1i32).to_le_bytes());
        assert_eq!(after.len(), b.len());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn store_refuses_a_truncated_file_and_never_grows_it() {
        let d = tmp("trunc");
        let p = d.join("r.cache");
        std::fs::write(&p, vec![0u8; 4096]).unwrap();
        let fd = open(&p, Access::ReadWrite).unwrap();
        fd.store_i32(8, -1).unwrap();
        assert_eq!(fd.load_i32(8).unwrap(), -1);
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(4).unwrap();
        assert_eq!(fd.store_i32(8, 3).unwrap_err().reason, SkipReason::Truncated);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4);
        assert_eq!(fd.load_i32(8).unwrap_err().reason, SkipReason::Truncated);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
