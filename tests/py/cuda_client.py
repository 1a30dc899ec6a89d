"""NVIDIA's Python driver bindings (cuda-bindings 12.9 or 13.x) as a real client of the shim.

    python cuda_client.py SCENARIO [ARGS]

Prints `key=value` lines (CUresult values by name, e.g. CUDA_ERROR_OUT_OF_MEMORY); the Rust test
(tests/real_clients.rs) asserts on them. Scenarios:

  init            cuInit, driver version, device, primary context + cuCtxCreate, cuMemGetInfo in
                  both, cuDeviceTotalMem
  fill [MiB]      allocate exactly what cuMemGetInfo reports free (chunks of MiB, default 64, plus
                  the remainder), then one more 2 MiB (expected: OUT_OF_MEMORY), free, re-allocate
  async_managed   cuMemAllocAsync / cuMemAllocManaged: deltas in this process's region slot
                  (`used[0].total`, read with vgpu_region.py) and in cuMemGetInfo, and refusals
  module          cuModuleLoadData (bytes), cuModuleGetFunction, cuLaunchKernel, copies
  library         the runtime's kernel path: cuLibraryLoadData, cuLibraryGetKernel,
                  cuKernelGetFunction, cuLibraryGetGlobal, cuLaunchKernel; managed memory advised
                  and prefetched (13.x: the location-based ABIs)
  graph_node [MiB] a graph built with cuGraphAddNode (12.2+; the bindings pick the newest ABI the
                  driver has): a memory-allocation node, a kernel node after it; instantiated,
                  launched; cuMemGetInfo before and after
  graph_limit MiB ADD INST
                  a graph of one memory-allocation node of MiB, added with ADD (`node`:
                  cuGraphAddNode, `alloc`: cuGraphAddMemAllocNode, `child`: in a child graph
                  moved into the graph with cuGraphAddNode), instantiated with INST (`flags`:
                  cuGraphInstantiate, `params`: cuGraphInstantiateWithParams), launched (its result
                  printed, not fatal); cuMemGetInfo and the region slot before and after
  pool            cuMemPoolCreate (device location) + cuMemAllocFromPoolAsync: counted, refused
                  beyond the limit, uncounted when freed and the pool destroyed
  steps STEP...   the step language of limit_client.c (info, alloc:<MiB>, alloc:free,
                  managed:<MiB>, free_all, launch:<n>, pid, touch:<p>, wait:<p>, sleep:<ms>)

The region file is CUDA_DEVICE_MEMORY_SHARED_CACHE. The same script runs with both majors of the
bindings; where their Python signatures differ (cuCtxCreate, cuMemPrefetchAsync, cuMemAdvise) it
calls each in its own form.
"""

import importlib.metadata
import os
import sys
import time

from cuda.bindings import driver as cu

import vgpu_region

MIB = 1 << 20
MAJOR = int(importlib.metadata.version("cuda-bindings").split(".")[0])
IMAGE = b"vgpu-sim-module\nkernel vgpu_test_kernel\n"
KERNEL = b"vgpu_test_kernel"


def kv(k, v):
    print(f"{k}={v}", flush=True)


def name(err):
    return err.name if hasattr(err, "name") else str(err)


def ok(key, res):
    """Print a call's CUresult; exit 1 on failure (an unexpected error). Returns the values."""
    err, rest = res[0], res[1:]
    kv(key, name(err))
    if err != cu.CUresult.CUDA_SUCCESS:
        print(f"unexpected error in {key}: {name(err)}", file=sys.stderr)
        sys.exit(1)
    return rest[0] if len(rest) == 1 else rest


def region_used():
    path = os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/cudevshr.cache")
    try:
        return vgpu_region.used_total(path, os.getpid(), 0)
    except (OSError, ValueError) as e:
        print(f"region unreadable: {e}", file=sys.stderr)
        return None


def meminfo():
    err, free, total = cu.cuMemGetInfo()
    if err != cu.CUresult.CUDA_SUCCESS:
        print(f"cuMemGetInfo: {name(err)}", file=sys.stderr)
        return None, None
    return free, total


def setup():
    ok("init", cu.cuInit(0))
    dev = ok("device_get", cu.cuDeviceGet(0))
    pctx = ok("primary_ctx_retain", cu.cuDevicePrimaryCtxRetain(dev))
    ok("ctx_set_current", cu.cuCtxSetCurrent(pctx))
    kv("pid", os.getpid())
    return dev, pctx


def diff(a, b):
    return "none" if a is None or b is None else a - b


def scenario_init():
    ok("init", cu.cuInit(0))
    kv("driver_version", ok("driver_version_call", cu.cuDriverGetVersion()))
    kv("device_count", ok("device_count_call", cu.cuDeviceGetCount()))
    dev = ok("device_get", cu.cuDeviceGet(0))
    raw = ok("device_name_call", cu.cuDeviceGetName(256, dev))
    kv("device_name", raw.split(b"\0", 1)[0].decode())
    kv("device_total_mem", ok("device_total_mem_call", cu.cuDeviceTotalMem(dev)))
    pctx = ok("primary_ctx_retain", cu.cuDevicePrimaryCtxRetain(dev))
    ok("ctx_set_current", cu.cuCtxSetCurrent(pctx))
    free, total = ok("primary.mem_get_info", cu.cuMemGetInfo())
    kv("primary.free", free)
    kv("primary.total", total)
    cur = ok("ctx_get_current", cu.cuCtxGetCurrent())
    kv("primary_is_current", int(int(cur) == int(pctx)))
    if MAJOR >= 13:
        ctx = ok("ctx_create", cu.cuCtxCreate(None, 0, dev))
    else:
        ctx = ok("ctx_create", cu.cuCtxCreate(0, dev))
    kv("created_device", int(ok("ctx_get_device", cu.cuCtxGetDevice())))
    if MAJOR >= 13:
        # The 13.0 ABIs that take a context, asked about the primary one while the created one
        # is current.
        kv("primary_device_v2", int(ok("ctx_get_device_v2", cu.cuCtxGetDevice_v2(pctx))))
        ok("ctx_synchronize_v2", cu.cuCtxSynchronize_v2(pctx))
    free, total = ok("created.mem_get_info", cu.cuMemGetInfo())
    kv("created.free", free)
    kv("created.total", total)
    p = ok("created.alloc", cu.cuMemAlloc(64 * MIB))
    ok("created.free_call", cu.cuMemFree(p))
    ok("ctx_destroy", cu.cuCtxDestroy(ctx))
    ok("ctx_set_current_again", cu.cuCtxSetCurrent(pctx))
    ok("primary_ctx_release", cu.cuDevicePrimaryCtxRelease(dev))
    kv("done", 1)


def scenario_fill(chunk_mib=64):
    setup()
    chunk = chunk_mib * MIB
    free0, total = meminfo()
    kv("free0", free0)
    kv("total", total)
    kv("region_used0", region_used())
    # One allocation larger than what is free must be refused outright.
    err, p = cu.cuMemAlloc(free0 + 2 * MIB)
    kv("big_alloc", name(err))
    if err == cu.CUresult.CUDA_SUCCESS:
        cu.cuMemFree(p)
    held = []
    n = free0 // chunk
    first_fail = None
    for i in range(n):
        err, p = cu.cuMemAlloc(chunk)
        if err != cu.CUresult.CUDA_SUCCESS:
            first_fail = (i, name(err))
            break
        held.append(p)
    kv("chunks_wanted", n)
    kv("chunks_ok", len(held))
    kv("chunk_fail", "none" if first_fail is None else f"{first_fail[0]}:{first_fail[1]}")
    rem = free0 - n * chunk
    kv("remainder", rem)
    rem_res = "skipped"
    if rem > 0 and first_fail is None:
        err, p = cu.cuMemAlloc(rem)
        rem_res = name(err)
        if err == cu.CUresult.CUDA_SUCCESS:
            held.append(p)
    kv("remainder_alloc", rem_res)
    filled = first_fail is None and rem_res in ("skipped", "CUDA_SUCCESS")
    kv("filled_to_limit", int(filled))
    free_full, _ = meminfo()
    kv("free_full", free_full)
    kv("region_used_full", region_used())
    err, p = cu.cuMemAlloc(2 * MIB)
    kv("next_alloc", name(err))
    if err == cu.CUresult.CUDA_SUCCESS:
        cu.cuMemFree(p)
    # Freeing one chunk makes exactly that room again.
    if held:
        kv("free_one", name(cu.cuMemFree(held.pop(0))[0]))
        err, p = cu.cuMemAlloc(min(chunk, free0))
        kv("realloc", name(err))
        if err == cu.CUresult.CUDA_SUCCESS:
            held.append(p)
    errs = [cu.cuMemFree(p)[0] for p in held]
    bad = [name(e) for e in errs if e != cu.CUresult.CUDA_SUCCESS]
    kv("free_all", "CUDA_SUCCESS" if not bad else bad[0])
    free_after, _ = meminfo()
    kv("free_after", free_after)
    kv("region_used_after", region_used())
    err, p = cu.cuMemAlloc(free0)
    kv("alloc_free0_again", name(err))
    if err == cu.CUresult.CUDA_SUCCESS:
        cu.cuMemFree(p)
    kv("done", 1)


def scenario_async_managed(async_mib=100, managed_mib=50):
    setup()
    stream = ok("stream_create", cu.cuStreamCreate(0))
    r0, (f0, _) = region_used(), meminfo()
    kv("region_used0", r0)
    kv("free0", f0)
    a = ok("async_alloc", cu.cuMemAllocAsync(async_mib * MIB, stream))
    ok("async_sync", cu.cuStreamSynchronize(stream))
    r1, (f1, _) = region_used(), meminfo()
    kv("async_region_delta", diff(r1, r0))
    kv("async_free_delta", diff(f0, f1))
    m = ok("managed_alloc", cu.cuMemAllocManaged(managed_mib * MIB, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value))
    r2, (f2, _) = region_used(), meminfo()
    kv("managed_region_delta", diff(r2, r1))
    kv("managed_free_delta", diff(f1, f2))
    ok("async_free", cu.cuMemFreeAsync(a, stream))
    ok("async_free_sync", cu.cuStreamSynchronize(stream))
    r3 = region_used()
    kv("async_region_freed", diff(r2, r3))
    ok("managed_free", cu.cuMemFree(m))
    r4, (f4, _) = region_used(), meminfo()
    kv("managed_region_freed", diff(r3, r4))
    kv("free_after", f4)
    # Both allocators are refused beyond the limit.
    err, p = cu.cuMemAllocAsync(f4 + 2 * MIB, stream)
    cu.cuStreamSynchronize(stream)
    kv("async_over", name(err))
    if err == cu.CUresult.CUDA_SUCCESS:
        cu.cuMemFreeAsync(p, stream)
        cu.cuStreamSynchronize(stream)
    err, p = cu.cuMemAllocManaged(f4 + 2 * MIB, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value)
    kv("managed_over", name(err))
    if err == cu.CUresult.CUDA_SUCCESS:
        cu.cuMemFree(p)
    ok("stream_destroy", cu.cuStreamDestroy(stream))
    kv("done", 1)


def scenario_module():
    setup()
    mod = ok("module_load", cu.cuModuleLoadData(IMAGE))
    fn = ok("get_function", cu.cuModuleGetFunction(mod, KERNEL))
    stream = ok("stream_create", cu.cuStreamCreate(0))
    results = [cu.cuLaunchKernel(fn, 4, 1, 1, 32, 1, 1, 0, stream, 0, 0)[0] for _ in range(8)]
    bad = [name(e) for e in results if e != cu.CUresult.CUDA_SUCCESS]
    kv("launch", "CUDA_SUCCESS" if not bad else bad[0])
    kv("launches", len(results))
    ok("stream_sync", cu.cuStreamSynchronize(stream))
    ok("ctx_sync", cu.cuCtxSynchronize())
    # A device round trip (the simulated device's memory is real host memory).
    data = bytes(range(256)) * 4096
    d = ok("copy_alloc", cu.cuMemAlloc(len(data)))
    ok("htod", cu.cuMemcpyHtoD(d, data, len(data)))
    back = bytearray(len(data))
    ok("dtoh", cu.cuMemcpyDtoH(back, d, len(data)))
    kv("roundtrip", int(bytes(back) == data))
    ok("copy_free", cu.cuMemFree(d))
    ok("stream_destroy", cu.cuStreamDestroy(stream))
    ok("module_unload", cu.cuModuleUnload(mod))
    kv("done", 1)


def scenario_library():
    dev, _ = setup()
    lib = ok("library_load", cu.cuLibraryLoadData(IMAGE, None, None, 0, None, None, 0))
    kern = ok("library_get_kernel", cu.cuLibraryGetKernel(lib, KERNEL))
    fn = ok("kernel_get_function", cu.cuKernelGetFunction(kern))
    gptr, gsize = ok("library_get_global", cu.cuLibraryGetGlobal(lib, b"vgpu_test_global"))
    kv("global_size", gsize)
    stream = ok("stream_create", cu.cuStreamCreate(0))
    results = [cu.cuLaunchKernel(fn, 4, 1, 1, 32, 1, 1, 0, stream, 0, 0)[0] for _ in range(6)]
    bad = [name(e) for e in results if e != cu.CUresult.CUDA_SUCCESS]
    kv("launch", "CUDA_SUCCESS" if not bad else bad[0])
    kv("launches", len(results))
    # Managed memory advised and prefetched to the device, then back to the host.
    n = 8 * MIB
    m = ok("managed_alloc", cu.cuMemAllocManaged(n, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value))
    advice = cu.CUmem_advise.CU_MEM_ADVISE_SET_PREFERRED_LOCATION
    if MAJOR >= 13:
        loc = cu.CUmemLocation()
        loc.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        loc.id = int(dev)
        ok("mem_advise", cu.cuMemAdvise(m, n, advice, loc))
        ok("prefetch_device", cu.cuMemPrefetchAsync(m, n, loc, 0, stream))
        host = cu.CUmemLocation()
        host.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
        host.id = 0
        ok("prefetch_host", cu.cuMemPrefetchAsync(m, n, host, 0, stream))
    else:
        ok("mem_advise", cu.cuMemAdvise(m, n, advice, dev))
        ok("prefetch_device", cu.cuMemPrefetchAsync(m, n, dev, stream))
        ok("prefetch_host", cu.cuMemPrefetchAsync(m, n, cu.CU_DEVICE_CPU, stream))
    ok("stream_sync", cu.cuStreamSynchronize(stream))
    ok("managed_free", cu.cuMemFree(m))
    ok("stream_destroy", cu.cuStreamDestroy(stream))
    ok("library_unload", cu.cuLibraryUnload(lib))
    kv("done", 1)


def scenario_graph_node(mib=200):
    dev, _ = setup()
    mod = ok("module_load", cu.cuModuleLoadData(IMAGE))
    fn = ok("get_function", cu.cuModuleGetFunction(mod, KERNEL))
    f0, _ = meminfo()
    g = ok("graph_create", cu.cuGraphCreate(0))
    p = cu.CUgraphNodeParams()
    p.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEM_ALLOC
    p.alloc.poolProps.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.alloc.poolProps.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    p.alloc.poolProps.location.id = int(dev)
    p.alloc.bytesize = mib * MIB
    if MAJOR >= 13:
        alloc = ok("add_alloc_node", cu.cuGraphAddNode(g, None, None, 0, p))
    else:
        alloc = ok("add_alloc_node", cu.cuGraphAddNode(g, None, 0, p))
    kv("alloc_dptr_set", int(int(p.alloc.dptr) != 0))
    k = cu.CUgraphNodeParams()
    k.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
    k.kernel.func = fn
    k.kernel.gridDimX, k.kernel.gridDimY, k.kernel.gridDimZ = 4, 1, 1
    k.kernel.blockDimX, k.kernel.blockDimY, k.kernel.blockDimZ = 32, 1, 1
    if MAJOR >= 13:
        ok("add_kernel_node", cu.cuGraphAddNode(g, [alloc], None, 1, k))
    else:
        ok("add_kernel_node", cu.cuGraphAddNode(g, [alloc], 1, k))
    kv("nodes", ok("graph_get_nodes", cu.cuGraphGetNodes(g, 0))[1])
    ex = ok("instantiate", cu.cuGraphInstantiate(g, 0))
    stream = ok("stream_create", cu.cuStreamCreate(0))
    ok("graph_launch", cu.cuGraphLaunch(ex, stream))
    ok("stream_sync", cu.cuStreamSynchronize(stream))
    f1, _ = meminfo()
    kv("graph_free_delta", diff(f0, f1))
    ok("exec_destroy", cu.cuGraphExecDestroy(ex))
    ok("graph_destroy", cu.cuGraphDestroy(g))
    ok("stream_destroy", cu.cuStreamDestroy(stream))
    kv("done", 1)


def call(key, res):
    """Print a call's CUresult without judging it. Returns (CUresult, values)."""
    kv(key, name(res[0]))
    return res[0], res[1:]


def scenario_graph_limit(mib, add, inst):
    dev, _ = setup()
    f0, _ = meminfo()
    u0 = region_used()
    g = ok("graph_create", cu.cuGraphCreate(0))
    if add == "node":
        p = cu.CUgraphNodeParams()
        p.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEM_ALLOC
        a = p.alloc
    else:
        p = a = cu.CUDA_MEM_ALLOC_NODE_PARAMS()
    a.poolProps.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    a.poolProps.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    a.poolProps.location.id = int(dev)
    a.bytesize = mib * MIB
    if add == "child":
        child = ok("child_create", cu.cuGraphCreate(0))
        ok("add_alloc_node", cu.cuGraphAddMemAllocNode(child, None, 0, p))
        c = cu.CUgraphNodeParams()
        c.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_GRAPH
        c.graph.graph = child
        c.graph.ownership = cu.CUgraphChildGraphNodeOwnership.CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE
        if MAJOR >= 13:
            ok("add_child_node", cu.cuGraphAddNode(g, None, None, 0, c))
        else:
            ok("add_child_node", cu.cuGraphAddNode(g, None, 0, c))
    elif add == "alloc":
        ok("add_alloc_node", cu.cuGraphAddMemAllocNode(g, None, 0, p))
    elif MAJOR >= 13:
        ok("add_alloc_node", cu.cuGraphAddNode(g, None, None, 0, p))
    else:
        ok("add_alloc_node", cu.cuGraphAddNode(g, None, 0, p))
    if inst == "params":
        ip = cu.CUDA_GRAPH_INSTANTIATE_PARAMS()
        ip.flags = 0
        ex = ok("instantiate", cu.cuGraphInstantiateWithParams(g, ip))
    else:
        ex = ok("instantiate", cu.cuGraphInstantiate(g, 0))
    stream = ok("stream_create", cu.cuStreamCreate(0))
    err, _ = call("graph_launch", cu.cuGraphLaunch(ex, stream))
    ok("stream_sync", cu.cuStreamSynchronize(stream))
    f1, _ = meminfo()
    u1 = region_used()
    kv("graph_free_delta", diff(f0, f1))
    kv("graph_region_delta", diff(u1, u0))
    ok("exec_destroy", cu.cuGraphExecDestroy(ex))
    ok("graph_destroy", cu.cuGraphDestroy(g))
    ok("stream_destroy", cu.cuStreamDestroy(stream))
    kv("done", 1)


def scenario_pool(mib=200):
    dev, _ = setup()
    stream = ok("stream_create", cu.cuStreamCreate(0))
    props = cu.CUmemPoolProps()
    props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = int(dev)
    pool = ok("pool_create", cu.cuMemPoolCreate(props))
    r0, (f0, _) = region_used(), meminfo()
    p = ok("pool_alloc", cu.cuMemAllocFromPoolAsync(mib * MIB, pool, stream))
    ok("pool_sync", cu.cuStreamSynchronize(stream))
    r1, (f1, _) = region_used(), meminfo()
    kv("pool_region_delta", diff(r1, r0))
    kv("pool_free_delta", diff(f0, f1))
    err, q = cu.cuMemAllocFromPoolAsync(f1 + 2 * MIB, pool, stream)
    cu.cuStreamSynchronize(stream)
    kv("pool_over", name(err))
    if err == cu.CUresult.CUDA_SUCCESS:
        cu.cuMemFreeAsync(q, stream)
    ok("pool_free", cu.cuMemFreeAsync(p, stream))
    ok("pool_free_sync", cu.cuStreamSynchronize(stream))
    ok("pool_destroy", cu.cuMemPoolDestroy(pool))
    r2, (f2, _) = region_used(), meminfo()
    kv("pool_region_after", diff(r2, r0))
    kv("pool_free_after", diff(f0, f2))
    ok("stream_destroy", cu.cuStreamDestroy(stream))
    kv("done", 1)


def wait_for(path, timeout=30.0):
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            print(f"timed out waiting for {path}", file=sys.stderr)
            sys.exit(3)
        time.sleep(0.01)


def scenario_steps(steps):
    """Same language and output as limit_client.c."""
    err = cu.cuInit(0)[0]
    kv("init", int(err))
    if err != cu.CUresult.CUDA_SUCCESS:
        sys.exit(1)
    err, dev = cu.cuDeviceGet(0)
    if err == cu.CUresult.CUDA_SUCCESS:
        err, pctx = cu.cuDevicePrimaryCtxRetain(dev)
    if err == cu.CUresult.CUDA_SUCCESS:
        (err,) = cu.cuCtxSetCurrent(pctx)
    kv("ctx", int(err))
    if err != cu.CUresult.CUDA_SUCCESS:
        sys.exit(1)
    kv("pid", os.getpid())
    held = []
    for k, s in enumerate(steps):
        if s == "info":
            err, f, t = cu.cuMemGetInfo()
            kv(f"s{k}.rc", int(err))
            kv(f"s{k}.free", f)
            kv(f"s{k}.total", t)
        elif s == "alloc:free":
            _, f, _ = cu.cuMemGetInfo()
            err, p = cu.cuMemAlloc(f)
            kv(f"s{k}.bytes", f)
            kv(f"s{k}.alloc", int(err))
            if err == cu.CUresult.CUDA_SUCCESS:
                held.append(p)
        elif s.startswith("alloc:") or s.startswith("managed:"):
            mib = int(s.split(":", 1)[1])
            if s.startswith("managed:"):
                err, p = cu.cuMemAllocManaged(mib * MIB, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value)
            else:
                err, p = cu.cuMemAlloc(mib * MIB)
            kv(f"s{k}.alloc", int(err))
            if err == cu.CUresult.CUDA_SUCCESS:
                held.append(p)
        elif s == "free_all":
            errs = [int(cu.cuMemFree(p)[0]) for p in held]
            kv(f"s{k}.freed", len(held))
            kv(f"s{k}.rc", next((e for e in errs if e != 0), 0))
            held = []
        elif s.startswith("launch:"):
            n = int(s.split(":", 1)[1])
            err, mod = cu.cuModuleLoadData(IMAGE)
            if err == cu.CUresult.CUDA_SUCCESS:
                err, fn = cu.cuModuleGetFunction(mod, KERNEL)
            for _ in range(n):
                if err != cu.CUresult.CUDA_SUCCESS:
                    break
                err = cu.cuLaunchKernel(fn, 4, 1, 1, 32, 1, 1, 0, 0, 0, 0)[0]
            if err == cu.CUresult.CUDA_SUCCESS:
                err = cu.cuCtxSynchronize()[0]
            kv(f"s{k}.launch", int(err))
        elif s == "pid":
            kv(f"s{k}.pid", os.getpid())
        elif s == "region":
            kv(f"s{k}.region_used", region_used())
        elif s.startswith("touch:"):
            open(s[6:], "a").close()
        elif s.startswith("wait:"):
            wait_for(s[5:])
        elif s.startswith("sleep:"):
            time.sleep(int(s[6:]) / 1000)
        else:
            print(f"unknown step {s}", file=sys.stderr)
            sys.exit(4)
    kv("done", 1)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    sc, args = argv[1], argv[2:]
    if sc == "init":
        scenario_init()
    elif sc == "fill":
        scenario_fill(*(int(a) for a in args))
    elif sc == "async_managed":
        scenario_async_managed(*(int(a) for a in args))
    elif sc == "module":
        scenario_module()
    elif sc == "library":
        scenario_library()
    elif sc == "graph_node":
        scenario_graph_node(*(int(a) for a in args))
    elif sc == "graph_limit":
        scenario_graph_limit(int(args[0]), args[1], args[2])
    elif sc == "pool":
        scenario_pool(*(int(a) for a in args))
    elif sc == "steps":
        scenario_steps(args)
    else:
        print(f"unknown scenario {sc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
