//! Fork-safe synchronisation: a mutex and a wake-up event that are each one futex word and
//! nothing else.
//!
//! Why not `parking_lot` (or any lock with a process-wide waiter table): a forked child inherits
//! such a table in whatever state the parent's threads left it — a bucket locked by a thread that
//! does not exist in the child, or a queue naming parked threads that do not exist either — and
//! the child's first contended lock or notify then spins or sleeps forever (docs/design.md "Fork"). Here the
//! whole state of a lock is its word: a child sees "locked" at worst, which the owners of
//! per-process state handle by abandoning the object (see the shim's `state` and `compute`) or by
//! [`Mutex::force_unlock`] of a static whose holder is known to be gone. Private futexes are keyed
//! by address space, so a child never wakes, or waits behind, a parent's sleeper.
//!
//! The API is the subset of `parking_lot::Mutex` the crate uses.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
/// Locked, and some thread may be sleeping on the word.
const CONTENDED: u32 = 2;

/// `FUTEX_WAIT_PRIVATE` on `word` while it equals `expected`, at most `timeout` (None: forever).
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32; the kernel only reads it and the timespec.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, tsp);
    }
}

fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: as above; waking has no memory effect.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, n);
    }
}

/// A mutual-exclusion lock (no poisoning), one futex word.
pub struct Mutex<T: ?Sized> {
    state: AtomicU32,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises all access to `data`.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

pub struct MutexGuard<'a, T: ?Sized> {
    m: &'a Mutex<T>,
}

impl<T> Mutex<T> {
    pub const fn new(v: T) -> Self {
        Mutex { state: AtomicU32::new(UNLOCKED), data: UnsafeCell::new(v) }
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized> Mutex<T> {
    pub fn lock(&self) -> MutexGuard<'_, T> {
        if self.state.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended(None);
        }
        MutexGuard { m: self }
    }

    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| MutexGuard { m: self })
    }

    /// `None` if the lock could not be had within `timeout`.
    pub fn try_lock_for(&self, timeout: Duration) -> Option<MutexGuard<'_, T>> {
        if self.state.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok()
            || self.lock_contended(Some(Instant::now() + timeout))
        {
            Some(MutexGuard { m: self })
        } else {
            None
        }
    }

    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }

    /// Releases a lock whose guard is gone (leaked with `mem::forget`, or held by a thread that
    /// does not exist in a forked child).
    ///
    /// # Safety
    /// No live guard of this mutex may be used afterwards.
    pub unsafe fn force_unlock(&self) {
        self.unlock();
    }

    /// In a `pthread_atfork` child handler: releases the lock if a thread of the parent held it
    /// at the fork (that thread does not exist here, so its guard can never be used).
    ///
    /// # Safety
    /// Call only from an atfork child handler that runs before anything else in the child, and
    /// only for a lock the forking thread itself did not hold (the application forked, from
    /// outside the shim).
    pub unsafe fn force_unlock_in_child(&self) {
        if self.is_locked() {
            // SAFETY: per the contract above, the holder is a thread that is not in this process.
            unsafe { self.force_unlock() };
        }
    }

    /// Spins briefly while the lock is held without sleepers; returns the last state seen.
    fn spin(&self) -> u32 {
        let mut n = 100;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s != LOCKED || n == 0 {
                return s;
            }
            n -= 1;
            std::hint::spin_loop();
        }
    }

    /// Returns whether the lock was taken (false: the deadline passed).
    #[cold]
    fn lock_contended(&self, deadline: Option<Instant>) -> bool {
        let mut s = self.spin();
        if s == UNLOCKED {
            match self.state.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(cur) => s = cur,
            }
        }
        loop {
            // From here on we may have slept, so others may sleep too: take the lock only as
            // CONTENDED, so that our unlock wakes the next sleeper (taking it as LOCKED would
            // lose that wake-up).
            if s != CONTENDED && self.state.swap(CONTENDED, Ordering::Acquire) == UNLOCKED {
                return true;
            }
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    Some(d - now)
                }
            };
            futex_wait(&self.state, CONTENDED, timeout);
            s = self.spin();
        }
    }

    fn unlock(&self) {
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            futex_wake(&self.state, 1);
        }
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held.
        unsafe { &*self.m.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves the lock is held, exclusively.
        unsafe { &mut *self.m.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.m.unlock();
    }
}

/// A wake-up signal for one sleeping thread (the shim's watcher): [`Event::notify`] makes the next
/// or current [`Event::wait_timeout`] return at once. A counter and a futex: no waiter queue in
/// user space, so a forked child can notify freely (nobody in its address space sleeps on it).
pub struct Event {
    seq: AtomicU32,
    /// Sequence number the waiter last consumed.
    seen: AtomicU32,
}

impl Default for Event {
    fn default() -> Self {
        Event::new()
    }
}

impl Event {
    pub const fn new() -> Self {
        Event { seq: AtomicU32::new(0), seen: AtomicU32::new(0) }
    }

    pub fn notify(&self) {
        self.seq.fetch_add(1, Ordering::Release);
        futex_wake(&self.seq, 1);
    }

    /// Sleeps until notified (since the previous return) or `timeout`; returns whether notified.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let seen = self.seen.load(Ordering::Relaxed);
        let cur = self.seq.load(Ordering::Acquire);
        if cur == seen {
            futex_wait(&self.seq, cur, Some(timeout));
        }
        let now = self.seq.load(Ordering::Acquire);
        self.seen.store(now, Ordering::Relaxed);
        now != seen
    }
}

/// A value computed at most once per address space and then shared, without any lock: racing
/// first callers may each compute it, one wins, the others' copies are dropped. Unlike
/// `OnceLock`/`Once`, a forked child never waits for an initialiser that was running in a parent
/// thread (it finds the slot empty and computes its own).
pub struct OnceBox<T> {
    p: std::sync::atomic::AtomicPtr<T>,
}

impl<T> Default for OnceBox<T> {
    fn default() -> Self {
        OnceBox::new()
    }
}

impl<T> OnceBox<T> {
    pub const fn new() -> Self {
        OnceBox { p: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }
    }

    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        let cur = self.p.load(Ordering::Acquire);
        if !cur.is_null() {
            // SAFETY: published once below and never freed while `self` lives.
            return unsafe { &*cur };
        }
        let mine = Box::into_raw(Box::new(f()));
        match self.p.compare_exchange(std::ptr::null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => unsafe { &*mine },
            Err(theirs) => {
                // SAFETY: `mine` was never shared.
                drop(unsafe { Box::from_raw(mine) });
                unsafe { &*theirs }
            }
        }
    }
}

impl<T> Drop for OnceBox<T> {
    fn drop(&mut self) {
        let p = *self.p.get_mut();
        if !p.is_null() {
            // SAFETY: we own the published box.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

// SAFETY: shares `&T` between threads (Sync) and may drop `T` elsewhere (Send).
unsafe impl<T: Send + Sync> Sync for OnceBox<T> {}
unsafe impl<T: Send> Send for OnceBox<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{fork_child, wait_child};
    use std::sync::Arc;

    #[test]
    fn once_box_computes_once_and_shares() {
        let b: OnceBox<Vec<u32>> = OnceBox::new();
        let n = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let v = b.get_or_init(|| {
                        n.fetch_add(1, Ordering::Relaxed);
                        vec![1, 2, 3]
                    });
                    assert_eq!(v, &[1, 2, 3]);
                });
            }
        });
        let first = b.get_or_init(Vec::new) as *const _;
        assert_eq!(first, b.get_or_init(Vec::new) as *const _);
        assert!((1..=4).contains(&n.load(Ordering::Relaxed)));
    }

    #[test]
    fn excludes_threads() {
        let m = Arc::new(Mutex::new(0u64));
        std::thread::scope(|s| {
            for _ in 0..4 {
                let m = m.clone();
                s.spawn(move || {
                    for _ in 0..20_000 {
                        *m.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(*m.lock(), 80_000);
        assert!(!m.is_locked());
    }

    /// Holds long enough that waiters sleep on the futex: every sleeper must be woken in turn (a
    /// lost wake-up leaves a thread asleep on an unlocked mutex and this test hangs).
    #[test]
    fn sleepers_are_never_forgotten() {
        let m = Arc::new(Mutex::new(0u64));
        let done = Arc::new(AtomicU32::new(0));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (m, done) = (m.clone(), done.clone());
                std::thread::spawn(move || {
                    for i in 0..150 {
                        let mut g = m.lock();
                        *g += 1;
                        if i % 3 == 0 {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        let t = Instant::now();
        while done.load(Ordering::Relaxed) < 8 {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "a waiter was never woken: {} done",
                done.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(*m.lock(), 1200);
        assert!(!m.is_locked());
    }

    #[test]
    fn try_lock_and_timeout() {
        let m = Mutex::new(());
        let g = m.lock();
        assert!(m.is_locked());
        assert!(m.try_lock().is_none());
        let t = Instant::now();
        assert!(m.try_lock_for(Duration::from_millis(50)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(50));
        drop(g);
        assert!(m.try_lock_for(Duration::from_millis(50)).is_some());
        // A waiter is woken by the unlock, long before its deadline.
        let m = Arc::new(Mutex::new(()));
        let g = m.lock();
        let m2 = m.clone();
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            let ok = m2.try_lock_for(Duration::from_secs(20)).is_some();
            (ok, t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(30));
        drop(g);
        let (ok, waited) = h.join().unwrap();
        assert!(ok && waited < Duration::from_secs(10), "{waited:?}");
    }

    #[test]
    fn force_unlock_of_a_leaked_guard() {
        let m = Mutex::new(5);
        std::mem::forget(m.lock());
        assert!(m.try_lock().is_none());
        unsafe { m.force_unlock() };
        assert_eq!(*m.try_lock().unwrap(), 5);
    }

    /// In a forked child a lock held by a parent thread is released; a free one stays free.
    #[test]
    fn force_unlock_in_child_of_a_parent_held_lock() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = std::sync::Arc::new(std::sync::Barrier::new(2));
        let (m2, h2) = (m.clone(), held.clone());
        let t = std::thread::spawn(move || {
            std::mem::forget(m2.lock());
            h2.wait();
        });
        held.wait();
        t.join().unwrap();
        let (pid, rx) = fork_child(|tx| {
            assert!(m.try_lock().is_none(), "inherited as held");
            unsafe { m.force_unlock_in_child() };
            assert_eq!(*m.try_lock().unwrap(), 1);
            unsafe { m.force_unlock_in_child() };
            assert!(m.try_lock().is_some(), "a free lock stays usable");
            tx(1);
        });
        assert_eq!(rx(), Some(1));
        assert_eq!(wait_child(pid), 0);
    }

    #[test]
    fn event_wakes_and_times_out() {
        let e = Arc::new(Event::new());
        let t = Instant::now();
        assert!(!e.wait_timeout(Duration::from_millis(20)));
        assert!(t.elapsed() >= Duration::from_millis(20));
        e.notify();
        assert!(e.wait_timeout(Duration::from_secs(20)), "a notify before the wait is not lost");
        let e2 = e.clone();
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            (e2.wait_timeout(Duration::from_secs(20)), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(30));
        e.notify();
        let (woken, waited) = h.join().unwrap();
        assert!(woken && waited < Duration::from_secs(10));
    }

    /// The case that hangs a waiter-table lock: a thread sleeps on the lock/event at the fork.
    /// The child can still notify, and lock a mutex the (absent) thread held after force_unlock.
    #[test]
    fn child_of_a_fork_with_sleepers_is_not_stuck() {
        static M: Mutex<u32> = Mutex::new(0);
        static E: Event = Event::new();
        let g = M.lock();
        let sleeper = std::thread::spawn(|| {
            let _g = M.lock(); // sleeps on the futex while the main thread holds it
        });
        let waiter = std::thread::spawn(|| E.wait_timeout(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(50));
        let (pid, rx) = fork_child(|tx| {
            E.notify();
            assert!(M.is_locked());
            unsafe { M.force_unlock() };
            *M.lock() += 1;
            tx(if *M.lock() == 1 { b'Y' } else { b'N' });
        });
        assert_eq!(rx(), Some(b'Y'));
        assert_eq!(wait_child(pid), 0);
        drop(g);
        sleeper.join().unwrap();
        E.notify();
        assert!(waiter.join().unwrap());
    }
}
