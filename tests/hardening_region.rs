//! Issue 9 §2 and §4, with real processes on the simulated GPU (limit 1 GiB, two processes of
//! 600 MiB: the second must be refused).
//!
//! §2: when the configured region cannot be used (a directory in its place, foreign or corrupt
//! content, another user's 0600 file, a read-only or full file system) the container's processes
//! share a fallback region, so the limit still holds across them; only when no place works is it
//! per process, said in one ERROR line. §4: `rm` of the region while processes run: the next
//! process still sees their usage, and the live processes link the file back.

mod common;
mod hardening_support;

use common::*;
use std::path::{Path, PathBuf};

fn alloc_hold() -> PathBuf {
    hardening_support::c_program("alloc_hold", &["alloc_hold.c"], &["-lcuda"])
}

/// Process one allocates 600 MiB and holds them; then process two asks for 600 MiB.
const TWO: &str = r#"
    "$PROG" 600 go > one.out 2> one.err &
    for i in $(seq 1 3000); do grep -q rc= one.out 2>/dev/null && break; sleep 0.01; done
    "$PROG" 600 > two.out 2> two.err
    touch go; wait
    echo "one: $(cat one.out)"; echo "two: $(cat two.out)"; cat one.err two.err >&2
"#;

/// What a script run under the shim printed (its `name: …` lines) and logged.
struct Script {
    out: Out,
}

impl Script {
    fn line(&self, k: &str) -> String {
        self.out
            .stdout
            .lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("{k} missing: {}", self.out.dump()))
            .to_string()
    }
    /// The first 600 MiB fit, the second do not (container-wide limit).
    #[track_caller]
    fn assert_limit_held(&self) {
        assert!(self.line("one:").contains("rc=0 "), "{}", self.out.dump());
        assert!(
            self.line("two:").contains("rc=2 "),
            "the second process must see the first one's usage: {}",
            self.out.dump()
        );
    }
    /// The fallback region, named once by each process: the first finds the configured region
    /// unusable (ERROR), the second joins the live fallback (WARN). Removed when dropped.
    #[track_caller]
    fn fallback(&self) -> Fallback {
        let logs = self.out.shim_logs();
        let lines: Vec<&(u32, String, String)> =
            logs.iter().filter(|(_, _, m)| m.contains("fallback region /")).collect();
        assert_eq!(lines.len(), 2, "one line per process: {}", self.out.dump());
        assert_ne!(lines[0].0, lines[1].0, "{}", self.out.dump());
        assert!(
            lines.iter().any(|(_, l, m)| l == "ERROR" && m.contains("share the fallback region")),
            "the cause is an ERROR: {}",
            self.out.dump()
        );
        let p = lines[0].2.split("fallback region ").nth(1).unwrap().split([' ', ':']).next().unwrap();
        Fallback(PathBuf::from(p))
    }
}

struct Fallback(PathBuf);

impl Drop for Fallback {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let name = self.0.file_name().unwrap().to_string_lossy().into_owned();
        let _ = std::fs::remove_file(self.0.with_file_name(format!(".{name}.vgpu-link")));
    }
}

/// Runs `wrap` + `sh -c script` under the shim: `$PROG` = `alloc_hold`, a 1 GiB limit, 2 MiB
/// contexts, plus `env`.
fn run_script(sb: &Sandbox, wrap: &[&str], script: &str, env: &[(&str, &str)]) -> Script {
    let mut args: Vec<String> = wrap.iter().map(|s| s.to_string()).collect();
    args.extend(["/bin/sh".into(), "-c".into(), script.into()]);
    let mut run = sb
        .run(&args[0])
        .args(&args[1..])
        .shim(true)
        .env("PROG", alloc_hold())
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("VGPU_SIM_CTX_MIB", "2")
        .timeout_secs(60);
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.go();
    out.ok();
    Script { out }
}

/// Runs the two-process script (`wrap` + `sh -c script`) with the region at `region`.
fn run_two(sb: &Sandbox, region: &Path, wrap: &[&str], pre: &str) -> Script {
    let region = region.to_str().expect("UTF-8 region path");
    run_script(sb, wrap, &format!("{pre}\n{TWO}"), &[("CUDA_DEVICE_MEMORY_SHARED_CACHE", region)])
}

fn sh() -> Vec<&'static str> {
    vec!["/usr/bin/env"]
}

#[test]
fn directory_in_place_of_the_region() {
    let sb = Sandbox::new("reg-dir");
    std::fs::create_dir(sb.region()).unwrap();
    let t = run_two(&sb, &sb.region(), &sh(), "");
    let fb = t.fallback();
    t.assert_limit_held();
    assert!(fb.0.exists(), "{}", t.out.dump());
}

#[test]
fn foreign_content() {
    let sb = Sandbox::new("reg-foreign");
    let mut b = vec![0u8; 5000];
    b[..4].copy_from_slice(b"\x7fELF");
    std::fs::write(sb.region(), &b).unwrap();
    let t = run_two(&sb, &sb.region(), &sh(), "");
    let _fb = t.fallback();
    t.assert_limit_held();
    assert_eq!(std::fs::read(sb.region()).unwrap(), b, "the foreign file is left untouched");
}

#[test]
fn corrupt_content() {
    let sb = Sandbox::new("reg-corrupt");
    // The magic, but truncated far below the v1 size (and an impossible version).
    let mut b = vec![0u8; 4096];
    b[..4].copy_from_slice(&19_920_718i32.to_le_bytes());
    b[4..8].copy_from_slice(&7u32.to_le_bytes());
    std::fs::write(sb.region(), &b).unwrap();
    let t = run_two(&sb, &sb.region(), &sh(), "");
    let _fb = t.fallback();
    t.assert_limit_held();
}

/// Another user's file, mode 0600: processes of uid 1000 cannot open it.
#[test]
fn other_users_private_file() {
    if !hardening_support::root_namespaces_or_skip("other_users_private_file") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new("reg-foreign-user");
    std::fs::set_permissions(&sb.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(sb.region(), b"").unwrap();
    std::fs::set_permissions(sb.region(), std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = std::ffi::CString::new(sb.region().to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 4242, 4242) }, 0);
    let t = run_two(&sb, &sb.region(), &["/usr/bin/setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"], "");
    let _fb = t.fallback();
    t.assert_limit_held();
    assert!(t.out.stderr.contains("Permission denied"), "{}", t.out.dump());
}

/// The region's directory is read-only (a read-only bind mount in a private mount namespace).
#[test]
fn read_only_file_system() {
    if !hardening_support::root_namespaces_or_skip("read_only_file_system") {
        return;
    }
    let sb = Sandbox::new("reg-ro");
    let ro = sb.subdir("ro");
    let pre = format!("mount --bind {0} {0} && mount -o remount,bind,ro {0} || exit 90", ro.display());
    let t = run_two(&sb, &ro.join("region.cache"), &["/usr/bin/unshare", "-m"], &pre);
    let _fb = t.fallback();
    t.assert_limit_held();
    assert!(t.out.stderr.contains("Read-only file system"), "{}", t.out.dump());
}

/// The region's file system is full (a 512 KiB tmpfs): the file cannot reach its size.
#[test]
fn full_file_system() {
    if !hardening_support::root_namespaces_or_skip("full_file_system") {
        return;
    }
    let sb = Sandbox::new("reg-full");
    let full = sb.subdir("full");
    let pre = format!("mount -t tmpfs -o size=512k vgpu-full {} || exit 90", full.display());
    let t = run_two(&sb, &full.join("region.cache"), &["/usr/bin/unshare", "-m"], &pre);
    let _fb = t.fallback();
    t.assert_limit_held();
}

/// Nowhere to share (configured path, /dev/shm and /tmp all read-only): the limit is per process,
/// and each process says so in one ERROR line.
#[test]
fn nothing_shareable_is_said_once_per_process() {
    if !hardening_support::root_namespaces_or_skip("nothing_shareable_is_said_once_per_process") {
        return;
    }
    let sb = Sandbox::new("reg-nowhere");
    let ro = sb.subdir("ro");
    // A read-only /tmp that still shows the test's own files when the checkout lies under /tmp.
    let a = artifacts();
    let pre = format!(
        ". {root}/tests/py/ns_mounts.sh && private_tmp ro {root} {profile} {shim} {dir} && \
         mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && mount -t tmpfs -o ro none /dev/shm || exit 90",
        root = a.root.display(),
        profile = a.profile_dir.display(),
        shim = a.shim.display(),
        dir = sb.dir.display(),
        ro = ro.display()
    );
    let t = run_two(&sb, &ro.join("region.cache"), &["/usr/bin/unshare", "-m"], &pre);
    let errors: Vec<_> = t.out.shim_logs().into_iter().filter(|(_, l, _)| l == "ERROR").collect();
    assert_eq!(errors.len(), 2, "{}", t.out.dump());
    for (_, _, m) in &errors {
        assert!(m.contains("now enforced per process, not across the container"), "{}", t.out.dump());
    }
    assert!(t.line("one:").contains("rc=0 ") && t.line("two:").contains("rc=0 "), "{}", t.out.dump());
}

/// §4: two processes hold 600 + 300 MiB; the region file is removed; a third process must see
/// their usage (its 200 MiB fit, 400 MiB would not), and the live processes link the file back.
#[test]
fn deleted_region_keeps_the_container_limit() {
    let sb = Sandbox::new("reg-rm");
    let script = r#"
        "$PROG" 600 go > one.out 2> one.err &
        "$PROG" 300 go > two.out 2> two.err &
        for i in $(seq 1 3000); do grep -q rc= one.out 2>/dev/null && grep -q rc= two.out 2>/dev/null && break; sleep 0.01; done
        ino=$(stat -c %i "$CUDA_DEVICE_MEMORY_SHARED_CACHE")
        rm "$CUDA_DEVICE_MEMORY_SHARED_CACHE"
        "$PROG" 400 > three.out 2> three.err
        "$PROG" 100 > four.out 2> four.err
        rm -f "$CUDA_DEVICE_MEMORY_SHARED_CACHE"
        for i in $(seq 1 500); do [ -e "$CUDA_DEVICE_MEMORY_SHARED_CACHE" ] && break; sleep 0.01; done
        echo "relinked: $(stat -c %i "$CUDA_DEVICE_MEMORY_SHARED_CACHE" 2>/dev/null) was $ino"
        touch go; wait
        for f in one two three four; do echo "$f: $(cat $f.out)"; done; cat *.err >&2
    "#;
    let t = run_script(&sb, &[], script, &[]);
    let out = &t.out;
    let line = |k: &str| t.line(k);
    assert!(line("one:").contains("rc=0 ") && line("two:").contains("rc=0 "), "{}", out.dump());
    assert!(line("three:").contains("rc=2 "), "600 + 300 + 400 MiB > 1 GiB: {}", out.dump());
    assert!(line("four:").contains("rc=0 "), "{}", out.dump());
    let r = line("relinked:");
    let f: Vec<&str> = r.split_whitespace().collect();
    assert_eq!((f.len(), f[1], f[3]), (4, f[3], f[3]), "the live processes linked the same file back: {}", out.dump());
}

/// A deleted region whose processes have all exited (an operator's reset, a new container
/// reusing the directory with other limits) is not brought back from its hidden link: the next
/// processes get a fresh region with their own limit (3 GiB here, the old one had 1 GiB), never
/// the dead region's, and the discarded link is said once (info).
#[test]
fn deleted_region_of_exited_processes_is_not_brought_back() {
    let sb = Sandbox::new("reg-rm-stale");
    let script = r#"
        R="$CUDA_DEVICE_MEMORY_SHARED_CACHE"; A="$(dirname "$R")/.$(basename "$R").vgpu-link"
        "$PROG" 600 > one.out 2> one.err
        [ -e "$A" ] || echo "no anchor"
        rm "$R"
        export CUDA_DEVICE_MEMORY_LIMIT=3g
        "$PROG" 2000 go > two.out 2> two.err &
        "$PROG" 500 go > three.out 2> three.err &
        for i in $(seq 1 3000); do grep -q rc= two.out 2>/dev/null && grep -q rc= three.out 2>/dev/null && break; sleep 0.01; done
        "$PROG" 600 > four.out 2> four.err
        touch go; wait
        echo "same: $(stat -c %i "$R") $(stat -c %i "$A")"
        for f in one two three four; do echo "$f: $(cat $f.out)"; done; cat *.err >&2
    "#;
    let t = run_script(&sb, &[], script, &[("LIBCUDA_LOG_LEVEL", "3")]);
    let out = &t.out;
    assert!(!out.stdout.contains("no anchor"), "{}", out.dump());
    let line = |k: &str| t.line(k);
    let gib3 = format!("total={}", 3u64 << 30);
    assert!(line("one:").contains("rc=0 "), "{}", out.dump());
    for k in ["two:", "three:"] {
        assert!(line(k).contains("rc=0 ") && line(k).contains(&gib3), "the new limit: {}", out.dump());
    }
    assert!(line("four:").contains("rc=2 "), "2000 + 500 + 600 MiB > 3 GiB: one region: {}", out.dump());
    let same = line("same:");
    let same: Vec<&str> = same.split_whitespace().skip(1).collect();
    assert!(same.len() == 2 && same[0] == same[1], "the link names the new region: {}", out.dump());
    let logs = out.shim_logs();
    assert!(!logs.iter().any(|(_, _, m)| m.contains("limit inconsistency")), "{}", out.dump());
    let discarded: Vec<_> = logs.iter().filter(|(_, _, m)| m.contains("discarded the link")).collect();
    assert_eq!(discarded.len(), 1, "{}", out.dump());
    assert_eq!(discarded[0].1, "INFO", "{}", out.dump());
    assert!(discarded[0].2.contains("memory 1073741824 on every device"), "the old limits: {}", out.dump());
}

/// §4, worst case: the region and its hidden link are both deleted. The first live process to
/// notice publishes a copy with the container's usage as of then: a process started afterwards
/// still counts the 600 MiB held (its 600 MiB are refused), and the split is reported.
#[test]
fn region_deleted_with_every_link_is_republished_as_a_copy() {
    let sb = Sandbox::new("reg-rm-all");
    let script = r#"
        R="$CUDA_DEVICE_MEMORY_SHARED_CACHE"; A="$(dirname "$R")/.$(basename "$R").vgpu-link"
        "$PROG" 600 go > one.out 2> one.err &
        for i in $(seq 1 3000); do grep -q rc= one.out 2>/dev/null && break; sleep 0.01; done
        [ -e "$A" ] || echo "no anchor"
        rm "$R" "$A"
        for i in $(seq 1 500); do [ -e "$R" ] && break; sleep 0.01; done
        "$PROG" 600 > two.out 2> two.err
        touch go; wait
        for f in one two; do echo "$f: $(cat $f.out)"; done; cat *.err >&2
    "#;
    let t = run_script(&sb, &[], script, &[]);
    let out = &t.out;
    assert!(!out.stdout.contains("no anchor"), "{}", out.dump());
    let line = |k: &str| t.line(k);
    assert!(line("one:").contains("rc=0 "), "{}", out.dump());
    assert!(line("two:").contains("rc=2 "), "the copy carries the 600 MiB: {}", out.dump());
    let copied = out.shim_logs().into_iter().filter(|(_, l, m)| l == "ERROR" && m.contains("published a copy")).count();
    assert_eq!(copied, 1, "{}", out.dump());
}
