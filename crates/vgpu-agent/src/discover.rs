//! Finding the regions as HAMi's monitor does (`pkg/monitor/nvidia/cudevshr.go`,
//! docs/hami-contract.md §4.1): directories `<pod-uid>_<container>` under `$HOOK_PATH/containers`
//! (symlinks and other non-directories are not entered), and in each the first `*.cache` file in
//! name order whose name does not contain `libvgpu.so`; more than two entries that end in `.cache`
//! or contain `libvgpu.so` is an error ("cache num not matched").
//!
//! The region chosen for a directory is remembered, so a steady node costs one directory listing
//! per pass; it is looked for again when it can no longer be opened.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use vgpu_core::noderegion::{Skip, SkipReason};

/// One container directory.
#[derive(Clone, Debug)]
pub struct Dir {
    pub name: String,
    pub pod_uid: String,
    pub container: String,
    pub path: PathBuf,
}

/// What a directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    Region(PathBuf),
    /// Empty, or no `*.cache` yet: no process of the container has used the GPU.
    Nothing,
    Unusable(Skip),
}

pub struct Discovery {
    containers: PathBuf,
    chosen: HashMap<String, String>,
}

/// `<pod-uid>_<container>` split at the first `_`, both parts non-empty.
pub fn split_name(n: &str) -> Option<(&str, &str)> {
    n.split_once('_').filter(|(a, b)| !a.is_empty() && !b.is_empty())
}

impl Discovery {
    pub fn new(hook_path: &Path) -> Discovery {
        Discovery { containers: hook_path.join("containers"), chosen: HashMap::new() }
    }

    pub fn containers_dir(&self) -> &Path {
        &self.containers
    }

    /// The container directories, sorted by name; `Err` when the parent cannot be listed.
    pub fn dirs(&mut self) -> std::io::Result<Vec<Dir>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.containers)? {
            let Ok(e) = e else { continue };
            // DirEntry::file_type does not follow a symlink: a linked "directory" is not entered.
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((pod, ctr)) = split_name(&name) else {
                crate::log::once(&format!("dir {name}"), Some("skipped: name is not <podUID>_<container>"));
                continue;
            };
            out.push(Dir { pod_uid: pod.into(), container: ctr.into(), path: e.path(), name });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        let live: std::collections::HashSet<&str> = out.iter().map(|d| d.name.as_str()).collect();
        self.chosen.retain(|k, _| live.contains(k.as_str()));
        Ok(out)
    }

    /// The region file of `dir` (remembered from an earlier pass, else looked for).
    pub fn region_of(&mut self, dir: &Dir) -> Found {
        if let Some(f) = self.chosen.get(&dir.name) {
            return Found::Region(dir.path.join(f));
        }
        let found = look(&dir.path);
        if let Found::Region(p) = &found
            && let Some(f) = p.file_name()
        {
            self.chosen.insert(dir.name.clone(), f.to_string_lossy().into_owned());
        }
        found
    }

    /// The remembered file could not be used: look again next time.
    pub fn forget(&mut self, dir: &Dir) {
        self.chosen.remove(&dir.name);
    }
}

fn look(dir: &Path) -> Found {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
        Err(e) => {
            let reason = if e.kind() == std::io::ErrorKind::PermissionDenied {
                SkipReason::PermissionDenied
            } else {
                SkipReason::Io
            };
            return Found::Unusable(Skip::new(reason, format!("cannot list: {e}")));
        }
    };
    names.sort();
    let matched = names.iter().filter(|n| n.contains("libvgpu.so") || n.ends_with(".cache")).count();
    if matched > 2 {
        return Found::Unusable(Skip::new(
            SkipReason::UnknownLayout,
            format!("cache num not matched ({matched} *.cache / libvgpu.so entries)"),
        ));
    }
    match names.iter().find(|n| n.ends_with(".cache") && !n.contains("libvgpu.so")) {
        Some(n) => Found::Region(dir.join(n)),
        None => Found::Nothing,
    }
}

/// Modification time of a directory (not following a symlink).
pub fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_follows_the_monitor() {
        let root = std::env::temp_dir().join(format!("agent-disc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let c = root.join("containers");
        for d in ["p1_a", "p2_b", "p3_c", "p4_d", "bad", "_x"] {
            std::fs::create_dir_all(c.join(d)).unwrap();
        }
        std::fs::write(c.join("p1_a/z.txt"), b"").unwrap();
        std::fs::write(c.join("p1_a/b.cache"), b"").unwrap();
        std::fs::write(c.join("p1_a/libvgpu.so"), b"").unwrap();
        std::fs::write(c.join("p2_b/libvgpu.so.cache"), b"").unwrap();
        std::fs::write(c.join("p2_b/gpu.samples"), b"").unwrap();
        for f in ["a.cache", "b.cache", "c.cache"] {
            std::fs::write(c.join("p3_c").join(f), b"").unwrap();
        }
        std::os::unix::fs::symlink(c.join("p4_d"), c.join("p5_link")).unwrap();
        std::fs::write(c.join("p6_file"), b"").unwrap();
        let mut d = Discovery::new(&root);
        let dirs = d.dirs().unwrap();
        let names: Vec<&str> = dirs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["p1_a", "p2_b", "p3_c", "p4_d"]);
        assert_eq!(d.region_of(&dirs[0]), Found::Region(c.join("p1_a/b.cache")));
        assert_eq!(d.region_of(&dirs[1]), Found::Nothing);
        assert!(matches!(d.region_of(&dirs[2]), Found::Unusable(s) if s.detail.contains("cache num not matched")));
        assert_eq!(d.region_of(&dirs[3]), Found::Nothing);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
