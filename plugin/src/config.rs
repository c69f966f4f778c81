//! Plugin arguments, as the CLI passes them:
//! `out=DIR,clock=auto|insn|wall[,max_depth=N][,split_levels=on][,task_comm=OFFSET]`, or
//! `probe=on` to check that this QEMU loads the plugin at all.

use crate::clock::ClockKind;
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

/// Parses `key=value` arguments; errors are one line for QEMU to print.
pub fn parse(raw: &[String]) -> Result<Mode, String> {
    let mut out = None;
    let mut clock = ClockChoice::Auto;
    let mut split_levels = false;
    let mut task_comm = None;
    let mut max_depth = qemu_uftrace_format::MAX_STACK as usize;
    for arg in raw {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("argument {arg:?} is not key=value"))?;
        match key {
            "probe" => return Ok(Mode::Probe),
            "out" => out = Some(PathBuf::from(value)),
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
            "task_comm" => {
                task_comm = Some(
                    value
                        .parse::<u64>()
                        .ok()
                        .filter(|&o| o < qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
                        .ok_or_else(|| format!("task_comm={value}: expected a byte offset"))?,
                )
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
    }))
}
