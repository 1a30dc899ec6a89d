//! Link settings for `libvgpu.so` (docs/shim-notes.md §6, §8, §10):
//! - link `libgcc_eh.a` statically so the library does not need `libgcc_s.so.1` (each extra DSO
//!   costs every exec in the container, and distroless images lack it);
//! - `-z defs` turns a reference to a glibc-private symbol into a link error instead of a
//!   container in which every process dies at exec;
//! - the soname HAMi's mounts use.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    // The engine half of the release artifact (feature `engine`) is never found by name.
    let soname = if std::env::var_os("CARGO_FEATURE_ENGINE").is_some() { "libvgpu-engine.so" } else { "libvgpu.so" };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,defs");
    // cargo-zigbuild (ci/release.sh) brings its own unwinder; only native gnu builds need this.
    let zig = std::env::var("CARGO_ZIGBUILD_ZIG_PATH").is_ok() || target.contains("gnu.2.");
    if target.contains("linux-gnu")
        && !zig
        && let Some(dir) = gcc_eh_dir(&target)
    {
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
}

/// The target's `libgcc_eh.a`, asked of the target's C compiler (`CC_<triple>` as the cc crate
/// spells it, then `CC`, then `cc`: a cross build must not link the host's).
fn gcc_eh_dir(target: &str) -> Option<String> {
    let cc = std::env::var(format!("CC_{}", target.replace('-', "_")))
        .or_else(|_| std::env::var("CC"))
        .unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc).arg("-print-file-name=libgcc_eh.a").output().ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let p = std::path::Path::new(&path);
    if p.is_absolute() && p.exists() { p.parent().map(|d| d.display().to_string()) } else { None }
}
