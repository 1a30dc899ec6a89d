#!/usr/bin/env bash
# Checks the product's text (ci/test.sh runs it; no build needed, < 1 s):
#
#   1. No development history in README.md, docs/, src/, crates/*/src/ and sim/: the words
#      "session", "before/after", "final build", "this branch", "used to", and issue numbers
#      ("issue 12", "#24"). Exceptions: references to HAMi's upstream issues (HAMi#1153,
#      HAMi-core#233), entries of docs/known-failures.md ("known-failures.md #5, #6"), format
#      specifiers ({:#010x}), and the lines matched by ci/check-docs.allow.
#   2. Every figure in one place: a measured figure in README.md or docs/design.md is written as a
#      link to docs/benchmarks.md whose text is the figure; that text must appear in
#      docs/benchmarks.md (whitespace-insensitive) and the link's anchor must be one of its
#      headings. Every row of the README's performance table must carry such a link.
#   3. A reference to a section of our documents (docs/design.md "Memory ledger", README
#      "Operating") in the sources, tests, scripts or documents names an existing heading.
#
#   ci/check-docs.sh          exit 0 when clean; else one line per finding and exit 1
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - <<'EOF'
import pathlib, re, sys

root = pathlib.Path(".")
findings = []

# ---- 1. history words ------------------------------------------------------------------------
WORDS = re.compile(
    r"\bsessions?\b|before/after|\bfinal build\b|\bthis branch\b|\bused to\b"
    r"|\bissues? #?\d+|(?<![\w{:])#\d+\b",
    re.IGNORECASE,
)
# Stripped from a line before it is checked: legitimate references that look like issue numbers.
LEGIT = re.compile(
    r"HAMi(?:-core)?#\d+"                                        # upstream issues
    r"|known-failures(?:\.md)?\s+#\d+(?:\s*(?:,|/|and)\s*#\d+)*"  # entries of known-failures.md
    r"|\{[^}]*:#\d*x\}"                                           # Rust format specifiers
)
allow = []
for line in (root / "ci/check-docs.allow").read_text().splitlines():
    line = line.strip()
    if line and not line.startswith("#"):
        path, _, pattern = line.partition(":")
        allow.append((path, re.compile(pattern)))

def scanned_files():
    yield root / "README.md"
    yield from sorted((root / "docs").rglob("*.md"))
    for base in [root / "src", *sorted((root / "crates").glob("*/src")), root / "sim"]:
        for p in sorted(base.rglob("*")):
            if p.is_file() and p.suffix in {".rs", ".md", ".c", ".h", ".sh", ".py", ".S"}:
                yield p

for path in scanned_files():
    rel = path.as_posix()
    # The results log of docs/benchmarks.md names commits and dates by design; its words are checked.
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        text = LEGIT.sub("", line)
        m = WORDS.search(text)
        if not m:
            continue
        if any(rel == p and pat.search(line) for p, pat in allow):
            continue
        findings.append(f"{rel}:{n}: development history ({m.group(0)!r}): {line.strip()[:120]}")

# ---- 2. figures --------------------------------------------------------------------------------
def squash(s):
    return " ".join(s.split())

def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")

bench = (root / "docs/benchmarks.md").read_text()
bench_flat = squash(bench)
anchors = {slug(h) for h in re.findall(r"^#+\s+(.*)$", bench, re.M)}
LINK = re.compile(r"\[([^\]]+)\]\(((?:docs/)?benchmarks\.md)(#[^)\s]*)?\)")

for doc in ["README.md", "docs/design.md"]:
    text = (root / doc).read_text()
    for m in LINK.finditer(text):
        label, anchor = squash(m.group(1)), m.group(3)
        line = text.count("\n", 0, m.start()) + 1
        if anchor and anchor[1:] not in anchors:
            findings.append(f"{doc}:{line}: no heading {anchor} in docs/benchmarks.md")
        if any(c.isdigit() for c in label) and label not in bench_flat:
            findings.append(f"{doc}:{line}: figure {label!r} is not in docs/benchmarks.md")

readme = (root / "README.md").read_text()
perf = re.search(r"^## Performance\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
if not perf:
    findings.append("README.md: no '## Performance' section")
else:
    rows = [r for r in perf.group(1).splitlines() if r.startswith("|") and not set(r) <= set("|-: ")]
    for r in rows[1:]:  # rows[0] is the header
        if not LINK.search(r):
            findings.append(f"README.md: performance row without a figure linked to docs/benchmarks.md: {r[:80]}")

# ---- 3. section references -----------------------------------------------------------------------
# `docs/design.md "Memory ledger"`, `sim/README.md "Model"`, `README "Operating"`: the quoted name
# must begin a heading of that document (references into text that moved would dangle).
REF = re.compile(r'((?:docs/)?(?:design|benchmarks|configuration|threat-model)\.md|sim/README\.md|README(?:\.md)?)`?,? "([^"]+)"')
DOCS = {"sim/README.md": "sim/README.md", "README": "README.md", "README.md": "README.md"}
headings = {}
def heads(doc):
    if doc not in headings:
        headings[doc] = re.findall(r"^#+\s+(.*)$", (root / doc).read_text(), re.M)
    return headings[doc]
ref_files = list(scanned_files()) + sorted(p for p in (root / "tests").rglob("*") if p.is_file() and p.suffix in {".rs", ".py", ".sh", ".c"})
ref_files += sorted((root / "ci").glob("*.sh"))
for path in ref_files:
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        for m in REF.finditer(line):
            name = m.group(1)
            doc = DOCS.get(name) or ("docs/" + name.removeprefix("docs/"))
            if not any(h.startswith(m.group(2)) for h in heads(doc)):
                findings.append(f"{path.as_posix()}:{n}: {doc} has no section \"{m.group(2)}\"")

for f in findings:
    print(f)
if findings:
    print(f"ci/check-docs.sh: {len(findings)} finding(s)", file=sys.stderr)
    sys.exit(1)
print("ci/check-docs.sh: product text clean, every quoted figure is in docs/benchmarks.md")
EOF
