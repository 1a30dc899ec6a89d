//! Interception through every loading pattern: directly linked, dlopen+dlsym, and libcudart's
//! cuGetProcAddress-only pattern. Each client runs without the shim (baseline against the simulated
//! GPU) and with the shim at `LIBCUDA_LOG_LEVEL=4`; results must be identical and the hooks reached
//! must be logged.

mod common;
use common::*;

/// Keys whose values legitimately differ with the shim (where a hooked pointer lives).
const HOOKED_OBJ_KEYS: &[&str] = &[
    "obj_hooked_cuMemAlloc",
    "obj_hooked_cuLaunchKernel",
    "obj_hooked_cuLaunchKernel_ptsz",
    "obj_hooked_cuGetProcAddress_12000",
];

fn baseline_and_shim(client: &str, name: &str) -> (Out, Out, Sandbox, Sandbox) {
    let sb0 = Sandbox::new(&format!("{name}-base"));
    let base = sb0.run(client).go();
    base.ok();
    let sb1 = Sandbox::new(&format!("{name}-shim"));
    let shim = sb1.run(client).shim_debug().go();
    shim.ok();
    (base, shim, sb0, sb1)
}

#[track_caller]
fn assert_same_results(base: &Out, shim: &Out, skip: &[&str]) {
    let b = base.kv_without(skip);
    let s = shim.kv_without(skip);
    if b != s {
        let diff: Vec<String> = b
            .iter()
            .zip(s.iter())
            .filter(|(x, y)| x != y)
            .map(|(x, y)| format!("  {}={}  vs shim  {}={}", x.0, x.1, y.0, y.1))
            .collect();
        panic!(
            "results differ with the shim (lens {} vs {}):\n{}\nBASELINE {}\nSHIM {}",
            b.len(),
            s.len(),
            diff.join("\n"),
            base.dump(),
            shim.dump()
        );
    }
}

/// Every shim log line of a single-process client carries the client's pid.
#[track_caller]
fn assert_log_pid(out: &Out) {
    let logs = out.shim_logs();
    assert!(!logs.is_empty(), "no shim log lines at LIBCUDA_LOG_LEVEL=4: {}", out.dump());
    let bad: Vec<_> = logs.iter().filter(|(p, _, _)| *p != out.pid).collect();
    assert!(bad.is_empty(), "log lines with a pid other than {}: {bad:?}", out.pid);
}

// ---------------------------------------------------------------------------------------------
// Baselines: the simulated GPU alone (these pin down the sim behaviour the other tests rely on).

#[test]
fn baseline_direct_sim_semantics() {
    let sb = Sandbox::new("base-direct");
    let o = sb.run("direct").go();
    o.ok();
    let total: u64 = o.val("mem_total").parse().unwrap();
    let free: u64 = o.val("mem_free").parse().unwrap();
    let free_a: u64 = o.val("mem_free_after_alloc").parse().unwrap();
    let free_f: u64 = o.val("mem_free_after_free").parse().unwrap();
    assert_eq!(total, 16384 << 20, "default simulated device is 16 GiB: {}", o.dump());
    assert!(free < total, "context memory must be charged: {}", o.dump());
    assert_eq!(free - free_a, 64 << 20, "64 MiB allocation must show in cuMemGetInfo: {}", o.dump());
    assert_eq!(free_f, free, "free must give the memory back: {}", o.dump());
    let nvml_total: u64 = o.val("nvml_total").parse().unwrap();
    let nvml_used: u64 = o.val("nvml_used").parse().unwrap();
    assert_eq!(nvml_total, total, "{}", o.dump());
    assert_eq!(nvml_used, total - free_a, "NVML used = this process's context + allocation: {}", o.dump());
    let c = sb.counts();
    assert_eq!(c.get("cuLaunchKernel"), Some(&1), "sim count file: {c:?}");
    assert_eq!(c.get("cuMemAlloc_v2"), Some(&1), "sim count file: {c:?}");
}

#[test]
fn baseline_cudart_like_distinct_variants() {
    let sb = Sandbox::new("base-cudart");
    let o = sb.run("cudart_like").go();
    o.ok();
    assert_ne!(o.val("probe_empty"), "0", "empty-name probe must not succeed");
    assert_eq!(o.val("probe_empty_null"), "1");
    assert_eq!(o.val("launch_ptsz_distinct"), "1", "sim must return distinct ptsz pointers");
    assert_eq!(o.val("gpa_v1_ne_v2"), "1");
    assert_eq!(o.val("obj_cuGetExportTable"), "libcuda.so.1");
    assert_eq!(o.val("obj_hooked_cuMemAlloc"), "libcuda.so.1");
    let c = sb.counts();
    assert_eq!(c.get("cuLaunchKernel"), Some(&1), "{c:?}");
    assert_eq!(c.get("cuLaunchKernel_ptsz"), Some(&1), "{c:?}");
}

// ---------------------------------------------------------------------------------------------
// With the shim.

#[test]
fn direct_linked_client_is_intercepted() {
    let (base, shim, _a, sb) = baseline_and_shim("direct", "direct");
    assert_same_results(&base, &shim, &[]);
    shim.assert_hooked(&[
        "cuInit",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuMemGetInfo_v2",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuLaunchKernel",
        "nvmlInit_v2",
        "nvmlDeviceGetMemoryInfo",
    ]);
    let h = shim.hooks();
    assert_eq!(h.get("cuMemGetInfo_v2"), Some(&3), "three cuMemGetInfo_v2 calls: {h:?}");
    assert_eq!(h.get("cuLaunchKernel"), Some(&1), "{h:?}");
    assert_log_pid(&shim);
    shim.assert_no_shim_errors();
    let c = sb.counts();
    assert_eq!(c.get("cuLaunchKernel"), Some(&1), "hook must reach the sim's cuLaunchKernel: {c:?}");
    assert_eq!(c.get("cuMemAlloc_v2"), Some(&1), "{c:?}");
    assert_eq!(c.get("cuMemFree_v2"), Some(&1), "{c:?}");
}

#[test]
fn dlsym_client_is_intercepted() {
    let (base, shim, _a, sb) = baseline_and_shim("dlsym_client", "dlsym");
    assert_same_results(&base, &shim, &[]);
    // obj_cuDeviceGet: unhooked names must resolve to the driver itself.
    assert_eq!(shim.val("obj_cuDeviceGet"), "libcuda.so.1");
    shim.assert_hooked(&[
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuMemGetInfo_v2",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuLaunchKernel",
        "nvmlInit_v2",
        "nvmlDeviceGetMemoryInfo",
    ]);
    let h = shim.hooks();
    // One call through the dlsym'd pointer and one through the v1 cuGetProcAddress pointer.
    assert_eq!(h.get("cuMemGetInfo_v2"), Some(&2), "{h:?}");
    // cuMemFree_v2 was called through the RTLD_DEFAULT pointer.
    assert_eq!(h.get("cuMemFree_v2"), Some(&1), "{h:?}");
    assert_log_pid(&shim);
    shim.assert_no_shim_errors();
    let c = sb.counts();
    assert_eq!(c.get("cuLaunchKernel"), Some(&1), "{c:?}");
    assert_eq!(c.get("cuMemFree_v2"), Some(&1), "{c:?}");
}

#[test]
fn cudart_pattern_is_intercepted_including_ptsz() {
    let (base, shim, sb0, sb) = baseline_and_shim("cudart_like", "cudart");
    assert_same_results(&base, &shim, HOOKED_OBJ_KEYS);
    // The pointers handed out for hooked names must be the shim's; unhooked ones the driver's;
    // cuGetExportTable must be the driver's own, unwrapped.
    for k in HOOKED_OBJ_KEYS {
        assert_eq!(shim.val(k), "libvgpu.so", "{k} must point into the shim: {}", shim.dump());
        assert_eq!(base.val(k), "libcuda.so.1", "{k} baseline: {}", base.dump());
    }
    assert_eq!(shim.val("obj_cuGetExportTable"), "libcuda.so.1");
    assert_eq!(shim.val("obj_cuDeviceGet"), "libcuda.so.1");
    assert_eq!(shim.val("launch_ptsz_distinct"), "1", "flags=2 lookup must not collapse onto the legacy hook");
    shim.assert_hooked(&[
        "cuMemGetInfo_v2",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
    ]);
    let h = shim.hooks();
    assert_eq!(h.get("cuLaunchKernel"), Some(&1), "legacy launch → cuLaunchKernel hook once: {h:?}");
    assert_eq!(h.get("cuLaunchKernel_ptsz"), Some(&1), "per-thread launch → _ptsz hook once: {h:?}");
    // 4 lookups through the dlsym'd cuGetProcAddress_v2, 13 through the pointer returned for
    // "cuGetProcAddress"@12000: all must go through the shim's wrapper.
    assert_eq!(h.get("cuGetProcAddress_v2"), Some(&17), "{h:?}");
    shim.assert_not_hooked(&["cuGetExportTable"]);
    assert_log_pid(&shim);
    shim.assert_no_shim_errors();
    // The sim's per-variant counts: the legacy launch reached cuLaunchKernel, the ptsz one
    // cuLaunchKernel_ptsz, exactly as without the shim.
    let c0 = sb0.counts();
    let c = sb.counts();
    for sym in ["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2"] {
        assert_eq!(c.get(sym), c0.get(sym), "sim count of {sym}: shim {c:?} vs baseline {c0:?}");
    }
    assert_eq!(c.get("cuLaunchKernel"), Some(&1), "{c:?}");
    assert_eq!(c.get("cuLaunchKernel_ptsz"), Some(&1), "{c:?}");
}

#[test]
fn old_glibc_dlsym_version_is_interposed() {
    let sb0 = Sandbox::new("olddlsym-base");
    let base = sb0.run("old_dlsym_client").go();
    base.ok();
    let sb = Sandbox::new("olddlsym-shim");
    let shim = sb.run("old_dlsym_client").shim_debug().go();
    shim.ok();
    assert_same_results(&base, &shim, &["obj_hooked_cuMemAlloc_v2"]);
    assert_eq!(base.val("obj_hooked_cuMemAlloc_v2"), "libcuda.so.1");
    assert_eq!(
        shim.val("obj_hooked_cuMemAlloc_v2"),
        "libvgpu.so",
        "dlsym@GLIBC_2.2.5 must be interposed by the shim's unversioned dlsym"
    );
    shim.assert_hooked(&["cuMemAlloc_v2", "cuMemFree_v2"]);
}

#[test]
fn shim_is_silent_at_default_log_level() {
    // Without LIBCUDA_LOG_LEVEL the shim must not print debug/info noise into the app's stderr.
    let sb = Sandbox::new("quiet");
    let o = sb.run("cudart_like").shim(true).go();
    o.ok();
    let noisy: Vec<_> = o.shim_logs().into_iter().filter(|(_, l, _)| l == "DEBUG" || l == "INFO").collect();
    assert!(noisy.is_empty(), "debug/info lines at the default level: {noisy:?}");
    assert!(o.hooks().is_empty());
}

/// 16 threads race through first use (dlopen, dlsym of cuGetProcAddress_v2, lookups) and then do
/// 500 alloc/free pairs each (docs/shim-notes.md §3): every pair succeeds and memory comes back.
#[test]
fn first_use_race_16_threads() {
    let sb0 = Sandbox::new("race-base");
    let base = sb0.run("race_client").args(["16", "500"]).go();
    base.ok();
    assert_eq!(base.val("ok_pairs"), "8000", "{}", base.dump());
    let sb = Sandbox::new("race-shim");
    let shim = sb.run("race_client").args(["16", "500"]).shim_debug().go();
    shim.ok();
    assert_same_results(&base, &shim, &[]);
    let h = shim.hooks();
    assert_eq!(h.get("cuMemAlloc_v2"), Some(&8000), "every allocation went through the hook");
    assert_eq!(h.get("cuMemFree_v2"), Some(&8000));
    shim.assert_no_shim_errors();
    assert_eq!(shim.val("free_restored"), "1");
    let c = sb.counts();
    assert_eq!(c.get("cuMemAlloc_v2"), Some(&8000), "{c:?}");
    assert_eq!(c.get("cuMemFree_v2"), Some(&8000), "{c:?}");
}
