//! The compute (SM-utilisation) limiter, shim side. Design: docs/design.md "Compute limiter";
//! controller logic: `vgpu_core::limiter`.
//!
//! * [`GATE`]: the one process-local flag the launch hooks test. Clear = unthrottled fast path
//!   (the real call, nothing else). Set = something is due ([`gate`] slow path).
//! * [`Compute`]: per-process state, built lazily on the first slow-path launch or context
//!   creation (never in a constructor); it starts the [`watcher`] thread.
//! * [`gate`]: admission of one launch (feedback words, monitor block, capture check, bucket).
//! * [`samples`]: timing-event pools per context and samples in flight.
//! * [`watcher`]: polls samples, control words, NVML (asking `crate::hostpid` for our host PID
//!   each round); re-arms [`GATE`].

pub mod api;
mod burst;
mod gate;
mod samples;
pub(crate) mod watcher;

pub use crate::clock::{mono_ns, wall_ns};
pub use gate::{after, after_multi, before, before_multi};

use crate::ffi::*;
use crate::state;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use vgpu_core::config::CorePolicy;
use vgpu_core::limiter::correction::Correction;
use vgpu_core::limiter::cost::CostModel;
use vgpu_core::limiter::feedback::KernelTimeRecorder;
use vgpu_core::limiter::words;
use vgpu_core::region::{DeviceLimiterState, MAX_DEVICES};
use vgpu_core::regionfile::Region;
use vgpu_core::sync::Mutex;

/// Set: launches take the slow path. Starts set so the first launch initialises everything.
pub static GATE: AtomicBool = AtomicBool::new(true);

/// The unthrottled fast path: one relaxed load of a process-local flag.
#[inline(always)]
pub fn fast() -> bool {
    !GATE.load(Ordering::Relaxed)
}

#[inline]
pub fn arm() {
    if !GATE.load(Ordering::Relaxed) {
        GATE.store(true, Ordering::Relaxed);
    }
}

/// Sleeps until CLOCK_MONOTONIC `t` (absolute; no spinning).
pub fn sleep_until(t: u64) {
    let ts =
        libc::timespec { tv_sec: (t / 1_000_000_000) as libc::time_t, tv_nsec: (t % 1_000_000_000) as libc::c_long };
    loop {
        let r = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        if r != libc::EINTR {
            return;
        }
    }
}

/// Wakes the watcher early. One futex word and a counter: a forked child inherits no waiter queue
/// (the parent's watcher sleeping on it at the fork is in the parent's address space only), so
/// its first kick neither blocks nor wakes a ghost (docs/design.md "Fork").
static KICK: vgpu_core::sync::Event = vgpu_core::sync::Event::new();

/// Wake the watcher now (a sample was started, a context created).
pub fn kick() {
    KICK.notify();
}

/// What the watcher and the launch path share per device (region index).
pub struct Dev {
    /// Limit in percent as last read (region's `sm_limit`, else the configuration's).
    pub limit: AtomicU64,
    /// Burst ceiling in percent as last read (the region extension's `sm_ceiling` word, published
    /// from `CUDA_DEVICE_SM_CEILING` by the first process; 0 = none).
    pub ceiling: AtomicU64,
    /// Limited and enforced (policy / `utilization_switch`).
    pub enforce: AtomicBool,
    /// This process has a context / launched on the device.
    pub active: AtomicBool,
    /// NVML handle of the device, looked up once (0 = not yet, 1 = none).
    nvml_handle: AtomicUsize,
    /// Process-local bucket when the region (or its extension) is unavailable.
    local: Box<DeviceLimiterState>,
    pub ctl: Mutex<Ctl>,
    /// The burst controller's per-process bookkeeping (watcher only; held across its NVML calls,
    /// which is why it is not in `ctl`, which the launch path takes).
    burst: Mutex<burst::Local>,
}

/// Controller state of one device in this process.
pub struct Ctl {
    pub model: CostModel,
    pub corr: Correction,
    /// Our host PID on this device's NVML as the correction last used it (`crate::hostpid` owns
    /// the resolution; a change restarts the correction).
    pub hostpid: Option<u32>,
    /// NVML per-process utilisation: the `lastSeen` to pass next (wall µs) and whether the device
    /// supports it (`None`: not asked yet).
    pub nvml_last_us: u64,
    pub nvml_supported: Option<bool>,
    /// Last `sm_util` written to our slot.
    pub sm_util: Option<u64>,
}

pub struct Compute {
    pub pid: i32,
    pub policy: CorePolicy,
    pub interval_s: u64,
    pub region: Option<&'static Region>,
    pub devs: Vec<Dev>,
    pub kt: KernelTimeRecorder,
    /// The monitor blocks us (recent_kernel < 0) and the policy honours it.
    pub blocked: AtomicBool,
    pub samples: Mutex<samples::Samples>,
    pub watcher: AtomicU32,
    pub stop: AtomicBool,
}

static COMPUTE: AtomicPtr<Compute> = AtomicPtr::new(std::ptr::null_mut());
static INIT: Mutex<()> = Mutex::new(());

/// The per-process compute state, building it (and starting the watcher) on first use.
pub fn get() -> &'static Compute {
    let p = COMPUTE.load(Ordering::Acquire);
    if !p.is_null() {
        return unsafe { &*p };
    }
    init_slow()
}

pub fn try_get() -> Option<&'static Compute> {
    let p = COMPUTE.load(Ordering::Acquire);
    (!p.is_null()).then(|| unsafe { &*p })
}

#[cold]
fn init_slow() -> &'static Compute {
    register_fork_handling();
    let _g = INIT.lock();
    let p = COMPUTE.load(Ordering::Acquire);
    if !p.is_null() {
        return unsafe { &*p };
    }
    let st = state::get();
    let c = Compute {
        pid: st.pid,
        policy: st.config.core_policy,
        interval_s: st.config.record_kernel_interval.max(1),
        region: st.region,
        devs: (0..MAX_DEVICES)
            .map(|d| Dev {
                limit: AtomicU64::new(st.config.sm_limit[d]),
                ceiling: AtomicU64::new(0),
                enforce: AtomicBool::new(false),
                active: AtomicBool::new(false),
                nvml_handle: AtomicUsize::new(0),
                local: words::new_state(),
                ctl: Mutex::new(Ctl {
                    model: CostModel::new(),
                    corr: Correction::new(),
                    hostpid: None,
                    nvml_last_us: 0,
                    nvml_supported: None,
                    sm_util: None,
                }),
                burst: Mutex::new(burst::Local::default()),
            })
            .collect(),
        kt: KernelTimeRecorder::new(),
        blocked: AtomicBool::new(false),
        samples: Mutex::new(samples::Samples::default()),
        watcher: AtomicU32::new(0),
        stop: AtomicBool::new(false),
    };
    let c: &'static Compute = Box::leak(Box::new(c));
    c.refresh_control();
    COMPUTE.store(c as *const Compute as *mut Compute, Ordering::Release);
    watcher::start(c);
    crate::debug!(
        "compute: policy {:?}, limits {:?}, region {}",
        c.policy,
        (0..4).map(|d| c.devs[d].limit.load(Ordering::Relaxed)).collect::<Vec<_>>(),
        c.region.is_some()
    );
    c
}

impl Compute {
    /// The limiter words of region device `d`: the container's in the region extension,
    /// process-local without one.
    pub fn words(&self, d: usize) -> &DeviceLimiterState {
        match self.region.and_then(|r| r.ext()) {
            Some(ext) => &ext.limiter[d],
            None => &self.devs[d].local,
        }
    }

    /// The NVML handle of region device `d` (the watcher's NVML round and the burst step share it).
    pub fn nvml_handle(&self, d: usize) -> Option<nvmlDevice_t> {
        let cell = &self.devs[d].nvml_handle;
        let mut h = cell.load(Ordering::Relaxed);
        if h == 0 {
            h = api::nvml_handle(d).map_or(1, |h| h as usize);
            cell.store(h, Ordering::Relaxed);
        }
        (h != 1).then_some(h as nvmlDevice_t)
    }

    /// Current SM limit of region device `d`: the region's (authoritative once created), else the
    /// configuration's.
    fn read_limit(&self, d: usize) -> u64 {
        match self.region {
            Some(r) => r.sm_limit(d),
            None => state::get().config.sm_limit[d],
        }
    }

    /// Re-reads limits, policy switch and the monitor's block; arms the gate if anything is due.
    pub fn refresh_control(&self) {
        use vgpu_core::limiter::feedback;
        let switch = self.region.map_or(1, |r| r.shared().utilization_switch.load(Ordering::Acquire));
        for (d, dev) in self.devs.iter().enumerate() {
            let lim = self.read_limit(d);
            let old = dev.limit.swap(lim, Ordering::Relaxed);
            let env_ceiling = state::get().config.sm_ceiling[d];
            dev.ceiling.store(vgpu_core::limiter::burst::ceiling_pct(self.words(d), env_ceiling), Ordering::Relaxed);
            if old != lim {
                self.limit_changed(d, old, lim);
            }
            let e = feedback::enforce(self.policy, switch, vgpu_core::limiter::is_limited(lim));
            dev.enforce.store(e, Ordering::Relaxed);
        }
        if let Some(r) = self.region {
            let rk = &r.shared().recent_kernel;
            self.blocked.store(feedback::honours_blocking(self.policy) && feedback::blocked(rk), Ordering::Relaxed);
        }
        if self.gate_needed() {
            arm();
        }
    }

    /// The region's SM limit changed (HAMi's monitor, `vgpu-smi set-limit`, another process):
    /// the bucket's rate follows at the next admission (it reads `limit`); a lower cap applies to
    /// the balance at once, and the burst rate restarts from the new guarantee.
    fn limit_changed(&self, d: usize, old: u64, new: u64) {
        let w = self.words(d);
        if let Some(p) = vgpu_core::limiter::bucket::Params::for_limit(new) {
            w.balance_ns.fetch_min(p.cap_ns, Ordering::AcqRel);
            w.rate_ppm.store(p.rate_ppm, Ordering::Relaxed);
            w.cap_ns.store(p.cap_ns as u64, Ordering::Relaxed);
            w.generation.fetch_add(1, Ordering::AcqRel);
        }
        w.burst_rate_ppm.store(0, Ordering::Relaxed);
        crate::debug!("compute: device {d}: SM limit {old} -> {new}");
    }

    /// Bucket parameters of device `d` now: the limit's, or the burst controller's rate.
    pub fn params(&self, d: usize) -> Option<vgpu_core::limiter::bucket::Params> {
        use vgpu_core::limiter::bucket::Params;
        let lim = burst::limits(self, d)?;
        Some(Params::for_rate(vgpu_core::limiter::burst::effective_rate(self.words(d), lim)))
    }

    /// What the slow path leaves armed after a launch.
    fn gate_needed(&self) -> bool {
        use vgpu_core::limiter::feedback;
        if self.devs.iter().any(|d| d.enforce.load(Ordering::Relaxed)) || self.blocked.load(Ordering::Relaxed) {
            return true;
        }
        match self.region {
            Some(r) => feedback::needs_mark(&r.shared().recent_kernel) || self.kt.due(now_unix_s()),
            None => false,
        }
    }

    /// Region index of a CUDA ordinal.
    pub fn region_index(&self, ordinal: CUdevice) -> usize {
        state::get().region_index(ordinal).min(MAX_DEVICES - 1)
    }
}

pub fn now_unix_s() -> u64 {
    wall_ns() / 1_000_000_000
}

// ---- hooks called by the rest of the shim (context.rs, lib.rs) ----------------------------

/// A context came up on CUDA ordinal `ordinal` (a hooked creation or retain succeeded): the
/// device is active for the watcher, which is woken to resolve our host PID there.
pub fn context_up(ordinal: CUdevice) {
    crate::guard::ffi("compute::context_up", (), || {
        let c = get();
        c.devs[c.region_index(ordinal)].active.store(true, Ordering::Relaxed);
        kick();
    })
}

/// A context was destroyed: forget its timing events (they died with it).
pub fn ctx_destroyed(ctx: CUcontext) {
    if let Some(c) = try_get() {
        c.samples.lock().forget_ctx(c, ctx as usize);
    }
}

/// Every context of CUDA ordinal `dev` may be gone (primary reset or last release).
pub fn device_ctx_gone(dev: CUdevice) {
    if let Some(c) = try_get() {
        c.samples.lock().forget_ordinal(c, dev);
    }
}

/// In a forked child (atfork child handler, one thread): the parent's contexts, events, samples
/// and watcher do not exist here. The whole `Compute` is abandoned (leaked: its locks may be
/// held by threads that are not in this process) and rebuilt on first use, with a new watcher.
pub fn fork_child() {
    let _abandoned = COMPUTE.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: atfork child handler; the forking thread was not inside `init_slow` (fork is
    // called by the application, not from within the shim).
    unsafe { INIT.force_unlock_in_child() };
    GATE.store(true, Ordering::Relaxed);
}

/// Registers [`fork_child`] once per process image (a forked child inherits the registration),
/// before the first build takes `INIT`, so a fork that sees `INIT` held always runs it. An
/// atomic, not a `Once`: a child never waits for a registration a parent thread was running.
fn register_fork_handling() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if !DONE.swap(true, Ordering::AcqRel) {
        extern "C" fn on_fork_child() {
            fork_child();
        }
        // SAFETY: registers a plain `extern "C"` function with no arguments, as glibc expects.
        unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
    }
}
