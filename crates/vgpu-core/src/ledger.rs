//! Memory accounting: reserve-before-allocate against the container limit, and the per-process
//! allocation table (docs/hami-contract.md §6, docs/known-failures.md #1/#2).
//!
//! The shim's allocation hook does:
//! ```text
//! let res = ledger.reserve(dev, bytes, UsageKind::Data, limit)?;   // Err → CUDA_ERROR_OUT_OF_MEMORY
//! match real_alloc() { Ok(ptr) => { table.insert(ptr, rec); res.commit() }, Err(e) => /* res drops: rolled back */ }
//! ```
//! and the free hook always calls the real free, then uncounts what `table.remove(ptr)` returns
//! (an unknown pointer uncounts nothing), against the recorded device.
//!
//! Seats ([`Seat`]): our slot in the region (normal), a record of the region's overflow table
//! (the 1024 slots are full: still shared by every check and view), or process-local counters
//! (no region, or both tables full).
//!
//! Protocol (docs/design.md, "Memory ledger"): reserve publishes into our own seat, fences and
//! sums the container (no lock, no system call). A reservation that would go over takes other
//! processes' leases back and checks again while only reservations in flight stand in its way,
//! still without a lock, a system call or a sleep; at most once per [`REFUSAL_SWEEP_EVERY`] it
//! also sweeps dead slots (a liveness probe per slot, the container lock only when one is dead).
//! `release` subtracts from our own seat and never waits on another process.

use crate::idhash::IdMap;
use crate::lock::LockError;
use crate::region::{MAX_DEVICES, UsageKind};
use crate::regionfile::Region;
use crate::slots::{self, SlotError};
use crate::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverLimit {
    pub dev: usize,
    pub requested: u64,
    /// Container usage at the refusal (after sweeping dead slots).
    pub usage: u64,
    pub limit: u64,
}

#[derive(Debug)]
pub enum ReserveError {
    OverLimit(OverLimit),
    Lock(LockError),
    BadDevice(usize),
}

impl std::fmt::Display for ReserveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReserveError::OverLimit(o) => write!(
                f,
                "device {} over its memory limit: {} used + {} requested > {} limit",
                o.dev, o.usage, o.requested, o.limit
            ),
            ReserveError::Lock(e) => write!(f, "{e}; allocation refused"),
            ReserveError::BadDevice(d) => write!(f, "device index {d} out of range"),
        }
    }
}

impl std::error::Error for ReserveError {}

/// Process-local counters: total + the three categories per device.
struct LocalUsage {
    m: Mutex<()>,
    used: [[AtomicU64; 4]; MAX_DEVICES],
}

impl LocalUsage {
    fn new() -> Self {
        LocalUsage { m: Mutex::new(()), used: Default::default() }
    }
    fn total(&self, dev: usize) -> u64 {
        self.used[dev][0].load(Ordering::Relaxed)
    }
    fn apply(&self, dev: usize, kind: UsageKind, add: bool, bytes: u64) {
        for i in [0, 1 + kind as usize] {
            let _ = self.used[dev][i].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(if add { v.saturating_add(bytes) } else { v.saturating_sub(bytes) })
            });
        }
    }
}

/// Where this process's usage lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seat {
    /// Our slot `procs[k]` (normal).
    Slot(usize),
    /// Record `i` of the overflow table (the 1024 slots were full).
    Overflow(usize),
    /// Process-local counters (no region, or slots and overflow table both full).
    Local,
}

const SEAT_LOCAL: usize = usize::MAX;
const OVERFLOW_BIT: usize = 1 << (usize::BITS - 2);

fn encode(s: Seat) -> usize {
    match s {
        Seat::Slot(k) => k,
        Seat::Overflow(i) => OVERFLOW_BIT | i,
        Seat::Local => SEAT_LOCAL,
    }
}

fn decode(v: usize) -> Seat {
    if v == SEAT_LOCAL {
        Seat::Local
    } else if v & OVERFLOW_BIT != 0 {
        Seat::Overflow(v & !OVERFLOW_BIT)
    } else {
        Seat::Slot(v)
    }
}

/// Bound on the writer mutex at exit (a holder finishes a write in microseconds; one that never
/// will is this very thread, interrupted by a signal handler that calls `exit`).
const DETACH_WRITER_WAIT: Duration = Duration::from_millis(20);

/// What the periodic seat check did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reseat {
    /// The seat is ours (or there is none to keep).
    Kept,
    /// Slot `slot` had been taken by another writer; `attached`: a new slot was claimed.
    Taken { slot: usize, attached: bool },
}

/// A check that found the container over its limit: the usage it saw (without the bytes asked
/// for) and how much of it were other processes' reservations in flight.
#[derive(Clone, Copy, Debug)]
struct Over {
    usage: u64,
    in_flight: u64,
}

impl Over {
    /// Over with nothing in flight (or nothing that could have changed the answer).
    fn settled(usage: u64) -> Over {
        Over { usage, in_flight: 0 }
    }
}

/// A refusal that only other processes' reservations in flight caused is checked again, up to
/// this many times, with a short spin between (a check takes well under a microsecond; one in
/// flight for longer belongs to a descheduled process, and counts).
const IN_FLIGHT_RECHECKS: u32 = 8;
/// Dead slots are swept on the refusal path at most once per this period per process (the
/// housekeeping thread sweeps the container every 250 ms besides): each sweep costs a liveness
/// probe (`kill`, a `/proc` read) per slot.
const REFUSAL_SWEEP_EVERY: Duration = Duration::from_millis(100);
/// Bound on the container lock for a sweep on the refusal path.
const REFUSAL_SWEEP_LOCK: Duration = Duration::from_millis(20);

/// Largest lease a checked publication asks for (docs/design.md "Memory ledger", leases).
pub const LEASE_MAX: u64 = 64 << 20;
/// Smaller grants are not worth a lease.
const LEASE_MIN: u64 = 4096;
/// A grant takes at most this fraction of the headroom per live slot, so the leases of all
/// processes together keep three quarters of the headroom unleased.
const LEASE_SHARE: u64 = 4;

/// How long a change waits for a measurement of the process's own memory to end, and a
/// measurement for the changes in flight to end (each bounded: a thread stopped in the middle of
/// either never holds the other up for longer).
const QUIET_WAIT: Duration = Duration::from_secs(2);

/// This process's device-memory changes in flight (a reservation until it is committed or rolled
/// back, a free from the driver's call until the ledger's), and the measurements that want none
/// (a new context's cost: the driver's figure of this process less what the ledger counts for
/// it, exact only while neither moves). One pair of counters for all devices: measurements are
/// rare (once per context).
#[derive(Default)]
struct Quiet {
    measuring: AtomicU32,
    /// Changes in flight (the low bits, [`IN_FLIGHT`]) and changes begun, wrapping (the high
    /// bits, [`BEGUN`] each): one word, so a reader can tell a window without any change.
    changing: AtomicU32,
}

/// The in-flight count of [`Quiet::changing`].
const IN_FLIGHT: u32 = 0xffff;
/// One change begun, in [`Quiet::changing`].
const BEGUN: u32 = 1 << 16;

/// A reading of this process's memory changes ([`Ledger::change_mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeMark(u32);

impl ChangeMark {
    /// No change was in flight at either mark and none began between them: in that window the
    /// driver holds exactly what the ledger counts for this process's own allocations (a
    /// reservation is counted before the driver's call, a free after it).
    pub fn settled_until(self, later: ChangeMark) -> bool {
        self == later && self.0 & IN_FLIGHT == 0
    }
}

/// A change of this process's device memory in flight ([`Ledger::change`]); ends when dropped.
#[must_use = "the change ends when this guard is dropped"]
pub struct Change<'l> {
    quiet: &'l Quiet,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        self.quiet.changing.fetch_sub(1, Ordering::Release);
    }
}

/// Sleeps in short steps until `done()` or `bound` passed; false on the timeout.
fn wait_until(bound: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    true
}

/// What this process's lease on a device was granted under (process-local, read and written
/// under the region's writer mutex). The lease word itself lives in our slot.
#[derive(Default)]
struct LeaseTerms {
    /// The limit the grant was checked against: a different limit now → no fast path.
    limit: AtomicU64,
    /// Most the lease may hold again through frees (0: no refills until the next grant).
    cap: AtomicU64,
}

pub struct Ledger<'r> {
    region: Option<&'r Region>,
    /// Cached pid (a forked child builds a new ledger): nothing here calls getpid.
    pid: AtomicI32,
    seat: AtomicUsize,
    local: LocalUsage,
    leases: [LeaseTerms; MAX_DEVICES],
    quiet: Quiet,
    /// Origin of `next_sweep_us` (no system call to read: the vDSO clock).
    born: Instant,
    /// When the refusal path may sweep dead slots again, µs after `born`.
    next_sweep_us: AtomicU64,
}

/// A reservation: the bytes are already counted. [`commit`](Reservation::commit) keeps them;
/// dropping it uncommitted rolls them back (the real allocation failed).
#[must_use = "dropping a Reservation rolls it back"]
pub struct Reservation<'l, 'r> {
    ledger: &'l Ledger<'r>,
    dev: usize,
    kind: UsageKind,
    bytes: u64,
    armed: bool,
    /// In flight until committed or rolled back (none inside [`Ledger::quiesced`]).
    _change: Option<Change<'l>>,
}

impl Reservation<'_, '_> {
    pub fn commit(mut self) {
        self.armed = false;
    }
    pub fn dev(&self) -> usize {
        self.dev
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation<'_, '_> {
    fn drop(&mut self) {
        if self.armed {
            self.ledger.release(self.dev, self.kind, self.bytes);
        }
    }
}

impl<'r> Ledger<'r> {
    /// Region-backed; `has_slot` = `slots::attach` succeeded for `pid` (else local counting,
    /// still checked against the container). See [`attach`](Self::attach) for the full path.
    pub fn shared(region: &'r Region, pid: i32, has_slot: bool) -> Self {
        let seat = match (has_slot, slots::find_slot(region, pid)) {
            (true, Some(k)) => Seat::Slot(k),
            _ => Seat::Local,
        };
        Ledger::seated(Some(region), pid, seat)
    }

    /// Attaches `pid` to the region: a slot, else (table full) an overflow record, else local
    /// counting. Returns the ledger and the error that kept it from a slot, if any.
    pub fn attach(region: &'r Region, pid: i32) -> (Self, Option<SlotError>) {
        let start = slots::proc_start_time(pid).unwrap_or(0);
        let (seat, err) = match region.lock() {
            Ok(g) => match slots::attach_with(&g, pid, start, &slots::is_dead) {
                Ok(a) => (Seat::Slot(a.index), None),
                Err(SlotError::TableFull) => match slots::attach_overflow_locked(&g, pid, start) {
                    Ok(i) => (Seat::Overflow(i), Some(SlotError::TableFull)),
                    Err(e) => (Seat::Local, Some(e)),
                },
                Err(e) => (Seat::Local, Some(e)),
            },
            Err(e) => (Seat::Local, Some(SlotError::Lock(e))),
        };
        (Ledger::seated(Some(region), pid, seat), err)
    }

    /// Process-local mode (no usable region).
    pub fn local() -> Ledger<'static> {
        Ledger::seated(None, 0, Seat::Local)
    }

    fn seated(region: Option<&'r Region>, pid: i32, seat: Seat) -> Self {
        Ledger {
            region,
            pid: AtomicI32::new(pid),
            seat: AtomicUsize::new(encode(seat)),
            local: LocalUsage::new(),
            leases: Default::default(),
            quiet: Quiet::default(),
            born: Instant::now(),
            next_sweep_us: AtomicU64::new(0),
        }
    }

    pub fn region(&self) -> Option<&'r Region> {
        self.region
    }

    pub fn seat(&self) -> Seat {
        decode(self.seat.load(Ordering::Acquire))
    }

    pub fn pid(&self) -> i32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// Whether this process has a slot the monitor sees.
    pub fn has_slot(&self) -> bool {
        matches!(self.seat(), Seat::Slot(_))
    }

    /// Gives the slot or overflow record back (process exit). The seat is left before the slot is
    /// freed, so the periodic seat check ([`keep_seat`](Self::keep_seat)) never takes the freed
    /// slot for one a foreign writer took and attaches again at exit.
    pub fn detach(&self) -> bool {
        let Some(r) = self.region else { return false };
        // Under the writer mutex: a thread of ours that read the seat before is done writing, and
        // one that reads it after sees Local. Bounded: `exit` called from a signal handler that
        // interrupted this very thread inside a write must not hang on it.
        let seat = {
            let _w = r.writer.try_lock_for(DETACH_WRITER_WAIT);
            decode(self.seat.swap(SEAT_LOCAL, Ordering::AcqRel))
        };
        match seat {
            Seat::Slot(_) => slots::detach(r, self.pid()),
            Seat::Overflow(i) => {
                slots::detach_overflow(r, i);
                true
            }
            Seat::Local => false,
        }
    }

    /// The periodic check that our slot still carries our pid. A slot another writer freed (a
    /// sweep that judged us dead) is attached again: [`Reseat::Taken`] (the usage counted in it
    /// is lost to the region), else [`Reseat::Kept`].
    pub fn keep_seat(&self) -> Reseat {
        match self.seat() {
            Seat::Slot(k) => self.reseat_if_lost(k),
            _ => Reseat::Kept,
        }
    }

    /// [`keep_seat`](Self::keep_seat) for slot `seen`, the seat it read. The decision is taken
    /// again under the region lock: a detach (exit) between that read and the slot check leaves
    /// the seat first and frees the slot under the lock, so it is seen here and nothing is
    /// attached.
    fn reseat_if_lost(&self, seen: usize) -> Reseat {
        let Some(r) = self.region else { return Reseat::Kept };
        let pid = self.pid();
        let ours = |k: usize| {
            let s = &r.shared().procs[k];
            s.pid.load(Ordering::Relaxed) == pid && s.status.load(Ordering::Relaxed) != 0
        };
        if ours(seen) {
            return Reseat::Kept;
        }
        let Ok(g) = r.lock() else { return Reseat::Kept };
        // The writer mutex too: no thread of ours writes the old slot once the seat moves.
        let _w = r.writer.lock();
        if self.seat() != Seat::Slot(seen) || ours(seen) {
            return Reseat::Kept;
        }
        let now = match slots::attach_locked(&g, pid) {
            Ok(a) => Seat::Slot(a.index),
            Err(_) => Seat::Local,
        };
        // Only over the seat that was read: a detach that began meanwhile keeps its Local.
        let _ = self.seat.compare_exchange(encode(Seat::Slot(seen)), encode(now), Ordering::AcqRel, Ordering::Acquire);
        Reseat::Taken { slot: seen, attached: now != Seat::Local }
    }

    /// Adds (`add`) or subtracts `bytes` in our own seat. Returns whether it landed in the region.
    fn write_own(&self, seat: Seat, dev: usize, kind: UsageKind, add: bool, bytes: u64) {
        match (seat, self.region) {
            (Seat::Slot(k), Some(r)) => slots::write_usage(&r.shared().procs[k], dev, kind, add, bytes),
            (Seat::Overflow(i), Some(r)) => {
                if let Some(e) = r.ext() {
                    slots::write_record(&e.overflow.records[i], dev, add, bytes)
                }
            }
            _ => self.local.apply(dev, kind, add, bytes),
        }
    }

    /// Container usage of `dev` as every check sees it: all live slots and overflow records, plus
    /// our local counters when we have neither.
    fn container(&self, seat: Seat, dev: usize) -> u64 {
        match self.region {
            Some(r) => {
                let mine = if seat == Seat::Local { self.local.total(dev) } else { 0 };
                slots::container_total(r, dev).saturating_add(mine)
            }
            None => self.local.total(dev),
        }
    }

    /// Publish-then-check under our process's writer mutex (threads of one process take turns;
    /// other processes never wait). With a slot, see [`publish_in_slot`](Self::publish_in_slot).
    /// Overflow and local seats publish into their totals directly and take them back when
    /// over. `grant`: a slot may ask for a lease. `Ok(())` or what the check saw.
    fn try_publish(
        &self,
        seat: Seat,
        dev: usize,
        bytes: u64,
        kind: UsageKind,
        limit: u64,
        grant: bool,
    ) -> Result<(), Over> {
        let region = match (seat, self.region) {
            (Seat::Local, _) | (_, None) => None,
            (_, Some(r)) => Some(r),
        };
        let w = region.map(|r| r.writer.lock());
        let l = if region.is_none() { Some(self.local.m.lock()) } else { None };
        if region.is_some() && self.seat() != seat {
            // Detached (exit) or re-seated since the caller read the seat: its slot may belong to
            // someone else by now. Again with the seat as it is.
            drop((l, w));
            return self.try_publish(self.seat(), dev, bytes, kind, limit, grant);
        }
        if limit == 0 {
            self.write_own(seat, dev, kind, true, bytes);
            return Ok(());
        }
        if bytes > limit {
            return Err(Over::settled(self.container(seat, dev)));
        }
        if let (Seat::Slot(k), Some(r)) = (seat, region) {
            return self.publish_in_slot(r, k, dev, bytes, kind, limit, grant);
        }
        self.write_own(seat, dev, kind, true, bytes);
        fence(Ordering::SeqCst);
        let c = match (region, self.region) {
            (Some(r), _) => slots::checked_sum(r, dev),
            (None, Some(r)) => {
                let c = slots::checked_sum(r, dev);
                slots::CheckedSum { sum: c.sum.saturating_add(self.local.total(dev)), ..c }
            }
            (None, None) => slots::CheckedSum { sum: self.local.total(dev), live: 1, pending: 0 },
        };
        if c.sum > limit {
            self.write_own(seat, dev, kind, false, bytes);
            return Err(Over { usage: c.sum.saturating_sub(bytes), in_flight: c.pending });
        }
        Ok(())
    }

    /// The slot protocol (caller holds the writer mutex; `0 < bytes <= limit`):
    /// - **Lease.** Enough of our lease, granted under this same limit: add `bytes` to our
    ///   `total`, then take them out of the lease. No other slot is read. If a revoker took
    ///   the lease meanwhile, the bytes now in `total` are checked as a publication.
    /// - **Checked publication.** Publish `bytes` (plus, with `grant`, a new lease's worth) as
    ///   our reservation in flight, give our old lease back, fence, sum the container with
    ///   everyone's reservations in flight and leases. Within `limit`: add `bytes` to `total`
    ///   (seqlock), grant the lease out of what was published, and only then clear the
    ///   in-flight word, so no checker ever misses them. Over: clear it.
    #[allow(clippy::too_many_arguments)]
    fn publish_in_slot(
        &self,
        r: &Region,
        k: usize,
        dev: usize,
        bytes: u64,
        kind: UsageKind,
        limit: u64,
        grant: bool,
    ) -> Result<(), Over> {
        let s = &r.shared().procs[k];
        let terms = &self.leases[dev];
        let held = slots::lease(s, dev).load(Ordering::Acquire);
        if held >= bytes && terms.limit.load(Ordering::Relaxed) == limit {
            slots::write_usage(s, dev, kind, true, bytes);
            if slots::take_from_lease(s, dev, held, bytes) {
                return Ok(());
            }
            // Revoked meanwhile: the bytes are in our total, unchecked. Check them as a
            // publication (Dekker, as below), and stop refilling until the next grant.
            terms.cap.store(0, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            let c = slots::checked_sum(r, dev);
            if c.sum <= limit {
                return Ok(());
            }
            slots::write_usage(s, dev, kind, false, bytes);
            return Err(Over { usage: c.sum.saturating_sub(bytes), in_flight: c.pending });
        }
        let ask = if grant && bytes.saturating_add(LEASE_MAX) <= slots::PENDING_MAX { LEASE_MAX } else { 0 };
        slots::set_pending(s, dev, bytes + ask);
        // Our old lease is part of what we ask for again (the in-flight word covers us now).
        slots::drop_lease(s, dev);
        // Dekker: our publication is ordered before reading everyone else's; theirs before
        // their read of ours. Of two concurrent reservers at least one sees the other.
        fence(Ordering::SeqCst);
        let c = slots::checked_sum(r, dev);
        let without_lease = c.sum.saturating_sub(ask);
        if without_lease > limit {
            slots::set_pending(s, dev, 0);
            terms.cap.store(0, Ordering::Relaxed);
            // Our own publication is in the pending sum: the rest is other processes'.
            let in_flight = c.pending.saturating_sub(bytes + ask);
            return Err(Over { usage: without_lease.saturating_sub(bytes), in_flight });
        }
        let share = (limit - without_lease) / (LEASE_SHARE * c.live.max(1) as u64);
        let lease = if share.min(ask) >= LEASE_MIN { share.min(ask) } else { 0 };
        slots::write_usage(s, dev, kind, true, bytes);
        if lease > 0 {
            slots::grant_lease(s, dev, lease);
        }
        terms.limit.store(limit, Ordering::Relaxed);
        terms.cap.store(lease, Ordering::Relaxed);
        slots::set_pending(s, dev, 0);
        Ok(())
    }

    /// A change of this process's device memory begins (the driver's call of a free, then the
    /// ledger's): waits (bounded) while a measurement of the process's own memory runs, and
    /// keeps the next one from starting until the returned guard is dropped.
    pub fn change(&self) -> Change<'_> {
        let q = &self.quiet;
        loop {
            // Dekker with `quiesced`: our count is visible before we read theirs, theirs before
            // they read ours, so one of the two always sees the other.
            q.changing.fetch_add(BEGUN | 1, Ordering::SeqCst);
            if q.measuring.load(Ordering::SeqCst) == 0 {
                return Change { quiet: q };
            }
            q.changing.fetch_sub(1, Ordering::Release);
            if !wait_until(QUIET_WAIT, || q.measuring.load(Ordering::Acquire) == 0) {
                // A measurement stuck for long (its thread stopped): go ahead, it will be off.
                q.changing.fetch_add(BEGUN | 1, Ordering::SeqCst);
                return Change { quiet: q };
            }
        }
    }

    /// Runs `f` while no change of this process's device memory is in flight ([`change`],
    /// every reservation until committed or rolled back): new ones wait until `f` returns, the
    /// ones in flight are waited for (bounded; `f` gets false if some were still in flight at
    /// the bound, its measurement may then be off by them). Inside `f`, reserve with
    /// [`reserve_quiesced`](Self::reserve_quiesced) only. For measuring what the driver holds
    /// for this process beyond the ledger (a new context's cost) without an allocation or free
    /// half done on either side.
    pub fn quiesced<R>(&self, f: impl FnOnce(bool) -> R) -> R {
        /// Ends the measurement however `f` returns.
        struct Measuring<'q>(&'q AtomicU32);
        impl Drop for Measuring<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Release);
            }
        }
        let q = &self.quiet;
        q.measuring.fetch_add(1, Ordering::SeqCst);
        let _m = Measuring(&q.measuring);
        f(wait_until(QUIET_WAIT, || q.changing.load(Ordering::SeqCst) & IN_FLIGHT == 0))
    }

    /// Where this process's memory changes stand now: two marks around a reading of the driver
    /// tell whether the ledger and the driver could disagree in it
    /// ([`ChangeMark::settled_until`]). Never waits, unlike [`quiesced`](Self::quiesced).
    pub fn change_mark(&self) -> ChangeMark {
        ChangeMark(self.quiet.changing.load(Ordering::SeqCst))
    }

    /// Counts `bytes` on `dev` if the container stays within `limit` (0 = none; read live by the
    /// caller). Fast path: no lock, no system call. Over the limit: see `reserve_slow`. The
    /// reservation is a change in flight ([`change`](Self::change)) until committed or rolled back.
    pub fn reserve<'l>(
        &'l self,
        dev: usize,
        bytes: u64,
        kind: UsageKind,
        limit: u64,
    ) -> Result<Reservation<'l, 'r>, ReserveError> {
        if dev >= MAX_DEVICES {
            return Err(ReserveError::BadDevice(dev));
        }
        let change = self.change();
        let mut r = self.reserve_inner(dev, bytes, kind, limit)?;
        r._change = Some(change);
        Ok(r)
    }

    /// [`reserve`](Self::reserve) inside [`quiesced`](Self::quiesced) (which it would wait for).
    pub fn reserve_quiesced<'l>(
        &'l self,
        dev: usize,
        bytes: u64,
        kind: UsageKind,
        limit: u64,
    ) -> Result<Reservation<'l, 'r>, ReserveError> {
        if dev >= MAX_DEVICES {
            return Err(ReserveError::BadDevice(dev));
        }
        self.reserve_inner(dev, bytes, kind, limit)
    }

    fn reserved<'l>(&'l self, dev: usize, kind: UsageKind, bytes: u64) -> Reservation<'l, 'r> {
        Reservation { ledger: self, dev, kind, bytes, armed: true, _change: None }
    }

    fn reserve_inner<'l>(
        &'l self,
        dev: usize,
        bytes: u64,
        kind: UsageKind,
        limit: u64,
    ) -> Result<Reservation<'l, 'r>, ReserveError> {
        let seat = self.seat();
        let over = match self.try_publish(seat, dev, bytes, kind, limit, true) {
            Ok(()) => return Ok(self.reserved(dev, kind, bytes)),
            Err(o) => o,
        };
        let Some(region) = self.region else {
            return Err(ReserveError::OverLimit(OverLimit { dev, requested: bytes, usage: over.usage, limit }));
        };
        self.reserve_slow(region, seat, dev, bytes, kind, limit, over)
    }

    /// Over the limit, before refusing: (1) other processes' leases are taken back; (2) a
    /// refusal that only other processes' reservations in flight caused is checked again a few
    /// times (they commit or retract within a check); (3) at most once per
    /// [`REFUSAL_SWEEP_EVERY`], and only if a lock-free scan finds one, dead slots are swept
    /// under the container lock. No sleep; no system call except that bounded sweep.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn reserve_slow<'l>(
        &'l self,
        region: &'r Region,
        seat: Seat,
        dev: usize,
        bytes: u64,
        kind: UsageKind,
        limit: u64,
        first: Over,
    ) -> Result<Reservation<'l, 'r>, ReserveError> {
        let own = match seat {
            Seat::Slot(k) => Some(k),
            _ => None,
        };
        // A revocation is one swap per lease, safe against its owner at any time, so a stopped
        // lock holder cannot keep a fitting allocation from succeeding.
        let revoked = slots::revoke_leases(region, dev, own) > 0;
        // Would it fit without the others' reservations in flight? Then it is checked again.
        let contended = |o: &Over| o.usage.saturating_sub(o.in_flight).saturating_add(bytes) <= limit;
        let mut over = first;
        let mut n = 0;
        while (n == 0 && revoked) || (contended(&over) && n < IN_FLIGHT_RECHECKS) {
            for _ in 0..(16u32 << n.min(4)) {
                std::hint::spin_loop();
            }
            match self.try_publish(seat, dev, bytes, kind, limit, false) {
                Ok(()) => return Ok(self.reserved(dev, kind, bytes)),
                Err(o) => over = o,
            }
            n += 1;
        }
        if self.sweep_due() && slots::has_sweepable(region, self.pid(), &slots::is_dead) {
            if let Ok(g) = region.lock_timeout(REFUSAL_SWEEP_LOCK) {
                slots::sweep_locked(&g, self.pid(), &slots::is_dead);
            }
            match self.try_publish(seat, dev, bytes, kind, limit, false) {
                Ok(()) => return Ok(self.reserved(dev, kind, bytes)),
                Err(o) => over = o,
            }
        }
        Err(ReserveError::OverLimit(OverLimit { dev, requested: bytes, usage: over.usage, limit }))
    }

    /// The refusal path may sweep now (at most once per [`REFUSAL_SWEEP_EVERY`] per process).
    fn sweep_due(&self) -> bool {
        let now = self.born.elapsed().as_micros() as u64;
        let due = self.next_sweep_us.load(Ordering::Relaxed);
        now >= due
            && self
                .next_sweep_us
                .compare_exchange(
                    due,
                    now + REFUSAL_SWEEP_EVERY.as_micros() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Counts `bytes` without a limit check: memory the driver already holds (reconciled
    /// driver-held bytes, a graph pool that grew, a pitch wider than estimated). It may take the
    /// container over its limit, so every lease on the device (ours too) is revoked: the next
    /// allocation of every process is checked against the new total.
    pub fn force(&self, dev: usize, kind: UsageKind, bytes: u64) {
        if dev >= MAX_DEVICES || bytes == 0 {
            return;
        }
        if let Ok(r) = self.reserve(dev, bytes, kind, 0) {
            r.commit();
        }
        self.revoke_leases(dev);
    }

    /// Revokes every lease on `dev`, ours included: the container was seen at or over its limit
    /// (a view, housekeeping) or usage was counted unchecked. Cheap when there are none.
    pub fn revoke_leases(&self, dev: usize) {
        if let (Some(r), true) = (self.region, dev < MAX_DEVICES) {
            slots::revoke_leases(r, dev, None);
            self.leases[dev].cap.store(0, Ordering::Relaxed);
        }
    }

    /// Uncounts `bytes` (saturating) in our own seat. Never takes a lock other than our process's
    /// writer mutex; never fails.
    pub fn release(&self, dev: usize, kind: UsageKind, bytes: u64) {
        if dev >= MAX_DEVICES {
            return;
        }
        let w = self.region.map(|r| r.writer.lock());
        // Read under the writer mutex: `detach` leaves the seat under it, so a slot it freed is
        // never written again.
        let seat = self.seat();
        match (seat, self.region) {
            (Seat::Local, _) | (_, None) => {
                drop(w);
                let _l = self.local.m.lock();
                self.local.apply(dev, kind, false, bytes);
            }
            (_, Some(r)) => {
                if let Seat::Slot(k) = seat {
                    self.refill_lease(&r.shared().procs[k], dev, bytes);
                }
                self.write_own(seat, dev, kind, false, bytes);
            }
        }
    }

    /// Freeing: moves what leaves our total back into our lease, up to what the last grant gave
    /// (lease first, then the total shrinks: the bytes stay counted throughout). Not after a
    /// revocation: the lease is then empty and stays so until the next checked grant.
    fn refill_lease(&self, s: &crate::region::ProcSlot, dev: usize, bytes: u64) {
        let cap = self.leases[dev].cap.load(Ordering::Relaxed);
        let held = slots::lease(s, dev).load(Ordering::Acquire);
        if cap == 0 || held == 0 || held >= cap {
            return;
        }
        let leaving = bytes.min(s.used[dev].total.load(Ordering::Relaxed));
        let new = held.saturating_add(leaving).min(cap);
        if new > held && !slots::refill_lease(s, dev, held, new) {
            self.leases[dev].cap.store(0, Ordering::Relaxed);
        }
    }

    /// Usage the limit is checked against: the container's (region) or this process's (local).
    pub fn usage(&self, dev: usize) -> u64 {
        if dev >= MAX_DEVICES {
            return 0;
        }
        self.container(self.seat(), dev)
    }

    /// This process's own usage of `dev`.
    pub fn own_usage(&self, dev: usize) -> u64 {
        if dev >= MAX_DEVICES {
            return 0;
        }
        match (self.seat(), self.region) {
            (Seat::Slot(k), Some(r)) => r.shared().procs[k].used[dev].total.load(Ordering::Relaxed),
            (Seat::Overflow(i), Some(r)) => {
                r.ext().map_or(0, |e| e.overflow.records[i].total[dev].load(Ordering::Relaxed))
            }
            _ => self.local.total(dev),
        }
    }

    /// This process's own usage of `dev` per kind, `[context, module, data]`. An overflow seat
    /// keeps totals only: all of it reads as data there.
    pub fn own_usage_by_kind(&self, dev: usize) -> [u64; 3] {
        if dev >= MAX_DEVICES {
            return [0; 3];
        }
        let kinds = [UsageKind::Context, UsageKind::Module, UsageKind::Data];
        match (self.seat(), self.region) {
            (Seat::Slot(k), Some(r)) => {
                let u = &r.shared().procs[k].used[dev];
                kinds.map(|kind| u.category(kind).load(Ordering::Relaxed))
            }
            (Seat::Overflow(_), Some(_)) => [0, 0, self.own_usage(dev)],
            _ => kinds.map(|kind| self.local.used[dev][1 + kind as usize].load(Ordering::Relaxed)),
        }
    }
}

/// What one allocation counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRecord {
    pub dev: usize,
    pub bytes: u64,
    pub kind: UsageKind,
    /// The context whose teardown frees this memory (0: not context-owned, e.g. VMM handles).
    pub owner: u64,
}

/// Per-process table of counted allocations (device pointer or VMM handle → record).
/// A forked child abandons the parent's table with the rest of the process state (it owns none
/// of the parent's allocations; docs/design.md "Fork").
#[derive(Default)]
pub struct AllocTable {
    map: Mutex<Option<IdMap<u64, AllocRecord>>>,
}

impl AllocTable {
    pub const fn new() -> Self {
        AllocTable { map: Mutex::new(None) }
    }

    /// Records `key`. Returns the previous record for the same key (the driver reused an address
    /// we still thought live, i.e. a missed free): the caller should uncount it.
    pub fn insert(&self, key: u64, rec: AllocRecord) -> Option<AllocRecord> {
        self.map.lock().get_or_insert_with(IdMap::default).insert(key, rec)
    }

    /// Forgets `key` and returns what it counted; `None` for an unknown key (uncount nothing).
    pub fn remove(&self, key: u64) -> Option<AllocRecord> {
        self.map.lock().as_mut()?.remove(&key)
    }

    pub fn get(&self, key: u64) -> Option<AllocRecord> {
        self.map.lock().as_ref()?.get(&key).copied()
    }

    pub fn len(&self) -> usize {
        self.map.lock().as_ref().map_or(0, IdMap::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Σ `f(record)` over the records on `dev` (the truth reconciliation's rounding allowance).
    pub fn sum_on(&self, dev: usize, f: impl Fn(&AllocRecord) -> u64) -> u64 {
        self.map
            .lock()
            .as_ref()
            .map_or(0, |m| m.values().filter(|r| r.dev == dev).fold(0u64, |a, r| a.saturating_add(f(r))))
    }

    /// Removes and returns the records owned by `owner` (a context being destroyed: the driver
    /// frees everything allocated in it).
    pub fn remove_owned_by(&self, owner: u64) -> Vec<(u64, AllocRecord)> {
        let mut g = self.map.lock();
        let Some(m) = g.as_mut() else { return Vec::new() };
        let keys: Vec<u64> = m.iter().filter(|(_, r)| r.owner == owner).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| m.remove(&k).map(|r| (k, r))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{fork_child, temp_region, wait_child};

    #[test]
    fn own_usage_by_kind_reads_each_category() {
        let l = Ledger::local();
        l.force(0, UsageKind::Context, 5);
        l.force(0, UsageKind::Data, 7);
        l.force(0, UsageKind::Module, 3);
        assert_eq!(l.own_usage_by_kind(0), [5, 3, 7]);
        assert_eq!(l.own_usage(0), 15);
        assert_eq!(l.own_usage_by_kind(MAX_DEVICES), [0; 3]);
        let (_p, region) = temp_region("ledger-by-kind");
        let me = unsafe { libc::getpid() };
        slots::attach(&region, me).unwrap();
        let s = Ledger::shared(&region, me, true);
        s.force(1, UsageKind::Data, 9);
        s.force(1, UsageKind::Context, 2);
        assert_eq!(s.own_usage_by_kind(1), [2, 0, 9]);
    }

    #[test]
    fn a_slot_taken_by_another_writer_is_attached_again() {
        let (_p, region) = temp_region("ledger-reseat");
        let me = unsafe { libc::getpid() };
        let (l, _) = Ledger::attach(&region, me);
        let Seat::Slot(k) = l.seat() else { panic!("no slot: {:?}", l.seat()) };
        assert_eq!(l.keep_seat(), Reseat::Kept);
        // A foreign writer frees our slot.
        assert!(slots::detach(&region, me));
        assert_eq!(slots::find_slot(&region, me), None);
        assert_eq!(l.keep_seat(), Reseat::Taken { slot: k, attached: true });
        let Seat::Slot(k2) = l.seat() else { panic!("not re-seated: {:?}", l.seat()) };
        assert_eq!(slots::find_slot(&region, me), Some(k2));
        assert_eq!(l.keep_seat(), Reseat::Kept);
    }

    #[test]
    fn exit_between_the_seat_read_and_the_slot_check_attaches_nothing() {
        let (_p, region) = temp_region("ledger-reseat-exit");
        let me = unsafe { libc::getpid() };
        let (l, _) = Ledger::attach(&region, me);
        // The housekeeping thread read the seat ...
        let Seat::Slot(k) = l.seat() else { panic!("no slot: {:?}", l.seat()) };
        // ... the process exits on another thread ...
        assert!(l.detach());
        // ... and the check goes on with the seat it read: the freed slot is ours to have freed.
        assert_eq!(l.reseat_if_lost(k), Reseat::Kept);
        assert_eq!(slots::find_slot(&region, me), None, "a slot was claimed at exit");
        assert_eq!(l.seat(), Seat::Local);
    }

    #[test]
    fn exit_with_the_writer_mutex_held_by_this_thread_does_not_hang() {
        let (_p, region) = temp_region("ledger-detach-held");
        let me = unsafe { libc::getpid() };
        let (l, _) = Ledger::attach(&region, me);
        // As `exit` from a signal handler that interrupted this thread inside a write finds it.
        let _held = region.writer.lock();
        let t = Instant::now();
        assert!(l.detach());
        assert!(t.elapsed() < Duration::from_secs(1), "detach waited {:?}", t.elapsed());
        assert_eq!(l.seat(), Seat::Local);
        assert_eq!(slots::find_slot(&region, me), None);
    }

    #[test]
    fn a_publication_with_a_seat_read_before_exit_never_writes_the_freed_slot() {
        let (_p, region) = temp_region("ledger-stale-seat");
        let me = unsafe { libc::getpid() };
        let (l, _) = Ledger::attach(&region, me);
        // A thread read the seat, then the process began to exit and another process took the slot.
        let seen = l.seat();
        let Seat::Slot(k) = seen else { panic!("no slot: {seen:?}") };
        assert!(l.detach());
        let other = 1;
        let a = slots::attach_with(&region.lock().unwrap(), other, 0, &|_, _| false).unwrap();
        assert_eq!(a.index, k, "the freed slot is claimed again");
        assert!(l.try_publish(seen, 0, 8 << 20, UsageKind::Data, 0, false).is_ok());
        let theirs = slots::live(region.shared()).find(|s| s.pid == other).unwrap().usage(0);
        assert_eq!(theirs.total, 0, "our bytes landed in another process's slot");
        assert_eq!(l.own_usage(0), 8 << 20, "counted locally instead");
    }

    #[test]
    fn local_mode_reserve_commit_rollback() {
        let l = Ledger::local();
        let r = l.reserve(0, 600, UsageKind::Data, 1000).unwrap();
        assert_eq!(l.usage(0), 600);
        r.commit();
        assert_eq!(l.usage(0), 600);
        let e = l.reserve(0, 500, UsageKind::Data, 1000).err().unwrap();
        assert!(matches!(e, ReserveError::OverLimit(OverLimit { usage: 600, requested: 500, limit: 1000, dev: 0 })));
        assert!(e.to_string().contains("over its memory limit"));
        {
            let _r = l.reserve(0, 400, UsageKind::Data, 1000).unwrap();
            assert_eq!(l.usage(0), 1000);
        } // rolled back
        assert_eq!(l.usage(0), 600);
        l.release(0, UsageKind::Data, 10_000);
        assert_eq!(l.usage(0), 0);
        // No limit.
        l.reserve(1, u64::MAX, UsageKind::Data, 0).unwrap().commit();
        assert_eq!(l.usage(1), u64::MAX);
        assert!(matches!(l.reserve(16, 1, UsageKind::Data, 0), Err(ReserveError::BadDevice(16))));
    }

    #[test]
    fn shared_mode_counts_container_wide() {
        let (_p, region) = temp_region("ledger-shared");
        let me = unsafe { libc::getpid() };
        slots::attach(&region, me).unwrap();
        // Another (live) process's usage in the region.
        {
            let g = region.lock().unwrap();
            let other = 1; // init: always alive
            slots::attach_locked(&g, other).unwrap();
            slots::add_usage_locked(&g, other, 0, UsageKind::Data, 700).unwrap();
        }
        let l = Ledger::shared(&region, me, true);
        assert_eq!(l.usage(0), 700);
        assert!(matches!(l.reserve(0, 400, UsageKind::Data, 1000), Err(ReserveError::OverLimit(_))));
        let r = l.reserve(0, 300, UsageKind::Context, 1000).unwrap();
        assert_eq!(l.usage(0), 1000);
        assert_eq!(l.own_usage(0), 300);
        r.commit();
        let b = slots::container_breakdown(region.shared(), 0);
        assert_eq!((b.context, b.data, b.total), (300, 700, 1000));
        l.release(0, UsageKind::Context, 300);
        assert_eq!(l.usage(0), 700);
    }

    #[test]
    fn dead_slots_are_reclaimed_before_refusing() {
        let (_p, region) = temp_region("ledger-dead");
        let me = unsafe { libc::getpid() };
        slots::attach(&region, me).unwrap();
        let (dead, _) = fork_child(|_| {});
        wait_child(dead);
        {
            let g = region.lock().unwrap();
            slots::attach_with(&g, dead, 0, &|_, _| false).unwrap();
            slots::add_usage_locked(&g, dead, 0, UsageKind::Data, 900).unwrap();
        }
        let l = Ledger::shared(&region, me, true);
        assert_eq!(l.usage(0), 900);
        l.reserve(0, 500, UsageKind::Data, 1000).unwrap().commit();
        assert_eq!(l.usage(0), 500);
        assert_eq!(region.shared().proc_num.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn no_slot_counts_locally_but_checks_container() {
        let (_p, region) = temp_region("ledger-noslot");
        {
            let g = region.lock().unwrap();
            slots::attach_locked(&g, 1).unwrap();
            slots::add_usage_locked(&g, 1, 3, UsageKind::Data, 600).unwrap();
        }
        let l = Ledger::shared(&region, unsafe { libc::getpid() }, false);
        l.reserve(3, 300, UsageKind::Data, 1000).unwrap().commit();
        assert_eq!(l.usage(3), 900);
        assert_eq!(l.own_usage(3), 300);
        assert!(l.reserve(3, 200, UsageKind::Data, 1000).is_err());
        l.release(3, UsageKind::Data, 300);
        assert_eq!(l.usage(3), 600);
    }

    /// Threads of one process share its slot: the writer mutex keeps the seqlock single-writer
    /// and no update is lost; the limit holds across threads; the monitor's sum never passes it.
    #[test]
    fn threads_of_one_process_share_the_slot_exactly() {
        let (_p, region) = temp_region("ledger-threads");
        let me = unsafe { libc::getpid() };
        let (l, err) = Ledger::attach(&region, me);
        assert!(err.is_none() && l.has_slot());
        const LIMIT: u64 = 1_000_000;
        let refused = AtomicU64::new(0);
        std::thread::scope(|sc| {
            for t in 0..6u64 {
                let (l, refused, region) = (&l, &refused, &region);
                sc.spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..3000u64 {
                        let b = 1 + (i * 7919 + t * 104_729) % 120_000;
                        match l.reserve(0, b, UsageKind::Data, LIMIT) {
                            Ok(r) => {
                                r.commit();
                                held.push(b);
                            }
                            Err(ReserveError::OverLimit(_)) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                        assert!(slots::container_usage(region.shared(), 0) <= LIMIT);
                        if i % 3 == 0 && !held.is_empty() {
                            l.release(0, UsageKind::Data, held.swap_remove(0));
                        }
                    }
                    for b in held {
                        l.release(0, UsageKind::Data, b);
                    }
                });
            }
        });
        assert!(refused.load(Ordering::Relaxed) > 0, "the limit was contended");
        assert_eq!(l.own_usage(0), 0, "every update landed");
        let s = &region.shared().procs[0];
        assert_eq!(s.used[0].data_size.load(Ordering::Relaxed), 0);
        assert_eq!(s.seqlock.load(Ordering::Relaxed) % 2, 0);
        assert!(l.detach());
        assert_eq!(region.shared().proc_num.load(Ordering::Relaxed), 0);
    }

    const MIB: u64 = 1 << 20;

    fn lease_of(region: &Region, k: usize, dev: usize) -> u64 {
        slots::lease(&region.shared().procs[k], dev).load(Ordering::Relaxed)
    }

    /// Far from the limit a checked reservation also takes a lease; later ones are served from
    /// it (no other slot read) and frees refill it, up to what was granted.
    #[test]
    fn leases_serve_allocations_far_from_the_limit() {
        let (_p, region) = temp_region("ledger-lease");
        let me = unsafe { libc::getpid() };
        let (l, _) = Ledger::attach(&region, me);
        let Seat::Slot(k) = l.seat() else { panic!("no slot") };
        const LIMIT: u64 = 1 << 30;
        l.reserve(0, MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert_eq!(lease_of(&region, k, 0), LEASE_MAX, "granted with the first reservation");
        assert_eq!(l.own_usage(0), MIB, "the lease is not usage");
        assert_eq!(slots::checked_total(&region, 0), MIB + LEASE_MAX, "but every check counts it");
        l.reserve(0, 3 * MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert_eq!(lease_of(&region, k, 0), LEASE_MAX - 3 * MIB, "taken from the lease");
        assert_eq!(l.own_usage(0), 4 * MIB);
        l.release(0, UsageKind::Data, 3 * MIB);
        assert_eq!(lease_of(&region, k, 0), LEASE_MAX, "refilled by the free");
        l.release(0, UsageKind::Data, MIB);
        assert_eq!(lease_of(&region, k, 0), LEASE_MAX, "never above the grant");
        assert_eq!(l.own_usage(0), 0);
        // A rolled-back reservation from the lease gives it back.
        drop(l.reserve(0, 2 * MIB, UsageKind::Data, LIMIT).unwrap());
        assert_eq!((l.own_usage(0), lease_of(&region, k, 0)), (0, LEASE_MAX));
        // Another device has its own lease; no limit needs none.
        l.reserve(1, MIB, UsageKind::Data, 0).unwrap().commit();
        assert_eq!(lease_of(&region, k, 1), 0);
        // Near the limit, grants shrink with the headroom (a quarter per live slot), then stop.
        l.reserve(2, LIMIT - 40 * MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert_eq!(lease_of(&region, k, 2), 10 * MIB);
        l.reserve(2, 30 * MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert_eq!(lease_of(&region, k, 2), 10 * MIB / 4);
        // Filling the limit exactly uses our own lease too.
        l.reserve(2, 10 * MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert_eq!(lease_of(&region, k, 2), 0, "no headroom left to lease");
        assert_eq!(slots::checked_total(&region, 2), LIMIT);
        assert!(l.detach());
    }

    /// A lease never makes a fitting allocation fail: the reserver that finds the container
    /// over revokes the other processes' leases (without the container lock) and checks again.
    #[test]
    fn other_leases_are_revoked_before_refusing() {
        let (_p, region) = temp_region("ledger-revoke");
        let me = unsafe { libc::getpid() };
        let (a, _) = Ledger::attach(&region, me);
        let (b, _) = Ledger::attach(&region, 1); // init: always alive
        let (Seat::Slot(ka), Seat::Slot(kb)) = (a.seat(), b.seat()) else { panic!("no slots") };
        const LIMIT: u64 = 1 << 30;
        a.reserve(0, MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert_eq!(lease_of(&region, ka, 0), LEASE_MAX);
        // Held by a stopped lock holder: revocation needs no lock.
        let g = region.lock().unwrap();
        b.reserve(0, LIMIT - MIB, UsageKind::Data, LIMIT).unwrap().commit();
        drop(g);
        assert_eq!(lease_of(&region, ka, 0), 0, "revoked");
        assert_eq!(lease_of(&region, kb, 0), 0, "no headroom for a grant");
        assert_eq!(slots::checked_total(&region, 0), LIMIT);
        // The revoked owner finds its lease gone: a checked reservation, refused; its frees no
        // longer refill.
        assert!(matches!(a.reserve(0, 1, UsageKind::Data, LIMIT), Err(ReserveError::OverLimit(_))));
        a.release(0, UsageKind::Data, MIB);
        assert_eq!(lease_of(&region, ka, 0), 0);
        assert_eq!(slots::checked_total(&region, 0), LIMIT - MIB);
        b.release(0, UsageKind::Data, LIMIT - MIB);
        assert!(a.detach() && b.detach());
    }

    /// Near the limit a refusal takes no lock: a stopped holder of the container lock (here: the
    /// test) neither delays it nor turns it into a lock error. A reservation in flight of another
    /// process counts while it lasts (checked again a few times, never slept on), and once it is
    /// gone the allocation fits.
    #[test]
    fn a_refusal_takes_no_lock_and_counts_reservations_in_flight() {
        let (_p, region) = temp_region("ledger-refusal");
        let (a, _) = Ledger::attach(&region, unsafe { libc::getpid() });
        let (b, _) = Ledger::attach(&region, 1); // init: always alive
        let Seat::Slot(kb) = b.seat() else { panic!("no slot") };
        const LIMIT: u64 = 100 * MIB;
        let g = region.lock().unwrap();
        a.reserve(0, 60 * MIB, UsageKind::Data, LIMIT).unwrap().commit();
        a.revoke_leases(0);
        for _ in 0..3 {
            let e = a.reserve(0, 50 * MIB, UsageKind::Data, LIMIT).err().unwrap();
            assert!(matches!(e, ReserveError::OverLimit(OverLimit { usage, .. }) if usage == 60 * MIB), "{e}");
        }
        // B's reservation of 30 MiB in flight (its process stopped in the middle of its check).
        slots::set_pending(&region.shared().procs[kb], 0, 30 * MIB);
        let e = a.reserve(0, 20 * MIB, UsageKind::Data, LIMIT).err().unwrap();
        assert!(matches!(e, ReserveError::OverLimit(OverLimit { usage, .. }) if usage == 90 * MIB), "{e}");
        slots::set_pending(&region.shared().procs[kb], 0, 0);
        a.reserve(0, 20 * MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert_eq!(slots::container_total(&region, 0), 80 * MIB);
        drop(g);
        a.release(0, UsageKind::Data, 80 * MIB);
        assert!(a.detach() && b.detach());
    }

    /// Usage counted without a check (driver-held memory) revokes every lease: a container
    /// taken over its limit that way refuses the next allocation of every process.
    #[test]
    fn forced_usage_revokes_every_lease() {
        let (_p, region) = temp_region("ledger-force");
        let (a, _) = Ledger::attach(&region, unsafe { libc::getpid() });
        let (b, _) = Ledger::attach(&region, 1);
        let (Seat::Slot(ka), Seat::Slot(kb)) = (a.seat(), b.seat()) else { panic!("no slots") };
        const LIMIT: u64 = 1 << 30;
        a.reserve(0, MIB, UsageKind::Data, LIMIT).unwrap().commit();
        b.reserve(0, MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert!(lease_of(&region, ka, 0) > 0 && lease_of(&region, kb, 0) > 0);
        b.force(0, UsageKind::Context, LIMIT);
        assert_eq!((lease_of(&region, ka, 0), lease_of(&region, kb, 0)), (0, 0));
        assert!(matches!(a.reserve(0, 1, UsageKind::Data, LIMIT), Err(ReserveError::OverLimit(_))));
        assert!(matches!(b.reserve(0, 1, UsageKind::Data, LIMIT), Err(ReserveError::OverLimit(_))));
        assert_eq!(slots::container_breakdown(region.shared(), 0).context, LIMIT);
        // Seen full by a view: the same.
        b.release(0, UsageKind::Context, LIMIT);
        a.reserve(0, MIB, UsageKind::Data, LIMIT).unwrap().commit();
        assert!(lease_of(&region, ka, 0) > 0);
        a.revoke_leases(0);
        assert_eq!(lease_of(&region, ka, 0), 0);
        assert!(a.detach() && b.detach());
    }

    /// A lease is only good under the limit it was granted under: a limit lowered at run time
    /// is checked at the next reservation even with bytes left in the lease.
    #[test]
    fn a_changed_limit_bypasses_the_lease() {
        let (_p, region) = temp_region("ledger-lease-limit");
        let (l, _) = Ledger::attach(&region, unsafe { libc::getpid() });
        l.reserve(0, 100 * MIB, UsageKind::Data, 1 << 30).unwrap().commit();
        assert!(l.reserve(0, MIB, UsageKind::Data, 100 * MIB).is_err(), "lowered limit: refused");
        assert_eq!(l.own_usage(0), 100 * MIB);
        l.reserve(0, MIB, UsageKind::Data, 1 << 30).unwrap().commit();
        assert_eq!(l.own_usage(0), 101 * MIB);
        assert!(l.detach());
    }

    /// A measurement of the process's own memory (a new context's cost) waits for the
    /// reservations in flight, and the changes that come meanwhile wait for it.
    #[test]
    fn a_measurement_sees_no_change_half_done() {
        use std::sync::atomic::AtomicBool;
        let l = Ledger::local();
        let r = l.reserve(0, 100, UsageKind::Data, 0).unwrap();
        let measured = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let m = sc.spawn(|| {
                l.quiesced(|quiet| {
                    measured.store(true, Ordering::SeqCst);
                    assert!(quiet, "nothing in flight once it runs");
                    // Meanwhile another thread's change waits: our own reading stays put.
                    let before = l.own_usage(0);
                    std::thread::sleep(Duration::from_millis(50));
                    assert_eq!(l.own_usage(0), before, "a change passed the measurement");
                    l.reserve_quiesced(0, 7, UsageKind::Context, 0).unwrap().commit();
                });
            });
            std::thread::sleep(Duration::from_millis(30));
            assert!(!measured.load(Ordering::SeqCst), "the measurement waits for the reservation in flight");
            r.commit();
            while !measured.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let t = Instant::now();
            l.reserve(0, 1, UsageKind::Data, 0).unwrap().commit();
            drop(l.change());
            assert!(t.elapsed() >= Duration::from_millis(20), "the change did not wait for the measurement");
            m.join().unwrap();
        });
        assert_eq!(l.own_usage(0), 108);
    }

    #[test]
    fn alloc_table() {
        let t = AllocTable::new();
        assert!(t.is_empty());
        let rec = AllocRecord { dev: 1, bytes: 4096, kind: UsageKind::Data, owner: 0 };
        assert_eq!(t.insert(0xdead_0000, rec), None);
        assert_eq!(t.insert(0xbeef_0000, AllocRecord { dev: 0, bytes: 10, kind: UsageKind::Data, owner: 7 }), None);
        assert_eq!(t.sum_on(1, |r| r.bytes), 4096);
        assert_eq!(t.get(0xdead_0000), Some(rec));
        assert_eq!(t.remove(0x1234), None, "unknown pointer uncounts nothing");
        assert_eq!(t.remove(0xdead_0000), Some(rec));
        assert_eq!(t.remove(0xdead_0000), None, "double free uncounts once");
        let dup = AllocRecord { dev: 0, bytes: 20, kind: UsageKind::Data, owner: 7 };
        assert_eq!(t.insert(0xbeef_0000, dup).map(|r| r.bytes), Some(10));
        assert_eq!(t.len(), 1);
        t.insert(0xcafe_0000, AllocRecord { dev: 0, bytes: 5, kind: UsageKind::Data, owner: 8 });
        let owned = t.remove_owned_by(7);
        assert_eq!(owned.len(), 1, "only the records of the destroyed context");
        assert_eq!(owned[0].0, 0xbeef_0000);
        assert!(t.remove_owned_by(7).is_empty());
        assert_eq!(t.len(), 1);
        assert_eq!(t.remove_owned_by(8).len(), 1);
        assert!(t.is_empty());
    }
}
