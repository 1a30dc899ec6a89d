//! ABI conformance: our hand-written C declarations (`include/vgpu_cuda.h`, `include/vgpu_nvml.h`)
//! and the Rust bindings generated from them (`cuda-types`) agree with NVIDIA's real headers.
//!
//! NVIDIA's headers are used only here, at test time, and never committed:
//! - `$VGPU_NVIDIA_HEADERS`, if it names a directory holding `cuda.h` and `nvml.h` (searched a few
//!   levels deep), else
//! - `cuda.h` from the `nvidia-cuda-runtime-cu12==12.9.*` wheel and `nvml.h` from the
//!   `nvidia-nvml-dev-cu12==12.9.*` wheel, fetched once with `python3 -m pip download --no-deps`
//!   into `target/nvidia-headers/` and unpacked there (Python's zipfile).
//!
//! If neither works the tests that need the headers FAIL (they never pass silently).
//!
//! One table, `tests/abi/table.rs`, lists every number we rely on (enum values, macros, sizes,
//! alignments, field offsets, typedef targets) and every function we declare. Checks:
//! 1. `table_covers_our_headers`: every enumerator, macro, typedef, struct field and prototype in
//!    `include/` has a row (so nothing the shim uses escapes the other checks).
//! 2. `our_headers_match_table`: a C program built against our headers prints every row's value
//!    (compared here, all differences reported) and a second TU `_Static_assert`s each row. The
//!    headers also compile as C++ and with `-Wstrict-prototypes`.
//! 3. `nvidia_headers_match_table`: the same two TUs built against NVIDIA's `cuda.h` + `nvml.h`.
//! 4. `prototypes_match_nvidia`: a TU includes NVIDIA's `cuda.h` with `__CUDA_API_VERSION_INTERNAL`
//!    (which declares the legacy, `_v2`/`_v3`, `_ptsz` and `_ptds` entry points under their real
//!    names), proves NVIDIA declares every function we declare, then includes our prototype
//!    section: any difference in a parameter list is a "conflicting types" compile error. Each
//!    `PFN_<name>` typedef must equal `__typeof__(&name)`. Likewise `nvml.h` with
//!    `NVML_NO_UNVERSIONED_FUNC_DEFS` (unversioned v1 names such as `nvmlInit` stay themselves).
//! 5. `rust_bindings_match_table`: `cuda-types` sizes, alignments, offsets and constants (and the
//!    existence of every `PFN_` type) against the same table.
//!
//! Layout: the table's rows (`tests/abi/table.rs`, `tests/abi/rust_rows.rs`) and this file's tests;
//! the header parser in `tests/abi/parse.rs`, NVIDIA's headers in `tests/abi/nvidia.rs`, the
//! compile harness in `tests/abi/compile.rs` (all `include!`d here).

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cuda_types::*;

include!("abi/rust_rows.rs");
include!("abi/table.rs");

const CUDA_WHEEL: &str = "nvidia-cuda-runtime-cu12==12.9.*";
const NVML_WHEEL: &str = "nvidia-nvml-dev-cu12==12.9.*";
const CUDA_WHEEL_PREFIX: &str = "nvidia_cuda_runtime_cu12-12.9.";
const NVML_WHEEL_PREFIX: &str = "nvidia_nvml_dev_cu12-12.9.";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    repo().join("include")
}

// ------------------------------------------------------------------------------------------
// The table
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Row {
    line: usize,
    kind: String,
    hdr: String,
    /// `NAME` or `Type.field.subfield`.
    name: String,
    /// Numeric rows: the number. `ctype`: the C type text. `func`: the PFN type name.
    value: String,
}

impl Row {
    fn key(&self) -> String {
        format!("{} {} {}", self.kind, self.hdr, self.name)
    }
    fn expected(&self) -> i128 {
        match self.kind.as_str() {
            "ctype" => 1,
            "func" | "func13" => 0,
            _ => {
                parse_int(&self.value).unwrap_or_else(|| panic!("table.rs:{}: bad number {:?}", self.line, self.value))
            }
        }
    }
    fn c_expr(&self) -> String {
        let n = &self.name;
        match self.kind.as_str() {
            "value" => format!("(long long)({n})"),
            "ptr" => format!("(long long)(uintptr_t)({n})"),
            "size" => format!("(long long)sizeof({n})"),
            "align" => format!("(long long)_Alignof({n})"),
            "offset" => {
                let (ty, field) = n.split_once('.').expect("offset row needs Type.field");
                format!("(long long)offsetof({ty}, {field})")
            }
            "ctype" => format!("(long long)__builtin_types_compatible_p({n}, {})", self.value),
            k => panic!("no C expression for {k}"),
        }
    }
}

fn parse_int(s: &str) -> Option<i128> {
    let s = s.trim().trim_start_matches('(').trim_end_matches(')').trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r.trim()),
        None => (false, s),
    };
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i128::from_str_radix(h, 16).ok()?
    } else {
        s.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn table() -> &'static Vec<Row> {
    static T: OnceLock<Vec<Row>> = OnceLock::new();
    T.get_or_init(|| {
        let text = std::fs::read_to_string(repo().join("tests/abi/table.rs")).expect("read tests/abi/table.rs");
        let mut rows = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let kind = line.split_whitespace().next().unwrap_or("");
            if !matches!(kind, "value" | "ptr" | "size" | "align" | "offset" | "ctype" | "func" | "func13") {
                continue;
            }
            let body = line.strip_suffix(';').unwrap_or_else(|| panic!("table.rs:{}: row must end with ';'", i + 1));
            let (lhs, rhs) = body.split_once('=').unwrap_or_else(|| panic!("table.rs:{}: missing '='", i + 1));
            let mut it = lhs.split_whitespace();
            let (kind, hdr, name) = (it.next().unwrap(), it.next().unwrap_or(""), it.next().unwrap_or(""));
            assert!(
                it.next().is_none() && matches!(hdr, "cuda" | "nvml") && !name.is_empty(),
                "table.rs:{}: bad row",
                i + 1
            );
            let value = rhs.trim().trim_matches('"').to_string();
            let row = Row { line: i + 1, kind: kind.into(), hdr: hdr.into(), name: name.into(), value };
            assert!(seen.insert(row.key()), "table.rs:{}: duplicate row {}", i + 1, row.key());
            if row.kind.starts_with("func") {
                assert_eq!(row.value, format!("PFN_{}", row.name), "table.rs:{}: func rows name PFN_<name>", i + 1);
            } else if row.kind != "ctype" {
                row.expected();
            }
            rows.push(row);
        }
        assert!(rows.len() > 500, "tests/abi/table.rs: only {} rows parsed", rows.len());
        rows
    })
}

fn numeric_rows() -> Vec<&'static Row> {
    table().iter().filter(|r| !r.kind.starts_with("func")).collect()
}

/// Functions NVIDIA's CUDA 12.9 headers (the table's reference) declare.
fn func_rows(hdr: &str) -> Vec<&'static Row> {
    table().iter().filter(|r| r.kind == "func" && r.hdr == hdr).collect()
}

/// Every function of the table: also those only NVIDIA's 13.x headers declare (`func13` rows,
/// checked against those headers by `declared_symbols_have_the_pfn_types_of_their_thresholds`).
fn all_func_rows(hdr: &str) -> Vec<&'static Row> {
    table().iter().filter(|r| r.kind.starts_with("func") && r.hdr == hdr).collect()
}

include!("abi/parse.rs");
include!("abi/nvidia.rs");
include!("abi/compile.rs");

// ------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------

#[test]
fn table_covers_our_headers() {
    let keys: BTreeSet<String> = table().iter().map(Row::key).collect();
    let mut missing = Vec::new();
    let need = |missing: &mut Vec<String>, k: String| {
        if !keys.contains(&k) {
            missing.push(k);
        }
    };
    let mut count = 0;
    for (file, hdr) in [("vgpu_cuda.h", "cuda"), ("vgpu_nvml.h", "nvml")] {
        let it = parse_header(file, hdr);
        assert!(
            !it.enumerators.is_empty() && !it.fields.is_empty() && !it.prototypes.is_empty(),
            "{file}: parser found nothing"
        );
        for e in &it.enumerators {
            need(&mut missing, format!("value {hdr} {e}"));
        }
        for d in &it.defines {
            if !keys.contains(&format!("ptr {hdr} {d}")) {
                need(&mut missing, format!("value {hdr} {d}"));
            }
        }
        for t in &it.typedefs {
            need(&mut missing, format!("ctype {hdr} {t}"));
            need(&mut missing, format!("size {hdr} {t}"));
            need(&mut missing, format!("align {hdr} {t}"));
        }
        for f in &it.fields {
            need(&mut missing, format!("offset {hdr} {f}"));
        }
        let protos: BTreeSet<&String> = it.prototypes.iter().collect();
        for p in &it.prototypes {
            if !keys.contains(&format!("func13 {hdr} {p}")) {
                need(&mut missing, format!("func {hdr} {p}"));
            }
            if !it.pfns.contains(&format!("PFN_{p}")) {
                missing.push(format!("{file}: no `PFN_{p}` typedef for prototype {p}"));
            }
        }
        for r in all_func_rows(hdr) {
            if !protos.contains(&r.name) {
                missing.push(format!("table.rs:{}: func {} has no prototype in {file}", r.line, r.name));
            }
        }
        count += it.enumerators.len() + it.defines.len() + it.typedefs.len() + it.fields.len() + it.prototypes.len();
    }
    assert!(missing.is_empty(), "tests/abi/table.rs lacks rows for declarations in include/:\n{}", missing.join("\n"));
    report("table covers include/ (enumerators, macros, typedefs, fields, prototypes)", count);
}

#[test]
fn our_headers_match_table() {
    let dir = work_dir("ours");
    let inc = includes_ours();
    let values = print_values(&dir, OURS_PREAMBLE, &inc, "ours")
        .unwrap_or_else(|e| panic!("our headers: printer does not build:\n{e}"));
    let bad = compare(&values, "include/");
    assert!(bad.is_empty(), "include/ disagrees with tests/abi/table.rs:\n{}", bad.join("\n"));
    let n = static_assert_tu(&dir, OURS_PREAMBLE, &inc, "ours")
        .unwrap_or_else(|e| panic!("include/: static assertions fail:\n{e}"));

    // The headers stand alone: strict C11, C++, each section alone.
    let probe = dir.join("probe.c");
    for (defs, inc_line) in [
        ("", OURS_PREAMBLE),
        ("#define VGPU_TYPES_ONLY 1\n", OURS_PREAMBLE),
        (
            "",
            "#include \"vgpu_cuda.h\"\n#include \"vgpu_cuda.h\"\n#include \"vgpu_nvml.h\"\n#include \"vgpu_nvml.h\"\n",
        ),
    ] {
        std::fs::write(&probe, format!("{defs}{inc_line}")).unwrap();
        let mut args: Vec<String> =
            ["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wstrict-prototypes", "-fsyntax-only"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        args.extend(inc.iter().cloned());
        args.push(probe.display().to_string());
        compile(&cc(), &args).unwrap_or_else(|e| panic!("include/ does not compile cleanly as C:\n{e}"));
    }
    let probe_cc = dir.join("probe.cc");
    std::fs::write(&probe_cc, OURS_PREAMBLE).unwrap();
    let mut args: Vec<String> =
        ["-Wall", "-Wextra", "-Werror", "-fsyntax-only"].iter().map(|s| s.to_string()).collect();
    args.extend(inc.iter().cloned());
    args.push(probe_cc.display().to_string());
    compile(&cxx(), &args).unwrap_or_else(|e| panic!("include/ does not compile as C++:\n{e}"));
    report("include/ vs table (printed values + _Static_assert)", n);
}

#[test]
fn nvidia_headers_match_table() {
    let h = nvidia_headers();
    let dir = work_dir("nvidia");
    let inc = includes_nvidia(h);
    let values = print_values(&dir, NVIDIA_PREAMBLE, &inc, "nvidia").unwrap_or_else(|e| {
        panic!("a name in tests/abi/table.rs is missing from NVIDIA's headers ({}):\n{e}", h.source)
    });
    let bad = compare(&values, "NVIDIA");
    assert!(bad.is_empty(), "NVIDIA's headers ({}) disagree with tests/abi/table.rs:\n{}", h.source, bad.join("\n"));
    let n = static_assert_tu(&dir, NVIDIA_PREAMBLE, &inc, "nvidia")
        .unwrap_or_else(|e| panic!("NVIDIA: static assertions fail:\n{e}"));
    report(&format!("NVIDIA headers vs table ({})", h.source), n);
}

fn redeclaration_tu(dir: &Path, hdr: &str, nvidia_preamble: &str, ours: &str, inc: &[String]) -> usize {
    let funcs = func_rows(hdr);
    let mut src = String::from(nvidia_preamble);
    src.push_str(
        "\n/* Drop NVIDIA's renaming macros (cuMemAlloc -> cuMemAlloc_v2, ...): names below are symbols. */\n",
    );
    for f in &funcs {
        let _ = writeln!(src, "#undef {}", f.name);
    }
    src.push_str("\n/* NVIDIA declares every function we declare, under that exact (versioned) name. */\n");
    src.push_str("void vgpu_nvidia_declares(void);\nvoid vgpu_nvidia_declares(void) {\n");
    for f in &funcs {
        let _ = writeln!(src, "    (void)&{};", f.name);
    }
    src.push_str("}\n\n/* Our prototypes redeclare them: any difference is a 'conflicting types' error. */\n");
    let _ = writeln!(src, "#define VGPU_PROTOTYPES_ONLY 1\n#include \"{ours}\"\n");
    for f in &funcs {
        let _ = writeln!(
            src,
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{n}), PFN_{n}), \"tests/abi/table.rs:{l}: PFN_{n} differs from {n}\");",
            n = f.name,
            l = f.line
        );
    }
    let c = dir.join(format!("redeclare_{hdr}.c"));
    std::fs::write(&c, src).unwrap();
    let mut args: Vec<String> = C_FLAGS.iter().map(|s| s.to_string()).collect();
    args.extend(inc.iter().cloned());
    args.extend(["-fsyntax-only".into(), c.display().to_string()]);
    compile(&cc(), &args).unwrap_or_else(|e| panic!("{ours}: prototypes differ from NVIDIA's declarations:\n{e}"));
    funcs.len()
}

#[test]
fn prototypes_match_nvidia() {
    let h = nvidia_headers();
    let dir = work_dir("redeclare");
    let mut inc = includes_nvidia(h);
    inc.extend(includes_ours());
    let n_cuda = redeclaration_tu(
        &dir,
        "cuda",
        "/* Declares every ABI version (legacy, _v2, _v3, _ptsz, _ptds) under its own name. */\n\
         #define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n",
        "vgpu_cuda.h",
        &inc,
    );
    let n_nvml = redeclaration_tu(
        &dir,
        "nvml",
        "/* Keeps nvmlInit, nvmlDeviceGetComputeRunningProcesses, ... as the v1 symbols. */\n\
         #define NVML_NO_UNVERSIONED_FUNC_DEFS 1\n#include <nvml.h>\n",
        "vgpu_nvml.h",
        &inc,
    );
    assert!(n_cuda > 50 && n_nvml > 10, "too few functions in the table: {n_cuda} cuda, {n_nvml} nvml");

    // Sanity: the check does catch a wrong parameter list.
    let bad = dir.join("negative.c");
    std::fs::write(&bad, "#define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n#undef cuMemAlloc_v2\nCUresult cuMemAlloc_v2(CUdeviceptr *dptr, unsigned int bytesize);\n").unwrap();
    let mut args: Vec<String> = C_FLAGS.iter().map(|s| s.to_string()).collect();
    args.extend(inc.iter().cloned());
    args.extend(["-fsyntax-only".into(), bad.display().to_string()]);
    assert!(compile(&cc(), &args).is_err(), "a mismatching redeclaration compiled: the prototype check is toothless");
    report(&format!("prototypes + PFN typedefs vs NVIDIA ({})", h.source), n_cuda + n_nvml);
}

fn pfn_suffix(p: cuda_types::pfn_table::PerThread) -> &'static str {
    match p {
        cuda_types::pfn_table::PerThread::No => "",
        cuda_types::pfn_table::PerThread::Ptds => "_ptds",
        cuda_types::pfn_table::PerThread::Ptsz => "_ptsz",
    }
}

/// The include directory of NVIDIA's 13.x headers (`ci/gen-pfn-table.py --include-dir 13.x`,
/// which fetches the runtime wheel into `target/nvidia-headers/pfn/` once).
fn nvidia13_include() -> PathBuf {
    let out = Command::new(python())
        .arg(repo().join("ci/gen-pfn-table.py"))
        .args(["--include-dir", "13.x"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", python()));
    assert!(
        out.status.success(),
        "ci/gen-pfn-table.py --include-dir 13.x failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(dir.join("cudaTypedefs.h").is_file(), "no cudaTypedefs.h in {}", dir.display());
    dir
}

/// Every `cuGetProcAddress` threshold of the generated table (`cuda_types::pfn_table`) whose
/// symbol we declare: our prototype of that symbol has exactly the type of NVIDIA's
/// `PFN_<name>_v<version>` typedef (`cudaTypedefs.h`, 12.9, all ABI versions declared), checked by
/// `_Static_assert`. With the shim's compile-time checks (each wrapper's signature is our
/// prototype's, each wrapped symbol is a threshold of the table) this proves each wrapper has the
/// ABI the driver's pointer has for every (name, version, flags) it is handed out for. The
/// generator refuses a threshold whose parameter list differs between 12.9 and 13.x, so the 12.9
/// typedefs also stand for the 13.x ones; a threshold only 13.x lists is checked against the
/// 13.x headers.
#[test]
fn declared_symbols_have_the_pfn_types_of_their_thresholds() {
    use cuda_types::pfn_table::{IN_12_9, PFN_ROWS};
    let h = nvidia_headers();
    assert!(
        h.cuda_dir.join("cudaTypedefs.h").is_file(),
        "no cudaTypedefs.h next to NVIDIA's cuda.h in {} ({})",
        h.cuda_dir.display(),
        h.source
    );
    let funcs = all_func_rows("cuda");
    let ours: BTreeSet<&str> = funcs.iter().map(|f| f.name.as_str()).collect();
    let dir = work_dir("pfn-thresholds");
    let mut src = String::from("#define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n#include <cudaTypedefs.h>\n");
    // Drop NVIDIA's renaming macros: of the functions (cuMemAlloc -> cuMemAlloc_v2) and of the
    // PFN names (PFN_cuMemAdvise -> PFN_cuMemAdvise_v12020), which would rename our own
    // `PFN_<symbol>` typedefs.
    for f in &funcs {
        let _ = writeln!(src, "#undef {n}\n#undef PFN_{n}", n = f.name);
    }
    src.push_str("#define VGPU_PROTOTYPES_ONLY 1\n#include \"vgpu_cuda.h\"\n");
    let mut n = 0;
    let mut checked = BTreeSet::new();
    let mut only_13 = Vec::new();
    for r in PFN_ROWS.iter().filter(|r| ours.contains(r.symbol())) {
        // The one row that is no typedef: cuGraphInstantiate @ 12000 (cuda.h's renaming).
        if r.name() == "cuGraphInstantiate" && r.symbol() == "cuGraphInstantiateWithFlags" {
            continue;
        }
        if r.headers & IN_12_9 == 0 {
            only_13.push(r);
            continue;
        }
        let suffix = pfn_suffix(r.per_thread);
        let _ = writeln!(
            src,
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{s}), PFN_{n}_v{v}{suffix}), \"{s} is not PFN_{n}_v{v}{suffix}\");",
            s = r.symbol(),
            n = r.name(),
            v = r.version
        );
        checked.insert(r.symbol());
        n += 1;
    }
    let c = dir.join("pfn_thresholds.c");
    std::fs::write(&c, &src).unwrap();
    let mut args: Vec<String> = C_FLAGS.iter().map(|s| s.to_string()).collect();
    args.extend(includes_nvidia(h));
    args.extend(includes_ours());
    args.extend(["-fsyntax-only".into(), c.display().to_string()]);
    compile(&cc(), &args).unwrap_or_else(|e| panic!("a prototype differs from its PFN threshold type:\n{e}"));

    // Sanity: a wrong pairing (the v1 ABI against the v2 typedef) is caught.
    let bad = dir.join("negative.c");
    let neg = format!(
        "{src}_Static_assert(__builtin_types_compatible_p(__typeof__(&cuCtxCreate_v2), PFN_cuCtxCreate_v12050), \"x\");\n"
    );
    std::fs::write(&bad, neg).unwrap();
    let mut nargs = args.clone();
    *nargs.last_mut().unwrap() = bad.display().to_string();
    assert!(compile(&cc(), &nargs).is_err(), "a wrong PFN pairing compiled: the check is toothless");

    // Thresholds only 13.x lists: our prototype text of each, against the 13.x headers (a
    // redeclaration of NVIDIA's declaration, then the PFN type). Always run, with one 13.0 ABI
    // written here as a control, so the 13.x path is exercised before anything needs it.
    let mut protos = vec![(
        "CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx);".to_string(),
        "cuCtxGetDevice_v2",
        "PFN_cuCtxGetDevice_v13000".to_string(),
    )];
    let header = std::fs::read_to_string(include_dir().join("vgpu_cuda.h")).unwrap();
    for r in &only_13 {
        let at = header
            .find(&format!("CUDAAPI {}(", r.symbol()))
            .unwrap_or_else(|| panic!("no prototype of {} in include/vgpu_cuda.h", r.symbol()));
        let start = header[..at].rfind('\n').map_or(0, |i| i + 1);
        let end = at + header[at..].find(';').unwrap() + 1;
        protos.push((
            header[start..end].to_string(),
            r.symbol(),
            format!("PFN_{}_v{}{}", r.name(), r.version, pfn_suffix(r.per_thread)),
        ));
        checked.insert(r.symbol());
    }
    let inc13 = nvidia13_include();
    let mut src13 =
        String::from("#define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n#include <cudaTypedefs.h>\n");
    for (proto, sym, pfn) in &protos {
        let _ = writeln!(
            src13,
            "#undef {sym}\n{proto}\n_Static_assert(__builtin_types_compatible_p(__typeof__(&{sym}), {pfn}), \"{sym} is not {pfn}\");"
        );
        n += 1;
    }
    let c13 = dir.join("pfn_thresholds_13.c");
    std::fs::write(&c13, &src13).unwrap();
    let mut args13: Vec<String> = C_FLAGS.iter().map(|s| s.to_string()).collect();
    args13.extend([format!("-I{}", inc13.display()), "-fsyntax-only".into(), c13.display().to_string()]);
    compile(&cc(), &args13).unwrap_or_else(|e| panic!("a prototype differs from its 13.x PFN threshold type:\n{e}"));

    // Every driver function the shim exports (wraps) was among them.
    let text = std::fs::read_to_string(repo().join("tests/expected_exports.txt")).unwrap();
    let unchecked: Vec<&str> =
        text.lines().map(str::trim).filter(|l| l.starts_with("cu") && !checked.contains(l)).collect();
    assert!(unchecked.is_empty(), "shim exports with no PFN threshold checked: {unchecked:?}");
    report(&format!("declared symbols vs PFN threshold typedefs ({})", h.source), n);
}

#[test]
fn rust_bindings_match_table() {
    let rows = abi_rust_rows();
    let table_rows = table();
    assert_eq!(rows.len(), table_rows.len(), "macro and text parsers of tests/abi/table.rs disagree");
    let mut bad = Vec::new();
    let mut n = 0;
    for (r, t) in rows.iter().zip(table_rows) {
        assert_eq!(r.key, t.key(), "row order");
        assert_eq!(r.expected, t.expected(), "{}: macro and text parsers read different numbers", t.key());
        if let Some(v) = r.rust {
            n += 1;
            if v != r.expected {
                bad.push(format!("table.rs:{}: {}: cuda-types = {v}, table = {}", t.line, r.key, t.value));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "crates/cuda-types disagrees with tests/abi/table.rs (stale generated.rs? run ci/gen-bindings.sh):\n{}",
        bad.join("\n")
    );
    report("cuda-types (Rust) vs table", n);
}
