//! The one lazily built global state of a process (bytehound-style): configuration, the usage
//! region and our slot in it, the ledger and allocation tables, the device mapping.
//!
//! Built on the first hooked call that needs it, never in a constructor, so a process that does
//! not use CUDA or NVML creates no file and starts no thread. After `fork` the child forgets the
//! parent's state (leaking it: the parent still owns it) and builds its own, with its own slot.

mod housekeeping;

use crate::devices::{self, DeviceMap};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU8, AtomicU64, Ordering};
use vgpu_core::config::Config;
use vgpu_core::ledger::{AllocTable, Ledger, Seat};
use vgpu_core::region::MAX_DEVICES;
use vgpu_core::regionfile::{Region, RegionInit};
use vgpu_core::sync::Mutex;

pub struct State {
    pub config: Config,
    pub region: Option<&'static Region>,
    pub ledger: Ledger<'static>,
    /// Device pointers we counted (cuMemAlloc*, managed, async).
    pub allocs: AllocTable,
    /// VMM handles, arrays and created contexts we counted, keyed by handle value.
    pub handles: AllocTable,
    /// Allocations `CUDA_OVERSUBSCRIBE` served from managed memory: never counted, but part of
    /// the driver's per-process figure ([`State::spilled_on`]).
    pub spilled: AllocTable,
    /// Per region device: bytes of spills under way (the managed allocation made or being made,
    /// not yet in `spilled`).
    pub spilling: [AtomicU64; MAX_DEVICES],
    pub pid: i32,
    /// The container's region could not be opened for lack of a resource (descriptors, memory,
    /// space): what the container uses is unknown, so device memory (allocations and contexts)
    /// is refused rather than governed per process.
    pub closed: bool,
    devices: OnceLock<DeviceMap>,
    /// Mapping used before the driver can answer (not cached in `devices`).
    fallback_devices: OnceLock<DeviceMap>,
    /// Primary-context retain counts per CUDA ordinal, and what each charged.
    pub primary_refs: [AtomicI32; MAX_DEVICES],
    pub primary_bytes: [AtomicU64; MAX_DEVICES],
    /// Handle of each device's primary context (to release what dies with it).
    pub primary_ctx: [AtomicU64; MAX_DEVICES],
    /// Mappings of counted VMM handles (memory stays allocated until released AND unmapped).
    pub vmm: Mutex<vgpu_core::vmm::VmmBook>,
}

const UNINIT: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;
/// Building the state panicked (an internal error): every later call that needs the state fails
/// with its API's error code (the export's guard), on every thread, until the process forks or
/// exits. Nothing is then allocated or launched ungoverned, and nothing waits.
const FAILED: u8 = 3;

static PHASE: AtomicU8 = AtomicU8::new(UNINIT);
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());

/// The process state, building it on first use.
pub fn get() -> &'static State {
    if PHASE.load(Ordering::Acquire) == READY {
        return unsafe { &*STATE.load(Ordering::Acquire) };
    }
    init_slow()
}

/// The state if it has been built (for paths that must not trigger initialisation).
pub fn try_get() -> Option<&'static State> {
    if PHASE.load(Ordering::Acquire) == READY { Some(unsafe { &*STATE.load(Ordering::Acquire) }) } else { None }
}

#[cold]
fn init_slow() -> &'static State {
    loop {
        match PHASE.compare_exchange(UNINIT, BUSY, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                let built = std::panic::catch_unwind(build);
                let Ok(built) = built else {
                    // The waiters must not wait for a state that will never come.
                    PHASE.store(FAILED, Ordering::Release);
                    crate::error!(
                        "internal error (panic) while setting up the GPU governor: every CUDA/NVML call of this process now fails"
                    );
                    unavailable();
                };
                let s: &'static State = Box::leak(Box::new(built));
                STATE.store(s as *const State as *mut State, Ordering::Release);
                PHASE.store(READY, Ordering::Release);
                register_process_hooks();
                housekeeping::start(s);
                return s;
            }
            Err(READY) => return unsafe { &*STATE.load(Ordering::Acquire) },
            Err(FAILED) => unavailable(),
            // Another thread is building it: wait without spinning hot.
            Err(_) => std::thread::sleep(std::time::Duration::from_micros(200)),
        }
    }
}

/// No state and none to come: unwind to the export's guard, which answers with its API's error
/// code. `resume_unwind` skips the panic hook and the guard does not log `Refused`: the one line
/// was written when the build failed.
fn unavailable() -> ! {
    std::panic::resume_unwind(Box::new(crate::guard::Refused))
}

fn build() -> State {
    crate::faults::maybe_panic("build_panic");
    apply_override_env();
    let secure = vgpu_core::secure::at_secure();
    let config = if secure {
        Config::from_sources(&vgpu_core::secure::SecureSources(&vgpu_core::config::SystemSources))
    } else {
        Config::from_system()
    };
    crate::log::set_level(config.log_level);
    for w in &config.warnings {
        crate::warn!("{}={:?}: {}", w.variable, w.value, w.action);
    }
    if secure {
        for v in vgpu_core::secure::ignored_variables(&vgpu_core::config::SystemSources) {
            crate::warn!(
                "{v} ignored: a set-user-ID or set-group-ID program takes no path from its environment (region {})",
                config.region_path.display()
            );
        }
    }
    let pid = std::process::id() as i32;
    // A setuid program creates and opens region files as its caller (vgpu_core::secure).
    let (region, ledger, closed) = vgpu_core::secure::as_caller(|| attach_region(&config, pid));
    crate::info!(
        "initialised: region={} slot={} memory limits={:?} sm limits={:?}",
        config.region_path.display(),
        ledger.has_slot(),
        &config.memory_limit[..4],
        &config.sm_limit[..4]
    );
    State {
        config,
        region,
        ledger,
        allocs: AllocTable::new(),
        handles: AllocTable::new(),
        spilled: AllocTable::new(),
        spilling: Default::default(),
        pid,
        closed,
        devices: OnceLock::new(),
        fallback_devices: OnceLock::new(),
        primary_refs: Default::default(),
        primary_bytes: Default::default(),
        primary_ctx: Default::default(),
        vmm: Mutex::new(Default::default()),
    }
}

/// The region and ledger, and whether device memory must be refused (`State::closed`).
fn attach_region(config: &Config, pid: i32) -> (Option<&'static Region>, Ledger<'static>, bool) {
    let _ = vgpu_core::regionpath::ensure_kai_dir(&config.region_path);
    use vgpu_core::regionplace::{Placed, fallback_paths, open_placed};
    let fallbacks = fallback_paths(&config.region_path, unsafe { libc::getuid() });
    let placed = match open_placed(&config.region_path, &RegionInit::from_config(config), &fallbacks, pid) {
        Placed::Configured(region, report) => Ok((region, report)),
        Placed::Fallback { region, report, cause } => {
            match cause {
                Some(e) => crate::error!(
                    "{e}; this container's processes share the fallback region {} instead (the memory limit holds across them; the node monitor does not see it)",
                    region.path().display()
                ),
                None => crate::warn!(
                    "live processes of this container use the fallback region {}: joining them instead of {}",
                    region.path().display(),
                    config.region_path.display()
                ),
            }
            Ok((region, report))
        }
        Placed::Nowhere(e, others) => Err((e, others)),
    };
    match placed {
        Ok((region, report)) => {
            vgpu_core::counters::init(region.ext());
            for n in &report.notes {
                crate::info!("{n}");
            }
            for w in &report.warnings {
                crate::warn!("{w}");
            }
            if report.created {
                warn_if_created_unlimited(&region, config);
            }
            let region: &'static Region = region.leak();
            let (ledger, err) = Ledger::attach(region, pid);
            match (ledger.seat(), err) {
                (Seat::Overflow(i), _) => crate::warn!(
                    "process slot table of {} full: this process is counted in overflow record {i} (every process of the container still sees it; HAMi's monitor does not)",
                    config.region_path.display()
                ),
                (Seat::Local, Some(e)) => crate::error!(
                    "no process slot in {}: {e}; this process's usage is counted locally and still limited",
                    config.region_path.display()
                ),
                _ => {}
            }
            (Some(region), ledger, false)
        }
        Err((e, others)) if e.lacks_resource() || others.iter().any(|e| e.lacks_resource()) => {
            let why: Vec<String> = std::iter::once(&e).chain(&others).map(|e| e.to_string()).collect();
            crate::error!(
                "cannot open this container's usage region for lack of a system resource ({}): device memory is refused in this process (CUDA_ERROR_OUT_OF_MEMORY) rather than governed without the other processes' usage",
                why.join("; ")
            );
            (None, Ledger::local(), true)
        }
        Err((e, others)) => {
            let why: Vec<String> = others.iter().map(|e| e.to_string()).collect();
            let fallback = if why.is_empty() {
                "the region is busy, not unusable, so no fallback was tried".to_string()
            } else {
                format!("no shared fallback region either ({})", why.join("; "))
            };
            crate::error!("{e}; {fallback}: the memory limit is now enforced per process, not across the container");
            (None, Ledger::local(), false)
        }
    }
}

/// Periodic region upkeep, off the hot path (every ~250 ms from a shim thread): the region's path
/// still names our region, else it is linked back (vgpu_core::regionplace; docs/design.md "Where the region lives").
pub fn region_tick() {
    use vgpu_core::regionplace::Published;
    let Some(r) = try_get().and_then(|s| s.region) else { return };
    match vgpu_core::secure::as_caller(|| r.republish()) {
        Published::Relinked => crate::warn!(
            "region file {} had been deleted: linked it back (same region, no usage lost)",
            r.path().display()
        ),
        Published::Copied => crate::error!(
            "region file {} was deleted with every link to it: published a copy (this container's usage as of now) so that processes started from now on still count it; \
             later changes are not shared between this process and them, so the container limit is split",
            r.path().display()
        ),
        Published::Lost => crate::once!(
            error,
            "region file {} was deleted with every link to it: processes started from now on cannot see this process's usage, so the container limit is split",
            r.path().display()
        ),
        Published::Replaced => crate::once!(
            error,
            "region path {} now holds a different region file: this process's usage is not counted there, so the container limit is split",
            r.path().display()
        ),
        Published::Yes | Published::Unknown => {}
    }
}

/// A region created without any memory limit makes every process of the container unlimited.
/// If PID 1's environment (the device plugin's) has a limit, the creator's environment lost it:
/// say so (docs/configuration.md).
fn warn_if_created_unlimited(region: &Region, config: &Config) {
    if (0..MAX_DEVICES).any(|d| region.limit(d) != 0) {
        return;
    }
    let Some(pid1) = vgpu_core::config::pid1_memory_limits(&vgpu_core::config::SystemSources) else { return };
    if let Some(d) = (0..MAX_DEVICES).find(|&d| pid1[d] != 0) {
        crate::warn!(
            "region {} created without a memory limit, but the container's PID 1 environment limits device {d} to {} bytes: \
             this process's environment ({:?}) has no CUDA_DEVICE_MEMORY_LIMIT, so the whole container is unlimited until the region is recreated",
            config.region_path.display(),
            pid1[d],
            config.origin
        );
    }
}

/// `/overrideEnv` (docs/hami-contract.md §1.5): applied before the configuration is read.
fn apply_override_env() {
    let pairs = vgpu_core::config::read_override_env(&vgpu_core::config::SystemSources);
    for (k, v) in pairs {
        if let (Ok(k), Ok(v)) = (std::ffi::CString::new(k), std::ffi::CString::new(v)) {
            unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 1) };
        }
    }
}

impl State {
    /// What the driver may hold on region device `dev` for this process's `CUDA_OVERSUBSCRIBE`
    /// spills (with their rounding to the driver's granule): not counted by design, so neither
    /// the reconciliation nor a context's measurement may charge it.
    pub fn spilled_on(&self, dev: usize) -> u64 {
        // Under way first: a spill leaves it only after entering the table.
        let spilling = self.spilling.get(dev).map_or(0, |s| s.load(Ordering::SeqCst));
        let round =
            |r: &vgpu_core::ledger::AllocRecord| r.bytes.saturating_add(vgpu_core::reconcile::rounding(r.bytes));
        spilling.saturating_add(self.spilled.sum_on(dev, round))
    }

    /// Memory limit of a region device: the region's live value (the monitor may own it), else
    /// the configuration's.
    pub fn configured_limit(&self, dev: usize) -> u64 {
        match self.region {
            Some(r) => r.limit(dev),
            None => self.config.memory_limit.get(dev).copied().unwrap_or(0),
        }
    }

    /// The limit allocations on a region device are refused against: the configured one, unless
    /// the driver enforces its own there (`driver_limit`).
    pub fn memory_limit(&self, dev: usize) -> u64 {
        crate::driver_limit::enforced(dev, self.configured_limit(dev))
    }

    /// The limit the views of a region device report: the driver's where it enforces one, else
    /// the configured one.
    pub fn view_limit(&self, dev: usize) -> u64 {
        crate::driver_limit::shown(dev, self.configured_limit(dev))
    }

    /// The device mapping, built once the driver can answer (after `cuInit`).
    pub fn devices(&self) -> &DeviceMap {
        if let Some(m) = self.devices.get() {
            return m;
        }
        let cuda = devices::cuda_uuids();
        let Some(cuda) = cuda else {
            // Driver not initialised yet: answer with the fallback without caching it.
            return self
                .fallback_devices
                .get_or_init(|| devices::build(None, None, self.config.visible_devices.as_deref()));
        };
        let nvml = devices::nvml_uuids();
        let map = devices::build(Some(&cuda), nvml.as_deref(), self.config.visible_devices.as_deref());
        if let Some(r) = self.region {
            let uuids: Vec<&str> = map.region_uuids.iter().map(String::as_str).collect();
            if !uuids.is_empty() && r.shared().device_num.load(Ordering::Acquire) == 0 {
                r.set_devices(&uuids);
            }
        }
        crate::debug!("device map: cuda→region {:?}, uuids {:?}", map.cuda_to_region, map.region_uuids);
        self.devices.get_or_init(|| map)
    }

    /// Fill `device_num`/`uuids` from NVML if the region does not have them yet.
    pub fn publish_nvml_devices(&self) {
        let Some(r) = self.region else { return };
        if r.shared().device_num.load(Ordering::Acquire) != 0 {
            return;
        }
        if let Some(uuids) = devices::nvml_uuids() {
            let u: Vec<&str> = uuids.iter().map(String::as_str).collect();
            r.set_devices(&u);
        }
    }

    /// Region index of a CUDA ordinal.
    pub fn region_index(&self, ordinal: i32) -> usize {
        self.devices().region_index(ordinal)
    }
}

fn register_process_hooks() {
    static DONE: AtomicU8 = AtomicU8::new(0);
    if DONE.swap(1, Ordering::AcqRel) != 0 {
        return;
    }
    unsafe {
        libc::atexit(on_exit);
        libc::pthread_atfork(None, None, Some(on_fork_child));
    }
}

/// Give our slot back so the monitor stops counting us (SIGKILL skips this: the next sweep of
/// any process of the container frees the slot of a dead owner).
extern "C" fn on_exit() {
    if let Some(s) = try_get() {
        s.ledger.detach();
    }
}

/// The child owns none of the parent's allocations or slot: forget the state (leaked, the parent
/// still uses its copy) so the child builds its own lazily. Runs on the only thread of the child,
/// which was not inside the shim (the application forked), so every lock held at the fork belongs
/// to a thread that does not exist here: per-process objects are abandoned, never locked
/// (docs/design.md "Fork").
extern "C" fn on_fork_child() {
    vgpu_core::regionfile::after_fork_in_child();
    if let Some(old) = try_get()
        && let Some(r) = old.region
    {
        // Drop our copy of the parent's lock description: if the parent died holding the
        // lock, an inherited descriptor would keep it held for as long as we live.
        let _ = vgpu_core::secure::as_caller(|| r.reopen_after_fork());
    }
    STATE.store(std::ptr::null_mut(), Ordering::Release);
    PHASE.store(UNINIT, Ordering::Release);
}
