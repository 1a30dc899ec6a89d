//! Nothing unwinds into C: every export runs its body under `catch_unwind` and maps a panic to an
//! error code of the API it implements.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Unwind payload of a call refused for a reason already logged once (the process state could not
/// be built): the export answers with its error code without logging again.
pub struct Refused;

/// `AssertUnwindSafe`: after a panic the body's captured state is never looked at again; the
/// export only returns `on_panic`.
#[inline]
pub fn ffi<R>(name: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(e) => {
            if !e.is::<Refused>() {
                crate::error!("internal error (panic) in {name}; returning an error code instead");
            }
            on_panic
        }
    }
}
