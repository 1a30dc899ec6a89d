#!/usr/bin/env bash
# The main job: build libvgpu and the simulated GPU, then run a CUDA client under the shim with a
# 1 GiB memory limit and a 30 % SM limit, and print what the client sees (and the same client
# without the shim, for comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/simgpu.sh
. ci/simgpu.sh
mkdir -p "$out/demo"
cc -O2 -o "$out/demo/demo_client" ci/demo/demo_client.c -ldl
export VGPU_SIM_MEM_MIB=16384

echo "== without libvgpu (simulated 16 GiB GPU) =="
"$out/demo/demo_client"
echo
echo "== with libvgpu: CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_SM_LIMIT=30 GPU_CORE_UTILIZATION_POLICY=force =="
LD_PRELOAD="$shim" CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_SM_LIMIT=30 \
  GPU_CORE_UTILIZATION_POLICY=force CUDA_DEVICE_MEMORY_SHARED_CACHE="$work/vgpu.cache" \
  "$out/demo/demo_client"
echo
echo "region file written for the monitor: $(stat -c %s "$work/vgpu.cache") bytes"
