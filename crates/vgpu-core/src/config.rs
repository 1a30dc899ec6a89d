//! The environment contract (docs/hami-contract.md §1.3-§1.5), read once into a [`Config`].
//!
//! ## Where the configuration comes from (docs/known-failures.md #3)
//!
//! The limit variables are `CUDA_DEVICE_MEMORY_LIMIT[_i]`, `CUDA_DEVICE_SM_LIMIT[_i]` and
//! `CUDA_DEVICE_MEMORY_SHARED_CACHE` (set and non-empty counts as present).
//!
//! **Set but empty is unset**, for every variable (except `CUDA_VISIBLE_DEVICES`, whose empty
//! value CUDA itself reads as "no device"): an empty value in the process env takes PID 1's value
//! of the same variable, if it has one, else the default. So `CUDA_DEVICE_MEMORY_LIMIT=` in the
//! process that creates the region never makes the whole container unlimited.
//! `…_LIMIT_<i>` with an `<i>` that is not a device index 0..15 is ignored with a warning.
//!
//! 1. If the process env has any of them: the process env is used ([`ConfigOrigin::ProcessEnv`]).
//! 2. Otherwise (SSH sessions, `sudo`, `env -i`, supervisors that strip the env): if
//!    `/proc/1/environ` (the container's init, which carries the device plugin's env) is readable
//!    and has any of them, they come from there ([`ConfigOrigin::Pid1Environ`]). In that mode the
//!    other per-container variables set by HAMi (`CUDA_TASK_PRIORITY`,
//!    `GPU_CORE_UTILIZATION_POLICY`, `CUDA_OVERSUBSCRIBE`, `LIBCUDA_LOG_LEVEL`) also fall back to
//!    pid 1's value when the process env lacks them.
//! 3. Otherwise, if discovery finds a region ([`crate::regionpath::discover`]: the directories of
//!    `/etc/ld.so.preload`'s `libvgpu*` entries, then `/usr/local/vgpu/`, each holding exactly one
//!    `*.cache` file, else one KAI `containers/<pod>_<ctr>/usage.cache`), that file is the region
//!    and its limits are authoritative ([`ConfigOrigin::DiscoveredRegion`]; `memory_limit`/`sm_limit`
//!    stay "unlimited" here and the caller reads the region's).
//!
//! The region path: `CUDA_DEVICE_MEMORY_SHARED_CACHE` from the origin, else the KAI location
//! ([`crate::regionpath::kai_path`]), else the discovered file, else `/tmp/cudevshr.cache`.
//! 4. Otherwise defaults: `/tmp/cudevshr.cache`, no limits ([`ConfigOrigin::Defaults`]).
//!
//! ## Malformed values
//!
//! Never fatal. Each one produces a [`ConfigWarning`] (logged once by the caller) and is treated as
//! unset, **except** that a malformed memory or SM limit does not silently fall to "unlimited" when
//! another source has a valid value (fail closed where possible): the lookup order per device is
//! per-device variable, global variable, and — only when one of those was malformed and the
//! process env was the origin — the same two variables in `/proc/1/environ`. If no source yields a
//! valid value the device is unlimited and the warning says so.

use crate::limits::{LimitError, normalize_sm, parse_limit, parse_sm_limit};
use crate::region::MAX_DEVICES;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

// The sources and paths are the configuration's vocabulary (its callers name them through here).
pub use crate::sources::{
    ConfigSources, DEFAULT_REGION_PATH, HOOK_DIR, OVERRIDE_ENV_PATH, PID1_ENVIRON, SystemSources,
};

pub const ENV_MEMORY_LIMIT: &str = "CUDA_DEVICE_MEMORY_LIMIT";
pub const ENV_SM_LIMIT: &str = "CUDA_DEVICE_SM_LIMIT";
/// Burst ceiling (percent, ≥ the SM limit, ≤ 100); unset = the limit (no burst).
pub const ENV_SM_CEILING: &str = "CUDA_DEVICE_SM_CEILING";
pub const ENV_SHARED_CACHE: &str = "CUDA_DEVICE_MEMORY_SHARED_CACHE";
pub const ENV_TASK_PRIORITY: &str = "CUDA_TASK_PRIORITY";
pub const ENV_CORE_POLICY: &str = "GPU_CORE_UTILIZATION_POLICY";
pub const ENV_LOG_LEVEL: &str = "LIBCUDA_LOG_LEVEL";
pub const ENV_RECORD_KERNEL_INTERVAL: &str = "RECORD_KERNEL_INTERVAL";
pub const ENV_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
pub const ENV_OVERSUBSCRIBE: &str = "CUDA_OVERSUBSCRIBE";
pub const ENV_ACTIVE_OOM_KILLER: &str = "ACTIVE_OOM_KILLER";
/// `VGPU_HOST_PID_PROBE`: `1`/`true` switches the host-PID probe on (default off). The probe is
/// the last resort of host-PID resolution (the shim's `hostpid::probe`): while a device is active and
/// this process's host PID is still unknown, the watcher thread allocates a block of a size of its
/// own (4-66 MiB) in the application's primary context, holds it 350 ms for the memory correlator
/// to match, and frees it. It is memory the application never asked for (not charged to the
/// container: limit checks never refuse an allocation because of it), and on a real driver its
/// free waits for the device's queued work; so it runs only where asked for: two containers that
/// start the same workload in the same instant with contexts created out of the shim's sight.
/// Without it such processes stay unresolved until their allocations diverge, and the limit
/// applies to what was counted. Process env (empty = unset, as every variable); a malformed
/// value warns and leaves the probe off.
pub const ENV_HOST_PID_PROBE: &str = "VGPU_HOST_PID_PROBE";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorePolicy {
    /// Obey the monitor's `utilization_switch`.
    Default,
    /// Always enforce the SM limit.
    Force,
    /// Never enforce it.
    Disable,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VisibleDevice {
    Index(u32),
    /// `GPU-…`, `MIG-…` (possibly abbreviated; matched by prefix by whoever maps it).
    Uuid(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigOrigin {
    ProcessEnv,
    Pid1Environ,
    DiscoveredRegion,
    Defaults,
}

/// One malformed (or clamped) variable and what was done about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    pub variable: String,
    pub value: String,
    pub action: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}: {}", self.variable, self.value, self.action)
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes per device slot; 0 = unlimited.
    pub memory_limit: [u64; MAX_DEVICES],
    /// Percent per device slot, 1..=100 (100 = unlimited).
    pub sm_limit: [u64; MAX_DEVICES],
    /// Burst ceiling in percent per device slot; 0 = unset (the ceiling is the limit: no burst).
    /// When set it is > the device's SM limit and ≤ 100.
    pub sm_ceiling: [u64; MAX_DEVICES],
    pub region_path: PathBuf,
    pub origin: ConfigOrigin,
    pub task_priority: i32,
    pub core_policy: CorePolicy,
    /// Errors always; >= 2 warnings; >= 3 info; >= 4 debug. The shim's logger uses this once the
    /// process state is built (so the pid-1 fallback applies to it too).
    pub log_level: i32,
    /// Minimum seconds between `last_kernel_time` writes.
    pub record_kernel_interval: u64,
    /// `None`: unset (all devices). Entries up to the first invalid one (CUDA's rule).
    pub visible_devices: Option<Vec<VisibleDevice>>,
    pub oversubscribe: bool,
    /// Parsed for completeness; dead in the incumbent, unused here.
    pub active_oom_killer: bool,
    /// [`ENV_HOST_PID_PROBE`]: the host-PID probe may run (default false).
    pub host_pid_probe: bool,
    pub warnings: Vec<ConfigWarning>,
}

impl Config {
    pub fn from_system() -> Config {
        Self::from_sources(&SystemSources)
    }

    pub fn from_sources(src: &dyn ConfigSources) -> Config {
        let mut b = Builder::new(src);
        b.build()
    }
}

fn present(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim_ascii().is_empty())
}

fn limit_var_names() -> Vec<String> {
    let mut v = vec![ENV_MEMORY_LIMIT.to_owned(), ENV_SM_LIMIT.to_owned(), ENV_SHARED_CACHE.to_owned()];
    for i in 0..MAX_DEVICES {
        v.push(format!("{ENV_MEMORY_LIMIT}_{i}"));
        v.push(format!("{ENV_SM_LIMIT}_{i}"));
    }
    v
}

/// PID 1's memory limits, if `/proc/1/environ` is readable and has any limit variable: what a
/// process with an empty environment would be limited to. Lets the shim warn when a region is created
/// without a memory limit although the container has one.
pub fn pid1_memory_limits(src: &dyn ConfigSources) -> Option<[u64; MAX_DEVICES]> {
    /// The machine with an empty process environment.
    struct Pid1Only<'a>(&'a dyn ConfigSources);
    impl ConfigSources for Pid1Only<'_> {
        fn env(&self, _: &str) -> Option<String> {
            None
        }
        fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
            self.0.read_file(path)
        }
        fn exists(&self, _: &Path) -> bool {
            true // never discover a region: only PID 1's environment counts here
        }
        fn list_dir(&self, _: &Path) -> Option<Vec<String>> {
            None
        }
    }
    let c = Config::from_sources(&Pid1Only(src));
    (c.origin == ConfigOrigin::Pid1Environ).then_some(c.memory_limit)
}

/// Parses `/proc/<pid>/environ` content (NUL-separated `K=V`; the first occurrence wins, as getenv).
pub fn parse_environ(content: &[u8]) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for rec in content.split(|&b| b == 0) {
        let Some(eq) = rec.iter().position(|&b| b == b'=') else { continue };
        if eq == 0 {
            continue;
        }
        let k = String::from_utf8_lossy(&rec[..eq]).into_owned();
        let v = String::from_utf8_lossy(&rec[eq + 1..]).into_owned();
        m.entry(k).or_insert(v);
    }
    m
}

/// `/overrideEnv` (docs/hami-contract.md §1.5): `KEY=VALUE` lines up to the first line without `=`.
/// A trailing `\r` is stripped; lines with an empty key are skipped (setenv would reject them).
/// Returns the pairs in file order; the shim decides when (and whether) to apply them.
pub fn parse_override_env(content: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in content.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(eq) = line.iter().position(|&b| b == b'=') else { break };
        if eq == 0 {
            continue;
        }
        out.push((
            String::from_utf8_lossy(&line[..eq]).into_owned(),
            String::from_utf8_lossy(&line[eq + 1..]).into_owned(),
        ));
    }
    out
}

/// Reads and parses `/overrideEnv`; empty if absent.
pub fn read_override_env(src: &dyn ConfigSources) -> Vec<(String, String)> {
    src.read_file(Path::new(OVERRIDE_ENV_PATH)).map(|c| parse_override_env(&c)).unwrap_or_default()
}

/// `CUDA_VISIBLE_DEVICES` → entries up to the first invalid one, plus that invalid entry if any.
pub fn parse_visible_devices(raw: &str) -> (Vec<VisibleDevice>, Option<String>) {
    let mut out = Vec::new();
    if raw.trim_ascii().is_empty() {
        return (out, None); // set but empty: no device visible
    }
    for entry in raw.split(',') {
        let e = entry.trim_ascii();
        if !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()) {
            match e.parse::<u32>() {
                Ok(n) => out.push(VisibleDevice::Index(n)),
                Err(_) => return (out, Some(e.to_owned())),
            }
        } else if (e.starts_with("GPU-") || e.starts_with("MIG-")) && e.len() > 4 {
            out.push(VisibleDevice::Uuid(e.to_owned()));
        } else {
            return (out, Some(e.to_owned()));
        }
    }
    (out, None)
}

fn parse_bool(s: &str) -> Option<bool> {
    // Go strconv.ParseBool's accepted spellings.
    match s.trim_ascii() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// `LIBCUDA_LOG_LEVEL` when unset or malformed.
pub const DEFAULT_LOG_LEVEL: i32 = 2;

/// The one parser of `LIBCUDA_LOG_LEVEL`, shared by [`Config`] and the shim's early logger (which
/// reads the process environment before a `Config` exists): a non-negative integer, capped at 10.
/// `None` = malformed.
pub fn parse_log_level(s: &str) -> Option<i32> {
    match s.trim_ascii().parse::<i32>() {
        Ok(v) if v >= 0 => Some(v.min(10)),
        _ => None,
    }
}

fn parse_i32(s: &str) -> Option<i32> {
    s.trim_ascii().parse::<i32>().ok()
}

/// Where a resolved limit came from (for warning texts).
enum Found {
    Value(u64, String),
    None,
}

struct Builder<'a> {
    src: &'a dyn ConfigSources,
    pid1: Option<Option<HashMap<String, String>>>,
    origin: ConfigOrigin,
    warnings: Vec<ConfigWarning>,
}

impl<'a> Builder<'a> {
    fn new(src: &'a dyn ConfigSources) -> Self {
        Builder { src, pid1: None, origin: ConfigOrigin::Defaults, warnings: Vec::new() }
    }

    fn pid1(&mut self) -> Option<&HashMap<String, String>> {
        if self.pid1.is_none() {
            let m = self.src.read_file(Path::new(PID1_ENVIRON)).map(|c| parse_environ(&c));
            self.pid1 = Some(m);
        }
        self.pid1.as_ref().unwrap().as_ref()
    }

    fn pid1_get(&mut self, key: &str) -> Option<String> {
        present(self.pid1().and_then(|m| m.get(key).cloned()))
    }

    /// A variable of the process env. Set but empty (`CUDA_DEVICE_MEMORY_LIMIT=`, typically an
    /// unset shell variable expanded into it) counts as unset and takes PID 1's value instead, so
    /// an empty value never means "no limit" when the container has one (docs/configuration.md).
    fn var(&mut self, key: &str) -> Option<String> {
        match self.src.env(key) {
            Some(v) if !v.trim_ascii().is_empty() => Some(v),
            Some(_) => self.pid1_get(key),
            None => None,
        }
    }

    /// A per-container contract variable: process env, else pid 1 when that is the origin.
    fn contract(&mut self, key: &str) -> Option<String> {
        if let Some(v) = self.var(key) {
            return Some(v);
        }
        if self.origin == ConfigOrigin::Pid1Environ { self.pid1_get(key) } else { None }
    }

    /// A limit variable from the origin's source (process env or pid 1; nothing otherwise).
    fn limit_var(&mut self, key: &str) -> Option<String> {
        match self.origin {
            ConfigOrigin::ProcessEnv => self.var(key),
            ConfigOrigin::Pid1Environ => self.pid1_get(key),
            _ => None,
        }
    }

    /// The KAI Scheduler's region location (regionpath.rs step 2), from the origin's sources.
    fn kai_region(&mut self) -> Option<PathBuf> {
        use crate::regionpath::{ENV_CONTAINER_NAME, ENV_POD_UID, ENV_VGPU_MOUNT, kai_path};
        let (pod, ctr) = (self.contract(ENV_POD_UID)?, self.contract(ENV_CONTAINER_NAME)?);
        let mount = self.contract(ENV_VGPU_MOUNT);
        kai_path(self.src, mount.as_deref(), &pod, &ctr)
    }

    /// `CUDA_DEVICE_MEMORY_LIMIT_<i>` / `CUDA_DEVICE_SM_LIMIT_<i>` whose `<i>` is not a device
    /// index 0..15: ignored, and said (once per process, with the other configuration warnings).
    fn warn_out_of_range_indices(&mut self) {
        let mut names: Vec<(String, String)> = Vec::new();
        if self.origin == ConfigOrigin::ProcessEnv {
            for n in self.src.env_names() {
                if let Some(v) = self.src.env(&n) {
                    names.push((n, v));
                }
            }
        } else if self.origin == ConfigOrigin::Pid1Environ
            && let Some(m) = self.pid1()
        {
            names.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        names.sort();
        for (name, value) in names {
            let Some(suffix) = [ENV_MEMORY_LIMIT, ENV_SM_LIMIT]
                .iter()
                .find_map(|base| name.strip_prefix(base).and_then(|r| r.strip_prefix('_')))
            else {
                continue;
            };
            if value.trim_ascii().is_empty() || (0..MAX_DEVICES).any(|i| suffix == i.to_string()) {
                continue;
            }
            let action = if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) {
                format!(
                    "ignored: device index {suffix} is out of range (at most {MAX_DEVICES} devices, 0..{})",
                    MAX_DEVICES - 1
                )
            } else {
                format!("ignored: {suffix:?} is not a device index (0..{})", MAX_DEVICES - 1)
            };
            self.warn(&name, &value, action);
        }
    }

    fn warn(&mut self, variable: &str, value: &str, action: String) {
        self.warnings.push(ConfigWarning { variable: variable.to_owned(), value: value.to_owned(), action });
    }

    fn decide_origin(&mut self) -> Option<PathBuf> {
        let names = limit_var_names();
        if names.iter().any(|n| present(self.src.env(n)).is_some()) {
            self.origin = ConfigOrigin::ProcessEnv;
            return None;
        }
        if let Some(m) = self.pid1()
            && names.iter().any(|n| m.get(n).is_some_and(|v| !v.trim_ascii().is_empty()))
        {
            self.origin = ConfigOrigin::Pid1Environ;
            return None;
        }
        if let Some(p) = crate::regionpath::discover(self.src) {
            self.origin = ConfigOrigin::DiscoveredRegion;
            return Some(p);
        }
        self.origin = ConfigOrigin::Defaults;
        None
    }

    /// Resolves one device's limit: per-device var (> 0 wins), then the global var; malformed
    /// values are skipped and, if any was malformed and the process env is the origin, the same
    /// two variables in /proc/1/environ are tried.
    fn resolve(
        &mut self,
        base: &str,
        dev: usize,
        parse: fn(&str) -> Result<u64, LimitError>,
        malformed: &mut Vec<(String, String, usize)>,
    ) -> Found {
        let per = format!("{base}_{dev}");
        let mut bad = false;
        for key in [per.as_str(), base] {
            if let Some(v) = self.limit_var(key) {
                match parse(&v) {
                    Ok(0) => {}
                    Ok(n) => return Found::Value(n, key.to_owned()),
                    Err(_) => {
                        bad = true;
                        if !malformed.iter().any(|(k, _, _)| k == key) {
                            malformed.push((key.to_owned(), v, dev));
                        }
                    }
                }
            }
        }
        if bad && self.origin == ConfigOrigin::ProcessEnv {
            for key in [per.as_str(), base] {
                if let Some(v) = self.pid1_get(key)
                    && let Ok(n) = parse(&v)
                    && n > 0
                {
                    return Found::Value(n, format!("{key} from {PID1_ENVIRON}"));
                }
            }
        }
        Found::None
    }

    fn resolve_all(
        &mut self,
        base: &str,
        parse: fn(&str) -> Result<u64, LimitError>,
        what: &str,
        none_text: &str,
    ) -> ([u64; MAX_DEVICES], [String; MAX_DEVICES]) {
        let mut vals = [0u64; MAX_DEVICES];
        let mut srcs: [String; MAX_DEVICES] = Default::default();
        let mut malformed = Vec::new();
        for d in 0..MAX_DEVICES {
            match self.resolve(base, d, parse, &mut malformed) {
                Found::Value(n, s) => {
                    vals[d] = n;
                    srcs[d] = s;
                }
                Found::None => srcs[d] = none_text.to_owned(),
            }
        }
        for (key, value, dev) in malformed {
            let action = if key == base {
                let fallbacks: Vec<String> = (0..MAX_DEVICES)
                    .filter(|&d| self.limit_var(&format!("{base}_{d}")).is_none())
                    .map(|d| format!("{d}: {}", srcs[d]))
                    .collect();
                let mut uniq = fallbacks.iter().map(|s| s.split_once(": ").unwrap().1).collect::<Vec<_>>();
                uniq.dedup();
                if uniq.len() == 1 {
                    format!("ignored (invalid {what}); devices without a per-device value use: {}", uniq[0])
                } else {
                    format!(
                        "ignored (invalid {what}); devices without a per-device value use: {}",
                        fallbacks.join(", ")
                    )
                }
            } else {
                format!("ignored (invalid {what}); device {dev} uses: {}", srcs[dev])
            };
            self.warn(&key, &value, action);
        }
        (vals, srcs)
    }

    /// `CUDA_DEVICE_SM_CEILING[_i]` per device (per-device variable first). Not a limit variable
    /// (it never decides the origin); read like the other contract variables. Safe choices: a
    /// malformed value or one at/below the limit means no burst (0); above 100 is clamped to 100;
    /// a device without an SM limit has nothing to burst from (0). One warning per variable.
    fn sm_ceilings(&mut self, sm_limit: &[u64; MAX_DEVICES]) -> [u64; MAX_DEVICES] {
        let mut out = [0u64; MAX_DEVICES];
        let mut warned: Vec<String> = Vec::new();
        for d in 0..MAX_DEVICES {
            let per = format!("{ENV_SM_CEILING}_{d}");
            let Some((key, v)) =
                [per.as_str(), ENV_SM_CEILING].into_iter().find_map(|k| self.contract(k).map(|v| (k.to_owned(), v)))
            else {
                continue;
            };
            let lim = sm_limit[d];
            let first = !warned.contains(&key);
            let (val, problem) = match v.trim_ascii().parse::<u64>() {
                Err(_) => (0, Some("not a whole percent: no burst (the SM limit is the cap)".to_owned())),
                Ok(_) if lim >= 100 => (0, None),
                Ok(n) if n > 100 => (100, Some("above 100%: clamped to 100".to_owned())),
                Ok(n) if n <= lim => {
                    (0, (n < lim).then(|| format!("below the SM limit {lim}%: no burst (the SM limit is the cap)")))
                }
                Ok(n) => (n, None),
            };
            out[d] = val;
            if let Some(p) = problem
                && first
            {
                warned.push(key.clone());
                self.warn(&key, &v, p);
            }
        }
        out
    }

    fn build(&mut self) -> Config {
        let discovered = self.decide_origin();
        self.warn_out_of_range_indices();

        let (memory_limit, _) = self.resolve_all(ENV_MEMORY_LIMIT, parse_limit, "memory limit", "no memory limit");
        let (raw_sm, sm_src) = self.resolve_all(ENV_SM_LIMIT, parse_sm_limit, "SM limit", "no SM limit (100%)");
        let mut sm_limit = [100u64; MAX_DEVICES];
        let mut clamp_warned = Vec::new();
        for d in 0..MAX_DEVICES {
            let (v, clamped) = normalize_sm(raw_sm[d]);
            sm_limit[d] = v;
            if clamped && !clamp_warned.contains(&sm_src[d]) {
                clamp_warned.push(sm_src[d].clone());
                let var = sm_src[d].split(' ').next().unwrap_or(ENV_SM_LIMIT).to_owned();
                self.warn(&var, &raw_sm[d].to_string(), "SM limit above 100%: clamped to 100".into());
            }
        }

        let sm_ceiling = self.sm_ceilings(&sm_limit);

        // regionpath.rs's order: explicit, KAI, discovered, default.
        let region_path = match self.limit_var(ENV_SHARED_CACHE) {
            Some(p) => PathBuf::from(p),
            None => self.kai_region().or(discovered).unwrap_or_else(|| PathBuf::from(DEFAULT_REGION_PATH)),
        };

        let task_priority = match self.contract(ENV_TASK_PRIORITY) {
            None => 1,
            Some(v) => parse_i32(&v).unwrap_or_else(|| {
                self.warn(ENV_TASK_PRIORITY, &v, "not an integer: using the default priority 1".into());
                1
            }),
        };

        let core_policy = match self.contract(ENV_CORE_POLICY) {
            None => CorePolicy::Default,
            Some(v) => match v.as_str() {
                "FORCE" | "force" => CorePolicy::Force,
                "DISABLE" | "disable" => CorePolicy::Disable,
                "DEFAULT" | "default" => CorePolicy::Default,
                _ => {
                    self.warn(
                        ENV_CORE_POLICY,
                        &v,
                        "unknown policy: using default (follow the monitor's switch)".into(),
                    );
                    CorePolicy::Default
                }
            },
        };

        let log_level = match self.contract(ENV_LOG_LEVEL) {
            None => DEFAULT_LOG_LEVEL,
            Some(v) => parse_log_level(&v).unwrap_or_else(|| {
                self.warn(ENV_LOG_LEVEL, &v, "not a non-negative integer: using the default log level 2".into());
                DEFAULT_LOG_LEVEL
            }),
        };

        let record_kernel_interval = match self.var(ENV_RECORD_KERNEL_INTERVAL) {
            None => 1,
            Some(v) => match v.trim_ascii().parse::<u64>() {
                Ok(n) => n,
                Err(_) => {
                    self.warn(ENV_RECORD_KERNEL_INTERVAL, &v, "not a non-negative integer: using 1 s".into());
                    1
                }
            },
        };

        // The one exception to "empty = unset": CUDA itself reads this process's value, and to
        // CUDA an empty CUDA_VISIBLE_DEVICES means "no device"; the mapping must agree with it.
        let visible_devices_raw = self.src.env(ENV_VISIBLE_DEVICES);
        let visible_devices = visible_devices_raw.as_ref().map(|raw| {
            let (list, bad) = parse_visible_devices(raw);
            if let Some(bad) = bad {
                self.warn(
                    ENV_VISIBLE_DEVICES,
                    raw,
                    format!("invalid entry {bad:?}: only the {} entries before it are used (CUDA's rule)", list.len()),
                );
            }
            list
        });

        let oversubscribe = match self.contract(ENV_OVERSUBSCRIBE) {
            None => false,
            Some(v) => parse_bool(&v).unwrap_or_else(|| {
                self.warn(ENV_OVERSUBSCRIBE, &v, "not a boolean: treated as false".into());
                false
            }),
        };

        let active_oom_killer = match self.var(ENV_ACTIVE_OOM_KILLER) {
            None => true,
            Some(v) => match v.trim_ascii() {
                "true" | "1" => true,
                "false" | "0" => false,
                _ => {
                    self.warn(ENV_ACTIVE_OOM_KILLER, &v, "not true/false/1/0: treated as true (unused anyway)".into());
                    true
                }
            },
        };

        let host_pid_probe = match self.var(ENV_HOST_PID_PROBE) {
            None => false,
            Some(v) => parse_bool(&v).unwrap_or_else(|| {
                self.warn(ENV_HOST_PID_PROBE, &v, "not a boolean: the host-PID probe stays off".into());
                false
            }),
        };

        Config {
            memory_limit,
            sm_limit,
            sm_ceiling,
            region_path,
            origin: self.origin,
            task_priority,
            core_policy,
            log_level,
            record_kernel_interval,
            visible_devices,
            oversubscribe,
            active_oom_killer,
            host_pid_probe,
            warnings: std::mem::take(&mut self.warnings),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[derive(Default)]
    pub struct Fake {
        pub env: HashMap<String, String>,
        pub files: HashMap<PathBuf, Vec<u8>>,
        pub dirs: HashMap<PathBuf, Vec<String>>,
    }

    impl Fake {
        pub fn env(pairs: &[(&str, &str)]) -> Fake {
            let mut f = Fake::default();
            for (k, v) in pairs {
                f.env.insert(k.to_string(), v.to_string());
            }
            f
        }
        fn pid1(mut self, pairs: &[(&str, &str)]) -> Fake {
            let mut c = Vec::new();
            for (k, v) in pairs {
                c.extend_from_slice(format!("{k}={v}\0").as_bytes());
            }
            self.files.insert(PathBuf::from(PID1_ENVIRON), c);
            self
        }
    }

    impl ConfigSources for Fake {
        fn env(&self, key: &str) -> Option<String> {
            self.env.get(key).cloned()
        }
        fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
            self.files.get(path).cloned()
        }
        fn exists(&self, path: &Path) -> bool {
            self.files.contains_key(path) || self.dirs.contains_key(path)
        }
        fn list_dir(&self, path: &Path) -> Option<Vec<String>> {
            self.dirs.get(path).cloned()
        }
        fn env_names(&self) -> Vec<String> {
            self.env.keys().cloned().collect()
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn defaults() {
        let c = Config::from_sources(&Fake::default());
        assert_eq!(c.memory_limit, [0; 16]);
        assert_eq!(c.sm_limit, [100; 16]);
        assert_eq!(c.region_path, PathBuf::from(DEFAULT_REGION_PATH));
        assert_eq!(c.origin, ConfigOrigin::Defaults);
        assert_eq!(c.task_priority, 1);
        assert_eq!(c.core_policy, CorePolicy::Default);
        assert_eq!(c.log_level, 2);
        assert_eq!(c.record_kernel_interval, 1);
        assert_eq!(c.visible_devices, None);
        assert!(!c.oversubscribe);
        assert!(c.active_oom_killer);
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn sm_ceiling() {
        // Unset: no burst anywhere (today's behaviour).
        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_SM_LIMIT", "30")]));
        assert_eq!(c.sm_ceiling, [0; 16]);
        // Global and per-device values; the per-device one wins.
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("CUDA_DEVICE_SM_LIMIT_2", "60"),
            ("CUDA_DEVICE_SM_CEILING", "100"),
            ("CUDA_DEVICE_SM_CEILING_1", "70"),
        ]));
        assert_eq!(c.sm_ceiling[0], 100);
        assert_eq!(c.sm_ceiling[1], 70);
        assert_eq!(c.sm_ceiling[2], 100);
        assert_eq!(c.sm_limit[0], 30, "the ceiling does not change the limit");
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // Malformed: one warning, no burst. Above 100: clamped. Below the limit: no burst.
        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_SM_LIMIT", "30"), ("CUDA_DEVICE_SM_CEILING", "lots")]));
        assert_eq!(c.sm_ceiling, [0; 16]);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert_eq!(c.warnings[0].variable, "CUDA_DEVICE_SM_CEILING");
        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_SM_LIMIT", "30"), ("CUDA_DEVICE_SM_CEILING", "250")]));
        assert_eq!(c.sm_ceiling, [100; 16]);
        assert_eq!(c.warnings.len(), 1);
        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_SM_LIMIT", "50"), ("CUDA_DEVICE_SM_CEILING_0", "20")]));
        assert_eq!(c.sm_ceiling[0], 0);
        assert!(c.warnings[0].action.contains("below the SM limit"), "{:?}", c.warnings);
        // Equal to the limit: nothing to burst, nothing to warn about.
        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_SM_LIMIT", "50"), ("CUDA_DEVICE_SM_CEILING", "50")]));
        assert_eq!(c.sm_ceiling, [0; 16]);
        assert!(c.warnings.is_empty());
        // No SM limit: nothing to burst from.
        let c =
            Config::from_sources(&Fake::env(&[("CUDA_DEVICE_MEMORY_LIMIT", "1g"), ("CUDA_DEVICE_SM_CEILING", "80")]));
        assert_eq!(c.sm_ceiling, [0; 16]);
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn plugin_env() {
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"),
            ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g"),
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/usr/local/vgpu/abc.cache"),
            ("CUDA_TASK_PRIORITY", "0"),
            ("LIBCUDA_LOG_LEVEL", "4"),
            ("GPU_CORE_UTILIZATION_POLICY", "disable"),
            ("CUDA_OVERSUBSCRIBE", "true"),
        ]));
        assert_eq!(c.origin, ConfigOrigin::ProcessEnv);
        assert_eq!(c.memory_limit[0], 3000 * MIB);
        assert_eq!(c.memory_limit[1], 1 << 30);
        assert_eq!(c.memory_limit[2..], [0; 14]);
        assert_eq!(c.sm_limit, [30; 16]);
        assert_eq!(c.region_path, PathBuf::from("/usr/local/vgpu/abc.cache"));
        assert_eq!(c.task_priority, 0);
        assert_eq!(c.log_level, 4);
        assert_eq!(c.core_policy, CorePolicy::Disable);
        assert!(c.oversubscribe);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn per_device_override_wins_when_positive() {
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", "2g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_3", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_4", "0"),
            ("CUDA_DEVICE_SM_LIMIT", "50"),
            ("CUDA_DEVICE_SM_LIMIT_2", "20"),
            ("CUDA_DEVICE_SM_LIMIT_5", "0"),
        ]));
        assert_eq!(c.memory_limit[0], 2 << 30);
        assert_eq!(c.memory_limit[3], 1 << 30);
        assert_eq!(c.memory_limit[4], 2 << 30);
        assert_eq!(c.sm_limit[2], 20);
        assert_eq!(c.sm_limit[5], 50);
        assert_eq!(c.sm_limit[0], 50);
    }

    #[test]
    fn sm_clamp_and_suffix() {
        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_SM_LIMIT", "150")]));
        assert_eq!(c.sm_limit, [100; 16]);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].action.contains("clamped"));
        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_SM_LIMIT", "50m")]));
        assert_eq!(c.sm_limit, [100; 16]);
        assert_eq!(c.warnings.len(), 1);
        assert_eq!(c.warnings[0].variable, "CUDA_DEVICE_SM_LIMIT");
        assert!(c.warnings[0].action.contains("no SM limit"), "{}", c.warnings[0]);
    }

    #[test]
    fn malformed_per_device_falls_back_to_global() {
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "1.5g"),
        ]));
        assert_eq!(c.memory_limit[0], 1 << 30);
        assert_eq!(c.warnings.len(), 1);
        let w = &c.warnings[0];
        assert_eq!(w.variable, "CUDA_DEVICE_MEMORY_LIMIT_0");
        assert_eq!(w.value, "1.5g");
        assert!(w.action.contains("device 0 uses: CUDA_DEVICE_MEMORY_LIMIT"), "{w}");
    }

    #[test]
    fn malformed_falls_back_to_pid1_then_unlimited() {
        let f = Fake::env(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "0x100")]).pid1(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "3000m")]);
        let c = Config::from_sources(&f);
        assert_eq!(c.origin, ConfigOrigin::ProcessEnv);
        assert_eq!(c.memory_limit[0], 3000 * MIB);
        assert!(c.warnings[0].action.contains("/proc/1/environ"), "{}", c.warnings[0]);

        let c = Config::from_sources(&Fake::env(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "0x100")]));
        assert_eq!(c.memory_limit[0], 0);
        assert!(c.warnings[0].action.contains("no memory limit"), "{}", c.warnings[0]);
    }

    #[test]
    fn malformed_global_reports_once() {
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", "lots"),
            ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g"),
        ]));
        assert_eq!(c.memory_limit[1], 1 << 30);
        assert_eq!(c.memory_limit[0], 0);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].action.contains("no memory limit"));
    }

    #[test]
    fn stripped_env_reads_pid1() {
        let f = Fake::env(&[("LIBCUDA_LOG_LEVEL", "3")]).pid1(&[
            ("PATH", "/bin"),
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "2000m"),
            ("CUDA_DEVICE_SM_LIMIT", "25"),
            ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/usr/local/vgpu/x.cache"),
            ("CUDA_TASK_PRIORITY", "0"),
            ("GPU_CORE_UTILIZATION_POLICY", "force"),
            ("LIBCUDA_LOG_LEVEL", "1"),
        ]);
        let c = Config::from_sources(&f);
        assert_eq!(c.origin, ConfigOrigin::Pid1Environ);
        assert_eq!(c.memory_limit[0], 2000 * MIB);
        assert_eq!(c.sm_limit[0], 25);
        assert_eq!(c.region_path, PathBuf::from("/usr/local/vgpu/x.cache"));
        assert_eq!(c.task_priority, 0);
        assert_eq!(c.core_policy, CorePolicy::Force);
        assert_eq!(c.log_level, 3, "process env wins for non-limit variables");
    }

    #[test]
    fn any_limit_var_in_process_env_ignores_pid1() {
        let f = Fake::env(&[("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/mine.cache")])
            .pid1(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "2000m")]);
        let c = Config::from_sources(&f);
        assert_eq!(c.origin, ConfigOrigin::ProcessEnv);
        assert_eq!(c.memory_limit[0], 0);
        assert_eq!(c.region_path, PathBuf::from("/tmp/mine.cache"));
        // Empty values do not count as present.
        let f = Fake::env(&[("CUDA_DEVICE_MEMORY_LIMIT", "")]).pid1(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "2000m")]);
        assert_eq!(Config::from_sources(&f).origin, ConfigOrigin::Pid1Environ);
    }

    /// `CUDA_DEVICE_MEMORY_LIMIT=` (an unset shell variable expanded into it) next to
    /// other contract variables must not mean "unlimited" when the container's PID 1 has a limit.
    #[test]
    fn set_but_empty_is_unset_and_falls_back_to_pid1() {
        let f = Fake::env(&[("CUDA_DEVICE_MEMORY_LIMIT", ""), ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/r.cache")])
            .pid1(&[("CUDA_DEVICE_MEMORY_LIMIT", "1g"), ("CUDA_DEVICE_SM_LIMIT", "40")]);
        let c = Config::from_sources(&f);
        assert_eq!(c.origin, ConfigOrigin::ProcessEnv);
        assert_eq!(c.memory_limit, [1 << 30; 16], "empty = unset: PID 1's value");
        assert_eq!(
            c.sm_limit, [100; 16],
            "an SM limit the process env does not mention stays the process env's (none)"
        );
        assert_eq!(c.region_path, PathBuf::from("/tmp/r.cache"));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);

        // Per-device variable, whitespace-only value.
        let f = Fake::env(&[("CUDA_DEVICE_MEMORY_LIMIT_0", " "), ("CUDA_DEVICE_SM_LIMIT", "30")])
            .pid1(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "2g")]);
        let c = Config::from_sources(&f);
        assert_eq!((c.memory_limit[0], c.memory_limit[1], c.sm_limit[0]), (2 << 30, 0, 30));

        // Every other variable too.
        let f = Fake::env(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", "1g"),
            ("CUDA_DEVICE_MEMORY_SHARED_CACHE", ""),
            ("CUDA_TASK_PRIORITY", ""),
            ("GPU_CORE_UTILIZATION_POLICY", ""),
            ("LIBCUDA_LOG_LEVEL", ""),
            ("RECORD_KERNEL_INTERVAL", ""),
            ("CUDA_OVERSUBSCRIBE", ""),
        ])
        .pid1(&[
            ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/usr/local/vgpu/p.cache"),
            ("CUDA_TASK_PRIORITY", "0"),
            ("GPU_CORE_UTILIZATION_POLICY", "force"),
            ("LIBCUDA_LOG_LEVEL", "3"),
            ("RECORD_KERNEL_INTERVAL", "5"),
            ("CUDA_OVERSUBSCRIBE", "true"),
        ]);
        let c = Config::from_sources(&f);
        assert_eq!(c.region_path, PathBuf::from("/usr/local/vgpu/p.cache"));
        assert_eq!((c.task_priority, c.core_policy, c.log_level), (0, CorePolicy::Force, 3));
        assert_eq!((c.record_kernel_interval, c.oversubscribe), (5, true));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);

        // Empty and nothing in PID 1: the defaults, silently.
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", ""),
            ("CUDA_TASK_PRIORITY", ""),
            ("CUDA_DEVICE_SM_LIMIT", "20"),
        ]));
        assert_eq!((c.memory_limit[0], c.task_priority, c.sm_limit[0]), (0, 1, 20));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);

        // What the shim compares a freshly created region against.
        assert_eq!(
            pid1_memory_limits(&Fake::default().pid1(&[("CUDA_DEVICE_MEMORY_LIMIT_1", "3g")])).map(|l| l[1]),
            Some(3 << 30)
        );
        assert_eq!(pid1_memory_limits(&Fake::env(&[("CUDA_DEVICE_MEMORY_LIMIT", "1g")])), None);
        let mut d = Fake::default().pid1(&[("PATH", "/bin")]);
        d.dirs.insert(PathBuf::from(HOOK_DIR), vec!["a.cache".into()]);
        assert_eq!(pid1_memory_limits(&d), None);
    }

    /// Indices 16 and up are not silently ignored.
    #[test]
    fn out_of_range_device_indices_are_reported() {
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_DEVICE_MEMORY_LIMIT_16", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_99", "2g"),
            ("CUDA_DEVICE_SM_LIMIT_16", "20"),
            ("CUDA_DEVICE_MEMORY_LIMIT_x", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_15", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_17", ""),
        ]));
        assert_eq!(c.memory_limit[15], 1 << 30);
        assert_eq!(c.memory_limit[..15], [0; 15]);
        assert_eq!(c.sm_limit, [100; 16]);
        let vars: Vec<&str> = c.warnings.iter().map(|w| w.variable.as_str()).collect();
        assert_eq!(
            vars,
            [
                "CUDA_DEVICE_MEMORY_LIMIT_16",
                "CUDA_DEVICE_MEMORY_LIMIT_99",
                "CUDA_DEVICE_MEMORY_LIMIT_x",
                "CUDA_DEVICE_SM_LIMIT_16"
            ]
        );
        assert!(c.warnings[0].action.contains("out of range"), "{}", c.warnings[0]);
        assert!(c.warnings[2].action.contains("not a device index"), "{}", c.warnings[2]);
        // From PID 1's environment as well, when that is where the limits come from.
        let c = Config::from_sources(
            &Fake::default().pid1(&[("CUDA_DEVICE_SM_LIMIT_20", "10"), ("CUDA_DEVICE_SM_LIMIT", "50")]),
        );
        assert_eq!(c.origin, ConfigOrigin::Pid1Environ);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert_eq!(c.warnings[0].variable, "CUDA_DEVICE_SM_LIMIT_20");
    }

    #[test]
    fn discovery() {
        let mut f = Fake::default();
        f.dirs.insert(PathBuf::from(HOOK_DIR), vec!["libvgpu.so".into(), "u-1.cache".into()]);
        let c = Config::from_sources(&f);
        assert_eq!(c.origin, ConfigOrigin::DiscoveredRegion);
        assert_eq!(c.region_path, PathBuf::from("/usr/local/vgpu/u-1.cache"));

        // Two caches: ambiguous → defaults.
        f.dirs.insert(PathBuf::from(HOOK_DIR), vec!["a.cache".into(), "b.cache".into()]);
        assert_eq!(Config::from_sources(&f).origin, ConfigOrigin::Defaults);

        // libvgpu.so-named caches do not count.
        f.dirs.insert(PathBuf::from(HOOK_DIR), vec!["a.cache".into(), "libvgpu.so.cache".into()]);
        assert_eq!(Config::from_sources(&f).origin, ConfigOrigin::DiscoveredRegion);

        // Default region exists → use it.
        f.files.insert(PathBuf::from(DEFAULT_REGION_PATH), vec![]);
        let c = Config::from_sources(&f);
        assert_eq!(c.origin, ConfigOrigin::Defaults);
        assert_eq!(c.region_path, PathBuf::from(DEFAULT_REGION_PATH));

        // pid1 unreadable but has nothing → discovery still tried; pid1 with vars wins.
        let mut f = Fake::default().pid1(&[("CUDA_DEVICE_SM_LIMIT", "10")]);
        f.dirs.insert(PathBuf::from(HOOK_DIR), vec!["a.cache".into()]);
        assert_eq!(Config::from_sources(&f).origin, ConfigOrigin::Pid1Environ);
    }

    #[test]
    fn policy_exact_matches() {
        for (v, p, warn) in [
            ("force", CorePolicy::Force, false),
            ("FORCE", CorePolicy::Force, false),
            ("Force", CorePolicy::Default, true),
            ("disable", CorePolicy::Disable, false),
            ("DISABLE", CorePolicy::Disable, false),
            ("default", CorePolicy::Default, false),
            ("off", CorePolicy::Default, true),
        ] {
            let c = Config::from_sources(&Fake::env(&[("GPU_CORE_UTILIZATION_POLICY", v)]));
            assert_eq!(c.core_policy, p, "{v}");
            assert_eq!(!c.warnings.is_empty(), warn, "{v}");
        }
    }

    #[test]
    fn scalar_malformed() {
        let c = Config::from_sources(&Fake::env(&[
            ("CUDA_TASK_PRIORITY", "high"),
            ("LIBCUDA_LOG_LEVEL", "x"),
            ("RECORD_KERNEL_INTERVAL", "-3"),
            ("CUDA_OVERSUBSCRIBE", "yes"),
            ("ACTIVE_OOM_KILLER", "false"),
        ]));
        assert_eq!(c.task_priority, 1);
        assert_eq!(c.log_level, 2);
        assert_eq!(c.record_kernel_interval, 1);
        assert!(!c.oversubscribe);
        assert!(!c.active_oom_killer);
        assert_eq!(c.warnings.len(), 4, "{:?}", c.warnings);
        for (v, level, warns) in
            [("-1", 2, true), ("99", 10, false), (" 3 ", 3, false), ("0", 0, false), ("", 2, false)]
        {
            let c = Config::from_sources(&Fake::env(&[("LIBCUDA_LOG_LEVEL", v)]));
            assert_eq!(c.log_level, level, "LIBCUDA_LOG_LEVEL={v:?}");
            assert_eq!(!c.warnings.is_empty(), warns, "LIBCUDA_LOG_LEVEL={v:?}: {:?}", c.warnings);
        }
        let c = Config::from_sources(&Fake::env(&[("RECORD_KERNEL_INTERVAL", "5"), ("CUDA_TASK_PRIORITY", "-1")]));
        assert_eq!(c.record_kernel_interval, 5);
        assert_eq!(c.task_priority, -1);
    }

    #[test]
    fn host_pid_probe_is_off_unless_asked_for() {
        assert!(!Config::from_sources(&Fake::default()).host_pid_probe, "off by default");
        for (v, on, warns) in [("1", true, false), ("true", true, false), ("0", false, false), ("", false, false)] {
            let c = Config::from_sources(&Fake::env(&[(ENV_HOST_PID_PROBE, v)]));
            assert_eq!((c.host_pid_probe, !c.warnings.is_empty()), (on, warns), "{ENV_HOST_PID_PROBE}={v:?}");
        }
        let c = Config::from_sources(&Fake::env(&[(ENV_HOST_PID_PROBE, "yes please")]));
        assert!(!c.host_pid_probe, "malformed: off");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].action.contains("stays off"));
    }

    #[test]
    fn visible_devices() {
        assert_eq!(parse_visible_devices("0,2"), (vec![VisibleDevice::Index(0), VisibleDevice::Index(2)], None));
        let u = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
        assert_eq!(
            parse_visible_devices(&format!("{u}, 1")),
            (vec![VisibleDevice::Uuid(u.into()), VisibleDevice::Index(1)], None)
        );
        assert_eq!(
            parse_visible_devices("MIG-GPU-abc/1/0"),
            (vec![VisibleDevice::Uuid("MIG-GPU-abc/1/0".into())], None)
        );
        assert_eq!(parse_visible_devices("1,foo,2"), (vec![VisibleDevice::Index(1)], Some("foo".into())));
        assert_eq!(parse_visible_devices(""), (vec![], None));
        assert_eq!(parse_visible_devices("-1"), (vec![], Some("-1".into())));
        let c = Config::from_sources(&Fake::env(&[("CUDA_VISIBLE_DEVICES", "1,x")]));
        assert_eq!(c.visible_devices, Some(vec![VisibleDevice::Index(1)]));
        assert_eq!(c.warnings.len(), 1);
    }

    #[test]
    fn override_env() {
        let p = parse_override_env(b"A=1\r\nB=x=y\n=skip\nC=\nnot a pair\nD=2\n");
        assert_eq!(p, vec![("A".into(), "1".into()), ("B".into(), "x=y".into()), ("C".into(), "".into())]);
        assert!(parse_override_env(b"").is_empty());
        let mut f = Fake::default();
        f.files.insert(PathBuf::from(OVERRIDE_ENV_PATH), b"CUDA_DEVICE_SM_LIMIT=5".to_vec());
        assert_eq!(read_override_env(&f), vec![("CUDA_DEVICE_SM_LIMIT".into(), "5".into())]);
        assert!(read_override_env(&Fake::default()).is_empty());
    }

    #[test]
    fn environ_parse() {
        let m = parse_environ(b"A=1\0B=2=3\0A=9\0junk\0=x\0");
        assert_eq!(m.get("A").unwrap(), "1");
        assert_eq!(m.get("B").unwrap(), "2=3");
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn system_sources_smoke() {
        // Only checks that the real implementation does not panic.
        let _ = Config::from_system();
    }
}
