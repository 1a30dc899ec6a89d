//! The memory paths CUDA 12.4–13.x added, each counted as a user expects (docs/cuda13.md), on a
//! simulated 13.5 driver: pools by location (host pools charge nothing, device / locality-domain /
//! managed pools count, `cuMemAllocAsync` follows the device's current pool), green contexts
//! (charged as contexts, their allocations counted on their device), `cuMemCreate` at
//! locality-domain and host locations, and the views under every kind of current context.

mod common;
mod memory_support;

use common::Sandbox;
use memory_support::*;

const GIB: u64 = 1 << 30;

/// A client under a `limit_mib` limit on a 13.5 driver whose contexts cost `ctx_mib` (and green
/// contexts `green_mib` more each), its primary context on device 0 current.
fn start(sb: &Sandbox, limit_mib: u64, ctx_mib: u64, green_mib: u64) -> Client {
    start_slow(sb, limit_mib, ctx_mib, green_mib, 0)
}

/// [`start`] with green context creations that take `create_ms` with their memory held.
fn start_slow(sb: &Sandbox, limit_mib: u64, ctx_mib: u64, green_mib: u64, create_ms: u64) -> Client {
    let mut c = client(sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", format!("{limit_mib}m"))
        .env("VGPU_SIM_CTX_MIB", ctx_mib)
        .env("VGPU_SIM_GREEN_CTX_MIB", green_mib)
        .env("VGPU_SIM_GREEN_CTX_CREATE_MS", create_ms)
        .env("VGPU_SIM_DRIVER_VERSION", 13050)
        .spawn();
    c.init_ctx(0);
    c
}

fn used(sb: &Sandbox, c: &Client) -> DevMem {
    locked_snap(&sb.region()).used_of(c.pid, 0)
}

/// What the simulated driver holds for the client on device 0 (its NVML process entry).
fn device_held(c: &mut Client) -> u64 {
    c.ok("nvml_init");
    let r = c.ok("nvml_procs 0 3");
    r.procs().into_iter().find(|p| p.0 == c.pid).map_or(0, |p| p.1)
}

/// `cmd` (an allocation) must succeed; its pointer.
#[track_caller]
fn ptr(c: &mut Client, cmd: &str) -> String {
    c.ok(cmd).s("ptr").to_string()
}

// ---- pools ------------------------------------------------------------------------------------

/// The false OOM: the default pinned pool of the host location, 1.5 GiB from it under a
/// 1 GiB limit. It is host memory: allowed, and nothing is charged to the device.
#[test]
fn host_default_pool_is_not_charged() {
    let sb = Sandbox::new("m13_host_pool");
    let mut c = start(&sb, 1024, 8, 0);
    let base = used(&sb, &c);

    c.ok("pool13_default 2 0 1"); // {HOST, 0}, PINNED
    let big = ptr(&mut c, &format!("pool13_async {}", 3 * GIB / 2));
    assert_eq!(used(&sb, &c).data, base.data, "a host-pool allocation was charged");
    let small = ptr(&mut c, &format!("pool13_async {}", 4 * MIB));
    assert_eq!(used(&sb, &c).data, base.data, "a small host-pool allocation was charged");
    c.ok(&format!("free_async13 {big}"));
    c.ok(&format!("free_async13 {small}"));
    c.ok("sync");
    assert_eq!(used(&sb, &c).data, base.data);

    // A created pool at a host-NUMA location: the same.
    c.ok("pool13_create 3 0 1");
    let p = ptr(&mut c, &format!("pool13_async {}", 2 * GIB));
    assert_eq!(used(&sb, &c).data, base.data, "a host-NUMA pool allocation was charged");
    c.ok(&format!("free_async13 {p}"));
    c.ok("pool13_destroy");
    c.exit();
}

/// Device and managed pools still count, to the byte, and are refused at the limit.
#[test]
fn device_and_managed_pools_count() {
    let sb = Sandbox::new("m13_dev_pool");
    let mut c = start(&sb, 64, 8, 0);
    let base = used(&sb, &c);
    for (what, cmd) in [
        ("device pool", "pool13_create 1 0 1"),
        ("default device pool", "pool13_default 1 0 1"),
        ("managed pool, no location", "pool13_default 0 0 2"),
        ("managed pool at the host", "pool13_default 2 0 2"),
    ] {
        c.ok(cmd);
        let p = ptr(&mut c, &format!("pool13_async {}", 5 * MIB));
        assert_eq!(used(&sb, &c).data, base.data + 5 * MIB, "{what}: not counted");
        let r = c.cmd(&format!("pool13_async {}", 64 * MIB));
        assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "{what}: over the limit not refused: {}", r.line);
        c.ok(&format!("free_async13 {p}"));
        assert_eq!(used(&sb, &c).data, base.data, "{what}: free not uncounted");
        if cmd.starts_with("pool13_create") {
            c.ok("pool13_destroy");
        }
    }
    c.exit();
}

/// `cuMemAllocAsync` allocates from the device's current pool: set to a host pool (with
/// `cuMemSetMemPool` or `cuDeviceSetMemPool`) nothing is charged; set back, it counts again.
#[test]
fn alloc_async_follows_the_current_pool() {
    let sb = Sandbox::new("m13_current_pool");
    let mut c = start(&sb, 1024, 8, 0);
    let base = used(&sb, &c);
    let big = 3 * GIB / 2;

    assert_eq!(c.cmd(&format!("async13 {big}")).rc(), CUDA_ERROR_OUT_OF_MEMORY, "device pool: 1.5 GiB fits 1 GiB?");

    for set in ["pool13_set 0", "pool13_device_set 0"] {
        c.ok("pool13_default 2 0 1");
        c.ok(set);
        let p = ptr(&mut c, &format!("async13 {big}"));
        assert_eq!(used(&sb, &c).data, base.data, "`{set}` to a host pool: cuMemAllocAsync charged");
        c.ok(&format!("free_async13 {p}"));

        // Back to the device's default pool: counted and limited again.
        c.ok("pool13_default 1 0 1");
        c.ok(set);
        assert_eq!(c.cmd(&format!("async13 {big}")).rc(), CUDA_ERROR_OUT_OF_MEMORY, "`{set}` back to the device");
        let p = ptr(&mut c, &format!("async13 {}", 3 * MIB));
        assert_eq!(used(&sb, &c).data, base.data + 3 * MIB);
        c.ok(&format!("free_async13 {p}"));
    }
    c.exit();
}

/// The allocation path asks for no pool while none was made current: on a 13.x driver (which has
/// `cuMemSetMemPool`) `cuMemAllocAsync` costs one driver call, not a `cuDeviceGetMemPool` lookup
/// each; `cuMemSetMemPool` itself is hooked, so the lookup starts with it
/// (`alloc_async_follows_the_current_pool` then shows it is followed).
#[test]
fn alloc_async_asks_for_no_pool_until_one_is_made_current() {
    const N: u64 = 200;
    let sb = Sandbox::new("m13_no_pool_lookup");
    let lookups = |sb: &Sandbox| sb.counts().get("cuDeviceGetMemPool").copied().unwrap_or(0);
    let spawn = |sb: &Sandbox| {
        let mut c = client(sb)
            .env("CUDA_DEVICE_MEMORY_LIMIT", "1024m")
            .env("VGPU_SIM_DRIVER_VERSION", 13050)
            .env("VGPU_SIM_COUNT_FILE", sb.counts_file().display())
            .spawn();
        c.init_ctx(0);
        c
    };
    let mut c = spawn(&sb);
    for _ in 0..N {
        let p = ptr(&mut c, &format!("async13 {MIB}"));
        c.ok(&format!("free_async13 {p}"));
    }
    c.exit();
    // The periodic reconciliation may ask now and then (at most every 250 ms); never per call.
    let quiet = lookups(&sb);
    assert!(quiet < N / 2, "{quiet} cuDeviceGetMemPool calls for {N} cuMemAllocAsync: {:?}", sb.counts());

    sb.reset_counts();
    let mut c = spawn(&sb);
    c.ok("pool13_default 1 0 1");
    c.ok("pool13_set 0");
    for _ in 0..N {
        let p = ptr(&mut c, &format!("async13 {MIB}"));
        c.ok(&format!("free_async13 {p}"));
    }
    c.exit();
    assert_eq!(sb.counts().get("cuMemSetMemPool"), Some(&1), "{:?}", sb.counts());
    // Only the hook can have told the allocation path that a pool was made current.
    assert!(lookups(&sb) >= N, "after cuMemSetMemPool each allocation looks its pool up: {:?}", sb.counts());
}

// ---- green contexts ---------------------------------------------------------------------------

/// The limit escape: primary + two green contexts at 256 MiB each under 1 GiB. Green
/// contexts are charged as contexts, allocations in one count on its device, the device never
/// holds more than the limit for the process, and destroying a green context gives back its
/// charge and what was allocated in it.
#[test]
fn green_contexts_are_charged_and_limited() {
    let sb = Sandbox::new("m13_green");
    let mut c = start(&sb, 1024, 256, 256);
    assert_eq!(used(&sb, &c).context, 256 * MIB, "primary context");

    let g0 = c.ok("green_create 0 16").i64("gid");
    let g1 = c.ok("green_create 0 16").i64("gid");
    let u = used(&sb, &c);
    assert_eq!(u.context, 768 * MIB, "primary + two green contexts: {u:?}");

    c.ok(&format!("green_current {g0}"));
    let mut held = Vec::new();
    loop {
        let r = c.cmd(&format!("alloc13 {}", 64 * MIB));
        if r.rc() != CUDA_SUCCESS {
            assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "{}", r.line);
            break;
        }
        held.push(r.s("ptr").to_string());
        assert!(held.len() <= 16, "allocations in a green context never refused");
    }
    let u = used(&sb, &c);
    assert_eq!(u.data, 256 * MIB, "data allowed next to three contexts: {u:?}");
    assert_eq!(u.total, 1024 * MIB);
    let dev = device_held(&mut c);
    assert!(dev <= 1024 * MIB, "the device holds {} MiB for the process, over the 1 GiB limit", dev >> 20);

    // Destroying the green context the allocations were made in gives back both.
    c.ok(&format!("green_destroy {g0}"));
    let u = used(&sb, &c);
    assert_eq!((u.context, u.data), (512 * MIB, 0), "after destroying green context {g0}: {u:?}");
    c.ok(&format!("green_destroy {g1}"));
    assert_eq!(used(&sb, &c).context, 256 * MIB);
    // The primary context again: its room is the rest of the limit.
    c.ok("ctx 0");
    let p = ptr(&mut c, &format!("alloc13 {}", 768 * MIB));
    c.ok(&format!("free13 {p}"));
    c.exit();
}

/// A green context that does not fit under the limit is refused and undone.
#[test]
fn green_context_over_the_limit_is_refused() {
    let sb = Sandbox::new("m13_green_refused");
    let mut c = start(&sb, 500, 256, 256);
    let before = used(&sb, &c);
    let r = c.cmd("green_create 0 16");
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "{}", r.line);
    assert_eq!(used(&sb, &c), before, "a refused green context changed the counts");
    assert!(device_held(&mut c) <= 500 * MIB, "the refused green context still holds device memory");
    c.exit();
}

/// A slow creation: the periodic reconciliation (every 250 ms) sees the driver hold the green
/// context's memory before its charge is refused, and charges it as driver-held. The refusal gives
/// that back at once: the counts are what they were, not over the limit until the next tick.
#[test]
fn green_context_refused_after_the_reconciliation_saw_it() {
    let sb = Sandbox::new("m13_green_refused_slow");
    let mut c = start_slow(&sb, 500, 256, 256, 700);
    let before = used(&sb, &c);
    let r = c.cmd("green_create 0 16");
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "{}", r.line);
    assert_eq!(used(&sb, &c), before, "a refused green context changed the counts");
    c.exit();
}

// ---- cuMemCreate locations --------------------------------------------------------------------

/// A locality-domain location is device memory: counted and limited. Host locations are not and
/// are never refused, whatever their size.
#[test]
fn mem_create_locality_domain_counts_host_does_not() {
    let sb = Sandbox::new("m13_vmm_loc");
    let mut c = start(&sb, 64, 8, 0);
    let base = used(&sb, &c);

    let id = c.ok(&format!("vmm {} 0 6", 4 * MIB)).id();
    assert_eq!(used(&sb, &c).data, base.data + 4 * MIB, "locality-domain cuMemCreate not counted");
    let r = c.cmd(&format!("vmm {} 0 6", 64 * MIB));
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "locality domain over the limit: {}", r.line);
    c.ok(&format!("vmm_release {id}"));
    assert_eq!(used(&sb, &c).data, base.data);

    for loc in [2, 3, 4] {
        let id = c.ok(&format!("vmm {} 0 {loc}", 2 * GIB)).id();
        assert_eq!(used(&sb, &c).data, base.data, "host location {loc} counted");
        c.ok(&format!("vmm_release {id}"));
    }
    c.exit();
}

// ---- views ------------------------------------------------------------------------------------

#[track_caller]
fn assert_views(sb: &Sandbox, c: &mut Client, limit: u64, moment: &str) {
    let s = locked_snap(&sb.region());
    let used = s.container_total(0);
    let m = c.ok("meminfo");
    assert_eq!((m.u64("total"), m.u64("free")), (limit, limit - used), "cuMemGetInfo_v2 ({moment})");
    let n = c.ok("nvml_mem 0");
    assert_eq!((n.u64("total1"), n.u64("used1"), n.u64("free1")), (limit, used, limit - used), "NVML v1 ({moment})");
    assert_eq!((n.u64("total2"), n.u64("used2"), n.u64("free2")), (limit, used, limit - used), "NVML v2 ({moment})");
}

/// `cuMemGetInfo_v2` and NVML memory info (v1, v2) agree with the limit whatever kind of
/// context is current: primary, created, green.
#[test]
fn views_agree_under_every_context_kind() {
    let sb = Sandbox::new("m13_views");
    let limit = 1024 * MIB;
    let mut c = start(&sb, 1024, 64, 32);
    c.ok("nvml_init");
    let a = ptr(&mut c, &format!("alloc13 {}", 100 * MIB));
    assert_views(&sb, &mut c, limit, "primary");

    let created = c.ok("ctx_create 0").id();
    let b = ptr(&mut c, &format!("alloc13 {}", 50 * MIB));
    assert_views(&sb, &mut c, limit, "created context");

    let g = c.ok("green_create 0 8").i64("gid");
    c.ok(&format!("green_current {g}"));
    let d = ptr(&mut c, &format!("alloc13 {}", 30 * MIB));
    assert_views(&sb, &mut c, limit, "green context");
    c.ok(&format!("free13 {d}"));
    c.ok(&format!("green_destroy {g}"));
    c.ok(&format!("ctx_destroy {created}"));
    let _ = b;
    c.ok("ctx 0");
    assert_views(&sb, &mut c, limit, "primary again");
    c.ok(&format!("free13 {a}"));
    c.exit();
}

// ---- checkpointing ----------------------------------------------------------------------------

fn simctl(sb: &Sandbox, args: &[&str]) {
    let o = std::process::Command::new(&common::artifacts().simctl)
        .arg("--state")
        .arg(sb.state())
        .args(args)
        .output()
        .expect("simctl");
    assert!(o.status.success(), "simctl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Poll the region until `pid`'s slot on device 0 satisfies `want` (bounded wait, not a timing
/// assertion); the time it took.
#[track_caller]
fn wait_slot(sb: &Sandbox, pid: u32, what: &str, want: impl Fn(&DevMem) -> bool) -> std::time::Duration {
    let t0 = std::time::Instant::now();
    loop {
        let u = locked_snap(&sb.region()).used_of(pid, 0);
        if want(&u) {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "{what}: slot of {pid} stays {u:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A checkpointed process (driven from outside, as `cuda-checkpoint` does) holds no device
/// memory: the container gets its room back while it is checkpointed and it is charged again,
/// per kind, when it is restored; its memory is then freed as usual.
#[test]
fn checkpointed_process_gives_its_room_back_until_restored() {
    checkpoint_round_trip(false);
}

/// The same where the driver holds the locked process's own state query until it runs again:
/// NVML (no memory listed for it) tells the checkpoint instead.
#[test]
fn checkpoint_seen_through_nvml_when_the_driver_holds_the_query() {
    checkpoint_round_trip(true);
}

fn checkpoint_round_trip(blocking: bool) {
    let sb = Sandbox::new("m13_checkpoint");
    let mut a = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1024m")
        .env("VGPU_SIM_CTX_MIB", 64)
        .env("VGPU_SIM_DRIVER_VERSION", 13050)
        .env("VGPU_SIM_CHECKPOINT_BLOCKS", u8::from(blocking))
        .spawn();
    a.init_ctx(0);
    let mut b = start(&sb, 1024, 64, 0);
    let buf = ptr(&mut a, &format!("alloc13 {}", 600 * MIB));
    let held = used(&sb, &a);
    assert_eq!((held.context, held.data), (64 * MIB, 600 * MIB));
    assert_eq!(b.cmd(&format!("alloc13 {}", 600 * MIB)).rc(), CUDA_ERROR_OUT_OF_MEMORY, "no room before");

    simctl(&sb, &["checkpoint", &a.pid.to_string()]);
    let gone = wait_slot(&sb, a.pid, "after checkpoint", |u| u.total == 0);
    eprintln!("checkpoint: room back after {gone:?}");
    let pb = ptr(&mut b, &format!("alloc13 {}", 600 * MIB));

    simctl(&sb, &["restore", &a.pid.to_string()]);
    let back = wait_slot(&sb, a.pid, "after restore", |u| u.total > 0);
    eprintln!("restore: charged again after {back:?}");
    // Its allocations are charged again (a bounded wait: the kinds are charged one after another).
    wait_slot(&sb, a.pid, "restored data", |u| u.data == held.data);
    // Over the limit now (both hold their memory): nothing more fits until it falls back.
    assert_eq!(b.cmd(&format!("alloc13 {}", MIB)).rc(), CUDA_ERROR_OUT_OF_MEMORY);
    b.ok(&format!("free13 {pb}"));
    // Its context is charged again too (the driver-held part the reconciliation let go of while
    // NVML showed nothing comes back once it fits).
    wait_slot(&sb, a.pid, "restored context", |u| u.context > 0 && u.context <= held.context);
    a.ok(&format!("free13 {buf}"));
    assert_eq!(used(&sb, &a).data, 0);
    a.exit();
    b.exit();
}

// ---- a driver that enforces a limit itself ----------------------------------------------------

/// NVML reports a hard limit for our cgroup (r615+): the driver enforces it, so the shim refuses
/// nothing itself, reports the driver's limit in its views and still counts usage; one info line.
#[test]
fn driver_enforced_limit_replaces_ours() {
    let sb = Sandbox::new("m13_driver_limit");
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "256m")
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("VGPU_SIM_CGROUP_LIMIT_MIB", 512)
        .env("LIBCUDA_LOG_LEVEL", 3)
        .env("VGPU_SIM_DRIVER_VERSION", 13050)
        .spawn();
    c.init_ctx(0);
    c.ok("nvml_init");
    let driver = 512 * MIB;
    assert_eq!(c.ok("meminfo").u64("total"), driver, "cuMemGetInfo_v2 reports the driver's limit");
    assert_eq!(c.ok("nvml_mem 0").u64("total2"), driver, "NVML v2 reports the driver's limit");
    // Over our 256 MiB, under the driver's 512: allowed, and counted.
    let p = ptr(&mut c, &format!("alloc13 {}", 384 * MIB));
    assert_eq!(used(&sb, &c).data, 384 * MIB);
    // The driver refuses beyond its own limit.
    assert_eq!(c.cmd(&format!("alloc13 {}", 200 * MIB)).rc(), CUDA_ERROR_OUT_OF_MEMORY);
    c.ok(&format!("free13 {p}"));
    let logs = c.exit().shim_logs();
    let lines: Vec<_> = logs.iter().filter(|(_, m)| m.contains("the driver enforces a hard memory limit")).collect();
    assert_eq!(lines.len(), 1, "one info line: {logs:?}");
}
