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
#   shim-floor    target/release-floor/libvgpu.so (ci/release.sh, glibc 2.17 floor)
#
#   ci/exec_cost.sh [--rounds N] [--warmup N] [--program PATH] [--runs K] [--no-build]
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
BUILD=1
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --program) PROGRAM=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
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

NATIVE=$TARGET_DIR/release/libvgpu.so
FLOOR=$ROOT/target/release-floor/libvgpu.so
if [ "$BUILD" = 1 ]; then
    env -u LD_PRELOAD cargo build --release -q -p libvgpu >&2
    [ -f "$FLOOR" ] || bash ci/release.sh >&2
fi
variants=(none=- "empty-c=$WORK/libempty.so")
[ -f "$NATIVE" ] && variants+=("shim-native=$NATIVE") || echo "exec_cost: no $NATIVE (skipped)" >&2
[ -f "$FLOOR" ] && variants+=("shim-floor=$FLOOR") || echo "exec_cost: no $FLOOR (skipped)" >&2

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
for run in $(seq 1 "$RUNS"); do
    out=$("$WORK/spawn_timer" "$ROUNDS" "$WARMUP" "$PROGRAM" "${variants[@]}")
    echo
    [ "$RUNS" = 1 ] || echo "run $run/$RUNS"
    echo "| preload | median µs | p10 µs | p90 µs | Δ median vs none |"
    echo "|---|---:|---:|---:|---:|"
    base=$(awk '$1=="none"{print $2}' <<< "$out")
    while read -r name med p10 p90; do
        delta=$(awk -v a="$med" -v b="$base" 'BEGIN{d=a-b; printf "%+.0f µs", d}')
        [ "$name" = none ] && delta="—"
        printf '| %s | %.0f | %.0f | %.0f | %s |\n' "$name" "$med" "$p10" "$p90" "$delta"
    done <<< "$out"
done
