//! The `info` file: a 40-byte binary header, then one text block per info bit, in bit order
//! (`cmds/info.c`). Every line ends in `\n`; the readers strip exactly one.

use std::io::{self, Write};

const MAGIC: &[u8; 8] = b"Ftrace!\0";
const FILE_VERSION: u32 = 4;
const HEADER_SIZE: u16 = 40;

/// Feature bits (`enum uftrace_feat_bits`).
pub mod feat {
    pub const TASK_SESSION: u64 = 1 << 1;
    pub const SYM_REL_ADDR: u64 = 1 << 5;
    pub const MAX_STACK: u64 = 1 << 6;
    pub const EVENT: u64 = 1 << 7;
    pub const DEBUG_INFO: u64 = 1 << 10;
    pub const ARGUMENT: u64 = 1 << 3;
    pub const RETVAL: u64 = 1 << 4;
    pub const AUTO_ARGS: u64 = 1 << 9;
}

/// Info bits (`enum uftrace_info_bits`): each selects one text block.
mod bit {
    pub const EXE_NAME: u64 = 1 << 0;
    pub const EXIT_STATUS: u64 = 1 << 2;
    pub const CMDLINE: u64 = 1 << 3;
    pub const CPUINFO: u64 = 1 << 4;
    pub const MEMINFO: u64 = 1 << 5;
    pub const OSINFO: u64 = 1 << 6;
    pub const TASKINFO: u64 = 1 << 7;
    pub const ARG_SPEC: u64 = 1 << 10;
    pub const RECORD_DATE: u64 = 1 << 11;
    pub const PATTERN_TYPE: u64 = 1 << 12;
    pub const VERSION: u64 = 1 << 13;
}

/// Everything the `info` file says about one recording.
#[derive(Debug, Clone, Default)]
pub struct Info {
    /// Guest image shown as "program"; also the graphviz root (must exist, may be empty).
    pub exename: String,
    /// The recorded command line, as typed.
    pub cmdline: String,
    /// A wait()-style status: `code << 8`, or the signal number.
    pub exit_status: i32,
    pub nr_cpus_online: u32,
    pub nr_cpus_possible: u32,
    /// `ARM64 …` makes uftrace decode aarch64; `RISCV64 …` riscv64 (0.17+); else x86.
    pub cpu_desc: String,
    pub meminfo: String,
    pub os_kernel: String,
    pub os_hostname: String,
    pub os_distro: String,
    /// Non-zero task ids, one per `.dat` file (0.19 rejects tid 0).
    pub tids: Vec<u32>,
    pub record_date: String,
    pub elapsed_time: String,
    pub version: String,
    /// Extra feature bits (EVENT, DEBUG_INFO) beyond the ones always set.
    pub extra_features: u64,
    /// `-A`/`-R` as typed, when records carry arguments or return values (`args`).
    pub arg_spec: Option<crate::args::InfoSpec>,
}

/// Escapes a value that uftrace pastes into JSON (`dump --chrome`) and graphviz output,
/// in at most `max` bytes: a cut ends with the mark, never inside an escape.
fn json_escape(s: &str, max: usize) -> String {
    let escape = |c: char, buf: &mut String| match c {
        '"' => buf.push_str("\\\""),
        '\\' => buf.push_str("\\\\"),
        c if c.is_control() => buf.push(' '),
        c => buf.push(c),
    };
    let mut out = String::with_capacity(s.len());
    s.chars().for_each(|c| escape(c, &mut out));
    if out.len() <= max {
        return out;
    }
    let room = max - crate::text::CUT_MARK.len();
    out.clear();
    let mut piece = String::new();
    for c in s.chars() {
        piece.clear();
        escape(c, &mut piece);
        if out.len() + piece.len() > room {
            break;
        }
        out.push_str(&piece);
    }
    out.push_str(crate::text::CUT_MARK);
    out
}

/// Free-text values are single lines without control characters.
fn one_line(s: &str) -> String {
    crate::text::escape_controls(&s.replace(['\n', '\r'], " ")).into_owned()
}

/// Writes `key` and `value` as one line uftrace's `fgets(buf, PATH_MAX)` reads whole (a
/// longer one would be read as two, and the second fails the next block's prefix check).
fn line(w: &mut impl Write, key: &str, value: &str) -> io::Result<()> {
    let value = crate::text::keep_head(value, crate::text::MAX_LINE - 1 - key.len());
    writeln!(w, "{key}{value}")
}

impl Info {
    /// Feature mask written to the header.
    pub fn features(&self) -> u64 {
        let args = match &self.arg_spec {
            Some(a) if !a.is_empty() => {
                // `-a`: with DEBUG_INFO, uftrace matches every symbol against the `.dbg`
                // files' values (auto-args:1); without it, against `argauto:` alone.
                let auto = if a.auto {
                    feat::AUTO_ARGS | feat::DEBUG_INFO
                } else if a.enums.is_empty() {
                    0
                } else {
                    feat::AUTO_ARGS
                };
                feat::ARGUMENT | feat::RETVAL | auto
            }
            _ => 0,
        };
        feat::TASK_SESSION | feat::SYM_REL_ADDR | feat::MAX_STACK | self.extra_features | args
    }

    /// Writes the whole file.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        if self.tids.is_empty() || self.tids.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "info needs at least one task id and none may be 0",
            ));
        }
        let mask = bit::EXE_NAME
            | bit::EXIT_STATUS
            | bit::CMDLINE
            | bit::CPUINFO
            | bit::MEMINFO
            | bit::OSINFO
            | bit::TASKINFO
            | bit::RECORD_DATE
            | bit::PATTERN_TYPE
            | bit::VERSION
            | match &self.arg_spec {
                Some(a) if !a.is_empty() => bit::ARG_SPEC,
                _ => 0,
            };
        let mut hdr = Vec::with_capacity(HEADER_SIZE as usize);
        hdr.extend_from_slice(MAGIC);
        hdr.extend_from_slice(&FILE_VERSION.to_le_bytes());
        hdr.extend_from_slice(&HEADER_SIZE.to_le_bytes());
        hdr.push(1); // little endian (ELF EI_DATA)
        hdr.push(2); // 64-bit (ELF EI_CLASS)
        hdr.extend_from_slice(&self.features().to_le_bytes());
        hdr.extend_from_slice(&mask.to_le_bytes());
        hdr.extend_from_slice(&crate::MAX_STACK.to_le_bytes());
        hdr.extend_from_slice(&[0u8; 6]);
        debug_assert_eq!(hdr.len(), HEADER_SIZE as usize);
        w.write_all(&hdr)?;

        // Blocks strictly in increasing bit order: the reader expects exactly that.
        line(w, "exename:", &one_line(&self.exename))?;
        writeln!(w, "exit_status:{}", self.exit_status)?;
        let cmdline_room = crate::text::MAX_LINE - 1 - "cmdline:".len();
        line(w, "cmdline:", &json_escape(&self.cmdline, cmdline_room))?;
        writeln!(w, "cpuinfo:lines=2")?;
        writeln!(
            w,
            "cpuinfo:nr_cpus={} / {}",
            self.nr_cpus_online, self.nr_cpus_possible
        )?;
        line(w, "cpuinfo:desc=", &one_line(&self.cpu_desc))?;
        line(w, "meminfo:", &one_line(&self.meminfo))?;
        writeln!(w, "osinfo:lines=3")?;
        line(w, "osinfo:kernel=", &one_line(&self.os_kernel))?;
        line(w, "osinfo:hostname=", &one_line(&self.os_hostname))?;
        line(w, "osinfo:distro=", &one_line(&self.os_distro))?;
        let tids: Vec<String> = self.tids.iter().map(u32::to_string).collect();
        writeln!(w, "taskinfo:lines=2")?;
        writeln!(w, "taskinfo:nr_tid={}", self.tids.len())?;
        writeln!(w, "taskinfo:tids={}", tids.join(","))?;
        if let Some(a) = self.arg_spec.as_ref().filter(|a| !a.is_empty()) {
            a.write_to(w)?;
        }
        line(w, "record_date:", &one_line(&self.record_date))?;
        line(w, "elapsed_time:", &one_line(&self.elapsed_time))?;
        writeln!(w, "pattern_type:regex")?;
        line(w, "uftrace_version:", &one_line(&self.version))?;
        Ok(())
    }
}

/// The `cpuinfo:desc=` value of an `info` file, which names the guest architecture.
pub fn read_cpu_desc(info: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(info.get(HEADER_SIZE as usize..)?);
    text.lines()
        .find_map(|l| l.strip_prefix("cpuinfo:desc="))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_40_bytes_then_text_in_bit_order() {
        let info = Info {
            exename: "guest.elf".into(),
            cmdline: r#"qemu "a\b""#.into(),
            tids: vec![1, 2],
            ..Default::default()
        };
        let mut out = Vec::new();
        info.write_to(&mut out).unwrap();
        assert_eq!(&out[..8], b"Ftrace!\0");
        assert_eq!(u32::from_le_bytes(out[8..12].try_into().unwrap()), 4);
        assert_eq!(out[14], 1);
        let text = String::from_utf8(out[40..].to_vec()).unwrap();
        assert!(text.starts_with("exename:guest.elf\nexit_status:0\ncmdline:qemu \\\"a\\\\b\\\"\n"));
        assert!(text.contains("taskinfo:nr_tid=2\ntaskinfo:tids=1,2\n"));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn cpu_desc_reads_back() {
        let info = Info {
            cpu_desc: "ARM64 (QEMU TCG)".into(),
            tids: vec![1],
            ..Default::default()
        };
        let mut out = Vec::new();
        info.write_to(&mut out).unwrap();
        assert_eq!(read_cpu_desc(&out).as_deref(), Some("ARM64 (QEMU TCG)"));
        assert_eq!(read_cpu_desc(b"short"), None);
    }

    #[test]
    fn tid_zero_is_refused() {
        let info = Info {
            tids: vec![0],
            ..Default::default()
        };
        assert!(info.write_to(&mut Vec::new()).is_err());
    }

    #[test]
    fn every_text_line_fits_uftraces_buffer() {
        let long = format!("/{}\x1b\"\\", "d/".repeat(3000));
        let info = Info {
            exename: long.clone(),
            cmdline: format!("qemu {}", "\\\"".repeat(3000)),
            cpu_desc: long.clone(),
            meminfo: long.clone(),
            os_kernel: long.clone(),
            os_hostname: long.clone(),
            os_distro: long.clone(),
            record_date: long.clone(),
            elapsed_time: long.clone(),
            version: long,
            tids: vec![1],
            ..Default::default()
        };
        let mut out = Vec::new();
        info.write_to(&mut out).unwrap();
        let text = String::from_utf8(out[40..].to_vec()).unwrap();
        for l in text.split_inclusive('\n') {
            assert!(
                l.len() <= crate::text::MAX_LINE,
                "{} bytes: {l:.60}",
                l.len()
            );
            assert!(
                !l.trim_end_matches('\n').chars().any(char::is_control),
                "{l:.60}"
            );
        }
        let cmdline = text.lines().find(|l| l.starts_with("cmdline:")).unwrap();
        // A cut leaves whole escapes: every backslash pairs with the next character.
        let body = cmdline.strip_suffix('\u{2026}').unwrap();
        let trailing = body.len() - body.trim_end_matches('\\').len();
        assert_eq!(trailing % 2, 0, "{}", &body[body.len() - 20..]);
        assert_eq!(text.lines().count(), 18);
    }
}
