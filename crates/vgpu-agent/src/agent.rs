//! The agent's state and its periodic pass: discovery, directory GC, and the feedback stores.

use crate::discover::{Dir, Discovery, Found};
use crate::feedback::{self, Control, Field};
use crate::kube::Pod;
use crate::log;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use vgpu_core::noderegion::{self, Access, Depth, Layout, RegionFd, Skip, SkipReason};

/// The last pod list of this node.
#[derive(Default)]
pub struct PodState {
    /// Pods by UID from the last successful list, and when it was taken.
    pub pods: Option<(Arc<HashMap<String, Pod>>, SystemTime)>,
    /// The last attempt succeeded.
    pub up: bool,
}

/// Counters the agent exports about itself.
#[derive(Default)]
pub struct Stats {
    pub passes: u64,
    pub stores: BTreeMap<Field, u64>,
    pub skips: BTreeMap<SkipReason, u64>,
    pub removed_dirs: u64,
    pub pod_list_errors: u64,
}

pub struct Agent {
    pub hook_path: PathBuf,
    pub resync: Duration,
    pub feedback: bool,
    pub discovery: Mutex<Discovery>,
    /// Open region files by directory name.
    files: Mutex<HashMap<String, Arc<RegionFile>>>,
    /// At most this many descriptors are kept (below RLIMIT_NOFILE); beyond, files are opened per use.
    max_cached: usize,
    pub pods: Mutex<PodState>,
    pub stats: Mutex<Stats>,
}

/// A region file kept open between passes (one descriptor per container, closed when its
/// directory goes or the file is replaced).
pub struct RegionFile {
    pub fd: RegionFd,
    pub layout: Layout,
    /// Opened for writing (the feedback's stores).
    pub writable: bool,
}

/// One container's region, read.
pub struct Opened {
    pub file: Arc<RegionFile>,
    pub summary: noderegion::Summary,
}

/// "Said once" key of a directory's region problem; writing has its own (a file may be readable
/// but not writable: the scrape's success must not clear the feedback's warning).
fn log_key(dir: &Dir, access: Access) -> String {
    match access {
        Access::Read => format!("dir {}", dir.name),
        Access::ReadWrite => format!("dir {} (write)", dir.name),
    }
}

/// Descriptors the agent may keep: the soft RLIMIT_NOFILE raised to the hard limit, less a reserve
/// for the server, the API client and the per-use opens.
fn descriptor_budget() -> usize {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 512;
    }
    if rl.rlim_cur < rl.rlim_max {
        let raised = libc::rlimit { rlim_cur: rl.rlim_max, rlim_max: rl.rlim_max };
        // SAFETY: valid pointer; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            rl.rlim_cur = rl.rlim_max;
        }
    }
    (rl.rlim_cur.min(1 << 20) as usize).saturating_sub(128)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Agent {
    pub fn new(hook_path: PathBuf, resync: Duration, feedback: bool) -> Agent {
        Agent {
            discovery: Mutex::new(Discovery::new(&hook_path)),
            files: Mutex::new(HashMap::new()),
            max_cached: descriptor_budget(),
            hook_path,
            resync,
            feedback,
            pods: Mutex::new(PodState::default()),
            stats: Mutex::new(Stats::default()),
        }
    }

    pub fn count_skip(&self, reason: SkipReason) {
        *lock(&self.stats).skips.entry(reason).or_insert(0) += 1;
    }

    /// The container directories now (logs once when the parent is missing).
    pub fn dirs(&self) -> Vec<Dir> {
        let mut d = lock(&self.discovery);
        match d.dirs() {
            Ok(v) => {
                log::once("containers", None);
                let live: std::collections::HashSet<&str> = v.iter().map(|d| d.name.as_str()).collect();
                lock(&self.files).retain(|k, _| live.contains(k.as_str()));
                v
            }
            Err(e) => {
                log::once(
                    "containers",
                    Some(&format!("cannot list {}: {e} (waiting for it)", d.containers_dir().display())),
                );
                Vec::new()
            }
        }
    }

    /// Reads one directory's region (through its cached descriptor, else opened now); a file
    /// that cannot be used is counted and logged once (per directory and reason), and `Err`
    /// carries the reason. `access` only selects the "said once" key: the descriptor is opened
    /// for writing whenever the feedback is on and the file lets us.
    pub fn open(&self, dir: &Dir, access: Access, depth: Depth, scratch: &mut Vec<u8>) -> Result<Option<Opened>, Skip> {
        let r = match self.cached(dir) {
            Some(file) => Ok(file),
            None => {
                let found = lock(&self.discovery).region_of(dir);
                match found {
                    Found::Region(p) => self.open_file(dir, p),
                    Found::Nothing => return Ok(None),
                    Found::Unusable(s) => {
                        self.note_skip(dir, &s, access);
                        return Err(s);
                    }
                }
            }
        };
        let r = r.and_then(|file| {
            let summary = noderegion::summarise(&file.fd, &file.layout, depth, scratch)?;
            Ok(Opened { file, summary })
        });
        match r {
            Ok(o) => {
                // A read-only file keeps its write warning (its stores keep failing).
                if access == Access::Read || o.file.writable {
                    log::once(&log_key(dir, access), None);
                }
                Ok(Some(o))
            }
            Err(s) => {
                // Look for the file again next time (replaced, removed, …).
                lock(&self.files).remove(&dir.name);
                lock(&self.discovery).forget(dir);
                if s.reason == SkipReason::Missing {
                    return Ok(None);
                }
                self.note_skip(dir, &s, access);
                Err(s)
            }
        }
    }

    /// The cached descriptor of `dir`'s region while it is still the file in place (not unlinked
    /// or replaced: a replacement leaves our inode with no links).
    fn cached(&self, dir: &Dir) -> Option<Arc<RegionFile>> {
        let f = lock(&self.files).get(&dir.name).cloned()?;
        match f.fd.links() {
            Ok(n) if n > 0 => Some(f),
            _ => {
                lock(&self.files).remove(&dir.name);
                lock(&self.discovery).forget(dir);
                None
            }
        }
    }

    fn open_file(&self, dir: &Dir, path: PathBuf) -> Result<Arc<RegionFile>, Skip> {
        let (fd, writable) = if self.feedback {
            match noderegion::open(&path, Access::ReadWrite) {
                Ok(fd) => (fd, true),
                // Readable only: it still counts in the census; its stores are refused.
                Err(s) if s.reason == SkipReason::PermissionDenied => (noderegion::open(&path, Access::Read)?, false),
                Err(s) => return Err(s),
            }
        } else {
            (noderegion::open(&path, Access::Read)?, false)
        };
        let layout = fd.layout()?;
        let file = Arc::new(RegionFile { fd, layout, writable });
        let mut files = lock(&self.files);
        if files.len() < self.max_cached {
            files.insert(dir.name.clone(), file.clone());
        }
        Ok(file)
    }

    fn note_skip(&self, dir: &Dir, s: &Skip, access: Access) {
        self.count_skip(s.reason);
        log::once(&log_key(dir, access), Some(&format!("region skipped: {}", s.detail)));
    }

    /// One tick: GC of dead pods' directories, then (unless disabled) the feedback stores.
    pub fn pass(&self, scratch: &mut Vec<u8>) {
        let dirs = self.dirs();
        let dirs = self.collect_garbage(dirs);
        if self.feedback {
            self.feedback_pass(&dirs, scratch);
        }
        lock(&self.stats).passes += 1;
    }

    /// Reads every container's control words, decides, and stores through the same descriptors.
    fn feedback_pass(&self, dirs: &[Dir], scratch: &mut Vec<u8>) {
        let mut read = Vec::new();
        let mut controls = Vec::new();
        for d in dirs {
            if let Ok(Some(o)) = self.open(d, Access::ReadWrite, Depth::Control, scratch) {
                let s = o.summary;
                controls.push(Control {
                    priority: s.priority,
                    recent_kernel: s.recent_kernel,
                    utilization_switch: s.utilization_switch,
                    uuids: s.uuids,
                });
                read.push((d, o.file));
            }
        }
        for st in feedback::observe(&mut controls) {
            let (d, file) = &read[st.container];
            let off = match st.field {
                Field::RecentKernel => file.layout.recent_kernel,
                Field::UtilizationSwitch => file.layout.utilization_switch,
            };
            let r = if file.writable {
                file.fd.store_i32(off as u64, st.value)
            } else {
                Err(Skip::new(SkipReason::PermissionDenied, "permission denied: not writable by the agent"))
            };
            match r {
                Ok(()) => {
                    *lock(&self.stats).stores.entry(st.field).or_insert(0) += 1;
                    log::info(5, &format!("{}: {} = {}", d.name, st.field.label(), st.value));
                }
                Err(s) => self.note_skip(d, &s, Access::ReadWrite),
            }
        }
    }

    /// Removes the directories of pods the API server says are gone (HAMi's `Update`): only with
    /// a successful pod list taken after the directory's last change, and only when that change is
    /// older than the resync interval. Returns the directories kept.
    fn collect_garbage(&self, dirs: Vec<Dir>) -> Vec<Dir> {
        let Some((pods, taken)) = lock(&self.pods).pods.clone() else { return dirs };
        let now = SystemTime::now();
        let mut kept = Vec::with_capacity(dirs.len());
        for d in dirs {
            let gone = !pods.contains_key(&d.pod_uid);
            let old = crate::discover::mtime(&d.path)
                .is_some_and(|m| m < taken && now.duration_since(m).is_ok_and(|age| age > self.resync));
            if gone && old {
                match std::fs::remove_dir_all(&d.path) {
                    Ok(()) => {
                        log::info(0, &format!("removed {} (pod {} is gone)", d.path.display(), d.pod_uid));
                        log::forget_prefix(&format!("dir {}", d.name));
                        lock(&self.stats).removed_dirs += 1;
                    }
                    Err(e) => {
                        log::once(&format!("dir {} gc", d.name), Some(&format!("cannot remove: {e}")));
                    }
                }
                continue;
            }
            kept.push(d);
        }
        kept
    }
}
