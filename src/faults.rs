//! Fault injection for the tests: internal failures that no input can provoke (a panic while the
//! process state is built, a panic inside `dlsym` interception) are simulated on request so the
//! tests can check the safe behaviour around them. Compiled in only with the cargo feature
//! `fault-injection`, which only the test harness enables: a shipped build has no such switch.
//!
//! `VGPU_TEST_FAULT` lists the armed faults, comma-separated (`build_panic`, `dlsym_panic`).

/// Whether fault `name` is armed for this process.
#[cfg(feature = "fault-injection")]
pub fn armed(name: &str) -> bool {
    std::env::var("VGPU_TEST_FAULT").is_ok_and(|v| v.split(',').any(|f| f.trim() == name))
}

/// Without the feature no fault exists (the check compiles to nothing).
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn armed(_name: &str) -> bool {
    false
}

/// Panic here if fault `name` is armed.
#[inline(always)]
pub fn maybe_panic(name: &str) {
    if armed(name) {
        panic!("injected fault {name}");
    }
}
