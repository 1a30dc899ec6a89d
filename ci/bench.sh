#!/usr/bin/env bash
# Benchmarks, reported as ratios against running without the shim in the same run (never timed
# assertions in tests). Sections: memory (alloc+free latency, 1 and 8 processes), compute
# (ci/bench_compute.sh: limiter accuracy table, plot, launch overhead).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/simgpu.sh
. ci/simgpu.sh
mkdir -p "$out/bench"
cc -O2 -o "$out/bench/alloc_bench" ci/bench/alloc_bench.c -ldl
iters=${ALLOC_ITERS:-20000}

run_one() { # $1 = with|without, $2 = N processes → prints the mean of the processes' medians
  local mode=$1 n=$2 pids=() i
  for ((i = 0; i < n; i++)); do
    if [[ $mode == with ]]; then
      LD_PRELOAD="$shim" CUDA_DEVICE_MEMORY_LIMIT=8g CUDA_DEVICE_MEMORY_SHARED_CACHE="$work/bench.cache" \
        "$out/bench/alloc_bench" "$iters" >"$work/$mode.$n.$i" &
    else
      "$out/bench/alloc_bench" "$iters" >"$work/$mode.$n.$i" &
    fi
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work/$mode.$n".* | sed 's/median_ns=\([0-9]*\).*/\1/' | awk '{s+=$1} END {printf "%.0f", s/NR}'
}

echo "## Memory: cuMemAlloc_v2 + cuMemFree_v2 pair (1 MiB), median ns per pair"
echo
echo "| processes | without shim | with shim (limit 8g) | added | ratio |"
echo "|---:|---:|---:|---:|---:|"
for n in 1 8; do
  base=$(run_one without "$n")
  with=$(run_one with "$n")
  awk -v n="$n" -v b="$base" -v w="$with" 'BEGIN { printf "| %d | %d | %d | %+d | %.2f |\n", n, b, w, w - b, w / b }'
done
echo
if [[ -x ci/bench_compute.sh ]]; then
  ci/bench_compute.sh
fi
