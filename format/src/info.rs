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
}

/// Escapes a value that uftrace pastes into JSON (`dump --chrome`) and graphviz output.
fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Free-text values are single lines.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

impl Info {
    /// Feature mask written to the header.
    pub fn features(&self) -> u64 {
        feat::TASK_SESSION | feat::SYM_REL_ADDR | feat::MAX_STACK | self.extra_features
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
            | bit::VERSION;
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
        writeln!(w, "exename:{}", one_line(&self.exename))?;
        writeln!(w, "exit_status:{}", self.exit_status)?;
        writeln!(w, "cmdline:{}", json_escape(&self.cmdline))?;
        writeln!(w, "cpuinfo:lines=2")?;
        writeln!(
            w,
            "cpuinfo:nr_cpus={} / {}",
            self.nr_cpus_online, self.nr_cpus_possible
        )?;
        writeln!(w, "cpuinfo:desc={}", one_line(&self.cpu_desc))?;
        writeln!(w, "meminfo:{}", one_line(&self.meminfo))?;
        writeln!(w, "osinfo:lines=3")?;
        writeln!(w, "osinfo:kernel={}", one_line(&self.os_kernel))?;
        writeln!(w, "osinfo:hostname={}", one_line(&self.os_hostname))?;
        writeln!(w, "osinfo:distro={}", one_line(&self.os_distro))?;
        let tids: Vec<String> = self.tids.iter().map(u32::to_string).collect();
        writeln!(w, "taskinfo:lines=2")?;
        writeln!(w, "taskinfo:nr_tid={}", self.tids.len())?;
        writeln!(w, "taskinfo:tids={}", tids.join(","))?;
        writeln!(w, "record_date:{}", one_line(&self.record_date))?;
        writeln!(w, "elapsed_time:{}", one_line(&self.elapsed_time))?;
        writeln!(w, "pattern_type:regex")?;
        writeln!(w, "uftrace_version:{}", one_line(&self.version))?;
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
}
