// Compiling the check programs: C/C++ compilers, flags, the value-printing and `_Static_assert`
// translation units, and comparing what they print with the table. `include!`d by
// tests/abi_conformance.rs.

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
