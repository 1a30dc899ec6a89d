#!/usr/bin/env bash
# Create (idempotently) the Python venv the real-client tests use and print its
# interpreter's path on stdout (the only thing printed on stdout).
#
#   target/venv  with  cuda-bindings 12.9.x (NVIDIA's driver-API bindings, `from cuda.bindings
#                       import driver`), nvidia-ml-py (`import pynvml`) and prometheus-client
#                       (`prometheus_client.parser`: the independent exposition parser of the agent tests)
#
# Safe to run concurrently (tests of several binaries call it): an flock serialises the install.
# Environment: VGPU_VENV (default <repo>/target/venv), VGPU_CUDA_BINDINGS_SPEC (default
# "cuda-bindings==12.9.*"), VGPU_NVML_SPEC (default "nvidia-ml-py"), VGPU_PROM_SPEC (default
# "prometheus-client").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VGPU_VENV:-$ROOT/target/venv}
CB_SPEC=${VGPU_CUDA_BINDINGS_SPEC:-cuda-bindings==12.9.*}
NVML_SPEC=${VGPU_NVML_SPEC:-nvidia-ml-py}
PROM_SPEC=${VGPU_PROM_SPEC:-prometheus-client}
PY=$VENV/bin/python

log() { printf '[venv] %s\n' "$*" >&2; }

# Import check run without any preload or simulated driver in the way.
probe() {
    [ -x "$PY" ] || return 1
    env -u LD_PRELOAD "$PY" - <<'EOF' >/dev/null 2>&1
import importlib.metadata as md
from cuda.bindings import driver  # noqa: F401
import pynvml  # noqa: F401
from prometheus_client.parser import text_string_to_metric_families  # noqa: F401
v = md.version("cuda-bindings")
assert v.startswith("12."), v
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
        log "the venv at $VENV cannot import cuda.bindings.driver / pynvml / prometheus_client after install"
        exit 1
    fi
fi
log "$(env -u LD_PRELOAD "$PY" -c 'import importlib.metadata as m; print("cuda-bindings", m.version("cuda-bindings"), "nvidia-ml-py", m.version("nvidia-ml-py"))')"
printf '%s\n' "$PY"
