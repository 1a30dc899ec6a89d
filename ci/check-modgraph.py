#!/usr/bin/env python3
"""Fails on an import circle between the modules of a crate (ci/test.sh runs it; < 1 s, no build).

For every product crate (src/, crates/*/src; not the simulated GPU under sim/) it reads each module's source, resolves
the module paths it names (`use crate::a::{b, c}`, `super::x`, `self::y`, `crate::a::f()` in code,
a child module's name, a name a `use` brought in) to the deepest module of the crate they reach,
and builds the graph "module A names module B" plus "parent declares child". Test-only code
(`#[cfg(test)]` modules and declarations) is left out: it does not shape the product's layering.

A strongly connected component of that graph is a circle, except a parent with its own children
(a child may use what its parent declares): a component whose members all descend from one of
them is fine as long as no circle remains among its members once the parent-child edges are
dropped. Each circle is printed with its edges and the first line that makes each edge.

ALLOWED below lists circles accepted on purpose (each with the reason); an allowed circle that no
longer exists is reported too, so the list shrinks with the code.

  ci/check-modgraph.py            exit 0 when no circle; else the circles and exit 1 (2: its own
                                  self-test on a small crate with known circles failed)
  ci/check-modgraph.py --graph    also print every crate's edges
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Circles accepted on purpose: (crate dir, frozenset of module paths), each with why.
ALLOWED = {}

TOKEN = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*|::|[{}();,*#\[\]!=<>]|\S")


def strip(src):
    """Source without comments, string and char literals (their text could look like paths)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if src[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 260]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:  # a char literal; otherwise a lifetime, kept as is
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def tokens(src):
    line = 1
    pos = 0
    for m in TOKEN.finditer(src):
        line += src.count("\n", pos, m.start())
        pos = m.start()
        yield m.group(0), line


def is_cfg_test(attr):
    return attr and attr[0] == "cfg" and "test" in attr and "not" not in attr


class Crate:
    def __init__(self, src_dir):
        self.src_dir = src_dir
        self.modules = {}  # module path (tuple of names, () = the crate root) -> its file
        self.edges = {}  # (from, to) -> "file:line" of the first reference
        self.parsed = []  # (module path, its own tokens, its file)

    def load(self, root_file):
        self.modules[()] = root_file
        self.parse_file((), root_file)
        for mod, toks, file in self.parsed:
            self.resolve(mod, toks, file)

    def parse_file(self, mod, file):
        toks = list(tokens(strip(file.read_text())))
        self.scan(mod, toks, file, file_mod=mod)

    def scan(self, mod, toks, file, file_mod):
        """Splits `toks` into the module's own tokens and its inline / file child modules."""
        own = []
        i, n = 0, len(toks)
        attrs = []
        while i < n:
            t = toks[i][0]
            if t == "#" and i + 1 < n and toks[i + 1][0] in ("[", "!"):
                j = i + 1 + (toks[i + 1][0] == "!")
                depth, k = 0, j
                body = []
                while k < n:
                    if toks[k][0] == "[":
                        depth += 1
                    elif toks[k][0] == "]":
                        depth -= 1
                        if depth == 0:
                            break
                    body.append(toks[k][0])
                    k += 1
                attrs.append(body[1:])
                i = k + 1
                continue
            if t == "mod" and i + 2 < n and re.match(r"[A-Za-z_]", toks[i + 1][0]) and toks[i + 2][0] in ("{", ";"):
                name = toks[i + 1][0]
                test_only = any(is_cfg_test(a) for a in attrs)
                child = mod + (name,)
                if toks[i + 2][0] == ";":
                    if not test_only:
                        f = self.child_file_of(file, file_mod, mod, name)
                        if f is not None:
                            self.modules[child] = f
                            self.edge(mod, child, file, toks[i][1])
                            self.parse_file(child, f)
                    i += 3
                else:
                    depth, k = 0, i + 2
                    while k < n:
                        if toks[k][0] == "{":
                            depth += 1
                        elif toks[k][0] == "}":
                            depth -= 1
                            if depth == 0:
                                break
                        k += 1
                    if not test_only:
                        self.modules[child] = file
                        self.edge(mod, child, file, toks[i][1])
                        self.scan(child, toks[i + 3:k], file, file_mod)
                    i = k + 1
                attrs = []
                continue
            # Attributes carry over a visibility (`#[cfg(test)] pub(crate) mod x;`), nothing else.
            after_pub = own and own[-1][0] in ("pub", "(", "crate", "super", "in", "self")
            if not (t == "pub" or after_pub and t in ("(", ")", "crate", "super", "in", "self")):
                attrs = []
            own.append(toks[i])
            i += 1
        self.parsed.append((mod, own, file))

    def child_file_of(self, file, file_mod, mod, name):
        base = file.parent if file.name in ("lib.rs", "main.rs", "mod.rs") else file.parent / file.stem
        for part in mod[len(file_mod):]:
            base = base / part
        for cand in (base / f"{name}.rs", base / name / "mod.rs"):
            if cand.exists():
                return cand
        return None

    def edge(self, a, b, file, line):
        if a != b and a and b:
            shown = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file
            self.edges.setdefault((a, b), f"{shown}:{line}")

    def deepest(self, base, segs):
        cur = base
        for s in segs:
            if cur + (s,) in self.modules:
                cur = cur + (s,)
            else:
                break
        return cur

    def start(self, mod, first, scope):
        """The module a path's first segment names, or None (an external crate, a local item)."""
        if first in ("crate", "$crate"):
            return ()
        if first == "self":
            return mod
        if first == "super":
            return mod[:-1]
        if mod + (first,) in self.modules:
            return mod + (first,)
        aliases, globs = scope
        if first in aliases:
            return aliases[first]
        for g in globs:  # `use super::*;` brings the parent's child modules into scope
            if g + (first,) in self.modules:
                return g + (first,)
        return None

    def resolve_path(self, mod, segs, scope):
        """(the deepest module of the crate the path reaches, whether it names exactly a module)."""
        base = self.start(mod, segs[0], scope)
        if base is None:
            return None, False
        rest = segs[1:]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
        target = self.deepest(base, rest)
        return target, len(target) - len(base) == len(rest)

    def use_paths(self, toks):
        """Expands a use tree (tokens between `use` and `;`) into (segments, alias) pairs."""
        out = []

        def tree(i, prefix):
            segs = list(prefix)
            while i < len(toks):
                t = toks[i]
                if t == "{":
                    i += 1
                    while i < len(toks) and toks[i] != "}":
                        i = tree(i, segs)
                        if i < len(toks) and toks[i] == ",":
                            i += 1
                    return i + 1
                if t == "::":
                    i += 1
                    continue
                if t == "*":
                    out.append((segs, None))
                    return i + 1
                if t in (",", "}"):
                    break
                if t == "as":
                    out.append((segs, toks[i + 1]))
                    return i + 2
                if t == "self":
                    i += 1
                    continue
                segs = segs + [t]
                i += 1
            out.append((segs, segs[-1] if segs else None))
            return i

        tree(0, [])
        return [(s, a) for s, a in out if s]

    def resolve(self, mod, toks, file):
        aliases, globs = {}, []
        scope = (aliases, globs)
        # First the use declarations (they scope over the whole module).
        i, n = 0, len(toks)
        uses = []
        while i < n:
            if toks[i][0] == "use":
                j = i + 1
                while j < n and toks[j][0] != ";":
                    j += 1
                if toks[i + 1][0] == "::":
                    i = j + 1
                    continue
                for segs, alias in self.use_paths([t for t, _ in toks[i + 1:j]]):
                    target, exact = self.resolve_path(mod, segs, scope)
                    if target is None:
                        continue
                    uses.append((target, toks[i][1]))
                    if exact and alias is None:
                        globs.append(target)
                    elif exact and alias != "_" and target != ():
                        aliases[alias] = target  # `use crate::a::b;` makes `b::x` mean crate::a::b::x
                i = j + 1
                continue
            i += 1
        for target, line in uses:
            self.edge(mod, target, file, line)
        # Then every path in code: IDENT :: IDENT ...
        i = 0
        prev = None
        while i < n:
            t = toks[i][0]
            if t == "use":
                while i < n and toks[i][0] != ";":
                    i += 1
                prev = None
                continue
            if re.match(r"\$?[A-Za-z_]", t) and i + 1 < n and toks[i + 1][0] == "::" and prev != "::":
                segs = [t]
                j = i + 1
                while j + 1 < n and toks[j][0] == "::" and re.match(r"[A-Za-z_]", toks[j + 1][0]):
                    segs.append(toks[j + 1][0])
                    j += 2
                target, _ = self.resolve_path(mod, segs, scope)
                if target is not None:
                    self.edge(mod, target, file, toks[i][1])
                prev = None
                i = j
                continue
            prev = t
            i += 1


def is_ancestor(a, b):
    return len(a) < len(b) and b[: len(a)] == a


def sccs(nodes, edges):
    adj = {v: [] for v in nodes}
    for a, b in edges:
        if a in adj and b in adj:
            adj[a].append(b)
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        work = [(v, iter(adj[v]))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[u])
                if low[u] == index[u]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == u:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(adj[w])))
            elif w in on:
                low[u] = min(low[u], index[w])

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def circles(crate):
    nodes = set(crate.modules) - {()}
    found = []
    for comp in sccs(nodes, crate.edges):
        tops = [m for m in comp if all(m == o or is_ancestor(m, o) for o in comp)]
        if not tops:
            found.append(comp)
            continue
        # A parent with its children: only a circle among them that avoids parent-child edges counts.
        inner = [(a, b) for a, b in crate.edges if a in comp and b in comp and not (is_ancestor(a, b) or is_ancestor(b, a))]
        found.extend(sccs(set(comp), inner))
    return found


def name(m):
    return "::".join(m)


# A crate with known circles, so a change to the parser that stops finding them fails here first.
SELF_TEST = {
    "lib.rs": "mod a;\nmod b;\nmod p;\nmod q;\nmod t;\n",
    # a <-> b through a use tree and a path in code.
    "a.rs": "use crate::{b::{self, Thing}, p};\nfn f() { b::g(); }\n",
    "b.rs": "pub struct Thing;\npub fn g() { super::a::h(); }\n",
    # A parent with its children: fine, unless two children form a circle of their own.
    "p.rs": "mod c;\nmod d;\nmod e;\nuse c::X;\n",
    "p/c.rs": "use super::d;\npub struct X;\n",
    "p/d.rs": "use super::*;\npub fn y() { self::z(); super::e::w(); }\nfn z() {}\n",
    "p/e.rs": "pub fn w() { crate::p::c::X; }\n",
    # Comments, strings and test-only code do not count.
    "q.rs": '// crate::t::x\nconst S: &str = "crate::t::x";\n#[cfg(test)]\nmod tests { use crate::t; }\n',
    "t.rs": "use crate::q;\n",
}
SELF_TEST_CIRCLES = [["a", "b"], ["p::c", "p::d", "p::e"]]


def self_test():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELF_TEST.items():
            f = pathlib.Path(d) / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text)
        crate = Crate(pathlib.Path(d))
        crate.load(pathlib.Path(d) / "lib.rs")
        found = sorted(sorted(name(m) for m in comp) for comp in circles(crate))
    if found != SELF_TEST_CIRCLES:
        print(f"ci/check-modgraph.py: self-test failed: found {found}, expected {SELF_TEST_CIRCLES}")
        return False
    return True


def main():
    show_graph = "--graph" in sys.argv[1:]
    if not self_test():
        return 2
    crates = []
    for cargo in sorted(ROOT.glob("Cargo.toml")) + sorted(ROOT.glob("crates/*/Cargo.toml")):
        src = cargo.parent / "src"
        for root_file in (src / "lib.rs", src / "main.rs"):
            if root_file.exists():
                crates.append(root_file)
    failed = False
    seen_allowed = set()
    for root_file in crates:
        crate = Crate(root_file.parent)
        crate.load(root_file)
        label = str(root_file.parent.relative_to(ROOT))
        if show_graph:
            for (a, b), where in sorted(crate.edges.items()):
                print(f"{label}: {name(a)} -> {name(b)}  ({where})")
        for comp in circles(crate):
            key = (label, frozenset(name(m) for m in comp))
            if key in ALLOWED:
                seen_allowed.add(key)
                print(f"{label}: allowed circle ({ALLOWED[key]}): {', '.join(sorted(key[1]))}")
                continue
            failed = True
            print(f"{label}: import circle of {len(comp)} modules: {', '.join(name(m) for m in comp)}")
            for (a, b), where in sorted(crate.edges.items()):
                if a in comp and b in comp:
                    print(f"    {name(a)} -> {name(b)}    ({where})")
    for key in set(ALLOWED) - seen_allowed:
        failed = True
        print(f"{key[0]}: allowed circle no longer exists, drop it from ALLOWED: {', '.join(sorted(key[1]))}")
    if failed:
        print("ci/check-modgraph.py: import circles found (see docs/design.md, module map)")
        return 1
    print(f"ci/check-modgraph.py: no import circle in {len(crates)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
