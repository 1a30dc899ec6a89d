//! Where a container's region lives when its file is deleted or unusable (docs/design.md "Where the region lives").
//!
//! **Anchor link** (`regionanchor`): every attached region file has a second, hidden hard link in
//! its directory, so a deleted region name can be linked back while live processes use it; live
//! processes check periodically ([`Region::republish`], off the hot path) that the path still
//! names their inode and link it back from their descriptor if not.
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
//! over the configured path (also when its file was deleted and only its anchor is left), so a
//! container never splits between the two while the cause comes and goes. The monitor does not see a fallback region; the limit still holds across the
//! container. Only if no place works is the limit per process, and the shim says so.

use crate::regionanchor::{anchor_in_use, cstr, ensure_anchor, fstat, link_fd, same_inode, stat};
use crate::regionfile::{AttachReport, Region, RegionError, RegionInit};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

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
        // A deleted fallback that live processes still use is linked back by the open (their
        // anchor); a missing one nobody uses is not created here.
        if std::fs::symlink_metadata(f).is_err() && !anchor_in_use(f) {
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
    use crate::regionanchor::*;
    use crate::testutil::{region_in_new_dir, temp_path};

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
        let (_dir, p) = region_in_new_dir("place-del");
        let (r, _) = Region::open(&p, &RegionInit::default()).unwrap();
        assert!(anchor_path(&p).exists(), "anchor made at creation");
        assert_eq!(r.republish(), Published::Yes);
        r.shared().limit[0].store(777, Ordering::Relaxed);
        // This (live) process uses the region: only then is a deleted one brought back.
        let me = unsafe { libc::getpid() };
        crate::slots::attach(&r, me).unwrap();

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

#[cfg(test)]
mod anchor_tests {
    use super::*;
    use crate::regionanchor::*;
    use crate::testutil::{fork_child, region_in_new_dir, temp_path, wait_child};
    use std::os::unix::fs::MetadataExt;

    fn limit_init(bytes: u64) -> RegionInit {
        let mut i = RegionInit::default();
        i.limits[0] = bytes;
        i
    }

    fn inode(p: &Path) -> (u64, u64) {
        let m = std::fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    /// Directory entries other than the region and its anchor (e.g. a moved-aside anchor left
    /// behind).
    fn leftovers(dir: &Path, p: &Path) -> Vec<String> {
        let keep = [p.file_name().unwrap().to_owned(), anchor_path(p).file_name().unwrap().to_owned()];
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| !keep.contains(&e.file_name()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// A child attaches a slot in the region at `p`, then waits to be killed.
    fn live_child(p: &Path) -> i32 {
        let p = p.to_path_buf();
        let (pid, rx) = fork_child(move |tx| {
            let (r, _) = Region::open(&p, &RegionInit::default()).unwrap();
            crate::slots::attach(&r, unsafe { libc::getpid() }).unwrap();
            tx(b'A');
            park();
        });
        assert_eq!(rx(), Some(b'A'));
        pid
    }

    /// A child's wait to be killed; ends by itself (SIGALRM) should a failed test leave it.
    fn park() {
        unsafe {
            libc::alarm(60);
            libc::pause();
        }
    }

    fn kill(pid: i32) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait_child(pid);
    }

    /// The reported bug: every process of a region has exited, the region file is deleted (an
    /// operator's reset, a new container reusing the directory), and a new process must get a
    /// fresh region with its own limits, not the dead region back from the anchor.
    #[test]
    fn deleted_region_of_dead_processes_is_not_brought_back() {
        let (dir, p) = region_in_new_dir("anchor-dead");
        let (old, rep) = Region::open(&p, &limit_init(8 << 30)).unwrap();
        assert!(rep.created && rep.notes.is_empty());
        let child = live_child(&p);
        assert!(anchor_in_use(&p), "a live child's slot");
        kill(child); // its slot stays (nobody swept it): a dead owner
        assert!(crate::slots::live(old.shared()).any(|s| s.pid == child), "the dead slot is still there");
        assert!(!anchor_in_use(&p), "a dead owner does not count");
        let old_inode = inode(&p);
        // `old` stays mapped here (so its inode number is not reused) but holds no slot: a
        // mapping alone is no use of the region.

        std::fs::remove_file(&p).unwrap();
        let (r, rep) = Region::open(&p, &limit_init(2 << 30)).unwrap();
        assert!(rep.created, "a fresh region");
        assert_eq!(r.limit(0), 2 << 30, "with this process's limit");
        assert!(rep.warnings.is_empty(), "no limit inconsistency: {:?}", rep.warnings);
        assert_eq!(rep.notes.len(), 1, "{:?}", rep.notes);
        assert!(
            rep.notes[0].contains("no live process uses") && rep.notes[0].contains("device 0 memory 8589934592"),
            "{}",
            rep.notes[0]
        );
        assert_eq!(crate::slots::live(r.shared()).count(), 0, "none of the old slots");
        assert_ne!(inode(&p), old_inode);
        assert_eq!(inode(&anchor_path(&p)), inode(&p), "the anchor names the new region");
        assert!(leftovers(&dir, &p).is_empty(), "{:?}", leftovers(&dir, &p));
        drop(old);
    }

    /// A slot whose pid lives on but belongs to another process now (different start time) is
    /// dead, as for the sweep: e.g. a new container whose pids repeat the old one's.
    #[test]
    fn recycled_pid_in_the_anchored_region_does_not_count() {
        let (_dir, p) = region_in_new_dir("anchor-recycled");
        let (old, _) = Region::open(&p, &limit_init(1 << 30)).unwrap();
        let me = unsafe { libc::getpid() };
        let real = crate::slots::proc_start_time(me).expect("/proc/self/stat");
        {
            let g = old.lock().unwrap();
            crate::slots::attach_with(&g, me, real + 1, &|_, _| false).unwrap();
        }
        drop(old);
        std::fs::remove_file(&p).unwrap();
        let (r, rep) = Region::open(&p, &limit_init(3 << 30)).unwrap();
        assert!(rep.created && r.limit(0) == 3 << 30, "{:?}", rep);
    }

    /// Deleted while a live process (this one, with its real start time) uses it: linked back,
    /// the same inode and its limits, as before.
    #[test]
    fn deleted_region_in_use_is_linked_back_with_its_limits() {
        let (_dir, p) = region_in_new_dir("anchor-live");
        let (old, _) = Region::open(&p, &limit_init(8 << 30)).unwrap();
        let me = unsafe { libc::getpid() };
        crate::slots::attach(&old, me).unwrap();
        crate::slots::add_usage(&old, me, 0, crate::region::UsageKind::Data, 4096).unwrap();
        let old_inode = inode(&p);
        std::fs::remove_file(&p).unwrap();
        let (r, rep) = Region::open(&p, &limit_init(2 << 30)).unwrap();
        assert!(!rep.created && rep.notes.is_empty(), "{:?}", rep);
        assert_eq!(inode(&p), old_inode, "the same inode");
        assert_eq!(r.limit(0), 8 << 30, "its limits");
        assert!(rep.warnings.iter().any(|w| w.contains("limit inconsistency")), "{:?}", rep.warnings);
        assert_eq!(crate::slots::container_total(&r, 0), 4096, "its usage");
    }

    /// A live process counted in the overflow table (the 1024 slots were full) also keeps the
    /// region in use.
    #[test]
    fn live_overflow_record_keeps_a_deleted_region() {
        let (_dir, p) = region_in_new_dir("anchor-overflow");
        let (old, _) = Region::open(&p, &limit_init(5 << 30)).unwrap();
        let q = p.clone();
        let (child, rx) = fork_child(move |tx| {
            let (r, _) = Region::open(&q, &RegionInit::default()).unwrap();
            let me = unsafe { libc::getpid() };
            let g = r.lock().unwrap();
            crate::slots::attach_overflow_locked(&g, me, crate::slots::proc_start_time(me).unwrap()).unwrap();
            drop(g);
            tx(b'O');
            park();
        });
        assert_eq!(rx(), Some(b'O'));
        assert_eq!(crate::slots::live(old.shared()).count(), 0, "no slot, only the record");
        std::fs::remove_file(&p).unwrap();
        let (r, rep) = Region::open(&p, &limit_init(1 << 30)).unwrap();
        assert!(!rep.created && r.limit(0) == 5 << 30, "{:?}", rep);
        kill(child);
        drop(r);
        std::fs::remove_file(&p).unwrap();
        let (r, rep) = Region::open(&p, &limit_init(1 << 30)).unwrap();
        assert!(rep.created && r.limit(0) == 1 << 30, "its owner died: stale now; {:?}", rep);
        drop(old);
    }

    /// An anchor that is no usable region (garbage, the magic with a foreign version, a FIFO)
    /// is never linked back: a fresh region, one note, and the anchor names it afterwards.
    #[test]
    fn corrupt_anchor_gives_a_fresh_region() {
        let (dir, p) = region_in_new_dir("anchor-corrupt");
        let mut wrong_version = vec![0u8; crate::region::FILE_SIZE];
        wrong_version[0..4].copy_from_slice(&crate::region::REGION_MAGIC.to_le_bytes());
        wrong_version[4..8].copy_from_slice(&2u32.to_le_bytes());
        let mut short = wrong_version[..4096].to_vec();
        short[4..8].copy_from_slice(&1u32.to_le_bytes());
        for (what, bytes) in [("garbage", b"\x7fELF garbage".to_vec()), ("version 2", wrong_version), ("short", short)]
        {
            let _ = std::fs::remove_file(&p);
            std::fs::write(anchor_path(&p), &bytes).unwrap();
            let (r, rep) = Region::open(&p, &limit_init(1 << 30)).unwrap();
            assert!(rep.created && r.limit(0) == 1 << 30, "{what}: {rep:?}");
            assert!(rep.notes.len() == 1 && rep.notes[0].contains("not a usable region"), "{what}: {:?}", rep.notes);
            assert_eq!(inode(&anchor_path(&p)), inode(&p), "{what}");
            assert!(leftovers(&dir, &p).is_empty(), "{what}: {:?}", leftovers(&dir, &p));
        }
        // A FIFO must not block the open.
        std::fs::remove_file(&p).unwrap();
        std::fs::remove_file(anchor_path(&p)).unwrap();
        let c = cstr(&anchor_path(&p)).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        let (r, rep) = Region::open(&p, &limit_init(1 << 30)).unwrap();
        assert!(rep.created && r.limit(0) == 1 << 30 && rep.notes.len() == 1, "{rep:?}");
        assert_eq!(inode(&anchor_path(&p)), inode(&p), "the FIFO was replaced by the region's anchor");
    }

    /// Several new processes starting together after a reset end in one fresh region.
    #[test]
    fn simultaneous_openers_of_a_stale_anchor_share_one_fresh_region() {
        let (dir, p) = region_in_new_dir("anchor-race");
        for round in 0..5 {
            let (old, _) = Region::open(&p, &limit_init(8 << 30)).unwrap();
            let child = live_child(&p);
            kill(child);
            drop(old);
            std::fs::remove_file(&p).unwrap();
            let kids: Vec<_> = (0..4)
                .map(|_| {
                    let q = p.clone();
                    fork_child(move |tx| {
                        let (r, rep) = Region::open(&q, &limit_init(2 << 30)).unwrap();
                        crate::slots::attach(&r, unsafe { libc::getpid() }).unwrap();
                        let mine = fstat(r.raw_fd()).unwrap();
                        let named = stat(&q).unwrap();
                        tx(if r.limit(0) == 2 << 30 && same_inode(&mine, &named) { b'Y' } else { b'N' });
                        tx(b'0' + rep.notes.len() as u8);
                        park();
                    })
                })
                .collect();
            let mut notes = 0;
            for (pid, rx) in &kids {
                assert_eq!(rx(), Some(b'Y'), "round {round}: child {pid} in the one fresh region");
                notes += (rx().unwrap() - b'0') as usize;
            }
            assert_eq!(notes, 1, "round {round}: the one that discarded the stale anchor says so");
            let (r, rep) = Region::open(&p, &RegionInit::default()).unwrap();
            assert!(!rep.created);
            assert_eq!(crate::slots::live(r.shared()).count(), 4, "round {round}: all four in it");
            assert_eq!(inode(&anchor_path(&p)), inode(&p), "round {round}");
            assert!(leftovers(&dir, &p).is_empty(), "round {round}: {:?}", leftovers(&dir, &p));
            for (pid, _) in kids {
                kill(pid);
            }
            drop(r);
            std::fs::remove_file(&p).unwrap();
            std::fs::remove_file(anchor_path(&p)).unwrap();
        }
    }

    /// The same for a fallback region: a deleted fallback that live processes use is joined
    /// (linked back), a deleted one nobody uses is neither joined nor re-created.
    #[test]
    fn deleted_fallback_is_joined_only_while_in_use() {
        let dir = temp_path("anchor-fb");
        std::fs::create_dir(&*dir).unwrap();
        let bad = dir.join("bad.cache");
        std::fs::create_dir(&bad).unwrap();
        let fbs = vec![dir.join("fb")];
        let me = unsafe { libc::getpid() };
        let Placed::Fallback { region, .. } = open_placed(&bad, &RegionInit::default(), &fbs, me) else {
            panic!("expected the fallback")
        };
        drop(region);
        let child = live_child(&fbs[0]);
        std::fs::remove_dir(&bad).unwrap(); // the configured path is usable again
        std::fs::remove_file(&fbs[0]).unwrap();
        match open_placed(&bad, &RegionInit::default(), &fbs, me) {
            Placed::Fallback { region: r, cause: None, .. } => assert_eq!(r.path(), fbs[0]),
            _ => panic!("expected the live, deleted fallback to be joined"),
        }
        kill(child);
        std::fs::remove_file(&fbs[0]).unwrap();
        assert!(matches!(open_placed(&bad, &RegionInit::default(), &fbs, me), Placed::Configured(..)));
        assert!(!fbs[0].exists(), "a stale fallback is not re-created");
    }
}
