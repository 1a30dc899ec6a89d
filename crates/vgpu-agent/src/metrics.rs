//! `/metrics`: HAMi's vGPU monitor's families with its names, labels and values
//! (`cmd/vGPUmonitor/metrics.go`, docs/hami-contract.md §4.4), read from the regions at scrape
//! time, plus libvgpu's own `vgpu_*` families. All carry the monitor's const label `zone="vGPU"`.
//!
//! Pod and namespace names come from the last pod list of this node; a container whose pod is not
//! (yet) known, or every container while the API server is unreachable, is reported with
//! `namespace=""` and `pod=<pod UID>` (the directory name's first part).

use crate::agent::{Agent, Opened};
use crate::feedback::Field;
use crate::hostgpu;
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};
use std::sync::atomic::{AtomicUsize, Ordering};
use vgpu_core::counters;
use vgpu_core::noderegion::{Access, Depth, SkipReason, Version};
use vgpu_core::region::{EXT_MAGIC, EXT_OFFSET, EXT_SIZE, EXT_VERSION, FILE_SIZE, MAX_DEVICES, RegionExt};

const CTR: [&str; 5] = ["namespace", "pod", "container", "vdevice_index", "device_uuid"];
const LEGACY_CTR: [&str; 5] = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid"];

/// One family of one scrape: the const metrics of the monitor's collector (client_golang's
/// `MustNewConstMetric`), built straight into the crate's data model, no registry in between.
struct Fam {
    family: MetricFamily,
    labels: &'static [&'static str],
}

impl Fam {
    fn new(kind: MetricType, name: &str, help: &str, labels: &'static [&'static str]) -> Fam {
        let mut family = MetricFamily::default();
        family.set_name(name.into());
        family.set_help(help.into());
        family.set_field_type(kind);
        Fam { family, labels }
    }
    fn gauge(name: &str, help: &str, labels: &'static [&'static str]) -> Fam {
        Fam::new(MetricType::GAUGE, name, help, labels)
    }
    fn counter(name: &str, help: &str, labels: &'static [&'static str]) -> Fam {
        Fam::new(MetricType::COUNTER, name, help, labels)
    }
    /// One sample; labels in name order with the const `zone`, as client_golang writes them.
    fn add(&mut self, values: &[&str], v: f64) {
        debug_assert_eq!(values.len(), self.labels.len());
        let mut pairs: Vec<LabelPair> = self
            .labels
            .iter()
            .zip(values)
            .chain(std::iter::once((&"zone", &"vGPU")))
            .map(|(n, v)| {
                let mut p = LabelPair::default();
                p.set_name((*n).to_string());
                p.set_value((*v).to_string());
                p
            })
            .collect();
        pairs.sort_by(|a, b| a.name().cmp(b.name()));
        let mut m = Metric::default();
        m.set_label(pairs);
        if self.family.get_field_type() == MetricType::COUNTER {
            let mut c = Counter::default();
            c.set_value(v);
            m.set_counter(c);
        } else {
            let mut g = Gauge::default();
            g.set_value(v);
            m.set_gauge(g);
        }
        self.family.mut_metric().push(m);
    }
}

const MEM: [&str; 9] =
    ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "context", "module", "data", "offset"];
const C3: [&str; 3] = ["namespace", "pod", "container"];

/// HAMi's per-container families (new names, and the legacy ones when asked).
struct HamiFamilies {
    used: Fam,
    limit: Fam,
    device_memory: Fam,
    utilization: Fam,
    last_kernel: Fam,
    context: Fam,
    module: Fam,
    buffer: Fam,
    legacy: Option<[Fam; 5]>,
}

impl HamiFamilies {
    fn new(legacy: bool) -> HamiFamilies {
        HamiFamilies {
            used: Fam::gauge("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes", &CTR),
            limit: Fam::gauge("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes", &CTR),
            device_memory: Fam::gauge(
                "hami_container_device_memory_bytes",
                "Container device memory usage in bytes",
                &CTR,
            ),
            utilization: Fam::gauge(
                "hami_container_device_utilization_ratio",
                "Container device SM utilization ratio",
                &CTR,
            ),
            last_kernel: Fam::gauge(
                "hami_container_last_kernel_elapsed_seconds",
                "Seconds since last kernel execution in container",
                &CTR,
            ),
            context: Fam::gauge(
                "hami_vgpu_memory_context_bytes",
                "Container device memory context size in bytes",
                &CTR,
            ),
            module: Fam::gauge("hami_vgpu_memory_module_bytes", "Container device memory module size in bytes", &CTR),
            buffer: Fam::gauge("hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes", &CTR),
            legacy: legacy.then(|| {
                [
                    Fam::gauge("vGPU_device_memory_usage_in_bytes", "vGPU device usage", &LEGACY_CTR),
                    Fam::gauge("vGPU_device_memory_limit_in_bytes", "vGPU device limit", &LEGACY_CTR),
                    Fam::gauge("Device_memory_desc_of_container", "Container device memory description", &MEM),
                    Fam::gauge(
                        "Device_utilization_desc_of_container",
                        "Container device utilization description",
                        &LEGACY_CTR,
                    ),
                    Fam::gauge(
                        "Device_last_kernel_of_container",
                        "Container device last kernel description",
                        &LEGACY_CTR,
                    ),
                ]
            }),
        }
    }
    fn into_families(self, out: &mut Vec<MetricFamily>) {
        let mut all = vec![
            self.used,
            self.limit,
            self.device_memory,
            self.utilization,
            self.last_kernel,
            self.context,
            self.module,
            self.buffer,
        ];
        if let Some(l) = self.legacy {
            all.extend(l);
        }
        out.extend(all.into_iter().map(|f| f.family));
    }
}

/// libvgpu's per-device families (the counters `vgpu-smi` shows).
struct OwnFamilies {
    processes: Fam,
    sm_limit: Fam,
    share: Fam,
    refusals: Fam,
    refused_bytes: Fam,
    throttled: Fam,
    throttled_launches: Fam,
    blocked: Fam,
    swept: Fam,
    sweeps: Fam,
    blocked_now: Fam,
    switch: Fam,
    unusable: Fam,
}

impl OwnFamilies {
    fn new() -> OwnFamilies {
        OwnFamilies {
            processes: Fam::gauge("vgpu_processes", "Live process slots of the container's region", &C3),
            sm_limit: Fam::gauge("vgpu_sm_limit_percent", "SM limit of the device, percent", &CTR),
            share: Fam::gauge(
                "vgpu_sm_share_ratio",
                "Measured SM share of the device used by the container over the last seconds (0-1)",
                &CTR,
            ),
            refusals: Fam::counter(
                "vgpu_allocation_refusals_total",
                "Device allocations refused by the memory limit",
                &CTR,
            ),
            refused_bytes: Fam::counter(
                "vgpu_allocation_refused_bytes_total",
                "Bytes of device allocations refused by the memory limit",
                &CTR,
            ),
            throttled: Fam::counter(
                "vgpu_throttled_seconds_total",
                "Time kernel launches waited for the SM limit",
                &CTR,
            ),
            throttled_launches: Fam::counter(
                "vgpu_throttled_launches_total",
                "Kernel launches that waited for the SM limit",
                &CTR,
            ),
            blocked: Fam::counter(
                "vgpu_blocked_seconds_total",
                "Time kernel launches waited on the monitor's block (recent_kernel < 0)",
                &CTR,
            ),
            swept: Fam::counter("vgpu_swept_slots_total", "Dead processes' slots freed by the library's sweeps", &C3),
            sweeps: Fam::counter("vgpu_sweeps_total", "Sweeps that freed at least one slot", &C3),
            blocked_now: Fam::gauge("vgpu_blocked_by_monitor", "1 while recent_kernel < 0 (launches blocked)", &C3),
            switch: Fam::gauge(
                "vgpu_utilization_switch",
                "The region's utilization_switch (1 = SM limit enforced)",
                &C3,
            ),
            unusable: Fam::gauge(
                "vgpu_region_unusable",
                "1 for a container directory whose region file is skipped, with the reason",
                &["pod_uid", "container", "reason"],
            ),
        }
    }
    fn into_families(self, out: &mut Vec<MetricFamily>) {
        for f in [
            self.processes,
            self.sm_limit,
            self.share,
            self.refusals,
            self.refused_bytes,
            self.throttled,
            self.throttled_launches,
            self.blocked,
            self.swept,
            self.sweeps,
            self.blocked_now,
            self.switch,
            self.unusable,
        ] {
            out.push(f.family);
        }
    }
}

/// Our extension block of a v1 region made by libvgpu, if present.
fn read_ext(o: &Opened) -> Option<Box<[u64; EXT_SIZE / 8]>> {
    if o.file.layout.version != Version::V1 || o.file.fd.size() < FILE_SIZE as u64 {
        return None;
    }
    let mut b = Box::new([0u64; EXT_SIZE / 8]);
    // SAFETY: u64 storage viewed as bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<u8>(), EXT_SIZE) };
    o.file.fd.read_exact_at(EXT_OFFSET as u64, bytes).ok()?;
    Some(b)
}

fn as_ext(b: &[u64; EXT_SIZE / 8]) -> &RegionExt {
    // SAFETY: EXT_SIZE bytes, 8-aligned; RegionExt is all atomics (any bit pattern is valid).
    unsafe { &*b.as_ptr().cast::<RegionExt>() }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

const HOST: [&str; 4] = ["node", "device_index", "device_uuid", "device_type"];
const LEGACY_HOST: [&str; 4] = ["nodeid", "deviceidx", "deviceuuid", "devicetype"];

/// The monitor's host GPU families, from the freshest tenant samples (hostgpu.rs); like the
/// monitor, none without NODE_NAME.
fn host_families(out: &mut Vec<MetricFamily>, host: hostgpu::Freshest, legacy: bool) {
    let Some(node) = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()) else { return };
    let mut used = Fam::gauge("hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", &HOST);
    let mut util = Fam::gauge("hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", &HOST);
    let mut lused = Fam::gauge("HostGPUMemoryUsage", "GPU device memory usage", &LEGACY_HOST);
    let mut lutil = Fam::gauge("HostCoreUtilization", "GPU core utilization", &LEGACY_HOST);
    for s in host.into_sorted() {
        let (idx, ty) = (s.index.to_string(), format!("NVIDIA-{}", s.name));
        let l = [node.as_str(), idx.as_str(), s.uuid.as_str(), ty.as_str()];
        used.add(&l, s.used as f64);
        util.add(&l, f64::from(s.util));
        if legacy {
            lused.add(&l, s.used as f64);
            lutil.add(&l, f64::from(s.util));
        }
    }
    out.extend([used, util, lused, lutil].map(|f| f.family));
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
    let mut hami = HamiFamilies::new(legacy);
    let mut own = OwnFamilies::new();
    let pods = agent.pods.lock().unwrap_or_else(|p| p.into_inner()).pods.as_ref().map(|(m, _)| m.clone());
    let now = now_unix();
    let mono = monotonic_ns();
    let now_ms = now_unix_ms();
    let mut host = hostgpu::Freshest::default();
    for d in agent.dirs() {
        for sample in hostgpu::read(&d.path) {
            host.offer(sample, now_ms);
        }
        let o = match agent.open(&d, Access::Read, Depth::Usage, scratch) {
            Ok(Some(o)) => o,
            Ok(None) => continue,
            Err(s) => {
                own.unusable.add(&[&d.pod_uid, &d.container, s.reason.label()], 1.0);
                continue;
            }
        };
        let (ns, pod) = match pods.as_ref().and_then(|m| m.get(&d.pod_uid)) {
            Some(p) => (p.namespace.as_str(), p.name.as_str()),
            None => ("", d.pod_uid.as_str()),
        };
        let s = &o.summary;
        let c3 = [ns, pod, d.container.as_str()];
        own.processes.add(&c3, f64::from(s.processes));
        own.blocked_now.add(&c3, if s.recent_kernel < 0 { 1.0 } else { 0.0 });
        own.switch.add(&c3, f64::from(s.utilization_switch));
        let ext_buf = read_ext(&o);
        let ext = ext_buf.as_deref().map(as_ext).filter(|e| {
            e.ext_magic.load(Ordering::Relaxed) == EXT_MAGIC && e.ext_version.load(Ordering::Relaxed) == EXT_VERSION
        });
        let ctrs = ext.and_then(counters::read);
        if let Some(c) = &ctrs {
            own.swept.add(&c3, c.swept_slots as f64);
            own.sweeps.add(&c3, c.sweeps as f64);
        }
        let sm_limits = read_sm_limits(&o);
        let device_num = s.device_num.min(MAX_DEVICES as u64) as usize;
        for i in 0..device_num {
            let Some(uuid) = s.uuid_label(i) else { continue };
            let idx = i.to_string();
            let l = [ns, pod, d.container.as_str(), idx.as_str(), uuid.as_str()];
            let u = &s.used[i];
            hami.used.add(&l, u.total as f64);
            hami.limit.add(&l, s.limit[i] as f64);
            hami.device_memory.add(&l, u.total as f64);
            hami.utilization.add(&l, u.sm_util as f64);
            hami.context.add(&l, u.context as f64);
            hami.module.add(&l, u.module as f64);
            hami.buffer.add(&l, u.data as f64);
            let lkt = s.last_kernel_time as i64;
            let elapsed = (lkt > 0).then(|| (now - lkt).max(0) as f64);
            if let Some(e) = elapsed {
                hami.last_kernel.add(&l, e);
            }
            if let Some([used, limit, mem, util, last]) = &mut hami.legacy {
                used.add(&l, u.total as f64);
                limit.add(&l, s.limit[i] as f64);
                let offset = u.total.wrapping_sub(u.context).wrapping_sub(u.module).wrapping_sub(u.data);
                let (c, m, dd, off) =
                    (u.context.to_string(), u.module.to_string(), u.data.to_string(), offset.to_string());
                let mut ml = l.to_vec();
                ml.extend([c.as_str(), m.as_str(), dd.as_str(), off.as_str()]);
                mem.add(&ml, u.total as f64);
                util.add(&l, u.sm_util as f64);
                if let Some(e) = elapsed {
                    last.add(&l, e);
                }
            }
            if let Some(v) = sm_limits.get(i) {
                own.sm_limit.add(&l, *v as f64);
            }
            if let Some(e) = ext {
                let lim = &e.limiter[i];
                let stamp = lim.share_stamp_ns.load(Ordering::Relaxed);
                if stamp != 0 && mono >= stamp && mono - stamp <= SHARE_FRESH_NS {
                    own.share.add(&l, lim.share_ppm.load(Ordering::Relaxed) as f64 / 1e6);
                }
            }
            if let Some(c) = ctrs.as_ref().and_then(|c| c.devices.get(i)) {
                own.refusals.add(&l, c.refusals as f64);
                own.refused_bytes.add(&l, c.refused_bytes as f64);
                own.throttled.add(&l, c.throttled_ns as f64 / 1e9);
                own.throttled_launches.add(&l, c.throttled_launches as f64);
                own.blocked.add(&l, c.blocked_ns as f64 / 1e9);
            }
        }
    }
    let mut families = Vec::new();
    host_families(&mut families, host, legacy);
    hami.into_families(&mut families);
    own.into_families(&mut families);
    agent_families(&mut families, agent, pods.is_some());
    families.retain(|f| !f.get_metric().is_empty());
    families.sort_by(|a, b| a.name().cmp(b.name()));
    // Sized from the last scrape: one allocation, no regrowth copies of a multi-MB buffer.
    static LAST_LEN: AtomicUsize = AtomicUsize::new(64 << 10);
    let mut out = Vec::with_capacity(LAST_LEN.load(Ordering::Relaxed) + (16 << 10));
    let _ = TextEncoder::new().encode(&families, &mut out);
    LAST_LEN.store(out.len(), Ordering::Relaxed);
    String::from_utf8(out).unwrap_or_default()
}

/// `sm_limit[d]` of a v1 region (v0 has it at a layout offset the monitor never reads).
fn read_sm_limits(o: &Opened) -> Vec<u64> {
    if o.file.layout.version != Version::V1 {
        return Vec::new();
    }
    let mut b = [0u8; 8 * MAX_DEVICES];
    if o.file.fd.read_exact_at(1728, &mut b).is_err() {
        return Vec::new();
    }
    b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn agent_families(out: &mut Vec<MetricFamily>, agent: &Agent, have_pods: bool) {
    let st = agent.stats.lock().unwrap_or_else(|p| p.into_inner());
    let up = agent.pods.lock().unwrap_or_else(|p| p.into_inner()).up;
    let mut passes =
        Fam::counter("vgpu_agent_feedback_passes_total", "Passes of the feedback loop (discovery, GC, stores)", &[]);
    passes.add(&[], st.passes as f64);
    let mut stores =
        Fam::counter("vgpu_agent_feedback_stores_total", "Control words written by the feedback loop", &["field"]);
    for fld in [Field::RecentKernel, Field::UtilizationSwitch] {
        stores.add(&[fld.label()], *st.stores.get(&fld).unwrap_or(&0) as f64);
    }
    let mut skips = Fam::counter(
        "vgpu_agent_region_skips_total",
        "Region files skipped (by feedback passes and scrapes), by reason",
        &["reason"],
    );
    for r in SkipReason::ALL {
        skips.add(&[r.label()], *st.skips.get(&r).unwrap_or(&0) as f64);
    }
    let mut removed =
        Fam::counter("vgpu_agent_removed_directories_total", "Container directories of deleted pods removed", &[]);
    removed.add(&[], st.removed_dirs as f64);
    let mut errors = Fam::counter("vgpu_agent_pod_list_errors_total", "Failed pod lists from the API server", &[]);
    errors.add(&[], st.pod_list_errors as f64);
    let mut known = Fam::gauge(
        "vgpu_agent_pod_names_known",
        "1 while the last pod list of this node succeeded (pod names are shown), else 0",
        &[],
    );
    known.add(&[], if up && have_pods { 1.0 } else { 0.0 });
    out.extend([passes, stores, skips, removed, errors, known].map(|f| f.family));
}
