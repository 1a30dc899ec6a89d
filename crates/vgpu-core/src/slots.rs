//! Process slots (hami-contract.md §3.9-§3.10) and the per-slot seqlock (§3.8).
//!
//! Invariants kept for the monitor: live slots are compacted into `procs[0..proc_num)`, a live
//! slot has `status = 1`, an exited one `status = 0`. The monitor has no liveness check, so dead
//! slots disappear only through compaction here.
//!
//! Locking: everything that adds, removes, moves or writes a slot runs under the container lock
//! ([`crate::lock`], in place of the incumbent's `sem`). Slots *move* during compaction (the last
//! slot fills a hole), so a slot index is never trusted without re-checking its `pid`. Readers
//! ([`container_usage`]) take no lock: they sum with bounded seqlock retries and tolerate the
//! transient double/missed count a concurrent move can cause (the monitor sees the same).

use crate::lock::LockError;
use crate::region::*;
use crate::regionfile::{Region, RegionGuard};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug)]
pub enum SlotError {
    /// 1024 live slots: the caller runs without a slot (its limits still enforced locally).
    TableFull,
    Lock(LockError),
    /// This pid has no slot.
    NotAttached,
    BadDevice(usize),
}

impl std::fmt::Display for SlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotError::TableFull => write!(f, "process slot table full ({MAX_PROCS} processes)"),
            SlotError::Lock(e) => write!(f, "{e}"),
            SlotError::NotAttached => write!(f, "process has no slot in the region"),
            SlotError::BadDevice(d) => write!(f, "device index {d} out of range"),
        }
    }
}

impl std::error::Error for SlotError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachInfo {
    pub index: usize,
    /// A stale slot with our pid was found (container restart / pid reuse) and reset.
    pub reused: bool,
    /// Dead or exited slots removed by the compaction that ran first.
    pub removed: usize,
}

/// Whether an update went through the lock or the lock-free fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdatePath {
    Locked,
    /// The lock timed out; the update was applied without it (best effort, see [`sub_usage`]).
    LockFree,
}

/// Bound on seqlock read retries (a writer that died mid-update leaves the sequence odd forever).
pub const SEQLOCK_MAX_RETRIES: u32 = 128;
/// Lock bound used at exit: an exit handler must not hang.
pub const DETACH_LOCK_TIMEOUT: Duration = Duration::from_millis(250);

fn proc_num(r: &SharedRegion) -> usize {
    r.proc_num.load(Ordering::Acquire).clamp(0, MAX_PROCS as i32) as usize
}

/// `kill(pid, 0) == ESRCH`, or `/proc/<pid>/stat` state `Z`/`X`. Pids ≤ 0 are invalid → dead.
pub fn pid_is_dead(pid: i32) -> bool {
    if pid <= 0 {
        return true;
    }
    if unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    // It exists (or belongs to another user: EPERM). Zombies still answer kill().
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(s) => proc_stat_state(&s).is_some_and(|c| c == b'Z' || c == b'X'),
        Err(_) => false, // no /proc: trust kill()
    }
}

/// The state letter of a `/proc/<pid>/stat` line (after the last `)`; comm may contain `)`).
pub fn proc_stat_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

fn zero_slot(s: &ProcSlot) {
    let z = Ordering::Relaxed;
    s.status.store(0, z);
    s.pid.store(0, z);
    s.hostpid.store(0, z);
    for d in 0..MAX_DEVICES {
        let m = &s.used[d];
        for a in [&m.context_size, &m.module_size, &m.data_size, &m.offset, &m.total] {
            a.store(0, z);
        }
        for a in &m.unused {
            a.store(0, z);
        }
        s.monitorused[d].store(0, z);
        let u = &s.device_util[d];
        for a in [&u.dec_util, &u.enc_util, &u.sm_util] {
            a.store(0, z);
        }
        for a in &u.unused {
            a.store(0, z);
        }
    }
    s._padding.store(0, z);
    s.seqlock.store(0, z);
    for a in &s.unused {
        a.store(0, z);
    }
}

fn copy_slot(from: &ProcSlot, to: &ProcSlot) {
    let z = Ordering::Relaxed;
    let cp = |a: &AtomicU64, b: &AtomicU64| b.store(a.load(z), z);
    to.status.store(0, z);
    to.pid.store(from.pid.load(z), z);
    to.hostpid.store(from.hostpid.load(z), z);
    for d in 0..MAX_DEVICES {
        let (f, t) = (&from.used[d], &to.used[d]);
        cp(&f.context_size, &t.context_size);
        cp(&f.module_size, &t.module_size);
        cp(&f.data_size, &t.data_size);
        cp(&f.offset, &t.offset);
        cp(&f.total, &t.total);
        for i in 0..3 {
            cp(&f.unused[i], &t.unused[i]);
        }
        cp(&from.monitorused[d], &to.monitorused[d]);
        let (f, t) = (&from.device_util[d], &to.device_util[d]);
        cp(&f.dec_util, &t.dec_util);
        cp(&f.enc_util, &t.enc_util);
        cp(&f.sm_util, &t.sm_util);
        for i in 0..3 {
            cp(&f.unused[i], &t.unused[i]);
        }
    }
    // An odd sequence (writer died mid-update) is not carried over.
    to.seqlock.store(from.seqlock.load(z) & !1, z);
    for i in 0..2 {
        cp(&from.unused[i], &to.unused[i]);
    }
    to.status.store(from.status.load(z), Ordering::Release);
}

/// Removes slots with `pid == 0` and slots whose pid `is_dead` (never `self_pid`): the last slot
/// moves into the hole and `proc_num` shrinks. Returns how many were removed. Caller holds the lock.
pub fn compact_locked(g: &RegionGuard<'_>, self_pid: i32, is_dead: &dyn Fn(i32) -> bool) -> usize {
    let r: &SharedRegion = g;
    let mut n = proc_num(r);
    let mut k = 0;
    let mut removed = 0;
    while k < n {
        let pid = r.procs[k].pid.load(Ordering::Relaxed);
        if pid == 0 || (pid != self_pid && is_dead(pid)) {
            let last = n - 1;
            r.procs[k].status.store(0, Ordering::Release); // hole no longer counted
            if k != last {
                copy_slot(&r.procs[last], &r.procs[k]);
            }
            n -= 1;
            r.proc_num.store(n as i32, Ordering::Release);
            zero_slot(&r.procs[last]);
            removed += 1;
        } else {
            k += 1;
        }
    }
    // Also repairs an out-of-range value (the monitor clamps to [0, 1024]; so do we).
    if r.proc_num.load(Ordering::Relaxed) != n as i32 {
        r.proc_num.store(n as i32, Ordering::Release);
    }
    removed
}

/// Takes the lock and compacts with the real liveness check.
pub fn compact(region: &Region, self_pid: i32) -> Result<usize, SlotError> {
    let g = region.lock().map_err(SlotError::Lock)?;
    Ok(compact_locked(&g, self_pid, &pid_is_dead))
}

/// Finds `pid`'s slot (hint first, then a scan); no lock needed, but the answer is only stable
/// under the lock.
pub fn find_slot(region: &Region, pid: i32) -> Option<usize> {
    let r = region.shared();
    let n = proc_num(r);
    let hint = region.slot_hint.load(Ordering::Relaxed);
    if hint < n && r.procs[hint].pid.load(Ordering::Relaxed) == pid {
        return Some(hint);
    }
    let k = (0..n).find(|&k| r.procs[k].pid.load(Ordering::Relaxed) == pid)?;
    region.slot_hint.store(k, Ordering::Relaxed);
    Some(k)
}

/// Attaches `pid` (call once per process, and again in a forked child with its new pid):
/// compacts, then reuses a slot that already carries `pid` (a stale one from a previous
/// incarnation with the same pid: its usage is reset — deliberate fix, the incumbent kept it)
/// or appends one at `proc_num`.
pub fn attach_locked(g: &RegionGuard<'_>, pid: i32) -> Result<AttachInfo, SlotError> {
    attach_with(g, pid, &pid_is_dead)
}

pub fn attach(region: &Region, pid: i32) -> Result<AttachInfo, SlotError> {
    let g = region.lock().map_err(SlotError::Lock)?;
    attach_locked(&g, pid)
}

pub(crate) fn attach_with(g: &RegionGuard<'_>, pid: i32, is_dead: &dyn Fn(i32) -> bool) -> Result<AttachInfo, SlotError> {
    let removed = compact_locked(g, pid, is_dead);
    let region = g.region();
    let r: &SharedRegion = g;
    if let Some(k) = find_slot(region, pid) {
        let s = &r.procs[k];
        zero_slot(s);
        s.pid.store(pid, Ordering::Relaxed);
        s.status.store(1, Ordering::Release);
        return Ok(AttachInfo { index: k, reused: true, removed });
    }
    let n = proc_num(r);
    if n >= MAX_PROCS {
        return Err(SlotError::TableFull);
    }
    let s = &r.procs[n];
    zero_slot(s);
    s.pid.store(pid, Ordering::Relaxed);
    s.status.store(1, Ordering::Release);
    r.proc_num.store(n as i32 + 1, Ordering::Release);
    region.slot_hint.store(n, Ordering::Relaxed);
    Ok(AttachInfo { index: n, reused: false, removed })
}

/// Exit: `status = 0`, `pid = 0`, usage zeroed, slot compacted away. Bounded wait
/// ([`DETACH_LOCK_TIMEOUT`]); if the lock cannot be had, the slot is marked exited without it
/// (the monitor and our readers skip `status == 0`; the next compaction removes it).
/// Returns whether a slot was found.
pub fn detach(region: &Region, pid: i32) -> bool {
    match region.lock_timeout(DETACH_LOCK_TIMEOUT) {
        Ok(g) => {
            let Some(k) = find_slot(region, pid) else { return false };
            let s = &g.procs[k];
            s.status.store(0, Ordering::Release);
            s.pid.store(0, Ordering::Release);
            // Remove only pid==0 slots: no /proc probing in an exit path.
            compact_locked(&g, pid, &|_| false);
            true
        }
        Err(_) => {
            let Some(k) = find_slot(region, pid) else { return false };
            let s = &region.shared().procs[k];
            s.status.store(0, Ordering::Release);
            s.pid.store(0, Ordering::Release);
            true
        }
    }
}

pub fn set_hostpid(region: &Region, pid: i32, hostpid: i32) -> Result<(), SlotError> {
    let _g = region.lock().map_err(SlotError::Lock)?;
    let k = find_slot(region, pid).ok_or(SlotError::NotAttached)?;
    region.shared().procs[k].hostpid.store(hostpid, Ordering::Release);
    Ok(())
}

pub fn hostpid(region: &Region, pid: i32) -> Option<i32> {
    let k = find_slot(region, pid)?;
    Some(region.shared().procs[k].hostpid.load(Ordering::Acquire))
}

/// Seqlock write: sequence odd → `total` and the category → even. Saturating both ways.
fn write_usage(s: &ProcSlot, dev: usize, kind: UsageKind, add: bool, bytes: u64) {
    let seq = s.seqlock.load(Ordering::Relaxed);
    let seq = seq & !1; // never leave a stale odd value in place
    s.seqlock.store(seq + 1, Ordering::Relaxed);
    fence(Ordering::Release);
    let upd = |a: &AtomicU64| {
        let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(if add { v.saturating_add(bytes) } else { v.saturating_sub(bytes) })
        });
    };
    let m = &s.used[dev];
    upd(&m.total);
    upd(m.category(kind));
    s.seqlock.store(seq + 2, Ordering::Release);
}

pub fn add_usage_locked(g: &RegionGuard<'_>, pid: i32, dev: usize, kind: UsageKind, bytes: u64) -> Result<(), SlotError> {
    if dev >= MAX_DEVICES {
        return Err(SlotError::BadDevice(dev));
    }
    let k = find_slot(g.region(), pid).ok_or(SlotError::NotAttached)?;
    write_usage(&g.procs[k], dev, kind, true, bytes);
    Ok(())
}

pub fn sub_usage_locked(g: &RegionGuard<'_>, pid: i32, dev: usize, kind: UsageKind, bytes: u64) -> Result<(), SlotError> {
    if dev >= MAX_DEVICES {
        return Err(SlotError::BadDevice(dev));
    }
    let k = find_slot(g.region(), pid).ok_or(SlotError::NotAttached)?;
    write_usage(&g.procs[k], dev, kind, false, bytes);
    Ok(())
}

/// Adds usage under the lock (no limit check: see `ledger::reserve` for that).
pub fn add_usage(region: &Region, pid: i32, dev: usize, kind: UsageKind, bytes: u64) -> Result<(), SlotError> {
    let g = region.lock().map_err(SlotError::Lock)?;
    add_usage_locked(&g, pid, dev, kind, bytes)
}

/// Subtracts usage (saturating at 0). A free must never be lost (that would cause false OOMs),
/// so when the lock times out the update is applied without it to the slot found by pid.
pub fn sub_usage(region: &Region, pid: i32, dev: usize, kind: UsageKind, bytes: u64) -> Result<UpdatePath, SlotError> {
    if dev >= MAX_DEVICES {
        return Err(SlotError::BadDevice(dev));
    }
    match region.lock() {
        Ok(g) => sub_usage_locked(&g, pid, dev, kind, bytes).map(|_| UpdatePath::Locked),
        Err(_) => {
            let k = find_slot(region, pid).ok_or(SlotError::NotAttached)?;
            write_usage(&region.shared().procs[k], dev, kind, false, bytes);
            Ok(UpdatePath::LockFree)
        }
    }
}

/// Seqlock read of one value of a slot; bounded retries, then the last value read.
fn read_consistent(s: &ProcSlot, read: impl Fn() -> [u64; 4]) -> [u64; 4] {
    for _ in 0..SEQLOCK_MAX_RETRIES {
        let s1 = s.seqlock.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let v = read();
        fence(Ordering::Acquire);
        if s.seqlock.load(Ordering::Relaxed) == s1 {
            return v;
        }
    }
    read()
}

/// Per-category sums of a device over live slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageBreakdown {
    pub total: u64,
    pub context: u64,
    pub module: u64,
    pub data: u64,
}

/// Σ `used[dev].total` over slots `k < proc_num` with `status != 0` (what the monitor sums).
pub fn container_usage(r: &SharedRegion, dev: usize) -> u64 {
    container_breakdown(r, dev).total
}

pub fn container_breakdown(r: &SharedRegion, dev: usize) -> UsageBreakdown {
    let mut out = UsageBreakdown::default();
    if dev >= MAX_DEVICES {
        return out;
    }
    for k in 0..proc_num(r) {
        let s = &r.procs[k];
        if s.status.load(Ordering::Acquire) == 0 {
            continue;
        }
        let m = &s.used[dev];
        let v = read_consistent(s, || {
            [
                m.total.load(Ordering::Relaxed),
                m.context_size.load(Ordering::Relaxed),
                m.module_size.load(Ordering::Relaxed),
                m.data_size.load(Ordering::Relaxed),
            ]
        });
        out.total = out.total.saturating_add(v[0]);
        out.context = out.context.saturating_add(v[1]);
        out.module = out.module.saturating_add(v[2]);
        out.data = out.data.saturating_add(v[3]);
    }
    out
}

/// This process's own `used[dev].total`.
pub fn slot_usage(region: &Region, pid: i32, dev: usize) -> Option<u64> {
    if dev >= MAX_DEVICES {
        return None;
    }
    let k = find_slot(region, pid)?;
    let s = &region.shared().procs[k];
    Some(read_consistent(s, || [s.used[dev].total.load(Ordering::Relaxed), 0, 0, 0])[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regionfile::RegionInit;
    use crate::testutil::{fork_child, temp_path, wait_child};

    fn region(name: &str) -> (crate::testutil::TempPath, Region) {
        let p = temp_path(name);
        let (r, _) = Region::open(&p, &RegionInit::default()).unwrap();
        (p, r)
    }

    fn pn(r: &Region) -> usize {
        proc_num(r.shared())
    }

    #[test]
    fn attach_reuse_detach() {
        let (_p, r) = region("slots-basic");
        let me = unsafe { libc::getpid() };
        let a = attach(&r, me).unwrap();
        assert_eq!(a, AttachInfo { index: 0, reused: false, removed: 0 });
        add_usage(&r, me, 0, UsageKind::Data, 100).unwrap();
        // Second attach with the same pid: stale slot reset, no duplicate.
        let a = attach(&r, me).unwrap();
        assert!(a.reused);
        assert_eq!(pn(&r), 1);
        assert_eq!(slot_usage(&r, me, 0), Some(0));
        assert!(detach(&r, me));
        assert_eq!(pn(&r), 0);
        assert!(!detach(&r, me));
        assert!(matches!(add_usage(&r, me, 0, UsageKind::Data, 1), Err(SlotError::NotAttached)));
    }

    #[test]
    fn compaction_moves_last_into_hole() {
        let (_p, r) = region("slots-compact");
        let dead = |p: i32| p >= 9000;
        {
            let g = r.lock().unwrap();
            for pid in [100, 9001, 102, 9003, 104] {
                attach_with(&g, pid, &|_| false).unwrap();
                add_usage_locked(&g, pid, 2, UsageKind::Data, pid as u64).unwrap();
            }
            assert_eq!(proc_num(&g), 5);
            g.procs[2].pid.store(0, Ordering::Relaxed); // exited (102)
            let removed = compact_locked(&g, 100, &dead);
            assert_eq!(removed, 3);
            assert_eq!(proc_num(&g), 2);
            let pids: Vec<i32> = (0..2).map(|k| g.procs[k].pid.load(Ordering::Relaxed)).collect();
            assert_eq!(pids, vec![100, 104]);
            assert_eq!(g.procs[1].used[2].total.load(Ordering::Relaxed), 104);
            assert_eq!(g.procs[1].used[2].data_size.load(Ordering::Relaxed), 104);
            assert_eq!(g.procs[1].status.load(Ordering::Relaxed), 1);
            for k in 2..5 {
                assert_eq!(g.procs[k].pid.load(Ordering::Relaxed), 0);
                assert_eq!(g.procs[k].used[2].total.load(Ordering::Relaxed), 0);
            }
            assert_eq!(container_usage(&g, 2), 204);
            // Our own pid is never removed even if the probe says dead.
            assert_eq!(compact_locked(&g, 104, &|_| true), 1);
            assert_eq!(g.procs[0].pid.load(Ordering::Relaxed), 104);
        }
        // The hint is verified: after the move, 104 is found at index 0.
        assert_eq!(find_slot(&r, 104), Some(0));
    }

    #[test]
    fn table_full() {
        let (_p, r) = region("slots-full");
        let g = r.lock().unwrap();
        for pid in 1..=MAX_PROCS as i32 {
            attach_with(&g, 100_000 + pid, &|_| false).unwrap();
        }
        assert!(matches!(attach_with(&g, 5, &|_| false), Err(SlotError::TableFull)));
        // A dead one frees room.
        let a = attach_with(&g, 5, &|p| p == 100_001).unwrap();
        assert_eq!(a.removed, 1);
        assert_eq!(proc_num(&g), MAX_PROCS);
    }

    #[test]
    fn usage_sums_and_saturation() {
        let (_p, r) = region("slots-usage");
        let g = r.lock().unwrap();
        attach_with(&g, 1, &|_| false).unwrap();
        attach_with(&g, 2, &|_| false).unwrap();
        add_usage_locked(&g, 1, 0, UsageKind::Data, 1000).unwrap();
        add_usage_locked(&g, 1, 0, UsageKind::Context, 50).unwrap();
        add_usage_locked(&g, 2, 0, UsageKind::Module, 7).unwrap();
        assert_eq!(
            container_breakdown(&g, 0),
            UsageBreakdown { total: 1057, context: 50, module: 7, data: 1000 }
        );
        sub_usage_locked(&g, 1, 0, UsageKind::Data, 5000).unwrap();
        let s = &g.procs[0].used[0];
        assert_eq!(s.data_size.load(Ordering::Relaxed), 0, "saturates, never wraps");
        assert_eq!(s.total.load(Ordering::Relaxed), 0);
        assert_eq!(s.context_size.load(Ordering::Relaxed), 50, "other category untouched");
        add_usage_locked(&g, 2, 0, UsageKind::Data, u64::MAX).unwrap();
        assert_eq!(g.procs[1].used[0].total.load(Ordering::Relaxed), u64::MAX);
        assert_eq!(container_usage(&g, 0), u64::MAX);
        assert!(matches!(add_usage_locked(&g, 1, 16, UsageKind::Data, 1), Err(SlotError::BadDevice(16))));
        // status 0 slots are not counted.
        g.procs[1].status.store(0, Ordering::Relaxed);
        assert_eq!(container_usage(&g, 0), 0);
        assert_eq!(g.procs[0].seqlock.load(Ordering::Relaxed) % 2, 0);
    }

    #[test]
    fn corrupt_proc_num_is_clamped_and_repaired() {
        let (_p, r) = region("slots-corrupt");
        r.shared().proc_num.store(-7, Ordering::Relaxed);
        assert_eq!(container_usage(r.shared(), 0), 0);
        let me = unsafe { libc::getpid() };
        assert_eq!(attach(&r, me).unwrap().index, 0);
        assert_eq!(pn(&r), 1);
        r.shared().proc_num.store(5000, Ordering::Relaxed);
        // Slots 1.. are zero (pid 0): compaction removes them and writes a sane count.
        assert_eq!(compact(&r, me).unwrap(), MAX_PROCS - 1);
        assert_eq!(r.shared().proc_num.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn odd_seqlock_is_bounded() {
        let (_p, r) = region("slots-odd");
        let g = r.lock().unwrap();
        attach_with(&g, 1, &|_| false).unwrap();
        add_usage_locked(&g, 1, 0, UsageKind::Data, 10).unwrap();
        g.procs[0].seqlock.store(7, Ordering::Relaxed); // writer died mid-update
        assert_eq!(container_usage(&g, 0), 10);
        add_usage_locked(&g, 1, 0, UsageKind::Data, 1).unwrap();
        assert_eq!(g.procs[0].seqlock.load(Ordering::Relaxed) % 2, 0);
    }

    #[test]
    fn hostpid_and_real_liveness() {
        let (_p, r) = region("slots-live");
        let me = unsafe { libc::getpid() };
        attach(&r, me).unwrap();
        set_hostpid(&r, me, 777).unwrap();
        assert_eq!(hostpid(&r, me), Some(777));
        assert!(!pid_is_dead(me));
        assert!(pid_is_dead(0) && pid_is_dead(-5));
        // A zombie child counts as dead; a reaped one too.
        let (pid, _rx) = fork_child(|_| {});
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..100 {
            if pid_is_dead(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(pid_is_dead(pid), "zombie is dead");
        wait_child(pid);
        assert!(pid_is_dead(pid));
        assert_eq!(proc_stat_state(b"12 (a) b) Z 1 2"), Some(b'Z'));
        assert_eq!(proc_stat_state(b"garbage"), None);
    }
}
