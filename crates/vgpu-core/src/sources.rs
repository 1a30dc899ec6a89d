//! Where the configuration comes from: the machine behind an injectable trait ([`ConfigSources`],
//! [`SystemSources`] for the real one), and the fixed paths of the HAMi contract. A leaf: both
//! `config` (what the values mean) and `regionpath` (where the region is) read through it.

use std::path::Path;

pub const DEFAULT_REGION_PATH: &str = "/tmp/cudevshr.cache";
pub const HOOK_DIR: &str = "/usr/local/vgpu";
pub const PID1_ENVIRON: &str = "/proc/1/environ";
pub const OVERRIDE_ENV_PATH: &str = "/overrideEnv";

/// Injectable access to the machine, so tests do not depend on it.
pub trait ConfigSources {
    /// A process environment variable (lossy UTF-8), `None` if unset.
    fn env(&self, key: &str) -> Option<String>;
    /// Whole file contents, `None` if unreadable.
    fn read_file(&self, path: &Path) -> Option<Vec<u8>>;
    fn exists(&self, path: &Path) -> bool;
    /// Names of the regular files in a directory, `None` if unreadable.
    fn list_dir(&self, path: &Path) -> Option<Vec<String>>;
    /// Names of the subdirectories of a directory (regionpath.rs's KAI discovery); none by default.
    fn list_subdirs(&self, _path: &Path) -> Option<Vec<String>> {
        None
    }

    /// Names of all process environment variables (for the out-of-range index check).
    fn env_names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The real machine.
pub struct SystemSources;

impl ConfigSources for SystemSources {
    fn env(&self, key: &str) -> Option<String> {
        std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
    }
    fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        std::fs::read(path).ok()
    }
    fn exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }
    fn env_names(&self) -> Vec<String> {
        std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect()
    }
    fn list_dir(&self, path: &Path) -> Option<Vec<String>> {
        let rd = std::fs::read_dir(path).ok()?;
        let mut out = Vec::new();
        for e in rd.flatten() {
            // metadata() follows symlinks: a link to a regular file counts as a file.
            if std::fs::metadata(e.path()).map(|m| m.is_file()).unwrap_or(false) {
                out.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        Some(out)
    }
    fn list_subdirs(&self, path: &Path) -> Option<Vec<String>> {
        system_subdirs(path)
    }
}

/// Subdirectory names of `dir` on the real machine (symlinks to directories count).
pub fn system_subdirs(dir: &Path) -> Option<Vec<String>> {
    let rd = std::fs::read_dir(dir).ok()?;
    Some(
        rd.flatten()
            .filter(|e| std::fs::metadata(e.path()).map(|m| m.is_dir()).unwrap_or(false))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
    )
}
