//! `<tid>.dat` records: 16 bytes each, little-endian (`uftrace.h` `struct uftrace_record`).

/// Size of one record on disk.
pub const RECORD_SIZE: usize = 16;
/// RECORD_MAGIC of file version 4.
const MAGIC: u64 = 5;
const DEPTH_MASK: u64 = 0x3ff;

/// What a record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordType {
    Entry = 0,
    Exit = 1,
    Lost = 2,
    Event = 3,
}

/// One decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub time: u64,
    pub kind: RecordType,
    pub depth: u16,
    /// Function entry (48-bit), event id, or lost count.
    pub addr: u64,
}

/// Builds the second word with explicit shifts (never bitfields), as libmcount does.
#[inline(always)]
pub const fn encode_word(kind: RecordType, depth: u32, addr: u64) -> u64 {
    (kind as u64) | (MAGIC << 3) | ((depth as u64 & DEPTH_MASK) << 6) | (crate::addr48(addr) << 16)
}

/// Encodes one record into its 16 on-disk bytes.
#[inline(always)]
pub fn encode(time: u64, kind: RecordType, depth: u32, addr: u64) -> [u8; RECORD_SIZE] {
    let mut out = [0u8; RECORD_SIZE];
    out[..8].copy_from_slice(&time.to_le_bytes());
    out[8..].copy_from_slice(&encode_word(kind, depth, addr).to_le_bytes());
    out
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadMagic(pub u64);

/// Decodes one on-disk record.
pub fn decode(bytes: &[u8; RECORD_SIZE]) -> Result<Record, BadMagic> {
    let mut t = [0u8; 8];
    t.copy_from_slice(&bytes[..8]);
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[8..]);
    let word = u64::from_le_bytes(w);
    if (word >> 3) & 7 != MAGIC {
        return Err(BadMagic(word));
    }
    let kind = match word & 3 {
        0 => RecordType::Entry,
        1 => RecordType::Exit,
        2 => RecordType::Lost,
        _ => RecordType::Event,
    };
    Ok(Record {
        time: u64::from_le_bytes(t),
        kind,
        depth: ((word >> 6) & DEPTH_MASK) as u16,
        addr: word >> 16,
    })
}

/// Decodes a whole `.dat` file body; trailing bytes shorter than a record are ignored.
pub fn decode_all(data: &[u8]) -> Result<Vec<Record>, BadMagic> {
    data.chunks_exact(RECORD_SIZE)
        .map(|c| decode(c.try_into().expect("chunk of RECORD_SIZE")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_truncates_to_48_bits() {
        let bytes = encode(42, RecordType::Exit, 7, 0xffff_8000_8001_0000);
        let r = decode(&bytes).unwrap();
        assert_eq!(
            r,
            Record {
                time: 42,
                kind: RecordType::Exit,
                depth: 7,
                addr: 0x8000_8001_0000
            }
        );
    }

    #[test]
    fn magic_is_checked() {
        let mut bytes = encode(1, RecordType::Entry, 0, 0x1000);
        bytes[8] ^= 0x08;
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn word_layout_matches_libmcount() {
        // type=1, magic=5, depth=2, addr=0x400000
        assert_eq!(
            encode_word(RecordType::Exit, 2, 0x400000),
            1 | (5 << 3) | (2 << 6) | (0x400000 << 16)
        );
    }
}
