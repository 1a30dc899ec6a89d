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
            "func" => 0,
            _ => parse_int(&self.value)
                .unwrap_or_else(|| panic!("table.rs:{}: bad number {:?}", self.line, self.value)),
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
            "ctype" => format!(
                "(long long)__builtin_types_compatible_p({n}, {})",
                self.value
            ),
            k => panic!("no C expression for {k}"),
        }
    }
}

fn parse_int(s: &str) -> Option<i128> {
    let s = s
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .trim();
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
        let text = std::fs::read_to_string(repo().join("tests/abi/table.rs"))
            .expect("read tests/abi/table.rs");
        let mut rows = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let kind = line.split_whitespace().next().unwrap_or("");
            if !matches!(
                kind,
                "value" | "ptr" | "size" | "align" | "offset" | "ctype" | "func"
            ) {
                continue;
            }
            let body = line
                .strip_suffix(';')
                .unwrap_or_else(|| panic!("table.rs:{}: row must end with ';'", i + 1));
            let (lhs, rhs) = body
                .split_once('=')
                .unwrap_or_else(|| panic!("table.rs:{}: missing '='", i + 1));
            let mut it = lhs.split_whitespace();
            let (kind, hdr, name) = (
                it.next().unwrap(),
                it.next().unwrap_or(""),
                it.next().unwrap_or(""),
            );
            assert!(
                it.next().is_none() && matches!(hdr, "cuda" | "nvml") && !name.is_empty(),
                "table.rs:{}: bad row",
                i + 1
            );
            let value = rhs.trim().trim_matches('"').to_string();
            let row = Row {
                line: i + 1,
                kind: kind.into(),
                hdr: hdr.into(),
                name: name.into(),
                value,
            };
            assert!(
                seen.insert(row.key()),
                "table.rs:{}: duplicate row {}",
                i + 1,
                row.key()
            );
            if row.kind == "func" {
                assert_eq!(
                    row.value,
                    format!("PFN_{}", row.name),
                    "table.rs:{}: func rows name PFN_<name>",
                    i + 1
                );
            } else if row.kind != "ctype" {
                row.expected();
            }
            rows.push(row);
        }
        assert!(
            rows.len() > 500,
            "tests/abi/table.rs: only {} rows parsed",
            rows.len()
        );
        rows
    })
}

fn numeric_rows() -> Vec<&'static Row> {
    table().iter().filter(|r| r.kind != "func").collect()
}

fn func_rows(hdr: &str) -> Vec<&'static Row> {
    table()
        .iter()
        .filter(|r| r.kind == "func" && r.hdr == hdr)
        .collect()
}

// ------------------------------------------------------------------------------------------
// A small parser for our own (regular, hand-written) headers
// ------------------------------------------------------------------------------------------

#[derive(Default, Debug)]
struct HeaderItems {
    defines: Vec<String>,
    enumerators: Vec<String>,
    typedefs: Vec<String>,
    /// `FirstTypedefName.field[.sub]`.
    fields: Vec<String>,
    prototypes: Vec<String>,
    pfns: Vec<String>,
}

fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'*' {
            let end = s[i + 2..]
                .find("*/")
                .map(|p| i + 2 + p + 2)
                .unwrap_or(b.len());
            out.push(' ');
            i = end;
        } else if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn section<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let a = text
        .find(start)
        .unwrap_or_else(|| panic!("header lacks {start:?}"));
    let b = text[a..].find(end).map(|p| a + p).unwrap_or(text.len());
    &text[a..b]
}

/// Drops preprocessor lines (returning object-like `#define` names) and `extern "C"` wrappers.
fn preprocess(text: &str, defines: &mut Vec<String>) -> String {
    let mut out = String::new();
    let mut in_cplusplus = false;
    let mut cont = false;
    for line in text.lines() {
        let t = line.trim_start();
        if cont {
            cont = t.ends_with('\\');
            continue;
        }
        if in_cplusplus {
            if t.starts_with("#endif") {
                in_cplusplus = false;
            }
            continue;
        }
        if t.starts_with("#ifdef __cplusplus") {
            in_cplusplus = true;
            continue;
        }
        if let Some(rest) = t.strip_prefix('#') {
            cont = t.ends_with('\\');
            let rest = rest.trim_start();
            if let Some(d) = rest.strip_prefix("define") {
                let d = d.trim_start();
                let name: String = d
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let function_like = d[name.len()..].starts_with('(');
                if !function_like {
                    defines.push(name);
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Splits at `;` outside braces.
fn statements(s: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ';' && depth == 0 {
            v.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    assert!(cur.trim().is_empty(), "unterminated declaration: {cur:?}");
    v
}

fn idents(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty() && !w.chars().next().unwrap().is_ascii_digit())
        .map(str::to_string)
        .collect()
}

fn without_brackets(s: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// `(body, text after the matching '}')` for a statement containing `{`.
fn split_body(stmt: &str) -> (&str, &str) {
    let open = stmt.find('{').unwrap();
    let mut depth = 0;
    for (i, c) in stmt[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return (&stmt[open + 1..open + i], &stmt[open + i + 1..]);
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces in {stmt:?}")
}

fn struct_fields(body: &str, prefix: &str, out: &mut Vec<String>) {
    for decl in statements(body) {
        if decl.is_empty() {
            continue;
        }
        if decl.contains('{') {
            let (inner, after) = split_body(&decl);
            let name = idents(&without_brackets(after))
                .pop()
                .expect("anonymous nested member without a name");
            out.push(format!("{prefix}{name}"));
            struct_fields(inner, &format!("{prefix}{name}."), out);
        } else {
            let name = idents(&without_brackets(&decl)).pop().expect("member name");
            out.push(format!("{prefix}{name}"));
        }
    }
}

fn parse_header(file: &str, hdr: &str) -> HeaderItems {
    let raw = std::fs::read_to_string(include_dir().join(file)).unwrap();
    let upper = hdr.to_uppercase();
    let types = section(
        &raw,
        &format!("#define VGPU_{upper}_TYPES_SECTION"),
        "#endif /* !VGPU_PROTOTYPES_ONLY */",
    );
    let protos = section(
        &raw,
        &format!("#define VGPU_{upper}_PROTOTYPES_SECTION"),
        "#endif /* !VGPU_TYPES_ONLY */",
    );
    let mut items = HeaderItems::default();

    let mut defines = Vec::new();
    let body = preprocess(&strip_comments(types), &mut defines);
    items.defines = defines
        .into_iter()
        .filter(|d| !d.ends_with("_SECTION") && d != "CUDAAPI")
        .collect();
    for stmt in statements(&body) {
        let Some(rest) = stmt.strip_prefix("typedef") else {
            assert!(
                stmt.is_empty(),
                "{file}: unexpected declaration in the types section: {stmt:?}"
            );
            continue;
        };
        if rest.contains('{') {
            let (inner, after) = split_body(rest);
            let names: Vec<String> = after.split(',').map(|n| n.trim().to_string()).collect();
            items.typedefs.extend(names.iter().cloned());
            let head = rest[..rest.find('{').unwrap()].trim_start();
            if head.starts_with("enum") {
                for e in inner.split(',') {
                    let e = e.trim();
                    if !e.is_empty() {
                        items
                            .enumerators
                            .push(e.split('=').next().unwrap().trim().to_string());
                    }
                }
            } else {
                let mut f = Vec::new();
                struct_fields(inner, "", &mut f);
                items
                    .fields
                    .extend(f.into_iter().map(|f| format!("{}.{f}", names[0])));
            }
        } else {
            for part in rest.split(',') {
                items.typedefs.push(idents(part).pop().unwrap());
            }
        }
    }

    let body = preprocess(&strip_comments(protos), &mut Vec::new());
    for stmt in statements(&body) {
        if stmt.is_empty() {
            continue;
        }
        if stmt.starts_with("typedef") {
            let p = stmt.find("PFN_").unwrap_or_else(|| {
                panic!("{file}: typedef in the prototypes section is not a PFN_: {stmt:?}")
            });
            items.pfns.push(idents(&stmt[p..]).remove(0));
        } else {
            let paren = stmt
                .find('(')
                .unwrap_or_else(|| panic!("{file}: not a prototype: {stmt:?}"));
            items.prototypes.push(idents(&stmt[..paren]).pop().unwrap());
        }
    }
    items
}

// ------------------------------------------------------------------------------------------
// NVIDIA's headers
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct NvHeaders {
    cuda_dir: PathBuf,
    nvml_dir: PathBuf,
    source: String,
}

fn find_file(dir: &Path, name: &str, depth: u32) -> Option<PathBuf> {
    let direct = dir.join(name);
    if direct.is_file() {
        return Some(dir.to_path_buf());
    }
    if depth == 0 {
        return None;
    }
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    subdirs
        .into_iter()
        .find_map(|d| find_file(&d, name, depth - 1))
}

fn headers_in(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    Some((find_file(dir, "cuda.h", 6)?, find_file(dir, "nvml.h", 6)?))
}

fn python() -> String {
    std::env::var("VGPU_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn wheels(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy();
        n.ends_with(".whl")
            && (n.starts_with(CUDA_WHEEL_PREFIX) || n.starts_with(NVML_WHEEL_PREFIX))
    });
    v.sort();
    v
}

fn fetch_wheels() -> Result<NvHeaders, String> {
    let cache = repo().join("target/nvidia-headers");
    let extracted = cache.join("include");
    let marker = extracted.join(".complete");
    if marker.is_file()
        && let Some((c, n)) = headers_in(&extracted)
    {
        let src = std::fs::read_to_string(&marker).unwrap_or_default();
        return Ok(NvHeaders {
            cuda_dir: c,
            nvml_dir: n,
            source: format!("cached wheels: {}", src.trim()),
        });
    }
    let wheel_dir = cache.join("wheels");
    std::fs::create_dir_all(&wheel_dir)
        .map_err(|e| format!("create {}: {e}", wheel_dir.display()))?;
    let have = wheels(&wheel_dir);
    let have_cuda = have.iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(CUDA_WHEEL_PREFIX)
    });
    let have_nvml = have.iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(NVML_WHEEL_PREFIX)
    });
    if !(have_cuda && have_nvml) {
        let out = Command::new(python())
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
            ])
            .arg(&wheel_dir)
            .args([CUDA_WHEEL, NVML_WHEEL])
            .output()
            .map_err(|e| format!("cannot run `{} -m pip`: {e}", python()))?;
        if !out.status.success() {
            return Err(format!(
                "`{} -m pip download --no-deps {CUDA_WHEEL} {NVML_WHEEL}` failed ({}):\n{}{}",
                python(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let whls = wheels(&wheel_dir);
    // Newest 12.9.x of each (lexicographic order of the same-length patch numbers is not numeric;
    // sort by the parsed version).
    let pick = |prefix: &str| -> Option<PathBuf> {
        whls.iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .max_by_key(|p| {
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                let ver = n.split('-').nth(1).unwrap_or("").to_string();
                ver.split('.')
                    .map(|x| x.parse::<u64>().unwrap_or(0))
                    .collect::<Vec<_>>()
            })
            .cloned()
    };
    let (Some(cw), Some(nw)) = (pick(CUDA_WHEEL_PREFIX), pick(NVML_WHEEL_PREFIX)) else {
        return Err(format!(
            "pip download succeeded but {} lacks the wheels",
            wheel_dir.display()
        ));
    };
    let tmp = cache.join(format!("include.tmp.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let script = "import sys, zipfile\n\
                  dest = sys.argv[1]\n\
                  for w in sys.argv[2:]:\n\
                  \x20   z = zipfile.ZipFile(w)\n\
                  \x20   for n in z.namelist():\n\
                  \x20       if '/include/' in n and n.endswith('.h'):\n\
                  \x20           z.extract(n, dest)\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(&tmp)
        .args([&cw, &nw])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python()))?;
    if !out.status.success() {
        return Err(format!(
            "unzipping the wheels failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let names = format!(
        "{} {}",
        cw.file_name().unwrap().to_string_lossy(),
        nw.file_name().unwrap().to_string_lossy()
    );
    std::fs::write(tmp.join(".complete"), &names).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&extracted);
    if std::fs::rename(&tmp, &extracted).is_err() {
        // Another test process won the race; use its copy.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let (c, n) =
        headers_in(&extracted).ok_or_else(|| format!("wheels {names} hold no cuda.h / nvml.h"))?;
    Ok(NvHeaders {
        cuda_dir: c,
        nvml_dir: n,
        source: format!("wheels: {names}"),
    })
}

fn nvidia_headers() -> &'static NvHeaders {
    static H: OnceLock<Result<NvHeaders, String>> = OnceLock::new();
    let r = H.get_or_init(|| {
        let mut why = String::new();
        if let Some(dir) = std::env::var_os("VGPU_NVIDIA_HEADERS") {
            let dir = PathBuf::from(dir);
            match headers_in(&dir) {
                Some((c, n)) => {
                    return Ok(NvHeaders {
                        cuda_dir: c,
                        nvml_dir: n,
                        source: format!("VGPU_NVIDIA_HEADERS={}", dir.display()),
                    });
                }
                None => {
                    let _ = writeln!(
                        why,
                        "VGPU_NVIDIA_HEADERS={} holds no cuda.h and nvml.h",
                        dir.display()
                    );
                }
            }
        } else {
            let _ = writeln!(why, "VGPU_NVIDIA_HEADERS is not set");
        }
        fetch_wheels().map_err(|e| format!("{why}{e}"))
    });
    match r {
        Ok(h) => {
            eprintln!(
                "NVIDIA headers ({}): {} , {}",
                h.source,
                h.cuda_dir.display(),
                h.nvml_dir.display()
            );
            h
        }
        Err(e) => panic!(
            "ABI conformance needs NVIDIA's cuda.h and nvml.h and could not get them.\n{e}\n\
             Fix: allow `python3 -m pip download` to reach PyPI, or set VGPU_NVIDIA_HEADERS to a \
             directory containing cuda.h and nvml.h (CUDA 12.9)."
        ),
    }
}

// ------------------------------------------------------------------------------------------
// Compiling
// ------------------------------------------------------------------------------------------

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn cxx() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".into())
}

fn work_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("abi-conformance")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const C_FLAGS: &[&str] = &[
    "-std=c11",
    "-Wall",
    "-Werror=strict-prototypes",
    "-Werror=implicit-function-declaration",
];

/// Compiles (and links unless `-fsyntax-only`/`-c` is in `args`). `Err(diagnostics)` on failure.
fn compile(compiler: &str, args: &[String]) -> Result<(), String> {
    let out = Command::new(compiler)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler `{compiler}`: {e}"));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{compiler} {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn includes_ours() -> Vec<String> {
    vec![format!("-I{}", include_dir().display())]
}

fn includes_nvidia(h: &NvHeaders) -> Vec<String> {
    vec![
        format!("-I{}", h.cuda_dir.display()),
        format!("-I{}", h.nvml_dir.display()),
    ]
}

fn c_literal(v: i128) -> String {
    if v < 0 {
        format!("({v}LL)")
    } else {
        format!("{v}LL")
    }
}

fn c_string(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Builds and runs a program printing every numeric row; returns `{key: value}`.
fn print_values(
    dir: &Path,
    preamble: &str,
    inc: &[String],
    tag: &str,
) -> Result<BTreeMap<String, i128>, String> {
    let rows = numeric_rows();
    let mut src = String::from("#include <stdio.h>\n#include <stdint.h>\n#include <stddef.h>\n");
    src.push_str(preamble);
    src.push_str("\nint main(void) {\n");
    for (i, r) in rows.iter().enumerate() {
        let _ = writeln!(src, "    printf(\"{i} %lld\\n\", {});", r.c_expr());
    }
    src.push_str("    return 0;\n}\n");
    let c = dir.join(format!("print_{tag}.c"));
    let exe = dir.join(format!("print_{tag}"));
    std::fs::write(&c, src).unwrap();
    let mut args: Vec<String> = C_FLAGS.iter().map(|s| s.to_string()).collect();
    args.extend(inc.iter().cloned());
    args.extend([
        c.display().to_string(),
        "-o".into(),
        exe.display().to_string(),
    ]);
    compile(&cc(), &args)?;
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{} failed", exe.display());
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (i, v) = line.split_once(' ').unwrap();
        m.insert(
            rows[i.parse::<usize>().unwrap()].key(),
            v.parse::<i128>().unwrap(),
        );
    }
    Ok(m)
}

/// A TU with one `_Static_assert` per numeric row.
fn static_assert_tu(
    dir: &Path,
    preamble: &str,
    inc: &[String],
    tag: &str,
) -> Result<usize, String> {
    let rows = numeric_rows();
    let mut src = String::from("#include <stdint.h>\n#include <stddef.h>\n");
    src.push_str(preamble);
    src.push('\n');
    for r in &rows {
        let _ = writeln!(
            src,
            "_Static_assert({} == {}, \"tests/abi/table.rs:{}: {} = {}\");",
            r.c_expr(),
            c_literal(r.expected()),
            r.line,
            c_string(&r.key()),
            c_string(&r.value)
        );
    }
    let c = dir.join(format!("assert_{tag}.c"));
    std::fs::write(&c, src).unwrap();
    let mut args: Vec<String> = C_FLAGS.iter().map(|s| s.to_string()).collect();
    args.extend(inc.iter().cloned());
    args.extend(["-fsyntax-only".into(), c.display().to_string()]);
    compile(&cc(), &args)?;
    Ok(rows.len())
}

fn compare(values: &BTreeMap<String, i128>, what: &str) -> Vec<String> {
    let mut bad = Vec::new();
    for r in numeric_rows() {
        let got = values[&r.key()];
        if got != r.expected() {
            if r.kind == "ctype" {
                bad.push(format!(
                    "table.rs:{}: {}: {what} typedef is not compatible with `{}`",
                    r.line,
                    r.key(),
                    r.value
                ));
            } else {
                bad.push(format!(
                    "table.rs:{}: {}: {what} = {got}, table = {}",
                    r.line,
                    r.key(),
                    r.value
                ));
            }
        }
    }
    bad
}

const OURS_PREAMBLE: &str = "#include \"vgpu_cuda.h\"\n#include \"vgpu_nvml.h\"\n";
const NVIDIA_PREAMBLE: &str = "#include <cuda.h>\n#include <nvml.h>\n";

fn report(checks: &str, n: usize) {
    eprintln!("abi_conformance: {checks}: {n} checks passed");
}

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
            need(&mut missing, format!("func {hdr} {p}"));
            if !it.pfns.contains(&format!("PFN_{p}")) {
                missing.push(format!("{file}: no `PFN_{p}` typedef for prototype {p}"));
            }
        }
        for r in func_rows(hdr) {
            if !protos.contains(&r.name) {
                missing.push(format!(
                    "table.rs:{}: func {} has no prototype in {file}",
                    r.line, r.name
                ));
            }
        }
        count += it.enumerators.len()
            + it.defines.len()
            + it.typedefs.len()
            + it.fields.len()
            + it.prototypes.len();
    }
    assert!(
        missing.is_empty(),
        "tests/abi/table.rs lacks rows for declarations in include/:\n{}",
        missing.join("\n")
    );
    report(
        "table covers include/ (enumerators, macros, typedefs, fields, prototypes)",
        count,
    );
}

#[test]
fn our_headers_match_table() {
    let dir = work_dir("ours");
    let inc = includes_ours();
    let values = print_values(&dir, OURS_PREAMBLE, &inc, "ours")
        .unwrap_or_else(|e| panic!("our headers: printer does not build:\n{e}"));
    let bad = compare(&values, "include/");
    assert!(
        bad.is_empty(),
        "include/ disagrees with tests/abi/table.rs:\n{}",
        bad.join("\n")
    );
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
        let mut args: Vec<String> = [
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-Wstrict-prototypes",
            "-fsyntax-only",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(inc.iter().cloned());
        args.push(probe.display().to_string());
        compile(&cc(), &args)
            .unwrap_or_else(|e| panic!("include/ does not compile cleanly as C:\n{e}"));
    }
    let probe_cc = dir.join("probe.cc");
    std::fs::write(&probe_cc, OURS_PREAMBLE).unwrap();
    let mut args: Vec<String> = ["-Wall", "-Wextra", "-Werror", "-fsyntax-only"]
        .iter()
        .map(|s| s.to_string())
        .collect();
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
        panic!(
            "a name in tests/abi/table.rs is missing from NVIDIA's headers ({}):\n{e}",
            h.source
        )
    });
    let bad = compare(&values, "NVIDIA");
    assert!(
        bad.is_empty(),
        "NVIDIA's headers ({}) disagree with tests/abi/table.rs:\n{}",
        h.source,
        bad.join("\n")
    );
    let n = static_assert_tu(&dir, NVIDIA_PREAMBLE, &inc, "nvidia")
        .unwrap_or_else(|e| panic!("NVIDIA: static assertions fail:\n{e}"));
    report(&format!("NVIDIA headers vs table ({})", h.source), n);
}

fn redeclaration_tu(
    dir: &Path,
    hdr: &str,
    nvidia_preamble: &str,
    ours: &str,
    inc: &[String],
) -> usize {
    let funcs = func_rows(hdr);
    let mut src = String::from(nvidia_preamble);
    src.push_str("\n/* Drop NVIDIA's renaming macros (cuMemAlloc -> cuMemAlloc_v2, ...): names below are symbols. */\n");
    for f in &funcs {
        let _ = writeln!(src, "#undef {}", f.name);
    }
    src.push_str(
        "\n/* NVIDIA declares every function we declare, under that exact (versioned) name. */\n",
    );
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
    compile(&cc(), &args)
        .unwrap_or_else(|e| panic!("{ours}: prototypes differ from NVIDIA's declarations:\n{e}"));
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
    assert!(
        n_cuda > 50 && n_nvml > 10,
        "too few functions in the table: {n_cuda} cuda, {n_nvml} nvml"
    );

    // Sanity: the check does catch a wrong parameter list.
    let bad = dir.join("negative.c");
    std::fs::write(&bad, "#define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n#undef cuMemAlloc_v2\nCUresult cuMemAlloc_v2(CUdeviceptr *dptr, unsigned int bytesize);\n").unwrap();
    let mut args: Vec<String> = C_FLAGS.iter().map(|s| s.to_string()).collect();
    args.extend(inc.iter().cloned());
    args.extend(["-fsyntax-only".into(), bad.display().to_string()]);
    assert!(
        compile(&cc(), &args).is_err(),
        "a mismatching redeclaration compiled: the prototype check is toothless"
    );
    report(
        &format!("prototypes + PFN typedefs vs NVIDIA ({})", h.source),
        n_cuda + n_nvml,
    );
}

#[test]
fn rust_bindings_match_table() {
    let rows = abi_rust_rows();
    let table_rows = table();
    assert_eq!(
        rows.len(),
        table_rows.len(),
        "macro and text parsers of tests/abi/table.rs disagree"
    );
    let mut bad = Vec::new();
    let mut n = 0;
    for (r, t) in rows.iter().zip(table_rows) {
        assert_eq!(r.key, t.key(), "row order");
        assert_eq!(
            r.expected,
            t.expected(),
            "{}: macro and text parsers read different numbers",
            t.key()
        );
        if let Some(v) = r.rust {
            n += 1;
            if v != r.expected {
                bad.push(format!(
                    "table.rs:{}: {}: cuda-types = {v}, table = {}",
                    t.line, r.key, t.value
                ));
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
