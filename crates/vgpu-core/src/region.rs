//! The shared usage region: HAMi-core's v1.2 layout (docs/hami-contract.md §3.2-§3.4), byte for byte,
//! plus libvgpu's private extension block.
//!
//! Every field lives in a file that other processes (other shims, the C library, HAMi's vGPU
//! monitor) read and write concurrently, so every field is an atomic (or a cell written only
//! through raw pointers): a Rust `&SharedRegion` never claims the bytes are immutable.
//! Atomics have the size and alignment of the plain C type, so the layout is that of the C header.
//!
//! Layout of the mapped file (2 019 328 bytes):
//!
//! | offset      | size      | what |
//! |-------------|-----------|------|
//! | 0           | 2 008 952 | [`SharedRegion`] (v1.2, what the monitor maps) |
//! | 2 008 952   | 1         | byte the C library writes to size its file; also the byte our OFD lock covers ([`LOCK_BYTE_OFFSET`]) |
//! | 2 011 136   | 8 192     | [`RegionExt`] (private, page aligned; the monitor never sees it): page 0 header + limiter, page 1 [`OverflowTable`] |
//!
//! The extension grew from one page to two (overflow table). A file of the old size is grown in
//! place by `regionfile` (never shrunk); the new page starts zeroed, which is an empty table.

use core::cell::UnsafeCell;
use core::mem::{align_of, offset_of, size_of};
use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU8, AtomicU32, AtomicU64};

/// `MULTIPROCESS_SHARED_REGION_MAGIC_FLAG`.
pub const REGION_MAGIC: i32 = 19_920_718;
pub const MAJOR_VERSION: u32 = 1;
pub const MINOR_VERSION: u32 = 2;
/// `CUDA_DEVICE_MAX_COUNT`.
pub const MAX_DEVICES: usize = 16;
/// `SHARED_REGION_MAX_PROCESS_NUM`.
pub const MAX_PROCS: usize = 1024;
pub const UUID_LEN: usize = 96;

/// `sizeof(shared_region_t)`: what the monitor requires for a v1 cast.
pub const V1_REGION_SIZE: usize = 2_008_952;
/// File size the incumbent C library leaves (it writes one byte at `V1_REGION_SIZE`).
pub const C_FILE_SIZE: usize = V1_REGION_SIZE + 1;
/// Legacy v0 region size (never written by us; recognised to refuse it).
pub const V0_REGION_SIZE: usize = 1_197_896;
/// Size the transient "1.1-with-seqlock" layout claimed (HAMi-core e200da2); refused.
pub const TRANSIENT_V11_REGION_SIZE: usize = 2_008_984;
/// Byte locked with an OFD lock by [`crate::lock`]: outside the incumbent's `lockf` range
/// `[0, V1_REGION_SIZE)`, so the two lock kinds never conflict.
pub const LOCK_BYTE_OFFSET: usize = V1_REGION_SIZE;
/// Offset of the private extension block (first page boundary after the v1.2 region).
pub const EXT_OFFSET: usize = 2_011_136;
pub const EXT_SIZE: usize = 8192;
/// Full file size we create / grow to.
pub const FILE_SIZE: usize = EXT_OFFSET + EXT_SIZE;

/// `ext_magic`: the ASCII bytes "LIBVGPU1" read as a little-endian u64.
pub const EXT_MAGIC: u64 = u64::from_le_bytes(*b"LIBVGPU1");
pub const EXT_VERSION: u32 = 1;

/// Usage categories of `device_memory_t` (the incumbent's `type` argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum UsageKind {
    /// `context_size` (type 0)
    Context = 0,
    /// `module_size` (type 1)
    Module = 1,
    /// `data_size` (type 2, the Go side's `bufferSize`)
    Data = 2,
}

/// glibc `sem_t` (32 bytes, 8-byte aligned). Only touched through `libc::sem_*` via [`RawSem::as_ptr`].
#[repr(C, align(8))]
pub struct RawSem(UnsafeCell<[u8; 32]>);

impl RawSem {
    pub fn as_ptr(&self) -> *mut libc::sem_t {
        self.0.get().cast()
    }
}

/// `device_memory_t` (64 bytes). All bytes.
#[repr(C)]
pub struct DeviceMemory {
    pub context_size: AtomicU64,
    pub module_size: AtomicU64,
    pub data_size: AtomicU64,
    pub offset: AtomicU64,
    pub total: AtomicU64,
    pub unused: [AtomicU64; 3],
}

impl DeviceMemory {
    pub fn category(&self, kind: UsageKind) -> &AtomicU64 {
        match kind {
            UsageKind::Context => &self.context_size,
            UsageKind::Module => &self.module_size,
            UsageKind::Data => &self.data_size,
        }
    }
}

/// `device_util_t` (48 bytes).
#[repr(C)]
pub struct DeviceUtil {
    pub dec_util: AtomicU64,
    pub enc_util: AtomicU64,
    pub sm_util: AtomicU64,
    pub unused: [AtomicU64; 3],
}

/// `shrreg_proc_slot_t` (1960 bytes).
#[repr(C)]
pub struct ProcSlot {
    pub pid: AtomicI32,
    pub hostpid: AtomicI32,
    pub used: [DeviceMemory; MAX_DEVICES],
    pub monitorused: [AtomicU64; MAX_DEVICES],
    pub device_util: [DeviceUtil; MAX_DEVICES],
    /// 1 running, 2 suspended, 0 exited.
    pub status: AtomicI32,
    pub _padding: AtomicU32,
    /// Odd while this slot's `used[]` is being updated.
    pub seqlock: AtomicU64,
    pub unused: [AtomicU64; 2],
}

/// `shared_region_t` v1.2 (2 008 952 bytes).
#[repr(C)]
pub struct SharedRegion {
    pub initialized_flag: AtomicI32,
    pub major_version: AtomicU32,
    pub minor_version: AtomicU32,
    pub sm_init_flag: AtomicI32,
    pub owner_pid: AtomicU64,
    pub sem: RawSem,
    pub device_num: AtomicU64,
    pub uuids: [[AtomicU8; UUID_LEN]; MAX_DEVICES],
    pub limit: [AtomicU64; MAX_DEVICES],
    pub sm_limit: [AtomicU64; MAX_DEVICES],
    pub procs: [ProcSlot; MAX_PROCS],
    pub proc_num: AtomicI32,
    pub utilization_switch: AtomicI32,
    pub recent_kernel: AtomicI32,
    pub priority: AtomicI32,
    pub last_kernel_time: AtomicU64,
    pub sem_postinit: RawSem,
}

// SAFETY: every field is an atomic or a semaphore only used through libc's thread-safe sem_* calls.
unsafe impl Sync for SharedRegion {}
unsafe impl Send for SharedRegion {}

/// Per-device state of the compute limiter, shared by all processes of the container
/// (192 bytes = 24 u64 words). Each word's meaning is documented here; `limiter` owns their use.
#[repr(C)]
pub struct DeviceLimiterState {
    /// Token balance in nanoseconds of device time (negative: debt).
    pub balance_ns: AtomicI64,
    /// CLOCK_MONOTONIC of the last lazy refill (0 = never).
    pub last_refill_ns: AtomicU64,
    /// Bumped when rate or cap change.
    pub generation: AtomicU64,
    /// Refill rate in millionths of wall time (limit% × 10 000); 0 = unlimited/unset.
    pub rate_ppm: AtomicU64,
    /// Burst cap of the balance, ns.
    pub cap_ns: AtomicU64,
    /// Cumulative device ns charged by all processes (metric).
    pub charged_ns: AtomicU64,
    /// Cumulative wall ns launches waited for tokens (metric).
    pub throttled_ns: AtomicU64,
    /// Launches that had to wait (metric).
    pub throttled_launches: AtomicU64,
    /// Cumulative wall ns launches waited while `recent_kernel < 0` (metric).
    pub blocked_ns: AtomicU64,
    /// Last measured container share of the device, ppm.
    pub share_ppm: AtomicU64,
    /// CLOCK_MONOTONIC of `share_ppm` (0 = no measurement yet).
    pub share_stamp_ns: AtomicU64,
    /// 0 none yet, 1 self-measured (events), 2 NVML per-process.
    pub sensor: AtomicU64,
    /// Last outer-loop correction factor × 1e6 (0 = none yet).
    pub correction_ppm: AtomicU64,
    /// Processes of the container still without a host PID.
    pub unresolved_pids: AtomicU64,
    /// CLOCK_MONOTONIC deadline of the process whose launch of unknown cost is in flight (0 = none;
    /// `limiter::cost::claim_first`).
    pub first_gate: AtomicU64,
    /// The container's lowest measured cost per launch shape, 4 entries (`limiter::cost::lowcost`).
    pub low_costs: [AtomicU64; 4],
    /// Burst controller: wall µs up to which NVML per-process samples have been used (the
    /// `lastSeen` of the next query; 0 = none yet).
    pub burst_seen_us: AtomicU64,
    /// Burst controller (`limiter::burst`): its smoothed signals, three 21-bit ppm fields
    /// (others' share | newcomer hold << 21 | device busy << 42).
    pub burst_signals: AtomicU64,
    /// Burst controller (`limiter::burst`): wall µs of its last step (0 = none yet); the step's
    /// leader is whoever advances it by CAS.
    pub burst_stamp_us: AtomicU64,
    /// Burst controller: the container's effective refill rate in ppm, in [limit, ceiling]
    /// (0 = none yet: the limit).
    pub burst_rate_ppm: AtomicU64,
    /// Burst ceiling in percent (`CUDA_DEVICE_SM_CEILING`, published by the first process; 0 =
    /// unset = the SM limit, no burst). Operators change it live (`vgpu-smi set-limit --sm-ceiling`).
    pub sm_ceiling: AtomicU64,
}

impl DeviceLimiterState {
    /// All 24 words in order (for zeroing and copying).
    pub fn words(&self) -> [&AtomicU64; 23] {
        [
            &self.last_refill_ns,
            &self.generation,
            &self.rate_ppm,
            &self.cap_ns,
            &self.charged_ns,
            &self.throttled_ns,
            &self.throttled_launches,
            &self.blocked_ns,
            &self.share_ppm,
            &self.share_stamp_ns,
            &self.sensor,
            &self.correction_ppm,
            &self.unresolved_pids,
            &self.first_gate,
            &self.low_costs[0],
            &self.low_costs[1],
            &self.low_costs[2],
            &self.low_costs[3],
            &self.burst_seen_us,
            &self.burst_signals,
            &self.burst_stamp_us,
            &self.burst_rate_ppm,
            &self.sm_ceiling,
        ]
    }

    /// Zeroes every word (balance included).
    pub fn zero(&self) {
        self.balance_ns.store(0, core::sync::atomic::Ordering::Relaxed);
        for w in self.words() {
            w.store(0, core::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Records of the overflow table (processes beyond the 1024 slots).
pub const OVERFLOW_RECORDS: usize = 28;

/// One slotless process's accounting (144 bytes): like a slot's `used[].total`, single writer
/// (its owner), freed in place by a sweep once the owner is dead. The monitor never sees it.
#[repr(C)]
pub struct OverflowRecord {
    /// Owner's pid; 0 = free.
    pub pid: AtomicI32,
    /// 1 in use, 0 free (stored last at claim, first at free).
    pub status: AtomicI32,
    /// Owner's start time (`/proc/<pid>/stat` field 22), its identity against pid reuse.
    pub start_time: AtomicU64,
    pub total: [AtomicU64; MAX_DEVICES],
}

/// Second page of the extension: every limit check and view adds the records `< num`.
#[repr(C)]
pub struct OverflowTable {
    /// High-water mark of used records (like `proc_num`); 0 = nobody overflowed.
    pub num: AtomicU32,
    pub _pad: AtomicU32,
    pub reserved: [AtomicU64; 7],
    pub records: [OverflowRecord; OVERFLOW_RECORDS],
}

/// Private extension block at [`EXT_OFFSET`] (8192 bytes).
#[repr(C)]
pub struct RegionExt {
    /// [`EXT_MAGIC`] once the block is initialised (stored last, release).
    pub ext_magic: AtomicU64,
    pub ext_version: AtomicU32,
    pub ext_flags: AtomicU32,
    /// `[SCAN_DUE]`: CLOCK_MONOTONIC ns before which no process of the container starts another
    /// liveness scan ([`crate::slots::take_scan_turn`]); `[HOST_SAMPLE_DUE]`: the same for the
    /// host GPU sample ([`crate::slots::take_host_sample_turn`]); the rest is reserved (zero).
    pub reserved_hdr: [AtomicU64; 6],
    pub limiter: [DeviceLimiterState; MAX_DEVICES],
    pub reserved: [AtomicU64; 120],
    pub overflow: OverflowTable,
}

unsafe impl Sync for RegionExt {}
unsafe impl Send for RegionExt {}

/// The whole mapped file.
#[repr(C)]
pub struct RegionMap {
    pub shared: SharedRegion,
    /// Bytes between the v1.2 end and the extension (the C library writes byte 0 of this gap).
    pub gap: [AtomicU8; EXT_OFFSET - V1_REGION_SIZE],
    pub ext: RegionExt,
}

// ---- layout assertions: every offset and size of docs/hami-contract.md §3.2-§3.4 ----

const _: () = {
    assert!(size_of::<RawSem>() == 32 && align_of::<RawSem>() == 8);
    assert!(size_of::<libc::sem_t>() == 32);

    assert!(size_of::<DeviceMemory>() == 64);
    assert!(offset_of!(DeviceMemory, context_size) == 0);
    assert!(offset_of!(DeviceMemory, module_size) == 8);
    assert!(offset_of!(DeviceMemory, data_size) == 16);
    assert!(offset_of!(DeviceMemory, offset) == 24);
    assert!(offset_of!(DeviceMemory, total) == 32);
    assert!(offset_of!(DeviceMemory, unused) == 40);

    assert!(size_of::<DeviceUtil>() == 48);
    assert!(offset_of!(DeviceUtil, dec_util) == 0);
    assert!(offset_of!(DeviceUtil, enc_util) == 8);
    assert!(offset_of!(DeviceUtil, sm_util) == 16);
    assert!(offset_of!(DeviceUtil, unused) == 24);

    assert!(size_of::<ProcSlot>() == 1960);
    assert!(align_of::<ProcSlot>() == 8);
    assert!(offset_of!(ProcSlot, pid) == 0);
    assert!(offset_of!(ProcSlot, hostpid) == 4);
    assert!(offset_of!(ProcSlot, used) == 8);
    assert!(offset_of!(ProcSlot, monitorused) == 1032);
    assert!(offset_of!(ProcSlot, device_util) == 1160);
    assert!(offset_of!(ProcSlot, status) == 1928);
    assert!(offset_of!(ProcSlot, _padding) == 1932);
    assert!(offset_of!(ProcSlot, seqlock) == 1936);
    assert!(offset_of!(ProcSlot, unused) == 1944);

    assert!(size_of::<SharedRegion>() == V1_REGION_SIZE);
    assert!(align_of::<SharedRegion>() == 8);
    assert!(offset_of!(SharedRegion, initialized_flag) == 0);
    assert!(offset_of!(SharedRegion, major_version) == 4);
    assert!(offset_of!(SharedRegion, minor_version) == 8);
    assert!(offset_of!(SharedRegion, sm_init_flag) == 12);
    assert!(offset_of!(SharedRegion, owner_pid) == 16);
    assert!(offset_of!(SharedRegion, sem) == 24);
    assert!(offset_of!(SharedRegion, device_num) == 56);
    assert!(offset_of!(SharedRegion, uuids) == 64);
    assert!(offset_of!(SharedRegion, limit) == 1600);
    assert!(offset_of!(SharedRegion, sm_limit) == 1728);
    assert!(offset_of!(SharedRegion, procs) == 1856);
    assert!(offset_of!(SharedRegion, proc_num) == 2_008_896);
    assert!(offset_of!(SharedRegion, utilization_switch) == 2_008_900);
    assert!(offset_of!(SharedRegion, recent_kernel) == 2_008_904);
    assert!(offset_of!(SharedRegion, priority) == 2_008_908);
    assert!(offset_of!(SharedRegion, last_kernel_time) == 2_008_912);
    assert!(offset_of!(SharedRegion, sem_postinit) == 2_008_920);

    assert!(size_of::<DeviceLimiterState>() == 192);
    assert!(offset_of!(DeviceLimiterState, balance_ns) == 0);
    assert!(offset_of!(DeviceLimiterState, last_refill_ns) == 8);
    assert!(offset_of!(DeviceLimiterState, generation) == 16);
    assert!(offset_of!(DeviceLimiterState, rate_ppm) == 24);
    assert!(offset_of!(DeviceLimiterState, cap_ns) == 32);
    assert!(offset_of!(DeviceLimiterState, charged_ns) == 40);
    assert!(offset_of!(DeviceLimiterState, throttled_ns) == 48);
    assert!(offset_of!(DeviceLimiterState, throttled_launches) == 56);
    assert!(offset_of!(DeviceLimiterState, blocked_ns) == 64);
    assert!(offset_of!(DeviceLimiterState, share_ppm) == 72);
    assert!(offset_of!(DeviceLimiterState, share_stamp_ns) == 80);
    assert!(offset_of!(DeviceLimiterState, sensor) == 88);
    assert!(offset_of!(DeviceLimiterState, correction_ppm) == 96);
    assert!(offset_of!(DeviceLimiterState, unresolved_pids) == 104);
    assert!(offset_of!(DeviceLimiterState, first_gate) == 112);
    assert!(offset_of!(DeviceLimiterState, burst_seen_us) == 152);
    assert!(offset_of!(DeviceLimiterState, burst_signals) == 160);
    assert!(offset_of!(DeviceLimiterState, burst_stamp_us) == 168);
    assert!(offset_of!(DeviceLimiterState, burst_rate_ppm) == 176);
    assert!(offset_of!(DeviceLimiterState, sm_ceiling) == 184);

    assert!(size_of::<RegionExt>() == EXT_SIZE);
    assert!(offset_of!(RegionExt, ext_magic) == 0);
    assert!(offset_of!(RegionExt, ext_version) == 8);
    assert!(offset_of!(RegionExt, ext_flags) == 12);
    assert!(offset_of!(RegionExt, reserved_hdr) == 16);
    assert!(offset_of!(RegionExt, limiter) == 64);
    assert!(offset_of!(RegionExt, reserved) == 64 + 192 * MAX_DEVICES);
    assert!(offset_of!(RegionExt, overflow) == 4096);
    assert!(size_of::<OverflowRecord>() == 144);
    assert!(offset_of!(OverflowRecord, start_time) == 8);
    assert!(offset_of!(OverflowRecord, total) == 16);
    assert!(size_of::<OverflowTable>() == 4096);
    assert!(offset_of!(OverflowTable, records) == 64);

    assert!(offset_of!(RegionMap, shared) == 0);
    assert!(offset_of!(RegionMap, gap) == V1_REGION_SIZE);
    assert!(offset_of!(RegionMap, ext) == EXT_OFFSET);
    assert!(size_of::<RegionMap>() == FILE_SIZE);
    assert!(FILE_SIZE == 2_019_328);
    assert!(EXT_OFFSET.is_multiple_of(4096) && EXT_OFFSET >= C_FILE_SIZE);
};

/// Byte offset of slot `k` in the file.
pub const fn slot_offset(k: usize) -> usize {
    offset_of!(SharedRegion, procs) + k * size_of::<ProcSlot>()
}

impl SharedRegion {
    /// The 96-byte UUID field of device `d` as bytes (a snapshot).
    pub fn uuid_bytes(&self, d: usize) -> [u8; UUID_LEN] {
        let mut out = [0u8; UUID_LEN];
        for (o, b) in out.iter_mut().zip(self.uuids[d].iter()) {
            *o = b.load(core::sync::atomic::Ordering::Relaxed);
        }
        out
    }

    /// The UUID of device `d` up to its NUL, if set and valid UTF-8.
    pub fn uuid(&self, d: usize) -> Option<String> {
        let b = self.uuid_bytes(d);
        let n = b.iter().position(|&c| c == 0).unwrap_or(UUID_LEN);
        if n == 0 {
            return None;
        }
        core::str::from_utf8(&b[..n]).ok().map(str::to_owned)
    }

    /// Writes `uuid` NUL-terminated with the rest of the 96 bytes zeroed: the monitor keys
    /// containers by the *whole* field (docs/hami-contract.md §4.2), so trailing garbage would break matching.
    /// Longer strings are truncated to 95 bytes.
    pub fn set_uuid(&self, d: usize, uuid: &str) {
        let src = uuid.as_bytes();
        let n = src.len().min(UUID_LEN - 1);
        for (i, cell) in self.uuids[d].iter().enumerate() {
            let v = if i < n { src[i] } else { 0 };
            cell.store(v, core::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants() {
        assert_eq!(REGION_MAGIC, 0x012F_F74E);
        assert_eq!(REGION_MAGIC.to_le_bytes(), [0x4e, 0xf7, 0x2f, 0x01]);
        assert_eq!(&EXT_MAGIC.to_le_bytes(), b"LIBVGPU1");
        assert_eq!(slot_offset(0), 1856);
        assert_eq!(slot_offset(1023) + 1960, 2_008_896);
        assert_eq!(C_FILE_SIZE, 2_008_953);
    }
}

#[cfg(test)]
mod c_header {
    use super::*;
    use std::process::Command;

    /// Compiles `include/vgpu_region.h` (its `_Static_assert`s check every offset) and compares
    /// its constants with ours. Skipped when no C compiler is installed.
    #[test]
    fn header_matches() {
        let inc = concat!(env!("CARGO_MANIFEST_DIR"), "/../../include");
        let dir = crate::testutil::temp_path("c-header");
        std::fs::create_dir_all(&*dir).unwrap();
        let src = dir.join("t.c");
        let exe = dir.join("t");
        std::fs::write(
            &src,
            r#"#include "vgpu_region.h"
#include <stdio.h>
int main(void) {
    printf("%d %llu %u %u %u %u %zu %zu\n", VGPU_REGION_MAGIC, (unsigned long long)VGPU_EXT_MAGIC,
           VGPU_EXT_VERSION, VGPU_V1_REGION_SIZE, VGPU_EXT_OFFSET, VGPU_FILE_SIZE,
           (size_t)VGPU_SLOT_OFFSET(1023), sizeof(vgpu_region_file_t));
    return 0;
}
"#,
        )
        .unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = match Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", inc])
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
        {
            Ok(o) => o,
            Err(_) => {
                eprintln!("no C compiler ({cc}): header check skipped");
                return;
            }
        };
        assert!(out.status.success(), "header does not compile:\n{}", String::from_utf8_lossy(&out.stderr));
        let run = Command::new(&exe).output().unwrap();
        let got = String::from_utf8(run.stdout).unwrap();
        let want = format!(
            "{} {} {} {} {} {} {} {}\n",
            REGION_MAGIC,
            EXT_MAGIC,
            EXT_VERSION,
            V1_REGION_SIZE,
            EXT_OFFSET,
            FILE_SIZE,
            slot_offset(1023),
            FILE_SIZE
        );
        assert_eq!(got, want);
    }
}
