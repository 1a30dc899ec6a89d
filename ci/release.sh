#!/usr/bin/env bash
# Build the release artifact of libvgpu.so against an old glibc floor, for x86_64 and aarch64. Two
# stages in one file (docs/design.md "Exec cost"): a tiny first stage (loader/) that every
# process maps, carrying the engine (the shim built with `--features engine`) in a non-loaded
# section that it maps on the first CUDA/NVML touch.
#
#   ci/release.sh            build target/release-floor/ (x86_64) and target/release-floor-aarch64/
#                            for glibc 2.17 and check them
#   ci/release.sh --check F  only run the checks on an existing .so F (and its embedded engine)
#
# The shim is injected through /etc/ld.so.preload into images we do not control: a build that
# needs a newer glibc than the image has kills every process in it ("version `GLIBC_2.34' not
# found"). The native build on Debian 12 needs GLIBC_2.35, so the release artifact is linked by
# zig against glibc 2.17 stubs (cargo-zigbuild). Tools are installed on demand under
# target/zigtools (a Python venv with ziglang + cargo-zigbuild from PyPI; `cargo install
# cargo-zigbuild --locked` if the wheel is unavailable).
#
# Output, per architecture (target/release-floor/ for x86_64, target/release-floor-aarch64/):
# libvgpu.so, the executables of SHIPPED_BINS (the operator's CLI and the node agent, shipped
# beside the library, same floor), FLOOR (the glibc floor actually used: 2.17, or 2.28 after a
# loud fallback), exports.txt, libvgpu-engine.so (a copy of the embedded engine, for inspection).
# aarch64 is cross-built by ci/aarch64.sh in its cached Debian root (needs root; the first run
# builds the root, a few minutes).
#
# Environment: VGPU_GLIBC_FLOOR (default 2.17), VGPU_RELEASE_ARCHES (default "x86_64 aarch64"),
# CARGO_TARGET_DIR (honoured for x86_64; default target/),
# VGPU_ZIGLANG_SPEC / VGPU_ZIGBUILD_SPEC (pip version specifiers; default ==0.17.1 / ==0.24.1, the
# pair this was verified with).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TOOLS=$ROOT/target/zigtools
FLOOR=${VGPU_GLIBC_FLOOR:-2.17}
FALLBACK_FLOOR=2.28
# Every executable shipped beside libvgpu.so: built, checked and copied for each architecture.
SHIPPED_BINS=(vgpu-smi vgpu-agent)
read -r -a ARCHES <<< "${VGPU_RELEASE_ARCHES:-x86_64 aarch64}"

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
# The dynamic loader's name is per architecture.
ALLOWED_NEEDED='^(libc\.so\.6|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$'
# ... and the engine, which only CUDA/NVML processes map.
ENGINE_ALLOWED_NEEDED='^(libc\.so\.6|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libpthread\.so\.0|libdl\.so\.2|libm\.so\.6|librt\.so\.1)$'

# The checks read ELF with readelf (and loader/stage1gen.py), which handle every architecture;
# the host's objdump/objcopy know only the host's.

# Highest GLIBC_x.y[.z] a file requires, printed on stdout.
max_glibc() {
    readelf --dyn-syms -W "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1
}

# Defined dynamic functions (exports), sorted.
exported_functions() {
    readelf --dyn-syms -W "$1" | awk '$4 == "FUNC" && $7 != "UND" {sub(/@.*/, "", $8); print $8}' | sort -u
}

# The architecture (x86_64 or aarch64) of an ELF file.
elf_arch() {
    python3 "$ROOT/loader/stage1gen.py" machine "$1"
}

# check_machine FILE ARCH [NAME]
check_machine() {
    local got name=${3:-$(basename "$1")}
    got=$(elf_arch "$1" 2>/dev/null || echo unknown)
    if [ "$got" = "$2" ]; then
        log "ok   $name: ELF machine $got"
    else
        log "FAIL $name: ELF machine $got, want $2"
        return 1
    fi
}

# check_pages FILE ARCH [NAME]: on aarch64 every loadable segment can be mapped by a kernel with
# 64 KiB pages (Grace nodes run them): aligned to 64 KiB, file offset and address congruent.
check_pages() {
    local name=${3:-$(basename "$1")} bad=0 off addr align
    [ "$2" = aarch64 ] || return 0
    while read -r off addr align; do
        if ((align < 0x10000 || (off - addr) % 0x10000 != 0)); then
            log "FAIL $name: LOAD segment at offset $off, address $addr, alignment $align: not loadable with 64 KiB pages"
            bad=1
        fi
    done < <(readelf -lW "$1" | awk '$1 == "LOAD" {print $2, $3, $NF}')
    [ "$bad" -ne 0 ] || log "ok   $name: LOAD segments loadable with 64 KiB pages"
    return "$bad"
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
        readelf --dyn-syms -W "$so" | grep "GLIBC_" | sort -u | while read -r line; do
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
    exports=$(exported_functions "$so" | grep -vx vgpu_engine_attach)
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

# check_bin FILE FLOOR ARCH: an executable shipped beside the library (SHIPPED_BINS): machine,
# glibc floor and NEEDED.
check_bin() {
    local bin=$1 floor=$2 arch=$3 bad=0 max needed
    [ -f "$bin" ] || die "no such file: $bin"
    check_machine "$bin" "$arch" || bad=1
    check_pages "$bin" "$arch" || bad=1
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

# check_artifact FILE FLOOR [ARCH]: the first stage (libc only, no TLS, no constructor) and the
# engine it carries (same checks, its own NEEDED list, the same hooked names plus
# vgpu_engine_attach), both for ARCH (default: whatever FILE is, x86_64 or aarch64).
check_artifact() {
    local so=$1 floor=$2 arch=${3:-} bad=0 eng
    [ -f "$so" ] || die "no such file: $so"
    [ -n "$arch" ] || arch=$(elf_arch "$so") || die "$so is neither x86_64 nor aarch64"
    check_machine "$so" "$arch" || bad=1
    check_pages "$so" "$arch" || bad=1
    check_so "$so" "$floor" || bad=1
    if readelf -lW "$so" | grep -qw TLS; then log "FAIL the first stage has a TLS segment"; bad=1; fi
    if readelf -dW "$so" | grep -qE '\((INIT|INIT_ARRAY|PREINIT_ARRAY)\)'; then
        log "FAIL the first stage has constructors"; bad=1
    fi
    eng=$(mktemp)
    if ! python3 "$ROOT/loader/stage1gen.py" extract "$so" "$eng" 2>/dev/null; then
        log "FAIL no .vgpu_engine section in $so"; rm -f "$eng"; return 1
    fi
    log "     embedded engine: $(stat -c %s "$eng") bytes"
    check_machine "$eng" "$arch" "embedded engine" || bad=1
    check_pages "$eng" "$arch" "embedded engine" || bad=1
    check_so "$eng" "$floor" "$ENGINE_ALLOWED_NEEDED" || bad=1
    exported_functions "$eng" | grep -qx vgpu_engine_attach ||
        { log "FAIL the engine lacks vgpu_engine_attach"; bad=1; }
    if ! diff <(exported_functions "$so") <(exported_functions "$eng" | grep -vx vgpu_engine_attach) >&2; then
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

command -v readelf >/dev/null || die "readelf missing (apt-get install binutils)"
command -v python3 >/dev/null || die "python3 missing (loader/stage1gen.py)"
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

# build_floor ARCH FLOOR: the engine and SHIPPED_BINS for ARCH at glibc FLOOR.
build_floor() {
    local arch=$1 floor=$2 bins=()
    for b in "${SHIPPED_BINS[@]}"; do bins+=(-p "$b"); done
    log "$arch: engine and ${SHIPPED_BINS[*]} for glibc $floor"
    case $arch in
        x86_64)
            # LD_PRELOAD must not leak into the compiler.
            env -u LD_PRELOAD cargo zigbuild --release --target "x86_64-unknown-linux-gnu.$floor" -p libvgpu --features engine &&
                env -u LD_PRELOAD cargo zigbuild --release --target "x86_64-unknown-linux-gnu.$floor" "${bins[@]}"
            ;;
        aarch64)
            VGPU_FEATURES=engine "$ROOT/ci/aarch64.sh" build ".$floor" libvgpu &&
                "$ROOT/ci/aarch64.sh" build ".$floor" "${SHIPPED_BINS[@]}"
            ;;
        *) die "unknown architecture $arch (x86_64, aarch64)" ;;
    esac
}

# release_arch ARCH: build, assemble and check ARCH's release directory.
release_arch() {
    local arch=$1 out built used=$FLOOR
    case $arch in
        x86_64) out=$ROOT/target/release-floor built=$TARGET_DIR/x86_64-unknown-linux-gnu/release ;;
        aarch64) out=$ROOT/target/release-floor-aarch64 built=$ROOT/target/aarch64/aarch64-unknown-linux-gnu/release ;;
        *) die "unknown architecture $arch (x86_64, aarch64)" ;;
    esac
    if ! build_floor "$arch" "$FLOOR"; then
        if [ "$FLOOR" = "$FALLBACK_FLOOR" ]; then
            die "$arch: zigbuild for glibc $FLOOR failed"
        fi
        loud "$arch: glibc $FLOOR build FAILED; falling back to glibc $FALLBACK_FLOOR." \
            "The artifact will NOT load in CentOS 7 / Ubuntu 18.04 era images (glibc < $FALLBACK_FLOOR)."
        used=$FALLBACK_FLOOR
        build_floor "$arch" "$used" || die "$arch: zigbuild for glibc $used failed too"
    fi
    local engine=$built/libvgpu.so
    [ -f "$engine" ] || die "build produced no $engine"
    mkdir -p "$out"
    cp -f "$engine" "$out/libvgpu-engine.so"
    log "$arch first stage: loader/build.sh with zig cc -target $arch-linux-gnu.$used"
    env -u LD_PRELOAD loader/build.sh "$engine" "$out/libvgpu.so.tmp" \
        "$TOOLS/venv/bin/python" -m ziglang cc -target "$arch-linux-gnu.$used" ||
        die "first stage build failed"
    mv -f "$out/libvgpu.so.tmp" "$out/libvgpu.so"
    for b in "${SHIPPED_BINS[@]}"; do
        [ -f "$built/$b" ] || die "build produced no $built/$b"
        cp -f "$built/$b" "$out/$b.tmp"
        mv -f "$out/$b.tmp" "$out/$b"
    done
    echo "$used" > "$out/FLOOR"
    exported_functions "$out/libvgpu.so" > "$out/exports.txt"
    log "artifact: $out/libvgpu.so ($(stat -c %s "$out/libvgpu.so") bytes), $arch, glibc floor $used"
    check_artifact "$out/libvgpu.so" "$used" "$arch" || die "$arch: release artifact checks failed"
    for b in "${SHIPPED_BINS[@]}"; do
        check_bin "$out/$b" "$used" "$arch" || die "$arch: $b artifact checks failed"
    done
    if [ "$used" != "$FLOOR" ]; then
        loud "$arch: release artifact built for glibc $used, NOT $FLOOR (see the fallback message above)"
    fi
}

for arch in "${ARCHES[@]}"; do
    release_arch "$arch"
done
log "release artifacts OK: ${ARCHES[*]}"
