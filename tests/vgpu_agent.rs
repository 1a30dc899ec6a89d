//! `vgpu-agent` (docs/agent.md) as a real process, as UID 65534 with no NVML library and no
//! driver on its library path, over container directories whose regions are written by real
//! processes under the shim on the simulated GPU (and by hand for the C library's and hostile
//! cases). `/metrics` is fetched over HTTP and parsed by prometheus_client's parser
//! (`tests/py/agent_check.py`), values compared with the regions read by `tests/py/vgpu_region.py`.
//! A Kubernetes API double serves the real JSON shape of a pod list; another is down.

mod common;
#[path = "py/rw_common.rs"]
mod rw;

use common::*;
use rw::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const GPU_UUID: &str = "GPU-00000000-0000-4000-8000-000000000000";
/// A GPU only hand-written samples name.
const HAND_GPU: &str = "GPU-22222222-0000-4000-8000-000000000000";
const NODE: &str = "node-1";

/// `target/<profile>/vgpu-agent`, built once per test binary.
fn agent_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let a = artifacts();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&a.root)
            .args(["build", "-p", "vgpu-agent", "--target-dir"])
            .arg(a.profile_dir.parent().unwrap());
        if a.release {
            cmd.arg("--release");
        }
        cmd.env_remove("LD_PRELOAD");
        assert!(cmd.status().expect("cargo build -p vgpu-agent").success(), "building vgpu-agent failed");
        a.profile_dir.join("vgpu-agent")
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET over a fresh connection; (status, body), or None if nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A Kubernetes API double: answers every GET with the current pod list JSON and records the
/// request lines.
struct FakeApi {
    port: u16,
    body: Arc<Mutex<String>>,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl FakeApi {
    fn start(pods: &[(&str, &str, &str)]) -> FakeApi {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let body = Arc::new(Mutex::new(pod_list(pods)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, r, st) = (body.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut req = Vec::new();
                let mut chunk = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&req).into_owned();
                r.lock().unwrap().push(text.lines().next().unwrap_or("").to_string());
                let body = b.lock().unwrap().clone();
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeApi { port, body, requests, stop }
    }
    fn set_pods(&self, pods: &[(&str, &str, &str)]) {
        *self.body.lock().unwrap() = pod_list(pods);
    }
    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        kubeconfig(dir, &format!("http://127.0.0.1:{}", self.port))
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A `v1.PodList` as the API server serves it (uid, namespace, name; one container each).
fn pod_list(pods: &[(&str, &str, &str)]) -> String {
    let items: Vec<String> = pods
        .iter()
        .map(|(uid, ns, name)| {
            format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","uid":"{uid}","resourceVersion":"1","creationTimestamp":"2026-01-01T00:00:00Z","labels":{{"hami.io/vgpu-node":"{NODE}"}},"annotations":{{"hami.io/vgpu-node":"{NODE}"}}}},"spec":{{"nodeName":"{NODE}","containers":[{{"name":"main","image":"x","resources":{{"limits":{{"nvidia.com/gpu":"1"}}}}}}]}},"status":{{"phase":"Running","podIP":"10.0.0.1"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"42"}},"items":[{}]}}"#,
        items.join(",")
    )
}

fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let p = dir.join("kubeconfig");
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: test\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: t0k3n\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

/// The agent as UID 65534 through setpriv, no driver or NVML on its library path.
fn spawn_agent(sb: &Sandbox, hook: &Path, port: u16, env: &[(&str, &str)], args: &[&str]) -> Spawned {
    let mut r = sb
        .run("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(agent_bin())
        .args(["--metrics-bind-address".to_string(), format!("127.0.0.1:{port}")])
        .args(args.iter().copied())
        .ld_library_path(None)
        .env("HOOK_PATH", hook)
        .env_remove("NODE_NAME")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    for (k, v) in env {
        r = r.env(*k, *v);
    }
    let mut s = r.spawn();
    let t0 = Instant::now();
    while http_get(port, "/healthz").is_none() {
        assert!(s.is_running(), "agent exited: {}", s.stderr());
        assert!(t0.elapsed() < Duration::from_secs(20), "agent not serving: {}", s.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

fn metrics(port: u16) -> String {
    let (st, body) = http_get(port, "/metrics").expect("/metrics answers");
    assert_eq!(st, 200, "{body}");
    body
}

/// Value of the first sample of `name` whose label text contains every part of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (n, rest) = l.split_at(l.find(['{', ' '])?);
        if n != name || !labels.iter().all(|p| rest.contains(p)) {
            return None;
        }
        rest.rsplit(' ').next()?.parse().ok()
    })
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A tree `<hook>/containers` writable by the agent's UID (as the plugin makes the per-container
/// directories 0777; GC needs the parent writable too).
fn hook_tree(sb: &Sandbox, dirs: &[&str]) -> PathBuf {
    let hook = sb.subdir("hook");
    let c = hook.join("containers");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o777)).unwrap();
    for d in dirs {
        std::fs::create_dir_all(c.join(d)).unwrap();
        std::fs::set_permissions(c.join(d), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    hook
}

/// A v1.2 region as the C library leaves it: one device, three slots (one exited), sm_util and
/// last_kernel_time set.
fn c_region(lkt: u64, priority: i32, recent_kernel: i32) -> Vec<u8> {
    let mut b = vec![0u8; 2_008_953];
    b[0..4].copy_from_slice(&19_920_718i32.to_le_bytes());
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    b[56..64].copy_from_slice(&1u64.to_le_bytes());
    b[64..64 + GPU_UUID.len()].copy_from_slice(GPU_UUID.as_bytes());
    b[1600..1608].copy_from_slice(&(3u64 << 30).to_le_bytes());
    for (k, (status, ctx, data, sm)) in
        [(1i32, 60 * MIB, 100 * MIB, 30u64), (0, 0, 50 * MIB, 9), (2, 70 * MIB, 7 * MIB, 12)].iter().enumerate()
    {
        let s = 1856 + 1960 * k;
        b[s..s + 4].copy_from_slice(&(4242 + k as i32).to_le_bytes());
        b[s + 8..s + 16].copy_from_slice(&ctx.to_le_bytes());
        b[s + 8 + 16..s + 8 + 24].copy_from_slice(&data.to_le_bytes());
        b[s + 8 + 32..s + 8 + 40].copy_from_slice(&(ctx + data + MIB).to_le_bytes());
        b[s + 1160 + 16..s + 1160 + 24].copy_from_slice(&sm.to_le_bytes());
        b[s + 1928..s + 1932].copy_from_slice(&status.to_le_bytes());
    }
    b[2_008_896..2_008_900].copy_from_slice(&3i32.to_le_bytes());
    b[2_008_900..2_008_904].copy_from_slice(&1i32.to_le_bytes());
    b[2_008_904..2_008_908].copy_from_slice(&recent_kernel.to_le_bytes());
    b[2_008_908..2_008_912].copy_from_slice(&priority.to_le_bytes());
    b[2_008_912..2_008_920].copy_from_slice(&lkt.to_le_bytes());
    b
}

fn word(path: &Path, off: usize) -> i32 {
    let b = std::fs::read(path).unwrap();
    i32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
const RECENT_KERNEL: usize = 2_008_904;
const SWITCH: usize = 2_008_900;

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Holds `mib` in a shimmed client writing `region` until `go` exists; returns when it is ready.
fn holder(sb: &Sandbox, region: &Path, limit: &str, mib: u64, tag: &str) -> (Spawned, PathBuf) {
    let ready = sb.dir.join(format!("ready.{tag}"));
    let go = sb.dir.join(format!("go.{tag}"));
    let s = sb
        .run(limit_client())
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", limit)
        .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", region)
        .args(["info".to_string(), format!("alloc:{mib}"), "launch:3".into()])
        .arg(format!("touch:{}", ready.display()))
        .arg(format!("wait:{}", go.display()))
        .arg("free_all")
        .spawn();
    wait_file(&ready, 60);
    (s, go)
}

/// Every HAMi family equals the regions (real shim processes and a C-library region), parsed by
/// an independent Prometheus parser; names from the API double; legacy names with the flag; the
/// agent runs as 65534 with no NVML mapped.
#[test]
fn metrics_match_the_regions_with_names_from_the_api() {
    agent_bin(); // built before the holders start waiting
    let sb = Sandbox::new("agent-metrics");
    let hook = hook_tree(&sb, &["uid-a_main", "uid-b_side", "uid-c_main", "uid-x_gone"]);
    let c = hook.join("containers");
    let (ra, rb, rc) = (c.join("uid-a_main/r.cache"), c.join("uid-b_side/r.cache"), c.join("uid-c_main/x.cache"));
    std::fs::write(&rc, c_region(unix_now() - 7, 1, 0)).unwrap();
    let (mut ha, go_a) = holder(&sb, &ra, "1g", 100, "a");
    let (mut hb, go_b) = holder(&sb, &rb, "2g", 300, "b");
    // Host GPU samples beside the regions, of a GPU the holders' libraries do not publish (they
    // publish the simulated one, host_gpu_samples_from_the_library): the freshest per GPU wins,
    // a stale one (another GPU, a minute old) is not reported.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let stale_gpu = "GPU-11111111-0000-4000-8000-000000000000";
    std::fs::write(
        c.join("uid-c_main/host-gpu.samples"),
        format!("v1 {} {HAND_GPU} 0 {} {} 37 H100 80GB HBM3\n", now_ms - 1000, 5u64 << 30, 80u64 << 30),
    )
    .unwrap();
    std::fs::write(
        c.join("uid-x_gone/host-gpu.samples"),
        format!(
            "v1 {} {HAND_GPU} 0 {} {} 90 H100 80GB HBM3\nv1 {} {stale_gpu} 1 1 2 3 H100\n",
            now_ms - 5000,
            7u64 << 30,
            80u64 << 30,
            now_ms - 60_000
        ),
    )
    .unwrap();
    let api = FakeApi::start(&[("uid-a", "team", "train-0"), ("uid-c", "ops", "c-pod"), ("uid-z", "x", "other")]);
    let kc = api.kubeconfig(&sb.dir);
    let port = free_port();
    let mut agent = spawn_agent(
        &sb,
        &hook,
        port,
        &[("NODE_NAME", NODE), ("KUBECONFIG", kc.to_str().unwrap())],
        &["--legacy-metrics", "--feedback-interval", "200ms", "--pod-list-interval", "200ms"],
    );
    wait_until("pod names", 20, || metrics(port).contains("namespace=\"team\""));
    let f = sb.dir.join("metrics.txt");
    let expect = format!(
        r#"{{"legacy":true,"containers":[{{"region":"{}","namespace":"team","pod":"train-0","container":"main"}},{{"region":"{}","namespace":"","pod":"uid-b","container":"side"}},{{"region":"{}","namespace":"ops","pod":"c-pod","container":"main"}}]}}"#,
        ra.display(),
        rb.display(),
        rc.display()
    );
    let ef = sb.dir.join("expect.json");
    std::fs::write(&ef, expect).unwrap();
    // The regions are live (a library's watcher may update sm_util between the scrape and the
    // independent read): a disagreement must persist over three scrapes to count.
    let mut text = String::new();
    let mut out = String::new();
    for attempt in 0..3 {
        text = metrics(port);
        std::fs::write(&f, &text).unwrap();
        let o = Command::new(python()).arg(py_file("agent_check.py")).arg(&f).arg(&ef).output().unwrap();
        out = String::from_utf8_lossy(&o.stdout).into_owned();
        if o.status.success() {
            break;
        }
        assert!(attempt < 2, "metrics disagree with the regions:\n{out}{}\n{text}", String::from_utf8_lossy(&o.stderr));
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(out.trim(), "checked=3", "{text}");
    // The shim's memory is what the holders hold (plus the context charge).
    let used_a = sample(&text, "hami_vgpu_memory_used_bytes", &["pod=\"train-0\""]).unwrap();
    assert!(used_a >= (100 * MIB) as f64, "{text}");
    assert_eq!(sample(&text, "vgpu_agent_pod_names_known", &[]), Some(1.0), "{text}");
    assert_eq!(sample(&text, "vgpu_processes", &["pod=\"c-pod\""]), Some(2.0), "{text}");
    let host = ["device_index=\"0\"", "device_type=\"NVIDIA-H100 80GB HBM3\"", "node=\"node-1\"", "zone=\"vGPU\""];
    let mut host_uuid = host.to_vec();
    let uuid_label = format!("device_uuid=\"{HAND_GPU}\"");
    host_uuid.push(&uuid_label);
    assert_eq!(sample(&text, "hami_host_gpu_memory_used_bytes", &host_uuid), Some((5u64 << 30) as f64), "{text}");
    assert_eq!(sample(&text, "hami_host_gpu_utilization_ratio", &host_uuid), Some(37.0), "{text}");
    assert_eq!(
        sample(&text, "HostGPUMemoryUsage", &[&format!("deviceuuid=\"{HAND_GPU}\"")]),
        Some((5u64 << 30) as f64)
    );
    assert!(!text.contains(stale_gpu), "a stale sample is not reported: {text}");
    let reqs = api.requests.lock().unwrap().clone();
    assert!(reqs.iter().any(|r| r.starts_with("GET /api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1")), "{reqs:?}");
    // As nobody, with nothing of NVML or the driver mapped.
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid)).unwrap();
    assert!(status.lines().any(|l| l.starts_with("Uid:") && l.contains("65534")), "{status}");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", agent.pid)).unwrap();
    assert!(!maps.contains("nvidia-ml") && !maps.contains("libcuda"), "{maps}");
    // A pod renamed in the API shows up with its new name (names follow the list).
    api.set_pods(&[("uid-a", "team", "train-1")]);
    wait_until("new name", 20, || metrics(port).contains("pod=\"train-1\""));
    assert!(agent.is_running(), "{}", agent.stderr());
    std::fs::write(&go_a, "").unwrap();
    std::fs::write(&go_b, "").unwrap();
    ha.wait_within(Duration::from_secs(30)).unwrap();
    hb.wait_within(Duration::from_secs(30)).unwrap();
    // Without the flag: no legacy names (checked by agent_check.py with legacy=false).
    agent.kill();
    let port2 = free_port();
    let _plain = spawn_agent(&sb, &hook, port2, &[], &["--feedback-interval", "200ms"]);
    let text = metrics(port2);
    std::fs::write(&f, &text).unwrap();
    std::fs::write(
        &ef,
        format!(
            r#"{{"legacy":false,"containers":[{{"region":"{}","namespace":"","pod":"uid-c","container":"main"}}]}}"#,
            rc.display()
        ),
    )
    .unwrap();
    let o = Command::new(python()).arg(py_file("agent_check.py")).arg(&f).arg(&ef).output().unwrap();
    assert!(o.status.success(), "{}{}\n{text}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(sample(&text, "vgpu_agent_pod_names_known", &[]), Some(0.0), "{text}");
}

/// One line of `host-gpu.samples`, parsed strictly in the agent's format (docs/agent.md).
#[derive(Debug, PartialEq)]
struct HostLine {
    at_ms: u64,
    uuid: String,
    index: u32,
    used: u64,
    total: u64,
    util: u32,
    name: String,
}

fn host_lines(path: &Path) -> Option<Vec<HostLine>> {
    let text = std::fs::read_to_string(path).ok()?;
    assert!(text.ends_with('\n') && text.len() <= 4096, "{text:?}");
    let lines = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(8, ' ').collect();
            assert_eq!((f.len(), f[0]), (8, "v1"), "{l:?}");
            HostLine {
                at_ms: f[1].parse().unwrap(),
                uuid: f[2].into(),
                index: f[3].parse().unwrap(),
                used: f[4].parse().unwrap(),
                total: f[5].parse().unwrap(),
                util: f[6].parse().unwrap(),
                name: f[7].into(),
            }
        })
        .collect();
    Some(lines)
}

/// `simctl devices`: (total, used) of device 0, the simulated driver's own figures.
fn sim_device0(sb: &Sandbox) -> (u64, u64) {
    let o = Command::new(&artifacts().simctl).arg("--state").arg(sb.state()).arg("devices").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let f: Vec<&str> = out.lines().nth(1).expect("device 0").split_whitespace().collect();
    assert_eq!(f[4], GPU_UUID, "{out}");
    (f[1].parse().unwrap(), f[2].parse().unwrap())
}

/// The library side of the host metrics: CUDA processes under the shim publish the whole
/// simulated GPU (the driver's used/total, not their container's 1 GiB view; the device's
/// utilisation) beside their region, in the exact format the agent parses, refreshed, one writer
/// per 5 s for the container; the agent reports exactly those figures; a process under the shim
/// that never uses CUDA writes nothing.
#[test]
fn host_gpu_samples_from_the_library() {
    agent_bin();
    let sb = Sandbox::new("agent-hostgpu");
    let hook = hook_tree(&sb, &["uid-h_main", "uid-n_main"]);
    let c = hook.join("containers");
    let (dir_h, dir_n) = (c.join("uid-h_main"), c.join("uid-n_main"));
    let samples = dir_h.join("host-gpu.samples");
    let client = |tag: &str, mib: u64, busy: bool| {
        let ready = sb.dir.join(format!("ready.{tag}"));
        let mut steps = vec![format!("alloc:{mib}"), format!("touch:{}", ready.display())];
        if busy {
            steps.push("launch:4000".into()); // 10 ms kernels: the device stays busy for 40 s
        }
        steps.push("sleep:60000".into());
        let s = sb
            .run(limit_client())
            .shim(true)
            .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
            .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_h.join("r.cache"))
            .env("VGPU_SIM_KERNEL_NS", "10000000")
            .args(steps)
            .spawn();
        wait_file(&ready, 60);
        s
    };
    // Two CUDA processes of one container (one keeps the GPU busy) and a shimmed program that
    // never touches CUDA, in another container directory.
    let mut busy = client("busy", 300, true);
    let mut holder = client("hold", 500, false);
    let mut plain =
        sb.run("/bin/sleep").arg("4").shim(true).env("CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_n.join("r.cache")).spawn();
    wait_until("host-gpu.samples", 30, || samples.exists());

    // The driver's figures of the physical device, not the container's view (1 GiB total,
    // its own usage): equal to the simulator's once the clients' allocations are done.
    let mut last = None;
    wait_until("the sample to show the simulator's used/total", 30, || {
        let lines = host_lines(&samples).unwrap();
        let (total, used) = sim_device0(&sb);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert_eq!((l.uuid.as_str(), l.index, l.name.as_str()), (GPU_UUID, 0, "NVIDIA H100 80GB HBM3"));
        assert!(l.used <= l.total && l.util <= 100, "{l:?}");
        let ok = (l.total, l.used) == (total, used);
        last = Some((lines, total, used));
        ok
    });
    let (lines, total, used) = last.unwrap();
    assert_eq!(total, 16384 * MIB, "{lines:?}");
    assert!(used >= 800 * MIB, "both processes' memory: {lines:?}");

    // Refreshed, one publication per 5 s for the container although two processes can publish;
    // the busy device shows in the utilisation.
    let mut stamps = vec![lines[0].at_ms];
    let mut utils = vec![lines[0].util];
    wait_until("two refreshes", 40, || {
        if let Some(l) = host_lines(&samples).and_then(|v| v.into_iter().next())
            && l.at_ms != *stamps.last().unwrap()
        {
            stamps.push(l.at_ms);
            utils.push(l.util);
        }
        stamps.len() >= 3
    });
    for w in stamps.windows(2) {
        assert!(w[1] >= w[0] + 4_900, "one publication per 5 s for the container: {stamps:?}");
    }
    assert!(utils.iter().any(|&u| u >= 50), "the busy GPU's utilisation: {utils:?}");
    let perm = std::fs::symlink_metadata(&samples).unwrap();
    assert!(perm.file_type().is_file() && perm.permissions().mode() & 0o777 == 0o666, "{perm:?}");
    let leftovers: Vec<String> = std::fs::read_dir(&dir_h)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The agent (no NVML) reports exactly what the file says.
    let port = free_port();
    let agent = spawn_agent(&sb, &hook, port, &[("NODE_NAME", NODE)], &[]);
    let uuid_label = format!("device_uuid=\"{GPU_UUID}\"");
    let labels = [uuid_label.as_str(), "device_index=\"0\"", "device_type=\"NVIDIA-NVIDIA H100 80GB HBM3\""];
    wait_until("an agent scrape between two publications", 30, || {
        let before = host_lines(&samples).unwrap();
        let text = metrics(port);
        let after = host_lines(&samples).unwrap();
        if before != after {
            return false;
        }
        let l = &before[0];
        assert_eq!(sample(&text, "hami_host_gpu_memory_used_bytes", &labels), Some(l.used as f64), "{text}");
        assert_eq!(sample(&text, "hami_host_gpu_utilization_ratio", &labels), Some(l.util as f64), "{text}");
        true
    });
    drop(agent);

    // A process that only uses NVML (no CUDA) publishes too, the whole GPU, while its own NVML
    // view is the container's 1 GiB.
    let dir_v = c.join("uid-v_main");
    std::fs::create_dir_all(&dir_v).unwrap();
    std::fs::set_permissions(&dir_v, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut nv = sb
        .run(common::c_program(
            "mem_client",
            &["mem_client.c", "mem13_cmds.c"],
            &["-lcuda", "-lnvidia-ml", "-lpthread"],
        ))
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_v.join("r.cache"))
        .spawn();
    let reply = |nv: &mut Spawned, cmd: &str| {
        nv.send_line(cmd).unwrap();
        loop {
            let l = nv.recv_line(Duration::from_secs(30)).expect("mem_client answers");
            if !l.starts_with("ready=") {
                return l;
            }
        }
    };
    assert!(reply(&mut nv, "nvml_init").contains("rc=0"));
    let view = reply(&mut nv, "nvml_mem 0");
    assert!(view.contains(&format!("total1={}", 1u64 << 30)), "the application's view: {view}");
    let samples_v = dir_v.join("host-gpu.samples");
    wait_until("the NVML-only process's sample", 30, || samples_v.exists());
    let l = &host_lines(&samples_v).unwrap()[0];
    assert_eq!((l.uuid.as_str(), l.total), (GPU_UUID, total), "{l:?}");
    nv.kill();

    // The program that never used CUDA wrote nothing.
    plain.wait_within(Duration::from_secs(30)).unwrap();
    let in_n: Vec<String> =
        std::fs::read_dir(&dir_n).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!in_n.iter().any(|n| n.contains("host-gpu")), "{in_n:?}");
    busy.kill();
    holder.kill();
}

/// Priorities and "limit only when contended" with real processes launching under the shim: the
/// lower-priority container is blocked while the higher one launches, then released; a container
/// alone on its GPU has its switch turned off.
#[test]
fn feedback_blocks_lower_priority_while_higher_launches() {
    feedback_scenario("agent-feedback", 1);
}

/// The same with two agents steering the same regions (as an agent beside another monitor):
/// activity decays twice as fast, but launches re-mark it, so the decisions are the same.
#[test]
fn two_agents_do_no_harm() {
    feedback_scenario("agent-feedback2", 2);
}

fn feedback_scenario(name: &str, agents: usize) {
    agent_bin();
    let sb = Sandbox::new(name);
    let hook = hook_tree(&sb, &["uid-h_main", "uid-l_main"]);
    let c = hook.join("containers");
    let (rh, rl) = (c.join("uid-h_main/r.cache"), c.join("uid-l_main/r.cache"));
    let port = free_port();
    let agent = spawn_agent(&sb, &hook, port, &[], &["--feedback-interval", "100ms"]);
    let _others: Vec<Spawned> =
        (1..agents).map(|_| spawn_agent(&sb, &hook, free_port(), &[], &["--feedback-interval", "130ms"])).collect();
    let launcher = |region: &Path, prio: &str, rounds: usize, gap_ms: u32| {
        let mut args = vec!["info".to_string()];
        for _ in 0..rounds {
            args.push("launch:5".into());
            args.push(format!("sleep:{gap_ms}"));
        }
        sb.run(limit_client())
            .shim(true)
            .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
            .env("CUDA_DEVICE_SM_LIMIT", "50")
            .env("CUDA_TASK_PRIORITY", prio)
            .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", region)
            .args(args)
            .spawn()
    };
    // The high-priority container alone first: its switch goes to 0 (not contended).
    let mut h = launcher(&rh, "0", 60, 40);
    wait_until("high region", 30, || Region::read(&rh).is_some_and(|r| r.priority() == 0));
    wait_until("switch off for a lone container", 20, || word(&rh, SWITCH) == 0);
    let mut l = launcher(&rl, "1", 20, 20);
    let (mut low_blocked, mut high_blocked) = (false, false);
    let t0 = Instant::now();
    while h.is_running() && t0.elapsed() < Duration::from_secs(60) {
        if Region::read(&rl).is_some_and(|r| r.len() > RECENT_KERNEL) {
            low_blocked |= word(&rl, RECENT_KERNEL) == -1 && word(&rl, SWITCH) == 1;
        }
        high_blocked |= word(&rh, RECENT_KERNEL) < 0;
        std::thread::sleep(Duration::from_millis(20));
    }
    h.wait_within(Duration::from_secs(60)).expect("high-priority client ends");
    assert!(low_blocked, "low priority never blocked: {}", agent.stderr());
    assert!(!high_blocked, "the high-priority container was blocked");
    // Released once the high one is idle: the low one finishes its launches.
    let st = l.wait_within(Duration::from_secs(60)).expect("low-priority client ends once released");
    assert!(st.success(), "{}", l.stderr());
    wait_until("unblocked", 10, || word(&rl, RECENT_KERNEL) >= 0);
    let text = metrics(port);
    let blocked = sample(&text, "vgpu_blocked_seconds_total", &["pod=\"uid-l\""]).unwrap_or(0.0);
    assert!(blocked > 0.0, "the blocked time shows in the metrics: {text}");
    assert!(sample(&text, "vgpu_agent_feedback_stores_total", &["field=\"recent_kernel\""]).unwrap() > 0.0);
}

/// GC as the monitor does it, but only with the API server's word: nothing is removed while the
/// API is down (said once, not per retry); then only the old directory of a pod the list lacks.
#[test]
fn gc_only_when_the_api_confirms_the_pod_is_gone() {
    let sb = Sandbox::new("agent-gc");
    let hook = hook_tree(&sb, &["uid-gone_old", "uid-gone_young", "uid-live_old"]);
    let c = hook.join("containers");
    for d in ["uid-gone_old", "uid-gone_young", "uid-live_old"] {
        std::fs::write(c.join(d).join("r.cache"), c_region(0, 1, 0)).unwrap();
        std::fs::set_permissions(c.join(d).join("r.cache"), std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let outside = sb.subdir("outside");
    std::fs::write(outside.join("keep"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, c.join("uid-link_x")).unwrap();
    let past = std::time::SystemTime::now() - Duration::from_secs(3600);
    for d in ["uid-gone_old", "uid-live_old"] {
        std::fs::File::open(c.join(d)).unwrap().set_modified(past).unwrap();
    }
    // API down: a server address where nothing listens.
    let down = kubeconfig(&sb.dir, &format!("http://127.0.0.1:{}", free_port()));
    let port = free_port();
    let mut agent = spawn_agent(
        &sb,
        &hook,
        port,
        &[("NODE_NAME", NODE), ("KUBECONFIG", down.to_str().unwrap()), ("HAMI_RESYNC_INTERVAL", "10m")],
        &["--feedback-interval", "100ms", "--pod-list-interval", "100ms"],
    );
    wait_until("pod list errors", 20, || {
        sample(&metrics(port), "vgpu_agent_pod_list_errors_total", &[]).is_some_and(|v| v >= 5.0)
    });
    assert!(c.join("uid-gone_old").exists(), "removed without the API server's word");
    let text = metrics(port);
    assert!(text.contains("pod=\"uid-live\""), "metrics without names: {text}");
    let err = agent.stderr();
    assert_eq!(err.matches("pod list failed").count(), 1, "said once: {err}");
    agent.kill();
    // API up: only the old directory of the pod the list lacks goes.
    let api = FakeApi::start(&[("uid-live", "ns", "live")]);
    let kc = api.kubeconfig(&sb.dir);
    let port = free_port();
    let agent = spawn_agent(
        &sb,
        &hook,
        port,
        &[("NODE_NAME", NODE), ("KUBECONFIG", kc.to_str().unwrap()), ("HAMI_RESYNC_INTERVAL", "10m")],
        &["--feedback-interval", "100ms", "--pod-list-interval", "100ms"],
    );
    wait_until("GC", 20, || !c.join("uid-gone_old").exists());
    std::thread::sleep(Duration::from_millis(500));
    assert!(c.join("uid-gone_young").exists(), "young directory removed");
    assert!(c.join("uid-live_old").exists(), "live pod's directory removed");
    assert!(std::fs::symlink_metadata(c.join("uid-link_x")).is_ok() && outside.join("keep").exists());
    let text = metrics(port);
    assert_eq!(sample(&text, "vgpu_agent_removed_directories_total", &[]), Some(1.0), "{text}");
    assert!(agent.stderr().contains("removed"), "{}", agent.stderr());
}

/// A tenant's directory holding a FIFO, a symlink to a FIFO, a symlink to a valid region,
/// foreign bytes, a header-only file, too many caches, and a region truncated and regrown under
/// the agent: each is skipped with its reason and counted, nothing blocks, nothing is written
/// outside the two words, the agent survives (no SIGBUS) and keeps steering the valid region.
#[test]
fn hostile_files_are_skipped_with_a_reason() {
    let sb = Sandbox::new("agent-hostile");
    let names = ["p1_fifo", "p2_link", "p3_linkreg", "p4_foreign", "p5_short", "p6_many", "p7_trunc", "p8_ok", "p9_ro"];
    let hook = hook_tree(&sb, &names);
    let c = hook.join("containers");
    let mkfifo = |p: &Path| {
        let cs = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(cs.as_ptr(), 0o666) }, 0);
    };
    mkfifo(&c.join("p1_fifo/a.cache"));
    let out_fifo = sb.dir.join("out.fifo");
    mkfifo(&out_fifo);
    std::os::unix::fs::symlink(&out_fifo, c.join("p2_link/a.cache")).unwrap();
    let out_region = sb.dir.join("out.cache");
    std::fs::write(&out_region, c_region(0, 1, 2)).unwrap();
    std::fs::set_permissions(&out_region, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::symlink(&out_region, c.join("p3_linkreg/a.cache")).unwrap();
    let foreign: Vec<u8> = (0..2_100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(c.join("p4_foreign/a.cache"), &foreign).unwrap();
    std::fs::write(c.join("p5_short/a.cache"), &c_region(0, 1, 0)[..20]).unwrap();
    for f in ["a.cache", "b.cache", "c.cache"] {
        std::fs::write(c.join("p6_many").join(f), c_region(0, 1, 0)).unwrap();
    }
    let trunc = c.join("p7_trunc/a.cache");
    let full = c_region(0, 0, 2);
    std::fs::write(&trunc, &full).unwrap();
    let ok = c.join("p8_ok/a.cache");
    std::fs::write(&ok, c_region(0, 1, 2)).unwrap();
    for p in [&trunc, &ok, &c.join("p4_foreign/a.cache"), &c.join("p5_short/a.cache")] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    // Readable but not writable by the agent (another GPU, so it steers nobody here).
    let ro = c.join("p9_ro/a.cache");
    let mut ro_bytes = c_region(0, 0, 2);
    ro_bytes[64 + GPU_UUID.len() - 1] = b'9';
    std::fs::write(&ro, &ro_bytes).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o644)).unwrap();
    let port = free_port();
    let mut agent = spawn_agent(&sb, &hook, port, &[], &["--feedback-interval", "20ms"]);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let f = std::fs::OpenOptions::new().write(true).open(&trunc).unwrap();
            while !stop.load(Ordering::Relaxed) {
                f.set_len(4096).unwrap();
                std::thread::sleep(Duration::from_micros(300));
                f.set_len(full.len() as u64).unwrap();
                std::thread::sleep(Duration::from_micros(700));
            }
            f.set_len(100).unwrap();
        });
        for _ in 0..20 {
            let _ = metrics(port);
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(agent.is_running(), "agent died: {}", agent.stderr());
    let text = metrics(port);
    for (pod, reason) in [
        ("p1", "not_regular"),
        ("p2", "symlink"),
        ("p3", "symlink"),
        ("p4", "foreign"),
        ("p5", "unknown_layout"),
        ("p6", "unknown_layout"),
        ("p7", "unknown_layout"),
    ] {
        let label = format!("reason=\"{reason}\"");
        assert_eq!(
            sample(&text, "vgpu_region_unusable", &[&format!("pod_uid=\"{pod}\""), &label]),
            Some(1.0),
            "{pod}: {text}"
        );
        assert!(sample(&text, "vgpu_agent_region_skips_total", &[&label]).unwrap() >= 1.0, "{text}");
    }
    // Steered: the valid region's block lifted/decayed (2 -> 1 -> 0), its switch off.
    assert_eq!((word(&ok, RECENT_KERNEL), word(&ok, SWITCH)), (0, 0));
    // Nothing followed or written: the symlinked region keeps its words, the foreign file its
    // bytes, the truncated file its length, the FIFOs are FIFOs.
    assert_eq!(std::fs::read(&out_region).unwrap(), c_region(0, 1, 2));
    assert_eq!(std::fs::read(c.join("p4_foreign/a.cache")).unwrap(), foreign);
    assert_eq!(std::fs::metadata(&trunc).unwrap().len(), 100);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&out_fifo).unwrap().file_type().is_fifo());
    // The read-only region: reported, counted as permission_denied for the feedback, untouched.
    assert!(sample(&text, "hami_vgpu_memory_limit_bytes", &["pod=\"p9\""]).is_some(), "{text}");
    assert!(sample(&text, "vgpu_agent_region_skips_total", &["reason=\"permission_denied\""]).unwrap() >= 1.0);
    assert_eq!(std::fs::read(&ro).unwrap(), ro_bytes);
    let err = agent.stderr();
    assert_eq!(err.matches("p4_foreign: region skipped").count(), 1, "said once: {err}");
    assert_eq!(err.matches("p9_ro (write): region skipped").count(), 1, "said once: {err}");
    agent.kill();
}

/// The interface: HOOK_PATH required; every flag on its own line in --help; an unknown flag is
/// refused with the usage; a missing hook directory is said once and picked up when it appears.
#[test]
fn interface_and_missing_pieces() {
    let sb = Sandbox::new("agent-cli");
    let o = sb.run(agent_bin()).env_remove("HOOK_PATH").ld_library_path(None).timeout_secs(10).go();
    assert_eq!(o.code, Some(1), "{}", o.dump());
    assert!(o.stderr.contains("HOOK_PATH"), "{}", o.dump());
    let h = sb.run(agent_bin()).arg("--help").ld_library_path(None).timeout_secs(10).go();
    h.ok();
    for flag in [
        "--metrics-bind-address",
        "--legacy-metrics",
        "-v N",
        "--feedback-interval",
        "--no-feedback",
        "--pod-list-interval",
        "--help",
    ] {
        assert_eq!(
            h.stdout.lines().filter(|l| l.trim_start().starts_with(flag) || l.contains(&format!(", {flag}"))).count(),
            1,
            "{flag}:\n{}",
            h.stdout
        );
    }
    let u =
        sb.run(agent_bin()).arg("--frobnicate").env("HOOK_PATH", &sb.dir).ld_library_path(None).timeout_secs(10).go();
    assert_ne!(u.code, Some(0), "{}", u.dump());
    assert!(u.stderr.contains("unknown flag") && u.stderr.contains("usage:"), "{}", u.dump());
    // No hook directory, no API server, no NODE_NAME, no NVML: it serves what it can.
    let hook = sb.dir.join("later");
    let port = free_port();
    let agent = spawn_agent(&sb, &hook, port, &[], &["--feedback-interval", "50ms", "--no-feedback"]);
    std::thread::sleep(Duration::from_millis(400));
    let text = metrics(port);
    assert!(text.contains("vgpu_agent_feedback_passes_total"), "{text}");
    std::fs::create_dir_all(hook.join("containers/uid-q_main")).unwrap();
    let r = hook.join("containers/uid-q_main/r.cache");
    std::fs::write(&r, c_region(0, 1, 2)).unwrap();
    wait_until("container picked up", 10, || metrics(port).contains("pod=\"uid-q\""));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(word(&r, RECENT_KERNEL), 2, "--no-feedback wrote a control word");
    let err = agent.stderr();
    assert_eq!(err.matches("cannot list").count(), 1, "said once: {err}");
    assert!(err.contains("recovered"), "{err}");
}
