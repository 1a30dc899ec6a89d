//! Which exported driver symbol `cuGetProcAddress(name, version, flags)` answers with, from the
//! thresholds of NVIDIA's headers (`cuda_types::pfn_table`): the newest threshold of `name` at or
//! below both the requested version and the driver's own; with the per-thread flag, its
//! `_ptds`/`_ptsz` form when the headers list one for that same ABI. `None` when the answer is not
//! certain: a version beyond the headers the table was generated from, or a per-thread variant
//! that belongs to an older ABI than the default one.

use cuda_types::pfn_table::{HEADERS_VERSION, PFN_ROWS, PerThread, PfnRow};

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD: u64 = 2;

/// The rows of `name` (the table is sorted by name).
fn rows_of(name: &[u8]) -> &'static [PfnRow] {
    let start = PFN_ROWS.partition_point(|r| r.name().as_bytes() < name);
    let end = start + PFN_ROWS[start..].partition_point(|r| r.name().as_bytes() == name);
    &PFN_ROWS[start..end]
}

/// The symbol with the ABI the driver hands out for (`name`, `version`, `flags`), a driver of
/// version `driver` answering.
pub fn symbol_for(name: &[u8], version: i32, driver: i32, flags: u64) -> Option<&'static str> {
    let v = u32::try_from(version.min(driver)).ok()?;
    if v > HEADERS_VERSION {
        return None;
    }
    let rows = rows_of(name);
    let newest = |per_thread: bool| {
        rows.iter()
            .filter(|r| (r.per_thread != PerThread::No) == per_thread && r.version <= v)
            .max_by_key(|r| r.version)
    };
    let default = newest(false)?;
    if flags & PER_THREAD == 0 {
        return Some(default.symbol());
    }
    match newest(true) {
        None => Some(default.symbol()),
        Some(pt) if pt.version >= default.version => Some(pt.symbol()),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::symbol_for;

    #[test]
    fn thresholds_by_version_driver_and_flags() {
        let s = |n: &str, v, d, f| symbol_for(n.as_bytes(), v, d, f);
        assert_eq!(s("cuMemAlloc", 12090, 12090, 0), Some("cuMemAlloc_v2"));
        assert_eq!(s("cuMemAlloc", 12090, 12090, 2), Some("cuMemAlloc_v2"), "no per-thread variant");
        assert_eq!(s("cuMemAlloc", 3000, 12090, 0), Some("cuMemAlloc"));
        assert_eq!(s("cuMemAlloc", 1000, 12090, 0), None, "older than any threshold");
        assert_eq!(s("cuCtxCreate", 13050, 13050, 0), Some("cuCtxCreate_v4"));
        assert_eq!(s("cuCtxCreate", 13050, 12040, 0), Some("cuCtxCreate_v3"), "the driver's own version caps it");
        assert_eq!(s("cuCtxCreate", 11040, 13050, 0), Some("cuCtxCreate_v3"));
        assert_eq!(s("cuLaunchKernel", 12090, 12090, 2), Some("cuLaunchKernel_ptsz"));
        assert_eq!(s("cuLaunchKernel", 6050, 12090, 2), Some("cuLaunchKernel"), "per-thread from 7000");
        assert_eq!(s("cuMemcpyHtoD", 13050, 13050, 2), Some("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(s("cuGetProcAddress", 12000, 13050, 0), Some("cuGetProcAddress_v2"));
        assert_eq!(s("cuGetProcAddress", 11030, 13050, 0), Some("cuGetProcAddress"));
        assert_eq!(s("cuGraphInstantiate", 12000, 12090, 0), Some("cuGraphInstantiateWithFlags"));
        assert_eq!(s("cuGraphInstantiate", 12000, 11080, 0), Some("cuGraphInstantiate_v2"));
        assert_eq!(s("cuMemAlloc", 13060, 13060, 0), None, "newer than the headers");
        assert_eq!(s("cuMemAlloc", 13050, 13060, 0), Some("cuMemAlloc_v2"));
        assert_eq!(s("cuNoSuchFunction", 12090, 12090, 0), None);
        assert_eq!(s("", 12090, 12090, 0), None);
        assert_eq!(s("cuMemAlloc", -1, 12090, 0), None);
    }
}
