//! One device-index mapping for everything: CUDA ordinal → region index. The mapping itself is
//! pure and lives in `vgpu_core::devices`; this module asks the driver and NVML for the UUIDs.
//!
//! The region, the limits (`CUDA_DEVICE_MEMORY_LIMIT_<i>`) and the monitor are indexed by the
//! in-container NVML index. CUDA ordinals differ when `CUDA_VISIBLE_DEVICES` reorders or subsets
//! devices, so we match by UUID: CUDA ordinal → UUID → position in NVML's list. Without NVML we
//! fall back to `CUDA_VISIBLE_DEVICES` indices, then to the identity.

use crate::driver;
use crate::ffi::*;
use std::ffi::{c_char, c_int, c_uint};
use vgpu_core::config::VisibleDevice;
use vgpu_core::region::MAX_DEVICES;

pub use vgpu_core::devices::DeviceMap;

// SAFETY (every `unsafe` call below): real driver/NVML functions of their generated types, called
// with pointers to locals (or a buffer with its true length) that live across the call; out-values
// are used only after success.

/// UUIDs of the CUDA-visible devices by ordinal (needs `cuInit` to have succeeded).
pub fn cuda_uuids() -> Option<Vec<String>> {
    let count = {
        let f = driver::cuDeviceGetCount()?;
        let mut n: c_int = 0;
        if unsafe { f(&mut n) } != CUDA_SUCCESS {
            return None;
        }
        n.clamp(0, MAX_DEVICES as c_int)
    };
    let get = driver::cuDeviceGet()?;
    let uuid_fn = driver::cuDeviceGetUuid_v2().or_else(driver::cuDeviceGetUuid)?;
    let mut out = Vec::new();
    for i in 0..count {
        let mut dev: CUdevice = 0;
        let mut u = CUuuid::default();
        if unsafe { get(&mut dev, i) } != CUDA_SUCCESS || unsafe { uuid_fn(&mut u, dev) } != CUDA_SUCCESS {
            return None;
        }
        out.push(vgpu_core::devices::format_uuid(&u.bytes.map(|c| c as u8)));
    }
    Some(out)
}

/// UUIDs of the NVML devices by NVML index, initialising NVML (refcounted by NVML itself).
pub fn nvml_uuids() -> Option<Vec<String>> {
    if !driver::nvml_init() {
        return None;
    }
    let mut n: c_uint = 0;
    if unsafe { driver::nvmlDeviceGetCount_v2()?(&mut n) } != NVML_SUCCESS {
        return None;
    }
    let by_index = driver::nvmlDeviceGetHandleByIndex_v2()?;
    let get_uuid = driver::nvmlDeviceGetUUID()?;
    let mut out = Vec::new();
    for i in 0..n.min(MAX_DEVICES as c_uint) {
        let mut h: nvmlDevice_t = std::ptr::null_mut();
        if unsafe { by_index(i, &mut h) } != NVML_SUCCESS {
            return None;
        }
        let mut buf = [0 as c_char; 96];
        if unsafe { get_uuid(h, buf.as_mut_ptr(), buf.len() as c_uint) } != NVML_SUCCESS {
            return None;
        }
        // SAFETY: on success NVML writes a NUL-terminated UUID within `buf.len()` bytes.
        let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        out.push(s);
    }
    Some(out)
}

/// Build the mapping (`vgpu_core::devices::build`), saying once when CUDA's UUIDs do not all
/// appear in NVML's list.
pub fn build(cuda: Option<&[String]>, nvml: Option<&[String]>, visible: Option<&[VisibleDevice]>) -> DeviceMap {
    let (map, uuid_mismatch) = vgpu_core::devices::build(cuda, nvml, visible);
    if uuid_mismatch {
        crate::warn!("CUDA device UUIDs do not all appear in NVML's list; falling back to CUDA_VISIBLE_DEVICES order");
    }
    map
}
