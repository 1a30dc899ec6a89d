//! Limit syntax of docs/hami-contract.md §1.4.
//!
//! Accepted: `<n>` (bytes) and `<n>k|K|m|M|g|G` (KiB/MiB/GiB), `n` decimal, u64, overflow
//! checked; surrounding ASCII whitespace is ignored; empty = 0.
//!
//! **Deliberate deviation** from the incumbent's `strtoul(base 0)` parser: forms it *misreads*
//! are rejected with an error instead of being silently turned into a different number:
//! hex (`0x10`), octal-looking numbers with a leading zero (`010`), fractions (`1.5g`, which the
//! incumbent reads as 1 GiB), two-letter units (`1000Mi`, read as 1000 bytes), signs, and garbage.
//! The caller (config) turns an error into a warning and a documented safe choice.

use core::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitError {
    pub value: String,
    pub reason: &'static str,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid limit {:?}: {}", self.value, self.reason)
    }
}

impl std::error::Error for LimitError {}

fn err(value: &str, reason: &'static str) -> LimitError {
    LimitError { value: value.to_owned(), reason }
}

/// Parses the decimal digits (no sign, no leading zero unless the number is `0`).
fn parse_decimal(orig: &str, digits: &str) -> Result<u64, LimitError> {
    if digits.is_empty() {
        return Err(err(orig, "no number"));
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(
            orig,
            "expected a decimal integer with an optional k/m/g suffix (hex, fractions, signs and other units are not accepted)",
        ));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        // The incumbent would read this as octal; refuse rather than guess.
        return Err(err(orig, "leading zero (the C library would read it as octal)"));
    }
    digits.parse::<u64>().map_err(|_| err(orig, "number too large"))
}

/// Parses a memory limit in bytes. `Ok(0)` means "no limit" (empty or `0`, `0m`, ...).
pub fn parse_limit(s: &str) -> Result<u64, LimitError> {
    let t = s.trim_ascii();
    if t.is_empty() {
        return Ok(0);
    }
    let (digits, mult) = match t.as_bytes()[t.len() - 1] {
        b'k' | b'K' => (&t[..t.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&t[..t.len() - 1], 1u64 << 20),
        b'g' | b'G' => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    let n = parse_decimal(s, digits)?;
    n.checked_mul(mult).ok_or_else(|| err(s, "limit overflows 64 bits"))
}

/// Parses an SM limit: a plain integer percent. A unit suffix is rejected (the incumbent would
/// multiply: `50m` = 52 428 800 %). Returns the raw number; see [`normalize_sm`].
pub fn parse_sm_limit(s: &str) -> Result<u64, LimitError> {
    let t = s.trim_ascii();
    if t.is_empty() {
        return Ok(0);
    }
    if matches!(t.as_bytes()[t.len() - 1], b'k' | b'K' | b'm' | b'M' | b'g' | b'G') {
        return Err(err(s, "SM limit is a percent; unit suffixes are not accepted"));
    }
    parse_decimal(s, t)
}

/// Maps a raw SM value to the effective percent: 0 → 100 (unlimited); > 100 → 100 with
/// `clamped = true` so the caller can warn.
pub fn normalize_sm(raw: u64) -> (u64, bool) {
    match raw {
        0 => (100, false),
        1..=100 => (raw, false),
        _ => (100, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equivalent_forms() {
        for s in ["1g", "1G", "1024m", "1024M", "1048576k", "1048576K", "1073741824"] {
            assert_eq!(parse_limit(s), Ok(1 << 30), "{s}");
        }
        assert_eq!(parse_limit("3000m"), Ok(3000 << 20));
        assert_eq!(parse_limit(" 5k\n"), Ok(5 << 10));
    }

    #[test]
    fn zero_and_empty_are_unlimited() {
        for s in ["", "   ", "0", "0m", "0g", "0K"] {
            assert_eq!(parse_limit(s), Ok(0), "{s:?}");
        }
    }

    #[test]
    fn rejected_forms() {
        for s in [
            "0x10", "0X10", "010", "010m", "1.5g", "1000Mi", "1000MB", "15360MB", "abc", "m", "-1", "+1", "1 g", "1e9",
            "1_000", "g1", "1gg", "١٢", "12\u{0}",
        ] {
            assert!(parse_limit(s).is_err(), "{s:?} should be rejected");
        }
    }

    #[test]
    fn overflow() {
        assert_eq!(parse_limit("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_limit("18446744073709551616").is_err());
        assert!(parse_limit("17179869184g").is_err()); // 2^34 GiB = 2^64
        assert_eq!(parse_limit("17179869183g"), Ok(17179869183u64 << 30));
        let e = parse_limit("99999999999999999999999g").unwrap_err();
        assert!(e.to_string().contains("99999"));
    }

    #[test]
    fn sm_syntax() {
        assert_eq!(parse_sm_limit("30"), Ok(30));
        assert_eq!(parse_sm_limit(""), Ok(0));
        assert_eq!(parse_sm_limit("0"), Ok(0));
        assert_eq!(parse_sm_limit("250"), Ok(250));
        for s in ["50m", "50M", "1g", "5k", "0x32", "050", "30%", "12.5", "-5"] {
            assert!(parse_sm_limit(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn sm_normalize() {
        assert_eq!(normalize_sm(0), (100, false));
        assert_eq!(normalize_sm(1), (1, false));
        assert_eq!(normalize_sm(100), (100, false));
        assert_eq!(normalize_sm(101), (100, true));
        assert_eq!(normalize_sm(u64::MAX), (100, true));
    }
}
