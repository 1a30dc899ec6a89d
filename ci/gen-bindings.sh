#!/usr/bin/env bash
# Regenerate crates/cuda-types/src/generated.rs from include/vgpu_cuda.h + include/vgpu_nvml.h.
#
#   ci/gen-bindings.sh           regenerate in place (commit the result)
#   ci/gen-bindings.sh --check   regenerate into a temp file, fail if it differs from the committed one
#
# Needs libclang (Debian 12: `apt-get install -y libclang1-14 libclang-common-14-dev`, or
# libclang-dev). Normal builds never need it: the bindings are committed and bindgen is an optional
# build-dependency behind the `regen-bindings` feature of cuda-types.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/gen-bindings}"
committed=crates/cuda-types/src/generated.rs

if [[ "${1:-}" == "--check" ]]; then
    tmp="$(mktemp --suffix=.rs)"
    trap 'rm -f "$tmp"' EXIT
    VGPU_BINDINGS_OUT="$tmp" cargo build -q -p cuda-types --features regen-bindings
    if ! diff -u "$committed" "$tmp"; then
        echo "gen-bindings: $committed is stale; run ci/gen-bindings.sh" >&2
        exit 1
    fi
    echo "gen-bindings: $committed is up to date"
else
    # Touch a header so build.rs reruns even when cargo thinks nothing changed.
    touch include/vgpu_cuda.h
    cargo build -q -p cuda-types --features regen-bindings
    echo "gen-bindings: wrote $committed"
fi
