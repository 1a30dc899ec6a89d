//! Where the region file is when `CUDA_DEVICE_MEMORY_SHARED_CACHE` does not say
//! (the KAI Scheduler channel, docs/deploy.md §8; discovery for a non-root `env -i` shell).
//!
//! Order (the first that applies wins; see docs/configuration.md):
//! 1. `CUDA_DEVICE_MEMORY_SHARED_CACHE` from the process env, else from `/proc/1/environ`
//!    (config.rs decides which source is the origin).
//! 2. KAI: `POD_UID` and `CONTAINER_NAME` both set (same sources) and
//!    `${CONTAINER_VGPU_MOUNT:-/usr/local/vgpu}/containers/` exists:
//!    `<mount>/containers/<POD_UID>_<CONTAINER_NAME>/usage.cache`. The library creates the
//!    per-container directory itself ([`ensure_kai_dir`], mode 0777 like HAMi's plugin makes it,
//!    so processes of any UID in the container can create and open the region).
//! 3. Discovery, only when nothing above applies and `/tmp/cudevshr.cache` does not exist, over the
//!    directories the contract can mount the region in: the directory of each `libvgpu*` entry of
//!    `/etc/ld.so.preload` (HAMi's plugin mounts the container's cache directory at `<H>/vgpu`, where
//!    the library is, so a non-default hook path is found), then `/usr/local/vgpu`. In each: exactly
//!    one `*.cache` file (name without `libvgpu.so`) is the region; otherwise exactly one KAI
//!    directory `containers/<pod>_<ctr>/usage.cache` (narrowed to this pod's UID from
//!    `/proc/self/cgroup` when several exist) is.
//! 4. `/tmp/cudevshr.cache`.

use crate::sources::{ConfigSources, DEFAULT_REGION_PATH, HOOK_DIR};
use std::path::{Path, PathBuf};

pub const ENV_POD_UID: &str = "POD_UID";
pub const ENV_CONTAINER_NAME: &str = "CONTAINER_NAME";
pub const ENV_VGPU_MOUNT: &str = "CONTAINER_VGPU_MOUNT";
/// File name of the region in a KAI per-container directory.
pub const KAI_FILE: &str = "usage.cache";
pub const PRELOAD_FILE: &str = "/etc/ld.so.preload";
pub const SELF_CGROUP: &str = "/proc/self/cgroup";

/// A usable path component: non-empty, no `/`, not `.`/`..`, no NUL.
fn component_ok(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')
}

/// The KAI region path for these values, `None` when one is unusable or `<mount>/containers` is
/// absent (a pod that merely exposes `POD_UID` must not get a region in a directory nobody reads).
pub fn kai_path(src: &dyn ConfigSources, mount: Option<&str>, pod_uid: &str, container: &str) -> Option<PathBuf> {
    let (pod_uid, container) = (pod_uid.trim(), container.trim());
    if !component_ok(pod_uid) || !component_ok(container) {
        return None;
    }
    let mount = mount.map(str::trim).filter(|m| !m.is_empty()).unwrap_or(HOOK_DIR);
    let containers = Path::new(mount).join("containers");
    if !src.exists(&containers) {
        return None;
    }
    Some(containers.join(format!("{pod_uid}_{container}")).join(KAI_FILE))
}

/// Directories named by `libvgpu*` entries of an `ld.so.preload` text (whitespace or `:` separated).
pub fn preload_dirs(content: &[u8]) -> Vec<PathBuf> {
    let text = String::from_utf8_lossy(content);
    let mut out: Vec<PathBuf> = Vec::new();
    for entry in text.lines().filter(|l| !l.trim_start().starts_with('#')).flat_map(|l| l.split([' ', '\t', ':'])) {
        let p = Path::new(entry.trim());
        let is_lib = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libvgpu"));
        if let (true, Some(dir)) = (is_lib && p.is_absolute(), p.parent())
            && !out.iter().any(|d| d == dir)
        {
            out.push(dir.to_path_buf());
        }
    }
    out
}

/// The pod UID in a `/proc/self/cgroup` text (`…pod<uid>…`, `_` of the systemd driver read as `-`).
pub fn pod_uid_from_cgroup(content: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(content);
    for (i, _) in text.match_indices("pod") {
        let rest = &text[i + 3..];
        let uid: String = rest.chars().take(36).map(|c| if c == '_' { '-' } else { c }).collect();
        let shape = uid.len() == 36
            && uid.chars().enumerate().all(
                |(k, c)| {
                    if [8, 13, 18, 23].contains(&k) { c == '-' } else { c.is_ascii_hexdigit() }
                },
            );
        if shape {
            return Some(uid.to_ascii_lowercase());
        }
    }
    None
}

/// The single region file in `dir`, if exactly one `*.cache` (not `libvgpu.so*`) is there.
fn single_cache(src: &dyn ConfigSources, dir: &Path) -> Option<PathBuf> {
    let names = src.list_dir(dir)?;
    let caches: Vec<&String> = names.iter().filter(|n| n.ends_with(".cache") && !n.contains("libvgpu.so")).collect();
    (caches.len() == 1).then(|| dir.join(caches[0]))
}

/// The single KAI region under `<dir>/containers/` (this pod's when the cgroup names it).
fn single_kai(src: &dyn ConfigSources, dir: &Path, pod_uid: Option<&str>) -> Option<PathBuf> {
    let containers = dir.join("containers");
    let subdirs = src.list_subdirs(&containers)?;
    let mut found: Vec<(String, PathBuf)> = subdirs
        .into_iter()
        .filter(|n| n.split_once('_').is_some_and(|(a, b)| !a.is_empty() && !b.is_empty()))
        .map(|n| {
            let p = containers.join(&n).join(KAI_FILE);
            (n, p)
        })
        .filter(|(_, p)| src.exists(p))
        .collect();
    if found.len() > 1
        && let Some(uid) = pod_uid
    {
        found.retain(|(n, _)| n.to_ascii_lowercase().starts_with(&format!("{uid}_")));
    }
    (found.len() == 1).then(|| found.remove(0).1)
}

/// Step 3 of the order: the discovered region, if exactly one place answers.
pub fn discover(src: &dyn ConfigSources) -> Option<PathBuf> {
    if src.exists(Path::new(DEFAULT_REGION_PATH)) {
        return None;
    }
    let mut dirs = src.read_file(Path::new(PRELOAD_FILE)).map(|c| preload_dirs(&c)).unwrap_or_default();
    if !dirs.iter().any(|d| d == Path::new(HOOK_DIR)) {
        dirs.push(PathBuf::from(HOOK_DIR));
    }
    for d in &dirs {
        if let Some(p) = single_cache(src, d) {
            return Some(p);
        }
    }
    let uid = src.read_file(Path::new(SELF_CGROUP)).and_then(|c| pod_uid_from_cgroup(&c));
    dirs.iter().find_map(|d| single_kai(src, d, uid.as_deref()))
}

/// Creates the per-container directory of a KAI region path (`…/containers/<pod>_<ctr>/usage.cache`)
/// if it is missing, mode 0777 whatever the umask. Anything else is left alone. Never fails loudly:
/// the region open that follows reports a real problem.
pub fn ensure_kai_dir(region: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if region.file_name().is_none_or(|n| n != KAI_FILE) {
        return Ok(());
    }
    let Some(dir) = region.parent() else { return Ok(()) };
    if dir.parent().and_then(Path::file_name).is_none_or(|n| n != "containers") || dir.exists() {
        return Ok(());
    }
    match std::fs::DirBuilder::new().mode(0o777).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[derive(Default)]
    struct Fake {
        env: HashMap<String, String>,
        files: HashMap<PathBuf, Vec<u8>>,
        dirs: HashMap<PathBuf, Vec<String>>,
        exists: HashSet<PathBuf>,
    }
    impl ConfigSources for Fake {
        fn env(&self, k: &str) -> Option<String> {
            self.env.get(k).cloned()
        }
        fn read_file(&self, p: &Path) -> Option<Vec<u8>> {
            self.files.get(p).cloned()
        }
        fn exists(&self, p: &Path) -> bool {
            self.exists.contains(p) || self.files.contains_key(p) || self.dirs.contains_key(p)
        }
        fn list_dir(&self, p: &Path) -> Option<Vec<String>> {
            self.dirs.get(p).cloned()
        }
        fn list_subdirs(&self, p: &Path) -> Option<Vec<String>> {
            self.dirs.get(p).cloned()
        }
    }

    #[test]
    fn kai_path_rules() {
        let mut f = Fake::default();
        assert_eq!(kai_path(&f, None, "u1", "c"), None, "no containers dir: not KAI");
        f.exists.insert("/usr/local/vgpu/containers".into());
        f.exists.insert("/mnt/v/containers".into());
        assert_eq!(kai_path(&f, None, "u1", "c"), Some("/usr/local/vgpu/containers/u1_c/usage.cache".into()));
        assert_eq!(kai_path(&f, Some(""), "u1", "c"), Some("/usr/local/vgpu/containers/u1_c/usage.cache".into()));
        assert_eq!(kai_path(&f, Some("/mnt/v"), "u1", "c"), Some("/mnt/v/containers/u1_c/usage.cache".into()));
        for (u, c) in [("", "c"), ("u", ""), ("../x", "c"), ("u", "a/b"), ("..", "c")] {
            assert_eq!(kai_path(&f, None, u, c), None, "{u:?} {c:?}");
        }
    }

    #[test]
    fn config_uses_kai_path_only_without_explicit_cache() {
        use crate::config::{Config, ConfigOrigin};
        let mut f = Fake::default();
        for (k, v) in [("CUDA_DEVICE_MEMORY_LIMIT", "2g"), ("POD_UID", "u-1"), ("CONTAINER_NAME", "main")] {
            f.env.insert(k.into(), v.into());
        }
        // No <mount>/containers: as today.
        assert_eq!(Config::from_sources(&f).region_path, PathBuf::from(DEFAULT_REGION_PATH));
        f.exists.insert("/usr/local/vgpu/containers".into());
        let c = Config::from_sources(&f);
        assert_eq!(c.origin, ConfigOrigin::ProcessEnv);
        assert_eq!(c.region_path, PathBuf::from("/usr/local/vgpu/containers/u-1_main/usage.cache"));
        assert_eq!(c.memory_limit[0], 2 << 30);
        assert_eq!(c.sm_limit[0], 100);
        f.env.insert(ENV_VGPU_MOUNT.into(), "/kai".into());
        assert_eq!(Config::from_sources(&f).region_path, PathBuf::from(DEFAULT_REGION_PATH), "/kai/containers absent");
        f.exists.insert("/kai/containers".into());
        assert_eq!(Config::from_sources(&f).region_path, PathBuf::from("/kai/containers/u-1_main/usage.cache"));
        // The explicit variable wins.
        f.env.insert("CUDA_DEVICE_MEMORY_SHARED_CACHE".into(), "/x/y.cache".into());
        assert_eq!(Config::from_sources(&f).region_path, PathBuf::from("/x/y.cache"));
        // Only one of the two ids: as today.
        f.env.remove("CUDA_DEVICE_MEMORY_SHARED_CACHE");
        f.env.remove("CONTAINER_NAME");
        assert_eq!(Config::from_sources(&f).region_path, PathBuf::from(DEFAULT_REGION_PATH));
    }

    #[test]
    fn preload_and_cgroup_parsing() {
        assert_eq!(
            preload_dirs(b"# x\n/opt/h/vgpu/libvgpu.so /usr/lib/libfoo.so:/usr/local/vgpu/libvgpu.so.v2\nlibvgpu.so\n"),
            vec![PathBuf::from("/opt/h/vgpu"), PathBuf::from("/usr/local/vgpu")]
        );
        let v2 = b"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8d5c2a1e_0b7f_4c3d_9e21_6f0a1b2c3d4e.slice/cri-containerd-ab.scope\n";
        assert_eq!(pod_uid_from_cgroup(v2).as_deref(), Some("8d5c2a1e-0b7f-4c3d-9e21-6f0a1b2c3d4e"));
        let v1 = b"12:memory:/kubepods/burstable/pod8D5C2A1E-0b7f-4c3d-9e21-6f0a1b2c3d4e/abc\n";
        assert_eq!(pod_uid_from_cgroup(v1).as_deref(), Some("8d5c2a1e-0b7f-4c3d-9e21-6f0a1b2c3d4e"));
        assert_eq!(pod_uid_from_cgroup(b"0::/user.slice/podman-1.scope\n"), None);
    }

    #[test]
    fn discovery_order() {
        let mut f = Fake::default();
        assert_eq!(discover(&f), None);
        // Non-default hook path named by ld.so.preload wins over /usr/local/vgpu.
        f.files.insert(PRELOAD_FILE.into(), b"/opt/h/vgpu/libvgpu.so\n".to_vec());
        f.dirs.insert("/opt/h/vgpu".into(), vec!["libvgpu.so".into(), "a1.cache".into()]);
        f.dirs.insert("/usr/local/vgpu".into(), vec!["b2.cache".into()]);
        assert_eq!(discover(&f), Some("/opt/h/vgpu/a1.cache".into()));
        // Two caches there: ambiguous, the next directory answers.
        f.dirs.insert("/opt/h/vgpu".into(), vec!["a1.cache".into(), "a2.cache".into()]);
        assert_eq!(discover(&f), Some("/usr/local/vgpu/b2.cache".into()));
        // /tmp/cudevshr.cache exists: no discovery (today's rule).
        f.exists.insert(DEFAULT_REGION_PATH.into());
        assert_eq!(discover(&f), None);
    }

    #[test]
    fn discovery_of_kai_dirs_narrowed_by_cgroup() {
        let mut f = Fake::default();
        f.dirs.insert("/usr/local/vgpu".into(), vec![]);
        f.dirs.insert("/usr/local/vgpu/containers".into(), vec!["p1_a".into(), "p2_b".into(), "junk".into()]);
        f.exists.insert("/usr/local/vgpu/containers/p1_a/usage.cache".into());
        assert_eq!(discover(&f), Some("/usr/local/vgpu/containers/p1_a/usage.cache".into()));
        f.exists.insert("/usr/local/vgpu/containers/p2_b/usage.cache".into());
        assert_eq!(discover(&f), None, "two pods: ambiguous without a cgroup");
        let uid = "8d5c2a1e-0b7f-4c3d-9e21-6f0a1b2c3d4e";
        f.dirs.insert("/usr/local/vgpu/containers".into(), vec![format!("{uid}_a"), "p2_b".into()]);
        f.exists.insert(format!("/usr/local/vgpu/containers/{uid}_a/usage.cache").into());
        f.files.insert(SELF_CGROUP.into(), format!("0::/kubepods/pod{uid}/x\n").into_bytes());
        assert_eq!(discover(&f), Some(format!("/usr/local/vgpu/containers/{uid}_a/usage.cache").into()));
    }

    #[test]
    fn kai_dir_created_world_writable() {
        use std::os::unix::fs::PermissionsExt;
        let base = crate::testutil::temp_path("kai-dir");
        let containers = base.join("containers");
        std::fs::create_dir_all(&containers).unwrap();
        let region = containers.join("u_c").join(KAI_FILE);
        let old = unsafe { libc::umask(0o077) };
        let r = ensure_kai_dir(&region);
        unsafe { libc::umask(old) };
        r.unwrap();
        let mode = std::fs::metadata(region.parent().unwrap()).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777);
        ensure_kai_dir(&region).unwrap(); // idempotent
        // Not a KAI shape: nothing created.
        let other = base.join("x").join("usage.cache");
        ensure_kai_dir(&other).unwrap();
        assert!(!base.join("x").exists());
    }
}
