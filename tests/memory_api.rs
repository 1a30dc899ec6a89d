//! Memory-limit proof, per-API: every counted allocation path under a memory limit, with the exact
//! count read back from the region file at the contract's byte offsets (`used[0].total` at +32 and
//! the category fields `context_size` +0 / `data_size` +16 of `device_memory_t`), the error at the
//! limit (CUDA_ERROR_OUT_OF_MEMORY, nothing changed) and the release path.

mod common;
mod memory_support;

use common::Sandbox;
use memory_support::*;

const LIMIT: u64 = 64 * MIB;
const CTX: u64 = 8 * MIB;

/// A client with `CUDA_DEVICE_MEMORY_LIMIT=64m`, contexts costing 8 MiB, its primary context on
/// device 0 current.
fn start(sb: &Sandbox) -> Client {
    let mut c = client(sb).env("CUDA_DEVICE_MEMORY_LIMIT", "64m").env("VGPU_SIM_CTX_MIB", 8).spawn();
    c.init_ctx(0);
    c
}

fn used(sb: &Sandbox, c: &Client) -> DevMem {
    locked_snap(&sb.region()).used_of(c.pid, 0)
}

/// After the context: exactly the context charge, nothing else.
#[track_caller]
fn assert_baseline(sb: &Sandbox, c: &Client) {
    let u = used(sb, c);
    assert_eq!(u, DevMem { context: CTX, total: CTX, ..Default::default() }, "after the primary context");
}

#[track_caller]
fn assert_data(sb: &Sandbox, c: &Client, data: u64) {
    let s = locked_snap(&sb.region());
    let u = s.used_of(c.pid, 0);
    assert_eq!((u.data, u.context, u.total), (data, CTX, CTX + data), "slot of {}: {u:?}", c.pid);
    assert_eq!(s.container_total(0), CTX + data, "container total");
}

/// A refused request returns OUT_OF_MEMORY and changes nothing in the region.
#[track_caller]
fn assert_refused(sb: &Sandbox, c: &mut Client, cmd: &str) {
    let before = locked_snap(&sb.region()).slot_of(c.pid).unwrap();
    let r = c.cmd(cmd);
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "`{cmd}` over the limit: `{}`", r.line);
    let after = locked_snap(&sb.region()).slot_of(c.pid).unwrap();
    assert_eq!(before.used, after.used, "a refusal changed the counts (`{cmd}`)");
}

#[test]
fn mem_alloc_v2_exact_count_limit_and_free() {
    let sb = Sandbox::new("mem_alloc_v2");
    let mut c = start(&sb);
    assert_baseline(&sb, &c);

    let a = 5 * MIB + 3;
    let id_a = c.ok(&format!("alloc {a}")).id();
    assert_data(&sb, &c, a);

    // Exactly up to the limit is allowed …
    let rest = LIMIT - CTX - a;
    let id_b = c.ok(&format!("alloc {rest}")).id();
    assert_data(&sb, &c, a + rest);
    assert_eq!(locked_snap(&sb.region()).container_total(0), LIMIT);
    // … one byte more is not.
    assert_refused(&sb, &mut c, "alloc 1");
    assert_refused(&sb, &mut c, &format!("alloc {}", 1u64 << 40));

    // The free gives back exactly what was counted: `a` fits again, `a + 1` does not.
    c.ok(&format!("free {id_a}"));
    assert_data(&sb, &c, rest);
    assert_refused(&sb, &mut c, &format!("alloc {}", a + 1));
    let id_c = c.ok(&format!("alloc {a}")).id();
    assert_data(&sb, &c, LIMIT - CTX);

    c.ok(&format!("free {id_b}"));
    c.ok(&format!("free {id_c}"));
    assert_data(&sb, &c, 0);
    c.exit();
}

#[test]
fn mem_alloc_pitch_counts_pitch_times_height() {
    let sb = Sandbox::new("mem_pitch");
    let mut c = start(&sb);
    assert_baseline(&sb, &c);

    let (w, h) = (1000u64, 37u64);
    let r = c.ok(&format!("pitch {w} {h} 4"));
    let pitch = r.u64("pitch");
    assert!(pitch >= w, "pitch {pitch} < width {w}");
    assert_data(&sb, &c, pitch * h);

    // A second, differently shaped one adds its own pitch × height.
    let r2 = c.ok("pitch 4097 3 16");
    let pitch2 = r2.u64("pitch");
    assert!(pitch2 >= 4097);
    assert_data(&sb, &c, pitch * h + pitch2 * 3);

    // The driver refusing (element size 3 is invalid) rolls the reservation back.
    let r3 = c.cmd("pitch 1000 10 3");
    assert_ne!(r3.rc(), CUDA_SUCCESS, "invalid element size accepted: {}", r3.line);
    assert_data(&sb, &c, pitch * h + pitch2 * 3);

    // Over the limit: 1 MiB rows × 100.
    assert_refused(&sb, &mut c, &format!("pitch {} 100 4", MIB));

    c.ok(&format!("free {}", r.id()));
    assert_data(&sb, &c, pitch2 * 3);
    c.ok(&format!("free {}", r2.id()));
    assert_data(&sb, &c, 0);
    c.exit();
}

#[test]
fn mem_alloc_managed_counts_full_size() {
    let sb = Sandbox::new("mem_managed");
    let mut c = start(&sb);
    assert_baseline(&sb, &c);

    let n = 7 * MIB + 5;
    let id = c.ok(&format!("managed {n} 1")).id();
    assert_data(&sb, &c, n);
    // Invalid flags: the driver fails, the reservation is rolled back.
    assert_ne!(c.cmd("managed 4096 0").rc(), CUDA_SUCCESS);
    assert_data(&sb, &c, n);
    assert_refused(&sb, &mut c, &format!("managed {} 1", LIMIT - CTX - n + 1));
    let id2 = c.ok(&format!("managed {} 2", LIMIT - CTX - n)).id();
    assert_data(&sb, &c, LIMIT - CTX);
    c.ok(&format!("free {id}"));
    c.ok(&format!("free {id2}"));
    assert_data(&sb, &c, 0);
    c.exit();
}

#[test]
fn vmm_create_device_location_counted_until_release() {
    let sb = Sandbox::new("mem_vmm");
    let mut c = start(&sb);
    assert_baseline(&sb, &c);

    let id = c.ok(&format!("vmm {} 0 1", 4 * MIB)).id();
    assert_data(&sb, &c, 4 * MIB);
    // Mapping and unmapping a counted handle does not count it again.
    c.ok(&format!("vmm_map {id}"));
    assert_data(&sb, &c, 4 * MIB);
    c.ok(&format!("vmm_unmap {id}"));
    assert_data(&sb, &c, 4 * MIB);
    // Host location: not device memory, never counted (the simulated driver refuses it anyway).
    let h = c.cmd(&format!("vmm {} 0 2", 2 * MIB));
    assert_data(&sb, &c, 4 * MIB);
    if h.rc() == CUDA_SUCCESS {
        c.ok(&format!("vmm_release {}", h.id()));
    }
    // Over the limit.
    assert_refused(&sb, &mut c, &format!("vmm {} 0 1", 54 * MIB));
    let id2 = c.ok(&format!("vmm {} 0 1", 52 * MIB)).id();
    assert_data(&sb, &c, 56 * MIB);
    c.ok(&format!("vmm_release {id}"));
    c.ok(&format!("vmm_release {id2}"));
    assert_data(&sb, &c, 0);
    c.exit();
}

/// CUDA frees a physical allocation only when it is released AND unmapped; release-then-keep-the-
/// mapping is a common pattern (the handle is not needed once mapped). Until the last unmap the
/// memory exists and must stay counted, otherwise create → map → release repeats past the limit.
#[test]
fn vmm_release_while_mapped_stays_counted_until_unmap() {
    let sb = Sandbox::new("mem_vmm_mapped");
    let mut c = start(&sb);
    let id = c.ok(&format!("vmm {} 0 1", 32 * MIB)).id();
    c.ok(&format!("vmm_map {id}"));
    c.ok(&format!("vmm_release {id}"));
    // The mapping keeps the 32 MiB alive on the device.
    let u = used(&sb, &c);
    assert_eq!(u.data, 32 * MIB, "memory still mapped after cuMemRelease is no longer counted: {u:?}");
    // So a second 32 MiB must not fit under the 64 MiB limit (8 MiB context + 32 MiB mapped).
    let r = c.cmd(&format!("vmm {} 0 1", 32 * MIB));
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "limit bypassed through release-while-mapped: {}", r.line);
    c.ok(&format!("vmm_unmap {id}"));
    assert_data(&sb, &c, 0);
    c.exit();
}

#[test]
fn stream_ordered_allocations_counted_until_free_async_from_any_thread() {
    let sb = Sandbox::new("mem_async");
    let mut c = start(&sb);
    assert_baseline(&sb, &c);

    let a = 3 * MIB + 1;
    let id_a = c.ok(&format!("async {a}")).id();
    assert_data(&sb, &c, a);
    c.ok("pool_create 0");
    let b = 2 * MIB + 7;
    let id_b = c.ok(&format!("pool_async {b}")).id();
    assert_data(&sb, &c, a + b);
    let id_c = c.ok(&format!("async {}", MIB)).id();
    assert_data(&sb, &c, a + b + MIB);

    // The error at the limit is OUT_OF_MEMORY (the incumbent returned -1 here), on both paths.
    let rest = LIMIT - CTX - a - b - MIB;
    assert_refused(&sb, &mut c, &format!("async {}", rest + 1));
    assert_refused(&sb, &mut c, &format!("pool_async {}", rest + 1));

    // Free on the allocating thread's stream …
    c.ok(&format!("free_async {id_a}"));
    assert_data(&sb, &c, b + MIB);
    // … and from another thread, on another stream.
    let r = c.ok(&format!("free_async_thread {id_b}"));
    assert_eq!((r.i64("rc_ctx"), r.i64("rc_stream"), r.i64("rc_sync")), (0, 0, 0), "{}", r.line);
    assert_data(&sb, &c, MIB);
    let r = c.ok(&format!("free_async_thread {id_c}"));
    assert_eq!(r.i64("rc_sync"), 0);
    assert_data(&sb, &c, 0);
    c.ok("sync");
    assert_data(&sb, &c, 0);
    c.exit();
}

const U8: u32 = 0x01;
const HALF: u32 = 0x10;
const FLOAT: u32 = 0x20;
const LAYERED: u32 = 0x01;

/// README formula: width × height × depth × channels × element size, all mip levels (each level
/// halves every dimension, min 1; layers of a layered array do not shrink).
fn mip_bytes(w: u64, h: u64, d: u64, elem: u64, ch: u64, layered: bool, levels: u32) -> u64 {
    (0..levels)
        .map(|l| {
            let lw = (w >> l).max(1);
            let lh = if h == 0 { 1 } else { (h >> l).max(1) };
            let ld = if d == 0 {
                1
            } else if layered {
                d
            } else {
                (d >> l).max(1)
            };
            lw * lh * ld * elem * ch
        })
        .sum()
}

#[test]
fn arrays_and_mipmaps_counted_by_formula_until_destroy() {
    let sb = Sandbox::new("mem_arrays");
    let mut c = start(&sb);
    assert_baseline(&sb, &c);
    let mut expect = 0u64;
    let mut ids: Vec<(String, i64, u64)> = Vec::new();
    let cases: Vec<(String, u64, &str)> = vec![
        (format!("array 1000 10 {FLOAT} 4"), 1000 * 10 * 4 * 4, "array_destroy"),
        (format!("array 4096 0 {U8} 1"), 4096, "array_destroy"),
        (format!("array3d 64 32 16 {HALF} 2 0"), 64 * 32 * 16 * 2 * 2, "array_destroy"),
        (format!("mipmap 256 256 0 {FLOAT} 4 0 4"), mip_bytes(256, 256, 0, 4, 4, false, 4), "mipmap_destroy"),
        (format!("mipmap 64 64 64 {U8} 1 0 3"), mip_bytes(64, 64, 64, 1, 1, false, 3), "mipmap_destroy"),
        (format!("mipmap 128 128 6 {FLOAT} 1 {LAYERED} 2"), mip_bytes(128, 128, 6, 4, 1, true, 2), "mipmap_destroy"),
    ];
    // Sanity of the formula itself.
    assert_eq!(mip_bytes(256, 256, 0, 4, 4, false, 4), 16 * (65536 + 16384 + 4096 + 1024));
    assert_eq!(mip_bytes(128, 128, 6, 4, 1, true, 2), (128 * 128 * 6 + 64 * 64 * 6) * 4);
    for (cmd, bytes, destroy) in &cases {
        let r = c.ok(cmd);
        expect += bytes;
        let u = used(&sb, &c);
        assert_eq!(u.data, expect, "after `{cmd}` (expected +{bytes}): {u:?}");
        assert_eq!(u.total, CTX + expect);
        ids.push((destroy.to_string(), r.id(), *bytes));
    }
    // Over the limit: 8192 × 8192 × 4 channels × float = 1 GiB.
    assert_refused(&sb, &mut c, &format!("array 8192 8192 {FLOAT} 4"));
    assert_refused(&sb, &mut c, &format!("array3d 1024 1024 64 {FLOAT} 1 0"));
    assert_refused(&sb, &mut c, &format!("mipmap 4096 4096 0 {FLOAT} 4 0 2"));
    for (destroy, id, bytes) in ids {
        c.ok(&format!("{destroy} {id}"));
        expect -= bytes;
        assert_data(&sb, &c, expect);
    }
    assert_data(&sb, &c, 0);
    c.exit();
}

/// What a process costs on device 0 according to NVML without the shim (the driver's truth).
fn nvml_truth(sb: &Sandbox, pid: u32) -> Option<u64> {
    let mut obs = client(sb).shim(false).spawn();
    obs.ok("nvml_init");
    let r = obs.ok("nvml_procs 0 3");
    obs.exit();
    r.procs().into_iter().find(|(p, _)| *p == pid).map(|(_, u)| u)
}

#[test]
fn context_charge_equals_nvml_and_is_given_back() {
    let sb = Sandbox::new("mem_ctx");
    let ctx = 40 * MIB;
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("VGPU_SIM_CTX_MIB", 40)
        .env("VGPU_SIM_LEGACY_CTX", 1)
        .spawn();
    c.ok("init");
    // Attached at cuInit, nothing charged yet.
    assert_eq!(used(&sb, &c), DevMem::default());
    c.ok("ctx 0");
    let u = used(&sb, &c);
    assert_eq!(u, DevMem { context: ctx, total: ctx, ..Default::default() }, "primary context charge");
    assert_eq!(nvml_truth(&sb, c.pid), Some(u.context), "context_size must equal NVML's view of the process");

    // With data (a multiple of the driver's 2 MiB granule) the region's total is NVML's number,
    // and NVML minus data is the context charge.
    let id = c.ok(&format!("alloc {}", 4 * MIB)).id();
    let u = used(&sb, &c);
    let truth = nvml_truth(&sb, c.pid).expect("process listed by NVML");
    assert_eq!((u.context, u.data, u.total), (ctx, 4 * MIB, ctx + 4 * MIB));
    assert_eq!(truth - u.data, u.context);
    c.ok(&format!("free {id}"));

    // Last primary release gives the charge back; a created context is charged and destroyed.
    c.ok("ctx_release 0");
    assert_eq!(used(&sb, &c), DevMem::default(), "after the last primary release");
    let cid = c.ok("ctx_create 0").id();
    let u = used(&sb, &c);
    assert_eq!((u.context, u.total), (ctx, ctx), "created context");
    assert_eq!(nvml_truth(&sb, c.pid), Some(ctx));
    c.ok(&format!("ctx_destroy {cid}"));
    assert_eq!(used(&sb, &c), DevMem::default(), "after cuCtxDestroy");
    // The 2000 ABIs (the parameters of _v2), as cuGetProcAddress hands them out: the same.
    let cid = c.ok("ctx_create_at 0 2000").id();
    let u = used(&sb, &c);
    assert_eq!((u.context, u.total), (ctx, ctx), "context created through cuCtxCreate @ 2000");
    c.ok(&format!("ctx_destroy_at {cid} 2000"));
    assert_eq!(used(&sb, &c), DevMem::default(), "after cuCtxDestroy @ 2000");
    // Retain twice, release once: still charged once; reset gives it back.
    c.ok("ctx 0");
    c.ok("ctx 0");
    assert_eq!(used(&sb, &c).context, ctx);
    c.ok("ctx_release 0");
    assert_eq!(used(&sb, &c).context, ctx, "one reference left");
    c.ok("ctx_reset 0");
    assert_eq!(used(&sb, &c), DevMem::default(), "after cuDevicePrimaryCtxReset");
    c.exit();
}

/// In a real container NVML reports host PIDs, never the container's: the context charge (and the
/// slot's `hostpid`) must still be found. The simulated GPU models the namespace with
/// VGPU_SIM_PID_OFFSET.
#[test]
fn context_charged_when_nvml_reports_host_pids() {
    let sb = Sandbox::new("mem_ctx_ns");
    let off = 100_000u32;
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("VGPU_SIM_CTX_MIB", 40)
        .env("VGPU_SIM_PID_OFFSET", off)
        .spawn();
    c.init_ctx(0);
    let s = locked_snap(&sb.region());
    let slot = s.slot_of(c.pid).expect("slot");
    assert_eq!(slot.used[0].context, 40 * MIB, "context not charged under a PID namespace: {:?}", slot.used[0]);
    assert_eq!(slot.hostpid, (c.pid + off) as i32, "hostpid not detected");
    c.exit();
}

#[test]
fn host_allocations_are_not_counted() {
    let sb = Sandbox::new("mem_host");
    let mut c = start(&sb);
    assert_baseline(&sb, &c);
    // Each is twice the device limit: counted, they would be refused.
    let big = 2 * LIMIT;
    let h1 = c.ok(&format!("host_alloc {big}")).id();
    let h2 = c.ok(&format!("host_alloc_flags {big} 0")).id();
    let h3 = c.ok(&format!("host_register {big}")).id();
    assert_baseline(&sb, &c);
    // Device allocations are still limited as before.
    let d = c.ok(&format!("alloc {}", LIMIT - CTX)).id();
    assert_refused(&sb, &mut c, "alloc 1");
    for h in [h1, h2, h3] {
        c.ok(&format!("host_free {h}"));
    }
    c.ok(&format!("free {d}"));
    assert_baseline(&sb, &c);
    c.exit();
}

#[test]
fn free_of_unknown_pointer_reaches_driver_and_uncounts_nothing() {
    let sb = Sandbox::new("mem_unknown_free");
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "64m")
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("VGPU_SIM_COUNT_FILE", sb.counts_file().display())
        .spawn();
    c.init_ctx(0);
    let id = c.ok(&format!("alloc {}", 3 * MIB)).id();
    assert_data(&sb, &c, 3 * MIB);
    // Never allocated: the driver's answer (INVALID_VALUE) comes back unchanged, nothing uncounted.
    let r = c.cmd("free_ptr deadbeef000");
    assert_eq!(r.rc(), CUDA_ERROR_INVALID_VALUE, "{}", r.line);
    assert_data(&sb, &c, 3 * MIB);
    // A pointer inside a counted allocation (not its base) is not that allocation.
    let p = u64::from_str_radix(c.cmd("alloc 4096").s("ptr"), 16).unwrap();
    assert_data(&sb, &c, 3 * MIB + 4096);
    let r = c.cmd(&format!("free_ptr {:x}", p + 16));
    assert_eq!(r.rc(), CUDA_ERROR_INVALID_VALUE, "{}", r.line);
    assert_data(&sb, &c, 3 * MIB + 4096);
    // Double free: the second one is the driver's error and uncounts nothing.
    c.ok(&format!("free {id}"));
    assert_data(&sb, &c, 4096);
    let r = c.cmd(&format!("free {id}"));
    assert_eq!(r.rc(), CUDA_ERROR_INVALID_VALUE, "{}", r.line);
    assert_data(&sb, &c, 4096);
    c.ok(&format!("free_ptr {p:x}"));
    assert_data(&sb, &c, 0);
    c.exit();
    // Every free reached the simulated driver (5 calls: unknown, interior, valid, double, valid).
    let n = sb.counts().get("cuMemFree_v2").copied().unwrap_or(0);
    assert_eq!(n, 5, "cuMemFree_v2 calls seen by the driver: {:?}", sb.counts());
}

#[test]
fn driver_out_of_memory_rolls_back_and_views_use_physical_total() {
    let sb = Sandbox::new("mem_rollback");
    // Limit above the (256 MiB) device: the driver, not the limit, refuses.
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("VGPU_SIM_MEM_MIB", 256)
        .spawn();
    c.init_ctx(0);
    assert_baseline(&sb, &c);
    let r = c.cmd(&format!("alloc {}", 300 * MIB));
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "{}", r.line);
    assert_baseline(&sb, &c);
    let r = c.cmd(&format!("managed {} 1", 300 * MIB));
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY);
    assert_baseline(&sb, &c);
    let id = c.ok(&format!("alloc {}", 100 * MIB)).id();
    assert_data(&sb, &c, 100 * MIB);
    // total = min(limit, physical).
    let m = c.ok("meminfo");
    assert_eq!(m.u64("total"), 256 * MIB);
    assert_eq!(c.ok("totalmem 0").u64("bytes"), 256 * MIB);
    c.ok(&format!("free {id}"));
    c.exit();
}

/// `cuDevicePrimaryCtxReset` (what `cudaDeviceReset` does) and the last release destroy the
/// context, and the driver frees every allocation made in it: those bytes must leave the count,
/// or the container loses that much of its limit until the process exits.
#[test]
fn context_teardown_uncounts_the_allocations_it_freed() {
    let sb = Sandbox::new("mem_ctx_teardown");
    let mut c = start(&sb);
    c.ok(&format!("alloc {}", 20 * MIB));
    c.ok(&format!("async {}", 2 * MIB));
    c.ok(&format!("array 1024 1024 {FLOAT} 1"));
    assert_data(&sb, &c, 26 * MIB);
    c.ok("ctx_reset 0");
    let u = used(&sb, &c);
    assert_eq!(u, DevMem::default(), "allocations freed by the context reset are still counted");
    // And the limit is fully available again.
    c.ok("ctx 0");
    c.ok(&format!("alloc {}", LIMIT - CTX));

    // Same for a created context destroyed with live allocations.
    let sb2 = Sandbox::new("mem_ctx_destroy");
    let mut c2 = client(&sb2).env("CUDA_DEVICE_MEMORY_LIMIT", "64m").env("VGPU_SIM_CTX_MIB", 8).spawn();
    c2.ok("init");
    let cid = c2.ok("ctx_create 0").id();
    c2.ok(&format!("alloc {}", 16 * MIB));
    c2.ok(&format!("ctx_destroy {cid}"));
    let u = locked_snap(&sb2.region()).used_of(c2.pid, 0);
    assert_eq!(u, DevMem::default(), "allocations freed by cuCtxDestroy are still counted");
    c.exit();
    c2.exit();
}

/// `CUDA_OVERSUBSCRIBE=true`: an allocation beyond the limit is served from managed memory (host
/// RAM preferred) instead of failing; it is not counted against the limit, and freeing it leaves
/// the counts untouched. The driver's per-process figure includes it (the simulated one does), so
/// neither the periodic reconciliation nor a new context's measurement may charge it. Without the
/// variable the same request is refused.
#[test]
fn oversubscribe_serves_the_excess_from_managed_memory() {
    let sb = Sandbox::new("oversubscribe");
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "64m")
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("CUDA_OVERSUBSCRIBE", "true")
        .spawn();
    c.init_ctx(0);
    let a = c.ok(&format!("alloc {}", 40 * MIB)).id();
    assert_data(&sb, &c, 40 * MIB);
    // 40 MiB more does not fit under 64 MiB: served anyway, not counted.
    let b = c.ok(&format!("alloc {}", 40 * MIB)).id();
    assert_data(&sb, &c, 40 * MIB);
    // Past two reconciliation periods (250 ms each): still not counted.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_data(&sb, &c, 40 * MIB);
    // A context created beside the spill is charged what it costs (nothing more on the simulated
    // driver, whose device footprint exists once per process), not the spill with it.
    let cid = c.ok("ctx_create 0").id();
    let u = used(&sb, &c);
    assert_eq!((u.context, u.data), (CTX, 40 * MIB), "created context beside a spill: {u:?}");
    c.ok(&format!("ctx_destroy {cid}"));
    c.ok("ctx 0");
    assert_data(&sb, &c, 40 * MIB);
    c.ok(&format!("free {b}"));
    assert_data(&sb, &c, 40 * MIB);
    c.ok(&format!("free {a}"));
    assert_data(&sb, &c, 0);
    c.exit();

    let sb = Sandbox::new("no-oversubscribe");
    let mut c = start(&sb);
    c.ok(&format!("alloc {}", 40 * MIB));
    assert_refused(&sb, &mut c, &format!("alloc {}", 40 * MIB));
    c.exit();
}
