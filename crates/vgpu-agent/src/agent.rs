//! The agent's state and its periodic pass: discovery, directory GC, and the feedback stores.

use crate::discover::{Dir, Discovery, Found};
use crate::feedback::{self, Control, Field};
use crate::kube::Pod;
use crate::log;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use vgpu_core::noderegion::{self, Access, Depth, Layout, RegionFd, Skip, SkipReason};

/// The last pod list of this node.
#[derive(Default)]
pub struct PodState {
    /// Pods by UID from the last successful list, and when it was taken.
    pub pods: Option<(HashMap<String, Pod>, SystemTime)>,
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
    pub pods: Mutex<PodState>,
    pub stats: Mutex<Stats>,
}

/// One container's region, opened and summarised.
pub struct Opened {
    pub path: PathBuf,
    pub fd: RegionFd,
    pub layout: Layout,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Agent {
    pub fn new(hook_path: PathBuf, resync: Duration, feedback: bool) -> Agent {
        Agent {
            discovery: Mutex::new(Discovery::new(&hook_path)),
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

    /// Opens and reads one directory's region; a file that cannot be used is counted and
    /// logged once (per directory and reason), and `Err` carries the reason.
    pub fn open(&self, dir: &Dir, access: Access, depth: Depth, scratch: &mut Vec<u8>) -> Result<Option<Opened>, Skip> {
        let found = lock(&self.discovery).region_of(dir);
        let path = match found {
            Found::Region(p) => p,
            Found::Nothing => return Ok(None),
            Found::Unusable(s) => {
                self.note_skip(dir, &s, access);
                return Err(s);
            }
        };
        let r = noderegion::open(&path, access).and_then(|fd| {
            let layout = fd.layout()?;
            let summary = noderegion::summarise(&fd, &layout, depth, scratch)?;
            Ok(Opened { path: path.clone(), fd, layout, summary })
        });
        match r {
            Ok(o) => {
                log::once(&log_key(dir, access), None);
                Ok(Some(o))
            }
            Err(s) => {
                // Look for the file again next time (replaced, removed, …).
                lock(&self.discovery).forget(dir);
                if s.reason == SkipReason::Missing {
                    return Ok(None);
                }
                self.note_skip(dir, &s, access);
                Err(s)
            }
        }
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

    /// Reads every container's control words (each file closed again: no descriptor is held per
    /// container), decides, then re-opens only the files that get a store, checking they are still
    /// the files read.
    fn feedback_pass(&self, dirs: &[Dir], scratch: &mut Vec<u8>) {
        let mut read = Vec::new();
        let mut controls = Vec::new();
        for d in dirs {
            let o = match self.open(d, Access::ReadWrite, Depth::Control, scratch) {
                // Not writable by us: it still counts in the census (its stores will be refused).
                Err(s) if s.reason == SkipReason::PermissionDenied => {
                    self.open(d, Access::Read, Depth::Control, scratch).ok().flatten()
                }
                r => r.ok().flatten(),
            };
            if let Some(o) = o {
                let s = o.summary;
                controls.push(Control {
                    priority: s.priority,
                    recent_kernel: s.recent_kernel,
                    utilization_switch: s.utilization_switch,
                    uuids: s.uuids,
                });
                read.push((d, o.path, o.fd.identity(), o.layout));
            }
        }
        let mut stores = feedback::observe(&mut controls);
        // One open per container written; a container's stores keep their order (stable sort).
        stores.sort_by_key(|s| s.container);
        let mut i = 0;
        while i < stores.len() {
            let k = stores[i].container;
            let n = stores[i..].iter().take_while(|s| s.container == k).count();
            let (d, path, identity, layout) = &read[k];
            let fd = match noderegion::open(path, Access::ReadWrite) {
                Ok(fd) if fd.identity() == *identity => fd,
                Ok(_) => {
                    self.note_skip(
                        d,
                        &Skip::new(SkipReason::Missing, "replaced since read: not written"),
                        Access::ReadWrite,
                    );
                    i += n;
                    continue;
                }
                Err(s) => {
                    self.note_skip(d, &s, Access::ReadWrite);
                    i += n;
                    continue;
                }
            };
            for st in &stores[i..i + n] {
                let off = match st.field {
                    Field::RecentKernel => layout.recent_kernel,
                    Field::UtilizationSwitch => layout.utilization_switch,
                };
                match fd.store_i32(off as u64, st.value) {
                    Ok(()) => {
                        *lock(&self.stats).stores.entry(st.field).or_insert(0) += 1;
                        log::info(5, &format!("{}: {} = {}", d.name, st.field.label(), st.value));
                    }
                    Err(s) => self.note_skip(d, &s, Access::ReadWrite),
                }
            }
            i += n;
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
