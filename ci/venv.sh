#!/usr/bin/env bash
# Create (idempotently) the Python venv of one CUDA major version that the real-client tests use,
# and print its interpreter's path on stdout (the only thing printed on stdout).
#
#   ci/venv.sh [12|13]     (default 12)
#
#   target/venv-12  cuda-bindings 12.9.x (NVIDIA's driver-API bindings, `from cuda.bindings
#                   import driver`) and nvidia-ml-py 12.x (`import pynvml`)
#   target/venv-13  cuda-bindings 13.x and nvidia-ml-py 13.x
#   both also get prometheus-client (`prometheus_client.parser`: the independent exposition parser
#   of the agent tests)
#
# Safe to run concurrently (tests of several binaries call it): an flock serialises the install.
# Environment: VGPU_VENV (default <repo>/target/venv-<major>), VGPU_CUDA_BINDINGS_SPEC (default
# "cuda-bindings==12.9.*" / "cuda-bindings==13.*"), VGPU_NVML_SPEC (default "nvidia-ml-py<13" /
# "nvidia-ml-py==13.*"), VGPU_PROM_SPEC (default "prometheus-client").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MAJOR=${1:-12}
case "$MAJOR" in
    12)
        CB_DEFAULT='cuda-bindings==12.9.*'
        NVML_DEFAULT='nvidia-ml-py<13'
        ;;
    13)
        CB_DEFAULT='cuda-bindings==13.*'
        NVML_DEFAULT='nvidia-ml-py==13.*'
        ;;
    *)
        printf '[venv] unknown CUDA major %s (12 or 13)\n' "$MAJOR" >&2
        exit 2
        ;;
esac
VENV=${VGPU_VENV:-$ROOT/target/venv-$MAJOR}
CB_SPEC=${VGPU_CUDA_BINDINGS_SPEC:-$CB_DEFAULT}
NVML_SPEC=${VGPU_NVML_SPEC:-$NVML_DEFAULT}
PROM_SPEC=${VGPU_PROM_SPEC:-prometheus-client}
PY=$VENV/bin/python

log() { printf '[venv-%s] %s\n' "$MAJOR" "$*" >&2; }

# Import check run without any preload or simulated driver in the way.
probe() {
    [ -x "$PY" ] || return 1
    env -u LD_PRELOAD VGPU_MAJOR="$MAJOR" "$PY" - <<'EOF' >/dev/null 2>&1
import importlib.metadata as md
import os
from cuda.bindings import driver  # noqa: F401
import pynvml  # noqa: F401
from prometheus_client.parser import text_string_to_metric_families  # noqa: F401
v = md.version("cuda-bindings")
assert v.startswith(os.environ["VGPU_MAJOR"] + "."), v
EOF
}

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

if ! probe; then
    if [ ! -x "$PY" ]; then
        log "python3 -m venv $VENV"
        env -u LD_PRELOAD python3 -m venv "$VENV" >&2 || {
            log "python3 -m venv failed (Debian: apt-get install python3-venv)"
            exit 1
        }
    fi
    log "pip install '$CB_SPEC' '$NVML_SPEC' '$PROM_SPEC'"
    env -u LD_PRELOAD "$PY" -m pip install -q --disable-pip-version-check "$CB_SPEC" "$NVML_SPEC" "$PROM_SPEC" >&2
    if ! probe; then
        log "the venv at $VENV cannot import cuda.bindings.driver / pynvml / prometheus_client (cuda-bindings $MAJOR.x) after install"
        exit 1
    fi
fi
log "$(env -u LD_PRELOAD "$PY" -c 'import importlib.metadata as m; print("cuda-bindings", m.version("cuda-bindings"), "nvidia-ml-py", m.version("nvidia-ml-py"))')"
printf '%s\n' "$PY"
