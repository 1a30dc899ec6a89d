//! Host GPU samples for the node agent (docs/agent.md "Host GPU metrics"): a process that has
//! NVML initialised anyway publishes what NVML reports for each whole physical device (memory
//! used/total as the driver counts it, not the container's view our hooks present; utilisation;
//! UUID; in-container index; name) into `host-gpu.samples` beside its region file
//! (`vgpu_core::hostsample`). Runs from the housekeeping thread: once per [`PERIOD`] for the whole
//! container (`slots::take_host_sample_turn`), never loading or initialising NVML, a failure
//! logged once and otherwise ignored.

use crate::driver;
use crate::ffi::*;
use std::ffi::{CStr, c_char, c_uint, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::Duration;
use vgpu_core::hostsample::{self, DeviceSample};
use vgpu_core::region::MAX_DEVICES;
use vgpu_core::regionfile::Region;
use vgpu_core::slots;

/// One publication per container per period (the agent drops a sample after 30 s).
pub const PERIOD: Duration = Duration::from_secs(5);

/// This process's next own due time (CLOCK_MONOTONIC ns): the turn in the region's extension
/// spaces the container's publications; this spaces ours where a region has no extension.
static NEXT_OWN: AtomicU64 = AtomicU64::new(0);

/// Publishes the sample when it is this process's turn. Cheap when not due: one atomic load.
pub fn tick(region: &Region) {
    let now = crate::clock::mono_ns();
    if now < NEXT_OWN.load(Ordering::Relaxed) || !driver::nvml_up() {
        return;
    }
    let period = PERIOD.as_nanos() as u64;
    if !slots::take_host_sample_turn(region, now, period) {
        return;
    }
    NEXT_OWN.store(now.saturating_add(period), Ordering::Relaxed);
    let Some(dir) = region.path().parent() else { return };
    let Some(devices) = read_devices() else {
        // NVML shut down by the application, say: leave the turn to a process whose NVML answers.
        slots::return_host_sample_turn(region, now, period);
        crate::once!(info, "host GPU sample not published: NVML does not answer the device queries");
        return;
    };
    let at_ms = crate::clock::wall_ns() / 1_000_000;
    let text = hostsample::render(at_ms, &devices);
    if let Err(e) = vgpu_core::secure::as_caller(|| hostsample::publish(dir, &text)) {
        crate::once!(
            warn,
            "cannot publish the host GPU sample in {} ({e}): the node agent reports no host GPU metrics from this process",
            dir.display()
        );
    }
}

type GetNameFn = unsafe extern "C" fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;

/// `nvmlDeviceGetName` of the real NVML (not hooked, prototype as nvml.h).
fn get_name() -> Option<GetNameFn> {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = driver::resolve(&SLOT, &crate::dl::LIBNVML, c"nvmlDeviceGetName");
    // SAFETY: NVML's symbol of this name has exactly this signature (nvml.h).
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, GetNameFn>(p) })
}

/// A NUL-terminated string NVML wrote into `buf`.
fn text(buf: &[c_char]) -> String {
    // SAFETY: `buf` is a slice of `c_char`, read as bytes of the same length.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
    CStr::from_bytes_until_nul(bytes).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Every device NVML lists in this container, from the driver's own functions (never our
/// hooks): a device that does not answer every query is left out; None if none answers.
fn read_devices() -> Option<Vec<DeviceSample>> {
    let count = driver::nvmlDeviceGetCount_v2()?;
    let by_index = driver::nvmlDeviceGetHandleByIndex_v2()?;
    let uuid_of = driver::nvmlDeviceGetUUID()?;
    let memory_of = driver::nvmlDeviceGetMemoryInfo()?;
    let util_of = driver::nvmlDeviceGetUtilizationRates()?;
    let name_of = get_name();
    let mut n: c_uint = 0;
    // SAFETY: NVML's function with a pointer to a local.
    if unsafe { count(&mut n) } != NVML_SUCCESS {
        return None;
    }
    let mut out = Vec::new();
    for i in 0..n.min(MAX_DEVICES as c_uint) {
        let mut h: nvmlDevice_t = std::ptr::null_mut();
        let mut uuid = [0 as c_char; 96];
        let mut mem = nvmlMemory_t { total: 0, free: 0, used: 0 };
        let mut util = nvmlUtilization_t { gpu: 0, memory: 0 };
        // SAFETY: NVML's functions with the handle it returned and out-pointers to locals of the
        // sizes passed.
        let ok = unsafe {
            by_index(i, &mut h) == NVML_SUCCESS
                && uuid_of(h, uuid.as_mut_ptr(), uuid.len() as c_uint) == NVML_SUCCESS
                && memory_of(h, &mut mem) == NVML_SUCCESS
                && util_of(h, &mut util) == NVML_SUCCESS
        };
        if !ok {
            continue;
        }
        let mut name = [0 as c_char; 96];
        // SAFETY: as above; a name is optional (empty when NVML does not give one).
        let named = name_of.is_some_and(|f| unsafe { f(h, name.as_mut_ptr(), name.len() as c_uint) } == NVML_SUCCESS);
        out.push(DeviceSample {
            uuid: text(&uuid),
            index: i,
            used: mem.used,
            total: mem.total,
            util: util.gpu,
            name: if named { text(&name) } else { String::new() },
        });
    }
    (!out.is_empty()).then_some(out)
}
