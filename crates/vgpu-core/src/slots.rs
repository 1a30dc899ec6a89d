//! Process slots (docs/hami-contract.md §3.9-§3.10) and the per-slot seqlock (§3.8).
//!
//! Invariants kept for the monitor: live slots are compacted into `procs[0..proc_num)`, a live
//! slot has `status = 1`, an exited one `status = 0`. The monitor has no liveness check, so dead
//! slots disappear only through compaction here.
//!
//! Locking: everything that adds, removes, moves or writes a slot runs under the container lock
//! ([`crate::lock`], in place of the incumbent's `sem`). Slots *move* during compaction (the last
//! slot fills a hole), so a slot index is never trusted without re-checking its `pid`. A holder
//! killed in the middle of a move leaves a state the next compaction repairs (see
//! [`compact_locked`], [`copy_slot`]); [`find_slot`] never picks the half-written copy. Readers
//! ([`container_usage`]) take no lock: they sum with bounded seqlock retries and tolerate the
//! transient double/missed count a concurrent move can cause (the monitor sees the same).

use crate::lock::LockError;
use crate::region::*;
use crate::regionfile::{Region, RegionGuard};
use std::sync::atomic::{fence, AtomicI32, AtomicU64, Ordering};
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

// ---- stores of a slot move --------------------------------------------------------------------
//
// A process can be SIGKILLed at any store of a compaction; the kernel then releases the lock and the
// next holder continues from whatever was written. Every store below goes through `put*` so the tests
// can stop the writes after any number of them (see `tests::interrupted_*`).

#[cfg(test)]
thread_local! {
    /// `Some(n)`: only the next `n` stores of this thread happen, later ones are dropped (= killed).
    static STORE_BUDGET: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

#[inline(always)]
fn may_store() -> bool {
    #[cfg(test)]
    {
        STORE_BUDGET.with(|b| match b.get() {
            None => true,
            Some(0) => false,
            Some(n) => {
                b.set(Some(n - 1));
                true
            }
        })
    }
    #[cfg(not(test))]
    {
        true
    }
}

#[inline(always)]
fn put64(a: &AtomicU64, v: u64, o: Ordering) {
    if may_store() {
        a.store(v, o)
    }
}

#[inline(always)]
fn put_i32(a: &AtomicI32, v: i32, o: Ordering) {
    if may_store() {
        a.store(v, o)
    }
}

fn zero_slot(s: &ProcSlot) {
    let z = Ordering::Relaxed;
    put_i32(&s.status, 0, z);
    put_i32(&s.pid, 0, z);
    put_i32(&s.hostpid, 0, z);
    for d in 0..MAX_DEVICES {
        let m = &s.used[d];
        for a in [&m.context_size, &m.module_size, &m.data_size, &m.offset, &m.total] {
            put64(a, 0, z);
        }
        for a in &m.unused {
            put64(a, 0, z);
        }
        put64(&s.monitorused[d], 0, z);
        let u = &s.device_util[d];
        for a in [&u.dec_util, &u.enc_util, &u.sm_util] {
            put64(a, 0, z);
        }
        for a in &u.unused {
            put64(a, 0, z);
        }
    }
    if may_store() {
        s._padding.store(0, z);
    }
    put64(&s.seqlock, 0, z);
    for a in &s.unused {
        put64(a, 0, z);
    }
}

/// Copies slot `from` into `to` so that an interruption at any store leaves `to` removable by the
/// next compaction and invisible to [`find_slot`]: `to` gets `status = 0` and `pid = 0` first, then
/// everything else, then the pid, then the status last. Interrupted before the pid: a pid-0 slot;
/// between pid and status: a `status = 0` slot; after the status (before `proc_num` shrinks): a
/// complete duplicate of `from`, which stays at the higher index, where [`find_slot`] looks first
/// and which [`compact_locked`] keeps.
fn copy_slot(from: &ProcSlot, to: &ProcSlot) {
    let z = Ordering::Relaxed;
    let cp = |a: &AtomicU64, b: &AtomicU64| put64(b, a.load(z), z);
    put_i32(&to.status, 0, Ordering::Release);
    put_i32(&to.pid, 0, Ordering::Release);
    put_i32(&to.hostpid, from.hostpid.load(z), z);
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
    put64(&to.seqlock, from.seqlock.load(z) & !1, z);
    for i in 0..2 {
        cp(&from.unused[i], &to.unused[i]);
    }
    put_i32(&to.pid, from.pid.load(z), Ordering::Release);
    put_i32(&to.status, from.status.load(z), Ordering::Release);
}

/// Marks `status = 0` every live slot in `[0, n)` whose pid also has a live slot at a higher index.
/// Two live slots with one pid only come from a move interrupted after the copy's last store: the
/// higher one is the original (a move goes from the last slot down into a hole), the one
/// [`find_slot`] finds, so the lower one goes. Sort-based, no allocation (8 KiB of stack).
fn drop_duplicates(r: &SharedRegion, n: usize) {
    let mut live = [(0i32, 0u16); MAX_PROCS];
    let mut m = 0;
    for k in 0..n {
        let s = &r.procs[k];
        let pid = s.pid.load(Ordering::Relaxed);
        if pid != 0 && s.status.load(Ordering::Relaxed) != 0 {
            live[m] = (pid, k as u16);
            m += 1;
        }
    }
    let live = &mut live[..m];
    live.sort_unstable();
    for w in live.windows(2) {
        if w[0].0 == w[1].0 {
            put_i32(&r.procs[w[0].1 as usize].status, 0, Ordering::Release);
        }
    }
}

/// Removes slots with `pid == 0`, slots with `status == 0` (exited, or the half-written target of
/// an interrupted move), the lower of two live slots with the same pid (the target of a move
/// interrupted after its copy, see [`copy_slot`]) and slots whose pid `is_dead` (never `self_pid`):
/// the last slot moves into the hole and `proc_num` shrinks. Returns how many were removed. Caller
/// holds the lock. Idempotent under interruption: whatever a holder killed at any store leaves
/// behind, the next call ends with exactly one slot per live pid, holding that process's usage.
pub fn compact_locked(g: &RegionGuard<'_>, self_pid: i32, is_dead: &dyn Fn(i32) -> bool) -> usize {
    let r: &SharedRegion = g;
    let mut n = proc_num(r);
    drop_duplicates(r, n);
    let mut k = 0;
    let mut removed = 0;
    while k < n {
        let s = &r.procs[k];
        let pid = s.pid.load(Ordering::Relaxed);
        if pid == 0 || s.status.load(Ordering::Relaxed) == 0 || (pid != self_pid && is_dead(pid)) {
            let last = n - 1;
            put_i32(&s.status, 0, Ordering::Release); // hole no longer counted
            if k != last {
                copy_slot(&r.procs[last], s);
            }
            n -= 1;
            put_i32(&r.proc_num, n as i32, Ordering::Release);
            zero_slot(&r.procs[last]);
            removed += 1;
        } else {
            k += 1;
        }
    }
    // Also repairs an out-of-range value (the monitor clamps to [0, 1024]; so do we).
    if r.proc_num.load(Ordering::Relaxed) != n as i32 {
        put_i32(&r.proc_num, n as i32, Ordering::Release);
    }
    removed
}

/// Takes the lock and compacts with the real liveness check.
pub fn compact(region: &Region, self_pid: i32) -> Result<usize, SlotError> {
    let g = region.lock().map_err(SlotError::Lock)?;
    Ok(compact_locked(&g, self_pid, &pid_is_dead))
}

/// Finds `pid`'s live (`status != 0`) slot: the hint first, then a scan from the top; no lock
/// needed, but the answer is only stable under the lock. Skipping `status == 0` and scanning
/// downwards make an interrupted move harmless (see [`copy_slot`]): the half-written target is
/// never found, and of a complete duplicate the original (higher) slot is found, the one the next
/// compaction keeps. (A process's hint is never below its slot: slots only move down.)
pub fn find_slot(region: &Region, pid: i32) -> Option<usize> {
    let r = region.shared();
    let n = proc_num(r);
    let is = |k: usize| {
        let s = &r.procs[k];
        s.pid.load(Ordering::Relaxed) == pid && s.status.load(Ordering::Relaxed) != 0
    };
    let hint = region.slot_hint.load(Ordering::Relaxed);
    if hint < n && is(hint) {
        return Some(hint);
    }
    let k = (0..n).rev().find(|&k| is(k))?;
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

    // ---- interrupted moves (a lock holder SIGKILLed mid-compaction) ----------------------------

    /// Usage of a live test process, distinct per pid and per field.
    fn fill(g: &RegionGuard<'_>, pid: i32) {
        add_usage_locked(g, pid, 0, UsageKind::Data, pid as u64 * 1000).unwrap();
        add_usage_locked(g, pid, 3, UsageKind::Context, pid as u64).unwrap();
        add_usage_locked(g, pid, 15, UsageKind::Module, pid as u64 * 7).unwrap();
        let k = find_slot(g.region(), pid).unwrap();
        g.procs[k].hostpid.store(pid + 50_000, Ordering::Relaxed);
        g.procs[k].device_util[3].sm_util.store(pid as u64 % 100, Ordering::Relaxed);
    }

    /// `(data on dev 0, context on dev 3, module on dev 15)` expected for `pid` plus `extra` data.
    fn expect_slot(g: &RegionGuard<'_>, k: usize, pid: i32, extra: u64, what: &str) {
        let s = &g.procs[k];
        let p = pid as u64;
        assert_eq!(s.status.load(Ordering::Relaxed), 1, "{what}: status of {pid}");
        assert_eq!(s.hostpid.load(Ordering::Relaxed), pid + 50_000, "{what}: hostpid of {pid}");
        assert_eq!(s.used[0].data_size.load(Ordering::Relaxed), p * 1000 + extra, "{what}: data of {pid}");
        assert_eq!(s.used[0].total.load(Ordering::Relaxed), p * 1000 + extra, "{what}: total 0 of {pid}");
        assert_eq!(s.used[3].context_size.load(Ordering::Relaxed), p, "{what}: ctx of {pid}");
        assert_eq!(s.used[3].total.load(Ordering::Relaxed), p, "{what}: total 3 of {pid}");
        assert_eq!(s.used[15].module_size.load(Ordering::Relaxed), p * 7, "{what}: module of {pid}");
        assert_eq!(s.device_util[3].sm_util.load(Ordering::Relaxed), p % 100, "{what}: util of {pid}");
        assert_eq!(s.seqlock.load(Ordering::Relaxed) % 2, 0, "{what}: seqlock of {pid}");
    }

    /// Exactly one slot per live pid in `[0, proc_num)`, each with its usage (+ `extra[pid]` data).
    fn assert_one_slot_per_pid(g: &RegionGuard<'_>, live: &[i32], extra: &dyn Fn(i32) -> u64, what: &str) {
        let n = proc_num(g);
        let mut pids: Vec<i32> = (0..n).map(|k| g.procs[k].pid.load(Ordering::Relaxed)).collect();
        for (k, &pid) in pids.iter().enumerate() {
            expect_slot(g, k, pid, extra(pid), what);
        }
        pids.sort_unstable();
        let mut want = live.to_vec();
        want.sort_unstable();
        assert_eq!(pids, want, "{what}: pids in [0, proc_num)");
        let sum: u64 = live.iter().map(|&p| p as u64 * 1000 + extra(p)).sum();
        assert_eq!(container_usage(g, 0), sum, "{what}: container usage");
    }

    /// Kill the compaction after each of its stores in turn (the stores after the budget are
    /// dropped, exactly what SIGKILL leaves in the shared file); then the live processes keep
    /// updating their usage through `find_slot` (with the hint they had, and with a stale one),
    /// and the next compaction must leave exactly one slot per live pid carrying all its usage.
    #[test]
    fn interrupted_compaction_at_every_store_is_repaired_by_the_next() {
        let (_p, r) = region("slots-interrupt");
        let dead = |p: i32| p >= 9000;
        let layout = [9001, 101, 9002, 102, 103, 9003];
        let live = [101, 102, 103];
        let mut budget = 0usize;
        let mut seen_duplicate = false;
        let mut seen_status0_copy = false;
        loop {
            let g = r.lock().unwrap();
            // Fresh table.
            for k in 0..MAX_PROCS.min(8) {
                zero_slot(&g.procs[k]);
            }
            g.proc_num.store(0, Ordering::Relaxed);
            for pid in layout {
                attach_with(&g, pid, &|_| false).unwrap();
                fill(&g, pid);
            }
            let home: Vec<(i32, usize)> = live.iter().map(|&p| (p, find_slot(&r, p).unwrap())).collect();

            STORE_BUDGET.with(|b| b.set(Some(budget)));
            compact_locked(&g, 1, &dead);
            let left = STORE_BUDGET.with(|b| b.replace(None)).unwrap();
            let what = format!("killed after {budget} stores");

            // State right after the kill: no live pid is counted more than once except a complete
            // duplicate, and find_slot must pick the copy the next compaction keeps.
            let n = proc_num(&g);
            for &p in &live {
                let c = (0..n)
                    .filter(|&k| g.procs[k].pid.load(Ordering::Relaxed) == p && g.procs[k].status.load(Ordering::Relaxed) != 0)
                    .count();
                seen_duplicate |= c == 2;
                seen_status0_copy |= (0..n).any(|k| g.procs[k].pid.load(Ordering::Relaxed) == p && g.procs[k].status.load(Ordering::Relaxed) == 0);
                assert!((1..=2).contains(&c), "{what}: {p} has {c} live slots");
            }
            // Each live process adds usage: half with the hint it had before the move, half with
            // a stale hint (forcing a scan).
            for (i, &(p, k)) in home.iter().enumerate() {
                r.slot_hint.store(if i % 2 == 0 { k } else { usize::MAX }, Ordering::Relaxed);
                add_usage_locked(&g, p, 0, UsageKind::Data, 5).unwrap();
            }

            compact_locked(&g, 1, &dead);
            assert_one_slot_per_pid(&g, &live, &|_| 5, &what);
            // And it is stable.
            assert_eq!(compact_locked(&g, 1, &dead), 0, "{what}: second repair removed something");
            for &p in &live {
                let k = find_slot(&r, p).unwrap();
                assert_eq!(g.procs[k].pid.load(Ordering::Relaxed), p);
            }
            drop(g);
            if left > 0 {
                break; // the compaction completed within the budget: every kill point was tried
            }
            budget += 1;
        }
        assert!(budget > 100, "only {budget} stores: the hook is not reached");
        assert!(seen_duplicate && seen_status0_copy, "the interesting states were produced");
    }

    /// The half-written states of a move, built by hand (pid 7 moved from slot 2 into hole 0).
    #[test]
    fn interrupted_move_states_built_by_hand() {
        let (_p, r) = region("slots-halfmove");
        // stage 0: target pid 0, partial copy; 1: target has the pid, status still 0;
        // 2: complete copy (both status 1), proc_num not yet decremented;
        // 3: proc_num decremented, source partly zeroed (out of range).
        for stage in 0..4 {
            let g = r.lock().unwrap();
            for k in 0..4 {
                zero_slot(&g.procs[k]);
            }
            g.proc_num.store(0, Ordering::Relaxed);
            for pid in [9000, 5, 7] {
                attach_with(&g, pid, &|_| false).unwrap();
                fill(&g, pid);
            }
            let (hole, src) = (&g.procs[0], &g.procs[2]);
            hole.status.store(0, Ordering::Relaxed);
            hole.pid.store(0, Ordering::Relaxed);
            // Partial copy of the source's usage.
            hole.used[0].data_size.store(src.used[0].data_size.load(Ordering::Relaxed), Ordering::Relaxed);
            hole.used[0].total.store(src.used[0].total.load(Ordering::Relaxed), Ordering::Relaxed);
            if stage >= 1 {
                copy_slot(src, hole);
                hole.status.store(0, Ordering::Relaxed);
            }
            if stage >= 2 {
                hole.status.store(1, Ordering::Relaxed);
            }
            if stage >= 3 {
                g.proc_num.store(2, Ordering::Relaxed);
                src.status.store(0, Ordering::Relaxed);
                src.pid.store(0, Ordering::Relaxed);
            }
            // find_slot never picks the half-written copy, and prefers the original.
            r.slot_hint.store(usize::MAX, Ordering::Relaxed);
            let want = if stage >= 3 { 0 } else { 2 };
            assert_eq!(find_slot(&r, 7), Some(want), "stage {stage}");
            assert_eq!(find_slot(&r, 0), None, "stage {stage}: pid 0 is nobody");
            let dup = if stage == 2 { 7 } else { 0 };
            assert_eq!(
                container_usage(&g, 0),
                5000 + 7000 + dup * 1000,
                "stage {stage}: before the repair only a complete duplicate counts twice"
            );
            compact_locked(&g, 5, &|p| p >= 9000);
            assert_one_slot_per_pid(&g, &[5, 7], &|_| 0, &format!("stage {stage}"));
        }
    }

    /// Exited (`status == 0`) slots are removed even when their pid is still alive, and
    /// duplicates keep the higher slot, whose usage may differ.
    #[test]
    fn status0_and_duplicate_slots_are_removed() {
        let (_p, r) = region("slots-dup");
        let g = r.lock().unwrap();
        for pid in [1, 2, 3, 4] {
            attach_with(&g, pid, &|_| false).unwrap();
            fill(&g, pid);
        }
        // Slot 0 (pid 1, say dead) became a complete copy of 4 (an interrupted move); 4 then adds
        // usage, which goes to its original slot (found by a scan from the top).
        copy_slot(&g.procs[3], &g.procs[0]);
        r.slot_hint.store(usize::MAX, Ordering::Relaxed);
        add_usage_locked(&g, 4, 0, UsageKind::Data, 11).unwrap();
        assert_eq!(g.procs[3].used[0].data_size.load(Ordering::Relaxed), 4011);
        assert_eq!(g.procs[0].used[0].data_size.load(Ordering::Relaxed), 4000);
        g.procs[2].status.store(0, Ordering::Relaxed); // 3 exited without the lock (pid still set)
        let removed = compact_locked(&g, 3, &|_| false);
        assert_eq!(removed, 2, "the stale duplicate of 4 and exited 3 (even though 3 is self_pid)");
        assert_one_slot_per_pid(&g, &[2, 4], &|p| if p == 4 { 11 } else { 0 }, "dup");
    }
}
