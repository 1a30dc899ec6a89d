//! The release artifact built for old container images: `ci/release.sh` builds
//! `target/release-floor/libvgpu.so` with cargo-zigbuild against glibc 2.17 (recorded in
//! `target/release-floor/FLOOR`). This test checks that artifact (or `VGPU_RELEASE_SO`):
//!
//! * the highest `GLIBC_` symbol version it requires is ≤ its floor, and the floor is 2.17
//!   (a 2.28 fallback fails unless `VGPU_ACCEPT_GLIBC_FLOOR=2.28`);
//! * its `NEEDED` list has only glibc's own libraries (no libgcc_s, libcuda, libnvidia-ml);
//! * it exports `dlsym` and only `cu*`/`nvml*` functions, including the entry points every client
//!   needs, and (under CI, where release.sh has just run) exactly what the native build exports;
//! * it works: preloaded into a C client on the simulated GPU it intercepts and enforces the limit,
//!   and a shell with it preloaded runs silently.
//!
//! Missing artifact: FAIL (the test command runs ci/release.sh first), unless
//! `VGPU_ALLOW_NO_RELEASE=1` opts out (a loud SKIP).

mod common;
#[path = "py/rw_common.rs"]
mod rw;

use common::*;
use rw::*;
use std::collections::BTreeSet;
use std::path::PathBuf;

const WANT_FLOOR: &str = "2.17";
const REQUIRED: &[&str] = &[
    "dlsym",
    "cuGetProcAddress",
    "cuGetProcAddress_v2",
    "cuInit",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetInfo_v2",
    "cuMemAllocManaged",
    "cuMemAllocAsync",
    "cuLaunchKernel",
    "cuDevicePrimaryCtxRetain",
    "cuDeviceTotalMem_v2",
    "nvmlInit",
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
];
const ALLOWED_NEEDED: &[&str] = &[
    "libc.so.6",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "libm.so.6",
    "librt.so.1",
];

/// The artifact and its floor, or None (missing and opted out).
fn artifact() -> Option<(PathBuf, String)> {
    let so = release_so();
    let floor_file = so.with_file_name("FLOOR");
    let so = release_artifact(&so)?;
    let floor =
        std::fs::read_to_string(&floor_file).map(|s| s.trim().to_string()).unwrap_or_else(|_| WANT_FLOOR.into());
    Some((so, floor))
}

fn version_key(v: &str) -> Vec<u32> {
    v.split('.').map(|x| x.parse().unwrap_or(0)).collect()
}

fn dyn_exports(so: &std::path::Path) -> BTreeSet<String> {
    tool("objdump", &[std::ffi::OsStr::new("-T"), so.as_os_str()])
        .lines()
        .filter(|l| l.contains(" DF ") && !l.contains("*UND*"))
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

#[test]
fn release_floor_glibc_needed_and_exports() {
    let Some((so, floor)) = artifact() else {
        return;
    };
    // Floor: 2.17, or an explicitly accepted fallback.
    if floor != WANT_FLOOR {
        let accepted = std::env::var("VGPU_ACCEPT_GLIBC_FLOOR").ok();
        assert_eq!(
            accepted.as_deref(),
            Some(floor.as_str()),
            "release artifact was built for glibc {floor}, not {WANT_FLOOR} (ci/release.sh fell back); \
             set VGPU_ACCEPT_GLIBC_FLOOR={floor} to accept"
        );
        eprintln!("### WARNING: release artifact floor is glibc {floor}, accepted by VGPU_ACCEPT_GLIBC_FLOOR");
    }
    // 1. Highest GLIBC_ version.
    let t = tool("objdump", &[std::ffi::OsStr::new("-T"), so.as_os_str()]);
    let mut versions: Vec<&str> = t
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect();
    versions.sort_by_key(|v| version_key(v));
    versions.dedup();
    let max = versions.last().expect("no GLIBC_ versions in objdump -T");
    assert!(
        version_key(max) <= version_key(&floor),
        "{} requires GLIBC_{max} > floor {floor}: {:?}\n{}",
        so.display(),
        versions,
        t.lines().filter(|l| l.contains(&format!("GLIBC_{max}"))).collect::<Vec<_>>().join("\n")
    );
    // 2. NEEDED.
    let d = tool("readelf", &[std::ffi::OsStr::new("-d"), so.as_os_str()]);
    let needed: Vec<String> = d
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).map(|s| s.trim_end_matches(']').to_string()))
        .collect();
    for n in &needed {
        assert!(ALLOWED_NEEDED.contains(&n.as_str()), "NEEDED {n} is not allowed (all: {needed:?})");
    }
    assert!(needed.iter().any(|n| n == "libc.so.6"), "{needed:?}");
    // 3. Exports.
    let ex = dyn_exports(&so);
    let missing: Vec<&&str> = REQUIRED.iter().filter(|r| !ex.contains(**r)).collect();
    assert!(missing.is_empty(), "exports missing: {missing:?}");
    let odd: Vec<&String> = ex
        .iter()
        .filter(|s| {
            !(s.as_str() == "dlsym"
                || (s.starts_with("cu") && s[2..].starts_with(|c: char| c.is_ascii_uppercase()))
                || (s.starts_with("nvml") && s[4..].starts_with(|c: char| c.is_ascii_uppercase())))
        })
        .collect();
    assert!(odd.is_empty(), "unexpected exports (not dlsym/cu*/nvml*): {odd:?}");
    // Same surface as the native build of this tree (only meaningful when both are fresh: CI).
    let native = dyn_exports(&artifacts().shim);
    if native != ex {
        let only_native: Vec<_> = native.difference(&ex).collect();
        let only_floor: Vec<_> = ex.difference(&native).collect();
        let msg = format!(
            "export lists differ between the native build and {} (stale? rerun ci/release.sh): \
             only native {only_native:?}, only floor {only_floor:?}",
            so.display()
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("### WARNING: {msg}");
    }
    eprintln!(
        "release artifact {}: floor {floor}, max GLIBC_{max}, NEEDED {needed:?}, {} exports",
        so.display(),
        ex.len()
    );
}

/// The floor build intercepts and enforces on the simulated GPU (cudart-style loading: dlopen +
/// cuGetProcAddress), and a non-CUDA process with it preloaded runs silently.
#[test]
fn release_floor_artifact_works_preloaded() {
    let Some((so, _)) = artifact() else { return };
    let sb = Sandbox::new("floor-works");
    let out = sb
        .run(limit_client())
        .env("LD_PRELOAD", &so)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "512m")
        .env("LIBCUDA_LOG_LEVEL", "4")
        .args(["info", "alloc:600", "alloc:100", "launch:4", "free_all"])
        .timeout_secs(60)
        .go();
    out.ok();
    assert_eq!(u64_of(&out, "s0.total"), 512 * MIB, "{}", out.dump());
    expect(&out, "s1.alloc", OOM);
    expect(&out, "s2.alloc", "0");
    expect(&out, "s3.launch", "0");
    out.assert_hooked(&["cuMemGetInfo_v2", "cuMemAlloc_v2", "cuLaunchKernel"]);
    out.assert_no_shim_errors();
    let r = Region::read(&sb.region()).expect("the floor build created the region");
    assert_eq!(r.magic(), MAGIC);
    assert_eq!(r.limit(0), 512 * MIB, "{}", r.describe());

    let sh = sb.run("/bin/sh").env("LD_PRELOAD", &so).args(["-c", "ls / >/dev/null && cat /proc/self/maps"]).go();
    sh.ok();
    assert!(sh.stderr.is_empty(), "a non-CUDA process printed: {}", sh.dump());
    assert!(sh.stdout.contains("libvgpu.so"), "not preloaded: {}", sh.dump());
    assert!(!sh.stdout.contains("libcuda"), "a non-CUDA process loaded the driver: {}", sh.dump());
}

// --- what every process pays, pinned ----------------------------------------------------------

/// The first stage's `NEEDED` list and its highest `GLIBC_` version, exactly: each library costs
/// every exec of the container ~40 µs, and a newer symbol version kills old images. Change these
/// only on purpose (and re-measure with ci/exec_cost.sh).
const FIRST_STAGE_NEEDED: &[&str] = &["libc.so.6"];
/// (glibc's first symbol version on each architecture: nothing newer is used).
const FIRST_STAGE_MAX_GLIBC: &str = if cfg!(target_arch = "aarch64") { "2.17" } else { "2.2.5" };
/// Upper bounds with headroom (today: 10 relocations, 11 KiB of segments).
const FIRST_STAGE_MAX_RELOCS: usize = 32;
const FIRST_STAGE_MAX_IMAGE: u64 = 64 * 1024;

fn needed_of(so: &std::path::Path) -> Vec<String> {
    tool("readelf", &[std::ffi::OsStr::new("-dW"), so.as_os_str()])
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).map(|s| s.trim_end_matches(']').to_string()))
        .collect()
}

fn max_glibc_of(so: &std::path::Path) -> String {
    let t = tool("objdump", &[std::ffi::OsStr::new("-T"), so.as_os_str()]);
    let mut v: Vec<String> = t
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .collect();
    v.sort_by_key(|x| version_key(x));
    v.pop().expect("no GLIBC_ versions")
}

/// The engine the artifact carries in `.vgpu_engine`, extracted into DIR.
fn extract_engine(so: &std::path::Path, dir: &std::path::Path) -> PathBuf {
    let eng = dir.join("engine.so");
    let o = std::process::Command::new("objcopy")
        .arg(format!("--dump-section=.vgpu_engine={}", eng.display()))
        .arg(so)
        .arg(dir.join("stage1-copy.so"))
        .output()
        .expect("run objcopy");
    assert!(o.status.success(), "no .vgpu_engine section in {}: {}", so.display(), String::from_utf8_lossy(&o.stderr));
    eng
}

#[test]
fn release_first_stage_is_tiny_and_pinned() {
    let Some((so, floor)) = artifact() else { return };
    let needed = needed_of(&so);
    assert_eq!(needed, FIRST_STAGE_NEEDED, "the first stage's NEEDED list changed");
    assert_eq!(max_glibc_of(&so), FIRST_STAGE_MAX_GLIBC, "the first stage's highest GLIBC_ version changed");
    let l = tool("readelf", &[std::ffi::OsStr::new("-lW"), so.as_os_str()]);
    assert!(!l.lines().any(|x| x.trim_start().starts_with("TLS")), "PT_TLS in the first stage:\n{l}");
    let image: u64 = l
        .lines()
        .filter(|x| x.trim_start().starts_with("LOAD"))
        .map(|x| {
            let f: Vec<&str> = x.split_whitespace().collect();
            u64::from_str_radix(f[5].trim_start_matches("0x"), 16).unwrap()
        })
        .sum();
    assert!(image <= FIRST_STAGE_MAX_IMAGE, "first stage maps {image} bytes:\n{l}");
    let d = tool("readelf", &[std::ffi::OsStr::new("-dW"), so.as_os_str()]);
    for tag in ["(INIT)", "(INIT_ARRAY)", "(PREINIT_ARRAY)"] {
        assert!(!d.contains(tag), "the first stage has a constructor {tag}:\n{d}");
    }
    let r = tool("readelf", &[std::ffi::OsStr::new("-rW"), so.as_os_str()]);
    let relocs = r.lines().filter(|x| x.contains("R_X86_64_")).count();
    assert!(relocs <= FIRST_STAGE_MAX_RELOCS, "{relocs} relocations in the first stage:\n{r}");

    // The engine: same hooked names (plus its attach entry point), its own floor and NEEDED list.
    let sb = Sandbox::new("floor-engine");
    let eng = extract_engine(&so, &sb.dir);
    let max = max_glibc_of(&eng);
    assert!(version_key(&max) <= version_key(&floor), "engine needs GLIBC_{max} > floor {floor}");
    for n in needed_of(&eng) {
        assert!(ALLOWED_NEEDED.contains(&n.as_str()), "engine NEEDED {n} is not allowed");
    }
    let mut want = dyn_exports(&so);
    want.insert("vgpu_engine_attach".into());
    assert_eq!(dyn_exports(&eng), want, "the first stage's trampolines do not match the engine's hooks");
    eprintln!("first stage: NEEDED {needed:?}, {relocs} relocations, {image} bytes mapped; engine GLIBC_{max}");
}

/// Processes that never touch CUDA (a shell, ls, cat, python3 using ctypes, i.e. dlsym) with the
/// artifact preloaded and no driver anywhere: print nothing, run one thread, map neither a driver
/// nor the engine (nor libdl/libpthread).
#[test]
fn release_artifact_in_non_cuda_processes_maps_nothing() {
    let Some((so, _)) = artifact() else { return };
    if system_has_libcuda() {
        eprintln!("SKIP: this machine has a real libcuda; 'no driver anywhere' cannot be arranged");
        return;
    }
    let sb = Sandbox::new("floor-quiet");
    let py = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(PathBuf::from)
        .unwrap_or_else(|| python().to_path_buf());
    let py_code = "import ctypes, sys\n\
                   libc = ctypes.CDLL(None)\n\
                   libc.getpid(); libc.close; libc.clock_gettime\n\
                   sys.stdout.write(open('/proc/self/status').read() + open('/proc/self/maps').read())\n";
    let runs: Vec<(PathBuf, Vec<&str>)> = vec![
        ("/bin/sh".into(), vec!["-c", "ls / >/dev/null && cat /proc/$$/status /proc/$$/maps"]),
        ("/bin/cat".into(), vec!["/proc/self/status", "/proc/self/maps"]),
        (py, vec!["-c", py_code]),
    ];
    for (prog, args) in runs {
        let o = sb.run(&prog).env("LD_PRELOAD", &so).ld_library_path(None).args(args).go();
        o.ok();
        assert!(o.stderr.is_empty(), "{} printed: {}", prog.display(), o.dump());
        assert!(o.stdout.contains("libvgpu.so"), "not preloaded: {}", o.dump());
        for bad in ["libcuda", "libnvidia-ml", "libvgpu-engine", "memfd:", "libdl.so", "libpthread.so"] {
            assert!(!o.stdout.contains(bad), "{} maps {bad}: {}", prog.display(), o.dump());
        }
        assert!(
            o.stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Threads:", "1"]),
            "{} runs more than one thread: {}",
            prog.display(),
            o.dump()
        );
    }
    // ls: the same output as without the preload, and nothing on stderr.
    let with = sb.run("/bin/ls").env("LD_PRELOAD", &so).ld_library_path(None).args(["-a", "/"]).go();
    let without = sb.run("/bin/ls").ld_library_path(None).args(["-a", "/"]).go();
    with.ok();
    assert!(with.stderr.is_empty(), "ls printed: {}", with.dump());
    assert_eq!(with.stdout, without.stdout);
}

/// A damaged artifact (its engine section gone) must not lift the limit: one line on stderr,
/// and every hooked entry point fails (here cuGetProcAddress, so the client gets no cuInit),
/// while a non-CUDA process still runs silently.
#[test]
fn release_artifact_without_engine_fails_closed() {
    let Some((so, _)) = artifact() else { return };
    let sb = Sandbox::new("floor-noengine");
    let broken = sb.dir.join("libvgpu.so");
    let o = std::process::Command::new("objcopy")
        .args(["--remove-section", ".vgpu_engine"])
        .arg(&so)
        .arg(&broken)
        .output()
        .expect("run objcopy");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = sb.run(limit_client()).env("LD_PRELOAD", &broken).args(["info"]).go();
    assert_ne!(out.code, Some(0), "the client initialised CUDA without the engine: {}", out.dump());
    let errors: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("[libvgpu]")).collect();
    assert_eq!(errors.len(), 1, "{}", out.dump());
    assert!(errors[0].contains("cannot map the engine"), "{}", out.dump());
    assert!(out.get("s0.total").is_none(), "cuMemGetInfo answered: {}", out.dump());
    let sh = sb.run("/bin/sh").env("LD_PRELOAD", &broken).args(["-c", "true"]).go();
    sh.ok();
    assert!(sh.stderr.is_empty(), "{}", sh.dump());
}

/// Without a usable `/proc/self/fd` (here: a tmpfs over /proc in a private mount namespace) the
/// first stage maps its engine from a temporary file instead, removes the file, and the client
/// runs limited as usual. Same namespace policy as tests/injection.rs.
#[test]
fn release_artifact_maps_engine_without_proc() {
    let Some((so, _)) = artifact() else { return };
    let sb = Sandbox::new("floor-noproc");
    let tmp = sb.subdir("tmp");
    let unshare = ["/usr/bin/unshare", "/bin/unshare"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| "/usr/bin/unshare".into());
    let probe = std::process::Command::new(&unshare).args(["-m", "true"]).env_remove("LD_PRELOAD").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("\n### SKIP: this machine refuses mount namespaces (`unshare -m`) ###\n");
        if std::env::var("VGPU_ALLOW_SKIP_NAMESPACES").as_deref() == Ok("1") {
            return;
        }
        panic!("namespaces refused; set VGPU_ALLOW_SKIP_NAMESPACES=1 to accept skipping this test");
    }
    let script = format!("mount -t tmpfs none /proc && exec {} info", limit_client().display());
    let out = sb
        .run(&unshare)
        .args(["-m", "/bin/sh", "-c", &script])
        .env("LD_PRELOAD", &so)
        .env("TMPDIR", &tmp)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "256m")
        .go();
    out.ok();
    assert_eq!(u64_of(&out, "s0.total"), 256 * MIB, "{}", out.dump());
    out.assert_no_shim_errors();
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "temporary engine copy left behind: {left:?}");
}

/// Where `sendfile` is refused (a sandbox's system-call filter, an old kernel), the first stage
/// copies its engine with `pread`/`write` and the client runs limited as usual.
#[test]
fn release_artifact_maps_engine_without_sendfile() {
    let Some((so, _)) = artifact() else { return };
    let sb = Sandbox::new("floor-nosendfile");
    let deny = c_program("deny_sendfile", &["deny_sendfile.c"], &[]);
    let client = limit_client();
    let out = sb
        .run(&deny)
        .args([client.to_str().unwrap(), "info", "alloc:600", "alloc:100"])
        .env("LD_PRELOAD", &so)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "512m")
        .timeout_secs(60)
        .go();
    assert_ne!(out.code, Some(3), "this machine refuses seccomp filters (qemu-user does): {}", out.dump());
    out.ok();
    assert_eq!(u64_of(&out, "s0.total"), 512 * MIB, "{}", out.dump());
    expect(&out, "s1.alloc", OOM);
    expect(&out, "s2.alloc", "0");
    out.assert_no_shim_errors();
}

/// `vgpu-smi` ships beside the library: same glibc floor, only glibc's own
/// libraries, no driver needed; it reads a region the floor library wrote.
#[test]
fn release_floor_vgpu_smi_beside_the_library() {
    let Some((so, floor)) = artifact() else { return };
    let smi = so.with_file_name("vgpu-smi");
    assert!(smi.exists(), "{} missing: ci/release.sh ships vgpu-smi beside libvgpu.so", smi.display());
    let max = max_glibc_of(&smi);
    assert!(version_key(&max) <= version_key(&floor), "vgpu-smi requires GLIBC_{max} > floor {floor}");
    for n in needed_of(&smi) {
        assert!(ALLOWED_NEEDED.contains(&n.as_str()), "vgpu-smi NEEDED {n} is not allowed");
    }
    let sb = Sandbox::new("floor-smi");
    sb.run(limit_client()).env("LD_PRELOAD", &so).env("CUDA_DEVICE_MEMORY_LIMIT", "512m").args(["alloc:10"]).go().ok();
    let o = sb.run(&smi).arg("--json").ld_library_path(None).go();
    o.ok();
    assert!(o.stdout.contains("\"memory_limit_bytes\":536870912"), "{}", o.dump());
}
