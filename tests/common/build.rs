//! Building what the tests run: the shim, the simulated driver/NVML and `simctl` (a nested
//! `cargo build`), the soname symlink directory, and the C clients of `tests/c/` (one table of
//! jobs built up front, and [`c_program`] for the ones a test binary builds on demand), all with
//! one compiler invocation ([`gcc`]).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

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
    let profile = profile_dir.file_name().and_then(|n| n.to_str()).expect("profile dir name").to_string();
    let release = profile == "release";

    // 1. Nested cargo build of the cdylibs and simctl (cargo test does not build cdylib-only crates).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from(env!("CARGO")));
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root).arg("build").args([
        "-p",
        "libvgpu",
        "-p",
        "vgpu-sim-cuda",
        "-p",
        "vgpu-sim-nvml",
        "-p",
        "vgpu-simctl",
    ]);
    nested_target(&mut cmd, &profile_dir, None);
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
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run nested cargo build ({cargo:?}): {e}"));
    assert!(status.success(), "nested `cargo build` failed: {status}");

    let shim = match std::env::var_os("VGPU_TEST_SHIM").filter(|p| !p.is_empty()) {
        Some(p) => root.join(p), // an absolute value replaces root
        None => profile_dir.join("libvgpu.so"),
    };
    let libcuda = profile_dir.join("libcuda.so");
    let libnvml = profile_dir.join("libnvidia_ml.so");
    let simctl = profile_dir.join("simctl");
    for p in [&shim, &libcuda, &libnvml, &simctl] {
        assert!(p.exists(), "artifact missing after nested build: {}", p.display());
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
    let mut a =
        Artifacts { root, profile_dir, release, shim, simlib, bin, simctl, tmp_root, c_errors: BTreeMap::new() };
    a.c_errors = build_c(&a);
    a
}

/// A release artifact a test needs (`ci/release.sh` builds it under `target/release-floor*/`):
/// returns it when it exists. Missing, the test fails, unless `VGPU_ALLOW_NO_RELEASE=1` opts out
/// (then None, after a loud SKIP line): a check of what ships must not pass by not running.
#[track_caller]
pub fn release_artifact(path: &Path) -> Option<PathBuf> {
    if path.exists() {
        return Some(path.to_path_buf());
    }
    let msg = format!("release artifact {} missing: run ci/release.sh first", path.display());
    if std::env::var("VGPU_ALLOW_NO_RELEASE").as_deref() == Ok("1") {
        eprintln!("\n######## SKIP (VGPU_ALLOW_NO_RELEASE=1): {msg} ########\n");
        return None;
    }
    panic!("{msg} (or set VGPU_ALLOW_NO_RELEASE=1 to skip the checks of the shipped artifact)");
}

/// The shipped `libvgpu.so` the release checks test: `VGPU_RELEASE_SO` (ci/aarch64.sh points it at
/// `target/release-floor-aarch64/`), else `target/release-floor/libvgpu.so`.
pub fn release_so() -> PathBuf {
    match std::env::var_os("VGPU_RELEASE_SO").filter(|p| !p.is_empty()) {
        Some(p) => artifacts().root.join(p),
        None => artifacts().root.join("target/release-floor/libvgpu.so"),
    }
}

/// Point a nested `cargo build` at the tests' own target directory, or at its sibling SUB, and at
/// their target triple when they were built with `--target` (they then live in
/// `<dir>/<triple>/<profile>`; a cross-built test run under emulation must not build for the
/// host). Returns the directory whose `<profile>/` receives the outputs.
fn nested_target(cmd: &mut Command, profile_dir: &Path, sub: Option<&str>) -> PathBuf {
    let parent = profile_dir.parent().expect("profile dir has a parent");
    let triple = parent.file_name().and_then(|n| n.to_str()).filter(|n| n.contains("-linux-")).map(str::to_string);
    let (dir, out) = match (&triple, sub) {
        (Some(t), Some(s)) => {
            let d = parent.parent().expect("target dir").join(s);
            let out = d.join(t);
            (d, out)
        }
        (Some(_), None) => (parent.parent().expect("target dir").to_path_buf(), parent.to_path_buf()),
        (None, Some(s)) => (parent.join(s), parent.join(s)),
        (None, None) => (parent.to_path_buf(), parent.to_path_buf()),
    };
    cmd.arg("--target-dir").arg(&dir);
    if let Some(t) = triple {
        cmd.args(["--target", &t]);
    }
    out
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
            deps: vec![header.clone(), a.simlib.join("libcuda.so"), a.simlib.join("libnvidia-ml.so")],
            args: simlib_flags(&["-lcuda", "-lnvidia-ml"]),
        },
        CJob {
            out: "dlsym_client",
            sources: &["dlsym_client.c"],
            deps: vec![header.clone()],
            args: vec!["-ldl".into()],
        },
        CJob { out: "cudart_like", sources: &["cudart_like.c"], deps: vec![header.clone()], args: vec!["-ldl".into()] },
        CJob { out: "fork_client", sources: &["fork_client.c"], deps: vec![], args: vec!["-ldl".into()] },
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
        CJob { out: "maps_client", sources: &["maps_client.c"], deps: vec![], args: vec!["-ldl".into()] },
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
        CJob { out: "rtld_default", sources: &["rtld_default_main.c"], deps: vec![], args: vec!["-ldl".into()] },
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
    let tmp = a.bin.join(format!(".{}.tmp{}", j.out, std::process::id()));
    gcc(cdir, &tmp, &srcs, &j.args)?;
    std::fs::rename(&tmp, &out).map_err(|e| format!("rename compiled client: {e}"))
}

/// The one compiler invocation of the C clients: `$CC` (default gcc), gnu11, warnings as errors,
/// `-I tests/c`, writing `tmp` (renamed into place by the caller, so concurrent test binaries
/// never see a half-written file). `LD_PRELOAD` is not passed on to the compiler.
pub fn gcc(cdir: &Path, tmp: &Path, srcs: &[PathBuf], args: &[OsString]) -> Result<(), String> {
    let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("gcc"));
    let mut cmd = Command::new(&cc);
    cmd.args(["-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-Wno-unused-function"])
        .arg("-I")
        .arg(cdir)
        .arg("-o")
        .arg(tmp)
        .args(srcs)
        .args(args);
    cmd.env_remove("LD_PRELOAD");
    let o = cmd.output().map_err(|e| format!("cannot run {cc:?}: {e}"))?;
    if !o.status.success() {
        let _ = std::fs::remove_file(tmp);
        return Err(format!("{:?}\n{}{}", cmd, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
    }
    Ok(())
}

static ON_DEMAND: Mutex<Option<HashMap<String, Result<PathBuf, String>>>> = Mutex::new(None);

/// `testbin/<out>` built on demand from `tests/c/<sources>` with `-L simlib -L testbin` and `args`
/// (after the sources), once per test binary. Rebuilt when a source, `cuda_min.h` or the
/// simulated driver is newer, or the command line changed. Panics with the compiler's output.
#[track_caller]
pub fn c_program(out: &str, sources: &[&str], args: &[&str]) -> PathBuf {
    let mut g = ON_DEMAND.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    let r = map.entry(out.to_string()).or_insert_with(|| build_on_demand(out, sources, args)).clone();
    drop(g);
    r.unwrap_or_else(|e| panic!("{out} failed to compile:\n{e}"))
}

fn build_on_demand(out: &str, sources: &[&str], args: &[&str]) -> Result<PathBuf, String> {
    let a = artifacts();
    let cdir = a.root.join("tests/c");
    let srcs: Vec<PathBuf> = sources.iter().map(|s| cdir.join(s)).collect();
    let target = a.bin.join(out);
    // The command line is part of the cache key (a changed flag must rebuild).
    let stamp = a.bin.join(format!(".{out}.args"));
    let key = format!("{sources:?} {args:?}");
    let same_args = std::fs::read_to_string(&stamp).is_ok_and(|k| k == key);
    if let (Some(t), true) = (mtime(&target), same_args) {
        let mut deps = srcs.clone();
        deps.push(cdir.join("cuda_min.h"));
        deps.push(a.simlib.join("libcuda.so"));
        deps.push(a.simlib.join("libnvidia-ml.so"));
        if deps.iter().all(|d| mtime(d).is_some_and(|m| m <= t)) {
            return Ok(target);
        }
    }
    let tmp = a.bin.join(format!(".{out}.tmp{}", std::process::id()));
    let mut full: Vec<OsString> = vec!["-L".into(), a.simlib.clone().into(), "-L".into(), a.bin.clone().into()];
    full.extend(args.iter().map(OsString::from));
    gcc(&cdir, &tmp, &srcs, &full)?;
    std::fs::rename(&tmp, &target).map_err(|e| format!("rename: {e}"))?;
    let _ = std::fs::write(&stamp, key);
    Ok(target)
}

static FAULT_SHIM: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The shim built with the test-only feature `fault-injection` (src/faults.rs: `VGPU_TEST_FAULT`
/// simulates internal failures), in its own target directory `target/faults` so the ordinary
/// build never carries the switch. Built once per test binary, same profile as the tests.
#[track_caller]
pub fn fault_shim() -> PathBuf {
    let r = FAULT_SHIM.get_or_init(|| {
        let a = artifacts();
        let profile = a.profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug").to_string();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from(env!("CARGO")));
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&a.root)
            .args(["build", "-p", "libvgpu", "--features", "fault-injection"])
            .env_remove("LD_PRELOAD");
        let target_dir = nested_target(&mut cmd, &a.profile_dir, Some("faults"));
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let status = cmd.status().map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
        if !status.success() {
            return Err(format!("fault-injection build failed: {status}"));
        }
        let so = target_dir.join(&profile).join("libvgpu.so");
        if so.exists() { Ok(so) } else { Err(format!("missing after build: {}", so.display())) }
    });
    r.clone().unwrap_or_else(|e| panic!("{e}"))
}
