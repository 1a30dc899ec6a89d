//! Burst compute (the SM limit as a guarantee, idle time up to a ceiling) and SM limit changes followed live, on the simulated
//! GPU, with real separate processes per container (separate regions). Bands are generous (the
//! machine is loaded; the targets are measured by ci/bench_compute.sh and limiter/vsim.rs).

mod common;

use common::simbusy::{busy, read_pid, share};
use common::{Out, Sandbox, artifacts};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `tests/c/compute_client.c`, compiled once per test binary (own copy: tests/compute.rs may
/// rebuild its copy at the same time).
fn client() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let a = artifacts();
        let out = a.bin.join("compute_client_burst");
        let tmp = a.bin.join(format!(".compute_client_burst.tmp{}", std::process::id()));
        let st = std::process::Command::new(std::env::var_os("CC").unwrap_or_else(|| "gcc".into()))
            .args(["-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-Wno-unused-function", "-I"])
            .arg(a.root.join("tests/c"))
            .arg("-o")
            .arg(&tmp)
            .arg(a.root.join("tests/c/compute_client.c"))
            .arg("-L")
            .arg(&a.simlib)
            .args(["-lcuda", "-lpthread"])
            .env_remove("LD_PRELOAD")
            .status()
            .expect("run cc");
        assert!(st.success(), "compiling compute_client.c failed");
        std::fs::rename(&tmp, &out).expect("rename client");
        out
    })
    .clone()
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sleep_until_mono(t: u64) {
    let n = mono_ns();
    if t > n {
        std::thread::sleep(Duration::from_nanos(t - n));
    }
}

/// One container: its region, limit, ceiling (0 = none), processes, start offset (s).
#[derive(Clone)]
struct Ctr {
    region: PathBuf,
    limit: u32,
    ceiling: u32,
    procs: usize,
    start: f64,
}

fn run_client(sb: &Sandbox, c: &Ctr, args: &[String], extra: &[(&str, &str)]) -> Out {
    let mut r = sb.run(client()).shim(true).timeout_secs(60).args(args.to_vec());
    r = r.env("CUDA_DEVICE_MEMORY_SHARED_CACHE", &c.region).env("CUDA_DEVICE_SM_LIMIT", c.limit.to_string());
    r = r.env("GPU_CORE_UTILIZATION_POLICY", "force").env("VGPU_SIM_PID_OFFSET", "100000");
    if c.ceiling != 0 {
        r = r.env("CUDA_DEVICE_SM_CEILING", c.ceiling.to_string());
    }
    for (k, v) in extra {
        r = r.env(k, v);
    }
    r.go()
}

/// Runs the containers (each process `work` for `secs` from its container's start) and returns
/// each container's share over every window `(from, to)` (seconds after the common start).
fn measure(sb: &Sandbox, ctrs: &[Ctr], work: &[&str], secs: f64, windows: &[(f64, f64)]) -> Vec<Vec<f64>> {
    sb.run(client()).args(["--count", "0"]).go().ok();
    let t0 = mono_ns() + 800_000_000;
    let pidfs: Vec<Vec<PathBuf>> = ctrs
        .iter()
        .enumerate()
        .map(|(g, c)| (0..c.procs).map(|i| sb.dir.join(format!("pid{g}_{i}"))).collect())
        .collect();
    std::thread::scope(|s| {
        let mut hs = Vec::new();
        for (g, c) in ctrs.iter().enumerate() {
            for pf in &pidfs[g] {
                let start = t0 + (c.start * 1e9) as u64;
                let mut args: Vec<String> = work.iter().map(|s| s.to_string()).collect();
                args.extend([
                    "--seconds".into(),
                    format!("{}", secs - c.start),
                    "--start-at".into(),
                    start.to_string(),
                    "--pid-file".into(),
                    pf.to_str().unwrap().into(),
                ]);
                hs.push(s.spawn(move || run_client(sb, c, &args, &[])));
            }
        }
        let pids: Vec<Vec<u32>> = pidfs.iter().map(|v| v.iter().map(|p| read_pid(p)).collect()).collect();
        let mut out = vec![Vec::new(); ctrs.len()];
        for &(a, b) in windows {
            sleep_until_mono(t0 + (a * 1e9) as u64);
            let (x, ta) = (busy(sb), mono_ns());
            sleep_until_mono(t0 + (b * 1e9) as u64);
            let (y, tb) = (busy(sb), mono_ns());
            for (g, p) in pids.iter().enumerate() {
                out[g].push(share(&x, &y, p, tb - ta));
            }
        }
        for h in hs {
            h.join().unwrap().ok();
        }
        out
    })
}

fn ctr(sb: &Sandbox, name: &str, limit: u32, ceiling: u32, procs: usize) -> Ctr {
    Ctr { region: sb.dir.join(format!("{name}.cache")), limit, ceiling, procs, start: 0.0 }
}

const SHORT: &[&str] = &["--kernel-us", "50"];

#[test]
fn alone_a_bursting_container_uses_the_idle_device() {
    let sb = Sandbox::new("burst_alone");
    let v = measure(&sb, &[ctr(&sb, "a", 30, 100, 1)], SHORT, 3.5, &[(1.0, 3.0)]);
    assert!(v[0][0] >= 70.0, "limit 30 ceiling 100 alone: {:.1} % (target ≥ 90)", v[0][0]);
    // A ceiling below 100 is a cap.
    let sb = Sandbox::new("burst_alone_60");
    let v = measure(&sb, &[ctr(&sb, "a", 30, 60, 1)], SHORT, 3.5, &[(1.0, 3.0)]);
    assert!((v[0][0] - 60.0).abs() <= 10.0, "limit 30 ceiling 60 alone: {:.1} %", v[0][0]);
}

#[test]
fn without_a_ceiling_the_limit_is_the_cap() {
    let sb = Sandbox::new("burst_none");
    // A ceiling at the limit means no burst (and no warning); the limit stays a hard cap.
    let v = measure(&sb, &[ctr(&sb, "a", 30, 30, 1)], SHORT, 3.0, &[(1.0, 2.5)]);
    assert!((v[0][0] - 30.0).abs() <= 8.0, "limit 30, ceiling 30: {:.1} %", v[0][0]);
}

#[test]
fn a_plain_limited_neighbour_keeps_its_guarantee() {
    let sb = Sandbox::new("burst_pair_plain");
    let v = measure(&sb, &[ctr(&sb, "a", 30, 100, 1), ctr(&sb, "b", 50, 0, 1)], SHORT, 4.0, &[(1.5, 3.5)]);
    let (a, b) = (v[0][0], v[1][0]);
    assert!(b >= 40.0 && (20.0..=60.0).contains(&a) && a + b >= 75.0, "A 30/100 {a:.1} %, B 50 {b:.1} %");
}

#[test]
fn two_bursting_containers_share_in_proportion_to_guarantees() {
    let sb = Sandbox::new("burst_pair_20_60");
    let v = measure(&sb, &[ctr(&sb, "a", 20, 100, 1), ctr(&sb, "d", 60, 100, 1)], SHORT, 4.0, &[(1.5, 3.5)]);
    let (a, d) = (v[0][0], v[1][0]);
    // Target 25 / 75.
    assert!(d > 1.6 * a && a >= 15.0 && a + d >= 80.0, "A 20/100 {a:.1} %, D 60/100 {d:.1} %");
}

#[test]
fn a_newcomer_gets_its_guarantee_from_a_bursting_container() {
    let sb = Sandbox::new("burst_newcomer");
    let mut b = ctr(&sb, "b", 50, 0, 1);
    b.start = 1.5;
    let v = measure(&sb, &[ctr(&sb, "a", 30, 100, 1), b], SHORT, 4.0, &[(0.7, 1.4), (1.5, 2.5), (2.5, 3.5)]);
    assert!(v[0][0] >= 70.0, "A alone before B: {:.1} %", v[0][0]);
    // Target: B's first second ≥ 45 %.
    assert!(v[1][1] >= 35.0, "B's first second: {:.1} % (A {:.1} %)", v[1][1], v[0][1]);
    assert!(v[1][2] >= 40.0 && v[0][2] <= 60.0, "second second: B {:.1} %, A {:.1} %", v[1][2], v[0][2]);
}

#[test]
fn the_burst_step_runs_every_20_ms() {
    // The step's span is the time since the previous step; the watcher ticks on a 20 ms grid.
    // (When it slept a whole poll interval after each wake, about a fifth of the spans of a
    // co-burster pair with 20 ms kernels were 30-40 ms, and the container with more of them got
    // less of the device.)
    let sb = Sandbox::new("burst_cadence");
    sb.run(client()).args(["--count", "0"]).go().ok();
    let start = (mono_ns() + 500_000_000).to_string();
    let args: Vec<String> =
        ["--kernel-us", "20000", "--seconds", "2.5", "--start-at", &start].iter().map(|s| s.to_string()).collect();
    let (a, c) = (ctr(&sb, "a", 30, 100, 1), ctr(&sb, "c", 30, 100, 1));
    let outs: Vec<Out> = std::thread::scope(|s| {
        let hs: Vec<_> = [&a, &c]
            .into_iter()
            .map(|ct| {
                let args = &args;
                let sb = &sb;
                s.spawn(move || run_client(sb, ct, args, &[("LIBCUDA_LOG_LEVEL", "4")]))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for out in &outs {
        let spans: Vec<u64> = out
            .stderr
            .lines()
            .filter(|l| l.contains("burst t="))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("span=")?.parse().ok()))
            .skip(5)
            .collect();
        assert!(spans.len() >= 50, "{} burst steps in 2.5 s: {spans:?}", spans.len());
        let long = spans.iter().filter(|&&us| us > 30_000).count();
        println!("{long} of {} spans longer than 30 ms", spans.len());
        assert!(long * 10 < spans.len(), "{long} of {} spans longer than 30 ms: {spans:?}", spans.len());
    }
}

// ---- the region's sm_limit (and the ceiling word) are followed live --------------

/// Byte offsets in the region file: `sm_limit[0]` (contract §3.2) and extension words of device 0.
const SM_LIMIT0: usize = 1728;
fn ext_off(field: usize) -> usize {
    vgpu_core::region::EXT_OFFSET + 64 + field
}

/// Waits until `f` holds; returns how long it took (panics after `limit`).
fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what}: not seen within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    t.elapsed()
}

#[test]
fn sm_limit_and_ceiling_written_to_the_region_are_followed_live() {
    use std::mem::offset_of;
    use vgpu_core::region::DeviceLimiterState as D;
    let sb = Sandbox::new("burst_live");
    let c = ctr(&sb, "a", 20, 0, 1);
    sb.run(client()).args(["--count", "0"]).go().ok();
    let pf = sb.dir.join("pid");
    let args: Vec<String> = ["--kernel-us", "50", "--seconds", "6", "--pid-file", pf.to_str().unwrap()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    std::thread::scope(|s| {
        let h = s.spawn(|| run_client(&sb, &c, &args, &[]));
        let pid = read_pid(&pf);
        let m = common::regionmap::RegionMap::open(&c.region);
        let rate = || m.u64(ext_off(offset_of!(D, rate_ppm))).load(Ordering::SeqCst);
        let window = |secs: f64| {
            let (a, ta) = (busy(&sb), mono_ns());
            std::thread::sleep(Duration::from_secs_f64(secs));
            let (b, tb) = (busy(&sb), mono_ns());
            share(&a, &b, &[pid], tb - ta)
        };
        std::thread::sleep(Duration::from_millis(1000));
        let before = window(0.8);
        assert!((before - 20.0).abs() <= 7.0, "limit 20: {before:.1} %");
        // The monitor (or vgpu-smi set-limit) writes sm_limit[0] = 60.
        m.u64(SM_LIMIT0).store(60, Ordering::SeqCst);
        let took = wait_for(Duration::from_secs(2), "rate word at 60 %", || rate() == 600_000);
        eprintln!("sm_limit 20 -> 60 seen by the running process after {took:?}");
        assert!(took <= Duration::from_millis(400), "limit change seen after {took:?} (target 100 ms)");
        std::thread::sleep(Duration::from_millis(150));
        let after = window(0.8);
        assert!((after - 60.0).abs() <= 10.0, "after sm_limit 60: {after:.1} %");
        // Down again to 10: the rate and the share follow.
        m.u64(SM_LIMIT0).store(10, Ordering::SeqCst);
        wait_for(Duration::from_secs(2), "rate word at 10 %", || rate() == 100_000);
        std::thread::sleep(Duration::from_millis(150));
        let low = window(0.8);
        assert!((low - 10.0).abs() <= 6.0, "after sm_limit 10: {low:.1} %");
        // The ceiling word (vgpu-smi set-limit --sm-ceiling): burst up to 100 without a restart.
        m.u64(ext_off(offset_of!(D, sm_ceiling))).store(100, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        let burst = window(0.8);
        assert!(burst >= 60.0, "after sm_ceiling 100 (limit 10): {burst:.1} %");
        h.join().unwrap().ok();
    });
}
