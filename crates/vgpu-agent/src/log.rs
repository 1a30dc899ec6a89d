//! Log lines on stderr, klog-style levels (`-v N`: info at level ≤ N is printed), and "say it
//! once" for conditions that persist (a missing directory, an API server that is down).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

static VERBOSITY: AtomicI32 = AtomicI32::new(0);
static ONCE: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

pub fn set_verbosity(v: i32) {
    VERBOSITY.store(v, Ordering::Relaxed);
}

pub fn enabled(level: i32) -> bool {
    level <= VERBOSITY.load(Ordering::Relaxed)
}

fn stamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", now.as_secs(), now.subsec_millis())
}

pub fn error(msg: &str) {
    eprintln!("E {} vgpu-agent: {msg}", stamp());
}

pub fn warn(msg: &str) {
    eprintln!("W {} vgpu-agent: {msg}", stamp());
}

pub fn info(level: i32, msg: &str) {
    if enabled(level) {
        eprintln!("I {} vgpu-agent: {msg}", stamp());
    }
}

/// Warns about `key` only when its message differs from the last one said for it; `None` clears
/// it (the condition is over: said again if it comes back). Returns whether a line was printed.
pub fn once(key: &str, msg: Option<&str>) -> bool {
    let mut g = ONCE.lock().unwrap_or_else(|p| p.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    match msg {
        None => {
            if m.remove(key).is_some() {
                info(0, &format!("{key}: recovered"));
            }
            false
        }
        Some(msg) if m.get(key).map(String::as_str) == Some(msg) => false,
        Some(msg) => {
            warn(&format!("{key}: {msg}"));
            m.insert(key.to_string(), msg.to_string());
            true
        }
    }
}

/// Forgets every key starting with `prefix` (a removed directory).
pub fn forget_prefix(prefix: &str) {
    let mut g = ONCE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = g.as_mut() {
        m.retain(|k, _| !k.starts_with(prefix));
    }
}
