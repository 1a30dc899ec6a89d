//! Support for the hardening tests (tests/hardening_*.rs): compiles the extra C programs
//! and helper libraries they use into `testbin/` (once per test binary, atomically replaced so
//! concurrent test binaries never see a half-written file).
// Included by several test binaries; each uses a part.
#![allow(dead_code)]

use crate::common::artifacts;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static BUILT: Mutex<Option<HashMap<String, Result<PathBuf, String>>>> = Mutex::new(None);

/// `testbin/<out>` built from `tests/c/<sources>` with `args` (after the sources). Rebuilt when a
/// source, `cuda_min.h` or the simulated driver is newer.
#[track_caller]
pub fn c_program(out: &str, sources: &[&str], args: &[&str]) -> PathBuf {
    let mut g = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    let r = map.entry(out.to_string()).or_insert_with(|| build(out, sources, args)).clone();
    drop(g);
    r.unwrap_or_else(|e| panic!("{out} failed to compile:\n{e}"))
}

fn build(out: &str, sources: &[&str], args: &[&str]) -> Result<PathBuf, String> {
    let a = artifacts();
    let cdir = a.root.join("tests/c");
    let srcs: Vec<PathBuf> = sources.iter().map(|s| cdir.join(s)).collect();
    let target = a.bin.join(out);
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    // The command line is part of the cache key (a changed flag must rebuild).
    let stamp = a.bin.join(format!(".{out}.args"));
    let key = format!("{sources:?} {args:?}");
    let same_args = std::fs::read_to_string(&stamp).is_ok_and(|k| k == key);
    if let (Some(t), true) = (mtime(&target), same_args) {
        let mut deps = srcs.clone();
        deps.push(cdir.join("cuda_min.h"));
        deps.push(a.simlib.join("libcuda.so"));
        deps.push(a.simlib.join("libnvidia-ml.so"));
        if deps.iter().all(|d| mtime(d).is_some_and(|m| m <= t)) {
            return Ok(target);
        }
    }
    let tmp = a.bin.join(format!(".{out}.tmp{}", std::process::id()));
    let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("gcc"));
    let o = Command::new(&cc)
        .args(["-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-Wno-unused-function", "-I"])
        .arg(&cdir)
        .arg("-o")
        .arg(&tmp)
        .args(&srcs)
        .arg("-L")
        .arg(&a.simlib)
        .arg("-L")
        .arg(&a.bin)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .map_err(|e| format!("cannot run {cc:?}: {e}"))?;
    if !o.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
    }
    std::fs::rename(&tmp, &target).map_err(|e| format!("rename: {e}"))?;
    let _ = std::fs::write(&stamp, key);
    Ok(target)
}

/// Whether this machine lets the tests use root-only tools (`unshare -m`, `unshare -pf`,
/// `setpriv` to another uid). If not, the calling test fails, unless
/// `VGPU_ALLOW_SKIP_NAMESPACES=1` (the convention of tests/injection.rs): then it is skipped
/// with a loud note and `false` is returned.
#[track_caller]
pub fn root_namespaces_or_skip(what: &str) -> bool {
    let ok = unsafe { libc::geteuid() } == 0
        && Command::new("/usr/bin/unshare")
            .args(["-m", "-pf", "--mount-proc", "/bin/true"])
            .env_remove("LD_PRELOAD")
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    eprintln!(
        "\n###########################################################\n### SKIP {what}: needs root with mount and PID namespaces\n###########################################################"
    );
    if std::env::var("VGPU_ALLOW_SKIP_NAMESPACES").as_deref() == Ok("1") {
        return false;
    }
    panic!("{what}: namespaces/root refused; set VGPU_ALLOW_SKIP_NAMESPACES=1 to accept skipping");
}
