//! Multi-process tests: forked children sharing one region file.

use crate::ledger::Ledger;
use crate::region::UsageKind;
use crate::regionfile::{Region, RegionInit};
use crate::slots;
use crate::testutil::{fork_child, temp_path, try_wait, wait_child};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const LIMIT: u64 = 1_000_000;
const CHILDREN: usize = 8;
const ROUNDS: usize = 400;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Child body; returns an error code (0 = all invariants held).
fn worker(region: &Region, seed: u64) -> u8 {
    let me = unsafe { libc::getpid() };
    // Forked: the inherited lock descriptor is re-opened (explicitly here; the lock would also
    // notice the pid change by itself).
    if region.reopen_after_fork().is_err() {
        return 10;
    }
    if slots::attach(region, me).is_err() {
        return 11;
    }
    let ledger = Ledger::shared(region, me, true);
    let mut rng = seed | 1;
    let mut held: Vec<u64> = Vec::new();
    let mut ok = 0u32;
    let mut refused = 0u32;
    for i in 0..ROUNDS {
        if !held.is_empty() && xorshift(&mut rng).is_multiple_of(3) {
            let b = held.swap_remove((xorshift(&mut rng) as usize) % held.len());
            ledger.release(0, UsageKind::Data, b);
        } else {
            let bytes = 1 + xorshift(&mut rng) % 150_000;
            match ledger.reserve(0, bytes, UsageKind::Data, LIMIT) {
                Ok(r) => {
                    if xorshift(&mut rng).is_multiple_of(5) {
                        drop(r); // "real allocation failed": rolled back
                    } else {
                        r.commit();
                        held.push(bytes);
                        ok += 1;
                    }
                }
                Err(crate::ledger::ReserveError::OverLimit(_)) => refused += 1,
                Err(_) => return 12,
            }
        }
        if i % 16 == 0 {
            // Invariant, checked atomically under the lock.
            let g = match region.lock() {
                Ok(g) => g,
                Err(_) => return 13,
            };
            if slots::container_usage(&g, 0) > LIMIT {
                return 14;
            }
            drop(g);
        }
        // Own slot == what we hold.
        let mine: u64 = held.iter().sum();
        if ledger.own_usage(0) != mine {
            return 15;
        }
    }
    if ok == 0 || refused == 0 {
        // Both paths must have been exercised for the test to mean anything.
        return if ok == 0 { 16 } else { 17 };
    }
    for b in held.drain(..) {
        ledger.release(0, UsageKind::Data, b);
    }
    if ledger.own_usage(0) != 0 {
        return 18;
    }
    if !slots::detach(region, me) {
        return 19;
    }
    0
}

/// Runs the workload in `CHILDREN` forked children while the parent checks the invariant under
/// the lock. `fresh_open`: children open the file themselves (independent mappings) instead of
/// using the inherited mapping.
fn run_children(name: &str, fresh_open: bool) {
    let p = temp_path(name);
    let (region, _) = Region::open(&p, &RegionInit::default()).unwrap();
    let mut pids = Vec::new();
    for c in 0..CHILDREN {
        let (pid, _rx) = fork_child(|_| {
            let seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(c as u64 + 1);
            let code = if fresh_open {
                match Region::open(&p, &RegionInit::default()) {
                    Ok((own, _)) => worker(&own, seed),
                    Err(_) => 20,
                }
            } else {
                worker(&region, seed)
            };
            unsafe { libc::_exit(code as i32) };
        });
        pids.push(pid);
    }
    let mut codes: Vec<Option<i32>> = vec![None; CHILDREN];
    let mut max_seen = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while codes.iter().any(Option::is_none) && Instant::now() < deadline {
        let g = region.lock().expect("parent lock");
        max_seen = max_seen.max(slots::container_usage(&g, 0));
        drop(g);
        for (i, &pid) in pids.iter().enumerate() {
            if codes[i].is_none() {
                codes[i] = try_wait(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for (i, &pid) in pids.iter().enumerate() {
        if codes[i].is_none() {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            codes[i] = Some(wait_child(pid));
        }
    }
    assert!(codes.iter().all(|&c| c == Some(0)), "child verdicts: {codes:?}");
    assert!(max_seen <= LIMIT, "container usage {max_seen} exceeded {LIMIT}");
    let s = region.shared();
    assert_eq!(slots::container_usage(s, 0), 0, "every reservation was released");
    assert_eq!(s.proc_num.load(Ordering::Relaxed), 0, "every child detached");
}

#[test]
fn concurrent_children_never_exceed_the_limit() {
    run_children("mp-inherited", false);
}

#[test]
fn concurrent_children_with_own_mappings() {
    run_children("mp-fresh", true);
}

#[test]
fn killed_lock_holder_and_its_slot_are_recovered() {
    let p = temp_path("mp-kill");
    let (region, _) = Region::open(&p, &RegionInit::default()).unwrap();
    let me = unsafe { libc::getpid() };
    slots::attach(&region, me).unwrap();
    let (pid, rx) = fork_child(|tx| {
        let child = unsafe { libc::getpid() };
        slots::attach(&region, child).unwrap();
        let l = Ledger::shared(&region, child, true);
        l.reserve(0, 800, UsageKind::Data, 1000).unwrap().commit();
        let _g = region.lock().unwrap();
        tx(b'H');
        loop {
            unsafe { libc::pause() };
        }
    });
    assert_eq!(rx(), Some(b'H'));
    assert_eq!(region.shared().owner_pid.load(Ordering::Relaxed), pid as u64);
    assert!(region.lock_timeout(Duration::from_millis(100)).is_err(), "child holds the lock");
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(wait_child(pid), 128 + libc::SIGKILL);
    let t = Instant::now();
    let g = region.lock().expect("kernel released the dead holder's lock");
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(g.owner_pid.load(Ordering::Relaxed), me as u64);
    drop(g);
    // The dead child's 800 bytes still count (status 1, as the monitor sees it)...
    let l = Ledger::shared(&region, me, true);
    assert_eq!(l.usage(0), 800);
    // ...until an over-limit reservation sweeps the dead slot (freed in place).
    l.reserve(0, 500, UsageKind::Data, 1000).unwrap().commit();
    assert_eq!(l.usage(0), 500);
    assert_eq!(region.shared().proc_num.load(Ordering::Relaxed), 1);
}

#[test]
fn separately_opened_handles_share_state() {
    // Two independent opens in one process behave like two processes' views of the file.
    let p = temp_path("mp-two-opens");
    let (a, ra) = Region::open(&p, &RegionInit { limits: [1000; 16], ..Default::default() }).unwrap();
    let (b, rb) = Region::open(&p, &RegionInit::default()).unwrap();
    assert!(ra.created && !rb.created);
    assert_eq!(b.limit(5), 1000);
    slots::attach(&a, 1).unwrap();
    slots::add_usage(&a, 1, 5, UsageKind::Data, 77).unwrap();
    assert_eq!(slots::container_usage(b.shared(), 5), 77);
    // Their locks are distinct descriptions: they exclude each other.
    let g = a.lock().unwrap();
    assert!(b.lock_timeout(Duration::from_millis(50)).is_err());
    drop(g);
    drop(b.lock().unwrap());
}
