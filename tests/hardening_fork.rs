//! Issue 9 §1: a CUDA process that forks while other threads launch and allocate; every child uses
//! CUDA (cuInit, cuDevicePrimaryCtxRetain, cuMemAlloc, a launch, NVML) and must exit 0 — never hang,
//! never crash — whatever the parent's threads held at the instant of the fork.

mod common;
mod hardening_support;

use common::*;

fn fork_stress() -> std::path::PathBuf {
    hardening_support::c_program("fork_stress", &["fork_stress.c"], &["-lcuda", "-lnvidia-ml", "-pthread"])
}

fn check(out: &Out, forks: u32) {
    out.ok();
    let n = |k: &str| out.val(k).parse::<i64>().unwrap_or_else(|_| panic!("{k}: {}", out.dump()));
    assert_eq!(n("hung"), 0, "forked children hung: {}", out.dump());
    assert_eq!(n("signaled"), 0, "forked children crashed: {}", out.dump());
    assert_eq!(n("failed"), 0, "forked children failed a CUDA step: {}", out.dump());
    assert_eq!(n("ok"), forks as i64, "{}", out.dump());
    assert!(n("work") > forks as i64, "the worker threads did not run: {}", out.dump());
}

/// Memory and compute limits on (the launch gate, the watcher and its NVML polling all run), 60
/// forks under three busy threads. Without the shim the same program passes (control).
#[test]
fn forked_children_of_a_busy_cuda_process_never_hang() {
    const FORKS: u32 = 60;
    let prog = fork_stress();
    let sb = Sandbox::new("fork-stress");
    let base = sb.run(&prog).args([FORKS.to_string(), "3".into()]).timeout_secs(240).go();
    check(&base, FORKS);

    let sb = Sandbox::new("fork-stress-shim");
    let out = sb
        .run(&prog)
        .args([FORKS.to_string(), "3".into()])
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("CUDA_DEVICE_SM_LIMIT", "50")
        .env("GPU_CORE_UTILIZATION_POLICY", "force")
        .timeout_secs(240)
        .go();
    check(&out, FORKS);
    // Memory limit only: launches take the unthrottled path, allocations dominate.
    let sb2 = Sandbox::new("fork-stress-mem");
    let mem = sb2
        .run(&prog)
        .args([FORKS.to_string(), "4".into()])
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .timeout_secs(240)
        .go();
    check(&mem, FORKS);
    // Every child detached its own slot at exit; only the parent remained until it exited.
    let region = std::fs::read(sb.region()).expect("region file");
    let proc_num = i32::from_le_bytes(region[2_008_896..2_008_900].try_into().unwrap());
    assert_eq!(proc_num, 0, "all slots given back: {}", out.dump());
}
