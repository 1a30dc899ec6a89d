//! The virtual device memory view (docs/known-failures.md #11, docs/hami-contract.md §6.4/§6.7), one
//! arithmetic for every surface: `cuMemGetInfo(_v2)`, `cuDeviceTotalMem(_v2)`,
//! `nvmlDeviceGetMemoryInfo(_v2)`.
//!
//! - No limit (0): the physical values pass through untouched.
//! - Limit: `total = min(limit, physical total)` (never more than exists);
//!   `free = min(total − container usage, physical free)`, saturating at 0 (never negative or
//!   wrapped; over the limit reports `free = 0` instead of the incumbent's error).

/// `(free, total)` for `cuMemGetInfo`.
pub fn mem_info(limit: u64, phys_total: u64, phys_free: u64, container_used: u64) -> (u64, u64) {
    if limit == 0 {
        return (phys_free, phys_total);
    }
    let total = limit.min(phys_total);
    let free = total.saturating_sub(container_used).min(phys_free);
    (free, total)
}

/// `cuDeviceTotalMem`: passes through without a limit (the incumbent returned 0).
pub fn device_total_mem(limit: u64, phys_total: u64) -> u64 {
    if limit == 0 { phys_total } else { limit.min(phys_total) }
}

/// `nvmlMemory_t` (v1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmlMemory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`: `total = reserved + used + free` (NVML's definition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmlMemoryV2 {
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// NVML v1 view. With a limit: `used` = container usage (capped at `total`, so `used ≤ total`),
/// `free` as in [`mem_info`].
pub fn nvml_memory(limit: u64, phys: NvmlMemory, container_used: u64) -> NvmlMemory {
    if limit == 0 {
        return phys;
    }
    let total = limit.min(phys.total);
    let used = container_used.min(total);
    let free = (total - used).min(phys.free);
    NvmlMemory { total, free, used }
}

/// NVML v2 view: like v1, with the driver's `reserved` kept inside the virtual total
/// (`reserved + used + free ≤ total`, all saturating).
pub fn nvml_memory_v2(limit: u64, phys: NvmlMemoryV2, container_used: u64) -> NvmlMemoryV2 {
    if limit == 0 {
        return phys;
    }
    let total = limit.min(phys.total);
    let reserved = phys.reserved.min(total);
    let used = container_used.min(total - reserved);
    let free = (total - reserved - used).min(phys.free);
    NvmlMemoryV2 { total, reserved, free, used }
}

/// NVML's two-call protocol for a process list of `n` entries, the caller's array holding `cap`
/// (its `*count` on entry). The caller always reports `n` back in `*count`, then:
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmlListAnswer {
    /// Write the `n` entries and return success (also for `n == 0` with a null array).
    Fill,
    /// `NVML_ERROR_INSUFFICIENT_SIZE`: the array is too small; nothing is written.
    InsufficientSize,
    /// `NVML_ERROR_INVALID_ARGUMENT`: entries to write but no array.
    InvalidArgument,
}

pub fn nvml_list_answer(cap: usize, n: usize, array_is_null: bool) -> NvmlListAnswer {
    if n > cap {
        NvmlListAnswer::InsufficientSize
    } else if n > 0 && array_is_null {
        NvmlListAnswer::InvalidArgument
    } else {
        NvmlListAnswer::Fill
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;

    #[test]
    fn nvml_two_call_protocol() {
        use NvmlListAnswer::*;
        assert_eq!(nvml_list_answer(0, 0, true), Fill, "size query with nothing to list");
        assert_eq!(nvml_list_answer(0, 3, true), InsufficientSize, "size query: the count comes back");
        assert_eq!(nvml_list_answer(2, 3, false), InsufficientSize);
        assert_eq!(nvml_list_answer(3, 3, false), Fill);
        assert_eq!(nvml_list_answer(8, 3, false), Fill);
        assert_eq!(nvml_list_answer(8, 3, true), InvalidArgument);
    }

    #[test]
    fn cuda_view() {
        assert_eq!(mem_info(0, 16 * G, 10 * G, 3 * G), (10 * G, 16 * G), "no limit: pass through");
        assert_eq!(mem_info(4 * G, 16 * G, 10 * G, G), (3 * G, 4 * G));
        assert_eq!(mem_info(20 * G, 16 * G, 10 * G, G), (10 * G, 16 * G), "total never > physical; free ≤ phys free");
        assert_eq!(mem_info(4 * G, 16 * G, 10 * G, 5 * G), (0, 4 * G), "over the limit: free 0");
        assert_eq!(mem_info(4 * G, 16 * G, G / 2, G), (G / 2, 4 * G), "other tenants: physical free caps");
        assert_eq!(mem_info(u64::MAX, u64::MAX, u64::MAX, u64::MAX), (0, u64::MAX));
        assert_eq!(mem_info(1, 0, 0, 0), (0, 0));
        assert_eq!(device_total_mem(0, 16 * G), 16 * G);
        assert_eq!(device_total_mem(4 * G, 16 * G), 4 * G);
        assert_eq!(device_total_mem(40 * G, 16 * G), 16 * G);
    }

    #[test]
    fn nvml_views() {
        let phys = NvmlMemory { total: 16 * G, free: 10 * G, used: 6 * G };
        assert_eq!(nvml_memory(0, phys, G), phys);
        assert_eq!(nvml_memory(4 * G, phys, G), NvmlMemory { total: 4 * G, free: 3 * G, used: G });
        assert_eq!(nvml_memory(4 * G, phys, 9 * G), NvmlMemory { total: 4 * G, free: 0, used: 4 * G });
        let v2 = NvmlMemoryV2 { total: 16 * G, reserved: G / 2, free: 10 * G, used: 5 * G };
        assert_eq!(nvml_memory_v2(0, v2, G), v2);
        let r = nvml_memory_v2(4 * G, v2, G);
        assert_eq!(r, NvmlMemoryV2 { total: 4 * G, reserved: G / 2, free: 4 * G - G / 2 - G, used: G });
        assert!(r.reserved + r.used + r.free <= r.total);
        let r = nvml_memory_v2(G / 4, v2, G);
        assert_eq!(r, NvmlMemoryV2 { total: G / 4, reserved: G / 4, free: 0, used: 0 });
    }

    #[test]
    fn exhaustive_small_invariants() {
        for limit in 0..12u64 {
            for pt in 0..12u64 {
                for pf in 0..=pt {
                    for used in 0..14u64 {
                        let (free, total) = mem_info(limit, pt, pf, used);
                        assert!(total <= pt && free <= total && free <= pf);
                        if limit > 0 {
                            assert!(total <= limit);
                            assert!(free + used.min(total) <= total);
                        }
                        let n = nvml_memory(limit, NvmlMemory { total: pt, free: pf, used: pt - pf }, used);
                        assert!(n.total <= pt && n.free + n.used <= n.total);
                    }
                }
            }
        }
    }
}
