//! Memory ledger v2 (docs/design.md "Memory ledger": sweep, overflow table, live limits), with real
//! processes on the simulated GPU:
//! - a SIGKILLed process's memory leaves the survivor's views and the region within 1 s, with
//!   nobody allocating;
//! - with the 1024 slots full (held by real live threads), slotless processes share one
//!   accounting (overflow table) that every check and view includes;
//! - the region's `limit[]` is the live limit: grow and shrink seen at once by running
//!   processes, views sane, one warning line per process.

mod common;
mod memory_support;

use common::Sandbox;
use memory_support::*;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const CTX: u64 = 2 * MIB;

fn worker(sb: &Sandbox, limit: &str) -> Client {
    let mut c = client(sb).env("CUDA_DEVICE_MEMORY_LIMIT", limit).env("VGPU_SIM_CTX_MIB", 2).spawn();
    c.init_ctx(0);
    c
}

fn meminfo(c: &mut Client) -> (u64, u64) {
    let m = c.ok("meminfo");
    (m.u64("free"), m.u64("total"))
}

/// Polls `f` until it returns true or `bound` passes; returns the time it took.
fn within(bound: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < bound {
        if f() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// After SIGKILL of one process of two, the survivor's
/// `cuMemGetInfo` and NVML free rise, and the region's sum (read here, independently) falls,
/// within 1 s — the survivor allocates nothing meanwhile.
#[test]
fn killed_process_leaves_every_view_and_the_region_within_a_second() {
    let sb = Sandbox::new("ledger_kill_views");
    let path = sb.region();
    let mut a = worker(&sb, "512m");
    let mut b = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "512m")
        .env("VGPU_SIM_CTX_MIB", 2)
        .env("LIBCUDA_LOG_LEVEL", 3)
        .spawn();
    b.init_ctx(0);
    b.ok("nvml_init");
    a.ok(&format!("alloc {}", 300 * MIB));
    let (free0, total) = meminfo(&mut b);
    assert_eq!(total, 512 * MIB);
    assert_eq!(free0, 512 * MIB - 300 * MIB - 2 * CTX);
    assert_eq!(Snap::read(&path).container_total(0), 300 * MIB + 2 * CTX);
    let apid = a.pid;
    a.kill();
    let t = Instant::now();
    let took = within(Duration::from_millis(1500), || meminfo(&mut b).0 == 512 * MIB - CTX);
    let took = took.unwrap_or_else(|| panic!("survivor's cuMemGetInfo still {:?} after 1.5 s", meminfo(&mut b)));
    eprintln!("cuMemGetInfo free rose {took:?} after the kill");
    assert!(took < Duration::from_secs(1), "the dead process's memory left cuMemGetInfo only after {took:?}");
    let n = b.ok("nvml_mem 0");
    assert_eq!(n.u64("free1"), 512 * MIB - CTX, "NVML view: {}", n.line);
    let s = Snap::read(&path);
    assert!(s.slot_of(apid).is_none(), "dead slot still in the region: {:?}", s.live_slots());
    assert_eq!(s.container_total(0), CTX, "the monitor's sum");
    assert!(t.elapsed() < Duration::from_secs(2));
    // The survivor's own log says it reclaimed a slot (the periodic sweep, not an allocation).
    let e = b.exit();
    assert!(e.shim_logs().iter().any(|(_, m)| m.contains("reclaimed 1 slot")), "{}", e.stderr);
}

/// Start time (`/proc/<tid>/stat` field 22) of a live task.
fn start_time(tid: i32) -> u64 {
    let s = std::fs::read(format!("/proc/{tid}/stat")).unwrap();
    let close = s.iter().rposition(|&b| b == b')').unwrap();
    let rest = std::str::from_utf8(&s[close + 2..]).unwrap();
    rest.split_ascii_whitespace().nth(19).unwrap().parse().unwrap()
}

/// Issue 9 item 3: 1024 live slots (each owned by a real, live task of this test: `kill(tid, 0)`
/// and `/proc/<tid>/stat` answer for threads as for processes), then two slotless real
/// processes under a 1 GiB limit cannot hold 700 + 700 MiB; once one dies, the other can.
#[test]
fn full_slot_table_overflow_processes_share_the_limit() {
    let sb = Sandbox::new("ledger_full_table");
    let path = sb.region();
    // Create the region (and exit: its slot is freed).
    worker(&sb, "1g").exit();
    // 1024 parked threads: real live tasks.
    let (tx, rx) = std::sync::mpsc::channel::<i32>();
    let stop = std::sync::Arc::new(std::sync::Barrier::new(off::MAX_PROCS + 1));
    let mut threads = Vec::new();
    for _ in 0..off::MAX_PROCS {
        let (tx, stop) = (tx.clone(), stop.clone());
        threads.push(
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    tx.send(unsafe { libc::gettid() }).unwrap();
                    stop.wait();
                })
                .unwrap(),
        );
    }
    let tids: Vec<i32> = (0..off::MAX_PROCS).map(|_| rx.recv().unwrap()).collect();
    {
        let _l = RegionLock::take(&path, Duration::from_secs(2));
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for (k, &tid) in tids.iter().enumerate() {
            let base = off::slot(k) as u64;
            f.write_all_at(&start_time(tid).to_le_bytes(), base + 1944).unwrap();
            f.write_all_at(&tid.to_le_bytes(), base + off::S_PID as u64).unwrap();
            f.write_all_at(&1i32.to_le_bytes(), base + off::S_STATUS as u64).unwrap();
        }
        f.write_all_at(&(off::MAX_PROCS as i32).to_le_bytes(), off::PROC_NUM as u64).unwrap();
    }
    let mut a = worker(&sb, "1g");
    let mut b = worker(&sb, "1g");
    let s = Snap::read(&path);
    assert_eq!(s.live_slots().len(), off::MAX_PROCS, "the table is full of live tasks");
    assert!(s.slot_of(a.pid).is_none() && s.slot_of(b.pid).is_none(), "both are slotless");
    a.ok(&format!("alloc {}", 700 * MIB));
    let (free, total) = meminfo(&mut b);
    assert_eq!(total, 1 << 30);
    assert_eq!(free, (1 << 30) - 700 * MIB - 2 * CTX, "B's view includes A's overflow accounting");
    let r = b.cmd(&format!("alloc {}", 700 * MIB));
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "700 + 700 MiB under 1 GiB: {}", r.line);
    b.ok(&format!("alloc {}", 100 * MIB));
    // A dies: its overflow record is swept, B gets the room.
    a.kill();
    let took = within(Duration::from_millis(1500), || b.cmd(&format!("alloc {}", 600 * MIB)).rc() == CUDA_SUCCESS);
    assert!(took.is_some(), "the dead overflow process's memory never came back");
    let e = b.exit();
    assert!(e.shim_logs().iter().any(|(l, m)| l == "WARN" && m.contains("overflow record")), "{}", e.stderr);
    stop.wait();
    for t in threads {
        t.join().unwrap();
    }
}

fn set_limit(path: &std::path::Path, dev: usize, bytes: u64) {
    // An independent writer (as HAMi's monitor or `vgpu-smi set-limit` would): one 8-byte store.
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&bytes.to_le_bytes(), (off::LIMIT + 8 * dev) as u64).unwrap();
}

/// Issue 11 §2 (memory): the region's limit is read at every check and view. Growing is usable at
/// once; shrinking below usage frees nothing, refuses new allocations, shows total = new limit
/// and free = 0, and each process warns once.
#[test]
fn live_limit_changes_are_seen_by_running_processes_at_once() {
    let sb = Sandbox::new("ledger_live_limit");
    let path = sb.region();
    let mut a = worker(&sb, "256m");
    let mut b = worker(&sb, "256m");
    b.ok("nvml_init");
    a.ok(&format!("alloc {}", 200 * MIB));
    assert_eq!(b.cmd(&format!("alloc {}", 100 * MIB)).rc(), CUDA_ERROR_OUT_OF_MEMORY);

    // Grow to 512 MiB: the very first call after the store sees it (no polling, nothing cached).
    set_limit(&path, 0, 512 * MIB);
    assert_eq!(meminfo(&mut b), (512 * MIB - 200 * MIB - 2 * CTX, 512 * MIB));
    b.ok(&format!("alloc {}", 100 * MIB));
    assert_eq!(b.ok("totalmem 0").u64("bytes"), 512 * MIB);

    // Shrink to 128 MiB, below the 304 MiB in use: nothing freed, views clamp, refusals.
    set_limit(&path, 0, 128 * MIB);
    for c in [&mut a, &mut b] {
        assert_eq!(meminfo(c), (0, 128 * MIB), "free 0, never negative or wrapped");
        let n = c.ok("nvml_mem 0");
        assert_eq!((n.u64("total1"), n.u64("free1")), (128 * MIB, 0), "{}", n.line);
        assert_eq!(c.cmd("alloc 4096").rc(), CUDA_ERROR_OUT_OF_MEMORY);
    }
    assert_eq!(Snap::read(&path).container_total(0), 300 * MIB + 2 * CTX, "nothing was freed");
    std::thread::sleep(Duration::from_millis(700)); // two housekeeping periods
    let (fa, fb) = (a.exit(), b.exit());
    for e in [fa, fb] {
        let n = e.shim_logs().iter().filter(|(l, m)| l == "WARN" && m.contains("above its memory limit")).count();
        assert_eq!(n, 1, "one warning line per process:\n{}", e.stderr);
    }
}

/// Issue 8 §1: with no memory limit the ledger still counts (the monitor shows usage).
#[test]
fn no_limit_still_counts() {
    let sb = Sandbox::new("ledger_nolimit");
    let path = sb.region();
    let mut c = client(&sb).env_remove("CUDA_DEVICE_MEMORY_LIMIT").env("VGPU_SIM_CTX_MIB", 2).spawn();
    c.init_ctx(0);
    let id = c.ok(&format!("alloc {}", 5 * MIB)).id();
    let r = c.ok(&format!("async {}", 3 * MIB));
    assert_eq!(Snap::read(&path).used_of(c.pid, 0).data, 8 * MIB);
    c.ok(&format!("free {id}"));
    c.ok(&format!("free_async {}", r.id()));
    c.ok("sync");
    assert_eq!(Snap::read(&path).used_of(c.pid, 0).data, 0);
    c.exit();
}

/// A killed process nobody has reaped yet (a zombie still answers `kill(pid, 0)`) is dead too:
/// its memory leaves the survivor's view within 1 s.
#[test]
fn unreaped_zombie_does_not_keep_its_memory() {
    let sb = Sandbox::new("ledger_zombie");
    let path = sb.region();
    let mut a = worker(&sb, "512m");
    let mut b = worker(&sb, "512m");
    a.ok(&format!("alloc {}", 100 * MIB));
    a.signal(libc::SIGKILL); // not reaped: a zombie until `a` is dropped
    assert!(within(Duration::from_secs(2), || proc_state(a.pid) == Some(b'Z')).is_some(), "not a zombie");
    let took = within(Duration::from_millis(1500), || meminfo(&mut b).0 == 512 * MIB - CTX);
    assert!(took.is_some_and(|t| t < Duration::from_secs(1)), "zombie's memory still counted: {took:?}");
    assert!(Snap::read(&path).slot_of(a.pid).is_none());
    b.exit();
}
