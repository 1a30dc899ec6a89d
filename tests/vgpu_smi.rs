//! `vgpu-smi` (README "Operating: `vgpu-smi`") on the simulated GPU, checked against independent readers of the
//! region: `tests/py/vgpu_region.py` (through `tests/py/smi_check.py`, the monitor's sums) and
//! `tests/py/rw_common.rs`'s reader. Covers the table, JSON, Prometheus, `--node` over several
//! container directories (valid, corrupt, foreign, misnamed, empty), `--watch`, the counters
//! (refusals move them; "no data yet" for a C-library region), and the control verbs.

mod common;
#[path = "py/rw_common.rs"]
mod rw;

use common::*;
use rw::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const GPU_UUID: &str = "GPU-00000000-0000-4000-8000-000000000000";

/// `target/<profile>/vgpu-smi`, built once per test binary (the harness builds only the libraries).
fn smi() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let a = artifacts();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&a.root).args(["build", "-p", "vgpu-smi", "--target-dir"]).arg(a.profile_dir.parent().unwrap());
        if a.release {
            cmd.arg("--release");
        }
        cmd.env_remove("LD_PRELOAD");
        assert!(cmd.status().expect("cargo build -p vgpu-smi").success(), "building vgpu-smi failed");
        a.profile_dir.join("vgpu-smi")
    })
}

/// vgpu-smi with the sandbox env (CUDA_DEVICE_MEMORY_SHARED_CACHE = the sandbox region) and no
/// driver on the library path: it must not need one.
fn run_smi(sb: &Sandbox, args: &[&str]) -> Out {
    sb.run(smi()).args(args.iter().copied()).ld_library_path(None).timeout_secs(20).go()
}

/// Runs smi_check.py over a JSON document; returns how many regions it checked.
#[track_caller]
fn check_json(sb: &Sandbox, json: &str) -> usize {
    let f = sb.dir.join(format!("smi-{}.json", json.len()));
    std::fs::write(&f, json).unwrap();
    let o = Command::new(python()).arg(py_file("smi_check.py")).arg(&f).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "vgpu-smi JSON disagrees with the region reader:\n{out}{}\n{json}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.lines().find_map(|l| l.strip_prefix("checked=")).unwrap().trim().parse().unwrap()
}

/// Value of `"key":<number>` at its first occurrence after `after` (a tiny reader for assertions;
/// the full comparison is smi_check.py's).
fn json_num(json: &str, after: &str, key: &str) -> Option<u64> {
    let start = json.find(after)?;
    let rest = &json[start..];
    let i = rest.find(&format!("\"{key}\":"))? + key.len() + 3;
    let v: String = rest[i..].chars().take_while(|c| c.is_ascii_digit()).collect();
    v.parse().ok()
}

/// Prometheus samples `name{labels} value` → (name, labels, value); also checks every family has
/// its # HELP and # TYPE lines before its first sample.
fn prom_samples(text: &str) -> Vec<(String, String, f64)> {
    let mut helped = std::collections::BTreeSet::new();
    let mut typed = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for l in text.lines() {
        if let Some(r) = l.strip_prefix("# HELP ") {
            helped.insert(r.split(' ').next().unwrap().to_string());
        } else if let Some(r) = l.strip_prefix("# TYPE ") {
            let mut it = r.split(' ');
            let n = it.next().unwrap().to_string();
            assert!(matches!(it.next(), Some("gauge") | Some("counter")), "{l}");
            typed.insert(n);
        } else if !l.is_empty() {
            let (name, rest) = l.split_at(l.find('{').unwrap_or_else(|| panic!("no labels: {l}")));
            let close = rest.rfind('}').unwrap();
            assert!(name.starts_with("vgpu_"), "{l}");
            assert!(helped.contains(name) && typed.contains(name), "sample before HELP/TYPE: {l}");
            let v: f64 = rest[close + 1..].trim().parse().unwrap_or_else(|_| panic!("value: {l}"));
            out.push((name.to_string(), rest[..=close].to_string(), v));
        }
    }
    out
}

fn prom_get(s: &[(String, String, f64)], name: &str, label_part: &str) -> Option<f64> {
    s.iter().find(|(n, l, _)| n == name && l.contains(label_part)).map(|x| x.2)
}

/// Runs `f` while a shimmed client holds `hold_mib` under a `limit_mib` limit (after one refused
/// 1100 MiB allocation), then lets it exit. Returns the client's output and the holder's pid.
fn with_holder<R>(sb: &Sandbox, region: &Path, limit_mib: u64, hold_mib: u64, f: impl FnOnce(i32) -> R) -> (R, Out) {
    let ready = sb.dir.join(format!("ready.{hold_mib}"));
    let go = sb.dir.join(format!("go.{hold_mib}"));
    let _ = std::fs::remove_file(&ready);
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            sb.run(limit_client())
                .shim(true)
                .env("CUDA_DEVICE_MEMORY_LIMIT", format!("{limit_mib}m"))
                .env("CUDA_DEVICE_SM_LIMIT", "40")
                .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", region)
                .args(["info".to_string(), "alloc:1100".into(), format!("alloc:{hold_mib}"), "pid".into()])
                .arg(format!("touch:{}", ready.display()))
                .arg(format!("wait:{}", go.display()))
                .arg("free_all")
                .timeout_secs(60)
                .go()
        });
        while !ready.exists() && !h.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(ready.exists(), "holder did not get ready");
        // The holder is the container's only live process: its pid is in its slot.
        let r = Region::read(region).expect("region");
        let pid = r.live().last().map(|s| s.pid).expect("holder slot");
        let res = f(pid);
        std::fs::write(&go, b"").unwrap();
        let out = h.join().unwrap();
        out.ok();
        (res, out)
    })
}

#[test]
fn container_view_table_json_prometheus_match_the_region() {
    let sb = Sandbox::new("smi-container");
    let region = sb.region();
    let ((), holder) = with_holder(&sb, &region, 1024, 300, |pid| {
        let r = Region::read(&region).unwrap();
        let used = r.container_used(0);
        assert!(used >= 300 * MIB, "{}", r.describe());

        // JSON, found through the environment as the library finds the region.
        let j = run_smi(&sb, &["--json"]);
        j.ok();
        assert_eq!(check_json(&sb, &j.stdout), 1, "{}", j.stdout);
        assert!(j.stdout.starts_with("{\"schema\":\"vgpu-smi\",\"version\":1,\"mode\":\"container\""), "{}", j.stdout);
        assert_eq!(json_num(&j.stdout, "\"devices\"", "memory_used_bytes"), Some(used));
        assert_eq!(json_num(&j.stdout, "\"devices\"", "memory_limit_bytes"), Some(1024 * MIB));
        assert_eq!(json_num(&j.stdout, "\"devices\"", "sm_limit_percent"), Some(40));
        // §3: the refused 1100 MiB allocation is counted.
        assert_eq!(
            json_num(&j.stdout, "\"counters\":{\"allocation_refusals\"", "allocation_refusals"),
            Some(1),
            "{}",
            j.stdout
        );
        assert_eq!(json_num(&j.stdout, "\"allocation_refusals\"", "refused_bytes"), Some(1100 * MIB), "{}", j.stdout);
        assert!(j.stdout.contains(&format!("\"pid\":{pid},")), "{}", j.stdout);

        // Table: nvidia-smi-like, human units, the process row.
        let t = run_smi(&sb, &[]);
        t.ok();
        assert!(t.stdout.contains(GPU_UUID), "{}", t.stdout);
        assert!(t.stdout.contains("1.00 GiB"), "limit in human units: {}", t.stdout);
        assert!(t.stdout.contains("1 (1.07 GiB)"), "refusals column: {}", t.stdout);
        assert!(t.stdout.contains("40%"), "{}", t.stdout);
        let row = t
            .stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("no row for {pid}: {}", t.stdout));
        assert!(row.trim_end().ends_with("running"), "{row}");
        // Columns line up: the header's "Used" ends where each device row's used cell ends.
        let lines: Vec<&str> = t.stdout.lines().collect();
        let hi = lines.iter().position(|l| l.contains("Dev") && l.contains("UUID")).unwrap();
        assert_eq!(lines[hi].len(), lines[hi + 1].len(), "rule under the header: {}", t.stdout);

        // Prometheus.
        let p = run_smi(&sb, &["--prometheus"]);
        p.ok();
        let s = prom_samples(&p.stdout);
        let dl = format!("device_uuid=\"{GPU_UUID}\"");
        assert_eq!(prom_get(&s, "vgpu_memory_used_bytes", &dl), Some(used as f64), "{}", p.stdout);
        assert_eq!(prom_get(&s, "vgpu_memory_limit_bytes", &dl), Some((1024 * MIB) as f64));
        assert_eq!(prom_get(&s, "vgpu_allocation_refusals_total", &dl), Some(1.0));
        assert_eq!(prom_get(&s, "vgpu_processes", "container=\"\""), Some(1.0));
        assert!(p.stdout.contains("pod_uid=\"\",container=\"\",device_uuid="), "{}", p.stdout);
    });
    assert_eq!(holder.val("s1.alloc"), OOM, "{}", holder.dump());
    // After exit: the region stays; no processes; counters keep their values (monotonic).
    let j = run_smi(&sb, &["--json"]);
    j.ok();
    check_json(&sb, &j.stdout);
    assert!(j.stdout.contains("\"processes\":[]"), "{}", j.stdout);
    assert_eq!(json_num(&j.stdout, "\"allocation_refusals\"", "allocation_refusals"), Some(1));
}

#[test]
fn no_region_and_no_data_yet() {
    let sb = Sandbox::new("smi-nodata");
    // No region file: one clear line, status 1, no file created.
    let o = run_smi(&sb, &[]);
    assert_eq!(o.code, Some(1), "{}", o.dump());
    assert!(o.stdout.contains("no region file yet"), "{}", o.dump());
    assert!(!sb.region().exists());
    // A region as the C library leaves it (2 008 953 bytes, no extension): counters "no data yet".
    let mut b = vec![0u8; REGION_SIZE + 1];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    b[56..64].copy_from_slice(&1u64.to_le_bytes()); // device_num
    b[64..64 + GPU_UUID.len()].copy_from_slice(GPU_UUID.as_bytes());
    b[1600..1608].copy_from_slice(&(2u64 << 30).to_le_bytes()); // limit[0]
    b[1728..1736].copy_from_slice(&100u64.to_le_bytes()); // sm_limit[0]
    for (k, (pid, status, total)) in
        [(4242i32, 1i32, 100 * MIB), (4243, 0, 50 * MIB), (4244, 2, 7 * MIB)].iter().enumerate()
    {
        let s = 1856 + 1960 * k;
        b[s..s + 4].copy_from_slice(&pid.to_le_bytes());
        b[s + 8 + 16..s + 8 + 24].copy_from_slice(&total.to_le_bytes()); // data_size
        b[s + 8 + 32..s + 8 + 40].copy_from_slice(&total.to_le_bytes()); // total
        b[s + 1928..s + 1932].copy_from_slice(&status.to_le_bytes());
    }
    b[2_008_896..2_008_900].copy_from_slice(&3i32.to_le_bytes()); // proc_num
    std::fs::write(sb.region(), &b).unwrap();
    let j = run_smi(&sb, &["--json"]);
    j.ok();
    check_json(&sb, &j.stdout);
    assert_eq!(
        json_num(&j.stdout, "\"devices\"", "memory_used_bytes"),
        Some(107 * MIB),
        "status 0 slot not summed: {}",
        j.stdout
    );
    assert!(j.stdout.contains("\"extension\":false"), "{}", j.stdout);
    assert!(j.stdout.contains("\"counters\":null"), "no data yet must not read as 0: {}", j.stdout);
    let t = run_smi(&sb, &[]);
    t.ok();
    let dev_row = t.stdout.lines().find(|l| l.contains(GPU_UUID)).unwrap();
    assert!(dev_row.trim_end().ends_with('-'), "counters shown as '-': {dev_row}");
    assert!(t.stdout.contains("exited"), "pid 4242 does not exist here: {}", t.stdout);
    let p = run_smi(&sb, &["--prometheus"]);
    assert!(!p.stdout.contains("vgpu_allocation_refusals_total"), "no data → no counter samples: {}", p.stdout);
    assert_eq!(std::fs::read(sb.region()).unwrap(), b, "viewing wrote the region");
}

#[test]
fn node_view_over_container_dirs() {
    let sb = Sandbox::new("smi-node");
    let root = sb.subdir("hook");
    let c = root.join("containers");
    let a_dir = c.join("pod-a_main");
    let b_dir = c.join("pod-b_side");
    for d in [&a_dir, &b_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    // pod-b: a finished container (limits, no processes).
    let b_region = b_dir.join("0b.cache");
    sb.run(limit_client())
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "2g")
        .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", &b_region)
        .args(["alloc:10", "free_all"])
        .go()
        .ok();
    std::fs::write(b_dir.join("libvgpu.so"), b"").unwrap(); // the runtime's placeholder: not a region
    // Bad ones.
    let corrupt = c.join("pod-c_bad");
    std::fs::create_dir_all(&corrupt).unwrap();
    let mut trunc = MAGIC.to_le_bytes().to_vec();
    trunc.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
    trunc.resize(4096, 0);
    std::fs::write(corrupt.join("x.cache"), &trunc).unwrap();
    let foreign = c.join("pod-d_foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("y.cache"), vec![0xabu8; 3_000_000]).unwrap();
    std::fs::create_dir_all(c.join("pod-e_empty")).unwrap();
    std::fs::create_dir_all(c.join("noseparator")).unwrap();
    std::fs::write(c.join("stray-file"), b"x").unwrap();
    let unreadable = c.join("pod-f_dir");
    std::fs::create_dir_all(unreadable.join("z.cache")).unwrap(); // a directory named like a region

    let a_region = a_dir.join("0a.cache");
    let ((), _) = with_holder(&sb, &a_region, 1024, 200, |_pid| {
        let j = run_smi(&sb, &["--node", root.to_str().unwrap(), "--json"]);
        j.ok();
        assert_eq!(check_json(&sb, &j.stdout), 2, "{}", j.stdout);
        // Sorted by directory; every bad entry listed with its reason.
        let order: Vec<usize> = [
            "pod-a_main",
            "pod-b_side",
            "pod-c_bad",
            "pod-d_foreign",
            "pod-e_empty",
            "pod-f_dir",
            "noseparator",
            "stray-file",
        ]
        .iter()
        .map(|n| j.stdout.find(&format!("/{n}")).unwrap_or_else(|| panic!("{n} missing: {}", j.stdout)))
        .collect();
        assert!(order[..6].windows(2).all(|w| w[0] < w[1]), "not sorted: {order:?}");
        for (frag, why) in [
            ("x.cache", "unknown cache file size 4096"),
            ("y.cache", "foreign content"),
            ("pod-e_empty", "no *.cache file"),
            ("pod-f_dir/z.cache", "a directory"),
            ("noseparator", "name is not <podUID>_<container>"),
            ("stray-file", "not a directory"),
        ] {
            let i = j.stdout.find(frag).unwrap();
            let entry = &j.stdout[i..i + j.stdout[i..].find('}').unwrap()];
            assert!(entry.contains(why), "{frag}: want {why:?} in {entry}");
        }
        assert!(!j.stdout.contains("libvgpu.so\""), "the library placeholder is not a region: {}", j.stdout);
        assert!(j.stdout.contains("\"pod_uid\":\"pod-a\",\"container\":\"main\""), "{}", j.stdout);

        // Default root from HOOK_PATH; the table has one block per container.
        let t = sb.run(smi()).arg("--node").env("HOOK_PATH", &root).ld_library_path(None).go();
        t.ok();
        assert_eq!(t.stdout.matches("pod pod-").count(), 6, "{}", t.stdout);
        assert_eq!(t.stdout.matches("UNUSABLE").count(), 6, "{}", t.stdout);
        assert!(t.stdout.contains("2.00 GiB"), "{}", t.stdout);

        let p = run_smi(&sb, &["--node", root.to_str().unwrap(), "--prometheus"]);
        p.ok();
        let s = prom_samples(&p.stdout);
        let a_used = Region::read(&a_region).unwrap().container_used(0);
        assert_eq!(prom_get(&s, "vgpu_memory_used_bytes", "pod_uid=\"pod-a\",container=\"main\""), Some(a_used as f64));
        assert_eq!(
            prom_get(&s, "vgpu_memory_limit_bytes", "pod_uid=\"pod-b\",container=\"side\""),
            Some((2u64 << 30) as f64)
        );
        assert_eq!(s.iter().filter(|x| x.0 == "vgpu_region_unusable").count(), 6, "{}", p.stdout);
    });

    // A region another user cannot read (mode 0600, root's): listed with the reason, not a crash.
    if unsafe { libc::geteuid() } == 0 && Path::new("/usr/bin/setpriv").exists() {
        let secret = c.join("pod-g_secret");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::copy(&b_region, secret.join("s.cache")).unwrap();
        std::fs::set_permissions(secret.join("s.cache"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut d = Some(root.as_path());
        while let Some(x) = d {
            if x.starts_with(&artifacts().tmp_root) {
                std::fs::set_permissions(x, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            d = x.parent();
        }
        let o = Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .arg(smi())
            .args(["--node", root.to_str().unwrap(), "--json"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&o.stderr));
        let i = out.find("pod-g_secret/s.cache").unwrap_or_else(|| panic!("{out}"));
        let entry = &out[i..i + out[i..].find('}').unwrap()];
        assert!(entry.contains("cannot open") && entry.contains("ermission denied"), "{entry}");
        assert!(
            out.contains("\"pod_uid\":\"pod-b\"") && out.contains("\"memory_limit_bytes\":2147483648"),
            "the others still shown: {out}"
        );
    }
}

#[test]
fn watch_repeats() {
    let sb = Sandbox::new("smi-watch");
    sb.run(limit_client()).shim(true).args(["alloc:1"]).go().ok();
    let mut child =
        sb.run(smi()).arg("--region").arg(sb.region()).args(["--json", "--watch", "0.2"]).ld_library_path(None).spawn();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.signal(libc::SIGTERM);
    child.wait_within(std::time::Duration::from_secs(20)).expect("vgpu-smi --watch ends on SIGTERM");
    let text = child.rest_of_stdout(std::time::Duration::from_secs(5)).join("\n");
    let docs: Vec<&str> = text.lines().filter(|l| l.starts_with("{\"schema\"")).collect();
    assert!(docs.len() >= 3, "expected several refreshes in 1.5 s at 0.2 s: {text}");
    for d in docs {
        check_json(&sb, d);
    }
}

#[test]
fn control_verbs() {
    let sb = Sandbox::new("smi-control");
    let region = sb.region();
    sb.run(limit_client()).shim(true).env("CUDA_DEVICE_MEMORY_LIMIT", "1g").args(["alloc:1"]).go().ok();
    let r = || Region::read(&region).unwrap();
    let rk = |r: &Region| i32::from_le_bytes(r.bytes[2_008_904..2_008_908].try_into().unwrap());

    let o = run_smi(&sb, &["set-limit", "--memory", "1536m"]);
    o.ok();
    assert!(o.stdout.contains("device 0: memory limit 1073741824 -> 1610612736"), "{}", o.dump());
    assert_eq!(r().limit(0), 1536 * MIB);
    run_smi(&sb, &["set-limit", "--device", "0", "--sm", "30"]).ok();
    assert_eq!(r().sm_limit(0), 30);
    run_smi(&sb, &["set-limit", "--memory", "4GiB", "--device", "1"]).ok();
    assert_eq!((r().limit(0), r().limit(1)), (1536 * MIB, 4 << 30));
    // A running process sees the new limit in its view (the region's limit is live).
    let v = sb.run(limit_client()).shim(true).env("CUDA_DEVICE_MEMORY_LIMIT", "1g").args(["info"]).go();
    assert_eq!(v.val("s0.total"), (1536 * MIB).to_string(), "{}", v.dump());

    for (args, want) in [
        (&["set-limit", "--sm", "0"][..], "a percent from 1 to 100"),
        (&["set-limit", "--memory", "lots"][..], "not a size"),
        (&["set-limit"][..], "exactly one of"),
        (&["set-limit", "--device", "16", "--sm", "5"][..], "out of range"),
    ] {
        let o = run_smi(&sb, args);
        assert_eq!(o.code, Some(1), "{args:?}: {}", o.dump());
        assert!(o.stderr.contains(want), "{args:?}: {}", o.dump());
    }
    // The burst ceiling is our extension's `sm_ceiling` word of device d, at file offset
    // 2 011 136 (extension) + 64 (limiter states) + 192·d + 184 (crates/vgpu-core/src/region.rs, `DeviceLimiterState`).
    let ceiling = |r: &Region, d: usize| {
        let at = 2_011_136 + 64 + 192 * d + 184;
        u64::from_le_bytes(r.bytes[at..at + 8].try_into().unwrap())
    };
    assert_eq!(ceiling(&r(), 0), 0);
    let o = run_smi(&sb, &["set-limit", "--device", "0", "--sm-ceiling", "80"]);
    o.ok();
    assert!(o.stdout.contains("device 0: SM ceiling 0 -> 80"), "{}", o.dump());
    assert_eq!(ceiling(&r(), 0), 80);
    let j = run_smi(&sb, &["--json"]);
    assert!(j.stdout.contains("\"sm_ceiling_percent\":80"), "{}", j.dump());
    let o = run_smi(&sb, &["set-limit", "--sm-ceiling", "101"]);
    assert_eq!(o.code, Some(1), "{}", o.dump());
    assert_eq!(ceiling(&r(), 0), 80);
    // A file of the C library's size has no extension: refused, nothing written.
    let c_file = sb.dir.join("c-library.cache");
    std::fs::write(&c_file, &r().bytes[..2_008_953]).unwrap();
    let o = sb
        .run(smi())
        .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", &c_file)
        .args(["set-limit", "--sm-ceiling", "80"])
        .ld_library_path(None)
        .go();
    assert_eq!(o.code, Some(2), "{}", o.dump());
    assert!(o.stderr.contains("no libvgpu extension block"), "{}", o.dump());

    run_smi(&sb, &["block"]).ok();
    assert_eq!(rk(&r()), -1);
    let t = run_smi(&sb, &[]);
    assert!(t.stdout.contains("BLOCKING launches"), "{}", t.stdout);
    let o = run_smi(&sb, &["unblock"]);
    o.ok();
    assert_eq!(rk(&r()), 0, "{}", o.stdout);
    assert!(run_smi(&sb, &["unblock"]).stdout.contains("nothing written"));

    // sweep: a SIGKILLed holder leaves its slot; sweep frees it and counts it.
    let ready = sb.dir.join("k.ready");
    let mut child = sb
        .run(limit_client())
        .shim(true)
        .args(["alloc:100".to_string(), format!("touch:{}", ready.display()), "sleep:60000".into()])
        .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", &region)
        .env_remove("VGPU_SIM_COUNT_FILE")
        .spawn();
    wait_file(&ready, 30);
    child.kill().expect("reaped");
    assert_eq!(r().live().len(), 1, "the killed process keeps its slot: {}", r().describe());
    let before_lkt = &r().bytes[2_008_912..2_008_920].to_vec();
    let o = run_smi(&sb, &["sweep"]);
    o.ok();
    assert!(o.stdout.contains("freed 1 dead slot(s)"), "{}", o.dump());
    assert!(r().live().is_empty(), "{}", r().describe());
    assert_eq!(&r().bytes[2_008_912..2_008_920], &before_lkt[..], "sweep must not stamp last_kernel_time");
    let j = run_smi(&sb, &["--json"]);
    assert!(j.stdout.contains("\"counters\":{\"swept_slots\":1,\"sweeps\":1}"), "{}", j.stdout);
    assert!(run_smi(&sb, &["sweep"]).stdout.contains("freed 0"));

    // Without write access: refused clearly, nothing written.
    std::fs::set_permissions(&region, std::fs::Permissions::from_mode(0o444)).unwrap();
    let snapshot = std::fs::read(&region).unwrap();
    let o = if unsafe { libc::geteuid() } == 0 {
        // Root ignores modes: drop to UID 1000 (the sandbox path must be traversable).
        let mut p = region.parent();
        while let Some(d) = p {
            if d.starts_with(&artifacts().tmp_root) || d == artifacts().tmp_root {
                let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
            }
            p = d.parent();
        }
        Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .arg(smi())
            .arg("--region")
            .arg(&region)
            .args(["set-limit", "--memory", "8g"])
            .output()
            .unwrap()
    } else {
        Command::new(smi()).arg("--region").arg(&region).args(["set-limit", "--memory", "8g"]).output().unwrap()
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("refused: no write access"), "{err}");
    assert_eq!(std::fs::read(&region).unwrap(), snapshot);
}

#[test]
fn counters_move_with_throttling_and_the_monitor_block() {
    let sb = Sandbox::new("smi-throttle");
    let region = sb.region();
    let counters = |sb: &Sandbox| {
        let j = run_smi(sb, &["--json"]);
        j.ok();
        check_json(sb, &j.stdout);
        let get = |k: &str| {
            json_num(&j.stdout, "\"counters\":{\"allocation_refusals\"", k)
                .unwrap_or_else(|| panic!("{k}: {}", j.stdout))
        };
        (get("throttled_ns"), get("throttled_launches"), get("blocked_ns"))
    };
    let limited = |steps: &[&str]| {
        sb.run(limit_client())
            .shim(true)
            .env("CUDA_DEVICE_SM_LIMIT", "10")
            .env("GPU_CORE_UTILIZATION_POLICY", "force")
            // 2 ms kernels: 60 of them are 120 ms of device time, far past a 10% budget.
            .env("VGPU_SIM_KERNEL_NS", "2000000")
            .args(steps.iter().copied())
            .timeout_secs(60)
    };
    limited(&["launch:60"]).go().ok();
    let (t_ns, t_n, b0) = counters(&sb);
    assert!(t_n > 0 && t_ns > 0, "60 launches of 2 ms at a 10% limit were never throttled: {t_ns} ns, {t_n} launches");
    assert_eq!(b0, 0);

    // The monitor's block (written by vgpu-smi block) holds launches until unblock; the time shows.
    run_smi(&sb, &["block"]).ok();
    let (_, out) = std::thread::scope(|s| {
        let h = s.spawn(|| limited(&["launch:5"]).go());
        // Wait until the client has attached (its slot is live), then keep it blocked ≥ 300 ms.
        let t0 = std::time::Instant::now();
        while Region::read(&region).unwrap().live().is_empty() && t0.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        run_smi(&sb, &["unblock"]).ok();
        ((), h.join().unwrap())
    });
    out.ok();
    assert_eq!(out.val("s0.launch"), "0", "{}", out.dump());
    let (t_ns2, t_n2, b1) = counters(&sb);
    assert!(b1 >= 100_000_000, "blocked time {b1} ns for a block of >= 300 ms");
    assert!(t_ns2 >= t_ns && t_n2 >= t_n, "counters went backwards");
}

/// The library's own sweeps (at attach and before a refusal) are counted too.
#[test]
fn library_sweeps_are_counted() {
    let sb = Sandbox::new("smi-libsweep");
    let ready = sb.dir.join("k.ready");
    let mut child = sb
        .run(limit_client())
        .shim(true)
        .args(["alloc:100".to_string(), format!("touch:{}", ready.display()), "sleep:60000".into()])
        .env_remove("VGPU_SIM_COUNT_FILE")
        .spawn();
    wait_file(&ready, 30);
    child.kill().expect("reaped");
    let j = run_smi(&sb, &["--json"]);
    assert!(j.stdout.contains("\"counters\":{\"swept_slots\":0,\"sweeps\":0}"), "{}", j.stdout);
    assert!(j.stdout.contains("\"status_text\":\"exited\""), "the dead holder shows as exited: {}", j.stdout);
    sb.run(limit_client()).shim(true).args(["alloc:1"]).go().ok();
    let j = run_smi(&sb, &["--json"]);
    check_json(&sb, &j.stdout);
    assert!(j.stdout.contains("\"counters\":{\"swept_slots\":1,\"sweeps\":1}"), "{}", j.stdout);
}

/// A v1.2 region as the C library leaves it, one device, `limit[0]` = 1 GiB.
fn c_region_bytes() -> Vec<u8> {
    let mut b = vec![0u8; REGION_SIZE + 1];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    b[56..64].copy_from_slice(&1u64.to_le_bytes());
    b[64..64 + GPU_UUID.len()].copy_from_slice(GPU_UUID.as_bytes());
    b[1600..1608].copy_from_slice(&(1u64 << 30).to_le_bytes());
    b
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo {}", p.display());
}

/// Node view as root over a tenant directory holding a symlink to a FIFO (which blocks any
/// reader that opens it without O_NONBLOCK), a FIFO and a symlink to a valid region: each is
/// skipped with its reason, nothing blocks, the valid regions beside them are shown.
#[test]
fn node_view_never_follows_or_blocks_on_tenant_files() {
    let sb = Sandbox::new("smi-hostile");
    let root = sb.subdir("hook");
    let dirs = ["pod1_fifo", "pod2_link", "pod3_linkreg", "pod4_ok"];
    for d in dirs {
        std::fs::create_dir_all(root.join("containers").join(d)).unwrap();
    }
    let c = root.join("containers");
    let outside = sb.dir.join("outside.fifo");
    mkfifo(&outside);
    mkfifo(&c.join("pod1_fifo/a.cache"));
    std::os::unix::fs::symlink(&outside, c.join("pod2_link/a.cache")).unwrap();
    std::fs::write(sb.dir.join("outside.cache"), c_region_bytes()).unwrap();
    std::os::unix::fs::symlink(sb.dir.join("outside.cache"), c.join("pod3_linkreg/a.cache")).unwrap();
    std::fs::write(c.join("pod4_ok/a.cache"), c_region_bytes()).unwrap();
    let o = sb
        .run(smi())
        .args(["--node".as_ref(), root.as_os_str(), "--json".as_ref()])
        .ld_library_path(None)
        .timeout_secs(10)
        .go();
    assert_eq!(o.signal, None, "{}", o.dump());
    assert!(o.elapsed < std::time::Duration::from_secs(9), "blocked: {}", o.dump());
    let t = sb.run(smi()).args(["--node".as_ref(), root.as_os_str()]).ld_library_path(None).timeout_secs(10).go();
    // A pod's block of the table: from its "pod <uid>" line to the next one.
    let line = |pod: &str| {
        let i = t.stdout.find(&format!("pod {pod} ")).unwrap_or_else(|| panic!("{pod}: {}", t.dump()));
        let rest = &t.stdout[i + 1..];
        rest[..rest.find("\npod ").unwrap_or(rest.len())].to_string()
    };
    assert!(line("pod1").contains("a FIFO"), "{}", t.dump());
    assert!(line("pod2").contains("symbolic link"), "{}", t.dump());
    assert!(line("pod3").contains("symbolic link"), "{}", t.dump());
    assert!(t.stdout.contains(GPU_UUID), "the valid region beside them is shown: {}", t.dump());
    // The container view and the control verbs refuse them too, without blocking.
    for (f, want) in [(c.join("pod1_fifo/a.cache"), "FIFO"), (c.join("pod2_link/a.cache"), "symbolic link")] {
        let v = sb.run(smi()).args(["--region".as_ref(), f.as_os_str()]).ld_library_path(None).timeout_secs(10).go();
        assert_eq!(v.code, Some(1), "{}", v.dump());
        assert!(v.stdout.contains(want), "{}", v.dump());
        let b = sb
            .run(smi())
            .args(["--region".as_ref(), f.as_os_str(), "block".as_ref()])
            .ld_library_path(None)
            .timeout_secs(10)
            .go();
        assert_eq!(b.code, Some(2), "{}", b.dump());
        assert!(b.stderr.contains(want), "{}", b.dump());
    }
    assert_eq!(std::fs::read(sb.dir.join("outside.cache")).unwrap(), c_region_bytes(), "symlink target written");
}

/// `set-limit` while another process keeps truncating and re-growing the region: every run
/// ends with a status (0, or 2 with a reason), never a signal (no mapping to fault on), and a
/// truncated file is never grown back by the write.
#[test]
fn set_limit_survives_truncation() {
    let sb = Sandbox::new("smi-trunc");
    let region = sb.region();
    let full = c_region_bytes();
    std::fs::write(&region, &full).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut ok, mut refused) = (0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let f = std::fs::OpenOptions::new().write(true).open(&region).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.set_len(4096).unwrap();
                std::thread::sleep(std::time::Duration::from_micros(200));
                f.set_len(full.len() as u64).unwrap();
                // Whole for longer than truncated, so that under load some runs still find it whole.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        for _ in 0..150 {
            let o = run_smi(&sb, &["set-limit", "--memory", "2g"]);
            assert_eq!(o.signal, None, "killed by a signal: {}", o.dump());
            match o.code {
                Some(0) => ok += 1,
                Some(2) => refused += 1,
                _ => panic!("{}", o.dump()),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(ok > 0, "no run succeeded ({refused} refused)");
    // The limit word holds either value (written or truncated away), nothing else.
    let b = std::fs::read(&region).unwrap();
    let l = u64::from_le_bytes(b[1600..1608].try_into().unwrap());
    assert!(l == 2 << 30 || l == 0, "limit {l}");
    // A truncated region is refused and stays as short as the tenant left it.
    std::fs::OpenOptions::new().write(true).open(&region).unwrap().set_len(100).unwrap();
    let o = run_smi(&sb, &["set-limit", "--memory", "2g"]);
    assert_eq!(o.code, Some(2), "{}", o.dump());
    assert_eq!(std::fs::metadata(&region).unwrap().len(), 100);
}

/// A region the caller may not read: "permission denied", not "no region file yet".
#[test]
fn permission_denied_is_named() {
    let sb = Sandbox::new("smi-eacces");
    let dir = sb.subdir("private");
    std::fs::write(dir.join("r.cache"), c_region_bytes()).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&sb.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let region = dir.join("r.cache");
    // As nobody: the directory cannot be searched.
    let o = sb
        .run("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(smi())
        .args(["--region".as_ref(), region.as_os_str()])
        .ld_library_path(None)
        .timeout_secs(10)
        .go();
    assert_eq!(o.code, Some(1), "{}", o.dump());
    assert!(o.stdout.contains("permission denied"), "{}", o.dump());
    assert!(!o.stdout.contains("no region file yet"), "{}", o.dump());
    // The file itself unreadable (directory searchable).
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&region, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = sb
        .run("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(smi())
        .args(["--region".as_ref(), region.as_os_str()])
        .ld_library_path(None)
        .timeout_secs(10)
        .go();
    assert!(o.stdout.contains("permission denied"), "{}", o.dump());
}

/// `--help` names every flag on a line of its own; an unknown flag prints the usage, status 1.
#[test]
fn help_lists_every_flag_and_unknown_flags_fail() {
    let sb = Sandbox::new("smi-help");
    let h = run_smi(&sb, &["--help"]);
    h.ok();
    for flag in [
        "--region",
        "--node",
        "--json",
        "--prometheus",
        "--watch",
        "--device",
        "--memory",
        "--sm ",
        "--sm-ceiling",
        "--help",
    ] {
        let n = h
            .stdout
            .lines()
            .filter(|l| {
                l.trim_start().starts_with(flag)
                    || l.trim_start().starts_with(&format!("-i I, {flag}"))
                    || l.contains(&format!(", {flag}"))
            })
            .count();
        assert!(n >= 1, "{flag} has no line of its own:\n{}", h.stdout);
    }
    let o = run_smi(&sb, &["--frobnicate"]);
    assert_eq!(o.code, Some(1), "{}", o.dump());
    assert!(o.stderr.contains("unknown argument") && o.stderr.contains("usage:"), "{}", o.dump());
}
