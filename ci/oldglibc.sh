#!/usr/bin/env bash
# The shipped artifact on an old userland: Debian bullseye (glibc 2.31, where dlopen/dlsym live in
# libdl and threads in libpthread), so the first stage's glibc < 2.34 paths run somewhere.
#
#   ci/oldglibc.sh        run after ci/release.sh (uses its artifact and its zig tools)
#
# The root (debootstrap --variant=minbase bullseye from deb.debian.org, a few minutes, once) is
# cached in target/oldglibc/bullseye. The C clients (zig cc) and the simulated driver
# (cargo zigbuild), both for glibc 2.31, are copied to /vgpu in it; the checks run there with chroot, inside
# a private mount and PID namespace (unshare, root) with their own /proc, /tmp and /dev/shm:
# preload safety (a shell and /etc/ld.so.preload injection stay silent), the memory limit across
# two processes, the dlopen/dlsym client, a constructor calling CUDA while another thread maps
# the engine (no hang on the loader lock), and the engine-mapping failure naming its cause in a
# process that never loaded libdl.
#
# Environment: VGPU_OLDGLIBC_ROOT (default target/oldglibc/bullseye), VGPU_DEBIAN_MIRROR
# (default http://deb.debian.org/debian).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OLD=${VGPU_OLDGLIBC_ROOT:-$ROOT/target/oldglibc/bullseye}
MIRROR=${VGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SO=$ROOT/target/release-floor/libvgpu.so
TOOLS=$ROOT/target/zigtools
TRIPLE=x86_64-unknown-linux-gnu
SIMDIR=$ROOT/target/$TRIPLE/debug

log() { printf '[oldglibc] %s\n' "$*" >&2; }
die() { printf '[oldglibc] FAILED: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, unshare)"
[ -f "$SO" ] || die "no $SO: run ci/release.sh first"
[ -x "$TOOLS/venv/bin/python" ] || die "no zig tools in $TOOLS: run ci/release.sh first"
export PATH="$TOOLS/venv/bin:$PATH"

# --- the old root (cached) ----------------------------------------------------------------------
if [ ! -f "$OLD/.vgpu-complete" ]; then
    command -v debootstrap >/dev/null || die "debootstrap missing (ci/deps.sh installs it)"
    log "debootstrap --variant=minbase bullseye $OLD (once)"
    rm -rf "$OLD.tmp"
    mkdir -p "$(dirname "$OLD")"
    debootstrap --variant=minbase bullseye "$OLD.tmp" "$MIRROR" >&2 ||
        die "debootstrap failed (is $MIRROR reachable?)"
    rm -rf "$OLD"
    mv "$OLD.tmp" "$OLD"
    touch "$OLD/.vgpu-complete"
fi
ver=$(chroot "$OLD" /usr/bin/ldd --version | sed -n '1s/.* //p')
[ "$ver" = 2.31 ] || die "the old root has glibc $ver, want 2.31"
log "old root: glibc $ver"

# --- what runs in it ------------------------------------------------------------------------------
log "simulated driver for glibc 2.31 (cargo zigbuild)"
env -u LD_PRELOAD cargo zigbuild -q --target "$TRIPLE.2.31" -p vgpu-sim-cuda -p vgpu-sim-nvml
V=$OLD/vgpu
rm -rf "$V"
mkdir -p "$V/lib" "$V/bin" "$V/run"
cp "$SO" "$V/libvgpu.so"
cp "$SIMDIR/libcuda.so" "$V/lib/libcuda.so.1"
cp "$SIMDIR/libnvidia_ml.so" "$V/lib/libnvidia-ml.so.1"
ln -s libcuda.so.1 "$V/lib/libcuda.so"
ln -s libnvidia-ml.so.1 "$V/lib/libnvidia-ml.so"
zcc() { env -u LD_PRELOAD python -m ziglang cc -target x86_64-linux-gnu.2.31 -std=gnu11 -O1 -Itests/c "$@"; }
zcc -o "$V/bin/alloc_hold" tests/c/alloc_hold.c -L"$V/lib" -lcuda
zcc -o "$V/bin/dlsym_client" tests/c/dlsym_client.c -ldl
zcc -o "$V/bin/first_touch" tests/c/first_touch.c
zcc -shared -fPIC -o "$V/lib/libctor_cuinit.so" tests/c/ctor_cuinit.c -L"$V/lib" -lcuda
zcc -o "$V/bin/loader_lock_main" tests/c/loader_lock_main.c -pthread -ldl -L"$V/lib" -lcuda

cat > "$V/checks.sh" <<'CHECKS'
#!/bin/sh
# Runs inside the old root (chroot): `checks.sh main` (checks 1-4, with /proc) or
# `checks.sh noengine` (check 5, without /proc). One line per check; exit 1 on the first failure.
set -u
fail() { echo "FAIL $*"; exit 1; }
ok() { echo "ok   $*"; }
cd /vgpu/run || fail "no /vgpu/run"
rm -f one.* two.* dl.* ft.* ll.* go region.cache sim.state
export LD_LIBRARY_PATH=/vgpu/lib VGPU_SIM_STATE=/vgpu/run/sim.state VGPU_SIM_CTX_MIB=2
export CUDA_DEVICE_MEMORY_SHARED_CACHE=/vgpu/run/region.cache CUDA_DEVICE_MEMORY_LIMIT=1g

if [ "${1:-}" = noengine ]; then
    # 5. The engine cannot be mapped (no /proc for the memfd, no writable temp dir) in a process
    #    that never loaded libdl: the line names the cause, and CUDA fails closed.
    LD_PRELOAD=/vgpu/libvgpu.so /vgpu/bin/first_touch > ft.out 2> ft.err
    grep -q '^init=3$' ft.out || fail "first touch without an engine: $(cat ft.out ft.err)"
    grep -q 'cannot map the engine: dlopen failed: ' ft.err || fail "no engine-mapping line: $(cat ft.err)"
    if grep -q 'unknown error' ft.err; then fail "the cause is not named: $(cat ft.err)"; fi
    ok "engine-mapping failure without libdl names its cause: $(cat ft.err)"
    exit 0
fi

# 1. Preload safety: a shell, and every process through /etc/ld.so.preload, stay silent.
out=$(LD_PRELOAD=/vgpu/libvgpu.so /bin/sh -c 'echo hi' 2>&1)
[ "$out" = hi ] || fail "preloaded shell printed: $out"
echo /vgpu/libvgpu.so > /etc/ld.so.preload
out=$(/bin/ls /vgpu 2>&1 >/dev/null; /bin/sh -c true 2>&1)
rm -f /etc/ld.so.preload
[ -z "$out" ] || fail "ld.so.preload injection printed: $out"
ok "preload safety (LD_PRELOAD and /etc/ld.so.preload)"

# 2. The limit holds across two processes.
LD_PRELOAD=/vgpu/libvgpu.so /vgpu/bin/alloc_hold 600 go > one.out 2> one.err &
i=0
while [ $i -lt 3000 ] && ! grep -q rc= one.out 2>/dev/null; do sleep 0.01; i=$((i + 1)); done
LD_PRELOAD=/vgpu/libvgpu.so /vgpu/bin/alloc_hold 600 > two.out 2> two.err
touch go
wait
grep -q '^rc=0 ' one.out || fail "first 600 MiB: $(cat one.out one.err)"
grep -q '^rc=2 ' two.out || fail "second 600 MiB under 1 GiB not refused: $(cat two.out two.err)"
ok "memory limit across processes"

# 3. dlopen/dlsym client (libdl loaded by the application).
LD_PRELOAD=/vgpu/libvgpu.so /vgpu/bin/dlsym_client > dl.out 2> dl.err || fail "dlsym_client: $(cat dl.out dl.err)"
grep -q '^mem_alloc=0$' dl.out || fail "dlsym_client alloc: $(cat dl.out)"
ok "dlopen/dlsym client"

# 4. A constructor calling cuInit (under the loader lock) while another thread maps the engine.
for d in 0 20 80; do
    CTOR_DELAY_MS=$d LD_PRELOAD=/vgpu/libvgpu.so timeout 30 /vgpu/bin/loader_lock_main /vgpu/lib/libctor_cuinit.so \
        > ll.out 2> ll.err || fail "loader-lock race (delay $d ms): exit $?: $(cat ll.out ll.err)"
    grep -q '^init=0$' ll.out || fail "loader-lock race (delay $d ms): $(cat ll.out ll.err)"
done
ok "no hang on the loader lock"

CHECKS
chmod +x "$V/checks.sh"

# --- run ------------------------------------------------------------------------------------------
# Checks 1-4 with /proc and fresh /tmp and /dev/shm; check 5 without /proc, temp dirs read-only.
# (The inner scripts expand their own $1.)
log "checks in the old root"
# shellcheck disable=SC2016
unshare -m -p -f /bin/sh -ec '
    mount -t proc proc "$1/proc"
    mount -t tmpfs tmpfs "$1/tmp"
    mount -t tmpfs tmpfs "$1/dev/shm"
    exec chroot "$1" /vgpu/checks.sh main
' sh "$OLD" || die "checks with the shipped artifact failed"
# shellcheck disable=SC2016
unshare -m -p -f /bin/sh -ec '
    for d in tmp var/tmp dev/shm; do mount -t tmpfs -o ro tmpfs "$1/$d"; done
    exec chroot "$1" /vgpu/checks.sh noengine
' sh "$OLD" || die "engine-mapping check failed"
log "all checks passed (glibc $ver)"
