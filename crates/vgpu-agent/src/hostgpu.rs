//! Host GPU samples without NVML: every tenant's library already holds NVML, so it may publish a
//! small per-device sample into a side file of its container directory, which the agent reports
//! as the monitor's host metrics (freshest sample per GPU UUID; nothing once every sample of a GPU
//! is older than [`FRESH_MS`]).
//!
//! File: `<container dir>/host-gpu.samples` (not `*.cache`, no `libvgpu.so` in the name: the
//! monitor ignores it), at most [`MAX_LEN`] bytes of text, one line per device:
//!
//! ```text
//! v1 <unix ms> <uuid> <device index> <memory used bytes> <memory total bytes> <utilization %> <name>
//! ```
//!
//! The file is read like a region (`noderegion::open`: no symlink, nothing but a regular file).
//! A tenant can write any number there: the values are what the tenant's library says, bounded to
//! sane ranges, and a sample from the future is ignored.

use std::collections::HashMap;
use std::path::Path;
use vgpu_core::noderegion::{self, Access};

pub const FILE_NAME: &str = "host-gpu.samples";
pub const MAX_LEN: usize = 4096;
/// A sample older than this is not reported.
pub const FRESH_MS: u64 = 30_000;
/// Clock skew tolerated for a sample stamped in the future.
const FUTURE_MS: u64 = 5_000;

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub at_ms: u64,
    pub uuid: String,
    pub index: u32,
    pub used: u64,
    pub total: u64,
    pub util: u32,
    pub name: String,
}

fn parse_line(l: &str) -> Option<Sample> {
    let mut it = l.splitn(8, ' ');
    if it.next()? != "v1" {
        return None;
    }
    let at_ms = it.next()?.parse().ok()?;
    let uuid = it.next()?.to_string();
    let index = it.next()?.parse().ok()?;
    let used: u64 = it.next()?.parse().ok()?;
    let total: u64 = it.next()?.parse().ok()?;
    let util: u32 = it.next()?.parse().ok()?;
    let name = it.next().unwrap_or("").trim().to_string();
    let uuid_ok = uuid.starts_with("GPU-") && uuid.len() <= 96 && uuid.bytes().all(|b| b.is_ascii_graphic());
    let name_ok = name.len() <= 96 && name.chars().all(|c| !c.is_control());
    (uuid_ok && name_ok && used <= total && util <= 100 && index < 1024).then_some(Sample {
        at_ms,
        uuid,
        index,
        used,
        total,
        util,
        name,
    })
}

/// The samples of one side file (empty when absent or unusable).
pub fn read(dir: &Path) -> Vec<Sample> {
    let Ok(fd) = noderegion::open(&dir.join(FILE_NAME), Access::Read) else { return Vec::new() };
    let mut buf = vec![0u8; MAX_LEN];
    let Ok(n) = fd.read_at(0, &mut buf) else { return Vec::new() };
    let Ok(text) = std::str::from_utf8(&buf[..n]) else { return Vec::new() };
    text.lines().filter_map(parse_line).collect()
}

/// Keeps the freshest sample per UUID that is neither stale nor from the future.
#[derive(Default)]
pub struct Freshest(HashMap<String, Sample>);

impl Freshest {
    pub fn offer(&mut self, s: Sample, now_ms: u64) {
        if s.at_ms > now_ms + FUTURE_MS || now_ms.saturating_sub(s.at_ms) > FRESH_MS {
            return;
        }
        match self.0.get(&s.uuid) {
            Some(have) if have.at_ms >= s.at_ms => {}
            _ => {
                self.0.insert(s.uuid.clone(), s);
            }
        }
    }

    /// By device index, then UUID.
    pub fn into_sorted(self) -> Vec<Sample> {
        let mut v: Vec<Sample> = self.0.into_values().collect();
        v.sort_by(|a, b| (a.index, &a.uuid).cmp(&(b.index, &b.uuid)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "GPU-00000000-0000-4000-8000-000000000000";

    #[test]
    fn lines_and_freshness() {
        let s = parse_line(&format!("v1 1000 {U} 0 100 200 42 NVIDIA H100 80GB HBM3")).unwrap();
        assert_eq!((s.index, s.used, s.total, s.util, s.name.as_str()), (0, 100, 200, 42, "NVIDIA H100 80GB HBM3"));
        for bad in [
            format!("v2 1000 {U} 0 100 200 42 x"),
            format!("v1 1000 {U} 0 300 200 42 x"),
            format!("v1 1000 {U} 0 100 200 101 x"),
            "v1 1000 not-a-gpu 0 1 2 3 x".to_string(),
            format!("v1 x {U} 0 1 2 3 x"),
        ] {
            assert!(parse_line(&bad).is_none(), "{bad}");
        }
        let mut f = Freshest::default();
        let now = 100_000;
        let mk = |at: u64, used: u64| Sample { at_ms: at, used, ..s.clone() };
        f.offer(mk(now - 1000, 1), now);
        f.offer(mk(now - 500, 2), now);
        f.offer(mk(now - 800, 3), now);
        f.offer(mk(now + 60_000, 4), now); // future: ignored
        assert_eq!(f.into_sorted().iter().map(|s| s.used).collect::<Vec<_>>(), [2]);
        let mut stale = Freshest::default();
        stale.offer(mk(now - FRESH_MS - 1, 5), now);
        assert!(stale.into_sorted().is_empty(), "nothing, not a stale number");
    }
}
