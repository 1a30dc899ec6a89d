// A small parser for our own (regular, hand-written) headers: enumerators, macros, typedefs,
// struct fields and prototypes of `include/`. `include!`d by tests/abi_conformance.rs.

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
