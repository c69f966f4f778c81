//! The `FILE[:OFFSET]` syntax of symbol-source arguments.

use std::path::PathBuf;

/// Splits `FILE[:OFFSET]` into the file and its load offset (0 when absent).
///
/// OFFSET is hexadecimal with a `0x` prefix or plain decimal. Only the last colon counts,
/// and only when what follows it is a number, so paths containing colons still work
/// (`a:b/vmlinux` is a file; `a:b/vmlinux:0x1000` is that file at offset 0x1000).
pub fn parse_source_arg(arg: &str) -> (PathBuf, u64) {
    if let Some((file, offset)) = arg.rsplit_once(':') {
        if !file.is_empty() {
            if let Some(offset) = parse_number(offset) {
                return (PathBuf::from(file), offset);
            }
        }
    }
    (PathBuf::from(arg), 0)
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
        assert_eq!(parse_source_arg("vmlinux"), ("vmlinux".into(), 0));
        assert_eq!(
            parse_source_arg("fw.elf:0x40000000"),
            ("fw.elf".into(), 0x4000_0000)
        );
        assert_eq!(parse_source_arg("fw.elf:4096"), ("fw.elf".into(), 4096));
        assert_eq!(parse_source_arg("a:b/c"), ("a:b/c".into(), 0));
        assert_eq!(parse_source_arg("a:b/c:0x10"), ("a:b/c".into(), 0x10));
        assert_eq!(parse_source_arg("x:0xzz"), ("x:0xzz".into(), 0));
        assert_eq!(parse_source_arg("x:"), ("x:".into(), 0));
        assert_eq!(parse_source_arg(":12"), (":12".into(), 0));
        assert_eq!(
            parse_source_arg("x:99999999999999999999999"),
            ("x:99999999999999999999999".into(), 0)
        );
    }
}
