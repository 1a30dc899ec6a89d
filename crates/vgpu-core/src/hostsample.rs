//! The host GPU sample file a tenant's library publishes beside its region for the node agent
//! (docs/agent.md "Host GPU metrics"): `<container dir>/host-gpu.samples`, a name the stock
//! monitor ignores (not `*.cache`, no `libvgpu.so`), text of at most [`MAX_LEN`] bytes, one line
//! per device:
//!
//! ```text
//! v1 <unix ms> <uuid> <device index> <memory used bytes> <memory total bytes> <utilization %> <name>
//! ```
//!
//! The file is replaced whole (a temporary file in the same directory, renamed over the name), so
//! a reader sees one complete sample set or the previous one, never a mix.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub const FILE_NAME: &str = "host-gpu.samples";
/// The agent reads this much at most.
pub const MAX_LEN: usize = 4096;
/// Longest name written (the agent rejects longer ones).
const MAX_NAME: usize = 96;
/// Mode of the file: the region's (0666), so every tenant UID can replace it.
const MODE: libc::mode_t = 0o666;

/// One device's figures, as NVML reports them for the physical GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSample {
    pub uuid: String,
    pub index: u32,
    pub used: u64,
    pub total: u64,
    pub util: u32,
    pub name: String,
}

/// The line of one device, or None when a field cannot be written in the format (a UUID that is
/// not a `GPU-` word: MIG and garbage are not host GPUs).
pub fn line(at_ms: u64, d: &DeviceSample) -> Option<String> {
    let uuid_ok = d.uuid.starts_with("GPU-") && d.uuid.len() <= 96 && d.uuid.bytes().all(|b| b.is_ascii_graphic());
    if !uuid_ok {
        return None;
    }
    let mut name: String = d.name.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    while name.len() > MAX_NAME {
        name.pop();
    }
    let used = d.used.min(d.total);
    let util = d.util.min(100);
    Some(format!("v1 {at_ms} {} {} {used} {} {util} {}\n", d.uuid, d.index, d.total, name.trim()))
}

/// The whole file: the lines that fit in [`MAX_LEN`].
pub fn render(at_ms: u64, devices: &[DeviceSample]) -> String {
    let mut out = String::new();
    for l in devices.iter().filter_map(|d| line(at_ms, d)) {
        if out.len() + l.len() > MAX_LEN {
            break;
        }
        out.push_str(&l);
    }
    out
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Replaces `<dir>/host-gpu.samples` with `text`: a temporary file created in `dir` with
/// `O_EXCL | O_NOFOLLOW` (never through a link, never someone else's file), mode 0666, renamed
/// over the name (a link or file already there is replaced, not followed). On failure nothing
/// is left behind. The caller runs it with the IDs it uses for the region (`secure::as_caller`).
pub fn publish(dir: &Path, text: &str) -> io::Result<()> {
    let pid = std::process::id();
    let tmp = dir.join(format!(".{FILE_NAME}.{pid}.tmp"));
    let tmp_c = cpath(&tmp)?;
    let dst_c = cpath(&dir.join(FILE_NAME))?;
    let open = || {
        // SAFETY: a NUL-terminated path; flags and mode are plain values.
        let fd = unsafe {
            libc::open(
                tmp_c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                MODE as libc::c_uint,
            )
        };
        // SAFETY: a descriptor just returned by open, owned by nobody else.
        if fd < 0 { Err(io::Error::last_os_error()) } else { Ok(unsafe { OwnedFd::from_raw_fd(fd) }) }
    };
    let fd = match open() {
        // A leftover of this pid (a process that died mid-publish): ours to remove.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            // SAFETY: a NUL-terminated path; unlink removes a link itself, never its target.
            unsafe { libc::unlink(tmp_c.as_ptr()) };
            open()?
        }
        r => r?,
    };
    let written = (|| {
        // SAFETY: our descriptor; umask may have narrowed the mode given to open.
        if unsafe { libc::fchmod(fd.as_raw_fd(), MODE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut f = std::fs::File::from(fd);
        f.write_all(text.as_bytes())?;
        // SAFETY: two NUL-terminated paths.
        if unsafe { libc::rename(tmp_c.as_ptr(), dst_c.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    })();
    if written.is_err() {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::unlink(tmp_c.as_ptr()) };
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const U: &str = "GPU-00000000-0000-4000-8000-000000000000";

    fn dev(uuid: &str, name: &str) -> DeviceSample {
        DeviceSample { uuid: uuid.into(), index: 1, used: 300, total: 200, util: 150, name: name.into() }
    }

    #[test]
    fn lines_are_bounded_and_well_formed() {
        assert_eq!(
            line(7, &dev(U, "NVIDIA H100\n80GB")).unwrap(),
            format!("v1 7 {U} 1 200 200 100 NVIDIA H100 80GB\n")
        );
        assert!(line(7, &dev("MIG-x", "n")).is_none());
        assert!(line(7, &dev("GPU-a b", "n")).is_none());
        let long = "é".repeat(100);
        let l = line(7, &dev(U, &long)).unwrap();
        assert!(l.trim_end().rsplit(' ').next().unwrap().len() <= MAX_NAME, "{l}");
        let many: Vec<DeviceSample> = (0..100).map(|_| dev(U, &"x".repeat(96))).collect();
        let text = render(7, &many);
        assert!(text.len() <= MAX_LEN && text.ends_with('\n') && text.lines().count() > 10);
    }

    #[test]
    fn publish_replaces_atomically_without_following_links() {
        let dir = std::env::temp_dir().join(format!("vgpu-hostsample-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(FILE_NAME)).unwrap();
        // A leftover temporary file of this pid (even a link) is removed, not written through.
        std::os::unix::fs::symlink(&target, dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()))).unwrap();
        publish(&dir, "one\n").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep", "the link is replaced, not followed");
        let p = dir.join(FILE_NAME);
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o666);
        publish(&dir, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two\n");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
        // A directory in the way: an error, nothing left behind.
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        assert!(publish(&dir, "three\n").is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
