//! Issue 9 §5: `dlsym(RTLD_NEXT, "cuMemAlloc_v2")` from a library that comes after the shim in the
//! search order must not hand out the real driver function (1.2 GiB under a 1 GiB limit): the
//! shim answers with its hook. Unhooked names keep glibc's answer.

mod common;
mod hardening_support;

use common::*;

fn programs() -> (std::path::PathBuf, std::path::PathBuf) {
    let lib = hardening_support::c_program(
        "libtracer.so",
        &["tracer_lib.c"],
        &["-shared", "-fPIC", "-ldl", "-Wl,--no-as-needed", "-lcuda"],
    );
    let client = hardening_support::c_program("tracer_client", &["tracer_client.c"], &["-ldl"]);
    (lib, client)
}

/// Two 600 MiB allocations through the tracer under a 1 GiB limit.
fn run(mode: &str, preload: &str, shim: bool) -> Out {
    let (_, client) = programs();
    let sb = Sandbox::new(&format!("tracer-{mode}-{shim}"));
    let mut r = sb.run(&client).args([mode, "600", "2"]).env("CUDA_DEVICE_MEMORY_LIMIT", "1g");
    if !preload.is_empty() {
        r = r.env("LD_PRELOAD", preload);
    }
    let out = r.go();
    out.ok();
    let _ = shim;
    out
}

fn check(mode: &str) {
    let (lib, _) = programs();
    let shim = artifacts().shim.display().to_string();
    let tracer = lib.display().to_string();
    let preload_base = if mode == "preload" { tracer.clone() } else { String::new() };
    let preload_shim = if mode == "preload" { format!("{shim} {tracer}") } else { shim.clone() };

    let base = run(mode, &preload_base, false);
    assert_eq!(base.val("next_alloc"), "libcuda.so.1", "{}", base.dump());
    assert_eq!(base.val("ok"), "2", "the simulated 16 GiB GPU takes both without the shim: {}", base.dump());

    let out = run(mode, &preload_shim, true);
    assert_eq!(out.val("next_alloc"), "libvgpu.so", "RTLD_NEXT from the tracer gets the hook: {}", out.dump());
    assert_eq!(out.val("next_devget"), base.val("next_devget"), "unhooked names: glibc's answer: {}", out.dump());
    assert_eq!(out.val("rc_0"), "0", "{}", out.dump());
    assert_eq!(out.val("rc_1"), "2", "the second 600 MiB is refused (CUDA_ERROR_OUT_OF_MEMORY): {}", out.dump());
}

#[test]
fn rtld_next_from_a_library_preloaded_after_the_shim_is_governed() {
    check("preload");
}

#[test]
fn rtld_next_from_a_dlopened_library_is_governed() {
    check("dlopen");
}

#[test]
fn rtld_next_from_a_locally_dlopened_library_is_governed() {
    check("dlopen_local");
}
