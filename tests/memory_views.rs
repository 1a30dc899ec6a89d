//! Memory-limit proof, views: cuMemGetInfo_v2, cuDeviceTotalMem_v2, nvmlDeviceGetMemoryInfo (v1,
//! v2) and nvmlDeviceGetComputeRunningProcesses (v1/v2/v3 ABIs) agree with each other and with the
//! region at every observed moment; usage pushed above the limit by a path the shim does not
//! count still gives sane numbers; per-device limits follow the device a CUDA ordinal really is.

mod common;
mod memory_support;

use common::Sandbox;
use memory_support::*;
use std::collections::BTreeSet;
use std::path::Path;

const NVML_ERROR_INSUFFICIENT_SIZE: i64 = 7;

/// Everything one client sees about device (CUDA ordinal `ord`, NVML index `idx`), checked
/// against the region snapshot taken while nothing moves (all clients idle).
#[track_caller]
fn assert_views(c: &mut Client, region: &Path, ord: i32, idx: usize, phys: u64, moment: &str) {
    let s = locked_snap(region);
    let limit = s.limit(idx);
    let total = limit.min(phys);
    let used = s.container_total(idx);
    let free = total.saturating_sub(used);
    let ctx = format!("{moment}, client {}: limit {limit} used {used}", c.pid);

    let m = c.ok("meminfo");
    assert_eq!((m.u64("total"), m.u64("free")), (total, free), "cuMemGetInfo_v2 ({ctx})");
    assert_eq!(c.ok(&format!("totalmem {ord}")).u64("bytes"), total, "cuDeviceTotalMem_v2 ({ctx})");
    let n = c.ok(&format!("nvml_mem {idx}"));
    assert_eq!((n.u64("total1"), n.u64("used1"), n.u64("free1")), (total, used.min(total), free), "nvml v1 ({ctx})");
    assert_eq!(
        (n.u64("total2"), n.u64("used2"), n.u64("free2"), n.u64("reserved2")),
        (total, used.min(total), free, 0),
        "nvml v2 ({ctx})"
    );
    // Processes: the container's, container PIDs, accounted usage (those with usage on it).
    let want: BTreeSet<(u32, u64)> = s
        .live_slots()
        .iter()
        .filter(|sl| sl.used[idx].total > 0)
        .map(|sl| (sl.pid as u32, sl.used[idx].total))
        .collect();
    for ver in 1..=3 {
        let r = c.ok(&format!("nvml_procs {idx} {ver}"));
        let got: BTreeSet<(u32, u64)> = r.procs().into_iter().collect();
        assert_eq!(got, want, "nvmlDeviceGetComputeRunningProcesses v{ver} ({ctx})");
        assert_eq!(r.u64("count") as usize, want.len());
        // Two-call protocol: a zero-capacity call reports the count.
        assert_eq!(r.u64("count0") as usize, want.len(), "v{ver} count with capacity 0");
        if !want.is_empty() {
            assert_eq!(r.i64("rc0"), NVML_ERROR_INSUFFICIENT_SIZE, "v{ver} rc with capacity 0");
        }
    }
}

const PHYS: u64 = 16384 * MIB;

#[test]
fn views_agree_with_each_other_and_the_region() {
    let sb = Sandbox::new("views_parity");
    let path = sb.region();
    let spawn = || client(&sb).env("CUDA_DEVICE_MEMORY_LIMIT", "512m").env("VGPU_SIM_CTX_MIB", 8).spawn();
    let mut a = spawn();
    let mut b = spawn();
    for c in [&mut a, &mut b] {
        c.init_ctx(0);
        c.ok("nvml_init");
    }
    // A tenant of another container on the same GPU (its own region, its own limit): invisible.
    let other_region = sb.dir.join("other.cache");
    let mut other =
        client(&sb).region(&other_region).env("CUDA_DEVICE_MEMORY_LIMIT", "4g").env("VGPU_SIM_CTX_MIB", 8).spawn();
    other.init_ctx(0);
    other.ok(&format!("alloc {}", 1024 * MIB));

    let check = |a: &mut Client, b: &mut Client, moment: &str| {
        assert_views(a, &path, 0, 0, PHYS, moment);
        assert_views(b, &path, 0, 0, PHYS, moment);
    };
    check(&mut a, &mut b, "contexts only");
    assert_eq!(locked_snap(&path).container_total(0), 16 * MIB);

    let a1 = a.ok(&format!("alloc {}", 100 * MIB + 3)).id();
    b.ok(&format!("alloc {}", 50 * MIB));
    b.ok(&format!("vmm {} 0 1", 4 * MIB));
    a.ok(&format!("managed {} 1", 7 * MIB));
    check(&mut a, &mut b, "after allocations");
    assert_eq!(locked_snap(&path).container_total(0), 16 * MIB + 161 * MIB + 3);

    a.ok(&format!("free {a1}"));
    check(&mut a, &mut b, "after a free");

    // Fill to the limit exactly: free 0, not negative.
    let used = locked_snap(&path).container_total(0);
    b.ok(&format!("alloc {}", 512 * MIB - used));
    check(&mut a, &mut b, "at the limit");
    assert_eq!(a.ok("meminfo").u64("free"), 0);

    b.exit();
    let s = locked_snap(&path);
    assert_eq!(s.proc_num(), 1);
    assert_views(&mut a, &path, 0, 0, PHYS, "after the other process exited");
    a.exit();
    other.exit();
}

/// Usage above the limit that the shim did not put there: a process of the container running the
/// C library (its slot is written directly into the file, as that library would), or the limit
/// lowered in the region below current usage. The views must stay sane (free = 0, used ≤ total,
/// nothing wrapped, no error) and allocations must be refused.
#[test]
fn usage_above_the_limit_gives_zero_free_not_a_wrap() {
    let sb = Sandbox::new("views_underflow");
    let path = sb.region();
    let mut c = client(&sb).env("CUDA_DEVICE_MEMORY_LIMIT", "64m").env("VGPU_SIM_CTX_MIB", 8).spawn();
    c.init_ctx(0);
    c.ok("nvml_init");
    let id = c.ok(&format!("alloc {}", 40 * MIB)).id();

    // Inject a live C-library process (this test's own pid, so it is never reclaimed as dead)
    // holding 100 MiB, under the container lock.
    let me = std::process::id() as i32;
    let injected = {
        let l = RegionLock::take(&path, std::time::Duration::from_secs(2));
        let s = l.snap();
        let k = s.proc_num();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::os::unix::fs::FileExt;
        let base = off::slot(k);
        f.write_all_at(&me.to_le_bytes(), (base + off::S_PID) as u64).unwrap();
        f.write_all_at(&100u64.saturating_mul(MIB).to_le_bytes(), off::used(k, 0, off::D_DATA) as u64).unwrap();
        f.write_all_at(&(100 * MIB).to_le_bytes(), off::used(k, 0, off::D_TOTAL) as u64).unwrap();
        f.write_all_at(&1i32.to_le_bytes(), (base + off::S_STATUS) as u64).unwrap();
        f.write_all_at(&((k + 1) as i32).to_le_bytes(), off::PROC_NUM as u64).unwrap();
        k
    };
    let over = |c: &mut Client, what: &str| {
        let m = c.ok("meminfo");
        assert_eq!((m.u64("free"), m.u64("total")), (0, 64 * MIB), "cuMemGetInfo_v2 over the limit ({what})");
        assert_eq!(c.ok("totalmem 0").u64("bytes"), 64 * MIB);
        let n = c.ok("nvml_mem 0");
        assert_eq!((n.u64("total1"), n.u64("free1"), n.u64("used1")), (64 * MIB, 0, 64 * MIB), "nvml v1 ({what})");
        assert_eq!(n.u64("free2"), 0, "nvml v2 free ({what})");
        assert!(
            n.u64("used2") + n.u64("reserved2") + n.u64("free2") <= n.u64("total2"),
            "nvml v2 sums ({what}): {}",
            n.line
        );
        let r = c.cmd("alloc 1");
        assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "allocation over the limit ({what})");
        let r = c.cmd(&format!("async {}", MIB));
        assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY);
    };
    over(&mut c, "C-library slot");
    // The refusal's sweep did not remove the live foreign slot.
    assert_eq!(locked_snap(&path).container_total(0), 148 * MIB);
    // The process list shows both.
    let p: BTreeSet<u32> = c.ok("nvml_procs 0 3").procs().into_iter().map(|(p, _)| p).collect();
    assert_eq!(p, BTreeSet::from([c.pid, me as u32]));
    c.ok(&format!("free {id}"));
    over(&mut c, "C-library slot after our free");

    // The foreign process exits (status 0, pid 0): the container is under the limit again.
    {
        let _l = RegionLock::take(&path, std::time::Duration::from_secs(2));
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&0i32.to_le_bytes(), (off::slot(injected) + off::S_STATUS) as u64).unwrap();
        f.write_all_at(&0i32.to_le_bytes(), (off::slot(injected) + off::S_PID) as u64).unwrap();
    }
    assert_eq!(c.ok("meminfo").u64("free"), 56 * MIB);
    let id = c.ok(&format!("alloc {}", 40 * MIB)).id();

    // The limit lowered in the region below what is in use (limits are read live).
    {
        let _l = RegionLock::take(&path, std::time::Duration::from_secs(2));
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&(32 * MIB).to_le_bytes(), off::LIMIT as u64).unwrap();
    }
    let m = c.ok("meminfo");
    assert_eq!((m.u64("free"), m.u64("total")), (0, 32 * MIB), "lowered limit");
    let n = c.ok("nvml_mem 0");
    assert_eq!((n.u64("total1"), n.u64("free1"), n.u64("used1")), (32 * MIB, 0, 32 * MIB));
    assert_eq!(c.cmd("alloc 1").rc(), CUDA_ERROR_OUT_OF_MEMORY);
    c.ok(&format!("free {id}"));
    assert_eq!(c.ok("meminfo").u64("free"), 24 * MIB);
    c.exit();
}

/// Two devices with different limits, CUDA order = NVML order.
#[test]
fn per_device_limits_follow_the_device() {
    let sb = Sandbox::new("views_two_devices");
    let path = sb.region();
    let mut c = client(&sb)
        .env("VGPU_SIM_DEVICES", 2)
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "100m")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "200m")
        .spawn();
    c.init_ctx(1);
    c.ok("nvml_init");
    c.ok(&format!("alloc {}", 150 * MIB));
    let s = locked_snap(&path);
    let u = s.used_of(c.pid, 1);
    assert_eq!((u.data, u.context), (150 * MIB, 8 * MIB));
    assert_eq!(s.used_of(c.pid, 0), DevMem::default());
    assert_views(&mut c, &path, 1, 1, PHYS, "device 1");
    assert_eq!(c.ok("totalmem 0").u64("bytes"), 100 * MIB);
    c.ok("ctx 0");
    assert_eq!(c.cmd(&format!("alloc {}", 150 * MIB)).rc(), CUDA_ERROR_OUT_OF_MEMORY, "device 0 has 100m");
    c.ok(&format!("alloc {}", 92 * MIB));
    assert_views(&mut c, &path, 0, 0, PHYS, "device 0");
    c.exit();
}

/// Position of a UUID in NVML's list (= region index).
fn nvml_index(c: &mut Client, uuid: &str, n: usize) -> usize {
    (0..n).find(|&i| c.ok(&format!("nvml_uuid {i}")).s("uuid").eq_ignore_ascii_case(uuid)).expect("uuid in NVML list")
}

/// Whatever the driver says CUDA ordinal `o` is (by UUID), its memory is counted at that UUID's
/// NVML index and limited by that index's limit. Holds with or without reordering.
fn check_mapping_by_uuid(cvd: &str) {
    let sb = Sandbox::new("views_map_uuid");
    let path = sb.region();
    let mut c = client(&sb)
        .env("VGPU_SIM_DEVICES", 2)
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "100m")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "200m")
        .env("CUDA_VISIBLE_DEVICES", cvd)
        .spawn();
    c.ok("init");
    c.ok("nvml_init");
    for ord in 0..2 {
        let uuid = c.ok(&format!("cuda_uuid {ord}")).s("uuid").to_string();
        let idx = nvml_index(&mut c, &uuid, 2);
        let limit = if idx == 0 { 100 * MIB } else { 200 * MIB };
        c.ok(&format!("ctx {ord}"));
        assert_eq!(c.ok("meminfo").u64("total"), limit, "CVD={cvd}: ordinal {ord} = NVML {idx}");
        assert_eq!(c.ok(&format!("totalmem {ord}")).u64("bytes"), limit);
        let id = c.ok(&format!("alloc {}", 50 * MIB)).id();
        let s = locked_snap(&path);
        assert_eq!(s.used_of(c.pid, idx).data, 50 * MIB, "CVD={cvd}: ordinal {ord} counted at region {idx}");
        assert_eq!(s.used_of(c.pid, 1 - idx).data, 0);
        c.ok(&format!("free {id}"));
        c.ok(&format!("ctx_release {ord}"));
    }
    c.exit();
}

#[test]
fn device_mapping_follows_uuid_with_cuda_visible_devices_set() {
    check_mapping_by_uuid("1,0");
}

/// The brief's case: `CUDA_VISIBLE_DEVICES=1,0` reorders CUDA ordinals; ordinal 0 is NVML device
/// 1, so its allocations count against region index 1 and limit 1. Needs the simulated driver to
/// honour CUDA_VISIBLE_DEVICES (it must, like the real driver).
#[test]
fn cuda_visible_devices_reorder_maps_ordinal_0_to_limit_1() {
    let sb = Sandbox::new("views_cvd");
    let path = sb.region();
    let mut c = client(&sb)
        .env("VGPU_SIM_DEVICES", 2)
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "100m")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "200m")
        .env("CUDA_VISIBLE_DEVICES", "1,0")
        .spawn();
    c.ok("init");
    c.ok("nvml_init");
    let cu0 = c.ok("cuda_uuid 0").s("uuid").to_string();
    let nv1 = c.ok("nvml_uuid 1").s("uuid").to_string();
    assert!(
        cu0.eq_ignore_ascii_case(&nv1),
        "the simulated driver ignores CUDA_VISIBLE_DEVICES=1,0: CUDA ordinal 0 is {cu0}, NVML device 1 is {nv1} \
         (see target/memory-findings.txt)"
    );
    c.ok("ctx 0");
    assert_eq!(c.ok("meminfo").u64("total"), 200 * MIB);
    assert_eq!(c.ok("totalmem 0").u64("bytes"), 200 * MIB);
    assert_eq!(c.ok("totalmem 1").u64("bytes"), 100 * MIB);
    c.ok(&format!("alloc {}", 150 * MIB));
    let s = locked_snap(&path);
    assert_eq!(s.used_of(c.pid, 1).data, 150 * MIB);
    assert_eq!(s.used_of(c.pid, 0), DevMem::default());
    assert_views(&mut c, &path, 0, 1, PHYS, "ordinal 0 = NVML 1");
    c.ok("ctx 1");
    assert_eq!(c.cmd(&format!("alloc {}", 150 * MIB)).rc(), CUDA_ERROR_OUT_OF_MEMORY, "ordinal 1 = NVML 0 has 100m");
    c.exit();
}

/// In a PID namespace NVML's own list carries host PIDs; the container's view lists its processes
/// by the PIDs they have inside the container (what `nvidia-smi` users there can act on).
#[test]
fn process_list_uses_container_pids_under_a_pid_namespace() {
    let sb = Sandbox::new("views_pidns");
    let path = sb.region();
    let off = 100_000u32;
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "256m")
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("VGPU_SIM_PID_OFFSET", off)
        .spawn();
    c.init_ctx(0);
    c.ok("nvml_init");
    c.ok(&format!("alloc {}", 10 * MIB));
    let total = locked_snap(&path).used_of(c.pid, 0).total;
    for ver in 1..=3 {
        let procs = c.ok(&format!("nvml_procs 0 {ver}")).procs();
        assert_eq!(procs, vec![(c.pid, total)], "v{ver}");
    }
    // Without the shim, the same driver lists the host PID.
    let mut obs = client(&sb).shim(false).env("VGPU_SIM_PID_OFFSET", off).spawn();
    obs.ok("nvml_init");
    let raw = obs.ok("nvml_procs 0 3").procs();
    assert!(raw.iter().any(|(p, _)| *p == c.pid + off), "host view {raw:?}");
    obs.exit();
    c.exit();
}
