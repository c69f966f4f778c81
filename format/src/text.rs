//! Text the guest chooses (paths, task names, symbol names) as it may appear in the files
//! uftrace reads and on a terminal: no control character (an ESC or CR would drive the
//! reader's terminal), and within the line buffers uftrace reads each file with.

use std::borrow::Cow;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// The longest line, newline included, that uftrace's `fgets(buf, PATH_MAX)` readers (the
/// session map, the `info` text) take whole: `PATH_MAX` is 4096 with the NUL. A longer line
/// is read as two, and the second half of a map line is `sscanf`ed into `char prot[5]`.
pub const MAX_LINE: usize = 4095;

/// The mark put where text was cut out.
pub const CUT_MARK: &str = "\u{2026}";

/// Whether `c` is a control character: C0, DEL or C1.
fn is_control(c: char) -> bool {
    c.is_control()
}

fn push_escaped(out: &mut String, c: char) {
    if (c as u32) < 0x100 {
        let _ = write!(out, "\\x{:02x}", c as u32);
    } else {
        let _ = write!(out, "\\u{{{:x}}}", c as u32);
    }
}

/// `s` with its control characters written as `\xNN` (a tab too), for text that is only
/// shown: notes, warnings, `.sym` names.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_control(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A name the guest chose, in UTF-8 that still tells every two names apart: bytes that are
/// not UTF-8 and control characters become `\xNN` and a backslash `\\`, so that no two
/// byte strings give one name (a lossy conversion would make `a\xff` and `a\xfe` both
/// `a\u{fffd}`). White space stays (a path under `--sysroot` may have a space).
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        escape_into(&mut out, chunk.valid(), false);
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A name as one word (a map path): as [`escape_bytes`], and white space as `\xNN` (or
/// `\u{…}`) too.
pub fn escape_word(s: &str) -> Cow<'_, str> {
    if !s
        .chars()
        .any(|c| c == '\\' || is_control(c) || c.is_whitespace())
    {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    escape_into(&mut out, s, true);
    Cow::Owned(out)
}

fn escape_into(out: &mut String, s: &str, blanks: bool) {
    for c in s.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if is_control(c) || (blanks && c.is_whitespace()) {
            push_escaped(out, c);
        } else {
            out.push(c);
        }
    }
}

/// Whether `s` is a word [`escape_word`] leaves alone, apart from its backslashes (which
/// a word read back from a file holds as escapes already written).
pub fn is_word(s: &str) -> bool {
    !s.chars().any(|c| is_control(c) || c.is_whitespace())
}

/// 16 hex digits that tell `s` from any other text: what a cut name keeps of the part it
/// lost, so that two names cut to one tail stay two.
pub fn digest(s: &str) -> String {
    let hash = Sha256::digest(s.as_bytes());
    hash[..8]
        .iter()
        .fold(String::with_capacity(16), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// The largest index at most `at` that is a character boundary of `s`.
pub fn floor_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest index at least `at` that is a character boundary of `s`.
pub fn ceil_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// `s` cut to at most `max` bytes by keeping its end (a name's tail tells it apart best):
/// the cut part becomes the mark and [`digest`] of the whole. `None` if it fits.
pub fn keep_tail(s: &str, max: usize) -> Option<String> {
    if s.len() <= max {
        return None;
    }
    let head = format!("{CUT_MARK}{}{CUT_MARK}", digest(s));
    let room = max.saturating_sub(head.len());
    let from = ceil_boundary(s, s.len() - room.min(s.len()));
    Some(format!("{head}{}", &s[from..]))
}

/// `s` cut to at most `max` bytes at a character boundary, with the mark at the end when
/// anything was cut.
pub fn keep_head(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let end = floor_boundary(s, max.saturating_sub(CUT_MARK.len()));
    Cow::Owned(format!("{}{CUT_MARK}", &s[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_sent() {
        assert_eq!(escape_controls("plain / text"), "plain / text");
        assert_eq!(
            escape_controls("a\x1b[2Jb\rc\u{85}d\te"),
            "a\\x1b[2Jb\\x0dc\\x85d\\x09e"
        );
    }

    #[test]
    fn words_stay_distinct() {
        // Two names a lossy conversion would make one.
        let a = escape_bytes(b"lib\xff.so");
        let b = escape_bytes(b"lib\xfe.so");
        assert_eq!(a, "lib\\xff.so");
        assert_ne!(a, b);
        // A name spelling an escape is not the byte it spells.
        assert_ne!(escape_bytes(b"x\\xff"), escape_bytes(b"x\xff"));
        assert_eq!(escape_bytes(b"x\\xff"), "x\\\\xff");
        assert_eq!(escape_word("my lib\x1b\u{a0}"), "my\\x20lib\\x1b\\xa0");
        assert_eq!(escape_bytes("über".as_bytes()), "über");
        assert_eq!(escape_bytes(b"my lib\t\n"), "my lib\\x09\\x0a");
        assert!(is_word(&escape_word(&escape_bytes(
            b"a b\tc\nd\re\x1bf\xff"
        ))));
    }

    #[test]
    fn a_cut_keeps_the_tail_and_tells_names_apart() {
        let long_a = format!("{}/tail.so", "a".repeat(300));
        let long_b = format!("{}/tail.so", "b".repeat(300));
        let a = keep_tail(&long_a, 100).unwrap();
        let b = keep_tail(&long_b, 100).unwrap();
        assert!(a.len() <= 100 && b.len() <= 100);
        assert!(a.starts_with(CUT_MARK) && a.ends_with("/tail.so"));
        assert_ne!(a, b);
        assert_eq!(keep_tail("short", 100), None);
        // Never inside a character.
        let wide = "é".repeat(100);
        assert!(keep_tail(&wide, 51).unwrap().len() <= 51);
        assert_eq!(keep_head(&wide, 11), "éééé\u{2026}");
    }
}
