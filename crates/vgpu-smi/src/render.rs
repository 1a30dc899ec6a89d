//! Output formats: the table (nvidia-smi-like), JSON (schema below), Prometheus text exposition.
//!
//! ## JSON schema, version 1 (stable: fields are only ever added, never renamed or retyped)
//!
//! ```text
//! { "schema": "vgpu-smi", "version": 1, "mode": "container" | "node", "root": string | null,
//!   "regions": [ {
//!     "pod_uid": string | null, "container": string | null, "path": string,
//!     "error": string | null,              // set: the file is unusable, nothing below is present
//!     "region_version": "1.2", "file_size": int, "extension": bool,
//!     "priority": int, "recent_kernel": int, "blocked_by_monitor": bool, "utilization_switch": int,
//!     "last_kernel_time": int,            // unix seconds, 0 = never
//!     "proc_num": int, "device_num": int,
//!     "counters": { "swept_slots": int, "sweeps": int } | null,     // null = no data yet
//!     "devices": [ {
//!       "index": int, "uuid": string | null,
//!       "memory_limit_bytes": int,          // 0 = unlimited (= the monitor's limit[i])
//!       "memory_used_bytes": int,           // Σ used[i].total, k < proc_num, status ≠ 0 (= the monitor's)
//!       "memory_context_bytes": int, "memory_module_bytes": int, "memory_data_bytes": int,
//!       "memory_free_bytes": int | null,    // null when unlimited
//!       "sm_limit_percent": int, "sm_ceiling_percent": int | null,
//!       "sm_share_percent": float | null,   // container's measured share, last 10 s; null = none
//!       "counters": { "allocation_refusals": int, "refused_bytes": int,
//!                     "throttled_ns": int, "throttled_launches": int, "blocked_ns": int,
//!                     "reconcile_charges": int, "reconciled_bytes": int } | null } ],
//!     "processes": [ { "slot": int, "pid": int, "host_pid": int, "status": int,
//!                      "status_text": "running" | "suspended" | "exited" | "unknown",
//!                      "alive": bool | null, "memory_used_bytes": int, "sm_util_percent": int,
//!                      "devices": [ { "index": int, "memory_used_bytes": int, "sm_util_percent": int } ] } ]
//!   } ] }
//! ```

use crate::snapshot::{DeviceSnap, Snapshot};
use crate::units::{bytes, duration_ns};
use std::fmt::Write;

/// What one output block is about.
pub struct Item<'a> {
    pub pod_uid: Option<&'a str>,
    pub container: Option<&'a str>,
    pub path: &'a std::path::Path,
    pub result: Result<&'a Snapshot, &'a str>,
}

pub const JSON_VERSION: u32 = 1;

// ------------------------------------------------------------------------------------------ table

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |x| x.to_string())
}

fn pct_ppm(ppm: u64) -> String {
    format!("{:.1}%", ppm as f64 / 10_000.0)
}

pub fn table(items: &[Item]) -> String {
    let mut o = String::new();
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        let title = match (it.pod_uid, it.container) {
            (Some(p), Some(c)) => format!("pod {p}  container {c}"),
            _ => "container".to_string(),
        };
        let _ = writeln!(o, "{title}  ({})", it.path.display());
        let s = match it.result {
            Ok(s) => s,
            Err(why) => {
                let _ = writeln!(o, "  UNUSABLE: {why}");
                continue;
            }
        };
        let _ = writeln!(
            o,
            "  region v{}.{}{}  priority {}  monitor: {}  switch {}",
            s.version.0,
            s.version.1,
            if s.extension { "" } else { " (no libvgpu extension)" },
            s.priority,
            if s.blocked() { "BLOCKING launches" } else { "not blocking" },
            s.utilization_switch
        );
        device_table(&mut o, s);
        process_table(&mut o, s);
        let sweeps = s.counters.as_ref().map(|c| format!("{} slot(s) in {} sweep(s)", c.swept_slots, c.sweeps));
        let _ = writeln!(o, "  dead-slot sweeps: {}", dash(sweeps));
    }
    o
}

fn device_table(o: &mut String, s: &Snapshot) {
    let head = [
        "Dev",
        "UUID",
        "Limit",
        "Used",
        "Ctx",
        "Module",
        "Data",
        "Free",
        "SM lim",
        "Ceiling",
        "SM share",
        "Throttled",
        "Blocked",
        "Refused",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    for d in &s.devices {
        rows.push(device_row(d));
    }
    if s.devices.is_empty() {
        let _ = writeln!(o, "  no devices recorded yet");
        return;
    }
    align(o, &rows, &[false, false, true, true, true, true, true, true, true, true, true, true, true, true]);
}

fn device_row(d: &DeviceSnap) -> Vec<String> {
    let c = d.counters;
    vec![
        d.index.to_string(),
        d.uuid.clone().unwrap_or_else(|| "-".into()),
        if d.limit == 0 { "unlimited".into() } else { bytes(d.limit) },
        bytes(d.used),
        bytes(d.context),
        bytes(d.module),
        bytes(d.data),
        dash(d.free().map(bytes)),
        format!("{}%", d.sm_limit),
        dash(d.sm_ceiling.map(|v| format!("{v}%"))),
        dash(d.share_ppm.map(pct_ppm)),
        dash(c.map(|c| format!("{} ({})", duration_ns(c.throttled_ns), c.throttled_launches))),
        dash(c.map(|c| duration_ns(c.blocked_ns))),
        dash(c.map(|c| format!("{} ({})", c.refusals, bytes(c.refused_bytes)))),
    ]
}

fn process_table(o: &mut String, s: &Snapshot) {
    if s.procs.is_empty() {
        let _ = writeln!(o, "  no processes");
        return;
    }
    let mut rows = vec![["Slot", "PID", "Host PID", "Memory", "SM util", "Status"].map(String::from).to_vec()];
    for p in &s.procs {
        rows.push(vec![
            p.slot.to_string(),
            p.pid.to_string(),
            if p.hostpid == 0 { "-".into() } else { p.hostpid.to_string() },
            bytes(p.used_total()),
            format!("{}%", p.sm_total()),
            p.status_text().into(),
        ]);
    }
    align(o, &rows, &[true, true, true, true, true, false]);
}

/// Columns padded to their widest cell; `right[i]` right-aligns column i.
fn align(o: &mut String, rows: &[Vec<String>], right: &[bool]) {
    let n = rows[0].len();
    let w: Vec<usize> = (0..n).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for (ri, r) in rows.iter().enumerate() {
        let mut line = String::from("  ");
        for i in 0..n {
            let pad = w[i] - r[i].chars().count();
            if right.get(i).copied().unwrap_or(false) {
                line.push_str(&" ".repeat(pad));
                line.push_str(&r[i]);
            } else {
                line.push_str(&r[i]);
                if i + 1 < n {
                    line.push_str(&" ".repeat(pad));
                }
            }
            if i + 1 < n {
                line.push_str("  ");
            }
        }
        let _ = writeln!(o, "{}", line.trim_end());
        if ri == 0 {
            let _ = writeln!(o, "  {}", "-".repeat(w.iter().sum::<usize>() + 2 * (n - 1)));
        }
    }
}

// ------------------------------------------------------------------------------------------- json

pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn opt_str(v: Option<&str>) -> String {
    v.map_or_else(|| "null".into(), json_str)
}

fn opt_num<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |x| x.to_string())
}

pub fn json(mode: &str, root: Option<&std::path::Path>, items: &[Item]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "{{\"schema\":\"vgpu-smi\",\"version\":{JSON_VERSION},\"mode\":{},\"root\":{},\"regions\":[",
        json_str(mode),
        opt_str(root.map(|r| r.to_string_lossy()).as_deref())
    );
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(
            o,
            "{{\"pod_uid\":{},\"container\":{},\"path\":{},",
            opt_str(it.pod_uid),
            opt_str(it.container),
            json_str(&it.path.to_string_lossy())
        );
        match it.result {
            Err(why) => {
                let _ = write!(o, "\"error\":{}}}", json_str(why));
            }
            Ok(s) => region_json(&mut o, s),
        }
    }
    o.push_str("]}\n");
    o
}

fn region_json(o: &mut String, s: &Snapshot) {
    let _ = write!(
        o,
        "\"error\":null,\"region_version\":\"{}.{}\",\"file_size\":{},\"extension\":{},\"priority\":{},\"recent_kernel\":{},\"blocked_by_monitor\":{},\"utilization_switch\":{},\"last_kernel_time\":{},\"proc_num\":{},\"device_num\":{},\"counters\":{},\"devices\":[",
        s.version.0,
        s.version.1,
        s.file_size,
        s.extension,
        s.priority,
        s.recent_kernel,
        s.blocked(),
        s.utilization_switch,
        s.last_kernel_time,
        s.proc_num,
        s.device_num,
        s.counters.as_ref().map_or_else(
            || "null".into(),
            |c| format!("{{\"swept_slots\":{},\"sweeps\":{}}}", c.swept_slots, c.sweeps)
        ),
    );
    for (i, d) in s.devices.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let counters = d.counters.map_or_else(
            || "null".into(),
            |c| {
                format!(
                    "{{\"allocation_refusals\":{},\"refused_bytes\":{},\"throttled_ns\":{},\"throttled_launches\":{},\"blocked_ns\":{},\"reconcile_charges\":{},\"reconciled_bytes\":{}}}",
                    c.refusals, c.refused_bytes, c.throttled_ns, c.throttled_launches, c.blocked_ns, c.reconciles, c.reconciled_bytes
                )
            },
        );
        let _ = write!(
            o,
            "{{\"index\":{},\"uuid\":{},\"memory_limit_bytes\":{},\"memory_used_bytes\":{},\"memory_context_bytes\":{},\"memory_module_bytes\":{},\"memory_data_bytes\":{},\"memory_free_bytes\":{},\"sm_limit_percent\":{},\"sm_ceiling_percent\":{},\"sm_share_percent\":{},\"counters\":{}}}",
            d.index,
            opt_str(d.uuid.as_deref()),
            d.limit,
            d.used,
            d.context,
            d.module,
            d.data,
            opt_num(d.free()),
            d.sm_limit,
            opt_num(d.sm_ceiling),
            opt_num(d.share_ppm.map(|p| format!("{:.4}", p as f64 / 10_000.0))),
            counters
        );
    }
    o.push_str("],\"processes\":[");
    for (i, p) in s.procs.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let devs: Vec<String> = s
            .devices
            .iter()
            .map(|d| {
                format!(
                    "{{\"index\":{},\"memory_used_bytes\":{},\"sm_util_percent\":{}}}",
                    d.index, p.used[d.index], p.sm_util[d.index]
                )
            })
            .collect();
        let _ = write!(
            o,
            "{{\"slot\":{},\"pid\":{},\"host_pid\":{},\"status\":{},\"status_text\":{},\"alive\":{},\"memory_used_bytes\":{},\"sm_util_percent\":{},\"devices\":[{}]}}",
            p.slot,
            p.pid,
            p.hostpid,
            p.status,
            json_str(p.status_text()),
            opt_num(p.alive),
            p.used_total(),
            p.sm_total(),
            devs.join(",")
        );
    }
    o.push_str("]}");
}

// ------------------------------------------------------------------------------------- prometheus

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(String, String)>,
}

fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{}\"", label_value(v))).collect();
    format!("{{{}}}", inner.join(","))
}

pub fn prometheus(items: &[Item]) -> String {
    let mut fams: Vec<Family> = Vec::new();
    let mut put = |name: &'static str, help: &'static str, kind: &'static str, l: String, v: String| {
        if let Some(f) = fams.iter_mut().find(|f| f.name == name) {
            f.samples.push((l, v));
        } else {
            fams.push(Family { name, help, kind, samples: vec![(l, v)] });
        }
    };
    for it in items {
        let pod = it.pod_uid.unwrap_or("");
        let ctr = it.container.unwrap_or("");
        let path = it.path.to_string_lossy();
        let s = match it.result {
            Err(why) => {
                put(
                    "vgpu_region_unusable",
                    "1 for a region file (or container directory) that cannot be read as a region; reason in the label.",
                    "gauge",
                    labels(&[("pod_uid", pod), ("container", ctr), ("path", &path), ("reason", why)]),
                    "1".into(),
                );
                continue;
            }
            Ok(s) => s,
        };
        let cl = labels(&[("pod_uid", pod), ("container", ctr)]);
        put(
            "vgpu_processes",
            "Live process slots of the container (k < proc_num, status != 0).",
            "gauge",
            cl.clone(),
            s.procs.len().to_string(),
        );
        put(
            "vgpu_blocked_by_monitor",
            "1 while the monitor blocks the container's launches (recent_kernel < 0).",
            "gauge",
            cl.clone(),
            (s.blocked() as u8).to_string(),
        );
        if let Some(c) = &s.counters {
            put(
                "vgpu_swept_slots_total",
                "Dead processes' slots freed by sweeps.",
                "counter",
                cl.clone(),
                c.swept_slots.to_string(),
            );
        }
        for d in &s.devices {
            let idx = d.index.to_string();
            let uuid = d.uuid.as_deref().unwrap_or("");
            let dl = labels(&[("pod_uid", pod), ("container", ctr), ("device_uuid", uuid), ("vdevice_index", &idx)]);
            put(
                "vgpu_memory_limit_bytes",
                "Memory limit of the device slice (limit[i]; 0 = unlimited).",
                "gauge",
                dl.clone(),
                d.limit.to_string(),
            );
            put(
                "vgpu_memory_used_bytes",
                "Memory used by the container on the device (sum of used[i].total over live slots).",
                "gauge",
                dl.clone(),
                d.used.to_string(),
            );
            put(
                "vgpu_memory_context_bytes",
                "Context memory of the container on the device.",
                "gauge",
                dl.clone(),
                d.context.to_string(),
            );
            put(
                "vgpu_memory_module_bytes",
                "Module memory of the container on the device.",
                "gauge",
                dl.clone(),
                d.module.to_string(),
            );
            put(
                "vgpu_memory_data_bytes",
                "Data (buffer) memory of the container on the device.",
                "gauge",
                dl.clone(),
                d.data.to_string(),
            );
            put(
                "vgpu_sm_limit_percent",
                "SM limit of the device slice in percent (100 = unlimited).",
                "gauge",
                dl.clone(),
                d.sm_limit.to_string(),
            );
            if let Some(p) = d.share_ppm {
                put(
                    "vgpu_sm_share_ratio",
                    "Container's measured share of the device's SMs over the last seconds (0..1).",
                    "gauge",
                    dl.clone(),
                    format!("{:.6}", p as f64 / 1e6),
                );
            }
            if let Some(c) = d.counters {
                put(
                    "vgpu_allocation_refusals_total",
                    "Allocations refused by the memory limit.",
                    "counter",
                    dl.clone(),
                    c.refusals.to_string(),
                );
                put(
                    "vgpu_allocation_refused_bytes_total",
                    "Bytes of refused allocations.",
                    "counter",
                    dl.clone(),
                    c.refused_bytes.to_string(),
                );
                put(
                    "vgpu_throttled_seconds_total",
                    "Wall time launches waited for the SM limit.",
                    "counter",
                    dl.clone(),
                    format!("{:.9}", c.throttled_ns as f64 / 1e9),
                );
                put(
                    "vgpu_throttled_launches_total",
                    "Launches that waited for the SM limit.",
                    "counter",
                    dl.clone(),
                    c.throttled_launches.to_string(),
                );
                put(
                    "vgpu_blocked_seconds_total",
                    "Wall time launches waited while the monitor blocked the container.",
                    "counter",
                    dl.clone(),
                    format!("{:.9}", c.blocked_ns as f64 / 1e9),
                );
                put(
                    "vgpu_reconcile_charges_total",
                    "Charges of driver-held memory beyond what was counted (contexts).",
                    "counter",
                    dl.clone(),
                    c.reconciles.to_string(),
                );
                put(
                    "vgpu_reconcile_charged_bytes_total",
                    "Bytes charged by reconciliation.",
                    "counter",
                    dl,
                    c.reconciled_bytes.to_string(),
                );
            }
        }
    }
    let mut o = String::new();
    for f in fams {
        let _ = writeln!(o, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(o, "# TYPE {} {}", f.name, f.kind);
        for (l, v) in f.samples {
            let _ = writeln!(o, "{}{} {}", f.name, l, v);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(
            labels(&[("pod_uid", "x\"y"), ("container", "a\\b\nc")]),
            "{pod_uid=\"x\\\"y\",container=\"a\\\\b\\nc\"}"
        );
    }

    #[test]
    fn unusable_entries_in_every_format() {
        let p = std::path::Path::new("/h/containers/p_c/x.cache");
        let items = [Item { pod_uid: Some("p"), container: Some("c"), path: p, result: Err("foreign \"content\"") }];
        let j = json("node", Some(std::path::Path::new("/h")), &items);
        assert_eq!(
            j,
            "{\"schema\":\"vgpu-smi\",\"version\":1,\"mode\":\"node\",\"root\":\"/h\",\"regions\":[{\"pod_uid\":\"p\",\"container\":\"c\",\"path\":\"/h/containers/p_c/x.cache\",\"error\":\"foreign \\\"content\\\"\"}]}\n"
        );
        let m = prometheus(&items);
        assert!(m.starts_with("# HELP vgpu_region_unusable "), "{m}");
        assert!(m.contains("vgpu_region_unusable{pod_uid=\"p\",container=\"c\",path=\"/h/containers/p_c/x.cache\",reason=\"foreign \\\"content\\\"\"} 1"), "{m}");
        let t = table(&items);
        assert!(t.contains("pod p  container c") && t.contains("UNUSABLE: foreign"), "{t}");
    }
}
