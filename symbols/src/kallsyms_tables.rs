//! Finding and decoding the kallsyms tables inside a raw kernel image, the way
//! `vmlinux-to-elf` does, but without knowing any symbol's address up front.
//!
//! `scripts/kallsyms` emits, each label 8-aligned on 64-bit kernels:
//! - 6.1 (and older): `offsets` `relative_base` `num_syms` `names` `markers`
//!   [`seqs_of_names` in 6.1.y backports and 6.2+] `token_table` `token_index`;
//! - 6.4+: `num_syms` `names` `markers` `token_table` `token_index` `offsets`
//!   `relative_base` `seqs_of_names`;
//! - 7.0+ ("kallsyms: Get rid of kallsyms relative base"): the same without `relative_base`,
//!   each offset now relative to its own place (`&kallsyms_offsets[i] + offsets[i]`), and the
//!   labels only 4-aligned.
//!
//! The search anchors on the token table (single-character tokens `0`..`9` stay in
//! place because every digit occurs in some symbol), checks it against the token index that
//! follows, walks back to the markers, finds `num_syms` so that the compressed names land
//! exactly on the markers, then tries each place the addresses can be.

/// One decoded symbol: its address as the tables hold it, its `nm` type and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawSymbol {
    pub addr: u64,
    pub kind: u8,
    pub name: Vec<u8>,
    /// Its place in the tables ([`Tables::address`]): a symbol whose name decodes empty
    /// is left out, so it is not always its place in the list.
    pub index: usize,
}

/// Where the tables are, in file offsets of `data`.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    pub num_syms: usize,
    pub names_at: usize,
    pub token_table_at: usize,
    /// `token_index` decoded: where token `i` starts in the token table.
    token_index: Vec<usize>,
    /// `(offsets table, relative_base word)`, or the absolute `kallsyms_addresses` table.
    pub addresses: Addresses,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Addresses {
    /// `kallsyms_offsets` (u32 each) and the offset of the `kallsyms_relative_base` word.
    Relative {
        offsets_at: usize,
        relative_base_at: usize,
        /// CONFIG_KALLSYMS_ABSOLUTE_PERCPU (x86_64): a non-negative offset is an absolute
        /// address (per-CPU variables, from 0), a negative one `relative_base - 1 - offset`.
        absolute_percpu: bool,
    },
    /// `kallsyms_addresses` (u64 each), kernels without CONFIG_KALLSYMS_BASE_RELATIVE.
    Absolute { addresses_at: usize },
    /// 7.0+: `kallsyms_offsets` (i32 each) relative to their own place, so a symbol's
    /// address is its file offset in the image plus the image's link address.
    PlaceRelative { offsets_at: usize },
}

/// Tokens are merged character pairs, a few dozen bytes at most; the bound keeps the walk
/// over NUL-free data linear.
const MAX_TOKEN: usize = 256;
const DIGITS: &[u8] = b"0\x001\x002\x003\x004\x005\x006\x007\x008\x009\x00";
/// Far more than any kernel has (~200,000 with CONFIG_KALLSYMS_ALL), so a forged count
/// cannot make us allocate without bound; every count is also checked against the data.
const MAX_SYMS: usize = 4 << 20;

fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        data.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
pub(crate) fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        data.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
pub(crate) fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        data.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Finds the tables, trying every place the digit tokens occur.
pub(crate) fn find(data: &[u8]) -> Option<Tables> {
    let mut from = 0;
    while let Some(pos) = find_bytes(&data[from..], DIGITS) {
        let digits = from + pos;
        if let Some(t) = tables_at_digits(data, digits) {
            return Some(t);
        }
        from = digits + 1;
    }
    None
}

pub(crate) fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        match hay[i..hay.len() + 1 - needle.len()]
            .iter()
            .position(|&b| b == first)
        {
            None => return None,
            Some(p) => {
                i += p;
                if hay[i..].starts_with(needle) {
                    return Some(i);
                }
                i += 1;
            }
        }
    }
    None
}

fn tables_at_digits(data: &[u8], digits: usize) -> Option<Tables> {
    // Token '0' is token 0x30: walk back over the 48 tokens before it.
    let mut start = digits;
    for _ in 0..b'0' {
        let end = start.checked_sub(1)?; // the NUL ending the previous token
        let from = end.saturating_sub(MAX_TOKEN);
        let tok_start = data[from..end]
            .iter()
            .rposition(|&b| b == 0)
            .map(|p| from + p + 1)?;
        if tok_start == end {
            return None; // tokens are never empty
        }
        start = tok_start;
    }
    // Walk forward over all 256 tokens, recording where each starts.
    let mut index = Vec::with_capacity(256);
    let mut at = start;
    for _ in 0..256 {
        index.push(at - start);
        let len = data
            .get(at..)?
            .iter()
            .take(MAX_TOKEN)
            .position(|&b| b == 0)?;
        if len == 0 {
            return None;
        }
        at += len + 1;
    }
    // The token index follows, aligned; it must say exactly what we walked.
    let token_index_at = [2, 4, 8]
        .iter()
        .map(|&a| align_up(at, a))
        .find(|&p| (0..256).all(|i| u16_at(data, p + 2 * i).map(usize::from) == Some(index[i])))?;
    let token_table_at = start;

    // The markers end before the token table, possibly followed by seqs_of_names.
    let window_start = token_table_at.saturating_sub(32 << 20);
    let mut m = token_table_at & !3;
    while m >= window_start + 4 {
        m -= 4;
        if u32_at(data, m) != Some(0) {
            continue;
        }
        let markers = marker_run(data, m);
        if markers.len() < 2 {
            continue;
        }
        if let Some((num_syms_at, names_at, num_syms)) = names_before(data, m, &markers) {
            let addresses = addresses(data, num_syms_at, num_syms, token_index_at + 512)?;
            return Some(Tables {
                num_syms,
                names_at,
                token_table_at,
                token_index: index,
                addresses,
            });
        }
    }
    None
}

/// The increasing u32 values from `at` on, as markers: offsets of every 256th name, so
/// consecutive ones differ by at least 2 bytes a name and at most a few hundred.
fn marker_run(data: &[u8], at: usize) -> Vec<u32> {
    let mut out = vec![0u32];
    let mut p = at + 4;
    while let Some(v) = u32_at(data, p) {
        let prev = *out.last().unwrap_or(&0);
        let diff = v.wrapping_sub(prev);
        if v <= prev || !(2 * 256..=256 * 600).contains(&diff) || out.len() >= MAX_SYMS / 256 {
            break;
        }
        out.push(v);
        p += 4;
    }
    out
}

/// Finds where the names start: `num_syms` sits right before them (one aligned word), its
/// value agrees with the number of markers, and walking that many names from there hits
/// every marker and ends by `markers_at`. Returns (num_syms offset, names offset, count).
fn names_before(data: &[u8], markers_at: usize, markers: &[u32]) -> Option<(usize, usize, usize)> {
    // What follows the markers may continue the increasing run by a value or two.
    (markers.len().saturating_sub(2).max(2)..=markers.len())
        .rev()
        .find_map(|k| names_before_k(data, markers_at, &markers[..k]))
}

fn names_before_k(
    data: &[u8],
    markers_at: usize,
    markers: &[u32],
) -> Option<(usize, usize, usize)> {
    let k = markers.len();
    let last = *markers.last()? as usize;
    let hi = markers_at.checked_sub(last)?;
    // The last group has at most 256 names of at most 2 + 512 bytes each.
    let lo = hi.saturating_sub(256 * 514);
    let mut s = hi & !3;
    while s >= lo.max(8) {
        for word in [8, 4] {
            let Some(n) = u32_at(data, s - word).map(|n| n as usize) else {
                continue;
            };
            if n == 0 || n > MAX_SYMS || n.div_ceil(256) != k {
                continue;
            }
            if names_fit(data, s, n, markers, markers_at) {
                return Some((s - word, s, n));
            }
        }
        s -= 4;
    }
    None
}

fn names_fit(data: &[u8], names_at: usize, n: usize, markers: &[u32], end: usize) -> bool {
    let mut p = names_at;
    for i in 0..n {
        if i % 256 == 0 && markers.get(i / 256).map(|&m| names_at + m as usize) != Some(p) {
            return false;
        }
        match name_len(data, p) {
            Some((len, hdr)) if len > 0 && p + hdr + len <= end => p += hdr + len,
            _ => return false,
        }
    }
    // Only alignment padding may follow, up to the markers.
    data.get(p..end)
        .is_some_and(|rest| rest.len() < 16 && rest.iter().all(|&b| b == 0))
}

/// A compressed name's length and the size of its length prefix: one byte, or two when the
/// high bit is set (6.1+, for long Rust symbols).
fn name_len(data: &[u8], at: usize) -> Option<(usize, usize)> {
    let b0 = *data.get(at)?;
    if b0 & 0x80 == 0 {
        return Some((usize::from(b0), 1));
    }
    let b1 = *data.get(at + 1)?;
    Some((usize::from(b0 & 0x7f) | usize::from(b1) << 7, 2))
}

/// Where the addresses are: a relative table before `num_syms` (6.1) or after the token
/// index (6.4+), or an absolute table before `num_syms` (old kernels). A table must be
/// sorted, as scripts/kallsyms sorts symbols by address.
fn addresses(
    data: &[u8],
    num_syms_at: usize,
    n: usize,
    token_index_end: usize,
) -> Option<Addresses> {
    let offsets_len = align_up(n.checked_mul(4)?, 8);
    // 6.1: offsets, relative_base, num_syms.
    if let Some(relative_base_at) = num_syms_at.checked_sub(8) {
        if let Some(offsets_at) = relative_base_at.checked_sub(offsets_len) {
            if let Some(absolute_percpu) = sorted_offsets(data, offsets_at, n) {
                return Some(Addresses::Relative {
                    offsets_at,
                    relative_base_at,
                    absolute_percpu,
                });
            }
        }
    }
    // 6.4+: token_index, offsets, relative_base.
    let offsets_at = align_up(token_index_end, 8);
    if let Some(absolute_percpu) = sorted_offsets(data, offsets_at, n) {
        return Some(Addresses::Relative {
            offsets_at,
            relative_base_at: offsets_at + offsets_len,
            absolute_percpu,
        });
    }
    // 7.0+: token_index, place-relative offsets. Tried after 6.4's: a sorted table is
    // sorted read either way, while place-relative values are not (aliases share an
    // address, so their offsets fall by 4).
    for offsets_at in [token_index_end, align_up(token_index_end, 8)] {
        if sorted_place_relative(data, offsets_at, n) {
            return Some(Addresses::PlaceRelative { offsets_at });
        }
    }
    let addresses_at = num_syms_at.checked_sub(n.checked_mul(8)?)?;
    if sorted_u64(data, addresses_at, n) {
        return Some(Addresses::Absolute { addresses_at });
    }
    None
}

/// Whether `n` offsets at `at` are sorted by the addresses they stand for: as plain u32
/// (`Some(false)`) or with absolute per-CPU addresses (`Some(true)`: non-negative values
/// rising from 0, then negative ones falling, as `relative_base - 1 - offset` rises).
fn sorted_offsets(data: &[u8], at: usize, n: usize) -> Option<bool> {
    if sorted_u32(data, at, n) {
        return Some(false);
    }
    let bytes = at.checked_add(n * 4).and_then(|end| data.get(at..end))?;
    let vals: Vec<i32> = bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let split = vals.iter().position(|&v| v < 0)?;
    let (absolute, relative) = vals.split_at(split);
    let rising = absolute.windows(2).all(|w| w[0] <= w[1]);
    let falling = relative.windows(2).all(|w| w[0] >= w[1]);
    (rising && falling && relative.len() > absolute.len()).then_some(true)
}

/// Whether `n` place-relative offsets at `at` stand for sorted addresses within the data
/// (symbols past its end are bss, but never before its start).
fn sorted_place_relative(data: &[u8], at: usize, n: usize) -> bool {
    let Some(bytes) = at.checked_add(n * 4).and_then(|end| data.get(at..end)) else {
        return false;
    };
    let mut prev = 0i64;
    for (i, c) in bytes.chunks_exact(4).enumerate() {
        let off = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let addr = (at + 4 * i) as i64 + i64::from(off);
        if addr < prev {
            return false;
        }
        prev = addr;
    }
    n > 0
}

fn sorted_u32(data: &[u8], at: usize, n: usize) -> bool {
    let Some(bytes) = at.checked_add(n * 4).and_then(|end| data.get(at..end)) else {
        return false;
    };
    let vals = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let mut prev = 0u32;
    let mut nonzero = false;
    for v in vals {
        if v < prev {
            return false;
        }
        nonzero |= v != 0;
        prev = v;
    }
    nonzero
}

fn sorted_u64(data: &[u8], at: usize, n: usize) -> bool {
    let Some(bytes) = at.checked_add(n * 8).and_then(|end| data.get(at..end)) else {
        return false;
    };
    let mut prev = 0u64;
    for c in bytes.chunks_exact(8) {
        let v = u64::from_le_bytes(c.try_into().unwrap_or_default());
        if v < prev || v == 0 {
            return false;
        }
        prev = v;
    }
    true
}

impl Tables {
    /// Decodes every symbol; `relative_base` replaces the stored base word (which arm64
    /// images leave 0 for the boot-time relocation to fill in).
    pub(crate) fn symbols(&self, data: &[u8], relative_base: u64) -> Vec<RawSymbol> {
        let mut out = Vec::with_capacity(self.num_syms);
        let mut p = self.names_at;
        for i in 0..self.num_syms {
            let Some((len, hdr)) = name_len(data, p) else {
                break;
            };
            let Some(compressed) = data.get(p + hdr..p + hdr + len) else {
                break;
            };
            p += hdr + len;
            let mut name = Vec::with_capacity(len * 2);
            for &t in compressed {
                let start = self.token_table_at + self.token_index[usize::from(t)];
                let tok = data.get(start..).unwrap_or_default();
                let end = tok.iter().position(|&b| b == 0).unwrap_or(0);
                name.extend_from_slice(&tok[..end]);
            }
            let Some((&kind, rest)) = name.split_first() else {
                continue;
            };
            let addr = self.address(data, i, relative_base);
            out.push(RawSymbol {
                addr,
                kind,
                name: rest.to_vec(),
                index: i,
            });
        }
        out
    }

    /// The address of symbol `i` with `relative_base` (0 when the tables hold
    /// absolute addresses; with 0, relative entries are their offsets).
    pub(crate) fn address(&self, data: &[u8], i: usize, relative_base: u64) -> u64 {
        match self.addresses {
            Addresses::Relative {
                offsets_at,
                absolute_percpu,
                ..
            } => {
                let offset = u32_at(data, offsets_at + 4 * i).unwrap_or(0);
                match (absolute_percpu, offset as i32) {
                    (true, v) if v >= 0 => u64::from(offset),
                    (true, _) => relative_base.wrapping_add(u64::from(!offset)),
                    (false, _) => relative_base.wrapping_add(u64::from(offset)),
                }
            }
            Addresses::Absolute { addresses_at } => u64_at(data, addresses_at + 8 * i).unwrap_or(0),
            Addresses::PlaceRelative { offsets_at } => {
                let place = (offsets_at + 4 * i) as u64;
                let offset = u32_at(data, offsets_at + 4 * i).unwrap_or(0) as i32;
                relative_base.wrapping_add(place.wrapping_add_signed(i64::from(offset)))
            }
        }
    }

    /// The relative base as stored in the image (0 when left for boot-time relocation).
    pub(crate) fn stored_relative_base(&self, data: &[u8]) -> Option<(usize, u64)> {
        match self.addresses {
            Addresses::Relative {
                relative_base_at, ..
            } => Some((relative_base_at, u64_at(data, relative_base_at)?)),
            Addresses::Absolute { .. } | Addresses::PlaceRelative { .. } => None,
        }
    }

    /// Where the place-relative offsets table is (7.0+): decoded with base 0, addresses
    /// are then file offsets, and the base to add is the link address of the image's start.
    pub(crate) fn place_relative_at(&self) -> Option<usize> {
        match self.addresses {
            Addresses::PlaceRelative { offsets_at } => Some(offsets_at),
            _ => None,
        }
    }

    /// The raw offset of symbol `i` in the offsets table.
    pub(crate) fn offset_of(&self, data: &[u8], i: usize) -> Option<u32> {
        match self.addresses {
            Addresses::Relative { offsets_at, .. } => u32_at(data, offsets_at + 4 * i),
            Addresses::Absolute { .. } | Addresses::PlaceRelative { .. } => None,
        }
    }
}

/// The layouts `scripts/kallsyms` has had (see the module comment).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    V6_1,
    V6_4,
    V7_0,
}

/// Builds kallsyms tables the way scripts/kallsyms lays them out, with one token per
/// character (real kernels merge frequent pairs; the decoder does not care). Each symbol's
/// `u32` is its offset from the relative base, or for [`Layout::V7_0`] its offset in the
/// returned data (its address is the image's link address plus that).
#[cfg(test)]
pub(crate) fn synthetic(symbols: &[(u32, u8, &str)], layout: Layout, stored_base: u64) -> Vec<u8> {
    // 7.0's labels are only 4-aligned: the tables start 4 bytes off 8 to show it.
    let align = if layout == Layout::V7_0 { 4 } else { 8 };
    let pad = |v: &mut Vec<u8>| {
        while !v.len().is_multiple_of(align) {
            v.push(0);
        }
    };
    let mut tokens: Vec<Vec<u8>> = (0..=255u8)
        .map(|i| {
            if i.is_ascii_graphic() {
                vec![i]
            } else {
                vec![b'q', b'A' + i % 26, b'a' + i / 26]
            }
        })
        .collect();
    tokens[0] = b"zz".to_vec();
    let mut names = Vec::new();
    let mut markers = Vec::new();
    for (i, &(_, kind, name)) in symbols.iter().enumerate() {
        if i % 256 == 0 {
            markers.extend_from_slice(&(names.len() as u32).to_le_bytes());
        }
        names.push(name.len() as u8 + 1);
        names.push(kind);
        names.extend_from_slice(name.as_bytes());
    }
    let mut out = vec![0xeeu8; if layout == Layout::V7_0 { 68 } else { 64 }];
    let put_offsets = |out: &mut Vec<u8>| {
        pad(out);
        for &(off, _, _) in symbols {
            out.extend_from_slice(&off.to_le_bytes());
        }
        pad(out);
        out.extend_from_slice(&stored_base.to_le_bytes());
    };
    if layout == Layout::V6_1 {
        put_offsets(&mut out);
    }
    pad(&mut out);
    out.extend_from_slice(&(symbols.len() as u32).to_le_bytes());
    pad(&mut out);
    out.extend_from_slice(&names);
    pad(&mut out);
    out.extend_from_slice(&markers);
    pad(&mut out);
    let mut index = Vec::new();
    let table_at = out.len();
    for t in &tokens {
        index.extend_from_slice(&((out.len() - table_at) as u16).to_le_bytes());
        out.extend_from_slice(t);
        out.push(0);
    }
    pad(&mut out);
    out.extend_from_slice(&index);
    match layout {
        Layout::V6_1 => {}
        Layout::V6_4 => put_offsets(&mut out),
        Layout::V7_0 => {
            pad(&mut out);
            for &(off, _, _) in symbols {
                let place = out.len() as i64;
                let rel = i32::try_from(i64::from(off) - place).expect("offset in range");
                out.extend_from_slice(&rel.to_le_bytes());
            }
            // seqs_of_names follows: 3 bytes a symbol.
            out.extend(std::iter::repeat_n(0x5a, 3 * symbols.len()));
        }
    }
    out.extend_from_slice(&[0xee; 64]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(u32, u8, String)> {
        (0..700u32)
            .map(|i| {
                (
                    i * 16,
                    if i % 3 == 0 { b'T' } else { b't' },
                    format!("func_{i}_x"),
                )
            })
            .collect()
    }

    #[test]
    fn base_relative_layouts() {
        let syms = sample();
        let refs: Vec<(u32, u8, &str)> =
            syms.iter().map(|(a, k, n)| (*a, *k, n.as_str())).collect();
        for layout in [Layout::V6_1, Layout::V6_4] {
            let data = synthetic(&refs, layout, 0xffff_8000_0801_0000);
            let t = find(&data).expect("tables");
            assert_eq!(t.num_syms, 700);
            let (_, base) = t.stored_relative_base(&data).unwrap();
            assert_eq!(base, 0xffff_8000_0801_0000);
            let got = t.symbols(&data, base);
            assert_eq!(got.len(), 700);
            for (g, (off, kind, name)) in got.iter().zip(&syms) {
                assert_eq!(g.addr, base + u64::from(*off));
                assert_eq!(g.kind, *kind);
                assert_eq!(g.name, name.as_bytes());
            }
        }
    }

    /// 7.0+: offsets relative to their own place give file offsets; aliases (two names at
    /// one address) make the raw values fall, which the 6.4 reading must not accept.
    #[test]
    fn place_relative_layout() {
        let mut syms = sample();
        syms[10].0 = syms[9].0;
        syms[400].0 = syms[399].0;
        let refs: Vec<(u32, u8, &str)> =
            syms.iter().map(|(a, k, n)| (*a, *k, n.as_str())).collect();
        let data = synthetic(&refs, Layout::V7_0, 0);
        let t = find(&data).expect("tables");
        assert_eq!(t.num_syms, 700);
        assert!(t.place_relative_at().is_some());
        assert!(t.stored_relative_base(&data).is_none());
        let base = 0xffff_ffff_8000_0000;
        let got = t.symbols(&data, base);
        assert_eq!(got.len(), 700);
        for (g, (off, kind, name)) in got.iter().zip(&syms) {
            assert_eq!(g.addr, base + u64::from(*off), "{name}");
            assert_eq!(g.kind, *kind);
            assert_eq!(g.name, name.as_bytes());
        }
    }

    #[test]
    fn no_tables() {
        assert!(find(b"").is_none());
        assert!(find(DIGITS).is_none());
        let mut junk = vec![1u8; 100_000];
        junk[50_000..50_000 + DIGITS.len()].copy_from_slice(DIGITS);
        assert!(find(&junk).is_none());
    }
}
