#!/usr/bin/env bash
# Per-exec cost of the shim for a process that never touches CUDA.
#
# Through /etc/ld.so.preload the shim is loaded into every process of the container (shells,
# coreutils, package managers). This measures what one exec pays: posix_spawn + wait of a
# non-CUDA program (default /bin/true), variants interleaved round by round, median of ROUNDS
# after WARMUP rounds (ci/exec_cost/spawn_timer.c), for
#   none          no LD_PRELOAD
#   empty-c       an empty C shared library (libc only): the price of any preload
#   shim-native   target/release/libvgpu.so (cargo build --release)
#   shim-floor    target/release-floor/libvgpu.so (ci/release.sh, glibc 2.17 floor: the
#                 artifact we ship, a first stage that maps the engine on the first CUDA touch)
# Prints per variant the median added µs over "none" and over "empty-c" (the target for
# shim-floor: Δ empty ≤ +15 µs), and the resident memory (VmRSS, median of 21 runs of
# ci/exec_cost/rss_probe.c) over empty-c (target ≤ 64 KiB). Then the first-touch price: the
# first cuInit of a process on the simulated GPU with shim-floor, versus the native build
# (which has no engine to map), median of FIRST rounds (target ≤ 5 ms extra).
#
#   ci/exec_cost.sh [--rounds N] [--warmup N] [--program PATH] [--runs K] [--first N] [--no-build]
#                   [--extra NAME=PATH]...   (more preloads to compare, e.g. an older artifact)
#
# --runs K repeats the whole measurement K times (independent processes) and prints each table;
# on a 2-core machine expect ±10-20 µs between runs. Missing artifacts are built unless --no-build.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ROUNDS=2000
WARMUP=50
PROGRAM=/bin/true
RUNS=1
FIRST=200
BUILD=1
EXTRA=()
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --program) PROGRAM=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --first) FIRST=$2; shift 2 ;;
        --extra) EXTRA+=("$2"); shift 2 ;;
        --no-build) BUILD=0; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$ROOT/target/exec_cost
mkdir -p "$WORK"
CC=${CC:-cc}

"$CC" -O2 -Wall -o "$WORK/spawn_timer" ci/exec_cost/spawn_timer.c
"$CC" -O2 -shared -fPIC -o "$WORK/libempty.so" ci/exec_cost/empty.c -Wl,--no-as-needed -lc
"$CC" -O2 -Wall -o "$WORK/rss_probe" ci/exec_cost/rss_probe.c

NATIVE=$TARGET_DIR/release/libvgpu.so
FLOOR=$ROOT/target/release-floor/libvgpu.so
if [ "$BUILD" = 1 ]; then
    env -u LD_PRELOAD cargo build --release -q -p libvgpu -p vgpu-sim-cuda >&2
    bash ci/release.sh >&2
fi
variants=(none=- "empty-c=$WORK/libempty.so")
[ -f "$NATIVE" ] && variants+=("shim-native=$NATIVE") || echo "exec_cost: no $NATIVE (skipped)" >&2
[ -f "$FLOOR" ] && variants+=("shim-floor=$FLOOR") || echo "exec_cost: no $FLOOR (skipped)" >&2
variants+=("${EXTRA[@]}")

describe() {
    local so=$1
    [ -f "$so" ] || { echo "-"; return; }
    printf '%s KB, NEEDED: %s' "$(( $(stat -c %s "$so") / 1024 ))" \
        "$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ' | sed 's/ $//')"
}

echo "exec cost of $PROGRAM: $ROUNDS rounds (+$WARMUP warm-up), variants interleaved, posix_spawn+wait"
echo "machine: $(nproc) CPUs, $(uname -r), glibc $(ldd --version | head -n 1 | awk '{print $NF}')"
for v in "${variants[@]}"; do
    name=${v%%=*}
    so=${v#*=}
    [ "$so" = "-" ] || echo "  $name: $(describe "$so")"
done
# Median VmRSS (KiB) of rss_probe with preload $1 ("-": none).
rss_kib() {
    local _
    for _ in $(seq 1 21); do
        if [ "$1" = - ]; then env -u LD_PRELOAD "$WORK/rss_probe"; else LD_PRELOAD=$1 "$WORK/rss_probe"; fi
    done | sort -n | sed -n 11p
}
declare -A RSS
for v in "${variants[@]}"; do RSS[${v%%=*}]=$(rss_kib "${v#*=}"); done

for run in $(seq 1 "$RUNS"); do
    out=$("$WORK/spawn_timer" "$ROUNDS" "$WARMUP" "$PROGRAM" "${variants[@]}")
    echo
    [ "$RUNS" = 1 ] || echo "run $run/$RUNS"
    echo "| preload | median µs | p10 µs | p90 µs | Δ vs none | Δ vs empty-c | VmRSS Δ vs empty-c |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    base=$(awk '$1=="none"{print $2}' <<< "$out")
    empty=$(awk '$1=="empty-c"{print $2}' <<< "$out")
    while read -r name med p10 p90; do
        delta=$(awk -v a="$med" -v b="$base" 'BEGIN{printf "%+.0f µs", a-b}')
        dempty=$(awk -v a="$med" -v b="$empty" 'BEGIN{printf "%+.0f µs", a-b}')
        drss=$(awk -v a="${RSS[$name]}" -v b="${RSS[empty-c]}" 'BEGIN{printf "%+d KiB", a-b}')
        [ "$name" = none ] && delta="—" && dempty="—"
        [ "$name" = empty-c ] && dempty="—" && drss="— (${RSS[empty-c]} KiB)"
        [ "$name" = none ] && drss="—"
        printf '| %s | %.0f | %.0f | %.0f | %s | %s | %s |\n' "$name" "$med" "$p10" "$p90" "$delta" "$dempty" "$drss"
    done <<< "$out"
done

# First touch: the first cuInit of a process (dlopen + cuGetProcAddress + cuInit on the
# simulated GPU, ci/exec_cost/first_cuinit.c); shim-floor maps its engine there.
SIMLIB=$TARGET_DIR/release/simlib
if [ "$FIRST" -gt 0 ] && [ -f "$FLOOR" ] && [ -f "$TARGET_DIR/release/libcuda.so" ]; then
    mkdir -p "$SIMLIB"
    ln -sf ../libcuda.so "$SIMLIB/libcuda.so.1"
    "$CC" -O2 -Wall -o "$WORK/first_cuinit" ci/exec_cost/first_cuinit.c -ldl
    STATE=$(mktemp -d)
    trap 'rm -rf "$STATE"' EXIT
    fv=(none=-)
    [ -f "$NATIVE" ] && fv+=("shim-native=$NATIVE")
    fv+=("shim-floor=$FLOOR")
    # --extra preloads (an older artifact, say) take the first-touch measurement too.
    for e in "${EXTRA[@]}"; do fv+=("$e"); done
    fout=$(VGPU_SIM_STATE=$STATE/sim CUDA_DEVICE_MEMORY_SHARED_CACHE=$STATE/region LD_LIBRARY_PATH=$SIMLIB \
        "$WORK/first_cuinit" "$FIRST" "${fv[@]}")
    echo
    echo "first cuInit in a fresh process (simulated GPU), $FIRST rounds, median µs:"
    echo "| preload | first cuInit µs | Δ vs none |"
    echo "|---|---:|---:|"
    fbase=$(awk '$1=="none"{print $2}' <<< "$fout")
    while read -r name med; do
        d=—
        [ "$name" = none ] || d=$(awk -v a="$med" -v b="$fbase" 'BEGIN{printf "%+.0f µs", a-b}')
        printf '| %s | %.0f | %s |\n' "$name" "$med" "$d"
    done <<< "$fout"
elif [ "$FIRST" -gt 0 ]; then
    echo "exec_cost: first-cuInit figure skipped (needs $FLOOR and $TARGET_DIR/release/libcuda.so)" >&2
fi
