#!/usr/bin/env bash
# aarch64 (Grace Hopper / Grace Blackwell nodes) built and tested on an x86_64 machine.
#
#   ci/aarch64.sh build TRIPLE_SUFFIX PKG...  cargo zigbuild --release for aarch64-unknown-linux-gnu
#                                            TRIPLE_SUFFIX (".2.17": the glibc floor) of PKG... with
#                                            the features in VGPU_FEATURES; ci/release.sh calls it
#   ci/aarch64.sh test                       the suite for aarch64, run under emulation (below)
#   ci/aarch64.sh shell [CMD...]             a command (default bash) in the root, for debugging
#
# The toolchain lives in a cached Debian forky root (target/aarch64-root, debootstrap once, a few
# minutes): Debian's rustc/cargo with the aarch64 Rust standard library (libstd-rust-dev:arm64; no
# rustup download needed), the aarch64 cross gcc and libc, binutils that read every architecture,
# and a static qemu-aarch64. aarch64 programs run under qemu user-mode emulation through
# binfmt_misc (registered once per boot, with the F flag so it works inside the root), so the
# test harness, its nested cargo build and every client it spawns work unchanged. The release
# build links with the zig of ci/release.sh's tool venv (static binaries, visible in the root).
#
# `test` runs, built for aarch64 and executed under qemu: the vgpu-core unit tests (region
# protocol, atomics, futex locks, slot recovery after SIGKILL, multi-process), the shim's unit
# tests, the integration tests in AARCH64_TESTS (every file but those that need speed, NVIDIA's
# Python packages or a setuid binary; the shipped aarch64 artifact's checks need ci/release.sh
# first), and SHIPPED_TESTS again with that artifact as the shim. What stays with the native
# run, and why: docs/aarch64.md. Emulation says nothing about speed: these runs check
# correctness only.
#
# Environment: VGPU_AARCH64_ROOT (default target/aarch64-root), VGPU_DEBIAN_MIRROR (default
# http://deb.debian.org/debian), VGPU_AARCH64_TESTS (override the integration test list).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
AROOT=${VGPU_AARCH64_ROOT:-$ROOT/target/aarch64-root}
MIRROR=${VGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
TRIPLE=aarch64-unknown-linux-gnu
# Built by the root's cargo (a different rustc than the host's): its own target directory.
ATARGET=$ROOT/target/aarch64
# g++ for the aarch64 C++ compile of the ABI conformance test; pip fetches NVIDIA's headers for it.
PACKAGES=(rustc cargo libstd-rust-dev:arm64 gcc gcc-aarch64-linux-gnu g++-aarch64-linux-gnu
    libc6-dev-arm64-cross libc6:arm64 binutils binutils-multiarch qemu-user ca-certificates
    python3 python3-pip
    libacl1:arm64 libattr1:arm64 libgmp10:arm64 libselinux1:arm64 libssl3t64:arm64 libsystemd0:arm64)
# The programs the tests preload the shim into besides their own clients (sh, true, cat, ls): the
# aarch64 builds, unpacked beside the root's own (ARM64_BIN) and mounted over them for the tests.
ARM64_DEBS=(dash:arm64 coreutils:arm64)
ARM64_BIN=/opt/arm64/usr/bin
# Every integration test file but those docs/aarch64.md names, with its reason.
AARCH64_TESTS=(memory_region memory_multiprocess memory_api memory_cuda13 memory_ledger memory_truth
    memory_views memory_context_race fork preload_safety interception exports abi_conformance
    config_env deploy_docs harness pfn_walk hardening_dlsym hardening_loader_lock hardening_env
    hardening_fail_closed hardening_faults hardening_fork hardening_region release_floor)
SHIPPED_TESTS=(preload_safety interception hardening_dlsym)

log() { printf '[aarch64] %s\n' "$*" >&2; }
die() { printf '[aarch64] FAILED: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, binfmt_misc)"

# --- the root (cached) ----------------------------------------------------------------------
# The marker holds the package lists the root was provisioned with: a root made for other lists
# gets what they add (apt-get install, no second debootstrap).
PROVISION="${PACKAGES[*]} | ${ARM64_DEBS[*]}"
ensure_root() {
    local marker=$AROOT/.vgpu-complete
    if [ -f "$marker" ]; then
        [ "$(cat "$marker")" = "$PROVISION" ] && return 0
        log "the root lacks packages of this script's lists: installing them"
        provision "$AROOT"
        printf '%s\n' "$PROVISION" > "$marker"
        return 0
    fi
    command -v debootstrap >/dev/null || die "debootstrap missing (ci/deps.sh installs it)"
    local t=$AROOT.tmp
    log "debootstrap --variant=minbase forky $AROOT (once, a few minutes)"
    rm -rf "$t"
    mkdir -p "$(dirname "$AROOT")"
    # Older debootstrap releases lack a forky script; forky is set up exactly like sid.
    debootstrap --variant=minbase forky "$t" "$MIRROR" /usr/share/debootstrap/scripts/sid >&2 ||
        die "debootstrap failed (is $MIRROR reachable?)"
    # A mirror snapshot may be past its Release file's Valid-Until.
    echo 'Acquire::Check-Valid-Until "false";' > "$t/etc/apt/apt.conf.d/99vgpu"
    cp /etc/resolv.conf "$t/etc/resolv.conf"
    chroot "$t" dpkg --add-architecture arm64
    provision "$t"
    printf '%s\n' "$PROVISION" > "$t/.vgpu-complete"
    rm -rf "$AROOT"
    mv "$t" "$AROOT"
}

# provision DIR: PACKAGES installed in the root DIR, ARM64_DEBS unpacked under /opt/arm64.
provision() {
    local t=$1
    cp /etc/resolv.conf "$t/etc/resolv.conf"
    chroot "$t" apt-get update -q >&2 || die "apt-get update in the root failed"
    DEBIAN_FRONTEND=noninteractive chroot "$t" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >&2 ||
        die "apt-get install in the root failed"
    # shellcheck disable=SC2016
    chroot "$t" /bin/sh -ec 'mkdir -p /opt/arm64 && cd /tmp && apt-get download "$@" &&
        for d in /tmp/*_arm64.deb; do dpkg -x "$d" /opt/arm64; done && rm -f /tmp/*_arm64.deb' sh "${ARM64_DEBS[@]}" >&2 ||
        die "unpacking ${ARM64_DEBS[*]} failed"
    chroot "$t" apt-get clean
}

# aarch64 executables run through the root's static qemu-aarch64. F: the kernel opens it now, so it
# serves inside the root too; P: argv[0] stays what the caller passed.
ensure_binfmt() {
    local bf=/proc/sys/fs/binfmt_misc
    [ -e "$bf/register" ] || mount -t binfmt_misc binfmt_misc "$bf" || die "cannot mount binfmt_misc"
    [ "$(cat "$bf/status")" = enabled ] || die "binfmt_misc is disabled on this machine"
    if [ -e "$bf/qemu-aarch64" ]; then
        grep -q '^enabled' "$bf/qemu-aarch64" || die "binfmt handler qemu-aarch64 exists but is disabled"
        return 0
    fi
    local magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
    local mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
    printf ':qemu-aarch64:M::%s:%s:%s:FP\n' "$magic" "$mask" "$AROOT/usr/bin/qemu-aarch64" > "$bf/register" ||
        die "cannot register qemu-aarch64 with binfmt_misc"
    log "registered $AROOT/usr/bin/qemu-aarch64 for aarch64 executables (binfmt_misc)"
}

# The host's crate cache serves the root's cargo too (no second download), and the host's CA
# bundle its network access (a TLS-inspecting proxy's certificate).
REGISTRY=${CARGO_HOME:-$HOME/.cargo}/registry
refresh_host_files() {
    cp /etc/ssl/certs/ca-certificates.crt "$AROOT/etc/ssl/certs/vgpu-host-ca.crt" 2>/dev/null ||
        cp /etc/ssl/certs/ca-certificates.crt "$AROOT/etc/ssl/certs/vgpu-host-ca.crt"
    cp /etc/resolv.conf "$AROOT/etc/resolv.conf"
}

# in_root CMD...: CMD in the root, inside private mount and PID namespaces with their own /proc,
# /tmp and /dev/shm, the worktree at its own path. The root is bound onto itself first: a mount
# of its own, so `unshare -m` inside it can make its mounts private. The environment is the one below, not ours.
# ARM64_USERLAND=DIR: sh (dash), true, cat and ls are DIR's aarch64 builds (run under qemu).
in_root() {
    # shellcheck disable=SC2016
    ARM64_USERLAND=${ARM64_USERLAND:-} unshare -m -p -f /bin/sh -ec '
        r=$1; w=$2; reg=$3; shift 3
        mount --bind "$r" "$r"
        mount -t proc proc "$r/proc"
        mount --rbind /dev "$r/dev"
        mount -t tmpfs tmpfs "$r/dev/shm"
        mount -t tmpfs tmpfs "$r/tmp"
        mkdir -p "$r$w" "$r/root/.cargo/registry" "$reg"
        mount --bind "$w" "$r$w"
        mount --bind "$reg" "$r/root/.cargo/registry"
        if [ -n "${ARM64_USERLAND:-}" ]; then
            for p in dash true cat ls; do mount --bind "$r$ARM64_USERLAND/$p" "$r/usr/bin/$p"; done
        fi
        cd "$r$w"
        exec chroot "$r" /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$w" "$@"
    ' sh "$AROOT" "$ROOT" "$REGISTRY" env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
        SSL_CERT_FILE=/etc/ssl/certs/vgpu-host-ca.crt CARGO_HTTP_CAINFO=/etc/ssl/certs/vgpu-host-ca.crt \
        PATH="${ROOT_PATH:-/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin}" \
        CARGO_TERM_COLOR=never CARGO_TARGET_DIR="$ATARGET" "$@"
}

cmd_build() {
    local suffix=$1
    shift
    local zig tools=$ROOT/target/zigtools pkgs=()
    zig=$(find "$tools/venv" -path '*/ziglang/zig' -type f 2>/dev/null | head -n 1)
    if [ -z "$zig" ] || [ ! -x "$tools/venv/bin/cargo-zigbuild" ]; then
        die "no zig tools in $tools: ci/release.sh installs them"
    fi
    for p in "$@"; do pkgs+=(-p "$p"); done
    local features=()
    [ -z "${VGPU_FEATURES:-}" ] || features=(--features "$VGPU_FEATURES")
    log "cargo zigbuild --release --target $TRIPLE$suffix ${pkgs[*]} ${features[*]} (in the root)"
    # Only zig's own directory and cargo-zigbuild join PATH (the venv's python is the host's).
    mkdir -p "$ATARGET/zigbin"
    ln -sf "$tools/venv/bin/cargo-zigbuild" "$ATARGET/zigbin/cargo-zigbuild"
    ROOT_PATH="$(dirname "$zig"):$ATARGET/zigbin:/usr/bin:/bin" \
        in_root cargo zigbuild --release --target "$TRIPLE$suffix" "${pkgs[@]}" "${features[@]}"
}

# The test build links with the cross gcc (the release build with zig instead); CC also compiles the
# harness's C clients for aarch64.
CROSS_ENV=(CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc HOST_CC=gcc CC_x86_64_unknown_linux_gnu=gcc
    CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++)

cmd_test() {
    local tests=("${AARCH64_TESTS[@]}") t args=()
    [ -z "${VGPU_AARCH64_TESTS:-}" ] || read -r -a tests <<< "$VGPU_AARCH64_TESTS"
    for t in "${tests[@]}"; do args+=(--test "$t"); done
    # The C clients of the harness are compiled for aarch64 (CC), and run, like the test
    # executables themselves, under qemu.
    # Left to the native run: limiter::vsim (the limiter's virtual-time simulations: arithmetic
    # only, minutes under qemu) and mptests::concurrent_children (eight processes contending for
    # the region lock, whose deadline is one second: under emulation a waiter is sometimes starved
    # past it and its allocation refused, a matter of speed, not of the protocol).
    local skips=(limiter::vsim mptests::concurrent_children) skip_args=()
    for t in "${skips[@]}"; do skip_args+=(--skip "$t"); done
    log "unit tests under emulation: vgpu-core, libvgpu (lib), without ${skips[*]}"
    in_root env "${CROSS_ENV[@]}" cargo test --target "$TRIPLE" -p vgpu-core -p libvgpu --lib \
        -- --test-threads=2 "${skip_args[@]}" || die "unit tests failed on aarch64"
    # Under qemu every process runs one helper thread of qemu's own, so the two checks that a
    # non-CUDA process has exactly one thread stay with the native run (the same tests' mapping
    # checks run here). The root is a mount of its own, so the tests' private mount and PID
    # namespaces work in it: none of them may skip.
    # Three depend on speed (docs/aarch64.md says how): a dead process's room back within 1.5 s,
    # a fill finished while another process's probe block is held, a graph launch's measurement
    # getting the reconciliation's book within 200 ms. A fourth, two processes creating their
    # first contexts at one moment, once took the other's host PID under emulation
    # (docs/aarch64.md). A fifth refuses sendfile with a seccomp filter, which qemu's user mode
    # does not install.
    local emu_skips=(--skip dlsym_user_without_cuda_loads_nothing_and_starts_no_thread
        --skip release_artifact_in_non_cuda_processes_maps_nothing
        --skip full_slot_table_overflow_processes_share_the_limit
        --skip a_probe_block_never_costs_a_neighbour_process_an_allocation
        --skip captured_stream_ordered_allocations_are_counted_when_the_graph_pool_grows
        --skip deleted_region_keeps_the_container_limit
        --skip release_artifact_maps_engine_without_sendfile)
    log "integration tests under emulation: ${tests[*]}"
    ARM64_USERLAND=$ARM64_BIN in_root env "${CROSS_ENV[@]}" \
        VGPU_RELEASE_SO="$ROOT/target/release-floor-aarch64/libvgpu.so" \
        cargo test --no-fail-fast --target "$TRIPLE" -p libvgpu "${args[@]}" -- --test-threads=2 "${emu_skips[@]}" ||
        die "integration tests failed on aarch64"
    # Again with the shipped two-stage artifact as the shim: its trampolines and its dlsym stub
    # (x30 kept for glibc's RTLD_NEXT) under real clients.
    log "integration tests under emulation with the shipped artifact: ${SHIPPED_TESTS[*]}"
    args=()
    for t in "${SHIPPED_TESTS[@]}"; do args+=(--test "$t"); done
    ARM64_USERLAND=$ARM64_BIN in_root env "${CROSS_ENV[@]}" \
        VGPU_TEST_SHIM="$ROOT/target/release-floor-aarch64/libvgpu.so" \
        cargo test --no-fail-fast --target "$TRIPLE" -p libvgpu "${args[@]}" -- --test-threads=2 "${emu_skips[@]}" ||
        die "integration tests with the shipped artifact failed on aarch64"
    log "all aarch64 tests passed (under qemu: correctness only, timings mean nothing)"
}

ensure_root
refresh_host_files
case "${1:-}" in
    build)
        [ $# -ge 3 ] || die "usage: $0 build TRIPLE_SUFFIX PKG..."
        shift
        cmd_build "$@"
        ;;
    test)
        ensure_binfmt
        cmd_test
        ;;
    shell)
        ensure_binfmt
        shift
        [ $# -gt 0 ] || set -- bash
        in_root "$@"
        ;;
    *) die "usage: $0 build TRIPLE_SUFFIX PKG... | test | shell [CMD...]" ;;
esac
