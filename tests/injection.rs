//! The real injection path, without Kubernetes.
//!
//! HAMi's device plugin does not set `LD_PRELOAD`: it bind-mounts a file over the container's
//! `/etc/ld.so.preload` naming `/usr/local/vgpu/libvgpu.so`, mounts the library there, mounts a
//! per-container host directory on `/usr/local/vgpu` (where the region file
//! `/usr/local/vgpu/<uuid>.cache` lands, and where the vGPU monitor reads it on the host), mounts
//! `/tmp/vgpulock`, and sets the container's environment (docs/hami-contract.md §1.1, §2.1). This test
//! reproduces that as root in fresh mount + PID namespaces (`unshare -m -p -f --mount-proc`; the
//! namespace's init carries the device plugin's environment, as a pod's does), runs
//! `tests/py/injection.sh` inside (a shell, coreutils, python, NVIDIA's Python bindings, a C client,
//! and a client started with `env -i`), and checks from the host side — while a client holds
//! memory — that the region file is where the monitor looks and validates against the contract.
//!
//! If the machine refuses namespaces the test prints a loud SKIP and FAILS, unless
//! `VGPU_ALLOW_SKIP_NAMESPACES=1`.

mod common;
#[path = "py/rw_common.rs"]
mod rw;

use common::*;
use rw::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const POD_UID: &str = "8d5c2a1e-0b7f-4c3d-9e21-6f0a1b2c3d4e";
const CTR: &str = "cuda-app";
const CACHE_UUID: &str = "3f0e8a52-6c1d-4b7e-a9f2-5d4c3b2a1e0f";
/// The simulated device's default UUID (design.md: `GPU-00000000-0000-4000-8000-00000000000<i>`).
const GPU_UUID: &str = "GPU-00000000-0000-4000-8000-000000000000";
const LIMIT_MIB: u64 = 1024;
const LIMIT: u64 = LIMIT_MIB * MIB;
const SM_LIMIT: u64 = 50;
/// The simulated NVML reports `getpid() + VGPU_SIM_PID_OFFSET`: inside the PID namespace that
/// stands in for the host PID a real driver reports (the simulator cannot see the real one).
const PID_OFFSET: i32 = 400_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ns {
    MountAndPid,
    MountOnly,
}

fn unshare() -> PathBuf {
    ["/usr/bin/unshare", "/bin/unshare"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| "unshare".into())
}

fn probe(args: &[&str]) -> bool {
    Command::new(unshare())
        .args(args)
        .args(["/bin/sh", "-c", "mount -t tmpfs tmpfs /tmp"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn namespaces() -> Option<Ns> {
    if probe(&["-m", "-p", "-f", "--mount-proc"]) {
        Some(Ns::MountAndPid)
    } else if probe(&["-m"]) {
        Some(Ns::MountOnly)
    } else {
        None
    }
}

/// One step of injection.sh: exit status, stdout, stderr.
struct Step {
    name: String,
    rc: i32,
    out: String,
    err: String,
}

impl Step {
    fn load(dir: &Path, name: &str) -> Step {
        let rd = |ext: &str| std::fs::read_to_string(dir.join(format!("{name}.{ext}"))).unwrap_or_default();
        let rc = rd("rc").trim().parse().unwrap_or(-1);
        Step { name: name.into(), rc, out: rd("out"), err: rd("err") }
    }
    fn kv(&self) -> BTreeMap<String, String> {
        self.out.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect()
    }
    fn get(&self, k: &str) -> Option<String> {
        self.kv().get(k).cloned()
    }
    fn dump(&self) -> String {
        format!("step {} rc={}\n--- stdout ---\n{}--- stderr ---\n{}-----", self.name, self.rc, self.out, self.err)
    }
    #[track_caller]
    fn ok(&self) -> &Self {
        assert_eq!(self.rc, 0, "{}", self.dump());
        self
    }
    #[track_caller]
    fn expect(&self, k: &str, want: &str) {
        assert_eq!(self.get(k).as_deref(), Some(want), "`{k}` in {}", self.dump());
    }
    #[track_caller]
    fn u64(&self, k: &str) -> u64 {
        self.get(k).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("`{k}` missing in {}", self.dump()))
    }
    /// Shim error lines, and the loader's complaint about a preload it could not load.
    #[track_caller]
    fn assert_clean_stderr(&self) {
        let bad: Vec<&str> = self
            .err
            .lines()
            .filter(|l| (l.starts_with("[libvgpu ") && l.contains("] ERROR")) || l.contains("cannot be preloaded"))
            .collect();
        assert!(bad.is_empty(), "stderr has errors: {bad:?}\n{}", self.dump());
    }
}

/// The vGPU monitor's discovery (docs/hami-contract.md §4.1) over `<H>/vgpu/containers`: returns the
/// region file it would load for each container directory, or why it would skip it.
fn monitor_scan(containers: &Path) -> BTreeMap<String, Result<PathBuf, String>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(containers).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = (|| {
            if !e.path().is_dir() {
                return Err("not a directory".to_string());
            }
            match name.split_once('_') {
                Some((a, b)) if !a.is_empty() && !b.is_empty() => {}
                _ => return Err("name is not <podUID>_<container>".into()),
            }
            let mut files: Vec<String> = std::fs::read_dir(e.path())
                .unwrap()
                .flatten()
                .map(|f| f.file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            let n = files.iter().filter(|f| f.contains("libvgpu.so") || f.ends_with(".cache")).count();
            if n > 2 {
                return Err(format!("cache num not matched: {files:?}"));
            }
            let cache = files
                .iter()
                .find(|f| f.ends_with(".cache") && !f.contains("libvgpu.so"))
                .ok_or_else(|| format!("no *.cache yet: {files:?}"))?;
            let p = e.path().join(cache);
            let b = std::fs::read(&p).map_err(|e| e.to_string())?;
            if b.len() < 12 {
                return Err("smaller than the header".into());
            }
            if i32::from_le_bytes(b[0..4].try_into().unwrap()) != MAGIC {
                return Err("magic absent".into());
            }
            let major = u32::from_le_bytes(b[4..8].try_into().unwrap());
            if major == 1 && b.len() >= REGION_SIZE {
                Ok(p)
            } else {
                Err(format!("unknown cache file size {} / version {major}", b.len()))
            }
        })();
        m.insert(name, r);
    }
    m
}

/// Static part of the contract (§3.1-3.2) for a region file the monitor would load.
#[track_caller]
fn assert_region_header(r: &Region) {
    assert_eq!(r.magic(), MAGIC, "{}", r.describe());
    assert_eq!(r.version(), (1, 2), "{}", r.describe());
    assert!(r.len() >= REGION_SIZE, "{}", r.describe());
    assert_eq!(r.limit(0), LIMIT, "limit[0] in bytes: {}", r.describe());
    assert_eq!(r.limit(1), 0, "limit[1] (no second device): {}", r.describe());
    assert_eq!(r.sm_limit(0), SM_LIMIT, "{}", r.describe());
    assert_eq!(r.priority(), 1, "priority (CUDA_TASK_PRIORITY unset → 1): {}", r.describe());
    let (uuid, zero_filled) = r.uuid(0);
    assert_eq!(uuid, GPU_UUID, "uuids[0]: {}", r.describe());
    assert!(zero_filled, "uuids[0] must be zero-filled after the NUL (the monitor keys on all 96 bytes)");
    assert_eq!(r.device_num(), 1, "device_num: {}", r.describe());
}

fn read_host(p: &Path) -> Option<Vec<u8>> {
    std::fs::read(p).ok()
}

#[test]
fn hami_injection_path_without_kubernetes() {
    let Some(ns) = namespaces() else {
        let msg = "\n########################################################################\n\
                   ### SKIP injection test: this machine refuses mount namespaces\n\
                   ### (`unshare -m` failed: not root, or no CAP_SYS_ADMIN / seccomp).\n\
                   ### The real injection path (/etc/ld.so.preload) was NOT tested.\n\
                   ########################################################################";
        eprintln!("{msg}");
        if std::env::var("VGPU_ALLOW_SKIP_NAMESPACES").as_deref() == Ok("1") {
            return;
        }
        panic!("namespaces refused; set VGPU_ALLOW_SKIP_NAMESPACES=1 to accept skipping this test");
    };
    if ns == Ns::MountOnly {
        eprintln!(
            "\n### WARNING: PID namespaces refused; running with `unshare -m` only. The `env -i` \
             check (configuration from /proc/1/environ) is SKIPPED.\n"
        );
    }
    let a = artifacts();
    let py = python().to_path_buf();
    let client = limit_client().to_path_buf();
    let host_preload_before = read_host(Path::new("/etc/ld.so.preload"));
    let host_had_vgpu = Path::new("/usr/local/vgpu").exists();

    // Host side, as the device plugin lays it out (H = <sandbox>/host/usr/local).
    let sb = Sandbox::new("injection");
    let hv = sb.subdir("host/usr/local/vgpu");
    let containers = hv.join("containers");
    let pod_dir = containers.join(format!("{POD_UID}_{CTR}"));
    std::fs::create_dir_all(&pod_dir).unwrap();
    std::fs::set_permissions(&pod_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::copy(&a.shim, hv.join("libvgpu.so")).unwrap();
    std::fs::write(hv.join("ld.so.preload"), "/usr/local/vgpu/libvgpu.so\n").unwrap();
    let lockdir = sb.subdir("host/tmp/vgpulock");
    std::fs::set_permissions(&lockdir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let work = sb.subdir("work");
    let out_dir = sb.subdir("out");
    let ready = sb.dir.join("holder.ready");
    let go = sb.dir.join("holder.go");
    let region_host = pod_dir.join(format!("{CACHE_UUID}.cache"));

    let mut args: Vec<String> = match ns {
        Ns::MountAndPid => vec!["-m".into(), "-p".into(), "-f".into(), "--mount-proc".into()],
        Ns::MountOnly => vec!["-m".into()],
    };
    args.push("/bin/sh".into());
    args.push(py_file("injection.sh").display().to_string());

    let (out, held) = std::thread::scope(|s| {
        let runner = s.spawn(|| {
            sb.run(unshare())
                .args(&args)
                .ld_library_path(None)
                // The device plugin's environment (docs/hami-contract.md §1.1).
                .env("NVIDIA_VISIBLE_DEVICES", GPU_UUID)
                .env("CUDA_DEVICE_MEMORY_LIMIT_0", format!("{LIMIT_MIB}m"))
                .env("CUDA_DEVICE_SM_LIMIT", SM_LIMIT.to_string())
                .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", format!("/usr/local/vgpu/{CACHE_UUID}.cache"))
                .env("LIBCUDA_LOG_LEVEL", "1")
                // The simulated node: NVML PIDs as the host would see them.
                .env("VGPU_SIM_PID_OFFSET", PID_OFFSET.to_string())
                // The test's plumbing.
                .env("INJ_POD_DIR", &pod_dir)
                .env("INJ_SHIM", hv.join("libvgpu.so"))
                .env("INJ_PRELOAD_FILE", hv.join("ld.so.preload"))
                .env("INJ_LOCKDIR", &lockdir)
                .env("INJ_WORK", &work)
                .env("INJ_OUT", &out_dir)
                .env("INJ_SIMLIB", &a.simlib)
                .env("INJ_PY", &py)
                .env("INJ_PYDIR", py_file(""))
                .env("INJ_CLIENT", &client)
                .env("INJ_READY", &ready)
                .env("INJ_GO", &go)
                .env("INJ_PIDNS", if ns == Ns::MountAndPid { "1" } else { "0" })
                .timeout_secs(240)
                .go()
        });
        // While the C client holds 300 MiB: what the monitor would see on the host.
        while !ready.exists() && !runner.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let held = if ready.exists() {
            let scan = monitor_scan(&containers);
            let region = Region::read(&region_host);
            Some((scan, region))
        } else {
            None
        };
        std::fs::write(&go, b"").unwrap();
        (runner.join().unwrap(), held)
    });
    let step = |n: &str| Step::load(&out_dir, n);
    let ctx = || format!("{}\n{}", out.dump(), step("c_hold").dump());
    assert_eq!(out.code, Some(0), "injection.sh failed: {}", ctx());

    // 1. Non-CUDA processes run under /etc/ld.so.preload, stay inert and quiet.
    let shell = step("shell");
    shell.ok().expect("shell", "ok");
    shell.assert_clean_stderr();
    step("ls").ok().assert_clean_stderr();
    let maps = step("cat_maps");
    maps.ok().assert_clean_stderr();
    assert!(maps.out.contains("/usr/local/vgpu/libvgpu.so"), "cat does not have the shim mapped: {}", maps.dump());
    assert!(!maps.out.contains("libcuda") && !maps.out.contains("nvidia"), "cat mapped a driver: {}", maps.dump());
    assert_eq!(step("cat_preload").ok().out.trim(), "/usr/local/vgpu/libvgpu.so");
    let p3 = step("python3");
    p3.ok().assert_clean_stderr();
    p3.expect("python", "ok");
    p3.expect("shim_mapped", "1");
    p3.expect("cuda_mapped", "0");
    let before = step("ls_before_cuda");
    assert!(!before.out.contains(".cache"), "a region file appeared before any CUDA call: {}", before.dump());

    // 2. CUDA clients are limited by CUDA_DEVICE_MEMORY_LIMIT_0.
    let pyc = step("py_client");
    pyc.ok().assert_clean_stderr();
    assert_eq!(pyc.u64("s0.total"), LIMIT, "{}", pyc.dump());
    pyc.expect("s1.alloc", OOM);
    pyc.expect("s2.alloc", "0");
    let c = step("c_hold");
    c.ok().assert_clean_stderr();
    assert_eq!(c.u64("s0.total"), LIMIT, "{}", c.dump());
    c.expect("s1.alloc", OOM);
    c.expect("s2.alloc", "0");
    let holder_pid: i32 = c.get("s3.pid").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{}", c.dump()));
    if ns == Ns::MountAndPid {
        assert!(holder_pid < 1000, "pid {holder_pid} is not a pid of the new namespace");
    }

    // 3. The region file, seen from the host while the client held memory.
    let (scan, region) = held.unwrap_or_else(|| panic!("the holder never signalled: {}", ctx()));
    let key = format!("{POD_UID}_{CTR}");
    match scan.get(&key) {
        Some(Ok(p)) => assert_eq!(p, &region_host, "the monitor would load {} instead", p.display()),
        other => {
            panic!("the monitor would not load the container's region: {other:?} (all: {scan:?})")
        }
    }
    let region = region.expect("region file at the host path");
    assert_region_header(&region);
    // Created 0666 regardless of umask (docs/hami-contract.md §3.7): processes of other users in the
    // container must be able to attach.
    let mode = std::fs::metadata(&region_host).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "region file mode {mode:o}");
    let live = region.live();
    let slot = live.iter().find(|s| s.pid == holder_pid).unwrap_or_else(|| {
        panic!("no live slot for the holder (pid {holder_pid} in the container): {}", region.describe())
    });
    assert_eq!(slot.status, 1, "{slot:?}");
    assert!(slot.total(0) >= 300 * MIB && slot.data(0) >= 300 * MIB, "holder slot used[0]: {slot:?}");
    assert!(region.container_used(0) <= LIMIT, "{}", region.describe());
    if slot.hostpid != 0 {
        // hostpid, when detected, is the holder's PID as NVML (the host) reports it.
        assert_eq!(
            slot.hostpid,
            holder_pid + PID_OFFSET,
            "slot hostpid: NVML reports the holder (container pid {holder_pid}) as {}",
            holder_pid + PID_OFFSET
        );
    } else {
        eprintln!("note: the holder's slot has hostpid 0 (host PID not detected)");
    }

    // 4. A shell entered with `env -i` still gets the limit (from /proc/1/environ).
    if ns == Ns::MountAndPid {
        let env = step("envi_env");
        env.ok();
        assert!(!env.out.contains("CUDA_DEVICE_MEMORY_LIMIT"), "env -i did not empty the env: {}", env.dump());
        let e = step("envi_client");
        e.ok().assert_clean_stderr();
        assert_eq!(e.u64("s0.total"), LIMIT, "a client started with `env -i` is not limited: {}", e.dump());
        e.expect("s1.alloc", OOM);
        e.expect("s2.alloc", "0");
    }

    // 5. After everything exited: the file stays, no stale usage for the monitor.
    let after = step("ls_after");
    assert!(after.out.contains(&format!("{CACHE_UUID}.cache")), "{}", after.dump());
    let r = Region::read(&region_host).unwrap();
    assert_region_header(&r);
    assert!(
        r.live().is_empty() && r.container_used(0) == 0,
        "stale slots after all processes exited: {}",
        r.describe()
    );

    eprintln!(
        "injection ({ns:?}): holder pid {holder_pid} in the container, slot {slot:?}\n  while held: {}\n  after: {}",
        region.describe(),
        r.describe()
    );

    // 6. The host was not touched.
    assert_eq!(read_host(Path::new("/etc/ld.so.preload")), host_preload_before, "host /etc/ld.so.preload changed");
    assert_eq!(Path::new("/usr/local/vgpu").exists(), host_had_vgpu, "host /usr/local/vgpu created");
}
