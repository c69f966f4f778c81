//! `System.map` files and `/proc/kallsyms` dumps: `nm`-style text, `addr type name`, with a
//! trailing `[module]` column for module symbols in kallsyms.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::functions::{collapse, is_mapping_symbol, Candidate};
use crate::{Image, LoadOptions, SymbolError};

/// Kernel symbols carry no size; a page past the last one stands in for its end.
const PAGE: u64 = 4096;

const NO_TEXT_HINT: &str = "no text (T/t/W/w) symbols; Debian's /boot/System.map is a \
    placeholder, the real one is in the linux-image-<version>-dbg package";

/// Text symbols: `T`/`t` (code), `W`/`w` (weak; in System.map and kallsyms these are code).
pub(crate) fn is_text_type(t: u8) -> bool {
    matches!(t, b'T' | b't' | b'W' | b'w')
}

/// A text symbol of `nm` type `kind` as a candidate function; `None` for other types and
/// mapping symbols. Shared by System.map/kallsyms text and kallsyms tables in raw images.
pub(crate) fn text_candidate(addr: u64, kind: u8, name: &[u8]) -> Option<Candidate<'_>> {
    (is_text_type(kind) && !is_mapping_symbol(name)).then_some(Candidate {
        addr,
        size: 0,
        name,
        global: kind.is_ascii_uppercase(),
        typed: true,
    })
}

/// Whether a symbol marks the end of the kernel's main text.
pub(crate) fn is_etext(name: &[u8]) -> bool {
    name == b"_etext" || name == b"__etext"
}

pub(crate) fn load(path: &Path, data: &[u8], opts: &LoadOptions) -> Result<Image, SymbolError> {
    let mut kernel = Vec::new();
    let mut modules: BTreeMap<&[u8], Vec<Candidate<'_>>> = BTreeMap::new();
    let mut etext = None;
    let mut any_nonzero = false;
    for line in data.split(|&b| b == b'\n') {
        let mut fields = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty());
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Some(addr) = parse_hex(addr) else {
            continue;
        };
        let [kind] = kind else { continue };
        if is_etext(name) {
            etext = Some(addr);
        }
        let Some(sym) = text_candidate(addr, *kind, name) else {
            continue;
        };
        any_nonzero |= addr != 0;
        match fields
            .next()
            .and_then(|m| m.strip_prefix(b"["))
            .and_then(|m| m.strip_suffix(b"]"))
        {
            Some(module) => modules.entry(module).or_default().push(sym),
            None => kernel.push(sym),
        }
    }
    if kernel.is_empty() && modules.is_empty() {
        return Err(SymbolError::Stripped {
            path: path.to_path_buf(),
            hint: NO_TEXT_HINT.into(),
        });
    }
    if !any_nonzero {
        return Err(SymbolError::Corrupt {
            path: path.to_path_buf(),
            reason: "every address is 0: dump /proc/kallsyms as root, or with \
                     sysctl kernel.kptr_restrict=0"
                .into(),
        });
    }
    let mut image = image_from_symbols(path.to_path_buf(), kernel, etext, opts);
    image.modules = modules
        .into_iter()
        .map(|(name, syms)| {
            let path = PathBuf::from(String::from_utf8_lossy(name).into_owned());
            image_from_symbols(path, syms, None, opts)
        })
        .collect();
    Ok(image)
}

/// An image from symbols without sizes: it starts at the lowest symbol and ends at
/// `etext` when that lies past every symbol, else a page past the highest one (arm64 puts
/// init text after `_etext`).
pub(crate) fn image_from_symbols(
    path: PathBuf,
    syms: Vec<Candidate<'_>>,
    etext: Option<u64>,
    opts: &LoadOptions,
) -> Image {
    let mut functions = collapse(syms, opts.demangle);
    let start = functions.first().map_or(0, |f| f.addr);
    let last = functions.last().map_or(0, |f| f.addr);
    let end = match etext {
        Some(e) if e >= last => e,
        _ => last.saturating_add(PAGE),
    };
    for f in &mut functions {
        f.addr = f.addr.wrapping_add(opts.offset);
    }
    Image {
        path,
        start: start.wrapping_add(opts.offset),
        end: end.wrapping_add(opts.offset),
        functions,
        arch: None,
        modules: Vec::new(),
        by_address: Vec::new(),
    }
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        Some(acc << 4 | u64::from((b as char).to_digit(16)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex() {
        assert_eq!(parse_hex(b"ffff800008000000"), Some(0xffff_8000_0800_0000));
        assert_eq!(parse_hex(b"0"), Some(0));
        assert_eq!(parse_hex(b"x"), None);
        assert_eq!(parse_hex(b"11111111111111111"), None);
    }
}
