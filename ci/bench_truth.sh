#!/usr/bin/env bash
# Costs of the driver-held-memory reconciliation on the simulated GPU (docs/design.md
# "Driver-held memory (truth)"), interleaved rounds:
#   - watcher-thread CPU (µs per second, from schedstat) of an idle process with one active device;
#   - ns per cuModuleLoadData + cuModuleUnload pair (8 MiB image, measured up front), and without
#     any shim.
# Usage: ci/bench_truth.sh [SHIM.so ...]   (default: target/release/libvgpu.so; pass an older
# build too to compare). Needs the test client: cargo test --test memory_truth builds it.
set -euo pipefail
cd "$(dirname "$0")/.."
client=target/debug/testbin/truth_client
simlib=target/debug/simlib
[[ -x "$client" && -d "$simlib" ]] || { echo "run cargo test --test memory_truth first" >&2; exit 1; }
shims=("$@")
[[ ${#shims[@]} -gt 0 ]] || shims=(target/release/libvgpu.so)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# run_client SHIM|none COMMAND... : prints the last reply line; sets PID_SEEN.
session() {
    local shim=$1 secs=$2
    shift 2
    export VGPU_SIM_STATE="$tmp/state" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" LD_LIBRARY_PATH="$simlib"
    export CUDA_DEVICE_MEMORY_LIMIT=4096m VGPU_SIM_MODULE_MIB=1
    local pre=""
    [[ "$shim" == none ]] || pre="$shim"
    coproc C { LD_PRELOAD="$pre" "$client"; }
    local l pid
    read -r l <&"${C[0]}"
    pid=${l##*pid=}
    for c in init "ctx 0" "alloc 16777216"; do echo "$c" >&"${C[1]}"; read -r l <&"${C[0]}"; done
    if [[ "$secs" -gt 0 ]]; then
        sleep 0.5
        local a b
        a=$(watcher_ns "$pid")
        sleep "$secs"
        b=$(watcher_ns "$pid")
        l="watcher_us_per_s=$(((b - a) / secs / 1000))"
    fi
    for c in "$@"; do echo "$c" >&"${C[1]}"; read -r l <&"${C[0]}"; done
    echo "exit" >&"${C[1]}"
    wait "$C_PID" || true
    rm -f "$tmp/state" "$tmp/region"
    echo "$l"
}

watcher_ns() {
    local s=0 t
    for t in /proc/"$1"/task/*; do
        if [[ "$(cat "$t/comm")" == vgpu-compute ]]; then s=$((s + $(cut -d' ' -f1 "$t/schedstat"))); fi
    done
    echo "$s"
}

for round in 1 2 3; do
    line="round $round: module pair none=$(session none 0 "module_loop 2000 8" | sed 's/.*ns=//') ns"
    for s in "${shims[@]}"; do
        line+=" | $s: pair=$(session "$s" 0 "module_loop 2000 8" | sed 's/.*ns=//') ns, $(session "$s" 5)"
    done
    echo "$line"
done
