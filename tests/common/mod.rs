//! Shared harness of the integration tests.
//!
//! * [`artifacts`] builds (once per test binary) the shim, the simulated driver/NVML and `simctl`
//!   with a nested `cargo build`, creates the soname symlink directory `target/<profile>/simlib/`
//!   and compiles the C clients of `tests/c/` into `target/<profile>/testbin/`.
//! * [`Sandbox`] is a fresh per-test directory holding the simulated GPU's state file, the shim's
//!   region file and the simulator's call-count file, so tests run in parallel.
//! * [`Run`] spawns a client with a scrubbed environment, an optional `LD_PRELOAD` of the shim and a
//!   hard timeout, and returns an [`Out`] with helpers to parse `key=value` lines, shim hook logs
//!   and the simulator's per-variant call counts.
// Included by several test binaries; each uses a part.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Paths of everything the tests need, all absolute.
#[derive(Debug)]
pub struct Artifacts {
    /// Workspace root (the root package's manifest dir).
    pub root: PathBuf,
    /// `target/<profile>`.
    pub profile_dir: PathBuf,
    /// `true` when the tests run from `target/release`.
    pub release: bool,
    /// `target/<profile>/libvgpu.so`, or `VGPU_TEST_SHIM` (ci/test.sh runs the interception and
    /// injection tests a second time with the release artifact `target/release-floor/libvgpu.so`).
    pub shim: PathBuf,
    /// `target/<profile>/simlib` with `libcuda.so.1`, `libnvidia-ml.so.1`, … symlinks.
    pub simlib: PathBuf,
    /// `target/<profile>/testbin`: compiled C clients and helper libraries.
    pub bin: PathBuf,
    /// `target/<profile>/simctl`.
    pub simctl: PathBuf,
    /// `target/<profile>/testtmp`: parent of the per-test sandboxes.
    pub tmp_root: PathBuf,
    /// C clients that failed to compile: name → compiler output. Only the tests that use one fail.
    pub c_errors: BTreeMap<String, String>,
}

impl Artifacts {
    /// Path of a compiled test program or helper library in `testbin/` (panics with the compiler
    /// output if it failed to build).
    #[track_caller]
    pub fn bin(&self, name: &str) -> PathBuf {
        if let Some(e) = self.c_errors.get(name) {
            panic!("test client `{name}` failed to compile:\n{e}");
        }
        self.bin.join(name)
    }
}

static ARTIFACTS: OnceLock<Result<Artifacts, String>> = OnceLock::new();

/// Build everything once per test binary and return the paths. A failed build is remembered, so
/// the other tests of the binary fail fast with the same message instead of rebuilding.
#[track_caller]
pub fn artifacts() -> &'static Artifacts {
    let r = ARTIFACTS.get_or_init(|| {
        std::panic::catch_unwind(build_all).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into())
        })
    });
    match r {
        Ok(a) => a,
        Err(e) => panic!("test artifacts unavailable: {e}"),
    }
}

fn build_all() -> Artifacts {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The test executable lives in target[/<triple>]/<profile>/deps/<name>-<hash>.
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe has a parent");
    assert_eq!(
        deps.file_name().and_then(|n| n.to_str()),
        Some("deps"),
        "unexpected test executable location {}",
        exe.display()
    );
    let profile_dir = deps.parent().expect("deps has a parent").to_path_buf();
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile dir name")
        .to_string();
    let target_dir = profile_dir
        .parent()
        .expect("profile dir has a parent")
        .to_path_buf();
    let release = profile == "release";

    // 1. Nested cargo build of the cdylibs and simctl (cargo test does not build cdylib-only crates).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from(env!("CARGO")));
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root)
        .arg("build")
        .args([
            "-p",
            "libvgpu",
            "-p",
            "vgpu-sim-cuda",
            "-p",
            "vgpu-sim-nvml",
            "-p",
            "vgpu-simctl",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    // Do not let the environment of the test run leak a preload into cargo/rustc.
    cmd.env_remove("LD_PRELOAD");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run nested cargo build ({cargo:?}): {e}"));
    assert!(status.success(), "nested `cargo build` failed: {status}");

    let shim = match std::env::var_os("VGPU_TEST_SHIM").filter(|p| !p.is_empty()) {
        Some(p) => root.join(p), // an absolute value replaces root
        None => profile_dir.join("libvgpu.so"),
    };
    let libcuda = profile_dir.join("libcuda.so");
    let libnvml = profile_dir.join("libnvidia_ml.so");
    let simctl = profile_dir.join("simctl");
    for p in [&shim, &libcuda, &libnvml, &simctl] {
        assert!(
            p.exists(),
            "artifact missing after nested build: {}",
            p.display()
        );
    }

    // 2. Soname symlinks.
    let simlib = profile_dir.join("simlib");
    std::fs::create_dir_all(&simlib).expect("create simlib dir");
    for (link, target) in [
        ("libcuda.so.1", "../libcuda.so"),
        ("libcuda.so", "../libcuda.so"),
        ("libnvidia-ml.so.1", "../libnvidia_ml.so"),
        ("libnvidia-ml.so", "../libnvidia_ml.so"),
    ] {
        symlink_atomic(Path::new(target), &simlib.join(link));
    }

    // 3. C clients and helper libraries.
    let bin = profile_dir.join("testbin");
    std::fs::create_dir_all(&bin).expect("create testbin dir");
    let tmp_root = profile_dir.join("testtmp");
    std::fs::create_dir_all(&tmp_root).expect("create testtmp dir");
    let mut a = Artifacts {
        root,
        profile_dir,
        release,
        shim,
        simlib,
        bin,
        simctl,
        tmp_root,
        c_errors: BTreeMap::new(),
    };
    a.c_errors = build_c(&a);
    a
}

/// Create/replace a symlink atomically (other test binaries may be doing the same).
fn symlink_atomic(target: &Path, link: &Path) {
    if std::fs::read_link(link).ok().as_deref() == Some(target) {
        return;
    }
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).expect("symlink");
    std::fs::rename(&tmp, link).expect("rename symlink");
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// One gcc invocation: `sources` compiled/linked into `bin/<out>` with extra `args`.
struct CJob<'a> {
    out: &'a str,
    sources: &'a [&'a str],
    /// Extra inputs whose change forces a rebuild (headers, libraries linked against).
    deps: Vec<PathBuf>,
    args: Vec<OsString>,
}

fn build_c(a: &Artifacts) -> BTreeMap<String, String> {
    let mut errors = BTreeMap::new();
    let c = a.root.join("tests/c");
    let header = c.join("cuda_min.h");
    let simlib_flags = |extra: &[&str]| -> Vec<OsString> {
        let mut v: Vec<OsString> = vec!["-L".into(), a.simlib.clone().into()];
        v.extend(extra.iter().map(OsString::from));
        v
    };
    let origin_rpath: OsString = "-Wl,-rpath,$ORIGIN".into();
    let jobs: Vec<CJob> = vec![
        CJob {
            out: "direct",
            sources: &["direct.c"],
            deps: vec![
                header.clone(),
                a.simlib.join("libcuda.so"),
                a.simlib.join("libnvidia-ml.so"),
            ],
            args: simlib_flags(&["-lcuda", "-lnvidia-ml"]),
        },
        CJob {
            out: "dlsym_client",
            sources: &["dlsym_client.c"],
            deps: vec![header.clone()],
            args: vec!["-ldl".into()],
        },
        CJob {
            out: "cudart_like",
            sources: &["cudart_like.c"],
            deps: vec![header.clone()],
            args: vec!["-ldl".into()],
        },
        CJob {
            out: "fork_client",
            sources: &["fork_client.c"],
            deps: vec![],
            args: vec!["-ldl".into()],
        },
        CJob {
            out: "dlclose_reopen",
            sources: &["dlclose_reopen.c"],
            deps: vec![header.clone()],
            args: vec!["-ldl".into()],
        },
        CJob {
            out: "race_client",
            sources: &["race_client.c"],
            deps: vec![header.clone()],
            args: vec!["-pthread".into(), "-ldl".into()],
        },
        CJob {
            out: "maps_client",
            sources: &["maps_client.c"],
            deps: vec![],
            args: vec!["-ldl".into()],
        },
        CJob {
            out: "probe_client",
            sources: &["probe_client.c"],
            deps: vec![header.clone()],
            args: vec!["-ldl".into()],
        },
        CJob {
            out: "old_dlsym_client",
            sources: &["old_dlsym_client.c"],
            deps: vec![header.clone()],
            args: vec!["-ldl".into()],
        },
        // RTLD_NEXT / RTLD_DEFAULT regression (docs/shim-notes.md §2).
        CJob {
            out: "libreal.so",
            sources: &["rtld_real.c"],
            deps: vec![],
            args: vec!["-shared".into(), "-fPIC".into()],
        },
        CJob {
            out: "libwrap.so",
            sources: &["rtld_wrap.c"],
            deps: vec![],
            args: vec!["-shared".into(), "-fPIC".into(), "-ldl".into()],
        },
        CJob {
            out: "libpriv.so",
            sources: &["rtld_priv.c"],
            deps: vec![],
            args: vec!["-shared".into(), "-fPIC".into()],
        },
        CJob {
            out: "libdlopen_spy.so",
            sources: &["dlopen_spy.c"],
            deps: vec![],
            args: vec!["-shared".into(), "-fPIC".into(), "-ldl".into()],
        },
        // Control: a naive preload whose dlsym calls the real one (must break the RTLD tests).
        CJob {
            out: "libnaive_shim.so",
            sources: &["rtld_naive_shim.c"],
            deps: vec![],
            args: vec![
                "-shared".into(),
                "-fPIC".into(),
                "-O0".into(),
                "-fno-optimize-sibling-calls".into(),
                "-ldl".into(),
            ],
        },
    ];
    for j in &jobs {
        if let Err(e) = compile(a, &c, j) {
            errors.insert(j.out.to_string(), e);
        }
    }
    // Programs/libraries that link against the helper libraries just built.
    let later: Vec<CJob> = vec![
        CJob {
            out: "rtld_next",
            sources: &["rtld_next_main.c"],
            deps: vec![a.bin.join("libwrap.so"), a.bin.join("libreal.so")],
            args: vec![
                "-L".into(),
                a.bin.clone().into(),
                "-Wl,--no-as-needed".into(),
                "-lwrap".into(),
                "-lreal".into(),
                origin_rpath.clone(),
            ],
        },
        CJob {
            out: "libplugin.so",
            sources: &["rtld_plugin.c"],
            deps: vec![a.bin.join("libpriv.so")],
            args: vec![
                "-shared".into(),
                "-fPIC".into(),
                "-L".into(),
                a.bin.clone().into(),
                "-Wl,--no-as-needed".into(),
                "-lpriv".into(),
                "-ldl".into(),
                origin_rpath.clone(),
            ],
        },
        CJob {
            out: "rtld_default",
            sources: &["rtld_default_main.c"],
            deps: vec![],
            args: vec!["-ldl".into()],
        },
    ];
    for j in &later {
        if let Err(e) = compile(a, &c, j) {
            errors.insert(j.out.to_string(), e);
        }
    }
    errors
}

fn compile(a: &Artifacts, cdir: &Path, j: &CJob) -> Result<(), String> {
    let out = a.bin.join(j.out);
    let srcs: Vec<PathBuf> = j.sources.iter().map(|s| cdir.join(s)).collect();
    if let Some(t) = mtime(&out) {
        let newer = srcs.iter().chain(j.deps.iter()).any(|d| match mtime(d) {
            Some(m) => m > t,
            None => true,
        });
        if !newer {
            return Ok(());
        }
    }
    let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("gcc"));
    let tmp = a.bin.join(format!(".{}.tmp{}", j.out, std::process::id()));
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-std=gnu11",
        "-O1",
        "-g",
        "-Wall",
        "-Werror",
        "-Wno-unused-function",
    ])
    .arg("-I")
    .arg(cdir)
    .arg("-o")
    .arg(&tmp)
    .args(&srcs)
    .args(&j.args);
    cmd.env_remove("LD_PRELOAD");
    let o = cmd
        .output()
        .map_err(|e| format!("cannot run {cc:?}: {e}"))?;
    if !o.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "{:?}\n{}{}",
            cmd,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    std::fs::rename(&tmp, &out).map_err(|e| format!("rename compiled client: {e}"))
}

// ------------------------------------------------------------------------------------------------
// Sandboxes

static SANDBOX_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory per test: `sim.state` (`VGPU_SIM_STATE`), `region.cache`
/// (`CUDA_DEVICE_MEMORY_SHARED_CACHE`), `counts` (`VGPU_SIM_COUNT_FILE`). Removed on drop unless the
/// test is panicking (then its path is printed for inspection).
pub struct Sandbox {
    pub dir: PathBuf,
}

impl Sandbox {
    pub fn new(name: &str) -> Sandbox {
        let a = artifacts();
        let n = SANDBOX_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = a
            .tmp_root
            .join(format!("{name}.{}.{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create sandbox");
        Sandbox { dir }
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("sim.state")
    }
    pub fn region(&self) -> PathBuf {
        self.dir.join("region.cache")
    }
    pub fn counts_file(&self) -> PathBuf {
        self.dir.join("counts")
    }
    /// A subdirectory (created) of the sandbox.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::create_dir_all(&p).expect("create sandbox subdir");
        p
    }
    /// Start building a run of `program` (absolute path, or a name looked up in `testbin/`).
    pub fn run(&self, program: impl AsRef<Path>) -> Run<'_> {
        let p = program.as_ref();
        let program = if p.is_absolute() {
            p.to_path_buf()
        } else {
            artifacts().bin(&p.to_string_lossy())
        };
        Run {
            sb: self,
            program,
            args: Vec::new(),
            env: Vec::new(),
            shim: false,
            ld_library_path: Some(artifacts().simlib.clone()),
            timeout: Duration::from_secs(15),
        }
    }
    /// Simulator call counts summed over all processes that wrote to the count file, by symbol.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        parse_counts(&std::fs::read_to_string(self.counts_file()).unwrap_or_default())
    }
    /// Clear the count file (e.g. between a baseline and a shim run in the same sandbox).
    pub fn reset_counts(&self) {
        let _ = std::fs::remove_file(self.counts_file());
    }
}

/// The shim's fallback region files for `region` (docs/design.md "Where the region lives": named
/// after an FNV-1a hash of the configured path, in /dev/shm and /tmp), which live outside the
/// sandbox: removed with it.
pub fn remove_fallback_regions(region: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let h = region.as_os_str().as_bytes().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ c as u64).wrapping_mul(0x0100_0000_01b3));
    let tag = format!("libvgpu-region-{h:016x}");
    for dir in ["/dev/shm", "/tmp"] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().contains(&tag) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        remove_fallback_regions(&self.region());
        if std::thread::panicking() {
            eprintln!("(sandbox kept for inspection: {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Parse `<pid> <symbol> <count>` lines into per-symbol totals.
pub fn parse_counts(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            continue;
        }
        if let Ok(c) = f[2].parse::<u64>() {
            *m.entry(f[1].to_string()).or_insert(0) += c;
        }
    }
    m
}

// ------------------------------------------------------------------------------------------------
// Running clients

/// Environment variable prefixes/names never inherited by a client.
const SCRUB_PREFIXES: &[&str] = &["CUDA_", "VGPU_", "LIBCUDA_", "NVIDIA_", "HAMI_", "LD_"];
const SCRUB_NAMES: &[&str] = &[
    "GPU_CORE_UTILIZATION_POLICY",
    "ACTIVE_OOM_KILLER",
    "RECORD_KERNEL_INTERVAL",
    "MEMORY_LIMIT_TOLERATION_RATE",
];

pub struct Run<'a> {
    sb: &'a Sandbox,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    shim: bool,
    ld_library_path: Option<PathBuf>,
    timeout: Duration,
}

impl<'a> Run<'a> {
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn args<I, S>(mut self, it: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }
    /// Set a variable (applied after the sandbox defaults, so it can override them).
    pub fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> Self {
        self.env.push((k.into(), Some(v.into())));
        self
    }
    /// Remove a variable (including a sandbox default such as `CUDA_DEVICE_MEMORY_SHARED_CACHE`).
    pub fn env_remove(mut self, k: impl Into<OsString>) -> Self {
        self.env.push((k.into(), None));
        self
    }
    /// `LD_PRELOAD` the shim.
    pub fn shim(mut self, on: bool) -> Self {
        self.shim = on;
        self
    }
    /// `LD_PRELOAD` the shim with `LIBCUDA_LOG_LEVEL=4`.
    pub fn shim_debug(self) -> Self {
        self.shim(true).env("LIBCUDA_LOG_LEVEL", "4")
    }
    /// Replace `LD_LIBRARY_PATH` (default: the simlib dir); `None` leaves it unset.
    pub fn ld_library_path(mut self, p: Option<PathBuf>) -> Self {
        self.ld_library_path = p;
        self
    }
    pub fn timeout_secs(mut self, s: u64) -> Self {
        self.timeout = Duration::from_secs(s);
        self
    }

    /// Spawn, wait (killing the process group at the timeout) and capture. Panics on timeout.
    pub fn go(self) -> Out {
        let a = artifacts();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (k, _) in std::env::vars_os() {
            let ks = k.to_string_lossy();
            if SCRUB_PREFIXES.iter().any(|p| ks.starts_with(p))
                || SCRUB_NAMES.contains(&ks.as_ref())
            {
                cmd.env_remove(&k);
            }
        }
        cmd.env("VGPU_SIM_STATE", self.sb.state())
            .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", self.sb.region())
            .env("VGPU_SIM_COUNT_FILE", self.sb.counts_file());
        if let Some(p) = &self.ld_library_path {
            cmd.env("LD_LIBRARY_PATH", p);
        }
        if self.shim {
            cmd.env("LD_PRELOAD", &a.shim);
        }
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.current_dir(&self.sb.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let desc = format!("{:?} {:?} (shim={})", self.program, self.args, self.shim);
        let start = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
        let pid = child.id();
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = so.read_to_end(&mut v);
            v
        });
        let t_err = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = se.read_to_end(&mut v);
            v
        });
        let mut timed_out = false;
        let status = loop {
            match child.try_wait().expect("try_wait") {
                Some(s) => break s,
                None if start.elapsed() >= self.timeout => {
                    timed_out = true;
                    // Kill the whole process group (the client may have children, e.g. `sh -c`).
                    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
                    break child.wait().expect("wait after kill");
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        // Anything still holding the pipes (grandchildren) belongs to the group: make sure it dies.
        unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        let stdout = String::from_utf8_lossy(&t_out.join().unwrap()).into_owned();
        let stderr = String::from_utf8_lossy(&t_err.join().unwrap()).into_owned();
        let out = Out {
            desc,
            pid,
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            elapsed: start.elapsed(),
        };
        assert!(
            !timed_out,
            "TIMEOUT after {:?}: {}",
            self.timeout,
            out.dump()
        );
        out
    }
}

/// Result of a client run.
#[derive(Debug, Clone)]
pub struct Out {
    pub desc: String,
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    pub fn dump(&self) -> String {
        format!(
            "{}\n  pid={} code={:?} signal={:?} elapsed={:?}\n--- stdout ---\n{}--- stderr ---\n{}--------------",
            self.desc, self.pid, self.code, self.signal, self.elapsed, self.stdout, self.stderr
        )
    }
    /// Assert exit code 0 and no signal.
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.code, Some(0), "client failed: {}", self.dump());
        self
    }
    /// `key=value` lines of stdout, in order (other lines ignored).
    pub fn kv(&self) -> Vec<(String, String)> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            })
            .map(|(k, v)| (k.to_string(), v.trim_end().to_string()))
            .collect()
    }
    /// `kv()` without the given keys (for values that legitimately differ between runs).
    pub fn kv_without(&self, skip: &[&str]) -> Vec<(String, String)> {
        self.kv()
            .into_iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .collect()
    }
    /// Value of one key (last occurrence).
    pub fn get(&self, key: &str) -> Option<String> {
        self.kv()
            .into_iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
    #[track_caller]
    pub fn val(&self, key: &str) -> String {
        self.get(key)
            .unwrap_or_else(|| panic!("key `{key}` missing: {}", self.dump()))
    }
    /// The shim's log lines: (pid, level, message).
    pub fn shim_logs(&self) -> Vec<(u32, String, String)> {
        self.stderr
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("[libvgpu ")?;
                let (pid, rest) = rest.split_once("] ")?;
                let (level, msg) = rest.split_once(": ")?;
                Some((pid.parse().ok()?, level.to_string(), msg.to_string()))
            })
            .collect()
    }
    /// Hook names logged at debug level (`[libvgpu <pid>] DEBUG: hook <name>`) with counts.
    pub fn hooks(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for (_, level, msg) in self.shim_logs() {
            if level != "DEBUG" {
                continue;
            }
            if let Some(name) = msg.strip_prefix("hook ") {
                let name = name.split_whitespace().next().unwrap_or("");
                *m.entry(name.to_string()).or_insert(0) += 1;
            }
        }
        m
    }
    /// Assert that each name was logged as a hook at least once.
    #[track_caller]
    pub fn assert_hooked(&self, names: &[&str]) {
        let h = self.hooks();
        let missing: Vec<&&str> = names.iter().filter(|n| !h.contains_key(**n)).collect();
        assert!(
            missing.is_empty(),
            "hooks not logged: {missing:?}; logged: {h:?}\n{}",
            self.dump()
        );
    }
    /// Assert that none of the names was logged as a hook.
    #[track_caller]
    pub fn assert_not_hooked(&self, names: &[&str]) {
        let h = self.hooks();
        let present: Vec<&&str> = names.iter().filter(|n| h.contains_key(**n)).collect();
        assert!(
            present.is_empty(),
            "unexpected hooks logged: {present:?}\n{}",
            self.dump()
        );
    }
    /// Assert the shim logged no ERROR line.
    #[track_caller]
    pub fn assert_no_shim_errors(&self) {
        let errs: Vec<_> = self
            .shim_logs()
            .into_iter()
            .filter(|(_, l, _)| l == "ERROR")
            .collect();
        assert!(
            errs.is_empty(),
            "shim logged errors: {errs:?}\n{}",
            self.dump()
        );
    }
}

/// Whether the machine has a real `libcuda.so.1` visible to the dynamic loader without
/// `LD_LIBRARY_PATH` (then "no driver anywhere" cannot be simulated).
pub fn system_has_libcuda() -> bool {
    let ld = Command::new("/sbin/ldconfig")
        .arg("-p")
        .output()
        .or_else(|_| Command::new("ldconfig").arg("-p").output());
    match ld {
        Ok(o) => String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"),
        Err(_) => false,
    }
}

/// Run a tool (nm, readelf, objdump) and return stdout; panic on failure.
pub fn tool(prog: &str, args: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {prog}: {e}"));
    assert!(
        o.status.success(),
        "{prog} {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
