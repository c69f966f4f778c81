//! An independent count of function entries, taken in the same QEMU run as the trace: QEMU's
//! contrib `execlog` plugin, loaded beside ours, logs every execution of the instructions at
//! the functions' entry addresses.
//!
//! `qemu-uftrace record` passes the rest of the QEMU command line through, a second `-plugin`
//! included, so the run is `qemu-uftrace record -- qemu-system-aarch64 … -plugin
//! libexeclog.so,afilter=0xADDR,afilter=0xADDR… -d plugin -D LOG`. Each `afilter=` (hex, one
//! per option) makes execlog instrument only the instructions at that virtual address; every
//! execution becomes one log line `VCPU, 0xADDR, 0xOPCODE, "disassembly"`.
//!
//! An execution of a function's first instruction is an entry unless something branches there
//! without linking (a tail call `b f`, a loop back to the first instruction): [`branches_to`]
//! finds those in the kernel's disassembly, so a test compares only functions that have none,
//! and a trace must never show more calls than execlog saw executions, for any function.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::{cached, cross_prefix};

/// Kernel functions whose calls a trace of the Debian boot must count exactly, as execlog
/// does: called often (from ~80 times, `schedule_tail`, to ~100,000, `__cond_resched`, over
/// the boot to the root-fs panic), each one function of its name in
/// System.map, and entered only by `bl` — Debian builds its kernel with
/// `-fno-optimize-sibling-calls` (CONFIG_FRAME_POINTER), so C functions are never tail-called,
/// and [`branches_to`] finds no `b`/`cbz`/… to their first instruction (checked by
/// `tests/kernel_entries.rs`). `schedule` and `schedule_tail` are where tasks switch and
/// begin; the others are called from everywhere, in and out of interrupts.
pub const KERNEL_ENTRY_FUNCTIONS: &[&str] = &[
    "schedule",
    "schedule_tail",
    "__cond_resched",
    "mutex_lock",
    "mutex_unlock",
    "kmem_cache_alloc",
    "kfree",
];

/// QEMU 10.2.2's `contrib/plugins/libexeclog.so`, built by `scripts/install-deps.sh` with
/// that QEMU (a plugin only loads into the QEMU it was built for).
pub fn execlog_plugin() -> PathBuf {
    cached("qemu-10.2.2/plugins/libexeclog.so")
}

/// Debian's `System.map` of the cached kernel (nokaslr addresses).
pub fn debian_system_map() -> PathBuf {
    cached("kernel-dbg/System.map")
}

/// Debian's DWARF `vmlinux` of the cached kernel.
pub fn debian_vmlinux() -> PathBuf {
    cached("kernel-dbg/vmlinux")
}

/// The addresses of `names` in a System.map (`ADDR TYPE NAME` lines), text symbols only.
/// Fails when a name is missing or names several addresses (static functions of the same
/// name in different files): an entry count must be one function's.
pub fn system_map_addresses(map: &Path, names: &[&str]) -> Result<BTreeMap<String, u64>> {
    let text =
        std::fs::read_to_string(map).with_context(|| format!("reading {}", map.display()))?;
    let mut found: BTreeMap<&str, Vec<u64>> = names.iter().map(|n| (*n, Vec::new())).collect();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !matches!(kind, "T" | "t" | "W" | "w") {
            continue;
        }
        if let Some(addrs) = found.get_mut(name) {
            let addr = u64::from_str_radix(addr, 16)
                .with_context(|| format!("{}: bad line {line:?}", map.display()))?;
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
    }
    let mut out = BTreeMap::new();
    for (name, addrs) in found {
        match addrs[..] {
            [addr] => {
                out.insert(name.to_owned(), addr);
            }
            [] => bail!("{name} is not a function in {}", map.display()),
            _ => bail!(
                "{name} names {} functions in {} ({addrs:x?}): pick another",
                addrs.len(),
                map.display()
            ),
        }
    }
    Ok(out)
}

/// Every text symbol name of a System.map.
pub fn system_map_names(map: &Path) -> Result<BTreeSet<String>> {
    let text =
        std::fs::read_to_string(map).with_context(|| format!("reading {}", map.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            matches!(kind, "T" | "t" | "W" | "w").then(|| name.to_owned())
        })
        .collect())
}

/// One execlog session: the functions it watches and the log file QEMU writes.
#[derive(Debug, Clone)]
pub struct Execlog {
    /// Function name → entry address.
    pub functions: BTreeMap<String, u64>,
    /// The `-D` file.
    pub log: PathBuf,
}

impl Execlog {
    /// Watches the kernel functions `names` of the cached Debian kernel ([`debian_system_map`]),
    /// logging to `log`.
    pub fn for_kernel_functions(names: &[&str], log: &Path) -> Result<Execlog> {
        Ok(Execlog {
            functions: system_map_addresses(&debian_system_map(), names)?,
            log: log.to_path_buf(),
        })
    }

    /// The QEMU options that load execlog on these addresses:
    /// `-plugin PLUGIN,afilter=0x…,afilter=0x… -d plugin -D LOG`.
    pub fn qemu_args(&self, plugin: &Path) -> Vec<String> {
        let mut value = plugin.to_string_lossy().into_owned();
        for addr in self.functions.values() {
            value.push_str(&format!(",afilter={addr:#x}"));
        }
        vec![
            "-plugin".into(),
            value,
            "-d".into(),
            "plugin".into(),
            "-D".into(),
            self.log.to_string_lossy().into_owned(),
        ]
    }

    /// After the run: how many times each function's first instruction ran, all vCPUs
    /// together. Every watched function is in the result (0 when it never ran).
    pub fn entry_counts(&self) -> Result<BTreeMap<String, u64>> {
        let per_vcpu = self.entry_counts_per_vcpu()?;
        Ok(per_vcpu
            .into_iter()
            .map(|(name, vcpus)| (name, vcpus.values().sum()))
            .collect())
    }

    /// Lines execlog lost: with several vCPUs logging at once, one line of two sometimes
    /// comes out empty (measured on 10.2.2, -smp 4: as many blank lines as the trace's
    /// calls exceeded execlog's count).
    pub fn lost_lines(&self) -> Result<u64> {
        let text = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading the execlog log {}", self.log.display()))?;
        Ok(text.lines().filter(|l| l.trim().is_empty()).count() as u64)
    }

    /// [`Execlog::entry_counts`] by vCPU index.
    pub fn entry_counts_per_vcpu(&self) -> Result<BTreeMap<String, BTreeMap<u32, u64>>> {
        let text = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading the execlog log {}", self.log.display()))?;
        let by_addr = parse_execlog(&text)?;
        Ok(self
            .functions
            .iter()
            .map(|(name, addr)| (name.clone(), by_addr.get(addr).cloned().unwrap_or_default()))
            .collect())
    }
}

/// Counts the lines of an execlog log by address and vCPU. Lines that are not execlog's
/// (blank ones, other plugins' messages sharing the `-D` file) are skipped; a line that
/// starts like execlog's but does not parse is an error.
pub fn parse_execlog(text: &str) -> Result<BTreeMap<u64, BTreeMap<u32, u64>>> {
    let mut counts: BTreeMap<u64, BTreeMap<u32, u64>> = BTreeMap::new();
    for line in text.lines() {
        // "0, 0xffff800008bb5d24, 0xd503201f, "nop ""
        let mut fields = line.splitn(3, ", ");
        let (Some(vcpu), Some(pc)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(vcpu) = vcpu.trim().parse::<u32>() else {
            continue;
        };
        let Some(hex) = pc.strip_prefix("0x") else {
            bail!("execlog line {line:?}: no 0x address");
        };
        let pc = u64::from_str_radix(hex, 16)
            .with_context(|| format!("execlog line {line:?}: bad address"))?;
        *counts.entry(pc).or_default().entry(vcpu).or_default() += 1;
    }
    Ok(counts)
}

/// How a function's entry is reached in the code: `linked` branches (`bl`) are calls;
/// `unlinked` ones (`b`, `b.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`) enter it without a call
/// (tail calls, loops back to the first instruction), so execlog would count them too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BranchesTo {
    pub linked: u64,
    pub unlinked: u64,
}

/// Every direct branch in `elf`'s code (`aarch64-linux-gnu-objdump -d`, streamed: the
/// Debian vmlinux disassembles to 3.3 M lines in ~4 s) whose target is one of `addresses`.
/// Indirect branches (`br`, `blr`) have no target to read: functions whose address is taken
/// may still be tail-called through a register, which only the never-above rule catches.
pub fn branches_to(elf: &Path, addresses: &[u64]) -> Result<BTreeMap<u64, BranchesTo>> {
    let objdump = format!("{}objdump", cross_prefix());
    let mut child = Command::new(&objdump)
        .args(["-d", "--no-show-raw-insn"])
        .arg(elf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("running {objdump} (run scripts/install-deps.sh)"))?;
    let mut out: BTreeMap<u64, BranchesTo> = addresses
        .iter()
        .map(|a| (*a, BranchesTo::default()))
        .collect();
    let stdout = child.stdout.take().context("objdump's stdout")?;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading objdump's output")?;
        // "ffff800008bb5d30:\tbl\tffff800008bb5ba0 <schedule>"
        let mut parts = line.split('\t');
        let (Some(_addr), Some(mnemonic), Some(operands)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let linked = match mnemonic.trim() {
            "bl" => true,
            "b" | "cbz" | "cbnz" | "tbz" | "tbnz" => false,
            m if m.starts_with("b.") => false,
            _ => continue,
        };
        // The target is the last hex word before "<symbol>".
        let Some(target) = operands
            .split(" <")
            .next()
            .and_then(|s| s.rsplit([' ', ',']).next())
            .and_then(|t| u64::from_str_radix(t.trim(), 16).ok())
        else {
            continue;
        };
        if let Some(count) = out.get_mut(&target) {
            if linked {
                count.linked += 1;
            } else {
                count.unlinked += 1;
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("{objdump} -d {} failed ({status})", elf.display());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_execlog_lines() {
        let log = "0, 0xffff800008bb5d24, 0xd503201f, \"nop \"\n\n\
                   1, 0xffff800008bb5d24, 0xd503201f, \"nop \", load, 0x1, RAM\n\
                   0, 0xffff800008bb5ba0, 0xd503233f, \"paciasp \"\n\
                   0, 0xffff800008bb5d24, 0xd503201f, \"nop \"\n\
                   some other plugin's message\n";
        let counts = parse_execlog(log).unwrap();
        assert_eq!(counts[&0xffff800008bb5d24][&0], 2);
        assert_eq!(counts[&0xffff800008bb5d24][&1], 1);
        assert_eq!(counts[&0xffff800008bb5ba0][&0], 1);
        assert!(parse_execlog("0, zz, 0x1, \"x\"\n").is_err());
    }

    #[test]
    fn builds_the_plugin_option() {
        let e = Execlog {
            functions: [("schedule".to_string(), 0xffff800008bb5ba0)].into(),
            log: "/tmp/x.log".into(),
        };
        assert_eq!(
            e.qemu_args(Path::new("/p/libexeclog.so")),
            vec![
                "-plugin",
                "/p/libexeclog.so,afilter=0xffff800008bb5ba0",
                "-d",
                "plugin",
                "-D",
                "/tmp/x.log"
            ]
        );
    }

    #[test]
    fn reads_system_map_addresses() {
        let map = std::env::temp_dir().join(format!("System.map-{}", std::process::id()));
        std::fs::write(
            &map,
            "ffff800008010000 T _stext\nffff800008010000 t gic_handle_irq\n\
             ffff800008010090 t gic_handle_irq\nffff800008bb5ba0 T schedule\n\
             ffff80000a000000 D schedule_data\n",
        )
        .unwrap();
        let found = system_map_addresses(&map, &["schedule"]);
        let ambiguous = system_map_addresses(&map, &["gic_handle_irq"]);
        let data = system_map_addresses(&map, &["schedule_data"]);
        std::fs::remove_file(&map).unwrap();
        assert_eq!(found.unwrap()["schedule"], 0xffff800008bb5ba0);
        assert!(ambiguous
            .unwrap_err()
            .to_string()
            .contains("names 2 functions"));
        assert!(data.is_err(), "data symbols are not functions");
    }
}
