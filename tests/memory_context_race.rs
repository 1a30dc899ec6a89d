//! The context charge against the first allocations: many threads of one process make their
//! first CUDA calls at the same moment (each retains the primary context, as a runtime does per
//! thread) and allocate at once. The context must be charged before any allocation can pass it,
//! and measured exactly: the limit is never exceeded, exactly the allocations that fit beside the
//! context succeed, and after the frees the process holds exactly its context again.

mod common;
mod memory_support;

use common::{Sandbox, artifacts};
use memory_support::{MIB, Snap};
use std::process::Command;
use std::time::{Duration, Instant};

const THREADS: u64 = 32;
const EACH_MIB: u64 = 40;
const CTX_MIB: u64 = 64;
const LIMIT: u64 = 1024 * MIB;
/// Repetitions: the race went wrong in about 1 run of 15 (over the limit) and 1 of 20 (the
/// context charge off by an allocation), so 48 runs would have failed about three times.
const RUNS: usize = 48;

fn ctx_race() -> std::path::PathBuf {
    common::c_program("ctx_race", &["ctx_race.c"], &["-lcuda", "-lpthread"])
}

/// The simulated driver's per-process figure of `pid` on device 0 (what NVML and the host see).
fn driver_used(sb: &Sandbox, pid: u32) -> u64 {
    let o = Command::new(&artifacts().simctl).arg("--state").arg(sb.state()).arg("procs").output().expect("simctl");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[0] == pid.to_string() && f[1] == "0").then(|| f[2].parse::<u64>().unwrap())
        })
        .sum()
}

fn kv(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .find(|(k, _)| *k == key)
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        .1
        .parse()
        .unwrap()
}

#[test]
fn the_context_is_charged_before_the_first_allocations_pass_it() {
    let sb = Sandbox::new("ctx_race");
    let region = sb.region();
    let fit = (LIMIT - CTX_MIB * MIB) / (EACH_MIB * MIB);
    let bin = ctx_race();
    for run in 0..RUNS {
        let mut c = sb
            .run(&bin)
            .shim(true)
            .args([THREADS.to_string(), EACH_MIB.to_string()])
            .env("CUDA_DEVICE_MEMORY_LIMIT", "1024m")
            .env("VGPU_SIM_CTX_MIB", CTX_MIB.to_string())
            .env("VGPU_SIM_MEM_MIB", "16384")
            .env("LIBCUDA_LOG_LEVEL", "3") // a context left unmeasured says why
            .env_remove("VGPU_SIM_COUNT_FILE")
            .spawn();
        // Sample the region from outside while the threads race.
        let t0 = Instant::now();
        let line = loop {
            if let Some(l) = c.try_line() {
                break l;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "run {run}: no reply; stderr:\n{}", c.stderr());
            // (Once the first thread has created it: a shorter file is still being laid out.)
            if std::fs::metadata(&region).is_ok_and(|m| m.len() >= memory_support::off::REGION_SIZE as u64) {
                let snap = Snap::read(&region);
                let t = snap.container_total(0);
                let slots: Vec<_> =
                    snap.live_slots().into_iter().map(|s| (s.index, s.pid, s.seqlock, s.used[0])).collect();
                assert!(t <= LIMIT, "run {run}: the container holds {t} > limit {LIMIT} during the race: {slots:?}");
            }
            std::thread::yield_now();
        };
        let slot = Snap::read(&region).slot_of(c.pid);
        let ctx = format!("run {run}: {line}; slot {slot:?}; stderr:\n{}", c.stderr());
        assert_eq!(kv(&line, "err"), 0, "{ctx}");
        assert_eq!(kv(&line, "ok"), fit, "exactly the allocations that fit beside the context succeed: {ctx}");
        let s = Snap::read(&region);
        let m = s.used_of(c.pid, 0);
        assert_eq!(m.context, CTX_MIB * MIB, "the context is charged exactly: {m:?} {ctx}");
        assert_eq!(m.data, fit * EACH_MIB * MIB, "{m:?} {ctx}");
        assert!(s.container_total(0) <= LIMIT, "{ctx}");
        let procs = || {
            let o = Command::new(&artifacts().simctl).arg("--state").arg(sb.state()).arg("procs").output();
            o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
        };
        assert_eq!(
            m.total,
            driver_used(&sb, c.pid),
            "counted = what the driver holds: {ctx}\nsimctl procs:\n{}",
            procs()
        );

        c.send_line("free").unwrap();
        let freed = c.recv_line(Duration::from_secs(10)).expect("free reply");
        assert_eq!((kv(&freed, "freed"), kv(&freed, "rc")), (fit, 0), "{freed}: {ctx}");
        let m = Snap::read(&region).used_of(c.pid, 0);
        assert_eq!((m.data, m.total), (0, CTX_MIB * MIB), "back to the context alone after the frees: {m:?} {ctx}");
        assert_eq!(m.total, driver_used(&sb, c.pid), "{ctx}");

        c.send_line("exit").unwrap();
        assert_eq!(c.recv_line(Duration::from_secs(10)).as_deref(), Ok("bye=1"), "{ctx}");
        assert!(c.wait_within(Duration::from_secs(10)).is_ok_and(|s| s.success()), "{ctx}");
        let s = Snap::read(&region);
        assert_eq!((s.proc_num(), s.container_total(0)), (0, 0), "run {run}: the region is empty after the exit");
    }
}

const OVERLAP_CTX_MIB: u64 = 64;
const OVERLAP_SIZES: [u64; 2] = [600, 300];

/// Two processes of one container bring up their first contexts at one moment: both wait after
/// `cuInit`, are released together, and each creation takes 300 ms (`VGPU_SIM_CTX_CREATE_MS`),
/// so the NVML diff around one of them lists both PIDs. Each must end up with its own host PID
/// and be charged its own context and data only, and the container's total is the sum of what
/// the driver holds for the two. With NVML reporting the processes' own PIDs, and with an
/// offset (a PID namespace: the identity tie-break cannot help, fork order decides). A run whose
/// contexts did not overlap after all (a loaded machine delays one process past the other's
/// creation) is checked the same way but does not count: each case needs two overlapping runs.
#[test]
fn two_processes_whose_first_contexts_overlap_are_each_charged_their_own_memory() {
    for offset in [0u32, 100_000] {
        let mut overlapped = 0;
        let mut runs = 0;
        while overlapped < 2 {
            assert!(runs < 8, "offset {offset}: the contexts overlapped in {overlapped} of {runs} runs");
            overlapped += usize::from(overlapping_first_contexts(offset, runs));
            runs += 1;
        }
    }
}

/// One run of the test above; true when the contexts overlapped.
fn overlapping_first_contexts(offset: u32, run: usize) -> bool {
    let prog = common::c_program("alloc_hold", &["alloc_hold.c"], &["-lcuda"]);
    let sb = Sandbox::new("ctx_overlap");
    let (go, start) = (sb.dir.join("go"), sb.dir.join("start"));
    let mut cs: Vec<_> = OVERLAP_SIZES
        .iter()
        .map(|mib| {
            sb.run(&prog)
                .shim(true)
                .args([mib.to_string(), go.to_string_lossy().into_owned()])
                .env("ALLOC_HOLD_START", &start)
                .env("CUDA_DEVICE_MEMORY_LIMIT", "2g")
                .env("VGPU_SIM_CTX_MIB", OVERLAP_CTX_MIB.to_string())
                .env("VGPU_SIM_CTX_CREATE_MS", "300")
                .env("VGPU_SIM_PID_OFFSET", offset.to_string())
                .env("LIBCUDA_LOG_LEVEL", "4") // the creation diffs
                .timeout_secs(60)
                .spawn()
        })
        .collect();
    for c in &cs {
        let r = c.recv_line(Duration::from_secs(30));
        assert_eq!(r.as_deref(), Ok("ready"), "{}", c.stderr());
    }
    std::fs::write(&start, b"").unwrap();
    let lines: Vec<String> = cs
        .iter()
        .map(|c| c.recv_line(Duration::from_secs(30)).unwrap_or_else(|_| panic!("no reply: {}", c.stderr())))
        .collect();
    // The watcher's resolution and the reconciliation (every 250 ms) have had their turn.
    std::thread::sleep(Duration::from_millis(1500));
    let s = Snap::read(&sb.region());
    let ctx = || {
        let errs: Vec<String> = cs.iter().map(|c| c.stderr()).collect();
        format!("offset {offset} run {run}: {lines:?}\nslots {:?}\nstderr:\n{}", s.live_slots(), errs.join("\n"))
    };
    let mut driver_total = 0;
    for (c, mib) in cs.iter().zip(OVERLAP_SIZES) {
        let slot = s.slot_of(c.pid).unwrap_or_else(|| panic!("no slot: {}", ctx()));
        assert_eq!(slot.hostpid, (c.pid + offset) as i32, "its own host PID: {}", ctx());
        let m = slot.used[0];
        assert_eq!((m.context, m.data), (OVERLAP_CTX_MIB * MIB, mib * MIB), "charged its own memory only: {}", ctx());
        let drv = driver_used(&sb, c.pid);
        assert_eq!(m.total, drv, "counted = what the driver holds for it: {}", ctx());
        driver_total += drv;
    }
    assert_eq!(s.container_total(0), driver_total, "the container's total is the sum: {}", ctx());
    // Some process's diff around its context listed both PIDs.
    let overlapped = cs.iter().any(|c| {
        c.stderr()
            .lines()
            .filter_map(|l| l.split("context creation diff [").nth(1))
            .any(|d| d.split(']').next().is_some_and(|l| l.split(',').count() == OVERLAP_SIZES.len()))
    });
    std::fs::write(&go, b"").unwrap();
    let what = ctx();
    for c in &mut cs {
        assert!(c.wait_within(Duration::from_secs(10)).is_ok_and(|s| s.success()), "{what}");
    }
    overlapped
}
