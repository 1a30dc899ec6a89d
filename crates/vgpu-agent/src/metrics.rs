//! `/metrics`: HAMi's vGPU monitor's families with its names, labels and values
//! (`cmd/vGPUmonitor/metrics.go`, docs/hami-contract.md §4.4), read from the regions at scrape
//! time, plus libvgpu's own `vgpu_*` families. All carry the monitor's const label `zone="vGPU"`.
//!
//! Pod and namespace names come from the last pod list of this node; a container whose pod is not
//! (yet) known, or every container while the API server is unreachable, is reported with
//! `namespace=""` and `pod=<pod UID>` (the directory name's first part).

use crate::agent::{Agent, Opened};
use crate::feedback::Field;
use prometheus::{CounterVec, Encoder, GaugeVec, Opts, Registry, TextEncoder};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use vgpu_core::counters;
use vgpu_core::noderegion::{Access, Depth, SkipReason, Version};
use vgpu_core::region::{EXT_MAGIC, EXT_OFFSET, EXT_SIZE, EXT_VERSION, FILE_SIZE, MAX_DEVICES, RegionExt};

const CTR: [&str; 5] = ["namespace", "pod", "container", "vdevice_index", "device_uuid"];
const LEGACY_CTR: [&str; 5] = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid"];

struct Families {
    reg: Registry,
}

impl Families {
    fn new() -> Families {
        let labels = HashMap::from([("zone".to_string(), "vGPU".to_string())]);
        Families { reg: Registry::new_custom(None, Some(labels)).expect("valid const label") }
    }
    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
        self.reg.register(Box::new(g.clone())).expect("unique metric");
        g
    }
    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> CounterVec {
        let c = CounterVec::new(Opts::new(name, help), labels).expect("valid metric");
        self.reg.register(Box::new(c.clone())).expect("unique metric");
        c
    }
}

/// HAMi's per-container families (new names, and the legacy ones when asked).
struct HamiFamilies {
    used: GaugeVec,
    limit: GaugeVec,
    device_memory: GaugeVec,
    utilization: GaugeVec,
    last_kernel: GaugeVec,
    context: GaugeVec,
    module: GaugeVec,
    buffer: GaugeVec,
    legacy: Option<[GaugeVec; 5]>,
}

impl HamiFamilies {
    fn new(f: &Families, legacy: bool) -> HamiFamilies {
        HamiFamilies {
            used: f.gauge("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes", &CTR),
            limit: f.gauge("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes", &CTR),
            device_memory: f.gauge(
                "hami_container_device_memory_bytes",
                "Container device memory usage in bytes",
                &CTR,
            ),
            utilization: f.gauge(
                "hami_container_device_utilization_ratio",
                "Container device SM utilization ratio",
                &CTR,
            ),
            last_kernel: f.gauge(
                "hami_container_last_kernel_elapsed_seconds",
                "Seconds since last kernel execution in container",
                &CTR,
            ),
            context: f.gauge("hami_vgpu_memory_context_bytes", "Container device memory context size in bytes", &CTR),
            module: f.gauge("hami_vgpu_memory_module_bytes", "Container device memory module size in bytes", &CTR),
            buffer: f.gauge("hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes", &CTR),
            legacy: legacy.then(|| {
                let mut mem = LEGACY_CTR.to_vec();
                mem.extend(["context", "module", "data", "offset"]);
                [
                    f.gauge("vGPU_device_memory_usage_in_bytes", "vGPU device usage", &LEGACY_CTR),
                    f.gauge("vGPU_device_memory_limit_in_bytes", "vGPU device limit", &LEGACY_CTR),
                    f.gauge("Device_memory_desc_of_container", "Container device memory description", &mem),
                    f.gauge(
                        "Device_utilization_desc_of_container",
                        "Container device utilization description",
                        &LEGACY_CTR,
                    ),
                    f.gauge("Device_last_kernel_of_container", "Container device last kernel description", &LEGACY_CTR),
                ]
            }),
        }
    }
}

/// libvgpu's per-device families (the counters `vgpu-smi` shows).
struct OwnFamilies {
    processes: GaugeVec,
    sm_limit: GaugeVec,
    share: GaugeVec,
    refusals: CounterVec,
    refused_bytes: CounterVec,
    throttled: CounterVec,
    throttled_launches: CounterVec,
    blocked: CounterVec,
    swept: CounterVec,
    sweeps: CounterVec,
    blocked_now: GaugeVec,
    switch: GaugeVec,
    unusable: GaugeVec,
}

impl OwnFamilies {
    fn new(f: &Families) -> OwnFamilies {
        let ctr = ["namespace", "pod", "container"];
        OwnFamilies {
            processes: f.gauge("vgpu_processes", "Live process slots of the container's region", &ctr),
            sm_limit: f.gauge("vgpu_sm_limit_percent", "SM limit of the device, percent", &CTR),
            share: f.gauge(
                "vgpu_sm_share_ratio",
                "Measured SM share of the device used by the container over the last seconds (0-1)",
                &CTR,
            ),
            refusals: f.counter(
                "vgpu_allocation_refusals_total",
                "Device allocations refused by the memory limit",
                &CTR,
            ),
            refused_bytes: f.counter(
                "vgpu_allocation_refused_bytes_total",
                "Bytes of device allocations refused by the memory limit",
                &CTR,
            ),
            throttled: f.counter("vgpu_throttled_seconds_total", "Time kernel launches waited for the SM limit", &CTR),
            throttled_launches: f.counter(
                "vgpu_throttled_launches_total",
                "Kernel launches that waited for the SM limit",
                &CTR,
            ),
            blocked: f.counter(
                "vgpu_blocked_seconds_total",
                "Time kernel launches waited on the monitor's block (recent_kernel < 0)",
                &CTR,
            ),
            swept: f.counter("vgpu_swept_slots_total", "Dead processes' slots freed by the library's sweeps", &ctr),
            sweeps: f.counter("vgpu_sweeps_total", "Sweeps that freed at least one slot", &ctr),
            blocked_now: f.gauge("vgpu_blocked_by_monitor", "1 while recent_kernel < 0 (launches blocked)", &ctr),
            switch: f.gauge("vgpu_utilization_switch", "The region's utilization_switch (1 = SM limit enforced)", &ctr),
            unusable: f.gauge(
                "vgpu_region_unusable",
                "1 for a container directory whose region file is skipped, with the reason",
                &["pod_uid", "container", "reason"],
            ),
        }
    }
}

/// Our extension block of a v1 region made by libvgpu, if present.
fn read_ext(o: &Opened) -> Option<Box<[u64; EXT_SIZE / 8]>> {
    if o.layout.version != Version::V1 || o.fd.size() < FILE_SIZE as u64 {
        return None;
    }
    let mut b = Box::new([0u64; EXT_SIZE / 8]);
    // SAFETY: u64 storage viewed as bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<u8>(), EXT_SIZE) };
    o.fd.read_exact_at(EXT_OFFSET as u64, bytes).ok()?;
    Some(b)
}

fn as_ext(b: &[u64; EXT_SIZE / 8]) -> &RegionExt {
    // SAFETY: EXT_SIZE bytes, 8-aligned; RegionExt is all atomics (any bit pattern is valid).
    unsafe { &*b.as_ptr().cast::<RegionExt>() }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A measured share older than this is not reported (as `vgpu-smi`).
const SHARE_FRESH_NS: u64 = 10_000_000_000;

/// The whole exposition text of one scrape.
pub fn render(agent: &Agent, legacy: bool, scratch: &mut Vec<u8>) -> String {
    let f = Families::new();
    let hami = HamiFamilies::new(&f, legacy);
    let own = OwnFamilies::new(&f);
    let pods = agent.pods.lock().unwrap_or_else(|p| p.into_inner()).pods.as_ref().map(|(m, _)| m.clone());
    let now = now_unix();
    let mono = monotonic_ns();
    for d in agent.dirs() {
        let o = match agent.open(&d, Access::Read, Depth::Usage, scratch) {
            Ok(Some(o)) => o,
            Ok(None) => continue,
            Err(s) => {
                own.unusable.with_label_values(&[&d.pod_uid, &d.container, s.reason.label()]).set(1.0);
                continue;
            }
        };
        let (ns, pod) = match pods.as_ref().and_then(|m| m.get(&d.pod_uid)) {
            Some(p) => (p.namespace.as_str(), p.name.as_str()),
            None => ("", d.pod_uid.as_str()),
        };
        let s = &o.summary;
        let c3 = [ns, pod, d.container.as_str()];
        own.processes.with_label_values(&c3).set(f64::from(s.processes));
        own.blocked_now.with_label_values(&c3).set(if s.recent_kernel < 0 { 1.0 } else { 0.0 });
        own.switch.with_label_values(&c3).set(f64::from(s.utilization_switch));
        let ext_buf = read_ext(&o);
        let ext = ext_buf.as_deref().map(as_ext).filter(|e| {
            e.ext_magic.load(Ordering::Relaxed) == EXT_MAGIC && e.ext_version.load(Ordering::Relaxed) == EXT_VERSION
        });
        let ctrs = ext.and_then(counters::read);
        if let Some(c) = &ctrs {
            own.swept.with_label_values(&c3).inc_by(c.swept_slots as f64);
            own.sweeps.with_label_values(&c3).inc_by(c.sweeps as f64);
        }
        let sm_limits = read_sm_limits(&o);
        let device_num = s.device_num.min(MAX_DEVICES as u64) as usize;
        for i in 0..device_num {
            let Some(uuid) = s.uuid_label(i) else { continue };
            let idx = i.to_string();
            let l = [ns, pod, d.container.as_str(), idx.as_str(), uuid.as_str()];
            let u = &s.used[i];
            hami.used.with_label_values(&l).set(u.total as f64);
            hami.limit.with_label_values(&l).set(s.limit[i] as f64);
            hami.device_memory.with_label_values(&l).set(u.total as f64);
            hami.utilization.with_label_values(&l).set(u.sm_util as f64);
            hami.context.with_label_values(&l).set(u.context as f64);
            hami.module.with_label_values(&l).set(u.module as f64);
            hami.buffer.with_label_values(&l).set(u.data as f64);
            let lkt = s.last_kernel_time as i64;
            let elapsed = (lkt > 0).then(|| (now - lkt).max(0) as f64);
            if let Some(e) = elapsed {
                hami.last_kernel.with_label_values(&l).set(e);
            }
            if let Some([used, limit, mem, util, last]) = &hami.legacy {
                used.with_label_values(&l).set(u.total as f64);
                limit.with_label_values(&l).set(s.limit[i] as f64);
                let offset = u.total.wrapping_sub(u.context).wrapping_sub(u.module).wrapping_sub(u.data);
                let (c, m, dd, off) =
                    (u.context.to_string(), u.module.to_string(), u.data.to_string(), offset.to_string());
                let mut ml = l.to_vec();
                ml.extend([c.as_str(), m.as_str(), dd.as_str(), off.as_str()]);
                mem.with_label_values(&ml).set(u.total as f64);
                util.with_label_values(&l).set(u.sm_util as f64);
                if let Some(e) = elapsed {
                    last.with_label_values(&l).set(e);
                }
            }
            if let Some(v) = sm_limits.get(i) {
                own.sm_limit.with_label_values(&l).set(*v as f64);
            }
            if let Some(e) = ext {
                let lim = &e.limiter[i];
                let stamp = lim.share_stamp_ns.load(Ordering::Relaxed);
                if stamp != 0 && mono >= stamp && mono - stamp <= SHARE_FRESH_NS {
                    own.share.with_label_values(&l).set(lim.share_ppm.load(Ordering::Relaxed) as f64 / 1e6);
                }
            }
            if let Some(c) = ctrs.as_ref().and_then(|c| c.devices.get(i)) {
                own.refusals.with_label_values(&l).inc_by(c.refusals as f64);
                own.refused_bytes.with_label_values(&l).inc_by(c.refused_bytes as f64);
                own.throttled.with_label_values(&l).inc_by(c.throttled_ns as f64 / 1e9);
                own.throttled_launches.with_label_values(&l).inc_by(c.throttled_launches as f64);
                own.blocked.with_label_values(&l).inc_by(c.blocked_ns as f64 / 1e9);
            }
        }
    }
    agent_families(&f, agent, pods.is_some());
    let mut out = Vec::new();
    let _ = TextEncoder::new().encode(&f.reg.gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// `sm_limit[d]` of a v1 region (v0 has it at a layout offset the monitor never reads).
fn read_sm_limits(o: &Opened) -> Vec<u64> {
    if o.layout.version != Version::V1 {
        return Vec::new();
    }
    let mut b = [0u8; 8 * MAX_DEVICES];
    if o.fd.read_exact_at(1728, &mut b).is_err() {
        return Vec::new();
    }
    b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn agent_families(f: &Families, agent: &Agent, have_pods: bool) {
    let st = agent.stats.lock().unwrap_or_else(|p| p.into_inner());
    let up = agent.pods.lock().unwrap_or_else(|p| p.into_inner()).up;
    f.counter("vgpu_agent_feedback_passes_total", "Passes of the feedback loop (discovery, GC, stores)", &[])
        .with_label_values::<&str>(&[])
        .inc_by(st.passes as f64);
    let stores =
        f.counter("vgpu_agent_feedback_stores_total", "Control words written by the feedback loop", &["field"]);
    for fld in [Field::RecentKernel, Field::UtilizationSwitch] {
        stores.with_label_values(&[fld.label()]).inc_by(*st.stores.get(&fld).unwrap_or(&0) as f64);
    }
    let skips = f.counter(
        "vgpu_agent_region_skips_total",
        "Region files skipped (by feedback passes and scrapes), by reason",
        &["reason"],
    );
    for r in SkipReason::ALL {
        skips.with_label_values(&[r.label()]).inc_by(*st.skips.get(&r).unwrap_or(&0) as f64);
    }
    f.counter("vgpu_agent_removed_directories_total", "Container directories of deleted pods removed", &[])
        .with_label_values::<&str>(&[])
        .inc_by(st.removed_dirs as f64);
    f.counter("vgpu_agent_pod_list_errors_total", "Failed pod lists from the API server", &[])
        .with_label_values::<&str>(&[])
        .inc_by(st.pod_list_errors as f64);
    let g = f.gauge(
        "vgpu_agent_pod_names_known",
        "1 while the last pod list of this node succeeded (pod names are shown), else 0",
        &[],
    );
    g.with_label_values::<&str>(&[]).set(if up && have_pods { 1.0 } else { 0.0 });
}
