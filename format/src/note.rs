//! `note.txt`: free text that `uftrace info` prints under "extra note information".

use std::io::{self, Write};

/// Writes the note; every line ends in `\n` (the reader drops one character per line).
/// The reader prints the file as it is, so control characters (guest paths and names may
/// hold ESC or CR) are written as `\xNN`.
pub fn write_note(w: &mut impl Write, text: &str) -> io::Result<()> {
    for line in text.lines() {
        writeln!(w, "{}", crate::text::escape_controls(line))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown() {
        let mut out = Vec::new();
        write_note(&mut out, "a /x\x1b[31m\rz\nb").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a /x\\x1b[31m\\x0dz\nb\n");
    }
}
