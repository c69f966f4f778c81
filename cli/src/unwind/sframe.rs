//! SFrame (`.sframe`, `as --gsframe`): the compact unwind format binutils emits from the
//! same CFI directives as `.eh_frame`, which Linux's deferred user-space unwinding reads.
//! No maintained Rust reader exists; this one reads versions 1 (binutils 2.40–2.44) and 2
//! (2.41 on), as `objdump --sframe` shows them (the tests compare with it).
//!
//! Layout (little-endian here): a 28-byte header (magic 0xdee2, version, flags, ABI, the
//! fixed FP and RA offsets from the CFA, the auxiliary header's length, the counts, the
//! FRE sub-section's length, the FDE and FRE sub-sections' offsets after the header), then
//! function descriptors (17 bytes in v1, 20 in v2), then frame row entries (a start offset
//! of 1, 2 or 4 bytes, an info byte, 1 to 3 signed offsets of 1, 2 or 4 bytes).

/// Why a section is not SFrame this reader can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SFrameError {
    Magic,
    Version(u8),
    Abi(u8),
    Truncated(&'static str),
    /// A row's address lies past the end of the address space.
    OutOfRange,
}

impl std::fmt::Display for SFrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SFrameError::Magic => write!(f, "not an SFrame section (bad magic)"),
            SFrameError::Version(v) => write!(f, "SFrame version {v} is not read (1 and 2 are)"),
            SFrameError::Abi(a) => write!(
                f,
                "SFrame ABI {a} is not read (little-endian AArch64 and x86-64 are)"
            ),
            SFrameError::Truncated(what) => write!(f, "SFrame section truncated in its {what}"),
            SFrameError::OutOfRange => {
                write!(f, "SFrame row lies past the end of the address space")
            }
        }
    }
}

impl std::error::Error for SFrameError {}

const MAGIC: u16 = 0xdee2;
const HEADER: usize = 28;
/// Function start addresses are relative to the field itself, not to the section (v2).
const F_FDE_FUNC_START_PCREL: u8 = 0x4;

/// The ABI (architecture and byte order) a section describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    Aarch64,
    Amd64,
}

/// One function descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fde {
    pub start: u64,
    pub size: u32,
    fre_off: u32,
    pub num_fres: u32,
    info: u8,
    /// PCMASK descriptors: the size of the repeated block (v2).
    rep_size: u8,
}

impl Fde {
    fn fre_type(&self) -> u8 {
        self.info & 0xf
    }

    /// Rows match `pc % rep_size` (PLT stubs) rather than offsets from the start.
    fn pc_mask(&self) -> bool {
        self.info & 0x10 != 0
    }
}

/// One frame row: from `start` on, the CFA is the stack or frame pointer plus `cfa`, and
/// the return address and caller's frame pointer are saved at CFA + their offsets (`None`:
/// not saved; the return address then is where the ABI keeps it on entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fre {
    pub start: u64,
    pub cfa_base_fp: bool,
    pub cfa: i32,
    pub ra: Option<i32>,
    pub fp: Option<i32>,
    /// The saved return address is signed (AArch64 pointer authentication).
    pub mangled_ra: bool,
}

/// A parsed `.sframe` section.
pub struct SFrame<'a> {
    pub abi: Abi,
    pub version: u8,
    /// The return address's fixed offset from the CFA (x86-64: -8), when fixed.
    fixed_ra: Option<i32>,
    pub fdes: Vec<Fde>,
    fres: &'a [u8],
}

fn u32_at(b: &[u8], at: usize, what: &'static str) -> Result<u32, SFrameError> {
    let w = at
        .checked_add(4)
        .and_then(|end| b.get(at..end))
        .ok_or(SFrameError::Truncated(what))?;
    Ok(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

impl<'a> SFrame<'a> {
    /// Reads `data`, the section's bytes, loaded at `addr`.
    pub fn parse(data: &'a [u8], addr: u64) -> Result<SFrame<'a>, SFrameError> {
        let h = data.get(..HEADER).ok_or(SFrameError::Truncated("header"))?;
        if u16::from_le_bytes([h[0], h[1]]) != MAGIC {
            return Err(SFrameError::Magic);
        }
        let version = h[2];
        if !(1..=2).contains(&version) {
            return Err(SFrameError::Version(version));
        }
        let flags = h[3];
        let abi = match h[4] {
            2 => Abi::Aarch64,
            3 => Abi::Amd64,
            other => return Err(SFrameError::Abi(other)),
        };
        let fixed_ra = (h[6] as i8 != 0).then_some(h[6] as i8 as i32);
        let aux = h[7] as usize;
        let num_fdes = u32_at(h, 8, "header")? as usize;
        let fre_len = u32_at(h, 16, "header")? as usize;
        let fde_off = u32_at(h, 20, "header")? as usize;
        let fre_off = u32_at(h, 24, "header")? as usize;
        let body = HEADER + aux;
        let fde_size = if version == 1 { 17 } else { 20 };
        let mut fdes = Vec::with_capacity(num_fdes.min(data.len() / fde_size));
        for i in 0..num_fdes {
            let e = i
                .checked_mul(fde_size)
                .and_then(|o| o.checked_add(body)?.checked_add(fde_off))
                .and_then(|at| Some((at, data.get(at..at.checked_add(fde_size)?)?)));
            let (at, e) = e.ok_or(SFrameError::Truncated("function descriptors"))?;
            let rel = i32::from_le_bytes([e[0], e[1], e[2], e[3]]) as i64;
            let base = if flags & F_FDE_FUNC_START_PCREL != 0 {
                addr.wrapping_add(at as u64)
            } else {
                addr
            };
            fdes.push(Fde {
                start: base.wrapping_add_signed(rel),
                size: u32_at(e, 4, "function descriptors")?,
                fre_off: u32_at(e, 8, "function descriptors")?,
                num_fres: u32_at(e, 12, "function descriptors")?,
                info: e[16],
                rep_size: if version == 1 { 0 } else { e[17] },
            });
        }
        let fres = body
            .checked_add(fre_off)
            .and_then(|start| data.get(start..start.checked_add(fre_len)?))
            .ok_or(SFrameError::Truncated("frame row entries"))?;
        Ok(SFrame {
            abi,
            version,
            fixed_ra,
            fdes,
            fres,
        })
    }

    /// The return address's offset from the CFA where the ABI fixes it.
    pub fn fixed_ra(&self) -> Option<i32> {
        self.fixed_ra
    }

    /// The rows of `fde`, in order.
    pub fn rows(&self, fde: &Fde) -> Result<Vec<Fre>, SFrameError> {
        let t = "frame row entries";
        let mut at = fde.fre_off as usize;
        let addr_size = match fde.fre_type() {
            0 => 1,
            1 => 2,
            _ => 4,
        };
        // A row takes at least two bytes: `num_fres` is the file's word, not a size.
        let mut rows = Vec::with_capacity((fde.num_fres as usize).min(self.fres.len() / 2));
        for _ in 0..fde.num_fres {
            let start = self.uint(at, addr_size, t)?;
            let info = at
                .checked_add(addr_size)
                .and_then(|i| self.fres.get(i))
                .copied()
                .ok_or(SFrameError::Truncated(t))?;
            at += addr_size + 1;
            let count = ((info >> 1) & 0xf) as usize;
            let size = match (info >> 5) & 3 {
                0 => 1,
                1 => 2,
                _ => 4,
            };
            let mut offsets = [None; 3];
            for slot in offsets.iter_mut().take(count) {
                *slot = Some(self.int(at, size, t)?);
                at += size;
            }
            at += count.saturating_sub(3) * size;
            // AArch64 lists CFA, RA, FP; x86-64 CFA, FP (its RA is at a fixed offset).
            let (ra, fp) = match self.abi {
                Abi::Aarch64 => (offsets[1], offsets[2]),
                Abi::Amd64 => (None, offsets[1]),
            };
            rows.push(Fre {
                start: if fde.pc_mask() {
                    start
                } else {
                    fde.start
                        .checked_add(start)
                        .ok_or(SFrameError::OutOfRange)?
                },
                cfa_base_fp: info & 1 == 0,
                cfa: offsets[0].ok_or(SFrameError::Truncated(t))?,
                ra,
                fp,
                mangled_ra: info & 0x80 != 0,
            });
        }
        Ok(rows)
    }

    fn uint(&self, at: usize, size: usize, what: &'static str) -> Result<u64, SFrameError> {
        let b = at
            .checked_add(size)
            .and_then(|end| self.fres.get(at..end))
            .ok_or(SFrameError::Truncated(what))?;
        let mut w = [0u8; 8];
        w[..size].copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }

    fn int(&self, at: usize, size: usize, what: &'static str) -> Result<i32, SFrameError> {
        let v = self.uint(at, size, what)?;
        Ok(match size {
            1 => v as u8 as i8 as i32,
            2 => v as u16 as i16 as i32,
            _ => v as u32 as i32,
        })
    }

    /// The row in effect at `pc`, if a descriptor covers it.
    pub fn row_at(&self, pc: u64) -> Option<Fre> {
        let fde = self.fdes.iter().find(|f| {
            pc.checked_sub(f.start)
                .is_some_and(|o| o < u64::from(f.size))
        })?;
        let rows = self.rows(fde).ok()?;
        let key = if fde.pc_mask() && fde.rep_size > 0 {
            (pc - fde.start) % fde.rep_size as u64
        } else {
            pc
        };
        rows.into_iter().rev().find(|r| r.start <= key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection};
    use std::process::Command;

    /// Builds `src` with `gcc` and `as --gsframe`, and gives the program's bytes.
    fn build(gcc: &str, extra: &[&str], dir: &std::path::Path) -> Vec<u8> {
        let src = dir.join("sf.c");
        std::fs::write(
            &src,
            "int f(int x) { return x + 1; }\n\
             int g(int x) { return f(x) * 2 + 1; }\n\
             int h(int x) { int a[8]; for (int i = 0; i < 8; i++) a[i] = g(x + i); return a[x & 7]; }\n\
             int main(void) { return h(3); }\n",
        )
        .unwrap();
        let out = dir.join(format!("sf-{gcc}"));
        let status = Command::new(gcc)
            .args([
                "-O1",
                "-fno-inline",
                "-fno-omit-frame-pointer",
                "-Wa,--gsframe",
            ])
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("{gcc}: {e} (run scripts/install-deps.sh)"));
        assert!(status.success(), "{gcc} failed");
        std::fs::read(&out).unwrap()
    }

    /// `objdump --sframe`'s function lines and rows, as this reader would print them.
    fn objdump(objdump: &str, path: &std::path::Path) -> Vec<String> {
        let out = Command::new(objdump)
            .arg("--sframe")
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("func idx") || l.starts_with("00"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    fn ours(bytes: &[u8]) -> (SFrame<'_>, Vec<String>) {
        let file = object::File::parse(bytes).unwrap();
        let section = file.section_by_name(".sframe").expect(".sframe");
        let sf = SFrame::parse(section.data().unwrap(), section.address()).unwrap();
        let offset = |o: Option<i32>| o.map_or("u".to_string(), |o| format!("c{o:+}"));
        let mut lines = Vec::new();
        for (i, fde) in sf.fdes.iter().enumerate() {
            lines.push(format!(
                "func idx [{i}]: pc = {:#x}, size = {} bytes",
                fde.start, fde.size
            ));
            for r in sf.rows(fde).unwrap() {
                let base = if r.cfa_base_fp { "fp" } else { "sp" };
                let ra = offset(r.ra) + if r.mangled_ra { "[s]" } else { "" };
                lines.push(format!(
                    "{:016x} {base}{:+} {} {ra}",
                    r.start,
                    r.cfa,
                    offset(r.fp)
                ));
            }
        }
        (sf, lines)
    }

    fn same_as_objdump(gcc: &str, objdump_tool: &str, extra: &[&str], abi: Abi) {
        let dir = tempfile::tempdir().unwrap();
        let bytes = build(gcc, extra, dir.path());
        let (sf, lines) = ours(&bytes);
        assert_eq!(sf.abi, abi);
        let want = objdump(objdump_tool, &dir.path().join(format!("sf-{gcc}")));
        assert!(want.len() > 8, "{want:?}");
        assert_eq!(lines, want);
    }

    #[test]
    fn x86_64_rows_are_objdumps() {
        same_as_objdump("gcc", "objdump", &[], Abi::Amd64);
    }

    #[test]
    fn aarch64_rows_are_objdumps() {
        same_as_objdump(
            "aarch64-linux-gnu-gcc",
            "aarch64-linux-gnu-objdump",
            &["-nostdlib", "-static", "-Wl,-e,main"],
            Abi::Aarch64,
        );
    }

    #[test]
    fn the_row_in_effect_at_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = build("gcc", &[], dir.path());
        let (sf, _) = ours(&bytes);
        let fde = *sf.fdes.iter().max_by_key(|f| f.num_fres).unwrap();
        let rows = sf.rows(&fde).unwrap();
        let second = rows[1];
        assert_eq!(sf.row_at(second.start), Some(second));
        assert_eq!(
            sf.row_at(second.start.max(rows[0].start + 1) - 1),
            Some(rows[0])
        );
        assert_eq!(sf.row_at(fde.start + fde.size as u64 + 0x10_0000), None);
    }

    #[test]
    fn bad_sections_are_errors() {
        assert_eq!(
            SFrame::parse(&[0; 4], 0).err(),
            Some(SFrameError::Truncated("header"))
        );
        assert_eq!(SFrame::parse(&[0; 28], 0).err(), Some(SFrameError::Magic));
        let mut h = [0u8; 28];
        h[..2].copy_from_slice(&MAGIC.to_le_bytes());
        h[2] = 9;
        assert_eq!(SFrame::parse(&h, 0).err(), Some(SFrameError::Version(9)));
        h[2] = 1;
        h[4] = 3;
        h[8] = 5; // five descriptors, none there
        assert_eq!(
            SFrame::parse(&h, 0).err(),
            Some(SFrameError::Truncated("function descriptors"))
        );
    }
    /// A version 2 x86-64 section with one descriptor (`start`, `size`, `num_fres`, rows
    /// of 1-byte starts) over the row bytes `fres`.
    fn crafted(start: i32, size: u32, num_fres: u32, fres: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER];
        b[..2].copy_from_slice(&MAGIC.to_le_bytes());
        b[2] = 2;
        b[4] = 3;
        b[6] = -8i8 as u8;
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&num_fres.to_le_bytes());
        b[16..20].copy_from_slice(&(fres.len() as u32).to_le_bytes());
        b[24..28].copy_from_slice(&20u32.to_le_bytes());
        b.extend(start.to_le_bytes());
        b.extend(size.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(num_fres.to_le_bytes());
        b.extend([0, 0, 0, 0]);
        b.extend(fres);
        b
    }

    #[test]
    fn a_row_count_past_the_section_is_an_error_not_an_allocation() {
        // One row (start 0, CFA sp+8) where the descriptor claims 2^32 - 1 of them.
        let data = crafted(0, 0x10, u32::MAX, &[0, 0x03, 8]);
        let sf = SFrame::parse(&data, 0x1000).unwrap();
        assert_eq!(
            sf.rows(&sf.fdes[0]).err(),
            Some(SFrameError::Truncated("frame row entries"))
        );
        assert_eq!(sf.row_at(0x1004), None);
    }

    #[test]
    fn descriptors_and_rows_at_the_top_of_the_address_space_do_not_wrap() {
        // A function from 2^64 - 16 on, 0x100 bytes long: it would end past the top.
        let data = crafted(-16, 0x100, 1, &[0x20, 0x03, 8]);
        let sf = SFrame::parse(&data, 0).unwrap();
        assert_eq!(sf.fdes[0].start, u64::MAX - 15);
        assert_eq!(sf.rows(&sf.fdes[0]).err(), Some(SFrameError::OutOfRange));
        assert_eq!(sf.row_at(u64::MAX - 1), None);
        assert_eq!(sf.row_at(0x10), None);
        // The same descriptor inside the address space reads its row.
        let data = crafted(0x1000, 0x100, 1, &[0x20, 0x03, 8]);
        let sf = SFrame::parse(&data, 0).unwrap();
        let row = sf.row_at(0x1030).unwrap();
        assert_eq!((row.start, row.cfa, row.cfa_base_fp), (0x1020, 8, false));
    }
}
