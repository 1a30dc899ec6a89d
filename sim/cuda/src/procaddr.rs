//! `cuGetProcAddress`: a table of (base name, ABI version, per-thread flag) → exported function,
//! generated from the export list. The highest version ≤ the requested one wins; `flags & 2` prefers
//! the `_ptsz`/`_ptds` variant where one exists. Unknown names: `CUDA_ERROR_NOT_FOUND` (or, with
//! `VGPU_SIM_UNKNOWN=stub`, a logging stub returning `CUDA_ERROR_NOT_SUPPORTED`).

use crate::types::*;
use crate::{knobs, log_line, simlog};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::{Mutex, OnceLock};

pub(crate) struct Entry {
    pub base: &'static str,
    pub ver: u32,
    pub ptds: bool,
    pub sym: &'static str,
    pub f: *const c_void,
    /// The unexported thunk handed out instead of `f` with `VGPU_SIM_PROCADDR_THUNKS=1`.
    pub thunk: *const c_void,
}

struct Table(HashMap<&'static str, Vec<Entry>>);
unsafe impl Send for Table {}
unsafe impl Sync for Table {}

fn table() -> &'static HashMap<&'static str, Vec<Entry>> {
    static T: OnceLock<Table> = OnceLock::new();
    &T.get_or_init(|| {
        let mut m: HashMap<&'static str, Vec<Entry>> = HashMap::new();
        let entries = crate::exports::entries();
        let by_sym: HashMap<&str, (*const c_void, *const c_void)> =
            entries.iter().map(|e| (e.sym, (e.f, e.thunk))).collect();
        let aliases: Vec<Entry> = crate::exports::ALIASES
            .iter()
            .map(|&(base, ver, sym)| Entry { base, ver, ptds: false, sym, f: by_sym[sym].0, thunk: by_sym[sym].1 })
            .collect();
        for e in entries.into_iter().chain(aliases) {
            m.entry(e.base).or_default().push(e);
        }
        Table(m)
    })
    .0
}

/// All table rows as (base, version, per-thread, symbol) — for tests and tooling.
#[allow(dead_code)]
pub(crate) fn rows() -> Vec<(&'static str, u32, bool, &'static str)> {
    table().values().flatten().map(|e| (e.base, e.ver, e.ptds, e.sym)).collect()
}

/// Resolve (name, version, flags) → function, or (CUresult, symbolStatus).
pub(crate) fn lookup(name: &str, ver: i32, flags: u64) -> Result<*const c_void, (CUresult, i32)> {
    // A driver knows no ABI newer than itself: a 12.9 driver answers a 13.0 request with its
    // newest variant.
    lookup_at(name, ver.min(driver_version()), flags)
}

fn driver_version() -> i32 {
    crate::state_opt().map(|s| s.driver_version()).unwrap_or(12090)
}

fn lookup_at(name: &str, ver: i32, flags: u64) -> Result<*const c_void, (CUresult, i32)> {
    let Some(cands) = table().get(name) else {
        return Err((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    };
    let best = |ptds: bool| cands.iter().filter(|e| e.ptds == ptds && e.ver as i64 <= ver as i64).max_by_key(|e| e.ver);
    let pick = if flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0 {
        best(true).or_else(|| best(false))
    } else {
        best(false)
    };
    match pick {
        Some(e) if knobs().procaddr_thunks => Ok(e.thunk),
        Some(e) => Ok(e.f),
        None => Err((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)),
    }
}

pub(crate) unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    ver: i32,
    flags: u64,
    status: *mut i32,
) -> CUresult {
    let set_status = |s: i32| {
        if !status.is_null() {
            unsafe { *status = s };
        }
    };
    if symbol.is_null() || pfn.is_null() || flags > 2 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsafe { *pfn = std::ptr::null_mut() };
    let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
    match lookup(&name, ver, flags) {
        Ok(f) => {
            unsafe { *pfn = f as *mut c_void };
            set_status(CU_GET_PROC_ADDRESS_SUCCESS);
            CUDA_SUCCESS
        }
        Err((e, st)) => {
            if st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && !name.is_empty() && knobs().unknown_stub {
                simlog!("cuGetProcAddress({name:?}, {ver}, {flags}): unknown, returning a stub");
                unsafe { *pfn = stub_for(&name) as *mut c_void };
                set_status(CU_GET_PROC_ADDRESS_SUCCESS);
                return CUDA_SUCCESS;
            }
            if st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND {
                simlog!("cuGetProcAddress({name:?}, {ver}, {flags}): not found");
            } else {
                simlog!("cuGetProcAddress({name:?}, {ver}, {flags}): version not sufficient");
            }
            set_status(st);
            e
        }
    }
}

// ---- logging stubs for unknown names -------------------------------------------------------

type StubFn = extern "C" fn() -> CUresult;

static STUB_NAMES: Mutex<Vec<String>> = Mutex::new(Vec::new());

extern "C" fn stub<const N: usize>() -> CUresult {
    let name = STUB_NAMES.lock().ok().and_then(|v| v.get(N).cloned()).unwrap_or_default();
    log_line(&format!("stub called: {name} -> CUDA_ERROR_NOT_SUPPORTED"));
    CUDA_ERROR_NOT_SUPPORTED
}

macro_rules! stub_table {
    ($($i:literal)*) => { [$(stub::<$i> as StubFn),*] };
}

static STUBS: [StubFn; 128] = stub_table!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);

/// One stub per distinct unknown name (the last one is shared when they run out).
fn stub_for(name: &str) -> *const c_void {
    let mut v = STUB_NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let i = match v.iter().position(|n| n == name) {
        Some(i) => i,
        None if v.len() < STUBS.len() => {
            v.push(name.to_string());
            v.len() - 1
        }
        None => STUBS.len() - 1,
    };
    STUBS[i] as *const c_void
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn table_rows_are_unique_and_consistent() {
        let rows = rows();
        let mut seen = HashSet::new();
        for &(base, ver, ptds, sym) in &rows {
            assert!(seen.insert((base, ver, ptds)), "duplicate row {base}@{ver} ptds={ptds}");
            assert!(sym.starts_with(base), "{sym} does not start with {base}");
            if ptds {
                assert!(sym.ends_with("_ptsz") || sym.ends_with("_ptds"), "{sym}");
                assert!(rows.iter().any(|r| r.0 == base && !r.2), "{base} has only a per-thread variant");
            }
        }
        // Every exported function is a distinct address.
        let entries = crate::exports::entries();
        let addrs: HashSet<usize> = entries.iter().map(|e| e.f as usize).collect();
        assert_eq!(addrs.len(), entries.len());
        // And every thunk is another one.
        let thunks: HashSet<usize> = entries.iter().map(|e| e.thunk as usize).collect();
        assert_eq!(thunks.len(), entries.len());
        assert!(thunks.is_disjoint(&addrs));
        assert!(entries.len() > 150);
    }

    fn sym_of(name: &str, ver: i32, flags: u64) -> Result<&'static str, (CUresult, i32)> {
        let f = lookup_at(name, ver, flags)?;
        Ok(crate::exports::entries().into_iter().find(|e| e.f == f).unwrap().sym)
    }

    #[test]
    fn lookup_semantics() {
        assert_eq!(sym_of("cuMemAlloc", 12000, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(
            sym_of("cuMemAlloc", 2000, 0),
            Err((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT))
        );
        assert_eq!(sym_of("cuNope", 12000, 0), Err((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)));
        assert_eq!(sym_of("", 12000, 0), Err((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)));
        assert_eq!(sym_of("cuLaunchKernel", 12090, 2), Ok("cuLaunchKernel_ptsz"));
        assert_eq!(sym_of("cuLaunchKernel", 12090, 0), Ok("cuLaunchKernel"));
        assert_eq!(sym_of("cuLaunchKernel", 6000, 2), Ok("cuLaunchKernel")); // ptsz only from 7000
        assert_eq!(sym_of("cuMemcpyHtoD", 12090, 2), Ok("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(sym_of("cuMemFree", 12090, 2), Ok("cuMemFree_v2"));
        assert_eq!(sym_of("cuGetProcAddress", 11030, 0), Ok("cuGetProcAddress"));
        assert_eq!(sym_of("cuGetProcAddress", 12000, 0), Ok("cuGetProcAddress_v2"));
        assert_eq!(sym_of("cuCtxCreate", 3020, 0), Ok("cuCtxCreate_v2"));
        assert_eq!(sym_of("cuCtxCreate", 11040, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(sym_of("cuCtxCreate", 12050, 0), Ok("cuCtxCreate_v4"));
        assert_eq!(sym_of("cuStreamGetCaptureInfo", 12030, 2), Ok("cuStreamGetCaptureInfo_v3_ptsz"));
        assert_eq!(sym_of("cuStreamGetCaptureInfo", 11030, 2), Ok("cuStreamGetCaptureInfo_v2_ptsz"));
        assert_eq!(sym_of("cuCtxGetDevice", 12090, 0), Ok("cuCtxGetDevice"));
        assert_eq!(sym_of("cuCtxGetDevice", 13000, 0), Ok("cuCtxGetDevice_v2"));
        assert_eq!(sym_of("cuCtxSynchronize", 13050, 0), Ok("cuCtxSynchronize_v2"));
        assert_eq!(sym_of("cuMemPrefetchAsync", 12020, 2), Ok("cuMemPrefetchAsync_v2_ptsz"));
        assert_eq!(sym_of("cuMemPrefetchAsync", 8000, 0), Ok("cuMemPrefetchAsync"));
        assert_eq!(sym_of("cuLaunchHostFunc", 13000, 0), Ok("cuLaunchHostFunc"));
        assert_eq!(sym_of("cuLaunchHostFunc", 13010, 2), Ok("cuLaunchHostFunc_v2_ptsz"));
        assert_eq!(sym_of("cuMemcpyBatchAsync", 12090, 0), Ok("cuMemcpyBatchAsync"));
        assert_eq!(sym_of("cuMemcpyBatchAsync", 13000, 0), Ok("cuMemcpyBatchAsync_v2"));
        assert_eq!(sym_of("cuStreamGetCaptureInfo", 10010, 0), Ok("cuStreamGetCaptureInfo"));
        assert_eq!(sym_of("cuEventElapsedTime", 12000, 0), Ok("cuEventElapsedTime"));
        assert_eq!(sym_of("cuEventElapsedTime", 12080, 0), Ok("cuEventElapsedTime_v2"));
        assert_eq!(sym_of("cuGraphInstantiate", 12000, 0), Ok("cuGraphInstantiateWithFlags"));
        assert_eq!(sym_of("cuGraphInstantiate", 11000, 0), Ok("cuGraphInstantiate_v2"));
        assert_eq!(sym_of("cuDevicePrimaryCtxRelease", 11000, 0), Ok("cuDevicePrimaryCtxRelease_v2"));
        assert_eq!(sym_of("cuDevicePrimaryCtxRelease", 7000, 0), Ok("cuDevicePrimaryCtxRelease"));
    }
}
