#!/usr/bin/env python3
"""Generate crates/cuda-types/src/pfn_table.rs: every `cuGetProcAddress` threshold of NVIDIA's
headers, one row per `PFN_<name>_v<version>[_ptds|_ptsz]` typedef of the `*Typedefs.h` files of
CUDA 12.9 and 13.x, with the exported symbol that carries that ABI.

    ci/gen-pfn-table.py            regenerate in place (commit the result)
    ci/gen-pfn-table.py --check    fail if the committed file differs from a fresh generation
    ci/gen-pfn-table.py --include-dir 12.9|13.x
                                   print the include directory of that release's headers
                                   (fetching them if needed; tests/abi_conformance.rs uses it)

The headers come from NVIDIA's PyPI wheels (`nvidia-cuda-runtime-cu12==12.9.*`,
`nvidia-cuda-runtime==13.*`), fetched once with `pip download --no-deps` into
target/nvidia-headers/pfn/ and unpacked there (never committed); `VGPU_PFN_HEADERS_12` /
`VGPU_PFN_HEADERS_13` may name directories holding the headers instead.

Symbol of a threshold: a name's default-stream versions, in increasing order, are its ABIs 1, 2,
3, ...: the first is the bare name, the N-th `<name>_v<N>` (the naming of cuda.h under
`__CUDA_API_VERSION_INTERNAL`, which also lists the versions older than the public typedefs). A
per-thread variant `PFN_<name>_v<P>_ptds` is the `_ptds` form of the newest default ABI at or
below P. Every symbol derived this way must be declared in the same release's headers, or the
generator fails. One row is not a typedef: `cuGraphInstantiate` at 12000 is
`cuGraphInstantiateWithFlags` (cuda.h maps the name to it from CUDA 12 on). A threshold present
in both releases must have the same parameter list in both, or the generator fails.
"""

import argparse
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates/cuda-types/src/pfn_table.rs"
CACHE = ROOT / "target/nvidia-headers/pfn"
RELEASES = [
    # (tag, bit, wheel spec, wheel file prefix, env override)
    ("12.9", 1, "nvidia-cuda-runtime-cu12==12.9.*", "nvidia_cuda_runtime_cu12-12.9.", "VGPU_PFN_HEADERS_12"),
    ("13.x", 2, "nvidia-cuda-runtime==13.*", "nvidia_cuda_runtime-13.", "VGPU_PFN_HEADERS_13"),
]
# Headers whose PFN typedefs are read -> the header whose prototypes validate their symbols
# (cudaProfiler.h is not in the runtime wheel: its three symbols go unvalidated).
TYPEDEF_HEADERS = {
    "cudaTypedefs.h": "cuda.h",
    "cudaGLTypedefs.h": "cudaGL.h",
    "cudaEGLTypedefs.h": "cudaEGL.h",
    "cudaVDPAUTypedefs.h": "cudaVDPAU.h",
    "cudaProfilerTypedefs.h": "cudaProfiler.h",
}
EXTRA_ROWS = [("cuGraphInstantiate", 12000, "", "cuGraphInstantiateWithFlags")]

TYPEDEF_RE = re.compile(
    r"typedef\s+\w+\s*\(\s*(?:CUDAAPI\s*)?\*\s*PFN_(\w+?)_v(\d+)(_ptds|_ptsz)?\s*\)\s*\(([^;]*?)\)\s*;", re.S
)


def log(msg):
    print(f"[gen-pfn-table] {msg}", file=sys.stderr)


def version_key(path):
    ver = path.name.split("-")[1]
    return [int(x) if x.isdigit() else 0 for x in ver.split(".")]


def fetch(spec, prefix):
    """The include/ directory of the newest wheel matching `spec`."""
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    have = sorted(p for p in wheels.glob("*.whl") if p.name.startswith(prefix))
    if not have:
        log(f"pip download {spec}")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", "-d", str(wheels), spec],
            check=True,
        )
        have = sorted(p for p in wheels.glob("*.whl") if p.name.startswith(prefix))
    if not have:
        sys.exit(f"gen-pfn-table: no wheel for {spec} in {wheels}")
    whl = max(have, key=version_key)
    dest = CACHE / whl.stem
    if not (dest / ".complete").is_file():
        with zipfile.ZipFile(whl) as z:
            members = [m for m in z.namelist() if "/include/" in m and m.endswith(".h")]
            z.extractall(dest, members)
        (dest / ".complete").write_text(whl.name)
    incs = sorted({p.parent for p in dest.rglob("cudaTypedefs.h")})
    if len(incs) != 1:
        sys.exit(f"gen-pfn-table: expected one cudaTypedefs.h in {dest}, found {incs}")
    return incs[0], whl.name.split("-")[1]


def norm(params):
    return " ".join(params.replace("\n", " ").split())


def cuda_version(inc):
    m = re.search(r"^#define\s+CUDA_VERSION\s+(\d+)", (inc / "cuda.h").read_text(errors="replace"), re.M)
    if not m:
        sys.exit(f"gen-pfn-table: no CUDA_VERSION in {inc / 'cuda.h'}")
    return int(m.group(1))


def parse_release(inc):
    """({(name, version, suffix): normalized parameter list}, {key: prototype header or None})"""
    rows, proto = {}, {}
    for h, ph in TYPEDEF_HEADERS.items():
        p = inc / h
        if not p.is_file():
            continue
        for m in TYPEDEF_RE.finditer(p.read_text(errors="replace")):
            key = (m.group(1), int(m.group(2)), m.group(3) or "")
            rows[key] = norm(m.group(4))
            proto[key] = ph if (inc / ph).is_file() else None
    return rows, proto


def declared(inc, header):
    """Function names `header` declares, under every name cuda.h gives them: prototypes, the
    targets of its `#define name name_vN` remappings and of `__CUDA_API_PTDS/PTSZ(name)`."""
    text = (inc / header).read_text(errors="replace")
    names = set(re.findall(r"\bCUDAAPI\s+(\w+)\s*\(", text))
    names |= set(re.findall(r"^\s*#\s*define\s+\w+\s+(\w+)\s*$", text, re.M))
    names |= {n + "_ptds" for n in re.findall(r"__CUDA_API_PTDS\(\s*(\w+)\s*\)", text)}
    names |= {n + "_ptsz" for n in re.findall(r"__CUDA_API_PTSZ\(\s*(\w+)\s*\)", text)}
    return names


def symbols(keys):
    """(name, version, suffix) -> exported symbol, by the ABI-numbering rule of the module doc."""
    by_name = {}
    for name, ver, suffix in keys:
        by_name.setdefault(name, set()).add((ver, suffix))
    out = {}
    for name, vs in by_name.items():
        defaults = sorted(v for v, s in vs if not s)
        sym_of = {v: name if i == 0 else f"{name}_v{i + 1}" for i, v in enumerate(defaults)}
        for v, s in vs:
            if not s:
                out[(name, v, s)] = sym_of[v]
            else:
                base = [d for d in defaults if d <= v]
                stem = sym_of[base[-1]] if base else name
                out[(name, v, s)] = stem + s
    return out


def chunks(words, width=96):
    """`words` joined, cut into pieces of about `width` characters (lines of a `concat!`)."""
    out, cur = [], ""
    for w in words:
        if cur and len(cur) + len(w) > width:
            out.append(cur)
            cur = ""
        cur += w
    return out + ([cur] if cur else [])


def generate():
    merged = {}  # key -> (params, bits)
    versions = []
    newest = 0
    for tag, bit, spec, prefix, env in RELEASES:
        override = os.environ.get(env)
        if override:
            incs = sorted({p.parent for p in Path(override).rglob("cudaTypedefs.h")})
            if not incs:
                sys.exit(f"gen-pfn-table: no cudaTypedefs.h under ${env}={override}")
            inc, ver = incs[0], f"{tag} ({override})"
        else:
            inc, ver = fetch(spec, prefix)
        versions.append(ver)
        newest = max(newest, cuda_version(inc))
        rows, proto = parse_release(inc)
        if len(rows) < 300:
            sys.exit(f"gen-pfn-table: only {len(rows)} PFN typedefs in {inc}")
        syms = symbols(rows.keys())
        decl = {h: declared(inc, h) for h in set(proto.values()) if h}
        missing = sorted({syms[k] for k in rows if proto[k] and syms[k] not in decl[proto[k]]})
        if missing:
            sys.exit(f"gen-pfn-table: {tag}: derived symbols not declared in its headers: {missing}")
        for k, params in rows.items():
            if k in merged:
                old, bits = merged[k]
                if old != params:
                    sys.exit(f"gen-pfn-table: PFN_{k[0]}_v{k[1]}{k[2]} differs between releases:\n  {old}\n  {params}")
                merged[k] = (old, bits | bit)
            else:
                merged[k] = (params, bit)
    syms = symbols(merged.keys())
    rows = [(n, v, s, syms[(n, v, s)], merged[(n, v, s)][1]) for (n, v, s) in merged]
    for n, v, s, sym in EXTRA_ROWS:
        rows.append((n, v, s, sym, 3))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    # One string of every symbol; each row names its symbol by offset and its name by length (a
    # prefix of the symbol), so the generated table holds no pointer.
    order, at, pos = [], {}, 0
    for n, _, _, sym, _ in rows:
        if not sym.startswith(n) or not sym.isascii() or len(sym) > 255:
            sys.exit(f"gen-pfn-table: symbol {sym} does not start with its name {n} (or is not short ASCII)")
        if sym not in at:
            at[sym] = pos
            order.append(sym)
            pos += len(sym)
    if pos > 0xFFFF:
        sys.exit(f"gen-pfn-table: {pos} bytes of symbols do not fit 16-bit offsets")
    lines = [
        f"// @generated by ci/gen-pfn-table.py from NVIDIA's *Typedefs.h of CUDA {versions[0]} and {versions[1]}.",
        "// Do not edit by hand: rerun the generator.",
        "",
        "/// Per-thread default-stream variant: no (`cuGetProcAddress` flags 0), `_ptds` or `_ptsz`",
        "/// (flags `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`).",
        "#[derive(Clone, Copy, Debug, PartialEq, Eq)]",
        "pub enum PerThread {",
        "    No,",
        "    Ptds,",
        "    Ptsz,",
        "}",
        "",
        "/// One `PFN_<name>_v<version>` of NVIDIA's headers: the ABI `cuGetProcAddress(name, v, flags)`",
        "/// hands out for `version <= v <` the name's next threshold, and the symbol that has it. The",
        "/// name and the symbol are slices of [`SYMBOLS`] (the name is a prefix of the symbol): the table",
        "/// holds no pointer, so loading the library relocates none of it.",
        "#[derive(Clone, Copy, PartialEq, Eq)]",
        "pub struct PfnRow {",
        "    at: u16,",
        "    len: u8,",
        "    name_len: u8,",
        "    pub version: u32,",
        "    pub per_thread: PerThread,",
        "    /// Headers that list the row: bit 0 CUDA 12.9, bit 1 CUDA 13.x.",
        "    pub headers: u8,",
        "}",
        "",
        "impl PfnRow {",
        "    /// The function's name, as `cuGetProcAddress` is asked for it.",
        "    pub const fn name(&self) -> &'static str {",
        "        slice(self.at, self.name_len)",
        "    }",
        "",
        "    /// The exported symbol with this row's ABI.",
        "    pub const fn symbol(&self) -> &'static str {",
        "        slice(self.at, self.len)",
        "    }",
        "}",
        "",
        "impl core::fmt::Debug for PfnRow {",
        "    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {",
        "        write!(f, \"{}@{}{:?}={} ({})\", self.name(), self.version, self.per_thread, self.symbol(), self.headers)",
        "    }",
        "}",
        "",
        "const fn slice(at: u16, len: u8) -> &'static str {",
        "    let (_, tail) = SYMBOLS.as_bytes().split_at(at as usize);",
        "    let (s, _) = tail.split_at(len as usize);",
        "    match core::str::from_utf8(s) {",
        "        Ok(s) => s,",
        "        Err(_) => panic!(\"pfn_table: a slice of SYMBOLS is not UTF-8\"),",
        "    }",
        "}",
        "",
        "pub const IN_12_9: u8 = 1;",
        "pub const IN_13: u8 = 2;",
        "",
        "/// `CUDA_VERSION` of the newest headers read: thresholds above it are unknown to the table.",
        f"pub const HEADERS_VERSION: u32 = {newest};",
        "",
        "/// Every row's symbol, each once, back to back.",
        "pub const SYMBOLS: &str = concat!(",
        *[f'    "{chunk}",' for chunk in chunks(order)],
        ");",
        "",
        f"/// {len(rows)} rows, sorted by (name, version, variant).",
        "pub const PFN_ROWS: &[PfnRow] = &[",
    ]
    pt = {"": "No", "_ptds": "Ptds", "_ptsz": "Ptsz"}
    for n, v, s, sym, bits in rows:
        lines.append(
            f"    PfnRow {{ at: {at[sym]}, len: {len(sym)}, name_len: {len(n)}, version: {v}, per_thread: PerThread::{pt[s]}, headers: {bits} }}, // {sym}"
        )
    lines.append("];")
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--include-dir", choices=[r[0] for r in RELEASES])
    a = ap.parse_args()
    if a.include_dir:
        tag, _, spec, prefix, env = next(r for r in RELEASES if r[0] == a.include_dir)
        if os.environ.get(env):
            print(sorted({p.parent for p in Path(os.environ[env]).rglob("cudaTypedefs.h")})[0])
        else:
            print(fetch(spec, prefix)[0])
        return
    text = generate()
    if a.check:
        if not OUT.is_file() or OUT.read_text() != text:
            sys.exit(f"gen-pfn-table: {OUT.relative_to(ROOT)} is stale; run ci/gen-pfn-table.py")
        log(f"{OUT.relative_to(ROOT)} is up to date")
    else:
        OUT.write_text(text)
        log(f"wrote {OUT.relative_to(ROOT)} ({text.count('    PfnRow { at:')} rows)")


if __name__ == "__main__":
    main()
