//! Where a container's region lives when its file is deleted or unusable (docs/design.md "Where the region lives").
//!
//! **Anchor link.** Every attached region file gets a second hard link in its directory,
//! [`anchor_path`] (`.<name>.vgpu-link`: hidden, neither `*.cache` nor `*libvgpu.so*`, so the
//! monitor's count of region-like files is unchanged). Removing the region's name (`rm`, a tmp
//! cleaner, `rm -rf /tmp/*`, whose glob skips dot files) then leaves the inode reachable:
//! - the next process that finds the path missing links the anchor back before it would create a
//!   fresh region (`regionfile::open_or_create`), so it sees the container's usage;
//! - live processes check periodically ([`Region::republish`], off the hot path) that the path
//!   still names their inode and link it back from their descriptor if not.
//!
//! The node monitor keeps the inode it mapped first and never remaps, so it sees every process
//! throughout. If every link is gone (the anchor too), the inode cannot be linked again (Linux
//! refuses to link an inode whose link count reached 0): the first live process to notice
//! publishes a **copy** at the path instead (taken under the container lock: every slot with its
//! usage at that instant), so processes started later still count the live ones' usage as of the
//! copy; changes after it are not shared (live processes keep their inode, newcomers use the copy),
//! which the shim reports as a split. The monitor keeps seeing the original inode only.
//!
//! **Fallback locations.** When the configured region cannot be used at all (a directory in its
//! place, a read-only or full file system, another user's 0600 file, foreign or corrupt content),
//! the container's processes share a region at a fixed, container-private place derived from the
//! configured path ([`fallback_paths`]): `/dev/shm` (private to the container in Docker and
//! Kubernetes), then `/tmp`, then a per-uid name. A fallback that live processes use is preferred
//! over the configured path, so a container never splits between the two while the cause comes
//! and goes. The monitor does not see a fallback region; the limit still holds across the
//! container. Only if no place works is the limit per process, and the shim says so.

use crate::regionfile::{AttachReport, Region, RegionError, RegionInit};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// The region's second name: same directory (a hard link cannot leave its file system).
pub fn anchor_path(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "region".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.vgpu-link"))
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn stat(p: &Path) -> io::Result<libc::stat> {
    let c = cstr(p)?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-parameter.
    if unsafe { libc::stat(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn fstat(fd: i32) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn same_inode(a: &libc::stat, b: &libc::stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// Links the open file `fd` at `to` (through `/proc/self/fd`, so it works whatever names the
/// inode still has, as long as it has one).
fn link_fd(fd: i32, to: &Path) -> io::Result<()> {
    let src = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
    let dst = cstr(to)?;
    // SAFETY: valid C strings.
    if unsafe { libc::linkat(libc::AT_FDCWD, src.as_ptr(), libc::AT_FDCWD, dst.as_ptr(), libc::AT_SYMLINK_FOLLOW) } == 0
    {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes [`anchor_path`] a second link of the open region file `fd` (replacing a stale anchor of
/// an older inode atomically). Best effort: a directory we cannot write simply has no anchor.
pub(crate) fn ensure_anchor(fd: i32, path: &Path) {
    let anchor = anchor_path(path);
    let Ok(mine) = fstat(fd) else { return };
    match stat(&anchor) {
        Ok(st) if same_inode(&st, &mine) => {}
        Ok(_) => {
            let tmp = anchor.with_file_name(format!(
                "{}.{}",
                anchor.file_name().unwrap().to_string_lossy(),
                std::process::id()
            ));
            if link_fd(fd, &tmp).is_ok()
                && let (Ok(t), Ok(a)) = (cstr(&tmp), cstr(&anchor))
                // SAFETY: valid C strings.
                && unsafe { libc::rename(t.as_ptr(), a.as_ptr()) } != 0
            {
                unsafe { libc::unlink(t.as_ptr()) };
            }
        }
        Err(_) => {
            let _ = link_fd(fd, &anchor);
        }
    }
}

/// Before creating a fresh region at a missing `path`: link the anchor back (the region was
/// deleted while its inode lives on). True if `path` may exist now (open it again).
pub(crate) fn relink_from_anchor(path: &Path) -> bool {
    let anchor = anchor_path(path);
    let (Ok(a), Ok(p)) = (cstr(&anchor), cstr(path)) else { return false };
    match stat(&anchor) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {}
        _ => return false,
    }
    // SAFETY: valid C strings.
    if unsafe { libc::link(a.as_ptr(), p.as_ptr()) } == 0 {
        return true;
    }
    io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST)
}

/// What [`Region::republish`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    /// The path names our inode.
    Yes,
    /// It did not; our inode is linked at the path again.
    Relinked,
    /// The path now names another file (a fresh region created meanwhile): accounting is split
    /// between the two until the processes of one of them exit.
    Replaced,
    /// Every name of our inode was gone; a copy of it (usage as of now) is published at the path.
    Copied,
    /// Every name of our inode is gone and no copy could be published.
    Lost,
    /// Could not tell or fix (e.g. the directory is gone or read-only).
    Unknown,
}

impl Region {
    /// Periodic check (a few syscalls; never on a hot path): the region's path still names this
    /// region's inode, and so does its anchor; repairs what it can.
    pub fn republish(&self) -> Published {
        let path = self.path();
        let Ok(mine) = fstat(self.raw_fd()) else { return Published::Unknown };
        match stat(path) {
            Ok(st) if same_inode(&st, &mine) => {
                if mine.st_nlink < 2 {
                    ensure_anchor(self.raw_fd(), path);
                }
                Published::Yes
            }
            Ok(_) => Published::Replaced,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                if mine.st_nlink == 0 {
                    return match self.publish_copy() {
                        Ok(true) => Published::Copied,
                        Ok(false) => Published::Yes, // another process published first
                        Err(_) => Published::Lost,
                    };
                }
                match link_fd(self.raw_fd(), path) {
                    Ok(()) => {
                        ensure_anchor(self.raw_fd(), path);
                        Published::Relinked
                    }
                    // Someone else linked something there first: look again next time.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Published::Yes,
                    Err(_) => Published::Unknown,
                }
            }
            Err(_) => Published::Unknown,
        }
    }

    /// Publishes a copy of this (unlinked) region at its path: written into an unnamed file in the
    /// directory, then linked, so nobody ever opens a half-written copy. `Ok(false)`: the path was
    /// taken meanwhile (someone else's copy or a fresh region).
    fn publish_copy(&self) -> io::Result<bool> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let path = self.path();
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let cdir = cstr(dir)?;
        // SAFETY: valid C string; the result is checked.
        let fd = unsafe {
            libc::open(cdir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o666 as libc::c_uint)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        unsafe { libc::fchmod(fd.as_raw_fd(), 0o666) };
        {
            // Under the container lock: no reservation or slot move is half done in the copy.
            let _g = self.lock().map_err(|e| io::Error::other(e.to_string()))?;
            let mut off = 0usize;
            while off < crate::region::FILE_SIZE {
                // SAFETY: the mapping is FILE_SIZE bytes long; the kernel reads it.
                let n = unsafe {
                    libc::pwrite(
                        fd.as_raw_fd(),
                        self.map_addr().add(off).cast(),
                        crate::region::FILE_SIZE - off,
                        off as i64,
                    )
                };
                if n <= 0 {
                    return Err(io::Error::last_os_error());
                }
                off += n as usize;
            }
        }
        match link_fd(fd.as_raw_fd(), path) {
            Ok(()) => {
                ensure_anchor(fd.as_raw_fd(), path);
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Live slots of processes other than `me`.
    pub fn others_alive(&self, me: i32) -> usize {
        let sh = self.shared();
        let n = (sh.proc_num.load(Ordering::Acquire).max(0) as usize).min(sh.procs.len());
        (0..n)
            .filter(|&k| {
                let s = &sh.procs[k];
                let pid = s.pid.load(Ordering::Relaxed);
                s.status.load(Ordering::Relaxed) != 0 && pid > 0 && pid != me && !crate::slots::pid_is_dead(pid)
            })
            .count()
    }
}

/// FNV-1a, 64 bit: a stable short name for a path.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ c as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The fallback places for a container whose configured region is `configured`, in order. Names
/// avoid `*.cache` and `*libvgpu.so*` (the monitor's patterns).
pub fn fallback_paths(configured: &Path, uid: u32) -> Vec<PathBuf> {
    let h = fnv1a(configured.as_os_str().as_bytes());
    vec![
        PathBuf::from(format!("/dev/shm/libvgpu-region-{h:016x}")),
        PathBuf::from(format!("/tmp/.libvgpu-region-{h:016x}")),
        // Another user's 0600 file in both places: a per-uid one still unites this user's processes.
        PathBuf::from(format!("/dev/shm/libvgpu-region-{h:016x}-uid{uid}")),
    ]
}

/// Which region a process attached to.
pub enum Placed {
    /// The configured one.
    Configured(Region, AttachReport),
    /// A fallback: because the configured one failed with `cause`, or (`cause` = None) because
    /// live processes of the container already use this fallback.
    Fallback { region: Region, report: AttachReport, cause: Option<RegionError> },
    /// Nothing usable: the configured path's error, then each fallback's.
    Nowhere(RegionError, Vec<RegionError>),
}

/// Opens the container's region: a fallback in use by live processes, else the configured path,
/// else the first usable fallback. A timeout on the attach lock (a busy, healthy region) is not a
/// reason to move elsewhere.
pub fn open_placed(configured: &Path, init: &RegionInit, fallbacks: &[PathBuf], me: i32) -> Placed {
    for f in fallbacks {
        if std::fs::symlink_metadata(f).is_err() {
            continue;
        }
        if let Ok((region, report)) = Region::open(f, init)
            && region.others_alive(me) > 0
        {
            return Placed::Fallback { region, report, cause: None };
        }
    }
    let cause = match Region::open(configured, init) {
        Ok((region, report)) => return Placed::Configured(region, report),
        Err(e @ RegionError::AttachLockTimeout { .. }) => return Placed::Nowhere(e, Vec::new()),
        Err(e) => e,
    };
    let mut errs = Vec::new();
    for f in fallbacks {
        match Region::open(f, init) {
            Ok((region, report)) => return Placed::Fallback { region, report, cause: Some(cause) },
            Err(e) => errs.push(e),
        }
    }
    Placed::Nowhere(cause, errs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::temp_path;

    #[test]
    fn anchor_names_stay_out_of_the_monitors_patterns() {
        let a = anchor_path(Path::new("/usr/local/vgpu/0b6c-uuid.cache"));
        assert_eq!(a, Path::new("/usr/local/vgpu/.0b6c-uuid.cache.vgpu-link"));
        for p in fallback_paths(Path::new("/usr/local/vgpu/x.cache"), 1000).iter().chain([&a]) {
            let n = p.file_name().unwrap().to_str().unwrap();
            assert!(!n.ends_with(".cache") && !n.contains("libvgpu.so"), "{n}");
        }
        let f1 = fallback_paths(Path::new("/tmp/a.cache"), 0);
        assert_eq!(f1, fallback_paths(Path::new("/tmp/a.cache"), 0), "fixed for a path");
        assert_ne!(f1[0], fallback_paths(Path::new("/tmp/b.cache"), 0)[0], "derived from the path");
        assert!(f1[0].starts_with("/dev/shm") && f1[1].starts_with("/tmp"));
    }

    #[test]
    fn deleted_region_is_relinked_by_a_live_process_and_by_the_next_opener() {
        let dir = temp_path("place-del");
        std::fs::create_dir(&*dir).unwrap();
        let p = dir.join("r.cache");
        let (r, _) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(anchor_path(&p).exists(), "anchor made at creation");
        assert_eq!(r.republish(), Published::Yes);
        r.shared().limit[0].store(777, Ordering::Relaxed);

        // rm of the name: the live process links it back.
        std::fs::remove_file(&p).unwrap();
        assert_eq!(r.republish(), Published::Relinked);
        let (r2, rep) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(!rep.created);
        assert_eq!(r2.limit(0), 777, "the same inode");

        // rm again: the next opener finds the anchor before creating anything.
        std::fs::remove_file(&p).unwrap();
        let (r3, rep) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(!rep.created);
        assert_eq!(r3.limit(0), 777);

        // Both names gone: the inode cannot be linked again; a copy with the usage as of now is
        // published instead (the live process keeps its inode: a split, reported as Replaced).
        let me = unsafe { libc::getpid() };
        crate::slots::attach(&r, me).unwrap();
        crate::slots::add_usage(&r, me, 0, crate::region::UsageKind::Data, 500).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::fs::remove_file(anchor_path(&p)).unwrap();
        assert_eq!(r.republish(), Published::Copied);
        let (copy, rep) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(!rep.created);
        assert_eq!(copy.limit(0), 777);
        let k = crate::slots::find_slot(&copy, me).expect("our slot is in the copy");
        assert_eq!(copy.shared().procs[k].used[0].total.load(Ordering::Relaxed), 500);
        assert_eq!(r.republish(), Published::Replaced);
        drop(copy);

        // A fresh region where the copy was (everything deleted, copy included, and a newcomer
        // created one first): the old process can only report the split.
        std::fs::remove_file(&p).unwrap();
        std::fs::remove_file(anchor_path(&p)).unwrap();
        let (r4, rep) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(rep.created && r4.limit(0) == 0);
        assert_eq!(r.republish(), Published::Replaced);
        // A stale anchor of an older inode is replaced by the current one.
        assert_eq!(r4.republish(), Published::Yes);
        let st_a = std::fs::metadata(anchor_path(&p)).unwrap();
        let st_p = std::fs::metadata(&p).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((st_a.dev(), st_a.ino()), (st_p.dev(), st_p.ino()));
    }

    #[test]
    fn unusable_configured_region_falls_back_and_a_live_fallback_wins() {
        let dir = temp_path("place-fb");
        std::fs::create_dir(&*dir).unwrap();
        let bad = dir.join("bad.cache");
        std::fs::create_dir(&bad).unwrap(); // a directory in its place
        let fbs = vec![dir.join("nodir/fb1"), dir.join("fb2")];
        let me = unsafe { libc::getpid() };
        let Placed::Fallback { region, cause: Some(RegionError::IsDirectory { .. }), .. } =
            open_placed(&bad, &RegionInit::default(), &fbs, me)
        else {
            panic!("expected the second fallback")
        };
        assert_eq!(region.path(), fbs[1]);

        // The configured path becomes usable again, but a live process (a child here) uses the
        // fallback: newcomers join it.
        std::fs::remove_dir(&bad).unwrap();
        let (pid, rx) = crate::testutil::fork_child(|tx| {
            crate::slots::attach(&region, unsafe { libc::getpid() }).unwrap();
            tx(b'A');
            unsafe { libc::pause() };
        });
        assert_eq!(rx(), Some(b'A'));
        match open_placed(&bad, &RegionInit::default(), &fbs, me) {
            Placed::Fallback { region: r, cause: None, .. } => assert_eq!(r.path(), fbs[1]),
            _ => panic!("expected the live fallback"),
        }
        unsafe { libc::kill(pid, libc::SIGKILL) };
        crate::testutil::wait_child(pid);
        // Its users gone: the configured path again.
        assert!(matches!(open_placed(&bad, &RegionInit::default(), &fbs, me), Placed::Configured(..)));

        // Nothing usable at all.
        let nowhere = [dir.join("x/1"), dir.join("y/2")];
        std::fs::remove_file(&bad).unwrap();
        std::fs::create_dir(&bad).unwrap();
        match open_placed(&bad, &RegionInit::default(), &nowhere, me) {
            Placed::Nowhere(RegionError::IsDirectory { .. }, errs) => assert_eq!(errs.len(), 2),
            _ => panic!("expected nowhere"),
        }
    }
}
