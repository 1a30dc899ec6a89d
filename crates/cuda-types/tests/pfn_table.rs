//! The generated threshold table (`ci/gen-pfn-table.py`): shape, and the thresholds whose meaning
//! changed between CUDA 12 and 13 as NVIDIA's headers list them.

use cuda_types::is_pfn_symbol;
use cuda_types::pfn_table::{IN_12_9, IN_13, PFN_ROWS, PerThread};

fn row(name: &str, version: u32, pt: PerThread) -> &'static str {
    PFN_ROWS
        .iter()
        .find(|r| r.name() == name && r.version == version && r.per_thread == pt)
        .unwrap_or_else(|| panic!("no row {name}@{version} {pt:?}"))
        .symbol()
}

#[test]
fn rows_are_sorted_unique_and_from_both_releases() {
    assert!(PFN_ROWS.len() > 700, "{} rows", PFN_ROWS.len());
    for w in PFN_ROWS.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert!((a.name(), a.version) <= (b.name(), b.version), "not sorted: {a:?} {b:?}");
        assert!(!(a.name() == b.name() && a.version == b.version && a.per_thread == b.per_thread), "duplicate {a:?}");
    }
    assert!(PFN_ROWS.iter().all(|r| r.headers & (IN_12_9 | IN_13) != 0 && r.symbol().starts_with(r.name())
        || r.symbol() == "cuGraphInstantiateWithFlags"));
    assert!(PFN_ROWS.iter().any(|r| r.headers == IN_13), "no 13.x-only threshold");
}

#[test]
fn thresholds_that_changed_in_13() {
    use PerThread::*;
    assert_eq!(row("cuCtxCreate", 3020, No), "cuCtxCreate_v2");
    assert_eq!(row("cuCtxCreate", 11040, No), "cuCtxCreate_v3");
    assert_eq!(row("cuCtxCreate", 12050, No), "cuCtxCreate_v4");
    assert_eq!(row("cuCtxGetDevice", 13000, No), "cuCtxGetDevice_v2");
    assert_eq!(row("cuCtxSynchronize", 13000, No), "cuCtxSynchronize_v2");
    assert_eq!(row("cuMemAdvise", 12020, No), "cuMemAdvise_v2");
    assert_eq!(row("cuMemPrefetchAsync", 12020, No), "cuMemPrefetchAsync_v2");
    assert_eq!(row("cuMemPrefetchAsync", 12020, Ptsz), "cuMemPrefetchAsync_v2_ptsz");
    assert_eq!(row("cuDeviceGetUuid", 11040, No), "cuDeviceGetUuid_v2");
    assert_eq!(row("cuStreamGetCaptureInfo", 12030, No), "cuStreamGetCaptureInfo_v3");
    assert_eq!(row("cuGraphAddNode", 12030, No), "cuGraphAddNode_v2");
    assert_eq!(row("cuGraphAddNode", 13040, No), "cuGraphAddNode_v3");
    assert_eq!(row("cuLaunchHostFunc", 13010, No), "cuLaunchHostFunc_v2");
    assert_eq!(row("cuMemcpyBatchAsync", 13000, No), "cuMemcpyBatchAsync_v2");
    assert_eq!(row("cuMemcpyHtoD", 7000, Ptds), "cuMemcpyHtoD_v2_ptds");
    assert_eq!(row("cuGetProcAddress", 12000, No), "cuGetProcAddress_v2");
    assert_eq!(row("cuGraphInstantiate", 12000, No), "cuGraphInstantiateWithFlags");
    let r = PFN_ROWS.iter().find(|r| r.name() == "cuCtxGetDevice" && r.version == 13000).unwrap();
    assert_eq!(r.headers, IN_13);
}

#[test]
fn is_pfn_symbol_knows_exactly_the_table() {
    const { assert!(is_pfn_symbol("cuCtxCreate_v4")) };
    assert!(is_pfn_symbol("cuLaunchKernel_ptsz"));
    assert!(!is_pfn_symbol("cuCtxCreate_v5"));
    assert!(!is_pfn_symbol("cuMemAlloc_v3"));
    assert!(!is_pfn_symbol(""));
}
