//! The anchor link of a region file (docs/design.md "Where the region lives"), below the open
//! protocol (`regionfile` links and relinks through it) and above the mapping and the slots.
//!
//! **Anchor link.** Every attached region file gets a second hard link in its directory,
//! [`anchor_path`] (`.<name>.vgpu-link`: hidden, neither `*.cache` nor `*libvgpu.so*`, so the
//! monitor's count of region-like files is unchanged). Removing the region's name (`rm`, a tmp
//! cleaner, `rm -rf /tmp/*`, whose glob skips dot files) then leaves the inode reachable:
//! - the next process that finds the path missing links the anchor back before it would create a
//!   fresh region (`regionfile::open_or_create`), so it sees the container's usage — but only
//!   while a live process uses that region ([`relink_from_anchor`]: a live slot or overflow
//!   record, by the sweep's test of pid and start time). A region whose processes have all
//!   exited (an operator's `rm` to reset it, a new container reusing the directory with other
//!   limits) is not brought back: its anchor is discarded, said in one info line, and a fresh
//!   region starts with the creator's limits;
//! - live processes check periodically (`Region::republish`, `regionplace`) that the path still
//!   names their inode and link it back from their descriptor if not.
//!

use crate::region::*;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// The region's second name: same directory (a hard link cannot leave its file system).
pub fn anchor_path(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "region".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.vgpu-link"))
}

pub(crate) fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

pub(crate) fn stat(p: &Path) -> io::Result<libc::stat> {
    let c = cstr(p)?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-parameter.
    if unsafe { libc::stat(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub(crate) fn fstat(fd: i32) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub(crate) fn same_inode(a: &libc::stat, b: &libc::stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// `now` is the file `checked` was taken of, with nothing written since: the same inode and the
/// same modification time. The inode alone does not tell: a checked file that another process
/// discards and unlinks frees its inode number, and a fresh region (and its anchor) created right
/// after may get the same number.
fn unchanged_since(now: &libc::stat, checked: &libc::stat) -> bool {
    same_inode(now, checked) && now.st_mtime == checked.st_mtime && now.st_mtime_nsec == checked.st_mtime_nsec
}

/// Links the open file `fd` at `to` (through `/proc/self/fd`, so it works whatever names the
/// inode still has, as long as it has one).
pub(crate) fn link_fd(fd: i32, to: &Path) -> io::Result<()> {
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

/// What [`relink_from_anchor`] did for a missing region path.
#[derive(Debug)]
pub(crate) enum Relink {
    /// No anchor: create a fresh region.
    NoAnchor,
    /// A live process uses the anchored region: it is linked at the path again (or something
    /// else is there now); open the path again.
    Relinked,
    /// The anchored region is not in use by any live process (or is no region at all): the anchor
    /// was discarded; create a fresh region. The text says why, for the log.
    Discarded(String),
}

/// What the anchor names.
enum AnchorState {
    Missing,
    /// A region with a live process; the descriptor names the inode that was checked.
    InUse(OwnedFd),
    /// Not worth keeping: why, and the inode checked (`None`: could not even be opened).
    Stale(String, Option<libc::stat>),
}

/// A copy of a region file's bytes, read with `pread` (a concurrent truncation cannot fault us,
/// as a mapping could), typed as the mapped layout. Bytes past the end of a short file read as
/// zero: no extension there.
struct RegionCopy(Vec<u64>);

impl RegionCopy {
    fn read(fd: i32, size: u64) -> io::Result<RegionCopy> {
        let mut words = vec![0u64; FILE_SIZE / 8];
        let want = (size as usize).min(FILE_SIZE);
        let mut done = 0usize;
        while done < want {
            // SAFETY: the buffer is FILE_SIZE bytes long and `want - done` stays inside it.
            let n =
                unsafe { libc::pread(fd, words.as_mut_ptr().cast::<u8>().add(done).cast(), want - done, done as i64) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                break;
            }
            done += n as usize;
        }
        Ok(RegionCopy(words))
    }

    fn map(&self) -> &RegionMap {
        // SAFETY: the buffer is FILE_SIZE = size_of::<RegionMap>() bytes, 8-byte aligned (u64s;
        // RegionMap's alignment is 8), and RegionMap is repr(C) of integer atomics and byte
        // arrays only, for which every bit pattern is valid. Only loads are made through it.
        unsafe { &*self.0.as_ptr().cast::<RegionMap>() }
    }
}

/// A process that still uses the region `m`: a live slot or overflow record whose owner is alive
/// with the start time it recorded (`slots::is_dead`, the sweep's test; a slot without a start
/// time, as the C library writes them, is judged by its pid alone). Our own pid counts: a slot
/// with our pid and start time is this very process (an earlier open, or the image before an
/// `exec`).
fn live_user(m: &RegionMap) -> Option<i32> {
    // The owner's start time is the slot's `unused[0]` (slots.rs, "Identity, not pid").
    let slot = crate::slots::live(&m.shared)
        .map(|s| (s.pid, m.shared.procs[s.index].unused[0].load(Ordering::Relaxed)))
        .find(|&(pid, start)| pid > 0 && !crate::slots::is_dead(pid, start));
    if let Some((pid, _)) = slot {
        return Some(pid);
    }
    let ext = &m.ext;
    if ext.ext_magic.load(Ordering::Relaxed) != EXT_MAGIC || ext.ext_version.load(Ordering::Relaxed) != EXT_VERSION {
        return None;
    }
    let n = (ext.overflow.num.load(Ordering::Relaxed) as usize).min(OVERFLOW_RECORDS);
    ext.overflow.records[..n].iter().find_map(|o| {
        let pid = o.pid.load(Ordering::Relaxed);
        (pid > 0
            && o.status.load(Ordering::Relaxed) != 0
            && !crate::slots::is_dead(pid, o.start_time.load(Ordering::Relaxed)))
        .then_some(pid)
    })
}

/// The limits a region carries, for the log line: one value for all devices when they agree (the
/// environment's limit applies to all 16), else per limited device.
fn limits_text(m: &RegionMap) -> String {
    let r = &m.shared;
    let part = |what: &str, v: &dyn Fn(usize) -> u64, none: u64, unit: &str| -> Option<String> {
        if (0..MAX_DEVICES).all(|d| v(d) == v(0)) {
            return (v(0) != none).then(|| format!("{what} {}{unit} on every device", v(0)));
        }
        let l: Vec<String> =
            (0..MAX_DEVICES).filter(|&d| v(d) != none).map(|d| format!("device {d} {what} {}{unit}", v(d))).collect();
        Some(l.join(", "))
    };
    let mem = part("memory", &|d| r.limit[d].load(Ordering::Relaxed), 0, "");
    let sm = part("SM", &|d| r.sm_limit[d].load(Ordering::Relaxed), 100, "%");
    let l: Vec<String> = mem.into_iter().chain(sm).collect();
    if l.is_empty() { "no limits".into() } else { l.join(", ") }
}

/// Opens the anchor and decides whether its region is still in use. Checks what attaching
/// checks (a regular file, the magic, major version 1, at least the v1 size, not the transient
/// 1.1 layout); anything else is stale.
fn inspect_anchor(anchor: &Path) -> AnchorState {
    let Ok(c) = cstr(anchor) else { return AnchorState::Missing };
    // O_NONBLOCK: a FIFO in its place must not block us; O_NOFOLLOW: an anchor is a hard link.
    // SAFETY: valid C string; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => AnchorState::Missing,
            _ => AnchorState::Stale(format!("cannot be read ({e})"), None),
        };
    }
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let Ok(st) = fstat(fd.as_raw_fd()) else { return AnchorState::Stale("cannot be examined".into(), None) };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return AnchorState::Stale("is not a regular file".into(), Some(st));
    }
    let size = st.st_size as u64;
    let copy = match RegionCopy::read(fd.as_raw_fd(), size) {
        Ok(c) => c,
        Err(e) => return AnchorState::Stale(format!("cannot be read ({e})"), Some(st)),
    };
    let m = copy.map();
    let r = &m.shared;
    let (magic, major, minor) = (
        r.initialized_flag.load(Ordering::Relaxed),
        r.major_version.load(Ordering::Relaxed),
        r.minor_version.load(Ordering::Relaxed),
    );
    if magic != REGION_MAGIC
        || major != MAJOR_VERSION
        || size < V1_REGION_SIZE as u64
        || (minor == 1 && size == TRANSIENT_V11_REGION_SIZE as u64 + 1)
    {
        return AnchorState::Stale(
            format!("is not a usable region (first word {magic:#010x}, version {major}.{minor}, {size} bytes)"),
            Some(st),
        );
    }
    match live_user(m) {
        Some(_) => AnchorState::InUse(fd),
        None => AnchorState::Stale(format!("names a region no live process uses ({})", limits_text(m)), Some(st)),
    }
}

/// True if a live process uses the region anchored for `path` (whether or not `path` exists).
pub(crate) fn anchor_in_use(path: &Path) -> bool {
    matches!(inspect_anchor(&anchor_path(path)), AnchorState::InUse(_))
}

/// Removes `anchor` if it still names the inode `checked`, never a newer anchor another process
/// made meanwhile: the name is first moved aside atomically (rename), then the moved inode is
/// compared; a different one is put back, unless yet another anchor appeared meanwhile (then
/// that one is the newest, and the inode we moved aside is still linked at its region's path,
/// which the anchor is made from). Best effort. True if this call removed the checked inode's
/// anchor (of several processes discarding the same anchor at once, exactly one).
fn discard_anchor(anchor: &Path, checked: &libc::stat) -> bool {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let name = anchor.file_name().map_or_else(|| "anchor".into(), |n| n.to_string_lossy().into_owned());
    // Unique across processes (pid) and across pid namespaces sharing the directory (time).
    let aside = anchor.with_file_name(format!("{name}.stale.{}.{nanos}", std::process::id()));
    let (Ok(a), Ok(t)) = (cstr(anchor), cstr(&aside)) else { return false };
    // SAFETY: valid C strings (here and below).
    if unsafe { libc::rename(a.as_ptr(), t.as_ptr()) } != 0 {
        return false; // gone already (another process discarded it) or the directory is read-only
    }
    let ours = stat(&aside).is_ok_and(|now| unchanged_since(&now, checked));
    if !ours {
        unsafe { libc::link(t.as_ptr(), a.as_ptr()) };
    }
    unsafe { libc::unlink(t.as_ptr()) };
    ours
}

/// Before creating a fresh region at a missing `path`: if its anchor names a region that a live
/// process still uses (deleted while in use), link that inode back, so this process joins it.
/// If no live process uses it (every process of the old region has exited: an operator's reset,
/// a new container reusing the directory), the anchor is discarded and a fresh region is made
/// with this process's limits: a stale region never comes back with its old limits and usage.
///
/// Races: several new processes at once all end in one region, because linking at `path` is
/// exclusive (a relinked old inode or a freshly created one, whichever comes first; the others
/// find it there and open it). If the old region's last process exits during the check, either
/// answer may result: a region whose processes all just exited may be reused, or be treated as
/// stale; both are fine (nobody's usage is lost either way).
pub(crate) fn relink_from_anchor(path: &Path) -> Relink {
    let anchor = anchor_path(path);
    let fd = match inspect_anchor(&anchor) {
        AnchorState::Missing => return Relink::NoAnchor,
        AnchorState::InUse(fd) => fd,
        AnchorState::Stale(why, st) => {
            // Only a regular file is moved away (never a directory); one we could not open is
            // left for the fresh region's anchor to replace (a rename over it). Of several
            // processes finding the same stale anchor, the one that removed it says so.
            if let Some(st) = st.filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
                && !discard_anchor(&anchor, &st)
            {
                return Relink::NoAnchor;
            }
            return Relink::Discarded(format!(
                "region file {} had been deleted and its hidden link {} {why}: discarded the link instead of \
                 bringing that region back (a fresh region starts with the limits of the process that creates it)",
                path.display(),
                anchor.display()
            ));
        }
    };
    // Link exactly the inode that was checked (through /proc/self/fd); without /proc, by name if
    // the anchor still names that inode.
    let linked = link_fd(fd.as_raw_fd(), path).or_else(|e| {
        if e.raw_os_error() == Some(libc::EEXIST) {
            return Err(e);
        }
        match (fstat(fd.as_raw_fd()), stat(&anchor), cstr(&anchor), cstr(path)) {
            // SAFETY: valid C strings.
            (Ok(mine), Ok(now), Ok(a), Ok(p)) if mine.st_nlink > 0 && same_inode(&mine, &now) => {
                if unsafe { libc::link(a.as_ptr(), p.as_ptr()) } == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
            _ => Err(e),
        }
    });
    match linked {
        // EEXIST: something is at the path now (another process was first): open that.
        Ok(()) => Relink::Relinked,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Relink::Relinked,
        // E.g. every name of the inode went meanwhile: it cannot be linked again.
        Err(_) => Relink::NoAnchor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::temp_path;

    #[test]
    fn a_discard_removes_only_the_file_that_was_checked() {
        let dir = temp_path("anchor-discard");
        std::fs::create_dir(&*dir).unwrap();
        let anchor = dir.join(".r.cache.vgpu-link");
        std::fs::write(&anchor, b"old").unwrap();
        let checked = stat(&anchor).unwrap();
        // Another file at the name with the inode number of the checked one (a freed number given
        // to a fresh region's anchor): the same inode, another modification time.
        let mut reused = checked;
        reused.st_mtime += 1;
        assert!(!discard_anchor(&anchor, &reused));
        assert!(anchor.exists(), "a newer anchor was removed");
        assert!(discard_anchor(&anchor, &checked));
        assert!(!anchor.exists());
        assert_eq!(std::fs::read_dir(&*dir).unwrap().count(), 0, "a moved-aside name is left");
    }
}
