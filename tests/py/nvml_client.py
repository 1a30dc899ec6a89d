"""pynvml (nvidia-ml-py) as a real client of the shim.

    python nvml_client.py [--alloc MiB] [--hold READY GO]

With --alloc, the process first allocates MiB on device 0 through cuda-bindings (so the container
has usage of its own). With --hold it then touches READY and waits for GO before exiting (used to
query NVML from a second process while this one holds memory). Prints `key=value` lines:

  device_count, driver_version, d<i>.name, d<i>.uuid,
  d<i>.v1.{total,free,used}, d<i>.v2.{total,free,used,reserved},
  d<i>.procs (pid:usedGpuMemory,...), d<i>.self_listed, d<i>.self_used,
  region.device_num, region.uuid<i> (the shim's region after nvmlInit)
"""

import argparse
import os
import sys
import time

import pynvml

import vgpu_region

MIB = 1 << 20


def kv(k, v):
    print(f"{k}={v}", flush=True)


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alloc", type=int, default=0)
    ap.add_argument("--hold", nargs=2, metavar=("READY", "GO"))
    ap.add_argument("--no-query", action="store_true", help="only allocate/hold")
    a = ap.parse_args()

    kv("pid", os.getpid())
    if a.alloc:
        from cuda.bindings import driver as cu

        assert cu.cuInit(0)[0] == cu.CUresult.CUDA_SUCCESS
        err, dev = cu.cuDeviceGet(0)
        err, pctx = cu.cuDevicePrimaryCtxRetain(dev)
        cu.cuCtxSetCurrent(pctx)
        err, _ = cu.cuMemAlloc(a.alloc * MIB)
        kv("alloc", err.name)

    if not a.no_query:
        pynvml.nvmlInit()
        kv("driver_version", s(pynvml.nvmlSystemGetDriverVersion()))
        kv("cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion())
        n = pynvml.nvmlDeviceGetCount()
        kv("device_count", n)
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            kv(f"d{i}.name", s(pynvml.nvmlDeviceGetName(h)))
            kv(f"d{i}.uuid", s(pynvml.nvmlDeviceGetUUID(h)))
            m = pynvml.nvmlDeviceGetMemoryInfo(h)
            kv(f"d{i}.v1.total", m.total)
            kv(f"d{i}.v1.free", m.free)
            kv(f"d{i}.v1.used", m.used)
            try:
                m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                kv(f"d{i}.v2.total", m2.total)
                kv(f"d{i}.v2.free", m2.free)
                kv(f"d{i}.v2.used", m2.used)
                kv(f"d{i}.v2.reserved", m2.reserved)
            except pynvml.NVMLError as e:
                kv(f"d{i}.v2.error", str(e))
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                kv(f"d{i}.procs", ",".join(f"{p.pid}:{p.usedGpuMemory}" for p in procs))
                mine = [p for p in procs if p.pid == os.getpid()]
                kv(f"d{i}.self_listed", int(bool(mine)))
                kv(f"d{i}.self_used", mine[0].usedGpuMemory if mine else 0)
            except pynvml.NVMLError as e:
                kv(f"d{i}.procs_error", str(e))
        path = os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE")
        if path and os.path.exists(path):
            try:
                r = vgpu_region.read(path)
                kv("region.device_num", r["device_num"])
                for i in range(n):
                    kv(f"region.uuid{i}", r["uuids"][i])
            except ValueError as e:
                kv("region.error", str(e))
        else:
            kv("region.error", "missing")
        pynvml.nvmlShutdown()

    if a.hold:
        open(a.hold[0], "a").close()
        end = time.monotonic() + 60
        while not os.path.exists(a.hold[1]):
            if time.monotonic() > end:
                sys.exit(3)
            time.sleep(0.01)
    kv("done", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
