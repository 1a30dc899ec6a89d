//! Device-time shares from the simulated GPU's exact per-process busy time (`simctl procs`), for
//! the compute and burst tests.

use super::{Sandbox, artifacts};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// Busy ns per live pid on device 0 (`simctl procs`).
pub fn busy(sb: &Sandbox) -> HashMap<u32, u64> {
    let o = std::process::Command::new(&artifacts().simctl)
        .arg("--state")
        .arg(sb.state())
        .arg("procs")
        .output()
        .expect("simctl");
    let mut m = HashMap::new();
    for l in String::from_utf8_lossy(&o.stdout).lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 5 && f[1] == "0" {
            m.insert(f[0].parse().unwrap(), f[3].parse().unwrap());
        }
    }
    m
}

/// The pid a client wrote to `p` (waits up to 10 s for the file).
pub fn read_pid(p: &Path) -> u32 {
    for _ in 0..1000 {
        if let Ok(s) = std::fs::read_to_string(p)
            && let Ok(v) = s.trim().parse()
        {
            return v;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("pid file {} never written", p.display());
}

/// Share (%) of device time of `pids` between two [`busy`] snapshots taken `dt_ns` apart.
pub fn share(a: &HashMap<u32, u64>, b: &HashMap<u32, u64>, pids: &[u32], dt_ns: u64) -> f64 {
    let s: u64 =
        pids.iter().map(|p| b.get(p).copied().unwrap_or(0).saturating_sub(a.get(p).copied().unwrap_or(0))).sum();
    s as f64 / dt_ns as f64 * 100.0
}
