//! `note.txt`: free text that `uftrace info` prints under "extra note information".

use std::io::{self, Write};

/// Writes the note; every line ends in `\n` (the reader drops one character per line).
pub fn write_note(w: &mut impl Write, text: &str) -> io::Result<()> {
    for line in text.lines() {
        writeln!(w, "{line}")?;
    }
    Ok(())
}
