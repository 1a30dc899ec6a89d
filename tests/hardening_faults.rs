//! Internal failures, simulated with the test-only fault switch (src/faults.rs, the shim of
//! `common::fault_shim`): each leaves the process working, governed and never waiting forever.

mod common;

use common::*;

/// A panic while the process state is first built: every call of every thread, then and later,
/// returns (no thread waits for a state that never comes), no allocation is handed out
/// ungoverned, and the cause is logged once.
#[test]
fn a_panic_while_building_the_state_fails_every_call_without_a_hang() {
    let sb = Sandbox::new("fault-build");
    let prog = c_program("fault_client", &["fault_client.c"], &["-pthread", "-lcuda"]);
    let out = sb
        .run(&prog)
        .arg("4")
        .env("LD_PRELOAD", fault_shim())
        .env("VGPU_TEST_FAULT", "build_panic")
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .timeout_secs(20)
        .go();
    assert_eq!(out.val("done"), "1", "{}", out.dump());
    for t in 0..=4 {
        assert_eq!(out.val(&format!("t{t}_ctx")), "1", "thread {t} has a current context: {}", out.dump());
        let rc = out.val(&format!("t{t}_alloc"));
        assert_ne!(rc, "0", "thread {t}: no allocation without a governor: {}", out.dump());
    }
    let lines = out.stderr.matches("internal error (panic) while setting up the GPU governor").count();
    assert_eq!(lines, 1, "the cause is logged once: {}", out.dump());
    assert!(!out.stderr.contains("internal error (panic) in cu"), "no line per call: {}", out.dump());

    // Control: the same program without the fault is governed and allocates.
    let ok = sb.run(&prog).arg("4").env("LD_PRELOAD", fault_shim()).env("CUDA_DEVICE_MEMORY_LIMIT", "1g").go();
    for t in 0..=4 {
        assert_eq!(ok.val(&format!("t{t}_alloc")), "0", "{}", ok.dump());
    }
}

/// A panic inside `dlsym` interception of a hooked name hands out the hook (fail closed), never
/// the driver's function: a tracer library's `dlsym(RTLD_NEXT, "cuMemAlloc_v2")` stays governed.
#[test]
fn a_panic_in_dlsym_interception_hands_out_the_hook() {
    let lib =
        c_program("libtracer.so", &["tracer_lib.c"], &["-shared", "-fPIC", "-ldl", "-Wl,--no-as-needed", "-lcuda"]);
    let client = c_program("tracer_client", &["tracer_client.c"], &["-ldl"]);
    assert!(lib.exists());
    let sb = Sandbox::new("fault-dlsym");
    let out = sb
        .run(&client)
        .args(["dlopen", "600", "2"])
        .env("LD_PRELOAD", fault_shim())
        .env("VGPU_TEST_FAULT", "dlsym_panic")
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .go();
    assert_eq!(out.val("next_alloc"), "libvgpu.so", "RTLD_NEXT gets the hook despite the panic: {}", out.dump());
    assert_eq!(out.val("rc_0"), "0", "{}", out.dump());
    assert_eq!(out.val("rc_1"), "2", "the second 600 MiB is refused under 1 GiB: {}", out.dump());
    assert_eq!(
        out.stderr.matches("internal error (panic) while answering dlsym").count(),
        1,
        "logged once: {}",
        out.dump()
    );
}
