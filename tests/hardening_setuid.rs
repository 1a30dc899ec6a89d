//! A set-user-ID-root CUDA program started by an unprivileged user (`AT_SECURE`): the library
//! takes no path from the environment, creates region files with the caller's real IDs and never
//! opens one through a symbolic link, so the caller cannot make it write where only root may.
//!
//! Runs as root in a private mount and PID namespace (`unshare -m -p -f --mount-proc`) with fresh
//! tmpfs mounts on /tmp and /dev/shm, so nothing on the host changes; the program is a setuid-root
//! copy of `alloc_hold` linked with the shim (a setuid program ignores `LD_PRELOAD` paths and
//! `LD_LIBRARY_PATH`), started as uid/gid 65534 with `setpriv`. The host GPU sample it publishes
//! beside its region is created with the caller's IDs too.

mod common;
mod hardening_support;

use common::*;

#[test]
fn a_setuid_program_takes_no_path_from_the_environment_and_acts_as_its_caller() {
    if !hardening_support::root_namespaces_or_skip("a_setuid_program_takes_no_path_from_the_environment") {
        return;
    }
    let a = artifacts();
    let shim_dir = a.shim.parent().expect("shim dir").to_path_buf();
    let shim_name = a.shim.file_name().and_then(|n| n.to_str()).expect("shim file name");
    assert_eq!(shim_name, "libvgpu.so", "linked as -lvgpu");
    let rpath = format!("-Wl,-rpath,{}:{}", shim_dir.display(), a.simlib.display());
    let link_shim = format!("-L{}", shim_dir.display());
    let prog = hardening_support::c_program(
        "suid_alloc_hold",
        &["alloc_hold.c"],
        &["-Wl,--no-as-needed", &link_shim, "-lvgpu", "-lcuda", "-Wl,--disable-new-dtags", &rpath],
    );
    let sb = Sandbox::new("setuid");
    let script = r#"
        set -e
        # A fresh /tmp that still reaches the test's own files when the checkout lies under /tmp.
        . "$ROOT/tests/py/ns_mounts.sh"
        private_tmp mode=1777 "$ROOT" "$PROG" "$PWD"
        KEEP=""
        case $ROOT in /tmp/?*) rest=${ROOT#/tmp/}; KEEP=/tmp/${rest%%/*} ;; esac
        mount -t tmpfs tmpfs /dev/shm
        mkdir -m 0700 secret
        : > secret/empty.cache
        chmod 0644 secret/empty.cache
        cp "$PROG" ./suid
        chmod 4755 ./suid
        run() { setpriv --reuid=65534 --regid=65534 --clear-groups env "$@" ./suid 64; }
        # 1. A region path in a directory only root may write to; held until the host GPU
        #    sample appears beside the region it uses.
        setpriv --reuid=65534 --regid=65534 --clear-groups env CUDA_DEVICE_MEMORY_SHARED_CACHE="$PWD/secret/x.cache" \
            ./suid 64 "$PWD/go" > one.out 2> one.err &
        i=0
        while [ ! -e /tmp/host-gpu.samples ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
        : > go
        wait
        echo "samples=$(ls -A /tmp | grep -c '^host-gpu.samples$')"
        echo "secret=$(ls -A secret | tr '\n' ' ')"
        echo "owners=$(find /tmp /dev/shm -mindepth 1 -maxdepth 1 ! -path "${KEEP:-/nonexistent}" -printf '%U\n' | sort -u | tr '\n' ' ')"
        # 2. An existing empty file that only root may write to.
        run CUDA_DEVICE_MEMORY_SHARED_CACHE="$PWD/secret/empty.cache" > two.out 2> two.err
        echo "empty_size=$(stat -c %s secret/empty.cache)"
        # 3. The standard location is a symbolic link to another file.
        rm -f /tmp/cudevshr.cache /tmp/.[!.]* /dev/shm/*
        : > /tmp/victim
        chown 65534:65534 /tmp/victim
        chmod 0666 /tmp/victim
        ln -s /tmp/victim /tmp/cudevshr.cache
        run > three.out 2> three.err
        echo "victim_size=$(stat -c %s /tmp/victim)"
        echo "one_$(cat one.out)"; echo "two_$(cat two.out)"; echo "three_$(cat three.out)"
        cat one.err two.err three.err >&2
    "#;
    let out = sb
        .run("/usr/bin/unshare")
        .args(["-m", "-p", "-f", "--mount-proc", "/bin/sh", "-c", script])
        .env_remove("CUDA_DEVICE_MEMORY_SHARED_CACHE")
        .env("PROG", &prog)
        .env("ROOT", env!("CARGO_MANIFEST_DIR"))
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .timeout_secs(60)
        .go();
    out.ok();
    for k in ["one_rc", "two_rc", "three_rc"] {
        assert!(out.val(k).starts_with("0 "), "{k}: the program still works, governed: {}", out.dump());
    }
    assert_eq!(out.val("secret").trim(), "empty.cache", "nothing created in root's directory: {}", out.dump());
    assert_eq!(out.val("samples"), "1", "the host GPU sample beside the region: {}", out.dump());
    assert_eq!(out.val("owners").trim(), "65534", "files created as the caller: {}", out.dump());
    assert_eq!(out.val("empty_size"), "0", "root's file left untouched: {}", out.dump());
    assert_eq!(out.val("victim_size"), "0", "no region through a symbolic link: {}", out.dump());
    assert!(out.stderr.contains("CUDA_DEVICE_MEMORY_SHARED_CACHE ignored"), "{}", out.dump());
}
