#!/usr/bin/env bash
# The whole test suite (the README's test command). Installs what it needs itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
ci/deps.sh
# Python venvs with NVIDIA's cuda-bindings and pynvml, one per CUDA major (12.9 and 13.x; the
# real-client tests run with both). The 12 venv's interpreter (which has pip, unlike a bare Debian
# python3) also fetches NVIDIA's headers for the ABI conformance test.
VGPU_PYTHON="$(ci/venv.sh 12)"
export VGPU_PYTHON
ci/venv.sh 13 >/dev/null
# The committed cuGetProcAddress threshold table matches NVIDIA's 12.9 and 13.x headers.
"$VGPU_PYTHON" ci/gen-pfn-table.py --check
# Formatting and lint gate (rustfmt.toml; the format-only commit is in .git-blame-ignore-revs).
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
ci/check-docs.sh                 # product text: no development history, every quoted figure in docs/benchmarks.md
ci/check-modgraph.py             # no import circle between modules (a parent with its own children excepted)
cargo build --workspace --all-targets
ci/release.sh                    # release artifacts (x86_64, aarch64) at the glibc floor, checked
cargo test --workspace --no-fail-fast -- --test-threads=2
# Every integration test again with the artifact we ship (two-stage, glibc 2.17) as the shim.
VGPU_TEST_SHIM=target/release-floor/libvgpu.so cargo test -p libvgpu --tests --no-fail-fast -- --test-threads=2
ci/oldglibc.sh                   # the shipped artifact in a Debian bullseye root (glibc 2.31, cached)
ci/aarch64.sh test               # aarch64: unit + integration tests under qemu (cached Debian forky root)
ci/gpu-validate.sh --dry-run     # the GPU validation flow, on the simulated GPU
shellcheck ci/*.sh loader/*.sh .ci/run
echo "ci/test.sh: all checks passed"
