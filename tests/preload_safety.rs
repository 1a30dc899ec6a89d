//! The shim must be harmless for every process it is preloaded into: non-CUDA programs never load
//! the driver or create the region, a missing driver behaves as without the shim, `RTLD_NEXT` /
//! `RTLD_DEFAULT` semantics are preserved (docs/shim-notes.md §2), and an application's `dlclose` of
//! the driver does not break later use (§13).

mod common;
use common::*;

#[test]
fn true_and_shell_run_under_shim() {
    let sb = Sandbox::new("true");
    let o = sb.run("/bin/true").shim_debug().go();
    o.ok();
    assert!(o.stderr.is_empty(), "/bin/true printed under the shim: {}", o.dump());
    let o = sb.run("/bin/sh").args(["-c", "echo hello; /bin/true && echo ok"]).shim_debug().go();
    o.ok();
    assert_eq!(o.stdout, "hello\nok\n", "{}", o.dump());
    assert!(o.stderr.is_empty(), "sh printed under the shim: {}", o.dump());
    assert!(!sb.region().exists(), "region file created by a non-CUDA process");
    assert!(!sb.state().exists(), "sim state created by a non-CUDA process (driver was loaded)");
}

#[test]
fn cat_maps_shows_shim_but_no_driver() {
    let sb = Sandbox::new("catmaps");
    let o = sb.run("/bin/cat").arg("/proc/self/maps").shim_debug().go();
    o.ok();
    assert!(o.stdout.contains("libvgpu.so"), "shim not mapped, test is void: {}", o.dump());
    for bad in ["libcuda", "libnvidia-ml", "libnvidia_ml"] {
        assert!(!o.stdout.contains(bad), "{bad} mapped in a non-CUDA process: {}", o.dump());
    }
    assert!(!sb.region().exists(), "region file created by cat");
    assert!(!sb.state().exists(), "sim state created by cat");
}

#[test]
fn dlsym_user_without_cuda_loads_nothing_and_starts_no_thread() {
    let sb = Sandbox::new("mapsclient");
    let base = sb.run("maps_client").go();
    base.ok();
    assert_eq!(base.val("maps_vgpu"), "0");
    let o = sb.run("maps_client").shim_debug().go();
    o.ok();
    assert_eq!(o.val("maps_vgpu"), "1", "shim not mapped, test is void: {}", o.dump());
    assert_eq!(o.val("maps_cuda"), "0", "driver loaded by the shim in a non-CUDA process: {}", o.dump());
    assert_eq!(o.val("maps_nvml"), "0", "NVML loaded by the shim in a non-CUDA process: {}", o.dump());
    assert_eq!(o.val("threads"), "1", "shim started a thread in a non-CUDA process: {}", o.dump());
    assert_eq!(
        base.kv_without(&["maps_vgpu"]),
        o.kv_without(&["maps_vgpu"]),
        "dlsym results differ under the shim:\n{}\n{}",
        base.dump(),
        o.dump()
    );
    assert!(o.hooks().is_empty(), "hooks logged for non-CUDA lookups: {}", o.dump());
    assert!(!sb.region().exists(), "region file created by a non-CUDA process");
    assert!(!sb.state().exists(), "sim state created by a non-CUDA process");
}

/// No `libcuda.so.1` anywhere: every program runs as without the shim.
#[test]
fn no_driver_anywhere_behaves_like_without_shim() {
    if system_has_libcuda() {
        eprintln!("skipped: the system has a real libcuda.so.1 in the loader cache");
        return;
    }
    let sb = Sandbox::new("nodriver");
    let empty = sb.subdir("emptylib");
    let run = |prog: &str, shim: bool| {
        let r = sb.run(prog).ld_library_path(Some(empty.clone()));
        let r = if shim { r.shim_debug() } else { r };
        r.go()
    };
    // Non-CUDA program.
    run("/bin/true", true).ok();
    // dlopen-based CUDA clients: same exit code, same stdout, their own error message.
    for prog in ["dlsym_client", "cudart_like", "dlclose_reopen"] {
        let base = run(prog, false);
        let shim = run(prog, true);
        assert_eq!(base.code, Some(2), "baseline {prog} should fail to dlopen: {}", base.dump());
        assert_eq!(shim.code, base.code, "{prog}: exit code differs under the shim: {}", shim.dump());
        assert_eq!(shim.stdout, base.stdout, "{prog}: stdout differs: {}", shim.dump());
        assert!(
            shim.stderr.contains("libcuda.so.1"),
            "{prog}: the client's own dlopen message is missing: {}",
            shim.dump()
        );
        shim.assert_no_shim_errors();
    }
    // A directly linked client cannot start at all, with or without the shim (loader error).
    let base = run("direct", false);
    let shim = run("direct", true);
    assert_eq!(base.code, Some(127), "{}", base.dump());
    assert_eq!(shim.code, Some(127), "{}", shim.dump());
    // Framework-style probe: must not crash; dlopen fails in both cases. The shim exports cuInit
    // (docs/shim-notes.md §10), so a naive shim would answer dlsym(RTLD_DEFAULT, "cuInit"); if it
    // ever does, calling it without a driver must return an error, not crash.
    let base = run("probe_client", false);
    base.ok();
    assert_eq!(base.val("default_cuInit_found"), "0");
    assert_eq!(base.val("dlopen_cuda"), "fail");
    let shim = run("probe_client", true);
    shim.ok();
    assert_eq!(shim.val("dlopen_cuda"), "fail");
    assert_eq!(shim.val("dlopen_nvml"), "fail");
    if shim.val("default_cuInit_found") == "1" {
        assert_ne!(shim.val("default_cuInit_rc"), "0", "shim cuInit without a driver must fail: {}", shim.dump());
    }
    // Stronger: the shim's own cuInit export must not make CUDA look present.
    assert_eq!(base.kv(), shim.kv(), "probe differs under the shim without a driver: {}", shim.dump());
    assert!(!sb.region().exists(), "region file created although no driver could be loaded");
}

/// With a driver present, a framework-style probe sees the same as without the shim: in particular
/// `dlsym(RTLD_DEFAULT, "cuInit")` before the driver is loaded stays NULL (the shim's own export
/// must not make CUDA look present), and cuInit through the handle works.
#[test]
fn probe_with_driver_present() {
    let sb = Sandbox::new("probe");
    let base = sb.run("probe_client").go();
    base.ok();
    let shim = sb.run("probe_client").shim_debug().go();
    shim.ok();
    assert_eq!(base.val("dlopen_cuda"), "ok");
    assert_eq!(base.val("default_cuInit_found"), "0");
    assert_eq!(shim.val("handle_cuInit_rc"), "0", "{}", shim.dump());
    // Also after an RTLD_LOCAL dlopen of the driver: the shim answers RTLD_DEFAULT with what the
    // global scope holds without it (nothing), not with its own export.
    assert_eq!(base.kv_without(&[]), shim.kv_without(&[]), "{}\n{}", base.dump(), shim.dump());
}

// ---------------------------------------------------------------------------------------------
// RTLD_NEXT / RTLD_DEFAULT (docs/shim-notes.md §2).

fn rtld_next(sb: &Sandbox, preload: Option<&std::path::Path>) -> Out {
    let mut r = sb.run("rtld_next");
    if let Some(p) = preload {
        r = r.env("LD_PRELOAD", p);
    }
    r.go()
}

fn rtld_default(sb: &Sandbox, preload: Option<&std::path::Path>) -> Out {
    let mut r = sb.run("rtld_default").arg(artifacts().bin("libplugin.so"));
    if let Some(p) = preload {
        r = r.env("LD_PRELOAD", p);
    }
    r.go()
}

#[test]
fn rtld_next_interposer_chain_preserved() {
    let sb = Sandbox::new("rtldnext");
    let base = rtld_next(&sb, None);
    base.ok();
    assert_eq!(base.val("foo"), "43", "{}", base.dump());
    let shim = rtld_next(&sb, Some(&artifacts().shim));
    shim.ok();
    assert_eq!(shim.val("foo"), "43", "RTLD_NEXT resolved relative to the shim instead of the caller: {}", shim.dump());
}

#[test]
fn rtld_default_from_local_plugin_preserved() {
    let sb = Sandbox::new("rtlddefault");
    let base = rtld_default(&sb, None);
    base.ok();
    assert_eq!(base.val("plugin_default"), "7", "{}", base.dump());
    assert_eq!(base.val("plugin_next"), "7", "{}", base.dump());
    assert_eq!(base.val("main_default_priv"), "0", "{}", base.dump());
    let shim = rtld_default(&sb, Some(&artifacts().shim));
    shim.ok();
    assert_eq!(base.kv(), shim.kv(), "RTLD_DEFAULT/RTLD_NEXT scope changed by the shim: {}", shim.dump());
}

/// Control: the regression tests above do detect a dlsym wrapper that *calls* the real dlsym.
#[test]
fn rtld_tests_detect_a_naive_dlsym_wrapper() {
    let sb = Sandbox::new("rtldnaive");
    let naive = artifacts().bin("libnaive_shim.so");
    let o = rtld_next(&sb, Some(&naive));
    o.ok();
    assert_ne!(o.val("foo"), "43", "naive wrapper not detected: {}", o.dump());
    let o = rtld_default(&sb, Some(&naive));
    o.ok();
    assert_ne!(o.val("plugin_default"), "7", "naive wrapper not detected: {}", o.dump());
}

// ---------------------------------------------------------------------------------------------
// dlclose / re-dlopen (docs/shim-notes.md §13).

#[test]
fn dlclose_and_reopen_works_under_shim() {
    let sb0 = Sandbox::new("dlclose-base");
    let base = sb0.run("dlclose_reopen").go();
    base.ok();
    let sb = Sandbox::new("dlclose-shim");
    let shim = sb.run("dlclose_reopen").shim_debug().go();
    shim.ok();
    assert_eq!(
        base.kv_without(&["info_mapped_after_dlclose"]),
        shim.kv_without(&["info_mapped_after_dlclose"]),
        "{}\n{}",
        base.dump(),
        shim.dump()
    );
    let h = shim.hooks();
    assert_eq!(h.get("cuMemAlloc_v2"), Some(&2), "both rounds' allocations hooked: {h:?}");
    assert_eq!(h.get("cuMemFree_v2"), Some(&2), "{h:?}");
    // The shim holds the driver open (RTLD_NODELETE), so it stays mapped after the app's dlclose.
    assert_eq!(shim.val("info_mapped_after_dlclose"), "1", "{}", shim.dump());
    let c = sb.counts();
    assert_eq!(c.get("cuMemAlloc_v2"), Some(&2), "{c:?}");
}

#[test]
fn pointer_from_before_dlclose_still_works_under_shim() {
    let sb = Sandbox::new("dlclose-stale");
    let o = sb.run("dlclose_reopen").arg("stale").shim_debug().go();
    o.ok();
    assert_eq!(o.val("stale_alloc"), "0");
    assert_eq!(o.val("done"), "1");
    let h = o.hooks();
    assert_eq!(h.get("cuMemAlloc_v2"), Some(&3), "{h:?}");
}

/// The shim opens the driver itself with RTLD_NODELETE (docs/shim-notes.md §13), so an application's
/// dlclose can never unmap what the shim's cached pointers point into. (The simulated driver happens
/// to stay mapped after dlclose anyway, so this is checked at the dlopen call: a spy library
/// preloaded before the shim logs every dlopen with its flags and calling object.)
#[test]
fn shim_opens_driver_with_rtld_nodelete() {
    let a = artifacts();
    let sb = Sandbox::new("nodelete");
    let preload = format!("{}:{}", a.bin("libdlopen_spy.so").display(), a.shim.display());
    let o = sb.run("dlclose_reopen").env("LD_PRELOAD", preload).go();
    o.ok();
    let spy: Vec<(&str, u32, &str)> = o
        .stderr
        .lines()
        .filter_map(|l| {
            let r = l.strip_prefix("[spy] dlopen name=")?;
            let (name, r) = r.split_once(" flags=0x")?;
            let (flags, caller) = r.split_once(" caller=")?;
            Some((name, u32::from_str_radix(flags, 16).ok()?, caller))
        })
        .collect();
    assert!(
        spy.iter().any(|(n, _, c)| *c == "dlclose_reopen" && n.contains("libcuda.so.1")),
        "spy saw no application dlopen, test is void: {spy:?}\n{}",
        o.dump()
    );
    let by_shim: Vec<_> = spy
        .iter()
        // The release artifact's engine (libvgpu-engine.so) opens the driver for the first stage.
        .filter(|(n, _, c)| (*c == "libvgpu.so" || *c == "libvgpu-engine.so") && n.contains("libcuda"))
        .collect();
    assert!(!by_shim.is_empty(), "the shim never dlopen()ed the driver: {spy:?}");
    for (n, f, _) in &by_shim {
        assert!(f & (libc::RTLD_NODELETE as u32) != 0, "shim opened {n} without RTLD_NODELETE (flags {f:#x})");
    }
}
