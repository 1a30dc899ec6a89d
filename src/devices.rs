//! One device-index mapping for everything: CUDA ordinal → region index.
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

#[derive(Debug, Clone, Default)]
pub struct DeviceMap {
    /// `cuda_to_region[ordinal]`
    pub cuda_to_region: Vec<usize>,
    /// UUIDs by region (NVML) index, as written into the region.
    pub region_uuids: Vec<String>,
}

impl DeviceMap {
    pub fn region_index(&self, ordinal: CUdevice) -> usize {
        usize::try_from(ordinal)
            .ok()
            .and_then(|o| self.cuda_to_region.get(o).copied())
            .unwrap_or_else(|| (ordinal.max(0) as usize).min(MAX_DEVICES - 1))
    }
}

pub fn format_uuid(u: &CUuuid) -> String {
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    format!(
        "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
    )
}

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
        out.push(format_uuid(&u));
    }
    Some(out)
}

/// UUIDs of the NVML devices by NVML index, initialising NVML (refcounted by NVML itself).
pub fn nvml_uuids() -> Option<Vec<String>> {
    let init = driver::nvmlInit_v2()?;
    if unsafe { init() } != NVML_SUCCESS {
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
        let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        out.push(s);
    }
    Some(out)
}

/// Build the mapping. Pure over its inputs (see tests in the integration suite).
pub fn build(cuda: Option<&[String]>, nvml: Option<&[String]>, visible: Option<&[VisibleDevice]>) -> DeviceMap {
    let n_cuda = cuda.map_or(0, |c| c.len());
    if let (Some(c), Some(n)) = (cuda, nvml) {
        let mut map = Vec::with_capacity(c.len());
        let mut ok = true;
        for u in c {
            match n.iter().position(|x| x.eq_ignore_ascii_case(u)) {
                Some(i) => map.push(i),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return DeviceMap { cuda_to_region: map, region_uuids: n.to_vec() };
        }
        crate::warn!("CUDA device UUIDs do not all appear in NVML's list; falling back to CUDA_VISIBLE_DEVICES order");
    }
    // Fallback: CUDA_VISIBLE_DEVICES integer entries name the physical (= NVML) index.
    let mut map: Vec<usize> = (0..n_cuda).collect();
    if let Some(v) = visible {
        if v.len() == n_cuda && v.iter().all(|e| matches!(e, VisibleDevice::Index(_))) {
            map = v
                .iter()
                .map(|e| match e {
                    VisibleDevice::Index(i) => (*i as usize).min(MAX_DEVICES - 1),
                    _ => 0,
                })
                .collect();
        }
    }
    let region_uuids = match (nvml, cuda) {
        (Some(n), _) => n.to_vec(),
        (None, Some(c)) => {
            let mut u = vec![String::new(); map.iter().copied().max().map_or(0, |m| m + 1)];
            for (o, &r) in map.iter().enumerate() {
                u[r] = c[o].clone();
            }
            u
        }
        _ => Vec::new(),
    };
    DeviceMap { cuda_to_region: map, region_uuids }
}
