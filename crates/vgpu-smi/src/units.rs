//! Human units for the table.

pub fn bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if b < 1024 {
        format!("{b} B")
    } else if f < K * K {
        format!("{:.1} KiB", f / K)
    } else if f < K * K * K {
        format!("{:.0} MiB", f / (K * K))
    } else {
        format!("{:.2} GiB", f / (K * K * K))
    }
}

pub fn duration_ns(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if ns == 0 {
        "0 s".into()
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// Parses a memory size: the library's limit syntax (`2g`, `1024m`, `1048576k`, bytes), plus
/// `GiB`/`MiB`/`KiB`/`G`/`M`/`K` spelled out; `0`/`unlimited` = no limit.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") {
        return Ok(0);
    }
    let lower = t.to_ascii_lowercase();
    let norm = ["gib", "mib", "kib", "gb", "mb", "kb"]
        .iter()
        .find_map(|suf| lower.strip_suffix(suf).map(|n| format!("{n}{}", &suf[..1])))
        .unwrap_or(lower);
    if norm.is_empty() || !norm.chars().next().unwrap().is_ascii_digit() {
        return Err(format!("not a size: {s:?} (examples: 2g, 1536m, 4GiB, 1073741824)"));
    }
    vgpu_core::limits::parse_limit(&norm).map_err(|e| format!("not a size: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(300 << 20), "300 MiB");
        assert_eq!(bytes(3 << 29), "1.50 GiB");
        assert_eq!(duration_ns(1_500_000_000), "1.5 s");
        assert_eq!(duration_ns(20_000_000), "20 ms");
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("1536MiB").unwrap(), 1536 << 20);
        assert_eq!(parse_size("unlimited").unwrap(), 0);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("").is_err());
    }
}
