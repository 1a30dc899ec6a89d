use super::*;
use std::process::Command;

fn tmp_path(tag: &str) -> String {
    let dir = std::env::temp_dir();
    format!("{}/vgpu-sim-test-{}-{}-{}.state", dir.display(), tag, std::process::id(), now_mono_ns())
}

fn cfg(n: usize, mib: u64) -> DeviceConfig {
    DeviceConfig {
        mem_bytes: vec![mib << 20; n],
        uuids: (0..n).map(default_uuid).collect(),
        sm_count: 132,
        driver_version: 12090,
        timeslice_ns: 0,
    }
}

struct Tmp(String);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn open(tag: &str, n: usize, mib: u64) -> (Tmp, SimState) {
    let p = tmp_path(tag);
    let s = SimState::open(&p, &cfg(n, mib)).unwrap();
    (Tmp(p), s)
}

#[test]
fn creator_fixes_config() {
    let (t, s) = open("cfg", 2, 1024);
    assert_eq!(s.device_count(), 2);
    assert_eq!(s.device_total(1), 1024 << 20);
    assert_eq!(s.device_uuid(1), "GPU-00000000-0000-4000-8000-000000000001");
    assert_eq!(s.device_uuid(1).len(), 40);
    // A later opener with another configuration sees the file's.
    let s2 = SimState::open(&t.0, &cfg(4, 64)).unwrap();
    assert_eq!(s2.device_count(), 2);
    assert_eq!(s2.device_total(0), 1024 << 20);
    assert_eq!(s2.driver_version(), 12090);
}

#[test]
fn concurrent_creation_agrees() {
    let p = tmp_path("race");
    let _t = Tmp(p.clone());
    let hs: Vec<_> = (0..8)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || SimState::open(&p, &cfg(1 + i % 3, 100 + i as u64)).unwrap().device_total(0))
        })
        .collect();
    let v: Vec<u64> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(v.iter().all(|&x| x == v[0]), "{v:?}");
}

#[test]
fn stale_layout_is_replaced() {
    let p = tmp_path("stale");
    let _t = Tmp(p.clone());
    std::fs::write(&p, b"garbage").unwrap();
    let s = SimState::open(&p, &cfg(1, 10)).unwrap();
    assert_eq!(s.device_total(0), 10 << 20);
}

#[test]
fn charge_and_oom() {
    let (_t, s) = open("oom", 1, 100);
    let me = s.register(std::process::id()).unwrap();
    assert!(s.try_charge(me, 0, 60 << 20));
    assert!(!s.try_charge(me, 0, 50 << 20));
    assert_eq!(s.device_used(0), 60 << 20);
    assert_eq!(s.slot_used(me, 0), 60 << 20);
    s.uncharge(me, 0, 20 << 20);
    assert!(s.try_charge(me, 0, 60 << 20));
    assert_eq!(s.device_used(0), 100 << 20);
    s.uncharge(me, 0, u64::MAX);
    assert_eq!(s.device_used(0), 0);
}

#[test]
fn submit_serialises_and_merges() {
    let (_t, s) = open("submit", 1, 100);
    let a = s.register(std::process::id()).unwrap();
    let b = s.register(std::process::id()).unwrap();
    let t0 = 1_000_000u64;
    assert_eq!(s.submit(a, 0, t0, 100), (t0, t0 + 100));
    // b asks for an earlier start: the device is busy until t0+100.
    assert_eq!(s.submit(b, 0, t0 + 50, 100), (t0 + 100, t0 + 200));
    // a again: contiguous with b's, not with its own → separate interval.
    assert_eq!(s.submit(a, 0, t0, 100), (t0 + 200, t0 + 300));
    // a again, contiguous with its own last one → merged.
    assert_eq!(s.submit(a, 0, t0, 50), (t0 + 300, t0 + 350));
    let (_, iv) = s.intervals(a, 0);
    assert_eq!(iv, vec![Interval { start: t0, end: t0 + 100 }, Interval { start: t0 + 200, end: t0 + 350 }]);
    assert_eq!(s.busy_ns(a, 0, t0), 0);
    assert_eq!(s.busy_ns(a, 0, t0 + 40), 40);
    assert_eq!(s.busy_ns(a, 0, t0 + 150), 100);
    assert_eq!(s.busy_ns(a, 0, t0 + 250), 150);
    assert_eq!(s.busy_ns(a, 0, u64::MAX), 250);
    assert_eq!(s.busy_ns(b, 0, t0 + 150), 50);
    assert_eq!(s.device_busy_ns(0, u64::MAX), 350);
    assert_eq!(s.device_busy_ns(0, t0 + 120), 120);
    assert_eq!(s.device_tail(0), t0 + 350);
}

#[test]
fn ring_overflow_keeps_totals() {
    let (_t, s) = open("ring", 1, 100);
    let a = s.register(std::process::id()).unwrap();
    let n = RING as u64 + 37;
    for i in 0..n {
        // 10 ns busy, 10 ns gap → never merged.
        s.record_interval(a, 0, 1000 + i * 20, 1000 + i * 20 + 10);
    }
    let (retired, iv) = s.intervals(a, 0);
    assert_eq!(iv.len(), RING);
    assert_eq!(retired, 37 * 10);
    assert_eq!(s.busy_ns(a, 0, u64::MAX), n * 10);
    // Exact for any T inside the ring's coverage.
    for k in [37u64, 100, 300, n - 1] {
        let t = 1000 + k * 20 + 5;
        assert_eq!(s.busy_ns(a, 0, t), k * 10 + 5, "k={k}");
    }
    assert_eq!(busy_between(&iv, 1000 + 100 * 20, 1000 + 110 * 20), 100);
}

#[test]
fn interval_math() {
    let iv = [Interval { start: 10, end: 20 }, Interval { start: 30, end: 50 }];
    assert_eq!(busy_in_intervals(&iv, 0), 0);
    assert_eq!(busy_in_intervals(&iv, 15), 5);
    assert_eq!(busy_in_intervals(&iv, 25), 10);
    assert_eq!(busy_in_intervals(&iv, 40), 20);
    assert_eq!(busy_in_intervals(&iv, 1000), 30);
    assert_eq!(busy_between(&iv, 15, 35), 10);
}

use ring::busy_between;

// Leaving a child unreaped is the point of the `reap == false` case.
#[allow(clippy::zombie_processes)]
fn reclaim_case(kill: bool, reap: bool) {
    let (_t, s) = open("reclaim", 1, 1000);
    let mut child = Command::new("sleep").arg(if kill { "30" } else { "0.3" }).spawn().unwrap();
    let pid = child.id();
    let slot = s.register(pid).unwrap();
    assert!(s.try_charge(slot, 0, 300 << 20));
    s.set_ctx_active(slot, 0, true);
    s.record_interval(slot, 0, 100, 600);
    assert_eq!(s.reclaim_dead(), 0, "child still alive or just started");
    assert!(s.processes().iter().any(|p| p.pid == pid && p.used[0] == 300 << 20 && p.has_ctx[0]));
    if kill {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    if reap {
        child.wait().unwrap();
    } else {
        // Leave it a zombie.
        let deadline = now_mono_ns() + 5_000_000_000;
        while proc_stat(pid).map(|(c, _)| c) != Some('Z') && now_mono_ns() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    assert!(!s.processes().iter().any(|p| p.pid == pid));
    assert_eq!(s.device_used(0), 0);
    assert_eq!(s.device_busy_ns(0, u64::MAX), 500);
    if !reap {
        child.wait().unwrap();
    }
}

#[test]
fn reclaim_exited() {
    reclaim_case(false, true);
}

#[test]
fn reclaim_zombie() {
    reclaim_case(false, false);
}

#[test]
fn reclaim_sigkilled() {
    reclaim_case(true, true);
}

#[test]
fn live_process_not_reclaimed_and_pid_reuse_detected() {
    let (_t, s) = open("live", 1, 1000);
    let me = s.register(std::process::id()).unwrap();
    assert!(s.try_charge(me, 0, 2 << 20));
    assert_eq!(s.reclaim_dead(), 0);
    assert!(process_alive(std::process::id(), proc_starttime(std::process::id()).unwrap()));
    // Same pid, different start time: treated as a new process (old one dead).
    assert!(!process_alive(std::process::id(), 1));
}

#[test]
fn seqlock_readers_see_consistent_values() {
    let (_t, s) = open("seq", 1, 1000);
    let s = std::sync::Arc::new(s);
    let a = s.register(std::process::id()).unwrap();
    let w = {
        let s = s.clone();
        std::thread::spawn(move || {
            for i in 0..20_000u64 {
                s.record_interval(a, 0, i * 3, i * 3 + 2);
            }
        })
    };
    let mut last = 0;
    while !w.is_finished() {
        let b = s.busy_ns(a, 0, u64::MAX);
        assert!(b >= last, "busy went backwards: {b} < {last}");
        assert_eq!(b % 2, 0);
        last = b;
    }
    w.join().unwrap();
    assert_eq!(s.busy_ns(a, 0, u64::MAX), 40_000);
}

#[test]
fn wall_clock_mapping_roundtrips() {
    let (_t, s) = open("wall", 1, 10);
    let m = now_mono_ns();
    let w = s.mono_to_wall_us(m);
    let wall_now = now_wall_ns() / 1000;
    assert!(wall_now.abs_diff(w) < 1_000_000, "{wall_now} vs {w}");
    assert!(s.wall_us_to_mono(w).abs_diff(m) < 1000);
}

/// The hot-path reclaim: a reaped process goes at once; a zombie waits for the rate-limited full
/// check; our own record is never probed away.
#[test]
fn rate_limited_reclaim() {
    let (_t, s) = open("ratelimited", 1, 1000);
    let last = AtomicU64::new(0);
    let me = s.register(std::process::id()).unwrap();
    assert!(s.try_charge(me, 0, 2 << 20));
    assert_eq!(s.reclaim_dead_rate_limited(&last, 60 * 1_000_000_000), 0, "first call: full check");
    assert_ne!(last.load(Ordering::Relaxed), 0);
    // Reaped: reclaimed without a full check.
    let mut a = Command::new("sleep").arg("30").spawn().unwrap();
    let sa = s.register(a.id()).unwrap();
    assert!(s.try_charge(sa, 0, 4 << 20));
    unsafe { libc::kill(a.id() as i32, libc::SIGKILL) };
    a.wait().unwrap();
    assert_eq!(s.reclaim_dead_rate_limited(&last, 60 * 1_000_000_000), 1);
    assert_eq!(s.device_used(0), 2 << 20);
    // Zombie: still counted until the period has passed, then reclaimed.
    let mut z = Command::new("sleep").arg("30").spawn().unwrap();
    let sz = s.register(z.id()).unwrap();
    assert!(s.try_charge(sz, 0, 8 << 20));
    unsafe { libc::kill(z.id() as i32, libc::SIGKILL) };
    let deadline = now_mono_ns() + 5_000_000_000;
    while proc_stat(z.id()).map(|(c, _)| c) != Some('Z') && now_mono_ns() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(s.reclaim_dead_rate_limited(&last, 60 * 1_000_000_000), 0, "zombie: only the full check sees it");
    assert_eq!(s.device_used(0), 10 << 20);
    assert_eq!(s.reclaim_dead_rate_limited(&last, 0), 1);
    assert_eq!(s.device_used(0), 2 << 20);
    z.wait().unwrap();
}

/// A scanner decides that a record's process is dead; before it claims the record, another
/// scanner reclaims it and a starting process registers into it. The first scanner must then
/// leave the new, live record alone (its pid and charge stay visible, the device keeps the charge).
#[test]
fn a_record_recycled_during_the_liveness_check_is_not_reclaimed() {
    let (_t, s) = open("recycle", 1, 1000);
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let slot = s.register(dead).unwrap();
    assert!(s.try_charge(slot, 0, 64 << 20));
    let me = std::process::id();
    let reclaimed = s.reclaim_if(slot, |pid, start| {
        let gone = !process_alive(pid, start);
        // Meanwhile: another scanner frees the record and this process takes it over.
        assert_eq!(s.reclaim_dead(), 1);
        assert_eq!(s.register(me), Some(slot));
        assert!(s.try_charge(slot, 0, 40 << 20));
        gone
    });
    assert!(!reclaimed, "the live process's record was reclaimed");
    assert!(s.processes().iter().any(|p| p.pid == me && p.used[0] == 40 << 20), "{:?}", s.processes());
    assert_eq!(s.device_used(0), 40 << 20);
    // Its own exit still releases it.
    s.unregister(slot);
    assert_eq!((s.processes().len(), s.device_used(0)), (0, 0));
}

/// Same race on the fast path of the rate-limited reclaim (`kill(pid, 0)` only).
#[test]
fn a_record_recycled_during_the_reaped_check_is_not_reclaimed() {
    let (_t, s) = open("recycle-fast", 1, 1000);
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let slot = s.register(dead).unwrap();
    let me = std::process::id();
    let reclaimed = s.reclaim_if(slot, |pid, _| {
        let gone = process_reaped(pid);
        assert_eq!(s.reclaim_dead_rate_limited(&AtomicU64::new(0), u64::MAX), 1);
        assert_eq!(s.register(me), Some(slot));
        gone
    });
    assert!(!reclaimed);
    assert!(s.slot_is_live(slot) && s.slot_pid(slot) == me);
}

#[test]
fn time_sliced_processes_share_the_device_and_a_newcomer_runs_within_a_slice() {
    let p = tmp_path("slice");
    let _t = Tmp(p.clone());
    let s = SimState::open(&p, &DeviceConfig { timeslice_ns: 1_000_000, ..cfg(1, 1024) }).unwrap();
    assert_eq!(s.timeslice_ns(), 1_000_000);
    let a = s.register(std::process::id()).unwrap();
    let b = s.register(std::process::id()).unwrap();
    // A queues 20 ms; B arrives 2.3 ms later with 0.5 ms.
    assert_eq!(s.served_ns(a, 0), (0, 0)); // the first touch of the schedule's pages
    let t0 = now_mono_ns();
    let ta = s.queue(a, 0, 20_000_000);
    let t1 = now_mono_ns();
    while now_mono_ns() < t0 + 2_300_000 {
        std::hint::spin_loop();
    }
    let tb = s.queue(b, 0, 500_000);
    let done_b = s.ticket_time(b, 0, tb);
    let queued_at = now_mono_ns();
    assert!(done_b <= queued_at + 1_000_000 + 500_000, "B done {} ns after queuing", done_b - queued_at);
    let done_a = s.ticket_time(a, 0, ta);
    assert!(done_a >= t0 + 20_500_000 && done_a <= t1 + 20_500_000, "A done at {}", done_a as i64 - t0 as i64);
    while now_mono_ns() < done_a + 1000 {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    assert_eq!(s.served_ns(a, 0), (20_000_000, 20_000_000));
    assert_eq!(s.busy_ns(b, 0, u64::MAX), 500_000);
    assert_eq!(s.ticket_time(b, 0, tb), done_b, "the reached time comes from the record's intervals");
    assert_eq!(s.device_busy_ns(0, u64::MAX), 20_500_000);
}
