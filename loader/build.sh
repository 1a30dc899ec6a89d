#!/usr/bin/env bash
# Build the two-stage libvgpu.so (docs/design.md "Exec cost"): the first stage (stage1.c plus the
# table and trampolines that stage1gen.py generates from ENGINE's exports) with the engine carried
# in its non-loaded section `.vgpu_engine`.
#
#   loader/build.sh ENGINE_SO OUT_SO [CC...]
#
# ENGINE_SO: the shim built with `--features engine`, for x86_64 or aarch64 (the generator reads
# the architecture from it). CC: a C compiler for that architecture (default cc; ci/release.sh
# passes zig cc for the glibc 2.17 floor). Needs python3.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 ENGINE_SO OUT_SO [CC...]" >&2; exit 2; }
ENGINE=$1
OUT=$2
shift 2
[ $# -gt 0 ] || set -- cc
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GEN=$(mktemp -d)
trap 'rm -rf "$GEN"' EXIT

python3 "$HERE/stage1gen.py" gen "$ENGINE" "$GEN"
"$@" -O2 -g0 -fPIC -shared -fvisibility=hidden -fno-stack-protector -fno-sanitize=all \
    -fno-asynchronous-unwind-tables -Wall -Wextra -Wno-unused-result \
    -I"$GEN" -o "$GEN/stage1.so" "$HERE/stage1.c" "$GEN/tramp.S" \
    -Wl,-soname,libvgpu.so -Wl,-z,defs -Wl,-z,now -Wl,-z,relro -Wl,--hash-style=gnu -Wl,--build-id=none -Wl,--strip-all \
    -Wl,-z,noexecstack
mkdir -p "$(dirname "$OUT")"
python3 "$HERE/stage1gen.py" embed "$GEN/stage1.so" "$ENGINE" "$OUT"
