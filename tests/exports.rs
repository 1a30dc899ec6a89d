//! ELF-level checks of the shim: exported names, NEEDED list, undefined symbols
//! (docs/shim-notes.md §6, §8, §10).

mod common;
use common::*;
use std::collections::BTreeSet;
use std::ffi::OsStr;

fn expected_exports() -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(artifacts().root.join("tests/expected_exports.txt")).expect("expected_exports.txt");
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from).collect()
}

#[test]
fn exported_symbols_match_expected_list() {
    let a = artifacts();
    let nm = tool("nm", &[OsStr::new("-D"), OsStr::new("--defined-only"), a.shim.as_os_str()]);
    let actual: BTreeSet<String> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        // Strip a version suffix if any (there must not be one; checked below).
        .map(|s| s.split('@').next().unwrap().to_string())
        .collect();
    let expected = expected_exports();
    let missing: Vec<_> = expected.difference(&actual).collect();
    let extra: Vec<_> = actual.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "export list mismatch\n  missing (expected, not exported): {missing:?}\n  extra (exported, not expected): {extra:?}"
    );
    // Exports must be unversioned (a versioned dlsym would not interpose dlsym@GLIBC_2.x).
    let versioned: Vec<_> = nm.lines().filter(|l| l.contains('@')).collect();
    assert!(versioned.is_empty(), "versioned exports: {versioned:?}");
    // Exported as functions (T), never data.
    let not_text: Vec<_> = nm
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 2 && f[f.len() - 2] != "T"
        })
        .collect();
    assert!(not_text.is_empty(), "exports that are not text symbols: {not_text:?}");
}

#[test]
fn needed_only_libc_and_loader() {
    let a = artifacts();
    let d = tool("readelf", &[OsStr::new("-d"), OsStr::new("-W"), a.shim.as_os_str()]);
    let needed: BTreeSet<String> = d
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).and_then(|r| r.split(']').next()).map(String::from))
        .collect();
    // The dynamic loader's name is per architecture.
    let loader = if cfg!(target_arch = "aarch64") { "ld-linux-aarch64.so.1" } else { "ld-linux-x86-64.so.2" };
    let allowed: BTreeSet<String> = ["libc.so.6", loader].into_iter().map(String::from).collect();
    assert!(needed.contains("libc.so.6"), "NEEDED lacks libc.so.6: {needed:?}");
    let bad: Vec<_> = needed.difference(&allowed).collect();
    assert!(bad.is_empty(), "unexpected NEEDED entries {bad:?} (all: {needed:?})");
    // soname
    assert!(d.contains("Library soname: [libvgpu.so]"), "soname should be libvgpu.so:\n{d}");
}

#[test]
fn undefined_symbols_only_from_glibc() {
    let a = artifacts();
    let t = tool("objdump", &[OsStr::new("-T"), a.shim.as_os_str()]);
    let mut bad = Vec::new();
    let mut max_glibc = (0u32, 0u32);
    for line in t.lines().filter(|l| l.contains("*UND*")) {
        // "<addr> <flags> *UND*\t<size> (GLIBC_2.34) name" ; weak undefined has flag 'w'.
        let weak = line.split("*UND*").next().unwrap_or("").contains(" w ");
        let ver = line.split('(').nth(1).and_then(|r| r.split(')').next());
        match ver {
            Some(v) if v.starts_with("GLIBC_") => {
                let nums: Vec<u32> = v["GLIBC_".len()..].split('.').filter_map(|x| x.parse().ok()).collect();
                let key = (nums.first().copied().unwrap_or(0), nums.get(1).copied().unwrap_or(0));
                if key > max_glibc {
                    max_glibc = key;
                }
            }
            None if weak => {}
            _ => bad.push(line.to_string()),
        }
        if line.contains("__libc_dlsym") || line.contains("GLIBC_PRIVATE") {
            bad.push(line.to_string());
        }
    }
    assert!(bad.is_empty(), "undefined symbols outside public glibc: {bad:#?}");
    eprintln!("highest GLIBC_ version required: {}.{}", max_glibc.0, max_glibc.1);
    // The native build on glibc 2.36 needs 2.34 (2.35 with static libgcc_eh); never newer than the
    // build machine's glibc.
    assert!(max_glibc <= (2, 36), "requires GLIBC_{}.{}", max_glibc.0, max_glibc.1);
}

/// Every exported driver/NVML symbol has a prototype in `include/` — which the ABI conformance
/// test compiles against NVIDIA's own declarations — so no export escapes the signature check.
#[test]
fn every_export_is_declared_in_include_headers() {
    let a = artifacts();
    let mut headers = String::new();
    for h in ["include/vgpu_cuda.h", "include/vgpu_nvml.h"] {
        headers += &std::fs::read_to_string(a.root.join(h)).expect(h);
    }
    let undeclared: Vec<String> = expected_exports()
        .into_iter()
        .filter(|name| name != "dlsym")
        .filter(|name| {
            // A prototype looks like `<ret> [CUDAAPI|DECLDIR] name(`.
            !headers.lines().any(|l| {
                let l = l.trim_start();
                !l.starts_with("typedef") && l.contains(&format!(" {name}("))
            })
        })
        .collect();
    assert!(undeclared.is_empty(), "exports without a prototype in include/: {undeclared:?}");
}
