//! Real clients we did not write, through the shim, on the simulated GPU:
//! NVIDIA's Python driver bindings (`cuda-bindings`, `from cuda.bindings import driver`),
//! `pynvml` (`nvidia-ml-py`), and two processes of one container (one Python, one C) sharing one
//! limit. Every client test runs twice: in `cuda12` with cuda-bindings 12.9 + nvidia-ml-py 12 on a
//! simulated driver reporting 12090, and in `cuda13` with cuda-bindings 13.x + nvidia-ml-py 13 on
//! one reporting 13050. The packages come from `ci/venv.sh <major>` (run on first use). Scripts:
//! `tests/py/`.
//!
//! Each test gets its own simulated GPU (`VGPU_SIM_STATE`) and region file
//! (`CUDA_DEVICE_MEMORY_SHARED_CACHE`), both in a per-test sandbox; the container limit is
//! `CUDA_DEVICE_MEMORY_LIMIT=1024m` on a 16 GiB simulated device. The region file is read back with
//! independent readers (`tests/py/vgpu_region.py` inside the clients, `tests/py/rw_common.rs` here).

mod common;
#[path = "py/rw_common.rs"]
mod rw;

use common::*;
use rw::*;

const LIMIT_MIB: u64 = 1024;
const LIMIT: u64 = LIMIT_MIB * MIB;
const SIM_MIB: u64 = 16384;

/// The CUDA major a test runs with: its venv and the driver version the simulated GPU reports.
#[derive(Clone, Copy, Debug)]
enum Cuda {
    V12,
    V13,
}

impl Cuda {
    fn major(self) -> u32 {
        match self {
            Cuda::V12 => 12,
            Cuda::V13 => 13,
        }
    }

    fn driver_version(self) -> &'static str {
        match self {
            Cuda::V12 => "12090",
            Cuda::V13 => "13050",
        }
    }

    fn sandbox(self, name: &str) -> Sandbox {
        Sandbox::new(&format!("{name}-{}", self.major()))
    }
}

/// A Python script of tests/py run by the venv interpreter of `cuda`, with the shim and the
/// container limit, on a simulated driver of that major.
fn py<'a>(sb: &'a Sandbox, script: &str, cuda: Cuda) -> Run<'a> {
    sb.run(python_for(cuda.major()))
        .arg(py_file(script))
        .env("VGPU_SIM_DRIVER_VERSION", cuda.driver_version())
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", format!("{LIMIT_MIB}m"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .timeout_secs(120)
}

fn c_client<'a>(sb: &'a Sandbox, cuda: Cuda) -> Run<'a> {
    sb.run(limit_client())
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", format!("{LIMIT_MIB}m"))
        .env("VGPU_SIM_DRIVER_VERSION", cuda.driver_version())
        .timeout_secs(60)
}

/// One `#[test]` per CUDA major for each listed function of this file taking a [`Cuda`].
macro_rules! per_cuda_major {
    ($($f:ident),* $(,)?) => {
        mod cuda12 {
            $( #[test] fn $f() { super::$f(super::Cuda::V12) } )*
        }
        mod cuda13 {
            $( #[test] fn $f() { super::$f(super::Cuda::V13) } )*
        }
    };
}

per_cuda_major!(
    cuda_bindings_without_shim_sees_the_whole_device,
    cuda_bindings_init_contexts_and_meminfo,
    cuda_bindings_allocate_to_the_limit_then_oom,
    cuda_bindings_limit_holds_when_the_driver_hands_out_thunks,
    cuda_bindings_async_and_managed_allocations_are_counted,
    cuda_bindings_pool_allocations_are_counted,
    cuda_bindings_module_and_kernel_launch,
    cuda_bindings_library_kernel_path,
    cuda_bindings_graph_add_node_on_the_simulated_driver,
    cuda_bindings_graph_memory_nodes_are_limited,
    pynvml_devices_memory_and_processes,
    python_and_c_processes_share_one_limit_python_holds,
    python_and_c_processes_share_one_limit_c_holds,
);

// ------------------------------------------------------------------------------------------------
// cuda-bindings

/// Control: without the shim the simulated device shows its full 16 GiB to cuda-bindings (so the
/// limited numbers below come from the shim, not the simulator).
fn cuda_bindings_without_shim_sees_the_whole_device(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-noshim");
    let out = py(&sb, "cuda_client.py", cuda).arg("init").shim(false).go();
    out.ok();
    expect(&out, "init", CUDA_SUCCESS);
    assert_eq!(u64_of(&out, "primary.total"), SIM_MIB * MIB, "{}", out.dump());
}

/// cuInit, driver version, device, primary context and cuCtxCreate; cuMemGetInfo reports the limit
/// as total in both contexts; cuDeviceTotalMem shows the same view.
fn cuda_bindings_init_contexts_and_meminfo(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-init");
    let out = py(&sb, "cuda_client.py", cuda).arg("init").env("LIBCUDA_LOG_LEVEL", "4").go();
    out.ok();
    for k in ["init", "primary_ctx_retain", "ctx_set_current", "ctx_create", "ctx_destroy", "primary_ctx_release"] {
        expect(&out, k, CUDA_SUCCESS);
    }
    // The bindings' cuCtxCreate is the v2 ABI in 12.x and the v4 ABI in 13.x: the shim's wrapper of
    // exactly that ABI ran, and the driver saw that variant.
    let create = match cuda {
        Cuda::V12 => "cuCtxCreate_v2",
        Cuda::V13 => "cuCtxCreate_v4",
    };
    out.assert_hooked(&[create, "cuDevicePrimaryCtxRetain", "cuMemGetInfo_v2"]);
    assert_eq!(sb.counts().get(create), Some(&1), "{create}: {:?}", sb.counts());
    expect(&out, "driver_version", cuda.driver_version());
    expect(&out, "created_device", "0");
    if let Cuda::V13 = cuda {
        expect(&out, "ctx_get_device_v2", CUDA_SUCCESS);
        expect(&out, "primary_device_v2", "0");
        expect(&out, "ctx_synchronize_v2", CUDA_SUCCESS);
    }
    expect(&out, "device_count", "1");
    expect(&out, "primary_is_current", "1");
    assert!(!out.val("device_name").is_empty());
    assert_eq!(u64_of(&out, "primary.total"), LIMIT, "cuMemGetInfo total (primary ctx)\n{}", out.dump());
    assert_eq!(u64_of(&out, "created.total"), LIMIT, "cuMemGetInfo total (cuCtxCreate ctx)\n{}", out.dump());
    assert!(u64_of(&out, "primary.free") <= LIMIT, "{}", out.dump());
    assert!(u64_of(&out, "created.free") <= LIMIT, "{}", out.dump());
    assert_eq!(u64_of(&out, "device_total_mem"), LIMIT, "cuDeviceTotalMem must show the same view\n{}", out.dump());
    expect(&out, "done", "1");
    out.assert_no_shim_errors();
}

/// Allocations of exactly what cuMemGetInfo reports free succeed; one more (2 MiB) and one oversized
/// allocation fail with CUDA_ERROR_OUT_OF_MEMORY; frees return the memory (cuMemGetInfo and the
/// region slot are back where they started, and the whole free amount can be allocated again).
fn cuda_bindings_allocate_to_the_limit_then_oom(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-fill");
    let out = py(&sb, "cuda_client.py", cuda).arg("fill").arg("64").go();
    out.ok();
    let free0 = u64_of(&out, "free0");
    assert_eq!(u64_of(&out, "total"), LIMIT, "{}", out.dump());
    assert!(free0 > 0 && free0 <= LIMIT, "free0={free0}\n{}", out.dump());
    expect(&out, "big_alloc", CUDA_ERROR_OUT_OF_MEMORY);
    expect(&out, "filled_to_limit", "1");
    assert!(u64_of(&out, "free_full") < 2 * MIB, "cuMemGetInfo free after filling\n{}", out.dump());
    expect(&out, "next_alloc", CUDA_ERROR_OUT_OF_MEMORY);
    expect(&out, "free_one", CUDA_SUCCESS);
    expect(&out, "realloc", CUDA_SUCCESS);
    expect(&out, "free_all", CUDA_SUCCESS);
    assert_eq!(u64_of(&out, "free_after"), free0, "frees return the memory\n{}", out.dump());
    expect(&out, "alloc_free0_again", CUDA_SUCCESS);
    // The region (what the monitor reads) saw the allocations and the frees.
    let r0 = u64_of(&out, "region_used0");
    let rfull = u64_of(&out, "region_used_full");
    assert!(rfull >= r0 + free0, "region used[0].total {r0} -> {rfull}, allocated {free0}\n{}", out.dump());
    assert!(rfull <= LIMIT, "the region never shows more than the limit: {rfull}\n{}", out.dump());
    assert_eq!(u64_of(&out, "region_used_after"), r0, "{}", out.dump());
    expect(&out, "done", "1");
    out.assert_no_shim_errors();
}

/// The same fill on a driver whose cuGetProcAddress hands out unexported thunks (no address
/// matches an exported symbol): the shim finds its wrappers by NVIDIA's version thresholds, so the
/// limit holds and the allocations went through its hooks.
fn cuda_bindings_limit_holds_when_the_driver_hands_out_thunks(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-thunks");
    let out = py(&sb, "cuda_client.py", cuda)
        .args(["fill", "128"])
        .env("VGPU_SIM_PROCADDR_THUNKS", "1")
        .env("LIBCUDA_LOG_LEVEL", "4")
        .go();
    out.ok();
    assert_eq!(u64_of(&out, "total"), LIMIT, "{}", out.dump());
    expect(&out, "big_alloc", CUDA_ERROR_OUT_OF_MEMORY);
    expect(&out, "filled_to_limit", "1");
    expect(&out, "next_alloc", CUDA_ERROR_OUT_OF_MEMORY);
    expect(&out, "free_all", CUDA_SUCCESS);
    out.assert_hooked(&["cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2"]);
    out.assert_no_shim_errors();
}

/// cuMemAllocAsync and cuMemAllocManaged are counted in this process's region slot and in
/// cuMemGetInfo, uncounted when freed, and refused beyond the limit.
fn cuda_bindings_async_and_managed_allocations_are_counted(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-async");
    let out = py(&sb, "cuda_client.py", cuda).arg("async_managed").go();
    out.ok();
    for k in ["async_alloc", "managed_alloc", "async_free", "managed_free"] {
        expect(&out, k, CUDA_SUCCESS);
    }
    let within = |key: &str, mib: u64| {
        let v = out.val(key);
        let n: u64 = v.parse().unwrap_or_else(|_| panic!("`{key}`={v} (region slot missing?)\n{}", out.dump()));
        assert!(
            n >= mib * MIB && n <= mib * MIB + 2 * MIB,
            "`{key}`={n}, expected {mib} MiB (+ rounding)\n{}",
            out.dump()
        );
        n
    };
    let a = within("async_region_delta", 100);
    within("async_free_delta", 100);
    let m = within("managed_region_delta", 50);
    within("managed_free_delta", 50);
    assert_eq!(u64_of(&out, "async_region_freed"), a, "{}", out.dump());
    assert_eq!(u64_of(&out, "managed_region_freed"), m, "{}", out.dump());
    expect(&out, "async_over", CUDA_ERROR_OUT_OF_MEMORY);
    expect(&out, "managed_over", CUDA_ERROR_OUT_OF_MEMORY);
    expect(&out, "done", "1");
    out.assert_no_shim_errors();
}

/// A pool created at a device location: cuMemAllocFromPoolAsync is counted in the region slot and
/// in cuMemGetInfo, refused beyond the limit, and uncounted once freed and the pool destroyed.
fn cuda_bindings_pool_allocations_are_counted(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-pool");
    let out = py(&sb, "cuda_client.py", cuda).arg("pool").arg("200").go();
    out.ok();
    for k in ["pool_create", "pool_alloc", "pool_free", "pool_destroy"] {
        expect(&out, k, CUDA_SUCCESS);
    }
    for key in ["pool_region_delta", "pool_free_delta"] {
        let n = u64_of(&out, key);
        assert!((200 * MIB..=202 * MIB).contains(&n), "`{key}`={n}, expected 200 MiB (+ rounding)\n{}", out.dump());
    }
    expect(&out, "pool_over", CUDA_ERROR_OUT_OF_MEMORY);
    expect(&out, "pool_region_after", "0");
    expect(&out, "pool_free_after", "0");
    expect(&out, "done", "1");
    out.assert_no_shim_errors();
}

/// The runtime's kernel path (cuLibraryLoadData, cuLibraryGetKernel, cuKernelGetFunction,
/// cuLibraryGetGlobal, then cuLaunchKernel through the shim's hook) and managed memory advised and
/// prefetched with the ABI of the bindings' major (13.x: `cuMemAdvise_v2`, `cuMemPrefetchAsync_v2`).
fn cuda_bindings_library_kernel_path(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-library");
    let out = py(&sb, "cuda_client.py", cuda).arg("library").env("LIBCUDA_LOG_LEVEL", "4").go();
    out.ok();
    for k in [
        "library_load",
        "library_get_kernel",
        "kernel_get_function",
        "library_get_global",
        "launch",
        "mem_advise",
        "prefetch_device",
        "prefetch_host",
        "stream_sync",
        "library_unload",
    ] {
        expect(&out, k, CUDA_SUCCESS);
    }
    expect(&out, "launches", "6");
    assert!(u64_of(&out, "global_size") > 0, "{}", out.dump());
    out.assert_hooked(&["cuLaunchKernel", "cuLibraryLoadData", "cuMemAllocManaged"]);
    let counts = sb.counts();
    let launched: u64 = counts.iter().filter(|(k, _)| k.starts_with("cuLaunchKernel")).map(|(_, v)| v).sum();
    assert_eq!(launched, 6, "the simulated driver saw {launched} launches: {counts:?}");
    // The variant the bindings asked for reached the driver.
    let (advise, prefetch) = match cuda {
        Cuda::V12 => ("cuMemAdvise", "cuMemPrefetchAsync"),
        Cuda::V13 => ("cuMemAdvise_v2", "cuMemPrefetchAsync_v2"),
    };
    assert_eq!(counts.get(advise), Some(&1), "{advise}: {counts:?}");
    assert_eq!(counts.get(prefetch), Some(&2), "{prefetch}: {counts:?}");
    out.assert_no_shim_errors();
}

/// The simulated driver's cuGraphAddNode (each bindings major asks for its own ABI): a
/// memory-allocation node and a kernel node after it, instantiated and launched; the graph's
/// allocation shows in cuMemGetInfo. Without the shim: this is the driver's behaviour the shim
/// sees.
fn cuda_bindings_graph_add_node_on_the_simulated_driver(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-graph-node");
    let out = py(&sb, "cuda_client.py", cuda).args(["graph_node", "200"]).shim(false).go();
    out.ok();
    for k in ["add_alloc_node", "add_kernel_node", "instantiate", "graph_launch", "stream_sync", "graph_destroy"] {
        expect(&out, k, CUDA_SUCCESS);
    }
    expect(&out, "alloc_dptr_set", "1");
    expect(&out, "nodes", "2");
    let d = u64_of(&out, "graph_free_delta");
    assert!((200 * MIB..=202 * MIB).contains(&d), "graph allocation {d}\n{}", out.dump());
    let variant = match cuda {
        Cuda::V12 => "cuGraphAddNode",
        Cuda::V13 => "cuGraphAddNode_v2",
    };
    assert_eq!(sb.counts().get(variant), Some(&2), "{variant}: {:?}", sb.counts());
}

/// A graph's memory-allocation node counts however it was added (`cuGraphAddNode` in the ABI of
/// each major, `cuGraphAddMemAllocNode`, or in a child graph moved into it with `cuGraphAddNode`)
/// and however the graph was instantiated (with flags, with params): 200 MiB is charged at the
/// launch, 1.5 GiB under the 1 GiB limit is refused there.
fn cuda_bindings_graph_memory_nodes_are_limited(cuda: Cuda) {
    let cases = [("node", "flags"), ("node", "params"), ("alloc", "flags"), ("alloc", "params"), ("child", "flags")];
    for (add, inst) in cases {
        let case = format!("{add}/{inst}");
        let sb = cuda.sandbox(&format!("rc-cb-graph-fit-{add}-{inst}"));
        let out = py(&sb, "cuda_client.py", cuda).args(["graph_limit", "200", add, inst]).go();
        out.ok();
        expect(&out, "graph_launch", CUDA_SUCCESS);
        for key in ["graph_region_delta", "graph_free_delta"] {
            let n = u64_of(&out, key);
            assert!((200 * MIB..=202 * MIB).contains(&n), "{case}: `{key}`={n}, expected 200 MiB\n{}", out.dump());
        }
        out.assert_no_shim_errors();

        let sb = cuda.sandbox(&format!("rc-cb-graph-over-{add}-{inst}"));
        let out = py(&sb, "cuda_client.py", cuda).args(["graph_limit", "1536", add, inst]).go();
        out.ok();
        assert_eq!(out.val("graph_launch"), CUDA_ERROR_OUT_OF_MEMORY, "{case}: 1.5 GiB launched\n{}", out.dump());
        // Nothing charged (the periodic reconciliation may settle a granule of driver-held memory
        // meanwhile).
        for key in ["graph_region_delta", "graph_free_delta"] {
            let v = out.val(key);
            let n: i64 = v.parse().unwrap_or_else(|_| panic!("{case}: `{key}`={v}\n{}", out.dump()));
            assert!(n.unsigned_abs() <= 2 * MIB, "{case}: `{key}`={n} after a refused launch\n{}", out.dump());
        }
    }
}

/// A module is loaded from bytes, a kernel launched through the shim's hook, device memory round-trips.
fn cuda_bindings_module_and_kernel_launch(cuda: Cuda) {
    let sb = cuda.sandbox("rc-cb-module");
    let out = py(&sb, "cuda_client.py", cuda).arg("module").env("LIBCUDA_LOG_LEVEL", "4").go();
    out.ok();
    for k in ["module_load", "get_function", "launch", "stream_sync", "ctx_sync", "htod", "dtoh", "module_unload"] {
        expect(&out, k, CUDA_SUCCESS);
    }
    expect(&out, "launches", "8");
    expect(&out, "roundtrip", "1");
    out.assert_hooked(&["cuLaunchKernel", "cuMemAlloc_v2", "cuMemFree_v2"]);
    let launched: u64 = sb.counts().iter().filter(|(k, _)| k.starts_with("cuLaunchKernel")).map(|(_, v)| v).sum();
    assert!(launched >= 8, "the simulated driver saw {launched} launches: {:?}", sb.counts());
    out.assert_no_shim_errors();
}

// ------------------------------------------------------------------------------------------------
// pynvml

const UUID0: &str = "GPU-5e1a0c3b-7d2f-4a6e-9b1c-0123456789ab";
const UUID1: &str = "GPU-5e1a0c3b-7d2f-4a6e-9b1c-0123456789ac";

fn sim_env(r: Run<'_>) -> Run<'_> {
    r.env("VGPU_SIM_DEVICES", "2").env("VGPU_SIM_UUIDS", format!("{UUID0},{UUID1}"))
}

/// Device count, names and UUIDs; nvmlDeviceGetMemoryInfo v1 and v2 show each device's container
/// limit as total and the container's own usage (not that of a process outside the container);
/// the running-processes list has this process; the shim wrote the UUIDs into the region.
fn pynvml_devices_memory_and_processes(cuda: Cuda) {
    let sb = cuda.sandbox("rc-nvml");
    // A process outside the container (no shim, its own region) holds 2 GiB of device 0.
    let ready = sb.dir.join("outside.ready");
    let go = sb.dir.join("outside.go");
    let outside_region = sb.dir.join("outside.cache");
    std::thread::scope(|s| {
        let outside = s.spawn(|| {
            sim_env(sb.run(limit_client()))
                .env("VGPU_SIM_DRIVER_VERSION", cuda.driver_version())
                .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", &outside_region)
                .args([
                    "alloc:2048".to_string(),
                    format!("touch:{}", ready.display()),
                    format!("wait:{}", go.display()),
                ])
                .timeout_secs(90)
                .go()
        });
        wait_file(&ready, 60);
        let out = sim_env(py(&sb, "nvml_client.py", cuda))
            .env_remove("CUDA_DEVICE_MEMORY_LIMIT")
            .env("CUDA_DEVICE_MEMORY_LIMIT_0", "1024m")
            .env("CUDA_DEVICE_MEMORY_LIMIT_1", "2048m")
            .args(["--alloc", "300"])
            .go();
        std::fs::write(&go, b"").unwrap();
        let o = outside.join().unwrap();
        o.ok();
        expect(&o, "s0.alloc", "0");
        out.ok();
        expect(&out, "alloc", CUDA_SUCCESS);
        expect(&out, "device_count", "2");
        expect(&out, "cuda_driver_version", cuda.driver_version());
        expect(&out, "d0.uuid", UUID0);
        expect(&out, "d1.uuid", UUID1);
        assert!(!out.val("d0.name").is_empty());
        assert_eq!(out.val("d0.name"), out.val("d1.name"));
        for (d, limit) in [(0, 1024 * MIB), (1, 2048 * MIB)] {
            for v in ["v1", "v2"] {
                let total = u64_of(&out, &format!("d{d}.{v}.total"));
                let used = u64_of(&out, &format!("d{d}.{v}.used"));
                let free = u64_of(&out, &format!("d{d}.{v}.free"));
                assert_eq!(total, limit, "d{d} {v} total\n{}", out.dump());
                assert!(used <= total && free <= total - used, "d{d} {v}: used {used} free {free}\n{}", out.dump());
                if d == 0 {
                    assert!(
                        used >= 300 * MIB,
                        "d0 {v}: used {used} must include this process's 300 MiB\n{}",
                        out.dump()
                    );
                    assert!(used < 2048 * MIB, "d0 {v}: used {used} includes the outside process\n{}", out.dump());
                } else {
                    assert_eq!(used, 0, "d1 {v}: the container has no usage on device 1\n{}", out.dump());
                }
            }
            if d == 0 {
                let v1 = u64_of(&out, "d0.v1.free") + u64_of(&out, "d0.v1.used");
                assert_eq!(v1, limit, "v1: free + used == total\n{}", out.dump());
            }
        }
        expect(&out, "d0.self_listed", "1");
        assert!(u64_of(&out, "d0.self_used") >= 300 * MIB, "{}", out.dump());
        expect(&out, "region.device_num", "2");
        expect(&out, "region.uuid0", UUID0);
        expect(&out, "region.uuid1", UUID1);
        expect(&out, "done", "1");
        out.assert_no_shim_errors();
    });
}

// ------------------------------------------------------------------------------------------------
// Two processes of one container

/// `holder` (spawned in the background) allocates 400 MiB of the 1024 MiB limit and waits; `asker`
/// (the other language) is then refused 400 MiB, gets exactly what cuMemGetInfo reports free, and
/// nothing more; the region shows the holder. After the holder exits, 600 MiB fit.
/// (Each process's context also costs 256 MiB of the simulated device, charged to the container:
/// 400 + 2 × 256 = 912 MiB before the asker's allocations.)
const HOLD_MIB: u64 = 400;

fn share_one_limit(name: &str, holder_is_python: bool, cuda: Cuda) {
    let sb = cuda.sandbox(name);
    let ready = sb.dir.join("holder.ready");
    let go = sb.dir.join("holder.go");
    let run = |python: bool| -> Run<'_> {
        if python { py(&sb, "cuda_client.py", cuda).arg("steps") } else { c_client(&sb, cuda) }
    };
    std::thread::scope(|s| {
        let holder = s.spawn(|| {
            run(holder_is_python)
                .args([
                    format!("alloc:{HOLD_MIB}"),
                    "info".to_string(),
                    format!("touch:{}", ready.display()),
                    format!("wait:{}", go.display()),
                    "free_all".to_string(),
                ])
                .go()
        });
        wait_file(&ready, 90);
        let region = Region::read(&sb.region()).expect("region file exists while the holder runs");
        let asker = run(!holder_is_python)
            .args(["info", &format!("alloc:{HOLD_MIB}"), "alloc:free", "alloc:2", "free_all"])
            .go();
        // Region as the monitor sees it while both hold memory (before the asker's free_all ran
        // it is gone, so only the holder is checked here).
        std::fs::write(&go, b"").unwrap();
        let h = holder.join().unwrap();
        h.ok();
        expect(&h, "s0.alloc", "0");
        asker.ok();
        assert_eq!(u64_of(&asker, "s0.total"), LIMIT, "{}", asker.dump());
        let free = u64_of(&asker, "s0.free");
        assert!(free > 0, "nothing left for the second process: {}", asker.dump());
        assert!(
            free <= LIMIT - HOLD_MIB * MIB,
            "the second process sees free={free} while the first holds {HOLD_MIB} MiB\n{}",
            asker.dump()
        );
        expect(&asker, "s1.alloc", OOM);
        expect(&asker, "s2.alloc", "0");
        expect(&asker, "s3.alloc", OOM);
        let used = region.container_used(0);
        assert!((HOLD_MIB * MIB..=LIMIT).contains(&used), "region container usage {used}: {}", region.describe());
        let hpid: i32 = h.val("pid").parse().unwrap();
        assert!(region.live().iter().any(|s| s.pid == hpid && s.data(0) >= HOLD_MIB * MIB), "{}", region.describe());
    });
    // The holder is gone: its memory is back.
    let after = run_after(&sb, holder_is_python, cuda);
    expect(&after, "s0.alloc", "0");
}

fn run_after(sb: &Sandbox, python: bool, cuda: Cuda) -> Out {
    let r = if python { py(sb, "cuda_client.py", cuda).arg("steps") } else { c_client(sb, cuda) };
    let out = r.args(["alloc:600"]).go();
    out.ok();
    out
}

fn python_and_c_processes_share_one_limit_python_holds(cuda: Cuda) {
    share_one_limit("rc-share-py", true, cuda);
}

fn python_and_c_processes_share_one_limit_c_holds(cuda: Cuda) {
    share_one_limit("rc-share-c", false, cuda);
}
