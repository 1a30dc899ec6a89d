//! Issue 9 §6 and §9 end to end: a set-but-empty limit variable in the process that creates the
//! region means "unset" (PID 1's value), a region created unlimited while PID 1 has a limit is
//! warned about, and limit variables for device indices ≥ 16 are reported.
//!
//! PID 1's environment is the container's: the tests run the processes in a fresh PID namespace
//! (`unshare -pf --mount-proc`, the test machine runs them as root) whose PID 1 is a shell started
//! with the device plugin's variables.

mod common;
mod hardening_support;

use common::*;

fn alloc_hold() -> std::path::PathBuf {
    hardening_support::c_program("alloc_hold", &["alloc_hold.c"], &["-lcuda"])
}

/// Runs `script` as PID 1 of a new PID namespace, with `pid1_env` in its environment.
fn in_pid_namespace(sb: &Sandbox, pid1_env: &[(&str, &str)], script: &str) -> Out {
    let mut r = sb
        .run("/usr/bin/unshare")
        .args(["-pf", "--mount-proc", "/bin/sh", "-c", script])
        .shim(false)
        .env_remove("CUDA_DEVICE_MEMORY_SHARED_CACHE")
        .env("SHIM", &artifacts().shim)
        .env("PROG", alloc_hold())
        .env("REGION", sb.region())
        .env("VGPU_SIM_CTX_MIB", "2")
        .timeout_secs(60);
    for (k, v) in pid1_env {
        r = r.env(k, v);
    }
    r.go()
}

/// The first process (it creates the region) has `CUDA_DEVICE_MEMORY_LIMIT=`; PID 1 has 1g. Its
/// 600 MiB fit; a second process's 600 MiB do not.
#[test]
fn empty_limit_in_the_creating_process_takes_pid1s_limit() {
    if !hardening_support::root_namespaces_or_skip("empty_limit_in_the_creating_process_takes_pid1s_limit") {
        return;
    }
    let sb = Sandbox::new("env-empty");
    let script = r#"
        export CUDA_DEVICE_MEMORY_SHARED_CACHE="$REGION"
        CUDA_DEVICE_MEMORY_LIMIT= LD_PRELOAD="$SHIM" "$PROG" 600 go > one.out 2> one.err &
        for i in $(seq 1 3000); do grep -q rc= one.out 2>/dev/null && break; sleep 0.01; done
        CUDA_DEVICE_MEMORY_LIMIT= LD_PRELOAD="$SHIM" "$PROG" 600 > two.out 2> two.err
        touch go; wait
        echo "one: $(cat one.out)"; echo "two: $(cat two.out)"; cat one.err two.err >&2
    "#;
    let out = in_pid_namespace(&sb, &[("CUDA_DEVICE_MEMORY_LIMIT", "1g")], script);
    out.ok();
    let line = |k: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("{k} missing: {}", out.dump()))
            .to_string()
    };
    assert!(line("one:").contains("rc=0 total=1073741824"), "the creator is limited by PID 1's 1 GiB: {}", out.dump());
    assert!(line("two:").contains("rc=2 "), "the second 600 MiB is refused container-wide: {}", out.dump());
    let region = std::fs::read(sb.region()).expect("region");
    assert_eq!(u64::from_le_bytes(region[1600..1608].try_into().unwrap()), 1 << 30, "region limit of device 0");
}

/// A creator whose environment has contract variables but no memory limit, while PID 1 has one:
/// the region is unlimited (the environment is the user's), and that is logged as a warning.
#[test]
fn region_created_unlimited_while_pid1_has_a_limit_is_warned() {
    if !hardening_support::root_namespaces_or_skip("region_created_unlimited_while_pid1_has_a_limit_is_warned") {
        return;
    }
    let sb = Sandbox::new("env-unlimited");
    let script = r#"
        unset CUDA_DEVICE_MEMORY_LIMIT
        CUDA_DEVICE_MEMORY_SHARED_CACHE="$REGION" CUDA_DEVICE_SM_LIMIT=50 LD_PRELOAD="$SHIM" "$PROG" 1
    "#;
    let out = in_pid_namespace(&sb, &[("CUDA_DEVICE_MEMORY_LIMIT", "1g")], script);
    out.ok();
    let warned: Vec<_> = out
        .shim_logs()
        .into_iter()
        .filter(|(_, l, m)| l == "WARN" && m.contains("created without a memory limit"))
        .collect();
    assert_eq!(warned.len(), 1, "{}", out.dump());
    assert!(warned[0].2.contains("1073741824"), "{}", out.dump());
}

/// Limit variables for indices 16 and up: one warning line each, once, naming the variable.
#[test]
fn limit_variables_for_indices_from_16_are_reported_once() {
    let sb = Sandbox::new("env-index");
    let out = sb
        .run(alloc_hold())
        .arg("1")
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT_16", "1g")
        .env("CUDA_DEVICE_MEMORY_LIMIT_99", "1g")
        .env("CUDA_DEVICE_SM_LIMIT_16", "20")
        .env("CUDA_DEVICE_MEMORY_LIMIT", "2g")
        .go();
    out.ok();
    for var in ["CUDA_DEVICE_MEMORY_LIMIT_16", "CUDA_DEVICE_MEMORY_LIMIT_99", "CUDA_DEVICE_SM_LIMIT_16"] {
        let n = out
            .shim_logs()
            .iter()
            .filter(|(_, l, m)| l == "WARN" && m.starts_with(&format!("{var}=")) && m.contains("out of range"))
            .count();
        assert_eq!(n, 1, "{var}: {}", out.dump());
    }
    assert!(out.stdout.contains("rc=0 total=2147483648"), "the valid global limit applies: {}", out.dump());
}
