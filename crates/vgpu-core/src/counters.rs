//! Operator counters of a container, laid in the tail of the private extension's
//! `reserved` words ([`RegionExt::reserved`]); the monitor's 2 008 952 bytes are not touched.
//!
//! Monotonic, updated with one `fetch_add` (no lock, no system call) where they happen. Time
//! throttled, launches throttled and time blocked by the monitor already live in the limiter's
//! per-device words ([`crate::region::DeviceLimiterState`]: `throttled_ns`, `throttled_launches`,
//! `blocked_ns`) and are read from there, not duplicated.
//!
//! | `reserved` word | meaning |
//! |---:|---|
//! | 52 | [`COUNTERS_MAGIC`] once a library with counters attached ("no data yet" while 0) |
//! | 53 | dead slots freed by sweeps (any process, or `vgpu-smi sweep`) |
//! | 54 | sweeps that freed at least one slot |
//! | 55 | reserved (0) |
//! | 56 + 4·d | allocation refusals on device d |
//! | 57 + 4·d | bytes refused on device d |
//! | 58 + 4·d | reconciliation charges on device d (driver-held memory beyond what was counted) |
//! | 59 + 4·d | bytes charged by reconciliation on device d |

use crate::region::{EXT_OFFSET, MAX_DEVICES, RegionExt};
use core::mem::offset_of;
use core::sync::atomic::{AtomicU64, Ordering};

/// "CNTRS001" as a little-endian u64.
pub const COUNTERS_MAGIC: u64 = u64::from_le_bytes(*b"CNTRS001");
/// First `reserved` word used here (the words below stay free for others).
pub const FIRST_WORD: usize = 52;
const HDR_FLAG: usize = FIRST_WORD;
const HDR_SWEPT_SLOTS: usize = FIRST_WORD + 1;
const HDR_SWEEPS: usize = FIRST_WORD + 2;
const DEV_BASE: usize = FIRST_WORD + 4;
const PER_DEV: usize = 4;
/// Number of `reserved` words this block uses.
pub const WORDS: usize = 4 + PER_DEV * MAX_DEVICES;

const REFUSALS: usize = 0;
const REFUSED_BYTES: usize = 1;
const RECONCILES: usize = 2;
const RECONCILED_BYTES: usize = 3;

/// Byte offset of the counters block in the region file.
pub const FILE_OFFSET: usize = EXT_OFFSET + offset_of!(RegionExt, reserved) + FIRST_WORD * 8;

const _: () = {
    // The block ends exactly at the end of `reserved` (the end of the extension's first page).
    assert!(FIRST_WORD + WORDS == 120);
    assert!(offset_of!(RegionExt, reserved) == 3136);
    assert!(FILE_OFFSET == 2_011_136 + 3136 + 52 * 8);
    assert!(FILE_OFFSET + WORDS * 8 == EXT_OFFSET + 4096);
};

#[inline]
fn word(ext: &RegionExt, i: usize) -> &AtomicU64 {
    &ext.reserved[i]
}

#[inline]
fn dev_word(ext: &RegionExt, dev: usize, which: usize) -> Option<&AtomicU64> {
    (dev < MAX_DEVICES).then(|| word(ext, DEV_BASE + PER_DEV * dev + which))
}

/// Marks the block as live (idempotent; called when a process attaches the region).
pub fn init(ext: Option<&RegionExt>) {
    if let Some(ext) = ext {
        let _ = word(ext, HDR_FLAG).compare_exchange(0, COUNTERS_MAGIC, Ordering::Release, Ordering::Relaxed);
    }
}

#[inline]
fn bump(ext: Option<&RegionExt>, dev: usize, which: usize, bytes: u64) {
    if let Some(ext) = ext
        && let (Some(n), Some(b)) = (dev_word(ext, dev, which), dev_word(ext, dev, which + 1))
    {
        n.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// An allocation of `bytes` on device `dev` was refused.
#[inline]
pub fn record_refusal(ext: Option<&RegionExt>, dev: usize, bytes: u64) {
    bump(ext, dev, REFUSALS, bytes);
}

/// `bytes` of driver-held memory beyond what was counted were charged on device `dev`.
#[inline]
pub fn record_reconcile(ext: Option<&RegionExt>, dev: usize, bytes: u64) {
    bump(ext, dev, RECONCILES, bytes);
}

/// A sweep freed `slots` dead slots (nothing recorded for 0).
#[inline]
pub fn record_sweep(ext: Option<&RegionExt>, slots: usize) {
    if let Some(ext) = ext
        && slots > 0
    {
        word(ext, HDR_SWEPT_SLOTS).fetch_add(slots as u64, Ordering::Relaxed);
        word(ext, HDR_SWEEPS).fetch_add(1, Ordering::Relaxed);
    }
}

/// One device's counters (a snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub refusals: u64,
    pub refused_bytes: u64,
    pub reconciles: u64,
    pub reconciled_bytes: u64,
    /// From the limiter's words.
    pub throttled_ns: u64,
    pub throttled_launches: u64,
    pub blocked_ns: u64,
}

/// The container's counters (a snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub swept_slots: u64,
    pub sweeps: u64,
    pub devices: Vec<DeviceCounters>,
}

/// A snapshot, `None` while no library with counters has attached ("no data yet").
pub fn read(ext: &RegionExt) -> Option<Counters> {
    if word(ext, HDR_FLAG).load(Ordering::Acquire) != COUNTERS_MAGIC {
        return None;
    }
    let get = |i: usize| word(ext, i).load(Ordering::Relaxed);
    let devices = (0..MAX_DEVICES)
        .map(|d| {
            let b = DEV_BASE + PER_DEV * d;
            let l = &ext.limiter[d];
            DeviceCounters {
                refusals: get(b + REFUSALS),
                refused_bytes: get(b + REFUSED_BYTES),
                reconciles: get(b + RECONCILES),
                reconciled_bytes: get(b + RECONCILED_BYTES),
                throttled_ns: l.throttled_ns.load(Ordering::Relaxed),
                throttled_launches: l.throttled_launches.load(Ordering::Relaxed),
                blocked_ns: l.blocked_ns.load(Ordering::Relaxed),
            }
        })
        .collect();
    Some(Counters { swept_slots: get(HDR_SWEPT_SLOTS), sweeps: get(HDR_SWEEPS), devices })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::temp_region;

    #[test]
    fn no_data_until_init_then_monotonic() {
        let (_p, r) = temp_region("counters");
        let ext = r.ext();
        assert!(ext.is_some());
        // Recording before init still counts, but readers say "no data" until the flag is set.
        assert_eq!(read(ext.unwrap()), None);
        init(ext);
        let c = read(ext.unwrap()).unwrap();
        assert_eq!(c.devices.len(), MAX_DEVICES);
        assert!(c.devices.iter().all(|d| *d == DeviceCounters::default()));
        record_refusal(ext, 1, 4096);
        record_refusal(ext, 1, 100);
        record_reconcile(ext, 0, 7);
        record_sweep(ext, 0);
        record_sweep(ext, 3);
        record_refusal(ext, MAX_DEVICES, 1); // out of range: ignored
        record_refusal(None, 0, 1); // no extension: ignored
        init(ext); // idempotent
        let c = read(ext.unwrap()).unwrap();
        assert_eq!((c.devices[1].refusals, c.devices[1].refused_bytes), (2, 4196));
        assert_eq!((c.devices[0].reconciles, c.devices[0].reconciled_bytes), (1, 7));
        assert_eq!(c.devices[0].refusals, 0);
        assert_eq!((c.swept_slots, c.sweeps), (3, 1));
    }

    #[test]
    fn block_is_the_reserved_tail() {
        // A raw read of the file at FILE_OFFSET sees the flag word.
        let (p, r) = temp_region("counters-raw");
        init(r.ext());
        record_refusal(r.ext(), 2, 5);
        let b = std::fs::read(&*p).unwrap();
        let w = |off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap());
        assert_eq!(w(FILE_OFFSET), COUNTERS_MAGIC);
        assert_eq!(w(FILE_OFFSET + 8 * (4 + 4 * 2)), 1);
        assert_eq!(w(FILE_OFFSET + 8 * (4 + 4 * 2 + 1)), 5);
    }
}
