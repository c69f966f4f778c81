//! The `FILE[:OFFSET]` syntax of symbol-source arguments.

use std::path::PathBuf;

/// Splits `FILE[:OFFSET]` into the file and its load offset (0 when absent).
///
/// OFFSET is hexadecimal with a `0x` prefix or plain decimal. Only the last colon counts,
/// and only when what follows it looks like a number, so paths containing colons still work
/// (`a:b/vmlinux` is a file; `a:b/vmlinux:0x1000` is that file at offset 0x1000).
///
/// `None` when the suffix looks like an offset but is not a valid one (`vmlinux:0xzz`, an
/// overflow) or no file precedes it (`:0x10`): taking it for a file name would hide the typo.
pub fn parse_source_arg(arg: &str) -> Option<(PathBuf, u64)> {
    match arg.rsplit_once(':') {
        Some((file, offset)) if looks_like_number(offset) => {
            let offset = parse_number(offset)?;
            (!file.is_empty()).then(|| (PathBuf::from(file), offset))
        }
        _ => Some((PathBuf::from(arg), 0)),
    }
}

/// A `0x` prefix or all decimal digits: meant as an offset, valid or not.
fn looks_like_number(s: &str) -> bool {
    s.starts_with("0x")
        || s.starts_with("0X")
        || (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_number(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        assert_eq!(parse_source_arg("vmlinux"), Some(("vmlinux".into(), 0)));
        assert_eq!(
            parse_source_arg("fw.elf:0x40000000"),
            Some(("fw.elf".into(), 0x4000_0000))
        );
        assert_eq!(
            parse_source_arg("fw.elf:4096"),
            Some(("fw.elf".into(), 4096))
        );
        assert_eq!(parse_source_arg("a:b/c"), Some(("a:b/c".into(), 0)));
        assert_eq!(parse_source_arg("a:b/c:0x10"), Some(("a:b/c".into(), 0x10)));
        assert_eq!(parse_source_arg("x:"), Some(("x:".into(), 0)));
        assert_eq!(parse_source_arg("x:12ab"), Some(("x:12ab".into(), 0)));
        // Meant as offsets, but malformed or without a file.
        assert_eq!(parse_source_arg("x:0xzz"), None);
        assert_eq!(parse_source_arg("x:0X"), None);
        assert_eq!(parse_source_arg(":12"), None);
        assert_eq!(parse_source_arg("x:99999999999999999999999"), None);
    }
}
