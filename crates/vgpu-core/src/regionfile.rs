//! Opening, creating and attaching the region file (docs/hami-contract.md §3.7).
//!
//! Protocol of [`Region::open`]:
//! 1. Open `O_RDWR` (never truncating). If the file does not exist, create it mode 0666: an
//!    `O_TMPFILE` in the directory, `fchmod(0666)`, `linkat` to the name (so the file never exists
//!    with a narrower mode that would make another user's process fail with EACCES); where that is
//!    unsupported, `O_CREAT | O_EXCL` + `fchmod(0666)`. Same 0666 file as the incumbent's
//!    `umask(0); open(O_CREAT, 0666)`, without changing the process-wide umask under other
//!    threads' feet (deliberate deviation, same result).
//! 2. Refuse anything that is not a regular file.
//! 3. POSIX record lock on `[0, 2 008 952)` (the incumbent's `lockf` range; bounded wait, 5 s) —
//!    create/attach is serialised with C-library processes too.
//! 4. Validate the existing content (below). Nothing is ever written to a file we refuse.
//! 5. Grow to [`FILE_SIZE`] with `fallocate` (never shrinks; blocks are reserved so a full disk
//!    cannot SIGBUS us later) — before the magic can be published, as the monitor requires.
//! 6. `mmap` the whole file `MAP_SHARED`.
//! 7. Magic absent: initialise the header (versions, limits, both `sem_t` with `pshared = 1`,
//!    switch 1, `recent_kernel` 2, `proc_num` 0, priority), the extension, release fence, magic
//!    last. Magic present: use as is; differences from this process's env are returned as warnings,
//!    limits/priority/switch/control words are never overwritten.
//! 8. `last_kernel_time = now`; unlock.
//!
//! Validation (each refusal is a typed [`RegionError`]; the shim then runs with process-local
//! accounting, still enforcing the env limits for its own process, and logs one line):
//! - word at offset 0 neither 0 nor the magic → [`RegionError::ForeignContent`];
//! - magic 0 but a smaller-than-v1 file with non-zero bytes → `ForeignContent` (a half-written
//!   v1 file from a crashed creator is ≥ v1 size and is re-initialised, as the incumbent does);
//! - magic present, major ≠ 1 → [`RegionError::UnsupportedVersion`];
//! - magic present, size < 2 008 952 → [`RegionError::LegacyOrTruncated`] (v0 or foreign);
//! - magic present, v1.1 with the transient 2 008 985-byte size → [`RegionError::TransientLayout`];
//! - open failures (EACCES, EROFS, ENOENT directory …) → [`RegionError::Open`]; a directory →
//!   [`RegionError::IsDirectory`]; other non-regular files → [`RegionError::NotRegularFile`].

use crate::config::Config;
use crate::lock::{OfdLock, PidMutex};
use crate::region::*;
pub use crate::regionmap::{Region, RegionGuard};
use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::time::{Duration, Instant};

/// What a creating process writes into a fresh region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInit {
    pub limits: [u64; MAX_DEVICES],
    pub sm_limits: [u64; MAX_DEVICES],
    pub priority: i32,
}

impl RegionInit {
    pub fn from_config(c: &Config) -> RegionInit {
        RegionInit { limits: c.memory_limit, sm_limits: c.sm_limit, priority: c.task_priority }
    }
}

impl Default for RegionInit {
    fn default() -> Self {
        RegionInit { limits: [0; MAX_DEVICES], sm_limits: [100; MAX_DEVICES], priority: 1 }
    }
}

#[derive(Debug)]
pub enum RegionError {
    Open { path: PathBuf, source: io::Error },
    IsDirectory { path: PathBuf },
    NotRegularFile { path: PathBuf },
    AttachLockTimeout { path: PathBuf },
    Io { path: PathBuf, op: &'static str, source: io::Error },
    ForeignContent { path: PathBuf, first_word: u32, size: u64 },
    UnsupportedVersion { path: PathBuf, major: u32, minor: u32 },
    LegacyOrTruncated { path: PathBuf, size: u64 },
    TransientLayout { path: PathBuf },
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RegionError::*;
        match self {
            Open { path, source } => write!(f, "cannot open region file {}: {source}", path.display()),
            IsDirectory { path } => write!(f, "region path {} is a directory", path.display()),
            NotRegularFile { path } => write!(f, "region path {} is not a regular file", path.display()),
            AttachLockTimeout { path } => {
                write!(f, "timed out waiting for the create/attach lock of {}", path.display())
            }
            Io { path, op, source } => write!(f, "{op} on region file {} failed: {source}", path.display()),
            ForeignContent { path, first_word, size } => write!(
                f,
                "region file {} ({size} bytes) does not look like a HAMi region (first word {first_word:#010x}); left untouched",
                path.display()
            ),
            UnsupportedVersion { path, major, minor } => write!(
                f,
                "region file {} has unsupported version {major}.{minor} (need 1.x); left untouched",
                path.display()
            ),
            LegacyOrTruncated { path, size } => write!(
                f,
                "region file {} has the magic but only {size} bytes (legacy v0 or truncated); left untouched",
                path.display()
            ),
            TransientLayout { path } => {
                write!(f, "region file {} uses the transient 1.1-with-seqlock layout; left untouched", path.display())
            }
        }
    }
}

impl std::error::Error for RegionError {}

impl RegionError {
    /// The system lacked a resource to open the region (descriptors, memory, space): nothing
    /// says the region is unusable, only that this process could not tell what the container uses.
    pub fn lacks_resource(&self) -> bool {
        let (RegionError::Open { source, .. } | RegionError::Io { source, .. }) = self else { return false };
        matches!(
            source.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOSPC | libc::EDQUOT | libc::ENOBUFS)
        )
    }
}

/// What happened at open.
#[derive(Debug, Default)]
pub struct AttachReport {
    pub created: bool,
    /// Previous size when the file was grown (e.g. 2 008 953 from the C library).
    pub grown_from: Option<u64>,
    pub ext_initialised: bool,
    /// Non-fatal findings ("limit inconsistency" and the like), to be logged as warnings.
    pub warnings: Vec<String>,
    /// Expected events worth one informational line (a stale anchor link discarded).
    pub notes: Vec<String>,
}

/// Serialises create/attach among threads of this process (POSIX record locks do not).
static ATTACH_MUTEX: PidMutex = PidMutex::new();

const ATTACH_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// In a forked child (atfork child handler): a parent thread may have been attaching at the
/// fork; it does not exist here, so its hold on the attach mutex is dropped.
pub fn after_fork_in_child() {
    ATTACH_MUTEX.reset_after_fork();
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

enum Created {
    Yes(OwnedFd),
    Exists,
    Unsupported,
}

/// Creates the file so that it never exists with a umask-reduced mode: an unnamed `O_TMPFILE` in
/// the target directory, `fchmod(0666)`, then `linkat` to the final name (fails with `EEXIST` if
/// another process won the race). Falls back (`Unsupported`) where `O_TMPFILE` or `/proc` is
/// missing.
fn create_via_tmpfile(path: &Path, c: &CString) -> Created {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(cdir) = cpath(dir) else { return Created::Unsupported };
    let fd =
        unsafe { libc::open(cdir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o666 as libc::c_uint) };
    if fd < 0 {
        return Created::Unsupported;
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    unsafe { libc::fchmod(fd.as_raw_fd(), 0o666) };
    let Ok(src) = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())) else { return Created::Unsupported };
    if unsafe { libc::linkat(libc::AT_FDCWD, src.as_ptr(), libc::AT_FDCWD, c.as_ptr(), libc::AT_SYMLINK_FOLLOW) } == 0 {
        return Created::Yes(fd);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EEXIST) => Created::Exists,
        _ => Created::Unsupported,
    }
}

/// Opens the region file, creating it if missing. Also returns whether it was created, and what
/// was found about a stale anchor link on the way (for the report's notes).
fn open_or_create(path: &Path) -> Result<(OwnedFd, bool, Option<String>), RegionError> {
    let c = cpath(path).map_err(|e| RegionError::Open { path: path.into(), source: e })?;
    let mut note = None;
    for _ in 0..5 {
        // A secure (setuid) program never opens the region through a symbolic link.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | crate::secure::no_follow()) };
        if fd >= 0 {
            return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, false, note));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) => {}
            Some(libc::EISDIR) => return Err(RegionError::IsDirectory { path: path.into() }),
            _ => return Err(RegionError::Open { path: path.into(), source: e }),
        }
        // Deleted while its processes live on? Link the same inode back instead of starting a
        // fresh region that would not see their usage; a region nobody uses any more is not
        // brought back (regionplace, "Anchor link").
        match crate::regionanchor::relink_from_anchor(path) {
            crate::regionanchor::Relink::Relinked => continue,
            crate::regionanchor::Relink::Discarded(why) => note = Some(why),
            crate::regionanchor::Relink::NoAnchor => {}
        }
        match create_via_tmpfile(path, &c) {
            Created::Yes(fd) => return Ok((fd, true, note)),
            Created::Exists => continue,
            Created::Unsupported => {}
        }
        let fd = unsafe {
            libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o666 as libc::c_uint)
        };
        if fd >= 0 {
            unsafe { libc::fchmod(fd, 0o666) };
            return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, true, note));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(RegionError::Open { path: path.into(), source: e });
        }
        // Lost a creation race: open the winner's file.
    }
    Err(RegionError::Open { path: path.into(), source: io::Error::from_raw_os_error(libc::EAGAIN) })
}

/// POSIX record lock on the incumbent's `lockf` range, released on drop.
struct AttachLock(i32);

impl AttachLock {
    fn acquire(fd: i32, timeout: Duration) -> io::Result<Option<AttachLock>> {
        let deadline = Instant::now() + timeout;
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        fl.l_start = 0;
        fl.l_len = V1_REGION_SIZE as i64;
        let mut sleep = Duration::from_micros(200);
        loop {
            if unsafe { libc::fcntl(fd, libc::F_SETLK, &fl) } == 0 {
                return Ok(Some(AttachLock(fd)));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::EACCES) => {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(sleep);
                    sleep = (sleep * 2).min(Duration::from_millis(10));
                }
                _ => return Err(e),
            }
        }
    }
}

impl Drop for AttachLock {
    fn drop(&mut self) {
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_UNLCK as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        fl.l_start = 0;
        fl.l_len = V1_REGION_SIZE as i64;
        unsafe { libc::fcntl(self.0, libc::F_SETLK, &fl) };
    }
}

fn fstat(fd: i32) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn pread_prefix(fd: i32, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let r = unsafe { libc::pread(fd, buf[done..].as_mut_ptr().cast(), len - done, done as i64) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            break;
        }
        done += r as usize;
    }
    buf.truncate(done);
    Ok(buf)
}

/// Grows the file to `FILE_SIZE` without ever shrinking it or touching existing bytes.
fn grow(fd: i32, size: u64) -> io::Result<()> {
    if unsafe { libc::fallocate(fd, 0, 0, FILE_SIZE as i64) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)) {
        return Err(e);
    }
    if size < FILE_SIZE as u64 {
        // Sparse fallback, like the incumbent: one zero byte at the last offset.
        let r = unsafe { libc::pwrite(fd, [0u8].as_ptr().cast(), 1, FILE_SIZE as i64 - 1) };
        if r != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub(crate) fn now_unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    if b.len() >= off + 4 { u32::from_le_bytes(b[off..off + 4].try_into().unwrap()) } else { 0 }
}

impl Region {
    /// Opens (creating if needed) and attaches the region at `path`. See the module docs.
    pub fn open(path: &Path, init: &RegionInit) -> Result<(Region, AttachReport), RegionError> {
        let _serial = ATTACH_MUTEX
            .lock_timeout(ATTACH_LOCK_TIMEOUT)
            .ok_or_else(|| RegionError::AttachLockTimeout { path: path.into() })?;
        let p = || path.to_path_buf();
        let (fd, created, anchor_note) = open_or_create(path)?;
        let raw = fd.as_raw_fd();
        let io_err = |op: &'static str| move |e: io::Error| RegionError::Io { path: path.into(), op, source: e };

        let st = fstat(raw).map_err(io_err("fstat"))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(RegionError::IsDirectory { path: p() }),
            _ => return Err(RegionError::NotRegularFile { path: p() }),
        }

        let _attach = AttachLock::acquire(raw, ATTACH_LOCK_TIMEOUT)
            .map_err(io_err("fcntl(F_SETLK)"))?
            .ok_or_else(|| RegionError::AttachLockTimeout { path: p() })?;

        let mut report = AttachReport { created, notes: anchor_note.into_iter().collect(), ..Default::default() };
        let size = fstat(raw).map_err(io_err("fstat"))?.st_size as u64;
        let head = pread_prefix(raw, (size as usize).min(4096)).map_err(io_err("pread"))?;
        let magic = u32_at(&head, 0) as i32;
        let initialised = if magic == REGION_MAGIC {
            let (major, minor) = (u32_at(&head, 4), u32_at(&head, 8));
            if size < V1_REGION_SIZE as u64 {
                return Err(RegionError::LegacyOrTruncated { path: p(), size });
            }
            if major != MAJOR_VERSION {
                return Err(RegionError::UnsupportedVersion { path: p(), major, minor });
            }
            if minor == 1 && size == TRANSIENT_V11_REGION_SIZE as u64 + 1 {
                return Err(RegionError::TransientLayout { path: p() });
            }
            if minor != MINOR_VERSION {
                report.warnings.push(format!(
                    "region file {} has version 1.{minor}, this library writes 1.{MINOR_VERSION}; using it as is",
                    path.display()
                ));
            }
            true
        } else if magic == 0 {
            if size < V1_REGION_SIZE as u64 && head.iter().any(|&b| b != 0) {
                return Err(RegionError::ForeignContent { path: p(), first_word: magic as u32, size });
            }
            false
        } else {
            return Err(RegionError::ForeignContent { path: p(), first_word: magic as u32, size });
        };

        if size < FILE_SIZE as u64 {
            report.grown_from = Some(size);
        }
        grow(raw, size).map_err(io_err("grow (fallocate)"))?;

        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), FILE_SIZE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, raw, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(io_err("mmap")(io::Error::last_os_error()));
        }
        let map = NonNull::new(ptr.cast::<RegionMap>()).expect("mmap returned null");
        let lock = match OfdLock::open_anchored(path, raw, LOCK_BYTE_OFFSET as i64) {
            Ok(l) => l,
            Err(e) => {
                unsafe { libc::munmap(ptr, FILE_SIZE) };
                return Err(io_err("open (lock descriptor)")(e));
            }
        };
        let mut region = Region {
            lock,
            map,
            fd,
            path: path.into(),
            ext_ok: true,
            slot_hint: AtomicUsize::new(usize::MAX),
            writer: crate::sync::Mutex::new(()),
        };

        let r = region.shared();
        if initialised {
            compare_limits(r, init, &mut report.warnings);
        } else {
            init_header(r, init);
        }
        region.ext_ok = init_or_check_ext(region.ext_raw(), &mut report);
        if !initialised {
            // Every other header field (and the extension) is valid: publish.
            fence(Ordering::Release);
            region.shared().initialized_flag.store(REGION_MAGIC, Ordering::Release);
            report.created = true;
        }
        region.shared().last_kernel_time.store(now_unix_secs(), Ordering::Relaxed);
        crate::regionanchor::ensure_anchor(raw, path);
        Ok((region, report))
    }
}

fn init_header(r: &SharedRegion, init: &RegionInit) {
    let rl = Ordering::Relaxed;
    r.major_version.store(MAJOR_VERSION, rl);
    r.minor_version.store(MINOR_VERSION, rl);
    r.sm_init_flag.store(0, rl);
    r.owner_pid.store(0, rl);
    for d in 0..MAX_DEVICES {
        r.limit[d].store(init.limits[d], rl);
        r.sm_limit[d].store(init.sm_limits[d], rl);
        r.set_uuid(d, "");
    }
    r.device_num.store(0, rl);
    // Kept valid for C-library processes that may share the file (docs/hami-contract.md §8 MUST 11).
    unsafe {
        libc::sem_init(r.sem.as_ptr(), 1, 1);
        libc::sem_init(r.sem_postinit.as_ptr(), 1, 1);
    }
    r.utilization_switch.store(1, rl);
    r.recent_kernel.store(2, rl);
    r.proc_num.store(0, rl);
    r.priority.store(init.priority, rl);
}

fn compare_limits(r: &SharedRegion, init: &RegionInit, w: &mut Vec<String>) {
    // Only values this process actually configured are compared (an env without limits
    // is not an "inconsistency"); the region's values are kept either way: after creation the
    // region is the truth (it may have been changed at run time). One line for all devices.
    let mut diffs = Vec::new();
    for d in 0..MAX_DEVICES {
        let have = r.limit[d].load(Ordering::Acquire);
        if init.limits[d] != 0 && have != init.limits[d] {
            diffs.push(format!("device {d} memory {have} (env {})", init.limits[d]));
        }
        let have = r.sm_limit[d].load(Ordering::Acquire);
        if init.sm_limits[d] != 100 && have != init.sm_limits[d] {
            diffs.push(format!("device {d} SM {have}% (env {}%)", init.sm_limits[d]));
        }
    }
    if !diffs.is_empty() {
        w.push(format!("limit inconsistency: the region has {}; using the region's", diffs.join(", ")));
    }
    let prio = r.priority.load(Ordering::Relaxed);
    if init.priority != 1 && prio != init.priority {
        w.push(format!("region priority is {prio}, this process's env says {}; using the region's", init.priority));
    }
}

/// Returns whether the extension is usable.
fn init_or_check_ext(ext: &RegionExt, report: &mut AttachReport) -> bool {
    let m = ext.ext_magic.load(Ordering::Acquire);
    if m == EXT_MAGIC {
        let v = ext.ext_version.load(Ordering::Relaxed);
        if v != EXT_VERSION {
            report
                .warnings
                .push(format!("region extension has version {v}, this library uses {EXT_VERSION}: extension ignored"));
            return false;
        }
        return true;
    }
    if m != 0 {
        report.warnings.push(format!("region extension had a bad magic {m:#x}: re-initialised"));
    }
    // Never published (C-created file, or first Rust attach): zero and publish. We hold the
    // attach lock, and any Rust process that used it would have published the magic.
    ext.ext_magic.store(0, Ordering::Relaxed);
    ext.ext_version.store(EXT_VERSION, Ordering::Relaxed);
    ext.ext_flags.store(0, Ordering::Relaxed);
    for a in &ext.reserved_hdr {
        a.store(0, Ordering::Relaxed);
    }
    for l in &ext.limiter {
        l.zero();
    }
    for a in &ext.reserved {
        a.store(0, Ordering::Relaxed);
    }
    crate::slots::zero_overflow_table(&ext.overflow);
    ext.ext_magic.store(EXT_MAGIC, Ordering::Release);
    report.ext_initialised = true;
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn lacking_a_resource_is_told_apart_from_an_unusable_region() {
        let io = |e| RegionError::Io { path: "/r".into(), op: "open", source: io::Error::from_raw_os_error(e) };
        assert!(io(libc::EMFILE).lacks_resource());
        assert!(
            RegionError::Open { path: "/r".into(), source: io::Error::from_raw_os_error(libc::ENFILE) }
                .lacks_resource()
        );
        assert!(io(libc::ENOSPC).lacks_resource());
        assert!(!io(libc::EACCES).lacks_resource());
        assert!(!RegionError::NotRegularFile { path: "/r".into() }.lacks_resource());
    }

    use super::*;
    use crate::testutil::temp_path;
    use std::os::unix::fs::PermissionsExt;

    fn init() -> RegionInit {
        let mut i = RegionInit::default();
        i.limits[0] = 1 << 30;
        i.limits[1] = 2 << 30;
        i.sm_limits[0] = 30;
        i.priority = 0;
        i
    }

    fn rd_u32(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }
    fn rd_i32(b: &[u8], o: usize) -> i32 {
        i32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }
    fn rd_u64(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    #[test]
    fn create_then_raw_layout() {
        let p = temp_path("rf-create");
        let before = now_unix_secs();
        let (r, rep) = Region::open(&p, &init()).unwrap();
        assert!(rep.created && rep.ext_initialised && rep.warnings.is_empty());
        assert_eq!(rep.grown_from, Some(0));
        r.set_devices(&["GPU-00000000-0000-4000-8000-000000000000", "GPU-00000000-0000-4000-8000-000000000001"]);
        let me = unsafe { libc::getpid() };
        crate::slots::attach(&r, me).unwrap();
        r.shared().procs[0].hostpid.store(4242, Ordering::Relaxed);
        crate::slots::add_usage(&r, me, 1, UsageKind::Data, 1000).unwrap();
        crate::slots::add_usage(&r, me, 1, UsageKind::Context, 300).unwrap();
        crate::slots::add_usage(&r, me, 1, UsageKind::Module, 7).unwrap();
        r.shared().procs[0].device_util[1].sm_util.store(55, Ordering::Relaxed);

        let meta = std::fs::metadata(&*p).unwrap();
        assert_eq!(meta.len(), 2_019_328);
        assert_eq!(meta.permissions().mode() & 0o777, 0o666);

        let b = std::fs::read(&*p).unwrap();
        assert_eq!(&b[0..4], &[0x4e, 0xf7, 0x2f, 0x01]);
        assert_eq!(rd_u32(&b, 4), 1);
        assert_eq!(rd_u32(&b, 8), 2);
        assert_eq!(rd_i32(&b, 12), 0);
        assert_eq!(rd_u64(&b, 16), 0, "owner_pid released");
        assert_eq!(rd_u64(&b, 56), 2, "device_num");
        assert_eq!(&b[64..64 + 40], b"GPU-00000000-0000-4000-8000-000000000000");
        assert!(b[64 + 40..64 + 96].iter().all(|&c| c == 0));
        assert_eq!(&b[64 + 96..64 + 96 + 40], b"GPU-00000000-0000-4000-8000-000000000001");
        assert_eq!(b[64 + 2 * 96], 0, "uuid 2 unset");
        assert_eq!(rd_u64(&b, 1600), 1 << 30);
        assert_eq!(rd_u64(&b, 1608), 2 << 30);
        assert_eq!(rd_u64(&b, 1616), 0);
        assert_eq!(rd_u64(&b, 1728), 30);
        assert_eq!(rd_u64(&b, 1736), 100);
        assert_eq!(rd_i32(&b, 2_008_896), 1, "proc_num");
        assert_eq!(rd_i32(&b, 2_008_900), 1, "utilization_switch");
        assert_eq!(rd_i32(&b, 2_008_904), 2, "recent_kernel");
        assert_eq!(rd_i32(&b, 2_008_908), 0, "priority");
        let lkt = rd_u64(&b, 2_008_912);
        assert!(lkt >= before && lkt <= now_unix_secs());
        // Slot 0.
        let s = 1856;
        assert_eq!(rd_i32(&b, s), me);
        assert_eq!(rd_i32(&b, s + 4), 4242);
        let dm = s + 8 + 64;
        assert_eq!(rd_u64(&b, dm), 300, "context_size");
        assert_eq!(rd_u64(&b, dm + 8), 7, "module_size");
        assert_eq!(rd_u64(&b, dm + 16), 1000, "data_size");
        assert_eq!(rd_u64(&b, dm + 32), 1307, "total");
        assert_eq!(rd_u64(&b, s + 8 + 32), 0, "device 0 total");
        assert_eq!(rd_u64(&b, s + 1160 + 48 + 16), 55, "sm_util");
        assert_eq!(rd_i32(&b, s + 1928), 1, "status");
        assert_eq!(rd_u64(&b, s + 1936) % 2, 0, "seqlock even");
        // sem: glibc sem_t value word 1 after sem_init(…, 1).
        assert_ne!(&b[24..56], &[0u8; 32]);
        assert_ne!(&b[2_008_920..2_008_952], &[0u8; 32]);
        // Extension.
        assert_eq!(&b[2_011_136..2_011_144], b"LIBVGPU1");
        assert_eq!(rd_u32(&b, 2_011_144), 1);
        assert!(b[2_011_136 + 16..].iter().all(|&c| c == 0), "extension zeroed");
        let ext = r.ext().unwrap();
        ext.limiter[1].balance_ns.store(-5, Ordering::Relaxed);
        ext.limiter[1].rate_ppm.store(300_000, Ordering::Relaxed);
        ext.limiter[15].unresolved_pids.store(3, Ordering::Relaxed);
        let b = std::fs::read(&*p).unwrap();
        let l1 = 2_011_136 + 64 + 192;
        assert_eq!(rd_u64(&b, l1) as i64, -5);
        assert_eq!(rd_u64(&b, l1 + 24), 300_000);
        assert_eq!(rd_u64(&b, 2_011_136 + 64 + 15 * 192 + 104), 3);
    }

    #[test]
    fn created_0666_regardless_of_umask() {
        let p = temp_path("rf-umask");
        let (pid, rx) = crate::testutil::fork_child(|tx| {
            unsafe { libc::umask(0o077) };
            let ok = Region::open(&p, &RegionInit::default()).is_ok();
            let restored = unsafe { libc::umask(0) } == 0o077;
            tx(if ok && restored { b'Y' } else { b'N' });
        });
        assert_eq!(rx(), Some(b'Y'), "umask untouched, open ok");
        crate::testutil::wait_child(pid);
        assert_eq!(std::fs::metadata(&*p).unwrap().permissions().mode() & 0o777, 0o666);
        // Nothing else was left in the directory by the O_TMPFILE path.
        let dir = p.parent().unwrap();
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        let prefix = &name[..name.rfind('-').unwrap()];
        let others = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(prefix) && n != name))
            .count();
        assert_eq!(others, 0);
    }

    #[test]
    fn attach_never_overwrites() {
        let p = temp_path("rf-attach");
        let (r, _) = Region::open(&p, &init()).unwrap();
        r.shared().utilization_switch.store(0, Ordering::Relaxed);
        r.shared().recent_kernel.store(-1, Ordering::Relaxed);
        r.shared().last_kernel_time.store(5, Ordering::Relaxed);
        r.shared().limit[0].store(777, Ordering::Relaxed);
        let mut other = RegionInit::default();
        other.limits[0] = 5 << 30;
        other.sm_limits[3] = 10;
        other.priority = 7;
        let (r2, rep) = Region::open(&p, &other).unwrap();
        assert!(!rep.created && !rep.ext_initialised && rep.grown_from.is_none());
        assert_eq!(rep.warnings.len(), 2, "one line for the limits, one for the priority: {:?}", rep.warnings);
        assert!(rep.warnings[0].contains("limit inconsistency"));
        assert!(rep.warnings[0].contains("device 0 memory 777") && rep.warnings[0].contains("device 3 SM 100%"));
        // Every device differing (CUDA_DEVICE_MEMORY_LIMIT applies to all 16) is still one line.
        let all = RegionInit { limits: [9 << 30; MAX_DEVICES], ..Default::default() };
        let (_r3, rep3) = Region::open(&p, &all).unwrap();
        assert_eq!(
            rep3.warnings.iter().filter(|w| w.contains("limit inconsistency")).count(),
            1,
            "{:?}",
            rep3.warnings
        );
        let s = r2.shared();
        assert_eq!(s.limit[0].load(Ordering::Relaxed), 777);
        assert_eq!(s.limit[1].load(Ordering::Relaxed), 2 << 30);
        assert_eq!(s.sm_limit[3].load(Ordering::Relaxed), 100);
        assert_eq!(s.priority.load(Ordering::Relaxed), 0);
        assert_eq!(s.utilization_switch.load(Ordering::Relaxed), 0);
        assert_eq!(s.recent_kernel.load(Ordering::Relaxed), -1);
        assert!(s.last_kernel_time.load(Ordering::Relaxed) > 5, "attach refreshes last_kernel_time");
        // Same file: same memory.
        r2.shared().proc_num.store(0, Ordering::Relaxed);
        // The shipped control-word functions (limiter::feedback) over two mappings of one file.
        use crate::limiter::feedback::{blocked, mark_active};
        assert!(!mark_active(&r.shared().recent_kernel), "blocked: never overwrite a negative value");
        assert!(blocked(&r.shared().recent_kernel));
        r.shared().recent_kernel.store(0, Ordering::Relaxed);
        assert!(mark_active(&r2.shared().recent_kernel));
        assert_eq!(r.shared().recent_kernel.load(Ordering::Relaxed), 2);
    }

    /// A file written by the one-page-extension version (2 015 232 bytes) is grown in place to
    /// two pages: every old byte kept, the new page (overflow table) zero = empty.
    #[test]
    fn grows_one_page_extension_file_in_place() {
        let p = temp_path("rf-ext1");
        let (r, _) = Region::open(&p, &RegionInit::default()).unwrap();
        r.shared().limit[0].store(777, Ordering::Relaxed);
        r.ext().unwrap().limiter[2].rate_ppm.store(5, Ordering::Relaxed);
        drop(r);
        let f = std::fs::OpenOptions::new().write(true).open(&*p).unwrap();
        f.set_len(2_015_232).unwrap();
        drop(f);
        let old = std::fs::read(&*p).unwrap();
        let (r, rep) = Region::open(&p, &RegionInit::default()).unwrap();
        assert_eq!(rep.grown_from, Some(2_015_232));
        assert!(!rep.ext_initialised, "published extension kept");
        assert_eq!(r.ext().unwrap().limiter[2].rate_ppm.load(Ordering::Relaxed), 5);
        assert_eq!(r.ext().unwrap().overflow.num.load(Ordering::Relaxed), 0);
        assert_eq!(crate::slots::container_total(&r, 0), 0);
        let mut nb = std::fs::read(&*p).unwrap();
        assert_eq!(nb.len(), FILE_SIZE);
        assert!(nb[2_015_232..].iter().all(|&b| b == 0));
        nb[2_008_912..2_008_920].copy_from_slice(&old[2_008_912..2_008_920]);
        assert!(nb[..2_015_232] == old[..], "old bytes untouched except last_kernel_time");
    }

    #[test]
    fn grows_c_created_file() {
        let p = temp_path("rf-c");
        // Simulate the C library: v1.2 header, 2 008 953 bytes, one process slot.
        let mut b = vec![0u8; C_FILE_SIZE];
        b[0..4].copy_from_slice(&REGION_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        b[1600..1608].copy_from_slice(&(3000u64 << 20).to_le_bytes());
        b[2_008_896..2_008_900].copy_from_slice(&1i32.to_le_bytes());
        b[1856..1860].copy_from_slice(&12345i32.to_le_bytes());
        b[2_008_952] = 0;
        std::fs::write(&*p, &b).unwrap();
        let (r, rep) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(!rep.created);
        assert_eq!(rep.grown_from, Some(C_FILE_SIZE as u64));
        assert!(rep.ext_initialised);
        assert!(r.ext().is_some());
        assert_eq!(r.limit(0), 3000 << 20);
        assert_eq!(r.shared().procs[0].pid.load(Ordering::Relaxed), 12345);
        assert_eq!(std::fs::metadata(&*p).unwrap().len(), FILE_SIZE as u64);
        let mut nb = std::fs::read(&*p).unwrap();
        nb[2_008_912..2_008_920].fill(0); // last_kernel_time is refreshed at attach
        assert!(nb[..C_FILE_SIZE] == b[..], "v1 bytes untouched except last_kernel_time");
    }

    #[test]
    fn never_shrinks() {
        let p = temp_path("rf-big");
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&*p).unwrap();
        f.set_len(FILE_SIZE as u64 + 8192).unwrap();
        drop(f);
        Region::open(&p, &RegionInit::default()).unwrap();
        assert_eq!(std::fs::metadata(&*p).unwrap().len(), FILE_SIZE as u64 + 8192);
    }

    fn expect_untouched(name: &str, content: Vec<u8>, check: impl Fn(&RegionError) -> bool) {
        let p = temp_path(name);
        std::fs::write(&*p, &content).unwrap();
        let e = Region::open(&p, &RegionInit::default()).err().expect("must refuse");
        assert!(check(&e), "{name}: unexpected {e:?}");
        assert!(!e.to_string().is_empty());
        assert!(std::fs::read(&*p).unwrap() == content, "{name}: file modified");
    }

    #[test]
    fn refuses_foreign_files() {
        let mut garbage = vec![0u8; 5000];
        garbage[0..4].copy_from_slice(b"\x7fELF");
        expect_untouched("rf-garbage", garbage.clone(), |e| matches!(e, RegionError::ForeignContent { .. }));
        garbage.resize(FILE_SIZE, 1);
        expect_untouched("rf-garbage-big", garbage, |e| matches!(e, RegionError::ForeignContent { .. }));
        expect_untouched("rf-text", b"\0\0\0\0hello".to_vec(), |e| matches!(e, RegionError::ForeignContent { .. }));

        let mut v0 = vec![0u8; V0_REGION_SIZE + 1];
        v0[0..4].copy_from_slice(&REGION_MAGIC.to_le_bytes());
        expect_untouched(
            "rf-v0",
            v0,
            |e| matches!(e, RegionError::LegacyOrTruncated { size, .. } if *size == V0_REGION_SIZE as u64 + 1),
        );

        let mut v2 = vec![0u8; C_FILE_SIZE];
        v2[0..4].copy_from_slice(&REGION_MAGIC.to_le_bytes());
        v2[4..8].copy_from_slice(&2u32.to_le_bytes());
        expect_untouched("rf-v2", v2, |e| matches!(e, RegionError::UnsupportedVersion { major: 2, .. }));

        let mut t = vec![0u8; TRANSIENT_V11_REGION_SIZE + 1];
        t[0..4].copy_from_slice(&REGION_MAGIC.to_le_bytes());
        t[4..8].copy_from_slice(&1u32.to_le_bytes());
        t[8..12].copy_from_slice(&1u32.to_le_bytes());
        expect_untouched("rf-v11", t, |e| matches!(e, RegionError::TransientLayout { .. }));
    }

    #[test]
    fn reinitialises_half_written_v1() {
        // A creator that died before publishing the magic: re-initialised (like the incumbent).
        let p = temp_path("rf-half");
        let mut b = vec![0u8; C_FILE_SIZE];
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[1600..1608].copy_from_slice(&99u64.to_le_bytes());
        std::fs::write(&*p, &b).unwrap();
        let (r, rep) = Region::open(&p, &init()).unwrap();
        assert!(rep.created);
        assert_eq!(r.limit(0), 1 << 30);
    }

    #[test]
    fn older_minor_is_accepted_with_warning() {
        let p = temp_path("rf-v10");
        let mut b = vec![0u8; C_FILE_SIZE];
        b[0..4].copy_from_slice(&REGION_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        std::fs::write(&*p, &b).unwrap();
        let (_r, rep) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(rep.warnings.iter().any(|w| w.contains("1.0")), "{:?}", rep.warnings);
    }

    #[test]
    fn path_errors() {
        let d = temp_path("rf-dir");
        std::fs::create_dir(&*d).unwrap();
        assert!(matches!(Region::open(&d, &RegionInit::default()), Err(RegionError::IsDirectory { .. })));
        let missing = d.join("no/such/dir/x.cache");
        assert!(matches!(Region::open(&missing, &RegionInit::default()), Err(RegionError::Open { .. })));
        assert!(matches!(
            Region::open(Path::new("/dev/null"), &RegionInit::default()),
            Err(RegionError::NotRegularFile { .. }) | Err(RegionError::Open { .. })
        ));
        // Unwritable existing file (skip when running as root, which ignores modes).
        if unsafe { libc::geteuid() } != 0 {
            let ro = temp_path("rf-ro");
            std::fs::write(&*ro, b"").unwrap();
            std::fs::set_permissions(&*ro, std::fs::Permissions::from_mode(0o444)).unwrap();
            match Region::open(&ro, &RegionInit::default()) {
                Err(RegionError::Open { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::EACCES)),
                other => panic!("{:?}", other.err()),
            }
            assert_eq!(std::fs::metadata(&*ro).unwrap().len(), 0);
        }
        // /proc is read-only for regular files here: EACCES/EROFS/ENOENT, never a crash.
        assert!(Region::open(Path::new("/proc/version"), &RegionInit::default()).is_err());
    }

    #[test]
    fn lock_mirrors_owner_pid() {
        let p = temp_path("rf-owner");
        let (r, _) = Region::open(&p, &RegionInit::default()).unwrap();
        {
            let g = r.lock().unwrap();
            assert_eq!(g.owner_pid.load(Ordering::Relaxed), unsafe { libc::getpid() } as u64);
        }
        assert_eq!(r.shared().owner_pid.load(Ordering::Relaxed), 0);
    }
}
