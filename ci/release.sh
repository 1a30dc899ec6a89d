#!/usr/bin/env bash
# Build the release artifact of libvgpu.so against an old glibc floor. Two stages
# in one file (docs/design.md "Exec cost"): a tiny first stage (ci/stage1) that every
# process maps, carrying the engine (the shim built with `--features engine`) in a non-loaded
# section that it maps on the first CUDA/NVML touch.
#
#   ci/release.sh            build target/release-floor/libvgpu.so for glibc 2.17 and check it
#   ci/release.sh --check F  only run the checks on an existing .so F (and its embedded engine)
#
# The shim is injected through /etc/ld.so.preload into images we do not control: a build that
# needs a newer glibc than the image has kills every process in it ("version `GLIBC_2.34' not
# found"). The native build on Debian 12 needs GLIBC_2.35, so the release artifact is linked by
# zig against glibc 2.17 stubs (cargo-zigbuild). Tools are installed on demand under
# target/zigtools (a Python venv with ziglang + cargo-zigbuild from PyPI; `cargo install
# cargo-zigbuild --locked` if the wheel is unavailable).
#
# Output: target/release-floor/libvgpu.so, target/release-floor/vgpu-smi (the operator's CLI,
# shipped beside the library, same floor), target/release-floor/vgpu-agent (the node agent that
# replaces HAMi's vGPU monitor container, same floor, docs/agent.md), target/release-floor/FLOOR (the glibc floor actually
# used: 2.17, or 2.28 after a loud fallback), target/release-floor/exports.txt,
# target/release-floor/libvgpu-engine.so (a copy of the embedded engine, for inspection).
#
# Environment: VGPU_GLIBC_FLOOR (default 2.17), CARGO_TARGET_DIR (honoured; default target/),
# VGPU_ZIGLANG_SPEC / VGPU_ZIGBUILD_SPEC (pip version specifiers; default ==0.17.1 / ==0.24.1, the
# pair this was verified with).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TOOLS=$ROOT/target/zigtools
OUT=$ROOT/target/release-floor
FLOOR=${VGPU_GLIBC_FLOOR:-2.17}
FALLBACK_FLOOR=2.28
TRIPLE=x86_64-unknown-linux-gnu

log() { printf '[release] %s\n' "$*" >&2; }
die() { printf '[release] FAILED: %s\n' "$*" >&2; exit 1; }
loud() {
    printf '\n%s\n' '########################################################################' >&2
    printf '### %s\n' "$@" >&2
    printf '%s\n\n' '########################################################################' >&2
}

# --- checks ----------------------------------------------------------------------------------

# Symbols every release build must export (the entry points real clients resolve first).
REQUIRED_EXPORTS=(
    dlsym cuGetProcAddress cuGetProcAddress_v2 cuInit
    cuMemAlloc_v2 cuMemFree_v2 cuMemGetInfo_v2 cuMemAllocManaged cuMemAllocAsync cuLaunchKernel
    cuDevicePrimaryCtxRetain cuDeviceTotalMem_v2
    nvmlInit nvmlInit_v2 nvmlInitWithFlags nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo_v2
)
# NEEDED entries the artifact may have: every process pays for each (~40 µs; libgcc_s ~110 µs).
ALLOWED_NEEDED='^(libc\.so\.6|ld-linux-x86-64\.so\.2)$'
# ... and the engine, which only CUDA/NVML processes map.
ENGINE_ALLOWED_NEEDED='^(libc\.so\.6|ld-linux-x86-64\.so\.2|libpthread\.so\.0|libdl\.so\.2|libm\.so\.6|librt\.so\.1)$'

# Highest GLIBC_x.y[.z] a .so requires (objdump -T), printed on stdout.
max_glibc() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1
}

# version_le A B: A <= B in version order.
version_le() {
    [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$1" ]
}

# check_so FILE FLOOR [NEEDED_RE]: the three guards of docs/shim-notes.md §8 plus the export list.
check_so() {
    local so=$1 floor=$2 allowed=${3:-$ALLOWED_NEEDED} bad=0 max needed exports missing extra
    [ -f "$so" ] || die "no such file: $so"
    max=$(max_glibc "$so")
    [ -n "$max" ] || die "objdump -T found no GLIBC_ version in $so"
    if version_le "$max" "$floor"; then
        log "ok   highest GLIBC_ version: $max (floor $floor)"
    else
        log "FAIL highest GLIBC_ version: $max exceeds the floor $floor:"
        objdump -T "$so" | grep "GLIBC_" | sort -u | while read -r line; do
            v=$(printf '%s\n' "$line" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//')
            version_le "$v" "$floor" || log "       $line"
        done
        bad=1
    fi
    needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    log "     NEEDED: $(echo "$needed" | tr '\n' ' ')"
    while read -r lib; do
        [ -n "$lib" ] || continue
        if ! [[ $lib =~ $allowed ]]; then
            log "FAIL NEEDED has $lib (libgcc_s, libcuda, libnvidia-ml or anything outside libc's own libraries is forbidden)"
            bad=1
        fi
    done <<< "$needed"
    [ "$bad" -ne 0 ] || log "ok   NEEDED list"
    # Defined dynamic symbols (exports).
    exports=$(objdump -T "$so" | awk '$0 ~ / DF / && $0 !~ /\*UND\*/ {print $NF}' | grep -vx vgpu_engine_attach | sort -u)
    missing=""
    for s in "${REQUIRED_EXPORTS[@]}"; do
        grep -qx "$s" <<< "$exports" || missing="$missing $s"
    done
    extra=$(grep -v -E '^(cu[A-Z]|nvml[A-Z]|dlsym$)' <<< "$exports" || true)
    if [ -n "$missing" ]; then log "FAIL exports missing:$missing"; bad=1; fi
    if [ -n "$extra" ]; then log "FAIL unexpected exports (not cu*/nvml*/dlsym): $(echo "$extra" | tr '\n' ' ')"; bad=1; fi
    if [ -z "$missing" ] && [ -z "$extra" ]; then
        log "ok   exports: $(wc -l <<< "$exports") functions (dlsym, cu*, nvml*), required ones present"
    fi
    return "$bad"
}

# check_bin FILE FLOOR: an executable shipped beside the library (vgpu-smi, vgpu-agent): glibc
# floor and NEEDED (libc family only: no OpenSSL, no driver, no NVML).
check_bin() {
    local bin=$1 floor=$2 bad=0 max needed
    [ -f "$bin" ] || die "no such file: $bin"
    max=$(max_glibc "$bin")
    if [ -n "$max" ] && ! version_le "$max" "$floor"; then
        log "FAIL $(basename "$bin"): highest GLIBC_ version $max exceeds the floor $floor"
        bad=1
    else
        log "ok   $(basename "$bin"): highest GLIBC_ version ${max:-none} (floor $floor)"
    fi
    needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    while read -r lib; do
        [ -n "$lib" ] || continue
        if ! [[ $lib =~ $ENGINE_ALLOWED_NEEDED ]]; then
            log "FAIL $(basename "$bin") NEEDED has $lib (it must run without the driver and in bare images)"
            bad=1
        fi
    done <<< "$needed"
    return "$bad"
}

# check_artifact FILE FLOOR: the first stage (libc only, no TLS, no constructor) and the engine
# it carries (same checks, its own NEEDED list, the same hooked names plus vgpu_engine_attach).
check_artifact() {
    local so=$1 floor=$2 bad=0 eng
    check_so "$so" "$floor" || bad=1
    if readelf -lW "$so" | grep -qw TLS; then log "FAIL the first stage has a TLS segment"; bad=1; fi
    if readelf -dW "$so" | grep -qE '\((INIT|INIT_ARRAY|PREINIT_ARRAY)\)'; then
        log "FAIL the first stage has constructors"; bad=1
    fi
    eng=$(mktemp)
    if ! objcopy --dump-section .vgpu_engine="$eng" "$so" /dev/null 2>/dev/null; then
        log "FAIL no .vgpu_engine section in $so"; rm -f "$eng"; return 1
    fi
    log "     embedded engine: $(stat -c %s "$eng") bytes"
    check_so "$eng" "$floor" "$ENGINE_ALLOWED_NEEDED" || bad=1
    nm -D --defined-only "$eng" | awk '{print $3}' | grep -qx vgpu_engine_attach ||
        { log "FAIL the engine lacks vgpu_engine_attach"; bad=1; }
    if ! diff <(objdump -T "$so" | awk '$0 ~ / DF / && $0 !~ /\*UND\*/ {print $NF}' | sort -u) \
        <(objdump -T "$eng" | awk '$0 ~ / DF / && $0 !~ /\*UND\*/ {print $NF}' | grep -vx vgpu_engine_attach | sort -u) >&2; then
        log "FAIL the first stage and the engine export different names"; bad=1
    fi
    rm -f "$eng"
    return "$bad"
}

if [ "${1:-}" = "--check" ]; then
    [ $# -ge 2 ] || die "usage: $0 --check FILE [FLOOR]"
    check_artifact "$2" "${3:-$FLOOR}"
    exit $?
fi

# --- tools -----------------------------------------------------------------------------------

if ! command -v objdump >/dev/null || ! command -v readelf >/dev/null; then
    die "objdump/readelf missing (apt-get install binutils)"
fi
command -v cargo >/dev/null || die "cargo not found"

ensure_tools() {
    local py=$TOOLS/venv/bin/python
    if [ ! -x "$py" ]; then
        log "creating tool venv $TOOLS/venv"
        python3 -m venv "$TOOLS/venv" || die "python3 -m venv failed"
    fi
    if ! "$py" -m ziglang version >/dev/null 2>&1; then
        log "installing ziglang from PyPI"
        "$py" -m pip install -q --disable-pip-version-check "ziglang${VGPU_ZIGLANG_SPEC:-==0.17.1}" ||
            die "pip install ziglang failed"
    fi
    export PATH="$TOOLS/venv/bin:$TOOLS/cargo/bin:$PATH"
    if ! command -v cargo-zigbuild >/dev/null 2>&1; then
        log "installing cargo-zigbuild (PyPI wheel)"
        if ! "$py" -m pip install -q --disable-pip-version-check "cargo-zigbuild${VGPU_ZIGBUILD_SPEC:-==0.24.1}"; then
            log "wheel unavailable: cargo install cargo-zigbuild --locked"
            cargo install --locked --root "$TOOLS/cargo" cargo-zigbuild || die "cargo install cargo-zigbuild failed"
        fi
    fi
    command -v cargo-zigbuild >/dev/null || die "cargo-zigbuild still not on PATH"
    log "zig $("$py" -m ziglang version), $(cargo-zigbuild --version 2>/dev/null | head -n 1)"
}

ensure_tools

# --- build -----------------------------------------------------------------------------------

build_floor() {
    local floor=$1
    log "cargo zigbuild --release --target $TRIPLE.$floor -p libvgpu --features engine"
    # LD_PRELOAD must not leak into the compiler.
    env -u LD_PRELOAD cargo zigbuild --release --target "$TRIPLE.$floor" -p libvgpu --features engine
    log "cargo zigbuild --release --target $TRIPLE.$floor -p vgpu-smi -p vgpu-agent"
    env -u LD_PRELOAD cargo zigbuild --release --target "$TRIPLE.$floor" -p vgpu-smi -p vgpu-agent
}

USED=$FLOOR
if ! build_floor "$FLOOR"; then
    if [ "$FLOOR" = "$FALLBACK_FLOOR" ]; then
        die "zigbuild for glibc $FLOOR failed"
    fi
    loud "glibc $FLOOR build FAILED; falling back to glibc $FALLBACK_FLOOR." \
        "The artifact will NOT load in CentOS 7 / Ubuntu 18.04 era images (glibc < $FALLBACK_FLOOR)."
    USED=$FALLBACK_FLOOR
    build_floor "$USED" || die "zigbuild for glibc $USED failed too"
fi

ENGINE=$TARGET_DIR/$TRIPLE/release/libvgpu.so
[ -f "$ENGINE" ] || die "build produced no $ENGINE"
mkdir -p "$OUT"
cp -f "$ENGINE" "$OUT/libvgpu-engine.so"
log "first stage: ci/stage1/build.sh with zig cc -target x86_64-linux-gnu.$USED"
env -u LD_PRELOAD ci/stage1/build.sh "$ENGINE" "$OUT/libvgpu.so.tmp" \
    "$TOOLS/venv/bin/python" -m ziglang cc -target "x86_64-linux-gnu.$USED" ||
    die "first stage build failed"
mv -f "$OUT/libvgpu.so.tmp" "$OUT/libvgpu.so"
for bin in vgpu-smi vgpu-agent; do
    built=$TARGET_DIR/$TRIPLE/release/$bin
    [ -f "$built" ] || die "build produced no $built"
    cp -f "$built" "$OUT/$bin.tmp"
    mv -f "$OUT/$bin.tmp" "$OUT/$bin"
done
echo "$USED" > "$OUT/FLOOR"
objdump -T "$OUT/libvgpu.so" | awk '$0 ~ / DF / && $0 !~ /\*UND\*/ {print $NF}' | sort -u > "$OUT/exports.txt"
log "artifact: $OUT/libvgpu.so ($(stat -c %s "$OUT/libvgpu.so") bytes), glibc floor $USED"

if ! check_artifact "$OUT/libvgpu.so" "$USED"; then
    die "release artifact checks failed"
fi
if ! check_bin "$OUT/vgpu-smi" "$USED"; then
    die "vgpu-smi artifact checks failed"
fi
if ! check_bin "$OUT/vgpu-agent" "$USED"; then
    die "vgpu-agent artifact checks failed"
fi
if [ "$USED" != "$FLOOR" ]; then
    loud "release artifact built for glibc $USED, NOT $FLOOR (see the fallback message above)"
fi
log "release artifact OK"
