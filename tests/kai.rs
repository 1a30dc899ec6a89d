//! The KAI Scheduler channel (docs/deploy.md §8) and region discovery for a non-root `env -i` shell
//! (docs/configuration.md "Where the region is"), in private mount + PID namespaces as tests/injection.rs does, as root and as
//! UID 1000 (`setpriv`). The inside is `tests/py/kai.sh`; see its header for the layout.
//!
//! If the machine refuses namespaces (or is not root) the test prints a loud SKIP and FAILS,
//! unless `VGPU_ALLOW_SKIP_NAMESPACES=1`.

mod common;
#[path = "py/rw_common.rs"]
mod rw;

use common::*;
use rw::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const LIMIT: u64 = 1024 * MIB;

fn namespaces_ok() -> bool {
    (unsafe { libc::geteuid() }) == 0
        && Path::new("/usr/bin/setpriv").exists()
        && Command::new("unshare")
            .args(["-m", "-p", "-f", "--mount-proc", "/bin/sh", "-c", "mount -t tmpfs tmpfs /tmp"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
}

fn smi() -> PathBuf {
    let a = artifacts();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&a.root).args(["build", "-p", "vgpu-smi", "--target-dir"]).arg(a.profile_dir.parent().unwrap());
    if a.release {
        cmd.arg("--release");
    }
    assert!(cmd.env_remove("LD_PRELOAD").status().unwrap().success());
    a.profile_dir.join("vgpu-smi")
}

struct Step {
    name: String,
    rc: i32,
    out: String,
    err: String,
}

impl Step {
    fn load(dir: &Path, name: &str) -> Step {
        let rd = |e: &str| std::fs::read_to_string(dir.join(format!("{name}.{e}"))).unwrap_or_default();
        Step { name: name.into(), rc: rd("rc").trim().parse().unwrap_or(-1), out: rd("out"), err: rd("err") }
    }
    fn get(&self, k: &str) -> Option<String> {
        self.out.lines().find_map(|l| l.strip_prefix(&format!("{k}=")).map(|v| v.trim().to_string()))
    }
    fn dump(&self) -> String {
        format!("step {} rc={}\n--- stdout ---\n{}--- stderr ---\n{}-----", self.name, self.rc, self.out, self.err)
    }
    /// The client ran, saw `LIMIT` as its total, was refused 1100 MiB and got 300 MiB.
    #[track_caller]
    fn limited(&self) {
        assert_eq!(self.rc, 0, "{}", self.dump());
        assert_eq!(self.get("s0.total"), Some(LIMIT.to_string()), "not limited: {}", self.dump());
        assert_eq!(self.get("s1.alloc").as_deref(), Some(OOM), "{}", self.dump());
        assert_eq!(self.get("s2.alloc").as_deref(), Some("0"), "{}", self.dump());
        assert!(!self.err.contains("] ERROR"), "{}", self.dump());
    }
}

#[test]
fn kai_location_root_and_uid_1000_and_env_i_discovery() {
    if !namespaces_ok() {
        eprintln!("\n### SKIP kai test: needs root, setpriv and mount + PID namespaces (unshare -m -p -f)\n");
        if std::env::var("VGPU_ALLOW_SKIP_NAMESPACES").as_deref() == Ok("1") {
            return;
        }
        panic!("namespaces refused; set VGPU_ALLOW_SKIP_NAMESPACES=1 to accept skipping this test");
    }
    let a = artifacts();
    let smi = smi();
    let client = limit_client().to_path_buf();
    let sb = Sandbox::new("kai");
    let host_had_vgpu = Path::new("/usr/local/vgpu").exists();
    let kai = sb.subdir("kai-host");
    let containers = kai.join("containers");
    std::fs::create_dir_all(&containers).unwrap();
    std::fs::set_permissions(&containers, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let hami_pod = sb.subdir("hami-host/containers/pod-2_app");
    std::fs::set_permissions(&hami_pod, std::fs::Permissions::from_mode(0o777)).unwrap();
    let user_state_dir = sb.subdir("user-state");
    std::fs::set_permissions(&user_state_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // UID 1000 must be able to traverse the sandbox.
    for d in [&sb.dir, &a.tmp_root] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out_dir = sb.subdir("out");
    let work = sb.subdir("work");
    let run = sb
        .run(unshare_path())
        .args(["-m", "-p", "-f", "--mount-proc", "/bin/sh"])
        .arg(py_file("kai.sh"))
        .ld_library_path(None)
        .env_remove("CUDA_DEVICE_MEMORY_SHARED_CACHE")
        .env("KAI_HOST", &kai)
        .env("HAMI_POD", &hami_pod)
        .env("K_SHIM", &a.shim)
        .env("K_SIMLIB", &a.simlib)
        .env("K_CLIENT", &client)
        .env("K_SMI", &smi)
        .env("K_WORK", &work)
        .env("K_OUT", &out_dir)
        .env("K_STATE_ROOT", sb.state())
        .env("K_STATE_USER", user_state_dir.join("sim.state"))
        .timeout_secs(180)
        .go();
    assert_eq!(run.code, Some(0), "kai.sh failed: {}", run.dump());
    let step = |n: &str| Step::load(&out_dir, n);

    // 1. KAI as root: limited, region at the KAI path, directory 0777, file 0666.
    step("kai_root").limited();
    let root_dir = containers.join("pod-1_root-ctr");
    let root_region = root_dir.join("usage.cache");
    let r = Region::read(&root_region).unwrap_or_else(|| panic!("no KAI region at {}", root_region.display()));
    assert_eq!((r.magic(), r.limit(0), r.sm_limit(0)), (MAGIC, LIMIT, 100), "{}", r.describe());
    assert_eq!(std::fs::metadata(&root_dir).unwrap().permissions().mode() & 0o7777, 0o777);
    assert_eq!(std::fs::metadata(&root_region).unwrap().permissions().mode() & 0o777, 0o666);
    let s = step("smi_kai");
    assert_eq!(s.rc, 0, "{}", s.dump());
    assert!(s.out.contains("/usr/local/vgpu/containers/pod-1_root-ctr/usage.cache"), "{}", s.dump());
    assert!(s.out.contains("\"pod_uid\":\"pod-1\",\"container\":\"root-ctr\""), "{}", s.dump());

    // 2. Non-root env -i: /proc/1/environ is unreadable, the single KAI region is found.
    assert_ne!(step("envi_environ_user").rc, 0, "UID 1000 could read pid 1's environ: the case is not tested");
    step("envi_kai_user").limited();

    // 3. KAI as UID 1000: it created its own directory, owned by it, mode 0777.
    step("kai_user").limited();
    let user_dir = containers.join("pod-1_user-ctr");
    let md = std::fs::metadata(&user_dir)
        .unwrap_or_else(|e| panic!("{}: {e}: {}", user_dir.display(), step("kai_user").dump()));
    assert_eq!((md.uid(), md.permissions().mode() & 0o7777), (1000, 0o777));
    let r = Region::read(&user_dir.join("usage.cache")).unwrap();
    assert_eq!(r.limit(0), LIMIT, "{}", r.describe());

    // 4. HAMi at /opt/hv: a non-root env -i client finds the region through /etc/ld.so.preload.
    assert_eq!(step("hami_root").rc, 0, "{}", step("hami_root").dump());
    step("envi_hami_user").limited();
    let s = step("smi_envi_user");
    assert_eq!(s.rc, 0, "{}", s.dump());
    assert!(s.out.contains("/opt/hv/vgpu/0c1d.cache"), "vgpu-smi finds it the same way: {}", s.dump());
    assert!(hami_pod.join("0c1d.cache").exists());

    assert_eq!(Path::new("/usr/local/vgpu").exists(), host_had_vgpu, "host /usr/local/vgpu touched");
}

fn unshare_path() -> PathBuf {
    ["/usr/bin/unshare", "/bin/unshare"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| "unshare".into())
}
