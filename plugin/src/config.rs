//! Plugin arguments, as the CLI passes them:
//! `out=DIR,clock=auto|insn|wall[,max_depth=N][,split_levels=on][,task_comm=OFFSET]
//! `[,task_pid=OFFSET][,task_slot=ADDR|task_slot_file=FILE][,user_opts=N][,proc=PID.N]`
//! `[,tsc=TICKS:NS][,entries=FILE|entries_file=FILE]`, or
//! `probe=on` to check that this QEMU loads the plugin at all. Arguments are bytes: DIR is
//! a file name, which need not be UTF-8.

use crate::clock::ClockKind;
use qemu_uftrace_engine::tsc::TscSample;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Config {
    pub out: PathBuf,
    pub clock: ClockChoice,
    /// Frames recorded per stack; deeper ones are followed but not recorded.
    pub max_depth: usize,
    /// One uftrace task per privilege level of each context.
    pub split_levels: bool,
    /// Where an OS task's name sits in its task structure (Linux `task_struct.comm`).
    pub task_comm: Option<u64>,
    /// Where an OS task's PID sits in its task structure (Linux `task_struct.pid`), read at
    /// switches on a guest whose ISA keeps no PID in a register.
    pub task_pid: Option<u64>,
    /// User mode: this QEMU runs a guest process other than the first (a forked child's
    /// image after exec), whose files go to `procs/<KEY>/` (see `process`).
    pub proc_key: Option<String>,
    /// User mode: how many of QEMU's arguments after `-plugin VALUE` are its own options
    /// (the program follows), for running QEMU again at an exec.
    pub user_opts: Option<usize>,
    /// Where the OS keeps its running task in per-CPU memory, when not in a register
    /// (x86_64 Linux: `current_task`'s per-CPU offset); its stores are task switches.
    pub task_slot: Option<u64>,
    /// The same, written by the CLI into this file while QEMU starts (it takes a bzImage's
    /// kallsyms to find): read once the guest first runs kernel code.
    pub task_slot_file: Option<PathBuf>,
    /// The CLI's paired reading of the time-stamp counter and CLOCK_MONOTONIC, taken as it
    /// started: the wall clock's calibration runs from it to the plugin's install.
    pub tsc: Option<TscSample>,
    /// The guest's function entries, written by the CLI before QEMU starts: direct jumps
    /// into another function's entry are shown as calls (`entries`).
    pub entries: Option<PathBuf>,
    /// `entries_file=`: the list is still being written by the CLI as QEMU starts (a
    /// kernel's symbols), and waited for when the kernel proper is first translated.
    pub entries_later: bool,
}

/// The clock asked for: `auto` picks instructions with one vCPU, wall time with several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockChoice {
    Auto,
    Fixed(ClockKind),
}

#[derive(Debug, Clone)]
pub enum Mode {
    Probe,
    Record(Config),
}

/// A byte offset in the guest's task structure, below a bound no such structure reaches.
fn task_offset(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse::<u64>()
        .ok()
        .filter(|&o| o < qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
        .ok_or_else(|| format!("{key}={value}: expected a byte offset"))
}

/// Parses `key=value` arguments; errors are one line for QEMU to print.
pub fn parse(raw: &[OsString]) -> Result<Mode, String> {
    let mut out = None;
    let mut clock = ClockChoice::Auto;
    let mut split_levels = false;
    let mut task_comm = None;
    let mut task_pid = None;
    let mut task_slot = None;
    let mut task_slot_file = None;
    let mut max_depth = qemu_uftrace_format::MAX_STACK as usize;
    let mut proc_key = None;
    let mut user_opts = None;
    let mut tsc = None;
    let mut entries = None;
    let mut entries_later = false;
    for arg in raw {
        let bytes = arg.as_bytes();
        let eq = bytes
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| format!("argument {arg:?} is not key=value"))?;
        let key = String::from_utf8_lossy(&bytes[..eq]);
        let raw_value = OsStr::from_bytes(&bytes[eq + 1..]);
        let value = raw_value.to_string_lossy();
        let value = value.as_ref();
        match key.as_ref() {
            "probe" => return Ok(Mode::Probe),
            "out" => out = Some(PathBuf::from(raw_value)),
            "clock" => {
                clock = match value {
                    "auto" => ClockChoice::Auto,
                    "insn" => ClockChoice::Fixed(ClockKind::Insn),
                    "wall" => ClockChoice::Fixed(ClockKind::Wall),
                    _ => return Err(format!("clock={value}: expected auto, insn or wall")),
                }
            }
            "split_levels" => {
                split_levels = match value {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("split_levels={value}: expected on or off")),
                }
            }
            "task_comm" => task_comm = Some(task_offset("task_comm", value)?),
            "task_pid" => task_pid = Some(task_offset("task_pid", value)?),
            "task_slot" => {
                task_slot = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| format!("task_slot={value}: expected an address"))?,
                )
            }
            "task_slot_file" => task_slot_file = Some(PathBuf::from(raw_value)),
            // Empty: none (an exec'd program's QEMU drops the first program's list).
            "entries" => {
                entries = (!raw_value.is_empty()).then(|| PathBuf::from(raw_value));
                entries_later = false;
            }
            "entries_file" => {
                entries = Some(PathBuf::from(raw_value));
                entries_later = true;
            }
            "max_depth" => {
                max_depth = value
                    .parse::<usize>()
                    .ok()
                    .filter(|d| (1..=qemu_uftrace_format::MAX_STACK as usize).contains(d))
                    .ok_or_else(|| {
                        format!(
                            "max_depth={value}: expected 1..={}",
                            qemu_uftrace_format::MAX_STACK
                        )
                    })?
            }
            "proc" => {
                // A directory name of our making: `<pid>.<n>`.
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                    return Err(format!("proc={value}: expected PID.N"));
                }
                proc_key = Some(value.to_string())
            }
            "user_opts" => {
                user_opts = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| format!("user_opts={value}: expected a count"))?,
                )
            }
            "tsc" => {
                tsc = Some(
                    TscSample::parse_arg(value)
                        .ok_or_else(|| format!("tsc={value}: expected TICKS:NANOSECONDS"))?,
                )
            }
            _ => return Err(format!("unknown argument {key:?}")),
        }
    }
    let out = out.ok_or("missing out=DIR")?;
    Ok(Mode::Record(Config {
        out,
        clock,
        max_depth,
        split_levels,
        task_comm,
        task_pid,
        proc_key,
        user_opts,
        task_slot,
        task_slot_file,
        tsc,
        entries,
        entries_later,
    }))
}
