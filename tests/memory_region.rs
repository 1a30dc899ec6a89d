//! Memory-limit proof, region: the file HAMi's monitor reads, checked with an independent offset
//! table (tests/memory_support: byte offsets from docs/hami-contract.md §3, not the Rust structs), the
//! attach-in-place rules, and safe behaviour on files that are not a valid region.

mod common;
mod memory_support;

use common::Sandbox;
use memory_support::*;
use std::os::unix::fs::MetadataExt;
use std::time::{SystemTime, UNIX_EPOCH};

const UUID0: &str = "GPU-3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
const UUID1: &str = "GPU-aabbccdd-eeff-4011-8233-445566778899";

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn region_fields_the_monitor_reads() {
    let sb = Sandbox::new("region_fields");
    assert_eq!(UUID0.len(), 40);
    let t0 = now_s();
    let mut c = client(&sb)
        .env("VGPU_SIM_DEVICES", 2)
        .env("VGPU_SIM_UUIDS", format!("{UUID0},{UUID1}"))
        .env("VGPU_SIM_CTX_MIB", 8)
        .env("CUDA_DEVICE_MEMORY_LIMIT_0", "100m")
        .env("CUDA_DEVICE_MEMORY_LIMIT_1", "3g")
        .env("CUDA_DEVICE_SM_LIMIT_0", 30)
        .env("CUDA_DEVICE_SM_LIMIT_1", 70)
        .env("CUDA_TASK_PRIORITY", 0)
        .spawn();
    c.init_ctx(0);
    c.ok(&format!("alloc {}", 3 * MIB + 11));
    c.ok("nvml_init");
    // The UUIDs as the simulated GPU reports them.
    assert_eq!(c.ok("nvml_uuid 0").s("uuid"), UUID0);
    assert_eq!(c.ok("nvml_uuid 1").s("uuid"), UUID1);
    let t1 = now_s();

    let path = sb.region();
    let md = std::fs::metadata(&path).unwrap();
    assert!(md.len() >= off::REGION_SIZE as u64, "file size {}", md.len());
    assert_eq!(md.mode() & 0o777, 0o666, "region file mode {:o}", md.mode() & 0o777);

    let s = locked_snap(&path);
    assert_eq!(s.magic(), off::MAGIC_VALUE);
    assert_eq!(&s.bytes[0..4], &[0x4e, 0xf7, 0x2f, 0x01], "magic bytes little-endian");
    assert_eq!((s.u32(off::MAJOR), s.u32(off::MINOR)), (1, 2), "version");
    assert_eq!(s.i32(off::SM_INIT_FLAG), 0);
    // Both semaphores are what glibc's sem_init(pshared = 1, value = 1) produces, byte for byte,
    // so a C-library process sharing the file can use them.
    let mut want: libc::sem_t = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::sem_init(&mut want, 1, 1) }, 0);
    let want: [u8; 32] = unsafe { std::mem::transmute(want) };
    for (name, o) in [("sem", off::SEM), ("sem_postinit", off::SEM_POSTINIT)] {
        assert_eq!(&s.bytes[o..o + 32], &want[..], "{name} is not an initialised process-shared semaphore of value 1");
    }
    assert_eq!(s.device_num(), 2, "device_num");
    for (d, want) in [(0, UUID0), (1, UUID1)] {
        let f = s.uuid_field(d);
        assert_eq!(&f[..40], want.as_bytes(), "uuids[{d}]");
        assert!(f[40..].iter().all(|&b| b == 0), "uuids[{d}] not zero-filled after the string: {f:?}");
    }
    for d in 2..16 {
        assert!(s.uuid_field(d).iter().all(|&b| b == 0), "uuids[{d}] should be empty");
    }
    assert_eq!(s.limit(0), 100 * MIB, "limit[0] in bytes");
    assert_eq!(s.limit(1), 3 << 30, "limit[1] in bytes");
    for d in 2..16 {
        assert_eq!(s.limit(d), 0, "limit[{d}]");
    }
    assert_eq!((s.sm_limit(0), s.sm_limit(1)), (30, 70), "sm_limit");
    assert_eq!(s.proc_num(), 1, "proc_num");
    assert_eq!(s.i32(off::UTILIZATION_SWITCH), 1, "utilization_switch");
    assert_eq!(s.i32(off::RECENT_KERNEL), 2, "recent_kernel");
    assert_eq!(s.priority(), 0, "priority = CUDA_TASK_PRIORITY");
    let lkt = s.u64(off::LAST_KERNEL_TIME);
    assert!(lkt >= t0 && lkt <= t1 + 1, "last_kernel_time {lkt} not in [{t0}, {t1}]");

    let slot = s.slot(0);
    assert_eq!(slot.pid, c.pid as i32, "slot 0 pid");
    assert_eq!(slot.status, 1, "slot 0 status (+1928)");
    assert!(
        slot.hostpid == 0 || slot.hostpid == c.pid as i32,
        "hostpid {} is neither unknown nor the pid",
        slot.hostpid
    );
    assert_eq!(slot.seqlock % 2, 0, "seqlock left odd");
    assert_eq!(
        slot.used[0],
        DevMem { context: 8 * MIB, data: 3 * MIB + 11, total: 11 * MIB + 11, ..Default::default() }
    );
    assert_eq!(slot.used[1], DevMem::default());
    // Beyond proc_num: empty.
    assert_eq!((s.slot(1).pid, s.slot(1).status), (0, 0));

    // A second process: the lowest free even slot (slots are claimed two apart so that no two
    // share a cache line, docs/design.md "Memory ledger"); slot 1 stays a hole.
    let mut c2 = client(&sb).env("VGPU_SIM_CTX_MIB", 8).spawn();
    c2.ok("init");
    c2.ok("ctx 1");
    c2.ok(&format!("alloc {}", MIB));
    let s = locked_snap(&path);
    assert_eq!(s.proc_num(), 3);
    let s2 = s.slot_of(c2.pid).expect("second slot");
    assert_eq!((s2.index, s2.status), (2, 1));
    assert_eq!((s.slot(1).pid, s.slot(1).status), (0, 0), "a hole the monitor skips");
    assert_eq!(s2.used[1].data, MIB, "device 1 usage lands in used[1]");
    assert_eq!(s2.used[0], DevMem::default());

    // Exit: the slot is freed in place (pid 0, status 0: a hole the monitor skips); live slots
    // never move, so the survivor keeps slot 2 and proc_num covers it.
    c.exit().code.filter(|&c| c == 0).expect("client 1 exit code");
    let s = locked_snap(&path);
    assert_eq!(s.proc_num(), 3, "proc_num after one exit: the survivor's slot is still below it");
    assert_eq!((s.slot(0).pid, s.slot(0).status), (0, 0), "the exited slot is a free hole");
    assert_eq!(s.slot(0).used[0], DevMem::default(), "the hole carries no usage");
    assert_eq!(s.slot(2).pid, c2.pid as i32, "survivor stays in its slot");
    assert_eq!(s.slot(2).status, 1);
    assert_eq!(s.container_total(0), 0);
    assert_eq!(s.container_total(1), 8 * MIB + MIB);
    c2.exit();
    let s = locked_snap(&path);
    assert_eq!(s.proc_num(), 0, "proc_num after all exited");
    assert_eq!((s.slot(0).pid, s.slot(0).status), (0, 0));
    // The header outlives the processes.
    assert_eq!(s.magic(), off::MAGIC_VALUE);
    assert_eq!(s.limit(0), 100 * MIB);
}

#[test]
fn existing_region_is_attached_in_place_without_changing_limits_or_priority() {
    let sb = Sandbox::new("region_existing");
    let path = sb.region();
    let mut a = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "100m")
        .env("CUDA_TASK_PRIORITY", 0)
        .env("VGPU_SIM_CTX_MIB", 8)
        .spawn();
    a.init_ctx(0);
    a.exit();
    let ino = std::fs::metadata(&path).unwrap().ino();

    // Different env: 1 GiB, priority 1, SM 50 %.
    let mut b = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("CUDA_TASK_PRIORITY", 1)
        .env("CUDA_DEVICE_SM_LIMIT", 50)
        .env("VGPU_SIM_CTX_MIB", 8)
        .spawn();
    b.init_ctx(0);
    let s = locked_snap(&path);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino, "region file recreated");
    assert_eq!(s.limit(0), 100 * MIB, "limit overwritten by a later process");
    assert_eq!(s.priority(), 0, "priority overwritten");
    assert_eq!(s.sm_limit(0), 100, "sm_limit overwritten");
    // And the region's limit is the one enforced.
    let r = b.cmd(&format!("alloc {}", 150 * MIB));
    assert_eq!(r.rc(), CUDA_ERROR_OUT_OF_MEMORY, "{}", r.line);
    b.ok(&format!("alloc {}", 92 * MIB));
    assert_eq!(b.ok("meminfo").u64("total"), 100 * MIB);
    let end = b.exit();
    let warned = end.shim_logs().iter().any(|(l, m)| l == "WARN" && m.contains("limit inconsistency"));
    assert!(warned, "no 'limit inconsistency' warning:\n{}", end.stderr);
}

/// A file as HAMi-core's C library leaves it (2 008 953 bytes, v1.2, the monitor having turned
/// `utilization_switch` off), with a stale slot of a dead process from a crashed container: the
/// shim adopts it in place, keeps the header, reclaims the dead slot and its memory.
#[test]
fn incumbent_file_with_stale_slot_is_adopted() {
    let sb = Sandbox::new("region_incumbent");
    let path = sb.region();
    let mut b = vec![0u8; off::C_FILE_SIZE];
    put_i32(&mut b, off::MAGIC, off::MAGIC_VALUE);
    put_u32(&mut b, off::MAJOR, 1);
    put_u32(&mut b, off::MINOR, 2);
    put_u32(&mut b, off::SEM, 1);
    put_u32(&mut b, off::SEM_POSTINIT, 1);
    put_u64(&mut b, off::LIMIT, 100 * MIB);
    put_u64(&mut b, off::SM_LIMIT, 40);
    put_i32(&mut b, off::UTILIZATION_SWITCH, 0);
    put_i32(&mut b, off::RECENT_KERNEL, 2);
    put_i32(&mut b, off::PRIORITY, 0);
    let dead = dead_pid();
    put_i32(&mut b, off::slot(0) + off::S_PID, dead);
    put_i32(&mut b, off::slot(0) + off::S_STATUS, 1);
    put_u64(&mut b, off::used(0, 0, off::D_DATA), 80 * MIB);
    put_u64(&mut b, off::used(0, 0, off::D_TOTAL), 80 * MIB);
    put_i32(&mut b, off::PROC_NUM, 1);
    std::fs::write(&path, &b).unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();

    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "1g")
        .env("CUDA_TASK_PRIORITY", 1)
        .env("VGPU_SIM_CTX_MIB", 8)
        .spawn();
    c.init_ctx(0);
    let s = locked_snap(&path);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino, "file recreated");
    assert!(s.file_len >= off::C_FILE_SIZE as u64, "file shrunk to {}", s.file_len);
    assert_eq!((s.limit(0), s.sm_limit(0), s.priority()), (100 * MIB, 40, 0), "header changed");
    assert_eq!(s.i32(off::UTILIZATION_SWITCH), 0, "monitor-owned utilization_switch overwritten");
    assert_eq!(s.proc_num(), 1, "stale slot not reclaimed: {:?}", s.live_slots());
    assert_eq!(s.slot(0).pid, c.pid as i32);
    assert_eq!(s.container_total(0), 8 * MIB);
    // The dead process's 80 MiB are available again; the limit is the file's 100 MiB.
    c.ok(&format!("alloc {}", 90 * MIB));
    assert_eq!(c.cmd(&format!("alloc {}", 3 * MIB)).rc(), CUDA_ERROR_OUT_OF_MEMORY);
    c.exit();
    let s = Snap::read(&path);
    assert_eq!(s.proc_num(), 0);
    assert_eq!(s.limit(0), 100 * MIB);
}

/// A C library that crashed between sizing the file and storing the magic leaves a zero-filled
/// full-size file: it is initialised in place.
#[test]
fn half_created_zero_file_is_initialised_in_place() {
    let sb = Sandbox::new("region_zero");
    let path = sb.region();
    std::fs::write(&path, vec![0u8; off::C_FILE_SIZE]).unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    let mut c = client(&sb)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "64m")
        .env("CUDA_TASK_PRIORITY", 0)
        .env("VGPU_SIM_CTX_MIB", 8)
        .spawn();
    c.init_ctx(0);
    let s = locked_snap(&path);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
    assert_eq!((s.magic(), s.limit(0), s.priority(), s.proc_num()), (off::MAGIC_VALUE, 64 * MIB, 0, 1));
    c.exit();
}

fn foreign_case(name: &str, content: Vec<u8>) {
    let sb = Sandbox::new(name);
    let path = sb.region();
    std::fs::write(&path, &content).unwrap();
    let mut c = client(&sb).env("CUDA_DEVICE_MEMORY_LIMIT", "64m").env("VGPU_SIM_CTX_MIB", 8).spawn();
    c.init_ctx(0);
    // The program runs; the environment's limit is still enforced for this process.
    let id = c.ok(&format!("alloc {}", 16 * MIB)).id();
    assert_eq!(
        c.cmd(&format!("alloc {}", 41 * MIB)).rc(),
        CUDA_ERROR_OUT_OF_MEMORY,
        "{name}: limit not enforced locally"
    );
    let m = c.ok("meminfo");
    assert_eq!(m.u64("total"), 64 * MIB, "{name}");
    assert_eq!(m.u64("free"), 64 * MIB - 8 * MIB - 16 * MIB, "{name}: free");
    c.ok(&format!("free {id}"));
    c.ok("nvml_init");
    c.ok("nvml_mem 0");
    let end = c.exit();
    assert_eq!(end.code, Some(0), "{name}: {}", end.stderr);
    let p = path.display().to_string();
    let lines: Vec<_> = end.shim_logs().into_iter().filter(|(_, m)| m.contains(&p)).collect();
    assert_eq!(lines.len(), 1, "{name}: expected exactly one log line about {p}, got {lines:?}\n{}", end.stderr);
    assert!(matches!(lines[0].0.as_str(), "ERROR" | "WARN"), "{name}: {lines:?}");
    let after = std::fs::read(&path).unwrap();
    assert!(after == content, "{name}: file modified (len {} → {})", content.len(), after.len());
}

#[test]
fn foreign_garbage_file_untouched() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8 | 1
        })
        .collect();
    foreign_case("region_garbage", garbage);
}

#[test]
fn foreign_wrong_magic_full_size_untouched() {
    let mut b = vec![0u8; off::C_FILE_SIZE];
    put_u32(&mut b, 0, 0x1234_5678);
    put_u32(&mut b, off::MAJOR, 1);
    put_u32(&mut b, off::MINOR, 2);
    foreign_case("region_wrong_magic", b);
}

#[test]
fn legacy_v0_sized_file_with_magic_untouched() {
    let mut b = vec![0u8; off::V0_FILE_SIZE];
    put_i32(&mut b, 0, off::MAGIC_VALUE);
    put_u64(&mut b, 1592, 100 * MIB); // v0 limit[0]
    foreign_case("region_v0", b);
}

#[test]
fn unsupported_major_version_untouched() {
    let mut b = vec![0u8; off::C_FILE_SIZE];
    put_i32(&mut b, 0, off::MAGIC_VALUE);
    put_u32(&mut b, off::MAJOR, 2);
    put_u32(&mut b, off::MINOR, 0);
    foreign_case("region_v2", b);
}

/// SIGKILL skips the exit handler: the slot keeps counting (as the monitor expects) until the
/// next attach sweeps it (freed in place), returning the memory.
#[test]
fn killed_process_slot_reclaimed_at_next_attach() {
    let sb = Sandbox::new("region_killed");
    let path = sb.region();
    let mut a = client(&sb).env("CUDA_DEVICE_MEMORY_LIMIT", "64m").env("VGPU_SIM_CTX_MIB", 8).spawn();
    a.init_ctx(0);
    a.ok(&format!("alloc {}", 40 * MIB));
    let apid = a.pid;
    a.kill();
    let s = locked_snap(&path);
    assert_eq!(s.proc_num(), 1);
    assert_eq!(s.used_of(apid, 0).total, 48 * MIB, "killed slot still counted until reclaimed");
    let mut b = client(&sb).env("CUDA_DEVICE_MEMORY_LIMIT", "64m").env("VGPU_SIM_CTX_MIB", 8).spawn();
    b.ok("init");
    let s = locked_snap(&path);
    assert_eq!(s.proc_num(), 1, "dead slot not reclaimed at attach: {:?}", s.live_slots());
    assert_eq!(s.slot(0).pid, b.pid as i32);
    assert_eq!(s.container_total(0), 0);
    b.ok("ctx 0");
    b.ok(&format!("alloc {}", 56 * MIB));
    b.exit();
}
