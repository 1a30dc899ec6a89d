//! One device-index mapping for everything: CUDA ordinal → region index (pure part; the shim
//! queries the UUIDs and calls [`build`]).
//!
//! The region, the limits (`CUDA_DEVICE_MEMORY_LIMIT_<i>`) and the monitor are indexed by the
//! in-container NVML index. CUDA ordinals differ when `CUDA_VISIBLE_DEVICES` reorders or subsets
//! devices, so we match by UUID: CUDA ordinal → UUID → position in NVML's list. Without NVML we
//! fall back to `CUDA_VISIBLE_DEVICES` indices, then to the identity.

use crate::config::VisibleDevice;
use crate::region::MAX_DEVICES;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceMap {
    /// `cuda_to_region[ordinal]`
    pub cuda_to_region: Vec<usize>,
    /// UUIDs by region (NVML) index, as written into the region.
    pub region_uuids: Vec<String>,
}

impl DeviceMap {
    /// Region index of a CUDA ordinal; an ordinal outside the map is clamped into the region.
    pub fn region_index(&self, ordinal: i32) -> usize {
        usize::try_from(ordinal)
            .ok()
            .and_then(|o| self.cuda_to_region.get(o).copied())
            .unwrap_or_else(|| (ordinal.max(0) as usize).min(MAX_DEVICES - 1))
    }

    /// The CUDA ordinals mapped to region index `d`, in order.
    pub fn ordinals_of(&self, d: usize) -> Vec<i32> {
        self.cuda_to_region.iter().enumerate().filter(|&(_, &r)| r == d).map(|(o, _)| o as i32).collect()
    }
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML spells a CUDA UUID.
pub fn format_uuid(b: &[u8; 16]) -> String {
    format!(
        "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
    )
}

/// The mapping, and whether CUDA's UUIDs failed to match NVML's list (the caller logs that; the
/// mapping then falls back to `CUDA_VISIBLE_DEVICES` order).
///
/// - CUDA and NVML UUIDs known, every CUDA UUID in NVML's list (case-insensitive): by UUID.
/// - Else, `CUDA_VISIBLE_DEVICES` with one integer entry per CUDA device: those indices
///   (clamped into the region).
/// - Else the identity over the CUDA devices.
///
/// `region_uuids` are NVML's list when known, else the CUDA UUIDs placed at their mapped index.
pub fn build(cuda: Option<&[String]>, nvml: Option<&[String]>, visible: Option<&[VisibleDevice]>) -> (DeviceMap, bool) {
    let n_cuda = cuda.map_or(0, |c| c.len());
    let mut uuid_mismatch = false;
    if let (Some(c), Some(n)) = (cuda, nvml) {
        let by_uuid: Option<Vec<usize>> = c.iter().map(|u| n.iter().position(|x| x.eq_ignore_ascii_case(u))).collect();
        match by_uuid {
            Some(map) => return (DeviceMap { cuda_to_region: map, region_uuids: n.to_vec() }, false),
            None => uuid_mismatch = true,
        }
    }
    // Fallback: CUDA_VISIBLE_DEVICES integer entries name the physical (= NVML) index.
    let mut map: Vec<usize> = (0..n_cuda).collect();
    if let Some(v) = visible
        && v.len() == n_cuda
        && v.iter().all(|e| matches!(e, VisibleDevice::Index(_)))
    {
        map = v
            .iter()
            .map(|e| match e {
                VisibleDevice::Index(i) => (*i as usize).min(MAX_DEVICES - 1),
                _ => 0,
            })
            .collect();
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
    (DeviceMap { cuda_to_region: map, region_uuids }, uuid_mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn ordinals_of_a_region_index() {
        let m = DeviceMap { cuda_to_region: vec![2, 0, 2], region_uuids: Vec::new() };
        assert_eq!(m.ordinals_of(2), vec![0, 2]);
        assert_eq!(m.ordinals_of(0), vec![1]);
        assert!(m.ordinals_of(1).is_empty());
    }

    #[test]
    fn by_uuid_follows_nvml_order_case_insensitively() {
        // CUDA_VISIBLE_DEVICES=2,0 on three GPUs: ordinal 0 is NVML's 2, ordinal 1 is NVML's 0.
        let nvml = s(&["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]);
        let cuda = s(&["GPU-CCCC", "gpu-aaaa"]);
        let (m, mismatch) = build(Some(&cuda), Some(&nvml), None);
        assert!(!mismatch);
        assert_eq!(m.cuda_to_region, vec![2, 0]);
        assert_eq!(m.region_uuids, nvml);
        assert_eq!((m.region_index(0), m.region_index(1)), (2, 0));
    }

    #[test]
    fn uuid_mismatch_falls_back_to_visible_indices() {
        let nvml = s(&["GPU-aaaa", "GPU-bbbb"]);
        let cuda = s(&["GPU-aaaa", "GPU-zzzz"]);
        let vis = [VisibleDevice::Index(1), VisibleDevice::Index(0)];
        let (m, mismatch) = build(Some(&cuda), Some(&nvml), Some(&vis));
        assert!(mismatch);
        assert_eq!(m.cuda_to_region, vec![1, 0]);
        assert_eq!(m.region_uuids, nvml, "NVML's list stays the region's UUIDs");
    }

    #[test]
    fn visible_indices_without_nvml_place_cuda_uuids() {
        let cuda = s(&["GPU-x", "GPU-y"]);
        let vis = [VisibleDevice::Index(3), VisibleDevice::Index(1)];
        let (m, mismatch) = build(Some(&cuda), None, Some(&vis));
        assert!(!mismatch);
        assert_eq!(m.cuda_to_region, vec![3, 1]);
        assert_eq!(m.region_uuids, s(&["", "GPU-y", "", "GPU-x"]));
    }

    #[test]
    fn visible_list_not_usable_gives_identity() {
        let cuda = s(&["GPU-x", "GPU-y"]);
        // Wrong length.
        let (m, _) = build(Some(&cuda), None, Some(&[VisibleDevice::Index(5)]));
        assert_eq!(m.cuda_to_region, vec![0, 1]);
        // A UUID entry.
        let vis = [VisibleDevice::Index(1), VisibleDevice::Uuid("GPU-y".into())];
        let (m, _) = build(Some(&cuda), None, Some(&vis));
        assert_eq!(m.cuda_to_region, vec![0, 1]);
        assert_eq!(m.region_uuids, cuda);
    }

    #[test]
    fn visible_index_is_clamped_into_the_region() {
        let cuda = s(&["GPU-x"]);
        let (m, _) = build(Some(&cuda), None, Some(&[VisibleDevice::Index(99)]));
        assert_eq!(m.cuda_to_region, vec![MAX_DEVICES - 1]);
        assert_eq!(m.region_uuids.len(), MAX_DEVICES);
        assert_eq!(m.region_uuids[MAX_DEVICES - 1], "GPU-x");
    }

    #[test]
    fn nothing_known_gives_an_empty_map_and_clamped_identity() {
        let (m, mismatch) = build(None, None, None);
        assert!(!mismatch);
        assert_eq!(m, DeviceMap::default());
        assert_eq!(m.region_index(3), 3);
        assert_eq!(m.region_index(-4), 0);
        assert_eq!(m.region_index(1000), MAX_DEVICES - 1);
    }

    #[test]
    fn ordinal_outside_the_map_is_clamped() {
        let (m, _) = build(Some(&s(&["GPU-a"])), Some(&s(&["GPU-b", "GPU-a"])), None);
        assert_eq!(m.region_index(0), 1);
        assert_eq!(m.region_index(5), 5);
        assert_eq!(m.region_index(i32::MAX), MAX_DEVICES - 1);
    }

    #[test]
    fn uuid_text_is_nvml_spelling() {
        let b: [u8; 16] = [0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 0xa, 0xb, 0xc, 0xd, 0xe, 0xff];
        assert_eq!(format_uuid(&b), "GPU-deadbeef-0001-0203-0405-0a0b0c0d0eff");
    }
}
