//! Memory accounting: reserve-before-allocate against the container limit, and the per-process
//! allocation table (hami-contract.md §6, known-failures.md #1/#2).
//!
//! The shim's allocation hook does:
//! ```text
//! let res = ledger.reserve(dev, bytes, UsageKind::Data, limit)?;   // Err → CUDA_ERROR_OUT_OF_MEMORY
//! match real_alloc() { Ok(ptr) => { table.insert(ptr, rec); res.commit() }, Err(e) => /* res drops: rolled back */ }
//! ```
//! and the free hook always calls the real free, then uncounts what `table.remove(ptr)` returns
//! (an unknown pointer uncounts nothing), against the recorded device.
//!
//! Backends: a region with our slot (normal), a region without a slot (table full: our usage is
//! kept locally and added to the container's for our checks), or no region at all
//! (process-local mode, same API).
//!
//! Lock timeouts: `reserve` fails closed ([`ReserveError::Lock`], the shim returns OOM — a 1 s
//! stuck lock only happens with a stopped-but-alive holder); `release` never loses a free (lock-free
//! fallback in [`crate::slots::sub_usage`]).

use crate::lock::LockError;
use crate::region::{UsageKind, MAX_DEVICES};
use crate::regionfile::Region;
use crate::slots::{self, SlotError};
use crate::sync::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverLimit {
    pub dev: usize,
    pub requested: u64,
    /// Container usage at the refusal (after compaction).
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

fn over(limit: u64, usage: u64, bytes: u64) -> bool {
    limit > 0 && usage.saturating_add(bytes) > limit
}

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
    fn clear(&self) {
        for d in &self.used {
            for a in d {
                a.store(0, Ordering::Relaxed);
            }
        }
    }
}

pub struct Ledger<'r> {
    region: Option<&'r Region>,
    pid: AtomicI32,
    has_slot: AtomicBool,
    local: LocalUsage,
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
    /// Region-backed; `has_slot` = `slots::attach` succeeded for `pid`.
    pub fn shared(region: &'r Region, pid: i32, has_slot: bool) -> Self {
        Ledger { region: Some(region), pid: AtomicI32::new(pid), has_slot: AtomicBool::new(has_slot), local: LocalUsage::new() }
    }

    /// Process-local mode (no usable region).
    pub fn local() -> Ledger<'static> {
        Ledger { region: None, pid: AtomicI32::new(0), has_slot: AtomicBool::new(false), local: LocalUsage::new() }
    }

    pub fn region(&self) -> Option<&'r Region> {
        self.region
    }

    pub fn has_slot(&self) -> bool {
        self.has_slot.load(Ordering::Acquire)
    }

    pub fn set_has_slot(&self, v: bool) {
        self.has_slot.store(v, Ordering::Release);
    }

    /// In a forked child (atfork child handler): new pid, no slot yet, local counts cleared (the
    /// child owns none of the parent's allocations). Attach a slot, then `set_has_slot(true)`.
    pub fn after_fork(&self, new_pid: i32) {
        if self.local.m.is_locked() {
            unsafe { self.local.m.force_unlock() };
        }
        self.pid.store(new_pid, Ordering::Release);
        self.has_slot.store(false, Ordering::Release);
        self.local.clear();
    }

    /// Counts `bytes` on `dev` if the container stays within `limit` (0 = none). On an apparent
    /// overrun, dead slots are compacted and the check repeated before refusing.
    pub fn reserve<'l>(&'l self, dev: usize, bytes: u64, kind: UsageKind, limit: u64) -> Result<Reservation<'l, 'r>, ReserveError> {
        if dev >= MAX_DEVICES {
            return Err(ReserveError::BadDevice(dev));
        }
        let pid = self.pid.load(Ordering::Acquire);
        match self.region {
            Some(region) => {
                let g = region.lock().map_err(ReserveError::Lock)?;
                let usage = |g: &crate::regionfile::RegionGuard<'_>| {
                    let mine = if self.has_slot() { 0 } else { self.local.total(dev) };
                    slots::container_usage(g, dev).saturating_add(mine)
                };
                let mut u = usage(&g);
                if over(limit, u, bytes) {
                    if slots::compact_locked(&g, pid, &slots::pid_is_dead) > 0 {
                        u = usage(&g);
                    }
                    if over(limit, u, bytes) {
                        return Err(ReserveError::OverLimit(OverLimit { dev, requested: bytes, usage: u, limit }));
                    }
                }
                if self.has_slot() {
                    match slots::add_usage_locked(&g, pid, dev, kind, bytes) {
                        Ok(()) => {}
                        Err(SlotError::NotAttached) => {
                            // Slot vanished (should not happen): keep counting locally.
                            self.set_has_slot(false);
                            self.local.apply(dev, kind, true, bytes);
                        }
                        Err(SlotError::BadDevice(d)) => return Err(ReserveError::BadDevice(d)),
                        Err(SlotError::Lock(e)) => return Err(ReserveError::Lock(e)),
                        Err(SlotError::TableFull) => unreachable!(),
                    }
                } else {
                    self.local.apply(dev, kind, true, bytes);
                }
            }
            None => {
                let _l = self.local.m.lock();
                let u = self.local.total(dev);
                if over(limit, u, bytes) {
                    return Err(ReserveError::OverLimit(OverLimit { dev, requested: bytes, usage: u, limit }));
                }
                self.local.apply(dev, kind, true, bytes);
            }
        }
        Ok(Reservation { ledger: self, dev, kind, bytes, armed: true })
    }

    /// Uncounts `bytes` (saturating). Never fails: a lock timeout falls back to a lock-free update.
    pub fn release(&self, dev: usize, kind: UsageKind, bytes: u64) {
        if dev >= MAX_DEVICES {
            return;
        }
        if let (Some(region), true) = (self.region, self.has_slot()) {
            match slots::sub_usage(region, self.pid.load(Ordering::Acquire), dev, kind, bytes) {
                Ok(_) => return,
                Err(_) => self.set_has_slot(false),
            }
        }
        let _l = self.local.m.lock();
        self.local.apply(dev, kind, false, bytes);
    }

    /// Usage the limit is checked against: the container's (region) or this process's (local).
    pub fn usage(&self, dev: usize) -> u64 {
        if dev >= MAX_DEVICES {
            return 0;
        }
        match self.region {
            Some(r) => {
                let mine = if self.has_slot() { 0 } else { self.local.total(dev) };
                slots::container_usage(r.shared(), dev).saturating_add(mine)
            }
            None => self.local.total(dev),
        }
    }

    /// This process's own usage of `dev`.
    pub fn own_usage(&self, dev: usize) -> u64 {
        if dev >= MAX_DEVICES {
            return 0;
        }
        match (self.region, self.has_slot()) {
            (Some(r), true) => slots::slot_usage(r, self.pid.load(Ordering::Acquire), dev).unwrap_or(0),
            _ => self.local.total(dev),
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
///
/// Fork: call [`atfork_prepare`](Self::atfork_prepare) / [`atfork_parent`](Self::atfork_parent) /
/// [`atfork_child`](Self::atfork_child) from `pthread_atfork` so a child never inherits a held lock
/// (the child's table starts empty: it owns none of the parent's allocations).
#[derive(Default)]
pub struct AllocTable {
    map: Mutex<Option<HashMap<u64, AllocRecord>>>,
}

impl AllocTable {
    pub const fn new() -> Self {
        AllocTable { map: Mutex::new(None) }
    }

    /// Records `key`. Returns the previous record for the same key (the driver reused an address
    /// we still thought live, i.e. a missed free): the caller should uncount it.
    pub fn insert(&self, key: u64, rec: AllocRecord) -> Option<AllocRecord> {
        self.map.lock().get_or_insert_with(HashMap::new).insert(key, rec)
    }

    /// Forgets `key` and returns what it counted; `None` for an unknown key (uncount nothing).
    pub fn remove(&self, key: u64) -> Option<AllocRecord> {
        self.map.lock().as_mut()?.remove(&key)
    }

    pub fn get(&self, key: u64) -> Option<AllocRecord> {
        self.map.lock().as_ref()?.get(&key).copied()
    }

    pub fn len(&self) -> usize {
        self.map.lock().as_ref().map_or(0, HashMap::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes recorded on `dev` (all kinds).
    pub fn bytes_on(&self, dev: usize) -> u64 {
        self.map.lock().as_ref().map_or(0, |m| {
            m.values().filter(|r| r.dev == dev).fold(0u64, |a, r| a.saturating_add(r.bytes))
        })
    }

    /// Removes and returns the records owned by `owner` (a context being destroyed: the driver
    /// frees everything allocated in it).
    pub fn remove_owned_by(&self, owner: u64) -> Vec<(u64, AllocRecord)> {
        let mut g = self.map.lock();
        let Some(m) = g.as_mut() else { return Vec::new() };
        let keys: Vec<u64> = m.iter().filter(|(_, r)| r.owner == owner).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| m.remove(&k).map(|r| (k, r))).collect()
    }

    /// Removes and returns everything (e.g. at context destruction).
    pub fn drain(&self) -> Vec<(u64, AllocRecord)> {
        self.map.lock().take().map(|m| m.into_iter().collect()).unwrap_or_default()
    }

    pub fn atfork_prepare(&self) {
        std::mem::forget(self.map.lock());
    }

    pub fn atfork_parent(&self) {
        unsafe { self.map.force_unlock() };
    }

    pub fn atfork_child(&self) {
        unsafe { self.map.force_unlock() };
        // Leak rather than drop: dropping is fine too, but keep the child's work minimal.
        if let Some(m) = self.map.lock().take() {
            std::mem::forget(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regionfile::RegionInit;
    use crate::testutil::{fork_child, temp_path, wait_child};

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
        let p = temp_path("ledger-shared");
        let (region, _) = Region::open(&p, &RegionInit::default()).unwrap();
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
        let p = temp_path("ledger-dead");
        let (region, _) = Region::open(&p, &RegionInit::default()).unwrap();
        let me = unsafe { libc::getpid() };
        slots::attach(&region, me).unwrap();
        let (dead, _) = fork_child(|_| {});
        wait_child(dead);
        {
            let g = region.lock().unwrap();
            slots::attach_with(&g, dead, &|_| false).unwrap();
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
        let p = temp_path("ledger-noslot");
        let (region, _) = Region::open(&p, &RegionInit::default()).unwrap();
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

    #[test]
    fn alloc_table() {
        let t = AllocTable::new();
        assert!(t.is_empty());
        let rec = AllocRecord { dev: 1, bytes: 4096, kind: UsageKind::Data, owner: 0 };
        assert_eq!(t.insert(0xdead_0000, rec), None);
        assert_eq!(t.insert(0xbeef_0000, AllocRecord { dev: 0, bytes: 10, kind: UsageKind::Data, owner: 7 }), None);
        assert_eq!(t.bytes_on(1), 4096);
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
        assert_eq!(t.drain().len(), 1);
        assert!(t.is_empty());
        t.atfork_prepare();
        t.atfork_parent();
        t.insert(1, rec);
        t.atfork_prepare();
        t.atfork_child();
        assert!(t.is_empty());
    }

    #[test]
    fn ledger_after_fork_reset() {
        let l = Ledger::local();
        l.reserve(0, 5, UsageKind::Data, 0).unwrap().commit();
        l.after_fork(42);
        assert_eq!(l.usage(0), 0);
    }
}
