//! Set-user-ID and set-group-ID programs (`AT_SECURE`): the person who starts one controls its
//! environment but not its privileges, so such a program takes no path from the environment (only
//! the container's standard locations), and touches region files with the caller's real IDs, never
//! through a symbolic link: whatever it creates, opens or grows there, the caller could have
//! created, opened or grown without it.

use crate::config::{ConfigSources, ENV_SHARED_CACHE, PID1_ENVIRON};
use crate::regionpath::{ENV_CONTAINER_NAME, ENV_POD_UID, ENV_VGPU_MOUNT};
use std::path::Path;

/// Variables that name (or pick) a place in the file system.
pub const PATH_VARIABLES: &[&str] = &[ENV_SHARED_CACHE, ENV_VGPU_MOUNT, ENV_POD_UID, ENV_CONTAINER_NAME];

/// Whether the kernel started this program with changed privileges (setuid/setgid, file
/// capabilities). Reads the auxiliary vector: no system call.
pub fn at_secure() -> bool {
    // SAFETY: getauxval only reads the process's auxiliary vector.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// `O_NOFOLLOW` for a region open in a secure program, else 0.
pub fn no_follow() -> libc::c_int {
    if at_secure() { libc::O_NOFOLLOW } else { 0 }
}

/// The configuration sources of a secure program: the path variables are absent, from the
/// process environment and from PID 1's.
pub struct SecureSources<'a>(pub &'a dyn ConfigSources);

fn is_path_variable(key: &str) -> bool {
    PATH_VARIABLES.contains(&key)
}

/// `environ` content (NUL-separated `K=V`) without the path variables.
pub fn strip_path_variables(content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len());
    for entry in content.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let key = entry.split(|&b| b == b'=').next().unwrap_or_default();
        if !is_path_variable(&String::from_utf8_lossy(key)) {
            out.extend_from_slice(entry);
            out.push(0);
        }
    }
    out
}

impl ConfigSources for SecureSources<'_> {
    fn env(&self, key: &str) -> Option<String> {
        if is_path_variable(key) { None } else { self.0.env(key) }
    }
    fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let content = self.0.read_file(path)?;
        Some(if path == Path::new(PID1_ENVIRON) { strip_path_variables(&content) } else { content })
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn list_dir(&self, path: &Path) -> Option<Vec<String>> {
        self.0.list_dir(path)
    }
    fn list_subdirs(&self, path: &Path) -> Option<Vec<String>> {
        self.0.list_subdirs(path)
    }
    fn env_names(&self) -> Vec<String> {
        self.0.env_names().into_iter().filter(|k| !is_path_variable(k)).collect()
    }
}

/// The path variables set in the process environment that a secure program ignores.
pub fn ignored_variables(src: &dyn ConfigSources) -> Vec<&'static str> {
    PATH_VARIABLES.iter().copied().filter(|k| src.env(k).is_some_and(|v| !v.is_empty())).collect()
}

/// Runs `f` with the file-system IDs of the calling thread set to the real user and group IDs in
/// a secure program (Linux `setfsuid`/`setfsgid`: this thread only, restored afterwards, also on
/// unwinding). In any other program `f` just runs.
pub fn as_caller<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(libc::uid_t, libc::gid_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: plain system calls on this thread's credentials.
            unsafe {
                libc::setfsgid(self.1);
                libc::setfsuid(self.0);
            }
        }
    }
    if !at_secure() {
        return f();
    }
    // SAFETY: as above; each returns the previous value, which the guard restores.
    let _restore = unsafe {
        let gid = libc::setfsgid(libc::getgid()) as libc::gid_t;
        let uid = libc::setfsuid(libc::getuid()) as libc::uid_t;
        Restore(uid, gid)
    };
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ConfigSources};
    use std::collections::HashMap;
    use std::path::PathBuf;

    struct Fake {
        env: HashMap<String, String>,
        pid1: Vec<u8>,
    }
    impl ConfigSources for Fake {
        fn env(&self, key: &str) -> Option<String> {
            self.env.get(key).cloned()
        }
        fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
            (path == Path::new(PID1_ENVIRON)).then(|| self.pid1.clone())
        }
        fn exists(&self, _: &Path) -> bool {
            false
        }
        fn list_dir(&self, _: &Path) -> Option<Vec<String>> {
            None
        }
        fn env_names(&self) -> Vec<String> {
            self.env.keys().cloned().collect()
        }
    }

    #[test]
    fn a_secure_program_takes_no_region_path_from_its_environment() {
        let f = Fake {
            env: [("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/root/secret/x.cache"), ("CUDA_DEVICE_MEMORY_LIMIT", "1g")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            pid1: Vec::new(),
        };
        assert_eq!(Config::from_sources(&f).region_path, PathBuf::from("/root/secret/x.cache"));
        let c = Config::from_sources(&SecureSources(&f));
        assert_eq!(c.region_path, PathBuf::from(crate::config::DEFAULT_REGION_PATH));
        assert_eq!(c.memory_limit[0], 1 << 30, "limits still come from the environment");
        assert_eq!(ignored_variables(&f), vec![ENV_SHARED_CACHE]);
    }

    #[test]
    fn pid1_path_variables_are_ignored_too() {
        let f = Fake {
            env: HashMap::new(),
            pid1: b"CUDA_DEVICE_MEMORY_LIMIT=2g\0CUDA_DEVICE_MEMORY_SHARED_CACHE=/root/p.cache\0".to_vec(),
        };
        assert_eq!(Config::from_sources(&f).region_path, PathBuf::from("/root/p.cache"));
        let c = Config::from_sources(&SecureSources(&f));
        assert_eq!(c.region_path, PathBuf::from(crate::config::DEFAULT_REGION_PATH));
        assert_eq!(c.memory_limit[0], 2 << 30);
    }

    #[test]
    fn stripping_keeps_the_other_variables() {
        let s = strip_path_variables(b"A=1\0POD_UID=u\0B=2\0CONTAINER_VGPU_MOUNT=/x\0");
        assert_eq!(s, b"A=1\0B=2\0");
    }
}
