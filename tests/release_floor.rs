//! The release artifact built for old container images (issue 5 §4): `ci/release.sh` builds
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
//! Missing artifact: FAIL when `CI` is set (the test command runs ci/release.sh first), else a loud
//! SKIP.

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
    "libpthread.so.0",
    "libdl.so.2",
    "libm.so.6",
    "librt.so.1",
];

/// The artifact and its floor, or None (after deciding between SKIP and FAIL).
fn artifact() -> Option<(PathBuf, String)> {
    let root = &artifacts().root;
    let (so, floor_file) = match std::env::var_os("VGPU_RELEASE_SO") {
        Some(p) => {
            let p = PathBuf::from(p);
            let f = p.with_file_name("FLOOR");
            (p, f)
        }
        None => (
            root.join("target/release-floor/libvgpu.so"),
            root.join("target/release-floor/FLOOR"),
        ),
    };
    if !so.exists() {
        let msg = format!(
            "\n######## release artifact {} missing: run ci/release.sh first ########",
            so.display()
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg} (CI is set: the test command must build it)");
        }
        eprintln!("{msg}\n######## SKIP (CI not set) ########\n");
        return None;
    }
    let floor = std::fs::read_to_string(&floor_file)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| WANT_FLOOR.into());
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
        eprintln!(
            "### WARNING: release artifact floor is glibc {floor}, accepted by VGPU_ACCEPT_GLIBC_FLOOR"
        );
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
        t.lines()
            .filter(|l| l.contains(&format!("GLIBC_{max}")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // 2. NEEDED.
    let d = tool("readelf", &[std::ffi::OsStr::new("-d"), so.as_os_str()]);
    let needed: Vec<String> = d
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| {
            l.split('[')
                .nth(1)
                .map(|s| s.trim_end_matches(']').to_string())
        })
        .collect();
    for n in &needed {
        assert!(
            ALLOWED_NEEDED.contains(&n.as_str()),
            "NEEDED {n} is not allowed (all: {needed:?})"
        );
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
    assert!(
        odd.is_empty(),
        "unexpected exports (not dlsym/cu*/nvml*): {odd:?}"
    );
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

    let sh = sb
        .run("/bin/sh")
        .env("LD_PRELOAD", &so)
        .args(["-c", "ls / >/dev/null && cat /proc/self/maps"])
        .go();
    sh.ok();
    assert!(
        sh.stderr.is_empty(),
        "a non-CUDA process printed: {}",
        sh.dump()
    );
    assert!(
        sh.stdout.contains("libvgpu.so"),
        "not preloaded: {}",
        sh.dump()
    );
    assert!(
        !sh.stdout.contains("libcuda"),
        "a non-CUDA process loaded the driver: {}",
        sh.dump()
    );
}

/// `vgpu-smi` ships beside the library (issue 11 §1): same glibc floor, only glibc's own
/// libraries, no driver needed; it reads a region the floor library wrote.
#[test]
fn release_floor_vgpu_smi_beside_the_library() {
    let Some((so, floor)) = artifact() else { return };
    let smi = so.with_file_name("vgpu-smi");
    assert!(smi.exists(), "{} missing: ci/release.sh ships vgpu-smi beside libvgpu.so", smi.display());
    let t = tool("objdump", &[std::ffi::OsStr::new("-T"), smi.as_os_str()]);
    let max = t
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .max_by_key(|v| version_key(v))
        .unwrap_or("0")
        .to_string();
    assert!(version_key(&max) <= version_key(&floor), "vgpu-smi requires GLIBC_{max} > floor {floor}");
    let d = tool("readelf", &[std::ffi::OsStr::new("-d"), smi.as_os_str()]);
    for l in d.lines().filter(|l| l.contains("(NEEDED)")) {
        let n = l.split('[').nth(1).unwrap_or("").trim_end_matches(']');
        assert!(ALLOWED_NEEDED.contains(&n), "vgpu-smi NEEDED {n} is not allowed");
    }
    let sb = Sandbox::new("floor-smi");
    sb.run(limit_client()).env("LD_PRELOAD", &so).env("CUDA_DEVICE_MEMORY_LIMIT", "512m").args(["alloc:10"]).go().ok();
    let o = sb.run(&smi).arg("--json").ld_library_path(None).go();
    o.ok();
    assert!(o.stdout.contains("\"memory_limit_bytes\":536870912"), "{}", o.dump());
}
