// Rust side of the ABI table (tests/abi/table.rs). `include!` this file, then the table, in a
// scope where `cuda_types::*` is imported; the table then defines
//
//     fn abi_rust_rows() -> Vec<AbiRustRow>
//
// with, for every row that has a Rust counterpart, the value the Rust bindings give. `ctype` rows
// have none (C only); `func` and `func13` rows check at compile time that the `PFN_` type exists.
// Used by crates/cuda-types/tests/abi_table.rs and tests/abi_conformance.rs.

#[allow(dead_code)]
#[derive(Debug)]
pub struct AbiRustRow {
    /// `kind header name` as written in the table, e.g. `offset cuda CUmemLocation_v1.id`.
    pub key: &'static str,
    /// What the Rust bindings say; `None` for rows without a Rust counterpart.
    pub rust: Option<i128>,
    /// The table's number (1 for `ctype`, 0 for `func`).
    pub expected: i128,
}

#[allow(unused_macros)]
macro_rules! abi_table {
    ($($kind:ident $hdr:ident $name:ident $(. $field:ident)* = $val:tt ;)*) => {
        #[allow(dead_code)]
        pub fn abi_rust_rows() -> Vec<AbiRustRow> {
            vec![$( abi_row!($kind $hdr $name $(. $field)* = $val) ),*]
        }
    };
}

#[allow(unused_macros)]
macro_rules! abi_row {
    (@row $kind:ident $hdr:ident $name:ident $(. $field:ident)* ; $rust:expr, $expected:expr) => {
        AbiRustRow {
            key: concat!(stringify!($kind), " ", stringify!($hdr), " ", stringify!($name) $(, ".", stringify!($field))*),
            rust: $rust,
            expected: $expected,
        }
    };
    (value $hdr:ident $name:ident = $val:tt) => {
        abi_row!(@row value $hdr $name; Some($name as i128), $val as i128)
    };
    (ptr $hdr:ident $name:ident = $val:tt) => {
        abi_row!(@row ptr $hdr $name; Some($name as usize as i128), $val as i128)
    };
    (size $hdr:ident $name:ident = $val:tt) => {
        abi_row!(@row size $hdr $name; Some(::core::mem::size_of::<$name>() as i128), $val as i128)
    };
    (align $hdr:ident $name:ident = $val:tt) => {
        abi_row!(@row align $hdr $name; Some(::core::mem::align_of::<$name>() as i128), $val as i128)
    };
    // bindgen renames a field called `type` (a Rust keyword) to `type_`.
    (offset $hdr:ident $name:ident . type = $val:tt) => {
        abi_row!(@row offset $hdr $name . type; Some(::core::mem::offset_of!($name, type_) as i128), $val as i128)
    };
    (offset $hdr:ident $name:ident $(. $field:ident)+ = $val:tt) => {
        abi_row!(@row offset $hdr $name $(. $field)+; Some(::core::mem::offset_of!($name, $($field).+) as i128), $val as i128)
    };
    (ctype $hdr:ident $name:ident = $val:tt) => {
        abi_row!(@row ctype $hdr $name; None, 1)
    };
    (func $hdr:ident $name:ident = $pfn:ident) => {{
        let _exists: $pfn = None;
        abi_row!(@row func $hdr $name; None, 0)
    }};
    (func13 $hdr:ident $name:ident = $pfn:ident) => {{
        let _exists: $pfn = None;
        abi_row!(@row func13 $hdr $name; None, 0)
    }};
}
