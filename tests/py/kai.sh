#!/bin/sh
# The inside of tests/kai.rs: run as the init of fresh mount + PID namespaces (`unshare -m -p -f
# --mount-proc`). Reproduces the KAI Scheduler's layout (docs/deploy.md §8: `${CONTAINER_VGPU_MOUNT:-
# /usr/local/vgpu}/containers/` mode 1777, no CUDA_DEVICE_MEMORY_SHARED_CACHE, POD_UID and
# CONTAINER_NAME set, only CUDA_DEVICE_MEMORY_LIMIT) and HAMi's at a non-default hook path, without
# touching the host, then runs clients as root and as UID 1000.
#
# Inputs: KAI_HOST (host dir mounted on /usr/local/vgpu; has containers/ 1777), HAMI_POD (host dir
# mounted as the container's cache dir at /opt/hv/vgpu), K_SHIM, K_SIMLIB, K_CLIENT, K_SMI, K_WORK,
# K_OUT, K_STATE_ROOT, K_STATE_USER (sim state files; the second writable by UID 1000).
# Output: $K_OUT/<step>.{out,err,rc}.
set -eu

run() {
    name=$1
    shift
    rc=0
    "$@" >"$K_OUT/$name.out" 2>"$K_OUT/$name.err" || rc=$?
    echo "$rc" >"$K_OUT/$name.rc"
    echo "step=$name rc=$rc"
}
user() { setpriv --reuid 1000 --regid 1000 --clear-groups "$@"; }

# A mount point for /usr/local/vgpu without creating it on the host.
# shellcheck source=tests/py/ns_mounts.sh
. "$(dirname "$0")/ns_mounts.sh"
usr_local_vgpu "$K_WORK/usr-local"
mount --bind "$KAI_HOST" /usr/local/vgpu
# A private /tmp: no /tmp/cudevshr.cache of the host can answer for us (the test's own files stay
# reachable when the checkout lies under /tmp).
private_tmp mode=1777 "$K_WORK" "$K_OUT" "$K_SHIM" "$K_SIMLIB" "$K_CLIENT" "$K_SMI" "$K_STATE_ROOT" "$K_STATE_USER"

CL="$K_CLIENT info alloc:1100 alloc:300 free_all"
KAI_ENV="CUDA_DEVICE_MEMORY_LIMIT=1024m LD_PRELOAD=$K_SHIM LD_LIBRARY_PATH=$K_SIMLIB"

# 1. KAI as root: the library creates containers/pod-1_root-ctr/usage.cache.
run kai_root env -u CUDA_DEVICE_MEMORY_SHARED_CACHE POD_UID=pod-1 CONTAINER_NAME=root-ctr $KAI_ENV \
    VGPU_SIM_STATE="$K_STATE_ROOT" $CL
# vgpu-smi finds it the same way.
run smi_kai env POD_UID=pod-1 CONTAINER_NAME=root-ctr CUDA_DEVICE_MEMORY_LIMIT=1024m "$K_SMI" --json
# 2. A non-root `env -i` shell (no POD_UID, /proc/1/environ unreadable): discovery finds the one
#    KAI region under /usr/local/vgpu/containers.
run envi_kai_user user env -i PATH=/usr/bin:/bin LD_PRELOAD="$K_SHIM" LD_LIBRARY_PATH="$K_SIMLIB" \
    VGPU_SIM_STATE="$K_STATE_USER" $CL
run envi_environ_user user cat /proc/1/environ
# 3. KAI as UID 1000, another container: mkdir of the per-container directory by a non-root user.
run kai_user user env POD_UID=pod-1 CONTAINER_NAME=user-ctr $KAI_ENV VGPU_SIM_STATE="$K_STATE_USER" $CL
# 4. HAMi at a non-default hook path (/opt/hv): the region lives in the cache directory the plugin
#    mounts at <H>/vgpu, the library beside it, /etc/ld.so.preload names it.
mount -t tmpfs -o mode=0755 tmpfs /opt
mkdir -p /opt/hv/vgpu
mount --bind "$HAMI_POD" /opt/hv/vgpu
: >/opt/hv/vgpu/libvgpu.so
mount --bind "$K_SHIM" /opt/hv/vgpu/libvgpu.so
mkdir -p "$K_WORK/etc"
cp -a /etc/. "$K_WORK/etc/"
echo /opt/hv/vgpu/libvgpu.so >"$K_WORK/etc/ld.so.preload"
mount --bind "$K_WORK/etc" /etc
# The container's first process (with the plugin's env) creates the region.
run hami_root env CUDA_DEVICE_MEMORY_SHARED_CACHE=/opt/hv/vgpu/0c1d.cache CUDA_DEVICE_MEMORY_LIMIT_0=1024m \
    LD_LIBRARY_PATH="$K_SIMLIB" VGPU_SIM_STATE="$K_STATE_ROOT" $K_CLIENT info
# Non-root, env -i, region outside /usr/local/vgpu: found via ld.so.preload's dir.
run envi_hami_user user env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$K_SIMLIB" VGPU_SIM_STATE="$K_STATE_USER" $CL
run smi_envi_user user env -i "$K_SMI" --json
echo done
