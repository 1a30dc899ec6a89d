//! The process-local object tables, behind one mutex.

use crate::array::{Array, Mipmap};
use crate::context::Ctx;
use crate::graph::{Exec, Graph, Node};
use crate::memory::{Alloc, HostRange};
use crate::module::{Func, Library, Module};
use crate::pool::Pool;
use crate::stream::{Event, SKey, Stream};
use crate::vmm::PhysHandle;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// One folded multiply per integer key (handles are not untrusted input: SipHash buys nothing).
#[derive(Default, Clone, Copy)]
pub(crate) struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        let m = u128::from(self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

pub(crate) type HandleHash = std::hash::BuildHasherDefault<HandleHasher>;

#[derive(Default)]
pub(crate) struct Sim {
    /// Keyed by handle with a cheap hasher: a real driver finds the current context from
    /// thread-local state, so its per-call lookup must not dominate what the shim's bench measures.
    pub ctxs: HashMap<u64, Ctx, HandleHash>,
    /// Active contexts of this process per device (primary with refcount > 0, or created).
    pub dev_ctx_count: [u32; sim_state::MAX_DEVICES],
    pub allocs: BTreeMap<u64, Alloc>,
    pub host: BTreeMap<u64, HostRange>,
    pub streams: HashMap<SKey, Stream>,
    pub events: HashMap<u64, Event>,
    pub modules: HashMap<u64, Module>,
    pub funcs: HashMap<u64, Func>,
    pub libs: HashMap<u64, Library>,
    pub graphs: HashMap<u64, Graph>,
    pub nodes: HashMap<u64, Node>,
    pub execs: HashMap<u64, Exec>,
    pub pools: HashMap<u64, Pool>,
    pub default_pool: HashMap<usize, u64>,
    pub current_pool: HashMap<usize, u64>,
    pub phys: HashMap<u64, PhysHandle>,
    /// VMM address reservations: base → size.
    pub reservations: BTreeMap<u64, u64>,
    pub arrays: HashMap<u64, Array>,
    pub mipmaps: HashMap<u64, Mipmap>,
    pub next_capture_id: u64,
    /// Driver-held memory besides allocations (modules, context limits, graph pools).
    pub held: crate::drivercost::Held,
}

pub(crate) fn lock() -> MutexGuard<'static, Sim> {
    tables().lock().unwrap_or_else(|e| e.into_inner())
}

fn tables() -> &'static Mutex<Sim> {
    static SIM: OnceLock<Mutex<Sim>> = OnceLock::new();
    SIM.get_or_init(|| {
        // SAFETY: plain function pointers, valid for the process lifetime.
        unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_release), Some(fork_release)) };
        Mutex::new(Sim::default())
    })
}

// A forked child must not inherit the tables locked by a thread that does not exist there (a
// real driver does not hang a forked child either): the forking thread holds the lock across
// fork() and both sides release it afterwards.
thread_local! {
    static HELD_FOR_FORK: std::cell::RefCell<Option<MutexGuard<'static, Sim>>> = const { std::cell::RefCell::new(None) };
}

extern "C" fn fork_prepare() {
    let g = lock();
    HELD_FOR_FORK.with(|h| *h.borrow_mut() = Some(g));
}

extern "C" fn fork_release() {
    HELD_FOR_FORK.with(|h| drop(h.borrow_mut().take()));
}

/// A fresh opaque handle value (never 0, 1 or 2; unique across kinds).
pub(crate) fn new_handle() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    0x5100_0000_0000 + NEXT.fetch_add(1, Ordering::Relaxed) * 0x40
}

pub(crate) fn now() -> u64 {
    sim_state::now_mono_ns()
}

/// Sleep until CLOCK_MONOTONIC reaches `t` (ns).
pub(crate) fn sleep_until(t: u64) {
    loop {
        let n = now();
        if n >= t {
            return;
        }
        let d = t - n;
        let ts = libc::timespec {
            tv_sec: (d / 1_000_000_000) as libc::time_t,
            tv_nsec: (d % 1_000_000_000) as libc::c_long,
        };
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
}
