//! Fail closed when the container's usage cannot be known: a process that cannot open the
//! container's region for lack of a system resource (here: file descriptors) refuses device
//! memory instead of governing itself alone (which lets N processes hold N times the limit).

mod common;
mod hardening_support;

use common::*;

fn alloc_hold() -> std::path::PathBuf {
    hardening_support::c_program("alloc_hold", &["alloc_hold.c"], &["-lcuda"])
}

/// Two processes under `RLIMIT_NOFILE=4` each ask for 700 MiB under a 1 GiB limit: neither gets
/// device memory, and each says why in one line.
#[test]
fn no_descriptor_for_the_region_refuses_device_memory() {
    let sb = Sandbox::new("nofile");
    let script = r#"
        prlimit --nofile=4:4 "$PROG" 700 go > one.out 2> one.err &
        for i in $(seq 1 3000); do grep -q -e rc= -e error= one.out 2>/dev/null && break; sleep 0.01; done
        prlimit --nofile=4:4 "$PROG" 700 > two.out 2> two.err
        touch go; wait
        echo "one: $(cat one.out)"; echo "two: $(cat two.out)"; cat one.err two.err >&2
    "#;
    let out = sb
        .run("/bin/sh")
        .args(["-c", script])
        .env("LD_PRELOAD", &artifacts().shim)
        .env("PROG", alloc_hold())
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .timeout_secs(60)
        .go();
    out.ok();
    for who in ["one:", "two:"] {
        let line = out.stdout.lines().find(|l| l.starts_with(who)).unwrap_or_else(|| panic!("{who} {}", out.dump()));
        assert!(!line.contains("rc=0"), "{who} no device memory without the container's usage: {}", out.dump());
        assert!(line.contains("rc=2") || line.contains("error=init"), "{who} refused: {}", out.dump());
    }
    let said = out.stderr.matches("for lack of a system resource").count()
        + out.stderr.matches("cannot map the engine").count();
    assert_eq!(said, 2, "one line per process: {}", out.dump());
    assert!(!out.stderr.contains("enforced per process"), "{}", out.dump());
}
