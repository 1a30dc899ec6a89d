//! Process slots (docs/hami-contract.md §3.9-§3.10), the per-slot seqlock (§3.8) and the overflow
//! table for processes beyond the 1024 slots. The protocol is described in docs/design.md,
//! "Memory ledger"; in short:
//!
//! - **Live slots never move.** A slot is claimed (attach) and freed (exit, or a sweep of a dead
//!   owner) in place, under the container lock ([`crate::lock`]). Holes below `proc_num` have
//!   `status = 0`; the monitor and every reader here skip them (they sum `k < proc_num` with
//!   `status != 0`, §3.9/§3.10). `proc_num` shrinks past trailing free slots.
//! - **Single writer.** Only the owning process writes its slot's `used[]` (the process's threads
//!   serialise on [`Region::writer`], a process-local mutex, so the seqlock has one writer), with
//!   no container lock: see `ledger` for publish-then-check.
//! - **Identity, not pid.** A slot carries its owner's start time (`/proc/<pid>/stat` field 22)
//!   in `unused[0]` (offset 1944, ignored by the monitor). A slot is dead when `kill(pid, 0)`
//!   says ESRCH, the process is a zombie, or the start time differs (pid reused).
//! - **Crash consistency.** Every store of claim, free and usage update goes through `put*` so
//!   tests can stop the writes after any number of them (= SIGKILL there). Claim writes `status`
//!   last, free writes `status = 0` first: an interrupted claim or free leaves a `status = 0`
//!   slot that nobody counts and the next sweep frees; an interrupted usage update only touches
//!   the dead writer's own slot, which the sweep discards whole.

use crate::lock::LockError;
use crate::region::*;
use crate::regionmap::{Region, RegionGuard};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

#[derive(Debug)]
pub enum SlotError {
    /// 1024 live slots (and, for [`attach_overflow_locked`], a full overflow table).
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
    /// A slot with our pid and identity was found (re-attach) and reset.
    pub reused: bool,
    /// Dead or exited slots freed by the sweep that ran first.
    pub removed: usize,
}

/// Whether an update went through the lock or without it (kept for callers; usage updates are
/// always lock-free now).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdatePath {
    Locked,
    LockFree,
}

/// Bound on seqlock read retries (a writer that died mid-update leaves the sequence odd forever).
pub const SEQLOCK_MAX_RETRIES: u32 = 128;
/// Lock bound used at exit: an exit handler must not hang.
pub const DETACH_LOCK_TIMEOUT: Duration = Duration::from_millis(250);

/// Index of `unused[]` holding the owner's start time.
const START_TIME: usize = 0;
/// Index of `unused[]` holding the owner's reservation in flight: `device << 60 | bytes`, 0 when
/// none. Limit checks add it; the monitor's sum (`total` only) never sees a transient.
const PENDING: usize = 1;
/// Largest pending amount one word can carry.
pub const PENDING_MAX: u64 = (1 << 60) - 1;
/// Index of `used[dev].unused[]` holding the owner's lease on the device: headroom it reserved
/// through a checked publication and may allocate from without reading other slots. Limit
/// checks count it, the monitor's sum (`total` only) and every view do not. The owner moves
/// bytes out of it (allocating) and back into it (freeing); any reserver that finds the
/// container over its limit revokes it (swap to 0). See docs/design.md "Memory ledger", leases.
const LEASE: usize = 0;
/// Index of `used[dev].unused[]` marking that the owner creates or created a context on the
/// device through a hooked call (set before the driver's call, never cleared while the slot
/// lives): NVML may list it there before any of its memory is counted.
const CONTEXT_MARK: usize = 1;

/// Liveness probe: `(pid, start_time) → dead?`. [`is_dead`] in production, closures in tests.
pub type Liveness<'a> = &'a dyn Fn(i32, u64) -> bool;

fn proc_num(r: &SharedRegion) -> usize {
    r.proc_num.load(Ordering::Acquire).clamp(0, MAX_PROCS as i32) as usize
}

// ---- identity ---------------------------------------------------------------------------------

/// The state letter of a `/proc/<pid>/stat` line (after the last `)`; comm may contain `)`).
pub fn proc_stat_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// Field 22 (`starttime`, clock ticks since boot) of a `/proc/<pid>/stat` line.
pub fn proc_stat_start_time(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 2..)?).ok()?;
    // Fields after the comm start at 3 (state); starttime is field 22.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

/// Start time of `pid`, `None` without `/proc` (or the process is gone).
pub fn proc_start_time(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    proc_stat_start_time(&read_proc_stat(pid)?)
}

/// `/proc/<pid>/stat`, opened relative to `/proc`: every process, the caller itself included,
/// must read the kernel's start time. A user-mode emulator (qemu-user, how aarch64 images run on
/// x86_64 hosts) answers an absolute path naming the caller itself with a start time of its own
/// making, which differs from what other processes read and would mark the caller's slot as a
/// recycled pid.
fn read_proc_stat(pid: i32) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    let proc = std::fs::File::open("/proc").ok()?;
    let rel = std::ffi::CString::new(format!("{pid}/stat")).ok()?;
    // SAFETY: `rel` is NUL-terminated and `proc` an open directory; the new descriptor is owned
    // by the File below.
    let fd = unsafe { libc::openat(proc.as_raw_fd(), rel.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut stat = Vec::with_capacity(512);
    f.read_to_end(&mut stat).ok()?;
    Some(stat)
}

/// Dead: pid ≤ 0, `kill(pid, 0) == ESRCH`, a zombie, or (when `start != 0` and `/proc` answers)
/// a different start time, i.e. the pid now belongs to another process.
pub fn is_dead(pid: i32, start: u64) -> bool {
    if pid <= 0 {
        return true;
    }
    if unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    // It exists (or belongs to another user: EPERM). Zombies still answer kill().
    match read_proc_stat(pid) {
        Some(s) => {
            proc_stat_state(&s).is_some_and(|c| c == b'Z' || c == b'X')
                || (start != 0 && proc_stat_start_time(&s).is_some_and(|t| t != start))
        }
        None => false, // no /proc: trust kill()
    }
}

/// `kill(pid, 0) == ESRCH`, or a zombie (no identity check). Pids ≤ 0 → dead.
pub fn pid_is_dead(pid: i32) -> bool {
    is_dead(pid, 0)
}

// ---- stores -----------------------------------------------------------------------------------
//
// Every store of the protocol goes through `put*` so the tests can stop the writes after any
// number of them (see `tests::interrupted_*`): dropped stores are exactly what SIGKILL leaves.

#[cfg(test)]
thread_local! {
    /// `Some(n)`: only the next `n` stores of this thread happen, later ones are dropped (= killed).
    pub(crate) static STORE_BUDGET: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
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

/// A counted swap (a store for the store budget; dropped: nothing changes, the old value is read).
#[inline(always)]
fn swap64(a: &AtomicU64, v: u64) -> u64 {
    if may_store() { a.swap(v, Ordering::AcqRel) } else { a.load(Ordering::Acquire) }
}

/// A counted compare-and-swap (dropped: fails without a change).
#[inline(always)]
fn cas64(a: &AtomicU64, current: u64, new: u64) -> bool {
    may_store() && a.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire).is_ok()
}

#[inline(always)]
fn put32(a: &AtomicU32, v: u32, o: Ordering) {
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

/// Zeroes everything of a slot except `pid` and `status`.
fn zero_slot_body(s: &ProcSlot) {
    let z = Ordering::Relaxed;
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
    put32(&s._padding, 0, z);
    put64(&s.seqlock, 0, z);
    for a in &s.unused {
        put64(a, 0, z);
    }
}

fn is_free(s: &ProcSlot) -> bool {
    s.pid.load(Ordering::Relaxed) == 0 && s.status.load(Ordering::Relaxed) == 0
}

/// Frees slot `s` in place: `status = 0` first (gone from every sum at one store), then the
/// body, then `pid = 0` (claimable). Interrupted anywhere: a `status = 0` slot the next sweep
/// frees again.
fn free_slot(s: &ProcSlot) {
    put_i32(&s.status, 0, Ordering::Release);
    zero_slot_body(s);
    put_i32(&s.pid, 0, Ordering::Release);
}

/// Claims free slot `k` for `(pid, start)`: body zeroed, `proc_num` raised if needed, identity,
/// pid, and `status = 1` last. Interrupted before the status: a `status = 0` slot (free or
/// garbage), counted by nobody.
fn claim_slot(r: &SharedRegion, k: usize, pid: i32, start: u64) {
    let s = &r.procs[k];
    zero_slot_body(s);
    if proc_num(r) <= k {
        put_i32(&r.proc_num, k as i32 + 1, Ordering::Release);
    }
    put64(&s.unused[START_TIME], start, Ordering::Relaxed);
    put_i32(&s.pid, pid, Ordering::Release);
    put_i32(&s.status, 1, Ordering::Release);
}

fn shrink_proc_num(r: &SharedRegion) {
    let mut n = proc_num(r);
    while n > 0 && is_free(&r.procs[n - 1]) {
        n -= 1;
    }
    // Also repairs an out-of-range value (the monitor clamps to [0, 1024]; so do we).
    if r.proc_num.load(Ordering::Relaxed) != n as i32 {
        put_i32(&r.proc_num, n as i32, Ordering::Release);
    }
}

/// Frees, in place, every slot `k < proc_num` that is not free and is either `status = 0`
/// (exited, or an interrupted claim/free), `pid ≤ 0` with a status, or owned by a dead process
/// (never `self_pid`'s); the same for the overflow table. Returns how many were freed. Caller
/// holds the lock. Idempotent under interruption.
pub fn sweep_locked(g: &RegionGuard<'_>, self_pid: i32, is_dead: Liveness<'_>) -> usize {
    let r: &SharedRegion = g;
    let mut freed = 0;
    for k in 0..proc_num(r) {
        let s = &r.procs[k];
        if is_free(s) {
            continue;
        }
        let pid = s.pid.load(Ordering::Relaxed);
        let garbage = s.status.load(Ordering::Relaxed) == 0 || pid <= 0;
        if garbage || (pid != self_pid && is_dead(pid, s.unused[START_TIME].load(Ordering::Relaxed))) {
            free_slot(s);
            freed += 1;
        }
    }
    shrink_proc_num(r);
    if let Some(ext) = g.region().ext() {
        freed += sweep_overflow(&ext.overflow, self_pid, is_dead);
    }
    crate::counters::record_sweep(g.region().ext(), freed);
    freed
}

/// Takes the lock (bounded by `timeout`) and sweeps with the real liveness check.
pub fn sweep(region: &Region, self_pid: i32, timeout: Duration) -> Result<usize, SlotError> {
    let g = region.lock_timeout(timeout).map_err(SlotError::Lock)?;
    Ok(sweep_locked(&g, self_pid, &is_dead))
}

/// Lock-free pre-check for the periodic sweep: is any slot or overflow record (other than
/// `self_pid`'s) garbage or dead? Costs one `kill` and one `/proc` read per live slot.
pub fn has_sweepable(region: &Region, self_pid: i32, is_dead: Liveness<'_>) -> bool {
    has_sweepable_by(region, self_pid, &|_, pid, start| is_dead(pid, start))
}

/// [`has_sweepable`] with a probe that also gets the slot index (`usize::MAX` for overflow
/// records), so a caller can bound the expensive checks per call (see `housekeeping`).
pub fn has_sweepable_by(region: &Region, self_pid: i32, probe: &dyn Fn(usize, i32, u64) -> bool) -> bool {
    let r = region.shared();
    let slots = (0..proc_num(r)).any(|k| {
        let s = &r.procs[k];
        if is_free(s) {
            return false;
        }
        let pid = s.pid.load(Ordering::Relaxed);
        s.status.load(Ordering::Relaxed) == 0
            || pid <= 0
            || (pid != self_pid && probe(k, pid, s.unused[START_TIME].load(Ordering::Relaxed)))
    });
    slots
        || region.ext().is_some_and(|e| {
            overflow_records(&e.overflow).iter().any(|o| {
                let pid = o.pid.load(Ordering::Relaxed);
                pid != 0 && pid != self_pid && probe(usize::MAX, pid, o.start_time.load(Ordering::Relaxed))
            })
        })
}

/// Index of `RegionExt::reserved_hdr` holding the container's next scan time.
pub const SCAN_DUE: usize = 0;

/// Whether this process should run the periodic liveness scan now (`now`: CLOCK_MONOTONIC ns):
/// one scan per `period` for the whole container, whoever's tick comes first once it is due, so
/// n processes cost O(n) probes per period instead of O(n²). A due time further ahead than two
/// periods is garbage (a foreign writer, a clock from another boot) and is taken over. Without an
/// extension every process scans. A scanner that dies or stops mid-scan delays the next one by
/// at most a period.
pub fn take_scan_turn(region: &Region, now: u64, period: u64) -> bool {
    take_turn(region, SCAN_DUE, now, period)
}

/// Index of `RegionExt::reserved_hdr` holding the container's next host GPU sample time.
pub const HOST_SAMPLE_DUE: usize = 1;

/// Whether this process publishes the container's host GPU sample now (`now`: CLOCK_MONOTONIC
/// ns): one publication per `period` for the whole container, as [`take_scan_turn`].
pub fn take_host_sample_turn(region: &Region, now: u64, period: u64) -> bool {
    take_turn(region, HOST_SAMPLE_DUE, now, period)
}

/// Hands back a host sample turn taken at `now` that published nothing (this process's NVML does
/// not answer), so another process of the container can take it at its next tick.
pub fn return_host_sample_turn(region: &Region, now: u64, period: u64) {
    if let Some(ext) = region.ext() {
        let _ = ext.reserved_hdr[HOST_SAMPLE_DUE].compare_exchange(
            now.saturating_add(period),
            now,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

/// The turn protocol of the due time in `reserved_hdr[word]`.
fn take_turn(region: &Region, word: usize, now: u64, period: u64) -> bool {
    let Some(ext) = region.ext() else { return true };
    let w = &ext.reserved_hdr[word];
    let due = w.load(Ordering::Relaxed);
    if now < due && due - now <= 2 * period {
        return false;
    }
    w.compare_exchange(due, now.saturating_add(period), Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

/// `kill(pid, 0) == ESRCH` only (no `/proc`: misses zombies and recycled pids).
pub fn is_gone(pid: i32) -> bool {
    pid <= 0
        || (unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}

/// Finds `pid`'s live (`status != 0`) slot: the hint first, then a scan. Slots never move, so a
/// verified hint stays right until the slot is freed.
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
    let k = (0..n).find(|&k| is(k))?;
    region.slot_hint.store(k, Ordering::Relaxed);
    Some(k)
}

/// The order free slots are claimed in: even indices first, then odd. A slot is 1 960 bytes, not
/// a multiple of the 64-byte cache line, so the tail of slot k (its seqlock and in-flight word,
/// written on every allocation and free) shares a line with the head of slot k+1 (its
/// `used[0]`); two processes in adjacent slots would bounce that line between their cores on
/// every allocation. Up to 512 processes no two live slots are adjacent.
fn claim_order() -> impl Iterator<Item = usize> {
    (0..MAX_PROCS).step_by(2).chain((1..MAX_PROCS).step_by(2))
}

/// Attaches `pid` (call once per process, and again in a forked child with its new pid): sweeps,
/// then resets a live slot that already carries `pid` (a re-attach: its usage is reset —
/// deliberate fix, the incumbent kept it) or claims the lowest free slot.
pub fn attach_locked(g: &RegionGuard<'_>, pid: i32) -> Result<AttachInfo, SlotError> {
    attach_with(g, pid, proc_start_time(pid).unwrap_or(0), &is_dead)
}

pub fn attach(region: &Region, pid: i32) -> Result<AttachInfo, SlotError> {
    let g = region.lock().map_err(SlotError::Lock)?;
    attach_locked(&g, pid)
}

pub fn attach_with(g: &RegionGuard<'_>, pid: i32, start: u64, is_dead: Liveness<'_>) -> Result<AttachInfo, SlotError> {
    let removed = sweep_locked(g, pid, is_dead);
    let region = g.region();
    let r: &SharedRegion = g;
    if let Some(k) = find_slot(region, pid) {
        // Reset in place: status 0 first, so an interruption leaves garbage, not a stale count.
        free_slot(&r.procs[k]);
        claim_slot(r, k, pid, start);
        return Ok(AttachInfo { index: k, reused: true, removed });
    }
    let k = claim_order().find(|&k| is_free(&r.procs[k])).ok_or(SlotError::TableFull)?;
    claim_slot(r, k, pid, start);
    region.slot_hint.store(k, Ordering::Relaxed);
    Ok(AttachInfo { index: k, reused: false, removed })
}

/// Exit: the slot is freed in place and `proc_num` shrunk. Bounded wait
/// ([`DETACH_LOCK_TIMEOUT`]); if the lock cannot be had, only `status = 0` is stored (never
/// `pid = 0` without the lock: a concurrent sweep may already have handed the slot to someone
/// else); the next sweep frees it. Returns whether a slot was found.
pub fn detach(region: &Region, pid: i32) -> bool {
    match region.lock_timeout(DETACH_LOCK_TIMEOUT) {
        Ok(g) => {
            let Some(k) = find_slot(region, pid) else { return false };
            free_slot(&g.procs[k]);
            shrink_proc_num(&g);
            true
        }
        Err(_) => {
            let Some(k) = find_slot(region, pid) else { return false };
            region.shared().procs[k].status.store(0, Ordering::Release);
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

// ---- usage of one's own slot (single writer: the caller holds `Region::writer`) ---------------

fn apply(v: u64, add: bool, bytes: u64) -> u64 {
    if add { v.saturating_add(bytes) } else { v.saturating_sub(bytes) }
}

/// Seqlock write: sequence odd → `total` and the category → even. Saturating both ways. One
/// writer (the owner, serialised by `Region::writer`), so plain loads and stores suffice.
pub(crate) fn write_usage(s: &ProcSlot, dev: usize, kind: UsageKind, add: bool, bytes: u64) {
    let seq = s.seqlock.load(Ordering::Relaxed) & !1; // never leave a stale odd value in place
    put64(&s.seqlock, seq.wrapping_add(1), Ordering::Relaxed);
    fence(Ordering::Release);
    let m = &s.used[dev];
    // Release: a checker that reads the new total also sees our lease and pending words as
    // they were stored before it (their order is what makes a concurrent check conservative).
    put64(&m.total, apply(m.total.load(Ordering::Relaxed), add, bytes), Ordering::Release);
    let c = m.category(kind);
    put64(c, apply(c.load(Ordering::Relaxed), add, bytes), Ordering::Relaxed);
    put64(&s.seqlock, seq.wrapping_add(2), Ordering::Release);
}

/// Publishes (`bytes > 0`) or clears (`0`) our reservation in flight on slot `s` (owner only).
pub(crate) fn set_pending(s: &ProcSlot, dev: usize, bytes: u64) {
    let w = if bytes == 0 { 0 } else { ((dev as u64) << 60) | bytes.min(PENDING_MAX) };
    put64(&s.unused[PENDING], w, Ordering::Release);
}

fn pending_on(s: &ProcSlot, dev: usize) -> u64 {
    let w = s.unused[PENDING].load(Ordering::Acquire);
    if w != 0 && (w >> 60) as usize == dev { w & PENDING_MAX } else { 0 }
}

/// Slot `s`'s lease word on `dev`.
pub(crate) fn lease(s: &ProcSlot, dev: usize) -> &AtomicU64 {
    &s.used[dev].unused[LEASE]
}

/// Owner: takes `bytes` out of its lease, which it read as `seen`. False if the lease was
/// revoked meanwhile (the bytes are then not covered: the caller checks them).
pub(crate) fn take_from_lease(s: &ProcSlot, dev: usize, seen: u64, bytes: u64) -> bool {
    cas64(lease(s, dev), seen, seen.saturating_sub(bytes))
}

/// Owner: moves counted bytes into its lease (`seen` → `new`, `new > seen`). Fails without a
/// change if the lease was revoked meanwhile.
pub(crate) fn refill_lease(s: &ProcSlot, dev: usize, seen: u64, new: u64) -> bool {
    cas64(lease(s, dev), seen, new)
}

/// Owner, after a checked publication that covered `bytes`: adds them to its lease.
pub(crate) fn grant_lease(s: &ProcSlot, dev: usize, bytes: u64) {
    if may_store() {
        lease(s, dev).fetch_add(bytes, Ordering::AcqRel);
    }
}

/// Gives the lease on `dev` back (owner) or takes it away (any other process, at any time: the
/// owner only ever shrinks or refills its lease by compare-and-swap). Returns what it held.
pub(crate) fn drop_lease(s: &ProcSlot, dev: usize) -> u64 {
    if lease(s, dev).load(Ordering::Relaxed) == 0 { 0 } else { swap64(lease(s, dev), 0) }
}

/// Revokes every other live slot's lease on `dev` (a reserver that found the container over its
/// limit). Returns the bytes freed for the check that follows.
pub(crate) fn revoke_leases(region: &Region, dev: usize, own_slot: Option<usize>) -> u64 {
    let r = region.shared();
    let mut freed = 0u64;
    for k in 0..proc_num(r) {
        let s = &r.procs[k];
        if Some(k) != own_slot && s.status.load(Ordering::Relaxed) != 0 {
            freed = freed.saturating_add(drop_lease(s, dev));
        }
    }
    freed
}

/// What a limit check compares: [`container_total`] plus every live slot's reservation in
/// flight and lease on `dev` (conservative: bytes being committed or moved between lease and
/// total may count twice for an instant, never zero times).
pub fn checked_total(region: &Region, dev: usize) -> u64 {
    checked_sum(region, dev).sum
}

/// [`checked_total`], how many live slots it read and how much of it was reservations in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedSum {
    pub sum: u64,
    pub live: usize,
    /// The reservations in flight in `sum` (the checker's own included, if it published one).
    pub pending: u64,
}

pub fn checked_sum(region: &Region, dev: usize) -> CheckedSum {
    let r = region.shared();
    let mut sum = 0u64;
    let mut live = 0;
    let mut pending_sum = 0u64;
    for s in &r.procs[..proc_num(r)] {
        if s.status.load(Ordering::Relaxed) != 0 {
            live += 1;
            // Order matters. The owner stores total, then lease, then clears pending when it
            // commits (pending first: a cleared word means the total is already visible); it
            // stores total then shrinks the lease when it allocates from it (lease before
            // total: a shrunk lease means the bigger total is visible); it grows the lease,
            // then shrinks the total when it frees into it (lease again after total: a smaller
            // total means the bigger lease is visible). So: pending, lease, total, lease.
            let pending = pending_on(s, dev);
            let l1 = lease(s, dev).load(Ordering::Acquire);
            let total = s.used[dev].total.load(Ordering::Acquire);
            let l2 = lease(s, dev).load(Ordering::Acquire);
            sum = sum.saturating_add(pending).saturating_add(l1.max(l2)).saturating_add(total);
            pending_sum = pending_sum.saturating_add(pending);
        }
    }
    let sum = match region.ext() {
        Some(e) => sum.saturating_add(overflow_total(&e.overflow, dev)),
        None => sum,
    };
    CheckedSum { sum, live, pending: pending_sum }
}

fn slot_write(region: &Region, k: usize, dev: usize, kind: UsageKind, add: bool, bytes: u64) {
    let _w = region.writer.lock();
    write_usage(&region.shared().procs[k], dev, kind, add, bytes);
}

/// Adds usage to `pid`'s slot without a limit check (tests, tools; see `ledger::reserve`).
pub fn add_usage(region: &Region, pid: i32, dev: usize, kind: UsageKind, bytes: u64) -> Result<(), SlotError> {
    if dev >= MAX_DEVICES {
        return Err(SlotError::BadDevice(dev));
    }
    let k = find_slot(region, pid).ok_or(SlotError::NotAttached)?;
    slot_write(region, k, dev, kind, true, bytes);
    Ok(())
}

pub fn add_usage_locked(
    g: &RegionGuard<'_>,
    pid: i32,
    dev: usize,
    kind: UsageKind,
    bytes: u64,
) -> Result<(), SlotError> {
    add_usage(g.region(), pid, dev, kind, bytes)
}

pub fn sub_usage_locked(
    g: &RegionGuard<'_>,
    pid: i32,
    dev: usize,
    kind: UsageKind,
    bytes: u64,
) -> Result<(), SlotError> {
    sub_usage(g.region(), pid, dev, kind, bytes).map(|_| ())
}

/// Subtracts usage (saturating at 0). Never takes the container lock: a free is never lost.
pub fn sub_usage(region: &Region, pid: i32, dev: usize, kind: UsageKind, bytes: u64) -> Result<UpdatePath, SlotError> {
    if dev >= MAX_DEVICES {
        return Err(SlotError::BadDevice(dev));
    }
    let k = find_slot(region, pid).ok_or(SlotError::NotAttached)?;
    slot_write(region, k, dev, kind, false, bytes);
    Ok(UpdatePath::LockFree)
}

// ---- readers ----------------------------------------------------------------------------------

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

/// What every limit check and view uses: the slots' sum ([`slot_totals`]) plus the overflow
/// table's. One load per live slot (`total` alone needs no seqlock).
pub fn container_total(region: &Region, dev: usize) -> u64 {
    if dev >= MAX_DEVICES {
        return 0;
    }
    let t = slot_totals(region.shared(), dev);
    match region.ext() {
        Some(e) => t.saturating_add(overflow_total(&e.overflow, dev)),
        None => t,
    }
}

/// Σ `used[dev].total` over live slots, without seqlock retries.
pub fn slot_totals(r: &SharedRegion, dev: usize) -> u64 {
    let mut sum = 0u64;
    for s in &r.procs[..proc_num(r)] {
        if s.status.load(Ordering::Relaxed) != 0 {
            sum = sum.saturating_add(s.used[dev].total.load(Ordering::Relaxed));
        }
    }
    sum
}

pub fn container_breakdown(r: &SharedRegion, dev: usize) -> UsageBreakdown {
    let mut out = UsageBreakdown::default();
    if dev >= MAX_DEVICES {
        return out;
    }
    for s in live(r) {
        let v = s.usage(dev);
        out.total = out.total.saturating_add(v.total);
        out.context = out.context.saturating_add(v.context);
        out.module = out.module.saturating_add(v.module);
        out.data = out.data.saturating_add(v.data);
    }
    out
}

/// One slot that counts, as [`live`] yields it.
#[derive(Clone, Copy)]
pub struct LiveSlot<'r> {
    /// Index `k` in `procs`.
    pub index: usize,
    /// Container pid (a foreign writer may have left `<= 0`; callers that need a process skip it).
    pub pid: i32,
    /// Host pid (`<= 0`: not resolved yet).
    pub hostpid: i32,
    slot: &'r ProcSlot,
}

impl LiveSlot<'_> {
    /// `used[dev]` of this slot, read under its seqlock (all zero for `dev >= MAX_DEVICES`).
    pub fn usage(&self, dev: usize) -> UsageBreakdown {
        let Some(m) = self.slot.used.get(dev) else { return UsageBreakdown::default() };
        let v = read_consistent(self.slot, || {
            [
                m.total.load(Ordering::Relaxed),
                m.context_size.load(Ordering::Relaxed),
                m.module_size.load(Ordering::Relaxed),
                m.data_size.load(Ordering::Relaxed),
            ]
        });
        UsageBreakdown { total: v[0], context: v[1], module: v[2], data: v[3] }
    }

    /// A process NVML may list on `dev` whose host PID is not known yet: no host PID, and memory
    /// on the device (a context or allocations). A process that only initialised CUDA or NVML (a
    /// launcher that spawns the workers, a metrics sidecar) holds none there and is not one: it
    /// would otherwise keep the container's work "unattributed" and be matched to a PID that is
    /// not its own.
    pub fn awaits_host_pid_on(&self, dev: usize) -> bool {
        let marked = self.slot.used.get(dev).is_some_and(|m| m.unused[CONTEXT_MARK].load(Ordering::Relaxed) != 0);
        self.hostpid <= 0 && (marked || self.usage(dev).total > 0)
    }
}

/// The slots that count, in index order: `k < proc_num` (clamped to the table) with
/// `status != 0`, which is what the monitor sums. Slots are freed in place, so free holes
/// (status 0) are skipped, never compacted away (docs/design.md "Memory ledger"). The one
/// reader of live slots for views and scans; the limit check's [`slot_totals`] keeps its
/// single load per slot.
pub fn live(r: &SharedRegion) -> impl Iterator<Item = LiveSlot<'_>> {
    r.procs[..proc_num(r)].iter().enumerate().filter_map(|(index, slot)| {
        if slot.status.load(Ordering::Acquire) == 0 {
            return None;
        }
        let pid = slot.pid.load(Ordering::Acquire);
        let hostpid = slot.hostpid.load(Ordering::Acquire);
        Some(LiveSlot { index, pid, hostpid, slot })
    })
}

/// Marks that `pid` is creating a context on `dev` ([`LiveSlot::awaits_host_pid_on`]). False
/// when `pid` has no slot or `dev` is out of range.
pub fn mark_context(region: &Region, pid: i32, dev: usize) -> bool {
    let Some(k) = find_slot(region, pid) else { return false };
    let Some(m) = region.shared().procs[k].used.get(dev) else { return false };
    put64(&m.unused[CONTEXT_MARK], 1, Ordering::Release);
    true
}

/// Writes `device_util[dev].sm_util` of `pid`'s slot (the monitor sums it). False when `pid` has
/// no slot or `dev` is out of range.
pub fn set_sm_util(region: &Region, pid: i32, dev: usize, v: u64) -> bool {
    let Some(k) = find_slot(region, pid) else { return false };
    let Some(u) = region.shared().procs[k].device_util.get(dev) else { return false };
    u.sm_util.store(v, Ordering::Relaxed);
    true
}

/// `pid`'s own `used[dev].total`.
pub fn slot_usage(region: &Region, pid: i32, dev: usize) -> Option<u64> {
    if dev >= MAX_DEVICES {
        return None;
    }
    let k = find_slot(region, pid)?;
    let s = &region.shared().procs[k];
    Some(read_consistent(s, || [s.used[dev].total.load(Ordering::Relaxed), 0, 0, 0])[0])
}

// ---- overflow table (processes beyond the 1024 slots) -----------------------------------------

fn overflow_records(t: &OverflowTable) -> &[OverflowRecord] {
    let n = (t.num.load(Ordering::Acquire) as usize).min(OVERFLOW_RECORDS);
    &t.records[..n]
}

fn record_is_free(o: &OverflowRecord) -> bool {
    o.pid.load(Ordering::Relaxed) == 0 && o.status.load(Ordering::Relaxed) == 0
}

fn free_record(o: &OverflowRecord) {
    put_i32(&o.status, 0, Ordering::Release);
    for a in &o.total {
        put64(a, 0, Ordering::Relaxed);
    }
    put64(&o.start_time, 0, Ordering::Relaxed);
    put_i32(&o.pid, 0, Ordering::Release);
}

fn shrink_overflow(t: &OverflowTable) {
    let mut n = (t.num.load(Ordering::Relaxed) as usize).min(OVERFLOW_RECORDS);
    while n > 0 && record_is_free(&t.records[n - 1]) {
        n -= 1;
    }
    if t.num.load(Ordering::Relaxed) != n as u32 {
        put32(&t.num, n as u32, Ordering::Release);
    }
}

/// Zeroes the whole table (fresh extension).
pub fn zero_overflow_table(t: &OverflowTable) {
    for o in &t.records {
        free_record(o);
    }
    t.num.store(0, Ordering::Release);
}

fn sweep_overflow(t: &OverflowTable, self_pid: i32, is_dead: Liveness<'_>) -> usize {
    let mut freed = 0;
    for o in overflow_records(t) {
        if record_is_free(o) {
            continue;
        }
        let pid = o.pid.load(Ordering::Relaxed);
        let garbage = o.status.load(Ordering::Relaxed) == 0 || pid <= 0;
        if garbage || (pid != self_pid && is_dead(pid, o.start_time.load(Ordering::Relaxed))) {
            free_record(o);
            freed += 1;
        }
    }
    shrink_overflow(t);
    freed
}

/// Claims an overflow record for `(pid, start)` (caller holds the lock; the slot table is full).
/// Same order as a slot claim: zeroed, `num` raised, identity, pid, status last.
pub fn attach_overflow_locked(g: &RegionGuard<'_>, pid: i32, start: u64) -> Result<usize, SlotError> {
    let t = &g.region().ext().ok_or(SlotError::TableFull)?.overflow;
    let i = (0..OVERFLOW_RECORDS).find(|&i| record_is_free(&t.records[i])).ok_or(SlotError::TableFull)?;
    let o = &t.records[i];
    for a in &o.total {
        put64(a, 0, Ordering::Relaxed);
    }
    if (t.num.load(Ordering::Relaxed) as usize) <= i {
        put32(&t.num, i as u32 + 1, Ordering::Release);
    }
    put64(&o.start_time, start, Ordering::Relaxed);
    put_i32(&o.pid, pid, Ordering::Release);
    put_i32(&o.status, 1, Ordering::Release);
    Ok(i)
}

/// Exit of an overflow process (bounded lock; without it only `status = 0`).
pub fn detach_overflow(region: &Region, i: usize) {
    let Some(e) = region.ext() else { return };
    let o = &e.overflow.records[i.min(OVERFLOW_RECORDS - 1)];
    match region.lock_timeout(DETACH_LOCK_TIMEOUT) {
        Ok(_g) => {
            free_record(o);
            shrink_overflow(&e.overflow);
        }
        Err(_) => o.status.store(0, Ordering::Release),
    }
}

/// Σ of the in-use records' totals on `dev`.
pub fn overflow_total(t: &OverflowTable, dev: usize) -> u64 {
    let mut sum = 0u64;
    for o in overflow_records(t) {
        if o.status.load(Ordering::Relaxed) != 0 {
            sum = sum.saturating_add(o.total[dev].load(Ordering::Relaxed));
        }
    }
    sum
}

/// Owner-only update of record `o` (caller holds `Region::writer`).
pub(crate) fn write_record(o: &OverflowRecord, dev: usize, add: bool, bytes: u64) {
    put64(&o.total[dev], apply(o.total[dev].load(Ordering::Relaxed), add, bytes), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ledger;
    use crate::testutil::{fork_child, temp_region as region, wait_child};

    fn pn(r: &Region) -> usize {
        proc_num(r.shared())
    }

    const ALIVE: Liveness<'static> = &|_, _| false;

    #[test]
    fn only_a_process_with_memory_on_the_device_awaits_its_host_pid_there() {
        let (_p, region) = crate::testutil::temp_region("slots-awaits");
        let (worker, launcher) = (unsafe { libc::getpid() }, 1);
        attach_with(&region.lock().unwrap(), worker, 0, &|_, _| false).unwrap();
        attach_with(&region.lock().unwrap(), launcher, 0, &|_, _| false).unwrap();
        add_usage(&region, worker, 0, UsageKind::Context, 64 << 20).unwrap();
        let awaits =
            |d: usize| live(region.shared()).filter(|s| s.awaits_host_pid_on(d)).map(|s| s.pid).collect::<Vec<_>>();
        assert_eq!(awaits(0), vec![worker], "the launcher holds nothing on device 0");
        assert!(awaits(1).is_empty(), "nobody holds memory on device 1");
        // A context under way on device 1, nothing counted there yet.
        assert!(mark_context(&region, launcher, 1));
        assert_eq!(awaits(1), vec![launcher]);
        set_hostpid(&region, worker, 4242).unwrap();
        assert!(awaits(0).is_empty(), "resolved");
        assert!(!mark_context(&region, 77, 0), "no slot");
    }

    #[test]
    fn live_skips_holes_and_reads_under_the_seqlock() {
        let (_p, r) = region("slots-live");
        {
            let g = r.lock().unwrap();
            for (k, pid) in [(0, 101), (1, 102), (2, 103)] {
                claim_slot(&g, k, pid, 1);
            }
        }
        let sh = r.shared();
        sh.procs[0].hostpid.store(9001, Ordering::Relaxed);
        slot_write(&r, 2, 1, UsageKind::Data, true, 4096);
        slot_write(&r, 2, 1, UsageKind::Context, true, 100);
        // A hole in the middle (freed in place) and a slot beyond proc_num: neither counts.
        free_slot(&sh.procs[1]);
        sh.procs[5].pid.store(555, Ordering::Relaxed);
        sh.procs[5].status.store(1, Ordering::Relaxed);
        let got: Vec<(usize, i32, i32)> = live(sh).map(|s| (s.index, s.pid, s.hostpid)).collect();
        assert_eq!(got, vec![(0, 101, 9001), (2, 103, 0)]);
        let u = live(sh).find(|s| s.pid == 103).unwrap().usage(1);
        assert_eq!(u, UsageBreakdown { total: 4196, context: 100, module: 0, data: 4096 });
        assert_eq!(live(sh).find(|s| s.pid == 103).unwrap().usage(MAX_DEVICES), UsageBreakdown::default());
        assert_eq!(container_breakdown(sh, 1), u, "the breakdown is the live slots' sum");

        // A writer stuck mid-update (odd seqlock): the read gives up after bounded retries
        // with the last value instead of spinning forever.
        sh.procs[2].seqlock.store(1, Ordering::Relaxed);
        assert_eq!(live(sh).find(|s| s.pid == 103).unwrap().usage(1).total, 4196);
        sh.procs[2].seqlock.store(2, Ordering::Relaxed);

        // proc_num beyond the table (foreign or corrupt header) is clamped.
        sh.proc_num.store(i32::MAX, Ordering::Relaxed);
        assert_eq!(live(sh).count(), 3, "slot 5 now lies below proc_num");
        sh.proc_num.store(-7, Ordering::Relaxed);
        assert_eq!(live(sh).count(), 0);
    }

    #[test]
    fn set_sm_util_writes_only_an_attached_slot() {
        let (_p, r) = region("slots-smutil");
        {
            let g = r.lock().unwrap();
            attach_with(&g, 201, 1, ALIVE).unwrap();
            attach_with(&g, 202, 1, ALIVE).unwrap();
        }
        assert!(set_sm_util(&r, 202, 3, 42));
        let (k201, k202) = (find_slot(&r, 201).unwrap(), find_slot(&r, 202).unwrap());
        assert_eq!(r.shared().procs[k202].device_util[3].sm_util.load(Ordering::Relaxed), 42);
        assert_eq!(r.shared().procs[k201].device_util[3].sm_util.load(Ordering::Relaxed), 0);
        assert!(!set_sm_util(&r, 999, 3, 1), "no slot: nothing written");
        assert!(!set_sm_util(&r, 202, MAX_DEVICES, 1), "device out of range");
    }

    #[test]
    fn attach_reuse_detach() {
        let (_p, r) = region("slots-basic");
        let me = unsafe { libc::getpid() };
        let a = attach(&r, me).unwrap();
        assert_eq!(a, AttachInfo { index: 0, reused: false, removed: 0 });
        let k = find_slot(&r, me).unwrap();
        assert_eq!(r.shared().procs[k].unused[START_TIME].load(Ordering::Relaxed), proc_start_time(me).unwrap());
        add_usage(&r, me, 0, UsageKind::Data, 100).unwrap();
        // Second attach with the same pid: slot reset in place, no duplicate.
        let a = attach(&r, me).unwrap();
        assert!(a.reused);
        assert_eq!(a.index, 0);
        assert_eq!(pn(&r), 1);
        assert_eq!(slot_usage(&r, me, 0), Some(0));
        assert!(detach(&r, me));
        assert_eq!(pn(&r), 0);
        assert!(!detach(&r, me));
        assert!(matches!(add_usage(&r, me, 0, UsageKind::Data, 1), Err(SlotError::NotAttached)));
    }

    #[test]
    fn dead_slots_are_freed_in_place_and_live_ones_never_move() {
        let (_p, r) = region("slots-holes");
        let dead = |p: i32, _| p >= 9000;
        let g = r.lock().unwrap();
        for (k, pid) in [100, 9001, 102, 9003, 104, 9005].into_iter().enumerate() {
            claim_slot(&g, k, pid, 0);
            add_usage_locked(&g, pid, 2, UsageKind::Data, pid as u64).unwrap();
        }
        g.procs[2].status.store(0, Ordering::Relaxed); // 102 exited without the lock
        assert_eq!(sweep_locked(&g, 100, &dead), 4);
        // Holes stay holes; survivors keep their index; trailing free slots shrink proc_num.
        assert_eq!(proc_num(&g), 5);
        let pids: Vec<(i32, i32)> = (0..5)
            .map(|k| (g.procs[k].pid.load(Ordering::Relaxed), g.procs[k].status.load(Ordering::Relaxed)))
            .collect();
        assert_eq!(pids, vec![(100, 1), (0, 0), (0, 0), (0, 0), (104, 1)]);
        assert_eq!(g.procs[1].used[2].total.load(Ordering::Relaxed), 0, "freed slot zeroed");
        assert_eq!(container_usage(&g, 2), 204);
        assert_eq!(container_total(&r, 2), 204);
        // A newcomer takes the lowest free even slot (no two live slots share a cache line).
        assert_eq!(attach_with(&g, 7, 0, ALIVE).unwrap().index, 2);
        // Our own pid is never freed even if the probe says dead.
        assert_eq!(sweep_locked(&g, 104, &|p, _| p != 7), 1);
        assert_eq!(proc_num(&g), 5);
        assert_eq!(g.procs[4].pid.load(Ordering::Relaxed), 104);
        // The last one leaving shrinks proc_num past every trailing hole.
        drop(g);
        assert!(detach(&r, 104));
        assert_eq!(pn(&r), 3);
        assert_eq!(find_slot(&r, 7), Some(2));
    }

    #[test]
    fn live_slots_are_claimed_apart_so_none_share_a_cache_line() {
        let (_p, r) = region("slots-apart");
        let g = r.lock().unwrap();
        let got: Vec<usize> = (0..3).map(|i| attach_with(&g, 300 + i, 0, ALIVE).unwrap().index).collect();
        assert_eq!(got, vec![0, 2, 4]);
        // Lines of adjacent slots overlap (1 960-byte slots); of slots two apart they never do.
        let line = |k: usize, off: usize| (std::ptr::addr_of!(g.procs[k]) as usize + off) / 64;
        assert_eq!(line(0, 1936), line(1, 0), "slot 0's seqlock shares a line with slot 1's head");
        assert!(line(0, 1959) < line(2, 0));
        // Past 512 processes the odd slots are used too.
        for i in 3..(MAX_PROCS / 2) as i32 {
            attach_with(&g, 300 + i, 0, ALIVE).unwrap();
        }
        assert_eq!(attach_with(&g, 9, 0, ALIVE).unwrap().index, 1);
    }

    #[test]
    fn table_full() {
        let (_p, r) = region("slots-full");
        let g = r.lock().unwrap();
        for pid in 1..=MAX_PROCS as i32 {
            attach_with(&g, 100_000 + pid, 0, ALIVE).unwrap();
        }
        assert!(matches!(attach_with(&g, 5, 0, ALIVE), Err(SlotError::TableFull)));
        // A dead one frees room (its slot, in place).
        let a = attach_with(&g, 5, 0, &|p, _| p == 100_001).unwrap();
        assert_eq!((a.removed, a.index), (1, 0));
        assert_eq!(proc_num(&g), MAX_PROCS);
    }

    #[test]
    fn usage_sums_and_saturation() {
        let (_p, r) = region("slots-usage");
        let g = r.lock().unwrap();
        attach_with(&g, 1, 0, ALIVE).unwrap();
        attach_with(&g, 2, 0, ALIVE).unwrap();
        add_usage_locked(&g, 1, 0, UsageKind::Data, 1000).unwrap();
        add_usage_locked(&g, 1, 0, UsageKind::Context, 50).unwrap();
        add_usage_locked(&g, 2, 0, UsageKind::Module, 7).unwrap();
        assert_eq!(container_breakdown(&g, 0), UsageBreakdown { total: 1057, context: 50, module: 7, data: 1000 });
        sub_usage_locked(&g, 1, 0, UsageKind::Data, 5000).unwrap();
        let s = &g.procs[0].used[0];
        assert_eq!(s.data_size.load(Ordering::Relaxed), 0, "saturates, never wraps");
        assert_eq!(s.total.load(Ordering::Relaxed), 0);
        assert_eq!(s.context_size.load(Ordering::Relaxed), 50, "other category untouched");
        add_usage_locked(&g, 2, 0, UsageKind::Data, u64::MAX).unwrap();
        assert_eq!(g.procs[find_slot(&r, 2).unwrap()].used[0].total.load(Ordering::Relaxed), u64::MAX);
        assert_eq!(container_usage(&g, 0), u64::MAX);
        assert_eq!(container_total(&r, 0), u64::MAX);
        assert!(matches!(add_usage_locked(&g, 1, 16, UsageKind::Data, 1), Err(SlotError::BadDevice(16))));
        // status 0 slots are not counted.
        g.procs[find_slot(&r, 2).unwrap()].status.store(0, Ordering::Relaxed);
        assert_eq!(container_usage(&g, 0), 0);
        assert_eq!(container_total(&r, 0), 0);
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
        assert_eq!(container_total(&r, 0), 0);
        // Slots 1.. are free (pid 0, status 0): nothing to free, and a sane count is written.
        assert_eq!(sweep(&r, me, Duration::from_secs(1)).unwrap(), 0);
        assert_eq!(r.shared().proc_num.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn odd_seqlock_is_bounded() {
        let (_p, r) = region("slots-odd");
        let g = r.lock().unwrap();
        attach_with(&g, 1, 0, ALIVE).unwrap();
        add_usage_locked(&g, 1, 0, UsageKind::Data, 10).unwrap();
        g.procs[0].seqlock.store(7, Ordering::Relaxed); // writer died mid-update
        assert_eq!(container_usage(&g, 0), 10);
        add_usage_locked(&g, 1, 0, UsageKind::Data, 1).unwrap();
        assert_eq!(g.procs[0].seqlock.load(Ordering::Relaxed) % 2, 0);
    }

    #[test]
    fn hostpid_liveness_and_identity() {
        let (_p, r) = region("slots-live");
        let me = unsafe { libc::getpid() };
        attach(&r, me).unwrap();
        set_hostpid(&r, me, 777).unwrap();
        assert_eq!(hostpid(&r, me), Some(777));
        let start = proc_start_time(me).expect("/proc/self/stat");
        assert!(!pid_is_dead(me) && !is_dead(me, start) && !is_dead(me, 0));
        // Same pid, another process (pid reuse): dead.
        assert!(is_dead(me, start + 1));
        assert!(pid_is_dead(0) && pid_is_dead(-5));
        // A zombie child counts as dead; a reaped one too.
        let (pid, _rx) = fork_child(|_| {});
        let child_start = proc_start_time(pid);
        for _ in 0..200 {
            if pid_is_dead(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(pid_is_dead(pid), "zombie is dead");
        wait_child(pid);
        assert!(pid_is_dead(pid) && is_dead(pid, child_start.unwrap_or(0)));
        assert_eq!(proc_stat_state(b"12 (a) b) Z 1 2"), Some(b'Z'));
        assert_eq!(proc_stat_state(b"garbage"), None);
        let line = b"7 (we)ird) S 1 7 7 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(proc_stat_start_time(line), Some(123_456));
        assert_eq!(proc_stat_start_time(b"7 (x) S 1"), None);
    }

    #[test]
    fn a_recycled_pid_does_not_keep_a_dead_slot() {
        let (_p, r) = region("slots-reuse");
        let me = unsafe { libc::getpid() };
        let g = r.lock().unwrap();
        // Pid 1 is alive, but this slot's owner started at another time: a previous owner.
        attach_with(&g, 1, 42, ALIVE).unwrap();
        add_usage_locked(&g, 1, 0, UsageKind::Data, 500).unwrap();
        assert_eq!(container_total(&r, 0), 500);
        let real = proc_start_time(1);
        if real.is_some_and(|t| t != 42) {
            assert!(has_sweepable(&r, me, &is_dead));
            assert_eq!(sweep_locked(&g, me, &is_dead), 1);
            assert_eq!(container_total(&r, 0), 0);
        }
    }

    // ---- the overflow table -------------------------------------------------------------------

    #[test]
    fn overflow_records_count_in_every_sum_and_are_swept() {
        let (_p, r) = region("slots-overflow");
        let g = r.lock().unwrap();
        attach_with(&g, 1, 0, ALIVE).unwrap();
        add_usage_locked(&g, 1, 3, UsageKind::Data, 100).unwrap();
        let a = attach_overflow_locked(&g, 9001, 0).unwrap();
        let b = attach_overflow_locked(&g, 2, 0).unwrap();
        assert_eq!((a, b), (0, 1));
        let t = &r.ext().unwrap().overflow;
        write_record(&t.records[a], 3, true, 40);
        write_record(&t.records[b], 3, true, 2);
        assert_eq!(container_total(&r, 3), 142);
        assert_eq!(container_usage(&g, 3), 100, "the monitor's sum is the slots'");
        assert_eq!(sweep_locked(&g, 1, &|p, _| p >= 9000), 1);
        assert_eq!(container_total(&r, 3), 102);
        assert_eq!(t.num.load(Ordering::Relaxed), 2, "a hole below a used record stays");
        drop(g);
        detach_overflow(&r, b);
        assert_eq!(t.num.load(Ordering::Relaxed), 0);
        assert_eq!(container_total(&r, 3), 100);
        let g = r.lock().unwrap();
        for i in 0..OVERFLOW_RECORDS {
            attach_overflow_locked(&g, 10_000 + i as i32, 0).unwrap();
        }
        assert!(matches!(attach_overflow_locked(&g, 5, 0), Err(SlotError::TableFull)));
    }

    // ---- interruption: SIGKILL after every store of every protocol step ------------------------

    /// Live test processes: (pid, slot they must keep).
    const LIVE: [i32; 3] = [101, 102, 103];

    fn fill(g: &RegionGuard<'_>, pid: i32) {
        add_usage_locked(g, pid, 0, UsageKind::Data, pid as u64 * 1000).unwrap();
        add_usage_locked(g, pid, 3, UsageKind::Context, pid as u64).unwrap();
        add_usage_locked(g, pid, 15, UsageKind::Module, pid as u64 * 7).unwrap();
        let k = find_slot(g.region(), pid).unwrap();
        g.procs[k].hostpid.store(pid + 50_000, Ordering::Relaxed);
        g.procs[k].device_util[3].sm_util.store(pid as u64 % 100, Ordering::Relaxed);
    }

    /// Fresh table: 101, dead 9001, 102, dead 9002, 103 (the dead carry usage too), overflow
    /// records for a live 104 and a dead 9004. Returns each live pid's slot.
    fn setup(g: &RegionGuard<'_>) -> Vec<(i32, usize)> {
        for k in 0..16 {
            free_slot(&g.procs[k]);
        }
        g.proc_num.store(0, Ordering::Relaxed);
        zero_overflow_table(&g.region().ext().unwrap().overflow);
        for pid in [101, 9001, 102, 9002, 103] {
            attach_with(g, pid, 0, ALIVE).unwrap();
            fill(g, pid);
        }
        let t = &g.region().ext().unwrap().overflow;
        for pid in [104, 9004] {
            let i = attach_overflow_locked(g, pid, 0).unwrap();
            write_record(&t.records[i], 0, true, pid as u64);
        }
        LIVE.iter().map(|&p| (p, find_slot(g.region(), p).unwrap())).collect()
    }

    /// After recovery: every live process in its own unchanged slot with exactly its usage, no
    /// slot or record of a dead pid counted, sums exact, `proc_num` tight.
    fn assert_exact(g: &RegionGuard<'_>, home: &[(i32, usize)], what: &str) {
        let n = proc_num(g);
        for &(pid, k) in home {
            let s = &g.procs[k];
            let p = pid as u64;
            assert_eq!(s.pid.load(Ordering::Relaxed), pid, "{what}: pid of slot {k}");
            assert_eq!(s.status.load(Ordering::Relaxed), 1, "{what}: status of {pid}");
            assert_eq!(s.hostpid.load(Ordering::Relaxed), pid + 50_000, "{what}: hostpid of {pid}");
            assert_eq!(s.used[0].data_size.load(Ordering::Relaxed), p * 1000, "{what}: data of {pid}");
            assert_eq!(s.used[0].total.load(Ordering::Relaxed), p * 1000, "{what}: total of {pid}");
            assert_eq!(s.used[3].context_size.load(Ordering::Relaxed), p, "{what}: ctx of {pid}");
            assert_eq!(s.used[15].module_size.load(Ordering::Relaxed), p * 7, "{what}: module of {pid}");
            assert_eq!(s.device_util[3].sm_util.load(Ordering::Relaxed), p % 100, "{what}: util of {pid}");
            assert_eq!(s.seqlock.load(Ordering::Relaxed) % 2, 0, "{what}: seqlock of {pid}");
        }
        let counted: Vec<i32> = (0..n)
            .filter(|&k| g.procs[k].status.load(Ordering::Relaxed) != 0)
            .map(|k| g.procs[k].pid.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counted, LIVE.to_vec(), "{what}: counted slots");
        assert!(n == 0 || !is_free(&g.procs[n - 1]), "{what}: proc_num {n} not tight");
        let sum: u64 = LIVE.iter().map(|&p| p as u64 * 1000).sum();
        assert_eq!(container_usage(g, 0), sum, "{what}: monitor's sum");
        assert_eq!(container_total(g.region(), 0), sum + 104, "{what}: limit check's sum");
        // Nothing in flight and no lease left behind (a dead reserver's went with its slot).
        assert_eq!(checked_total(g.region(), 0), sum + 104, "{what}: checked sum");
        assert_eq!(container_breakdown(g, 3).context, LIVE.iter().map(|&p| p as u64).sum::<u64>(), "{what}: ctx sum");
    }

    /// Runs `step` with a store budget of 0, 1, 2, … until it completes within the budget. After
    /// each kill, `victims` are dead; a survivor (101) sweeps, and the table must be exact.
    fn kill_at_every_store(name: &str, victims: &[i32], step: &dyn Fn(&RegionGuard<'_>)) -> usize {
        let (_p, r) = region(name);
        let dead = |p: i32, _| p >= 9000 || victims.contains(&p);
        let mut budget = 0usize;
        loop {
            let g = r.lock().unwrap();
            let home = setup(&g);
            STORE_BUDGET.with(|b| b.set(Some(budget)));
            step(&g);
            let left = STORE_BUDGET.with(|b| b.replace(None)).unwrap();
            let what = format!("{name}: killed after {budget} stores");
            // Before the repair nothing a live process owns changed, and nothing is counted twice.
            for &(pid, k) in &home {
                assert_eq!(g.procs[k].pid.load(Ordering::Relaxed), pid, "{what}: live slot touched");
            }
            sweep_locked(&g, 101, &dead);
            assert_exact(&g, &home, &what);
            assert_eq!(sweep_locked(&g, 101, &dead), 0, "{what}: second sweep freed something");
            drop(g);
            if left > 0 {
                return budget; // the step completed within the budget: every kill point was tried
            }
            budget += 1;
        }
    }

    #[test]
    fn interrupted_sweep_is_finished_by_the_next() {
        let n = kill_at_every_store("int-sweep", &[], &|g| {
            sweep_locked(g, 102, &|p, _| p >= 9000);
        });
        assert!(n > 200, "only {n} stores: the hook is not reached");
    }

    #[test]
    fn interrupted_attach_leaves_nothing_counted() {
        let n = kill_at_every_store("int-attach", &[200], &|g| {
            attach_with(g, 200, 0, &|p, _| p >= 9000).unwrap();
            // (Once killed, the "process" finds no slot: its later steps do nothing.)
            let _ = add_usage_locked(g, 200, 0, UsageKind::Data, 77);
        });
        assert!(n > 200, "only {n} stores");
    }

    #[test]
    fn interrupted_reattach_leaves_nothing_counted() {
        kill_at_every_store("int-reattach", &[200], &|g| {
            STORE_BUDGET.with(|b| {
                let keep = b.replace(None);
                attach_with(g, 200, 0, ALIVE).unwrap();
                add_usage_locked(g, 200, 0, UsageKind::Data, 5).unwrap();
                b.set(keep);
            });
            attach_with(g, 200, 0, ALIVE).unwrap();
        });
    }

    #[test]
    fn interrupted_detach_and_overflow_steps() {
        kill_at_every_store("int-detach", &[200], &|g| {
            STORE_BUDGET.with(|b| {
                let keep = b.replace(None);
                attach_with(g, 200, 0, ALIVE).unwrap();
                add_usage_locked(g, 200, 0, UsageKind::Data, 5).unwrap();
                b.set(keep);
            });
            let k = find_slot(g.region(), 200).unwrap();
            free_slot(&g.procs[k]);
            shrink_proc_num(g);
        });
        kill_at_every_store("int-overflow", &[300], &|g| {
            let i = attach_overflow_locked(g, 300, 0).unwrap();
            write_record(&g.region().ext().unwrap().overflow.records[i], 0, true, 9);
            free_record(&g.region().ext().unwrap().overflow.records[i]);
        });
    }

    /// A reserving / releasing process killed at any store of its update: only its own slot is
    /// affected, and the sweep discards that slot whole.
    #[test]
    fn interrupted_reserve_and_release() {
        for limit in [0, 1 << 40] {
            kill_at_every_store("int-reserve", &[200], &|g| {
                let r = g.region();
                STORE_BUDGET.with(|b| {
                    let keep = b.replace(None);
                    attach_with(g, 200, 0, ALIVE).unwrap();
                    b.set(keep);
                });
                let l = Ledger::shared(r, 200, true);
                l.reserve(0, 4096, UsageKind::Data, limit).unwrap().commit();
                if limit != 0 {
                    // The first grant gave a lease: this one is taken from it, the release
                    // refills it.
                    l.reserve(0, 8192, UsageKind::Data, limit).unwrap().commit();
                    l.release(0, UsageKind::Data, 8192);
                }
                l.release(0, UsageKind::Data, 4096);
                // A refused reservation (over the limit) retracts.
                let _ = l.reserve(0, u64::MAX / 2, UsageKind::Data, 1 << 40);
            });
        }
    }

    /// A reserver killed while it revokes leases: each lease is either still whole or gone,
    /// nothing else of the live processes changes.
    #[test]
    fn interrupted_revocation_only_takes_leases() {
        kill_at_every_store("int-revoke", &[200], &|g| {
            let r = g.region();
            let k = find_slot(r, LIVE[0]).unwrap();
            STORE_BUDGET.with(|b| {
                let keep = b.replace(None);
                grant_lease(&g.procs[k], 0, 5000);
                attach_with(g, 200, 0, ALIVE).unwrap();
                b.set(keep);
            });
            let held = lease(&g.procs[k], 0).load(Ordering::Relaxed);
            assert!(held == 5000, "lease before the revocation");
            revoke_leases(r, 0, find_slot(r, 200));
            let after = lease(&g.procs[k], 0).load(Ordering::Relaxed);
            assert!(after == 5000 || after == 0, "a lease is whole or gone: {after}");
            // The test's survivor state must not keep the lease (assert_exact wants none).
            STORE_BUDGET.with(|b| {
                let keep = b.replace(None);
                drop_lease(&g.procs[k], 0);
                b.set(keep);
            });
        });
    }

    #[test]
    fn one_liveness_scan_per_period_for_the_container() {
        let (_p, r) = region("slots-scan-turn");
        const P: u64 = 250_000_000;
        let t0 = 5_000_000_000u64;
        assert!(take_scan_turn(&r, t0, P), "first tick scans");
        assert!(!take_scan_turn(&r, t0 + 1, P), "another process right after: not its turn");
        assert!(!take_scan_turn(&r, t0 + P - 1, P));
        assert!(take_scan_turn(&r, t0 + P, P), "due again after a period");
        assert!(!take_scan_turn(&r, t0 + P + 10, P));
        // Garbage far in the future (a foreign writer, another boot's clock) is taken over.
        r.ext().unwrap().reserved_hdr[SCAN_DUE].store(u64::MAX, Ordering::Relaxed);
        assert!(take_scan_turn(&r, t0 + 2 * P, P));
        assert!(!take_scan_turn(&r, t0 + 2 * P + 1, P));
        // The host sample turn is a word of its own.
        assert!(take_host_sample_turn(&r, t0 + 2 * P + 1, P), "independent of the scan turn");
        assert!(!take_host_sample_turn(&r, t0 + 2 * P + 2, P));
        assert!(take_host_sample_turn(&r, t0 + 3 * P + 1, P));
        // Handed back: the next process takes it at once.
        return_host_sample_turn(&r, t0 + 3 * P + 1, P);
        assert!(take_host_sample_turn(&r, t0 + 3 * P + 2, P));
        assert!(!take_host_sample_turn(&r, t0 + 3 * P + 3, P));
    }

    #[test]
    fn checked_sum_counts_leases_and_pending_but_views_do_not() {
        let (_p, r) = region("slots-lease-sum");
        let g = r.lock().unwrap();
        for (k, pid) in [(0, 101), (1, 102)] {
            claim_slot(&g, k, pid, 0);
        }
        add_usage_locked(&g, 101, 2, UsageKind::Data, 1000).unwrap();
        grant_lease(&g.procs[0], 2, 300);
        set_pending(&g.procs[1], 2, 40);
        set_pending(&g.procs[0], 5, 7); // another device's reservation: not ours
        assert_eq!(container_total(&r, 2), 1000, "views and the monitor: totals only");
        assert_eq!(checked_sum(&r, 2), CheckedSum { sum: 1340, live: 2, pending: 40 });
        assert_eq!(checked_total(&r, 5), 7);
        // Revocation takes other slots' leases, never our own or another device's.
        grant_lease(&g.procs[1], 2, 11);
        grant_lease(&g.procs[1], 3, 13);
        assert_eq!(revoke_leases(&r, 2, Some(1)), 300);
        assert_eq!(lease(&g.procs[1], 2).load(Ordering::Relaxed), 11);
        assert_eq!(lease(&g.procs[1], 3).load(Ordering::Relaxed), 13);
        assert_eq!(checked_total(&r, 2), 1000 + 40 + 11);
        // The owner's compare-and-swap fails once the lease was taken.
        assert!(!take_from_lease(&g.procs[0], 2, 300, 100));
        assert!(take_from_lease(&g.procs[1], 2, 11, 10));
        assert!(refill_lease(&g.procs[1], 2, 1, 6));
        assert!(!refill_lease(&g.procs[1], 2, 1, 9));
        // A freed slot takes its lease with it.
        let k = find_slot(&r, 102).unwrap();
        free_slot(&g.procs[k]);
        assert_eq!(checked_total(&r, 2), 1000);
        assert_eq!(lease(&g.procs[k], 2).load(Ordering::Relaxed), 0);
    }
}
