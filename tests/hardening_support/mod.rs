//! Support for the hardening tests (tests/hardening_*.rs): the extra C programs and helper
//! libraries they use come from the shared on-demand builder (`common::c_program`), and the
//! root/namespace check.
// Included by several test binaries; each uses a part.
#![allow(dead_code)]

use std::process::Command;

/// C programs and helper libraries built on demand (the shared builder of tests/common).
pub use crate::common::c_program;

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
