//! The Rust bindings agree with the ABI table (`tests/abi/table.rs` at the repository root): every
//! constant, size, alignment and field offset there, whose numbers are NVIDIA's. The C side (our
//! headers and NVIDIA's) is checked by the root package's `tests/abi_conformance.rs`.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use cuda_types::*;

include!("../../../tests/abi/rust_rows.rs");
include!("../../../tests/abi/table.rs");

#[test]
fn rust_bindings_match_abi_table() {
    let rows = abi_rust_rows();
    let mut checked = 0;
    let mut bad = Vec::new();
    for row in &rows {
        if let Some(v) = row.rust {
            checked += 1;
            if v != row.expected {
                bad.push(format!("{}: rust {} != table {}", row.key, v, row.expected));
            }
        }
    }
    assert!(bad.is_empty(), "{} of {checked} rows differ:\n{}", bad.len(), bad.join("\n"));
    assert!(checked > 500, "only {checked} rows checked");
}

#[test]
fn helpers() {
    assert_eq!(nvmlMemory_v2, 0x0200_0028);
    assert_eq!(CU_STREAM_LEGACY as usize, 1);
    assert_eq!(CU_STREAM_PER_THREAD as usize, 2);
    assert_eq!(array_format_channel_bytes(CU_AD_FORMAT_FLOAT), Some(4));
    assert_eq!(array_format_channel_bytes(CU_AD_FORMAT_HALF), Some(2));
    assert_eq!(array_format_channel_bytes(CU_AD_FORMAT_NV12), None);
    // CUresult is a plain integer: values outside the C enum are representable.
    let r: CUresult = 12345;
    assert_ne!(r, CUDA_SUCCESS);
}
