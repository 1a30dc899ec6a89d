//! The environment contract as a user meets it: malformed values are named once in the log and
//! a safe choice is made; the program keeps running.

mod common;
use common::*;

/// Log lines of the client process itself (its forked child logs for itself).
fn log_lines_with(out: &Out, needle: &str) -> usize {
    let prefix = format!("[libvgpu {}] ", out.pid);
    out.stderr.lines().filter(|l| l.starts_with(&prefix) && l.contains(needle)).count()
}

#[test]
fn malformed_memory_limit_is_logged_once_and_the_program_runs() {
    let sb = Sandbox::new("cfg-malformed");
    let out = sb.run(artifacts().bin("fork_client")).shim(true).env("CUDA_DEVICE_MEMORY_LIMIT", "1.5g").go();
    out.ok();
    assert_eq!(log_lines_with(&out, "CUDA_DEVICE_MEMORY_LIMIT"), 1, "one line naming the variable: {}", out.dump());
    assert_eq!(log_lines_with(&out, "1.5g"), 1, "the line names the value: {}", out.dump());
}

#[test]
fn malformed_sm_limit_and_policy_do_not_stop_the_program() {
    let sb = Sandbox::new("cfg-sm");
    let out = sb
        .run(artifacts().bin("cudart_like"))
        .shim(true)
        .env("CUDA_DEVICE_SM_LIMIT", "fifty")
        .env("CUDA_TASK_PRIORITY", "high")
        .env("LIBCUDA_LOG_LEVEL", "2")
        .go();
    out.ok();
    assert!(log_lines_with(&out, "CUDA_DEVICE_SM_LIMIT") >= 1, "{}", out.dump());
    assert!(log_lines_with(&out, "CUDA_TASK_PRIORITY") >= 1, "{}", out.dump());
}

#[test]
fn per_device_limit_overrides_the_global_one() {
    let sb = Sandbox::new("cfg-perdev");
    let out = sb
        .run(artifacts().bin("fork_client"))
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "32m")
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "2g")
        .go();
    // fork_client allocates 64 MiB: refused under 32m, allowed under the per-device 2g.
    out.ok();
    let region = std::fs::read(sb.region()).expect("region file");
    let limit0 = u64::from_le_bytes(region[1600..1608].try_into().unwrap());
    assert_eq!(limit0, 2 << 30, "limit[0] in bytes from CUDA_DEVICE_MEMORY_LIMIT_0");
    let limit1 = u64::from_le_bytes(region[1608..1616].try_into().unwrap());
    assert_eq!(limit1, 32 << 20, "other devices keep the global value");
}

#[test]
fn log_level_zero_silences_warnings_but_not_errors() {
    let sb = Sandbox::new("cfg-quiet");
    let out = sb
        .run(artifacts().bin("fork_client"))
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1.5g")
        .env("LIBCUDA_LOG_LEVEL", "0")
        .go();
    out.ok();
    assert_eq!(log_lines_with(&out, "WARN"), 0, "{}", out.dump());
}

#[test]
fn malformed_log_level_is_reported_once_by_the_one_parser() {
    // The early logger and the configuration share one parser; only the configuration reports a
    // malformed value (once), and the default level 2 applies.
    let sb = Sandbox::new("cfg-loglevel");
    let out = sb.run(artifacts().bin("cudart_like")).shim(true).env("LIBCUDA_LOG_LEVEL", "-1").go();
    out.ok();
    let lines = out.stderr.lines().filter(|l| l.contains("LIBCUDA_LOG_LEVEL")).count();
    assert_eq!(lines, 1, "one line naming the variable, from any source: {}", out.dump());
    assert_eq!(log_lines_with(&out, "LIBCUDA_LOG_LEVEL=\"-1\""), 1, "the line names the value: {}", out.dump());
    assert_eq!(log_lines_with(&out, "INFO"), 0, "default level 2 (no info lines): {}", out.dump());
}
