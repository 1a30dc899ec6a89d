//! Self-tests of the test harness (tests/common): timeouts kill, the environment is scrubbed,
//! sandboxes are isolated.

mod common;
use common::*;

#[test]
#[should_panic(expected = "TIMEOUT")]
fn timeout_kills_and_fails() {
    let sb = Sandbox::new("timeout");
    // A grandchild keeps the pipes open too: the whole process group must die.
    sb.run("/bin/sh").args(["-c", "sleep 30 & sleep 30"]).timeout_secs(1).go();
}

#[test]
fn environment_is_scrubbed_and_sandboxed() {
    let sb = Sandbox::new("env");
    let o = sb.run("/usr/bin/env").env("LIBCUDA_LOG_LEVEL", "4").go();
    o.ok();
    let mut ours: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| {
            ["CUDA_", "VGPU_", "LIBCUDA_", "NVIDIA_", "HAMI_", "LD_", "GPU_CORE_UTILIZATION_POLICY="]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    ours.sort();
    let a = artifacts();
    let expected = [
        format!("CUDA_DEVICE_MEMORY_SHARED_CACHE={}", sb.region().display()),
        format!("LD_LIBRARY_PATH={}", a.simlib.display()),
        "LIBCUDA_LOG_LEVEL=4".to_string(),
        format!("VGPU_SIM_COUNT_FILE={}", sb.counts_file().display()),
        format!("VGPU_SIM_STATE={}", sb.state().display()),
    ];
    assert_eq!(ours, expected.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn shim_run_sets_preload_and_artifacts_exist() {
    let a = artifacts();
    for p in [&a.shim, &a.simctl, &a.simlib.join("libcuda.so.1"), &a.simlib.join("libnvidia-ml.so.1")] {
        assert!(p.exists(), "{} missing", p.display());
    }
    let sb = Sandbox::new("preload");
    let o = sb.run("/usr/bin/env").shim(true).go();
    o.ok();
    assert!(o.stdout.lines().any(|l| l == format!("LD_PRELOAD={}", a.shim.display())), "{}", o.dump());
}

#[test]
fn sandboxes_are_distinct() {
    let a = Sandbox::new("same");
    let b = Sandbox::new("same");
    assert_ne!(a.dir, b.dir);
    assert_ne!(a.state(), b.state());
}
