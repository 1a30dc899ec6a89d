//! Whose memory a CUDA memory location is: which allocations (`cuMemCreate`, stream-ordered pools)
//! count against a device's limit. Device memory counts; host memory (pinned, NUMA) does not;
//! managed memory counts in full wherever it is placed, since it can migrate wholly onto the device.
//!
//! The numbers are NVIDIA's `CUmemLocationType` / `CUmemAllocationType` (CUDA 13 `cuda.h`); some
//! are newer than the 12.x headers the shim's bindings come from, so they are spelled out here.

/// `CU_MEM_LOCATION_TYPE_*`.
pub mod loc {
    /// `NONE` / `INVALID`: no preferred location (managed pools).
    pub const NONE: i32 = 0;
    pub const DEVICE: i32 = 1;
    pub const HOST: i32 = 2;
    pub const HOST_NUMA: i32 = 3;
    pub const HOST_NUMA_CURRENT: i32 = 4;
    /// Device memory not visible to this process's devices.
    pub const INVISIBLE: i32 = 5;
    /// A part of one device's memory (13.0): `id`'s low byte is the device ordinal.
    pub const DEVICE_LOCALITY_DOMAIN: i32 = 6;
}

/// `CU_MEM_ALLOCATION_TYPE_*`.
pub mod alloc {
    pub const PINNED: i32 = 1;
    pub const MANAGED: i32 = 2;
}

/// `CU_MEMPOOL_ATTR_ALLOCATION_TYPE` (13.0; `int`).
pub const POOL_ATTR_ALLOCATION_TYPE: i32 = 9;
/// `CU_MEMPOOL_ATTR_LOCATION_TYPE` (13.0; `int`).
pub const POOL_ATTR_LOCATION_TYPE: i32 = 12;

/// Host memory: never device memory, whatever the id.
pub fn is_host(loc_type: i32) -> bool {
    matches!(loc_type, loc::HOST | loc::HOST_NUMA | loc::HOST_NUMA_CURRENT)
}

/// Does physical memory created at a location of type `loc_type` (`cuMemCreate`) count against
/// a device's limit? Device and locality-domain memory do; host memory does not. A type this
/// table does not know counts (never let an unknown kind escape the limit).
pub fn location_counts(loc_type: i32) -> bool {
    !is_host(loc_type)
}

/// The CUDA ordinal a counted location names (`id`): the device id, or for a locality domain the
/// low byte (`localized.deviceId`). `None`: not a device location (the caller uses the current
/// device).
pub fn location_device(loc_type: i32, id: i32) -> Option<i32> {
    match loc_type {
        loc::DEVICE => Some(id),
        loc::DEVICE_LOCALITY_DOMAIN => Some(id & 0xFF),
        _ => None,
    }
}

/// Does an allocation from a stream-ordered pool count against a device's limit, given the
/// pool's location type and allocation type (`None`: the driver could not say)? Managed pools
/// count wherever they live; pinned pools count unless they live in host memory.
pub fn pool_counts(loc_type: Option<i32>, alloc_type: Option<i32>) -> bool {
    if alloc_type == Some(alloc::MANAGED) {
        return true;
    }
    loc_type.is_none_or(location_counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_and_locality_domain_count_host_does_not() {
        assert!(location_counts(loc::DEVICE));
        assert!(location_counts(loc::DEVICE_LOCALITY_DOMAIN));
        assert!(location_counts(loc::INVISIBLE));
        for h in [loc::HOST, loc::HOST_NUMA, loc::HOST_NUMA_CURRENT] {
            assert!(!location_counts(h), "host location {h} counted");
        }
        // Unknown kinds count.
        assert!(location_counts(7));
        assert!(location_counts(-1));
    }

    #[test]
    fn device_of_a_location() {
        assert_eq!(location_device(loc::DEVICE, 3), Some(3));
        // localized { deviceId = 2, localityDomainId = 1 } read as the union's int.
        assert_eq!(location_device(loc::DEVICE_LOCALITY_DOMAIN, 0x0102), Some(2));
        assert_eq!(location_device(loc::HOST, 0), None);
    }

    #[test]
    fn pools_follow_location_and_managed_always_counts() {
        assert!(pool_counts(Some(loc::DEVICE), Some(alloc::PINNED)));
        assert!(pool_counts(Some(loc::DEVICE_LOCALITY_DOMAIN), Some(alloc::PINNED)));
        assert!(!pool_counts(Some(loc::HOST), Some(alloc::PINNED)));
        assert!(!pool_counts(Some(loc::HOST_NUMA), None));
        assert!(pool_counts(Some(loc::HOST), Some(alloc::MANAGED)));
        assert!(pool_counts(Some(loc::NONE), Some(alloc::MANAGED)));
        // Nothing known: count (a pre-13 driver's pools are device pools).
        assert!(pool_counts(None, None));
    }
}
