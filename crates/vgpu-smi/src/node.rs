//! `--node [DIR]`: every container directory under the hook path, as HAMi's monitor walks it
//! (docs/hami-contract.md §4.1): `<DIR>/containers/<podUID>_<container>/*.cache` (names containing
//! `libvgpu.so` are not regions). Every entry is reported, the bad ones with their reason.

use crate::snapshot::{self, PidView, Snapshot};
use std::path::{Path, PathBuf};

/// One region file (or a directory/file that could not be one) found on the node.
#[derive(Debug)]
pub struct Entry {
    pub pod_uid: Option<String>,
    pub container: Option<String>,
    /// The region file, or the directory itself when it holds none.
    pub path: PathBuf,
    pub result: Result<Snapshot, snapshot::Unusable>,
}

/// Default root: `$HOOK_PATH` (the monitor's variable, `<gpuHookPath>/vgpu`), else `/usr/local/vgpu`.
pub fn default_root() -> PathBuf {
    match std::env::var_os("HOOK_PATH").filter(|v| !v.is_empty()) {
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(vgpu_core::config::HOOK_DIR),
    }
}

fn bad(dir_name: &str, path: PathBuf, why: impl Into<String>) -> Entry {
    let (pod_uid, container) = split_name(dir_name);
    Entry { pod_uid, container, path, result: Err(snapshot::Unusable(why.into())) }
}

fn split_name(n: &str) -> (Option<String>, Option<String>) {
    match n.split_once('_') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => (Some(a.into()), Some(b.into())),
        _ => (None, None),
    }
}

/// Scans `<root>/containers`. `Err` only when that directory itself cannot be listed.
pub fn scan(root: &Path) -> Result<Vec<Entry>, String> {
    let containers = root.join("containers");
    let rd = std::fs::read_dir(&containers).map_err(|e| format!("{}: {e}", containers.display()))?;
    let mut names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let dir = containers.join(&name);
        let is_dir = std::fs::metadata(&dir).map(|m| m.is_dir()).unwrap_or(false);
        if !is_dir {
            out.push(bad(&name, dir, "not a directory"));
            continue;
        }
        if split_name(&name).0.is_none() {
            out.push(bad(&name, dir, "name is not <podUID>_<container>"));
            continue;
        }
        let files = match std::fs::read_dir(&dir) {
            Ok(rd) => {
                let mut v: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                v.sort();
                v
            }
            Err(e) => {
                out.push(bad(&name, dir, format!("cannot list: {e}")));
                continue;
            }
        };
        let caches: Vec<&String> =
            files.iter().filter(|f| f.ends_with(".cache") && !f.contains("libvgpu.so")).collect();
        if caches.is_empty() {
            out.push(bad(&name, dir, "no *.cache file (no process of the container has used the GPU yet)"));
            continue;
        }
        let (pod_uid, container) = split_name(&name);
        for c in caches {
            let path = dir.join(c);
            let result = snapshot::read(&path, PidView::Host);
            out.push(Entry { pod_uid: pod_uid.clone(), container: container.clone(), path, result });
        }
    }
    Ok(out)
}
