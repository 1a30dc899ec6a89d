#!/usr/bin/env bash
# Hand-run smoke test of the simulated GPU: builds the sim, links libcuda.so.1 / libnvidia-ml.so.1,
# runs sim/smoke/smoke.c against them with an isolated state file, checks the exported symbols.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/sim}
profile=${SIM_PROFILE:-debug}   # SIM_PROFILE=release to check the optimised build
if [ "$profile" = release ]; then rel=--release; else rel=; fi
cargo build -q $rel -p vgpu-sim-cuda -p vgpu-sim-nvml -p vgpu-simctl
out=$CARGO_TARGET_DIR/$profile
lib=$CARGO_TARGET_DIR/simlib
mkdir -p "$lib"
ln -sf "$out/libcuda.so" "$lib/libcuda.so.1"
ln -sf "$out/libnvidia_ml.so" "$lib/libnvidia-ml.so.1"
cc -O1 -Wall -o "$lib/smoke" "$root/sim/smoke/smoke.c" -ldl
for so in "$out/libcuda.so" "$out/libnvidia_ml.so"; do
    bad=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -Ev '^(cu|nvml)' || true)
    [ -z "$bad" ] || { echo "unexpected exports in $so: $bad"; exit 1; }
done
echo "exports: libcuda $(nm -D --defined-only "$out/libcuda.so" | wc -l), libnvidia-ml $(nm -D --defined-only "$out/libnvidia_ml.so" | wc -l)"
state=$(mktemp -u /tmp/vgpu-sim-smoke.XXXXXX)
counts=$(mktemp /tmp/vgpu-sim-counts.XXXXXX)
trap 'rm -f "$state" "$counts"' EXIT
VGPU_SIM_STATE=$state VGPU_SIM_COUNT_FILE=$counts LD_LIBRARY_PATH=$lib "$lib/smoke"
grep -q " cuLaunchKernel " "$counts" && grep -q " cuGetProcAddress_v2 " "$counts" || { echo "count file incomplete"; cat "$counts"; exit 1; }
VGPU_SIM_STATE=$state "$out/simctl" devices
# CUDA_VISIBLE_DEVICES on a 2-device node: `smoke visible <physical device of each CUDA ordinal>`.
state2=$(mktemp -u /tmp/vgpu-sim-smoke2.XXXXXX)
trap 'rm -f "$state" "$state2" "$counts"' EXIT
for cvd in "1,0:1,0" "1:1" "0,1:0,1" "GPU-00000000-0000-4000-8000-000000000001,bogus,0:1" "GPU-00000000:" "0,0:0" ":"; do
    VGPU_SIM_STATE=$state2 VGPU_SIM_DEVICES=2 CUDA_VISIBLE_DEVICES=${cvd%%:*} LD_LIBRARY_PATH=$lib "$lib/smoke" visible "${cvd#*:}"
done
echo "smoke OK"
