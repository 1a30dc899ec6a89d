# shellcheck shell=bash disable=SC2034
# Sourced by ci/demo.sh and ci/bench.sh: build the release shim and the simulated GPU, expose the
# simulated driver under its sonames, and point the simulator at a scratch state file.
# Sets: out (target/release), work (scratch dir, removed at exit), shim, LD_LIBRARY_PATH,
# VGPU_SIM_STATE.
cargo build --release -q -p libvgpu -p vgpu-sim-cuda -p vgpu-sim-nvml -p vgpu-simctl
out=target/release
mkdir -p "$out/simlib"
ln -sf ../libcuda.so "$out/simlib/libcuda.so.1"
ln -sf ../libnvidia_ml.so "$out/simlib/libnvidia-ml.so.1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shim="$PWD/$out/libvgpu.so"
export LD_LIBRARY_PATH="$PWD/$out/simlib" VGPU_SIM_STATE="$work/sim.state"
