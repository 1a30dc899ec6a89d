//! The first CUDA call of one thread and a `dlopen` on another whose constructor calls CUDA: the
//! two-stage artifact maps its engine on the first call, and the mapping thread needs glibc's
//! loader lock, which the constructor's thread holds. Neither may wait for the other forever.
//!
//! Runs with the shim under test (in CI also the shipped artifact, `VGPU_TEST_SHIM`) and, when it
//! exists, with `target/release-floor/libvgpu.so` itself (or `VGPU_RELEASE_SO`) (missing: FAIL unless `VGPU_ALLOW_NO_RELEASE=1`).

mod common;

use common::*;
use std::path::PathBuf;

fn programs() -> (PathBuf, PathBuf) {
    let lib = c_program("libctor_cuinit.so", &["ctor_cuinit.c"], &["-shared", "-fPIC", "-lcuda"]);
    let main = c_program("loader_lock_main", &["loader_lock_main.c"], &["-pthread", "-ldl", "-lcuda"]);
    (lib, main)
}

/// Each delay puts the constructor's `cuInit` at another point of T1's mapping.
fn check(shim: &std::path::Path) {
    let (lib, main) = programs();
    for delay in ["0", "2", "20", "80"] {
        let sb = Sandbox::new(&format!("loader-lock-{delay}"));
        let out = sb
            .run(&main)
            .arg(&lib)
            .env("LD_PRELOAD", shim)
            .env("CTOR_DELAY_MS", delay)
            .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
            .timeout_secs(30)
            .go();
        out.ok();
        assert_eq!(out.val("done"), "1", "delay {delay}: {}", out.dump());
        assert_eq!(out.val("init"), "0", "delay {delay}: the constructor's cuInit works: {}", out.dump());
    }
}

#[test]
fn a_constructor_calling_cuda_while_another_thread_maps_the_engine_does_not_hang() {
    check(&artifacts().shim);
}

#[test]
fn the_shipped_artifact_does_not_hang_on_the_loader_lock() {
    let Some(so) = release_artifact(&release_so()) else { return };
    check(&so);
}
