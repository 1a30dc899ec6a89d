#!/bin/sh
# The inside of tests/injection.rs: run as the init (pid 1) of fresh mount + PID
# namespaces by `unshare -m -p -f --mount-proc`, with the environment HAMi's device plugin gives a
# container (its /proc/1/environ is therefore the container's, as in a pod). It reproduces the
# device plugin's mounts (docs/hami-contract.md §2.1) without touching the host, then runs a shell,
# coreutils, python and CUDA clients under /etc/ld.so.preload.
#
# Inputs (environment): INJ_POD_DIR (host <H>/vgpu/containers/<podUID>_<ctr>), INJ_SHIM (host
# <H>/vgpu/libvgpu.so), INJ_PRELOAD_FILE (host <H>/vgpu/ld.so.preload), INJ_LOCKDIR (host
# /tmp/vgpulock), INJ_WORK (scratch dir), INJ_OUT (results), INJ_SIMLIB, INJ_PY, INJ_PYDIR,
# INJ_CLIENT, INJ_READY/INJ_GO (handshake with the test while a client holds memory),
# INJ_PIDNS (1 if this is a PID namespace).
# Output: $INJ_OUT/<step>.{out,err,rc} per step, and `step=<name> rc=<rc>` lines on stdout.
set -eu

log() { echo "[injection] $*"; }

# run NAME CMD...: run a step, record its output and exit status (never aborts the script).
run() {
    name=$1
    shift
    rc=0
    "$@" >"$INJ_OUT/$name.out" 2>"$INJ_OUT/$name.err" || rc=$?
    echo "$rc" >"$INJ_OUT/$name.rc"
    echo "step=$name rc=$rc"
}

log "pid $$, pidns=$INJ_PIDNS"

# --- 1. a mount point for /usr/local/vgpu without creating it on the host -----------------------
# shellcheck source=tests/py/ns_mounts.sh
. "$(dirname "$0")/ns_mounts.sh"
usr_local_vgpu "$INJ_WORK/usr-local"

# --- 2. the device plugin's mounts (docs/hami-contract.md §2.1), parents first -------------------------
# <H>/vgpu  <-  <H>/vgpu/containers/<podUID>_<ctr>   (rw)
mount --bind "$INJ_POD_DIR" /usr/local/vgpu
# <H>/vgpu/libvgpu.so  <-  the library (ro); the file mount point lands in the host directory,
# as the container runtime creates it (an empty placeholder named libvgpu.so).
[ -e /usr/local/vgpu/libvgpu.so ] || : >/usr/local/vgpu/libvgpu.so
mount --bind "$INJ_SHIM" /usr/local/vgpu/libvgpu.so
mount -o remount,bind,ro /usr/local/vgpu/libvgpu.so
# /tmp/vgpulock  <-  /tmp/vgpulock (a private /tmp first, so the host's is untouched; the test's
# own files stay reachable when the checkout lies under /tmp)
private_tmp mode=1777 "$INJ_WORK" "$INJ_OUT" "$INJ_POD_DIR" "$INJ_SHIM" "$INJ_PRELOAD_FILE" "$INJ_LOCKDIR" \
    "$INJ_SIMLIB" "$INJ_PY" "$INJ_PYDIR" "$INJ_CLIENT" "$INJ_READY" "$INJ_GO"
mkdir -p /tmp/vgpulock
mount --bind "$INJ_LOCKDIR" /tmp/vgpulock
# /etc/ld.so.preload  <-  <H>/vgpu/ld.so.preload (ro), on a private copy of /etc
mkdir -p "$INJ_WORK/etc"
cp -a /etc/. "$INJ_WORK/etc/"
[ -e "$INJ_WORK/etc/ld.so.preload" ] || : >"$INJ_WORK/etc/ld.so.preload"
mount --bind "$INJ_WORK/etc" /etc
mount --bind "$INJ_PRELOAD_FILE" /etc/ld.so.preload
mount -o remount,bind,ro /etc/ld.so.preload
log "mounts done; /etc/ld.so.preload: $(cat /etc/ld.so.preload)"

# --- 3. every process from here on is started with the shim preloaded ----------------------------
run shell sh -c 'echo shell=ok; echo pid_in_ns=$$'
run ls ls -A /usr/local/vgpu
run cat_maps cat /proc/self/maps
run cat_preload cat /etc/ld.so.preload
run python3 python3 -c 'import os; m = open("/proc/self/maps").read(); print("python=ok"); print("shim_mapped=%d" % ("/usr/local/vgpu/libvgpu.so" in m)); print("cuda_mapped=%d" % ("libcuda" in m))'
# Nothing above touched CUDA: no region file yet (lazy initialisation, docs/hami-contract.md §7.4).
run ls_before_cuda ls -A /usr/local/vgpu

# A CUDA client (NVIDIA's Python bindings) and a C client: limited by CUDA_DEVICE_MEMORY_LIMIT_0.
run py_client env LD_LIBRARY_PATH="$INJ_SIMLIB" PYTHONDONTWRITEBYTECODE=1 \
    "$INJ_PY" "$INJ_PYDIR/cuda_client.py" steps info alloc:1100 alloc:600 free_all
# The C client holds 300 MiB while the test reads the region from the host side.
run c_hold env LD_LIBRARY_PATH="$INJ_SIMLIB" "$INJ_CLIENT" info alloc:1100 alloc:300 pid \
    "touch:$INJ_READY" "wait:$INJ_GO" free_all
# A shell entered with an empty environment (SSH/sudo/supervisors): only the simulated driver's
# location, state and PID offset are passed; the limit must come from /proc/1/environ.
run envi_client env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$INJ_SIMLIB" VGPU_SIM_STATE="$VGPU_SIM_STATE" \
    VGPU_SIM_PID_OFFSET="$VGPU_SIM_PID_OFFSET" \
    sh -c "exec '$INJ_CLIENT' info alloc:1100 alloc:300 free_all"
run envi_env env -i sh -c 'env'
run ls_after ls -A /usr/local/vgpu
log "done"
