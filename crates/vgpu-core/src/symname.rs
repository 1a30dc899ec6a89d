//! Driver symbol names without their ABI decorations, so `cuGetProcAddress`'s caller-given names
//! (`"cuMemAlloc"`) can be compared with the exported ones (`cuMemAlloc_v2`, `cuLaunchKernel_ptsz`).

/// `cuMemAlloc_v2` → `cuMemAlloc`, `cuLaunchKernel_ptsz` → `cuLaunchKernel`,
/// `cuMemcpyHtoD_v2_ptds` → `cuMemcpyHtoD`: strips a per-thread suffix (`_ptsz`, `_ptds`), then one
/// version suffix `_v<digits>` (at least one digit).
pub fn base_name(name: &[u8]) -> &[u8] {
    let mut n = name;
    for suffix in [&b"_ptsz"[..], b"_ptds"] {
        if let Some(s) = n.strip_suffix(suffix) {
            n = s;
        }
    }
    if let Some(pos) = n.iter().rposition(|&c| c == b'_') {
        let tail = &n[pos + 1..];
        if tail.len() >= 2 && tail[0] == b'v' && tail[1..].iter().all(u8::is_ascii_digit) {
            return &n[..pos];
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::base_name;

    fn b(s: &str) -> &str {
        std::str::from_utf8(base_name(s.as_bytes())).unwrap()
    }

    #[test]
    fn version_and_per_thread_suffixes_go() {
        assert_eq!(b("cuMemAlloc_v2"), "cuMemAlloc");
        assert_eq!(b("cuLaunchKernel_ptsz"), "cuLaunchKernel");
        assert_eq!(b("cuMemcpyHtoD_v2_ptds"), "cuMemcpyHtoD");
        assert_eq!(b("cuGetProcAddress_v2"), "cuGetProcAddress");
        assert_eq!(b("cuCtxCreate_v10"), "cuCtxCreate");
    }

    #[test]
    fn undecorated_and_look_alike_names_stay() {
        assert_eq!(b("cuMemAlloc"), "cuMemAlloc");
        assert_eq!(b("cuMemAlloc_v"), "cuMemAlloc_v", "no digits: not a version");
        assert_eq!(b("cuMemAlloc_vx2"), "cuMemAlloc_vx2");
        assert_eq!(b("cuMemAlloc_2"), "cuMemAlloc_2");
        assert_eq!(b("cuMemAllocAsync"), "cuMemAllocAsync");
        assert_eq!(b(""), "");
        assert_eq!(b("_v2"), "");
        assert_eq!(b("_ptsz"), "");
    }

    #[test]
    fn only_one_version_suffix_is_stripped() {
        assert_eq!(b("cuX_v2_v3"), "cuX_v2");
    }
}
