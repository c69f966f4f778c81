//! Plugin arguments, as the CLI passes them:
//! `out=DIR,clock=auto|insn|wall[,max_depth=N][,split_levels=on][,task_comm=OFFSET]
//! `[,task_pid=OFFSET][,task_tgid=OFFSET][,task_state=OFFSET][,task_slot=ADDR|task_slot_file=FILE][,user_opts=N[,one_arena=on][,untraced=on]][,proc=PID.N]`
//! `[,proc_watch=A:B:C:D,proc_offsets=W:X:Y:Z[,mod_watch=L:F[:H:O],mod_offsets=N…][,munmap_watch=A:S:L][,proc_walk=INIT:N…][,kernel_page=BYTES]][,tsc=TICKS:NS][,max_size=BYTES[,max_size_exit=on][,max_size_file=FILE]][,record_pidfd=FD]`
//! `[,entries=FILE|entries_file=FILE][,lib_entries=FILE][,resume=on][,args_file=FILE]`
//! `[,trace=on|off][,switch=FILE][,trace_on_at=ADDR:ADDR…][,trace_off_at=ADDR:ADDR…]`
//! `[,stop_at=ADDR:ADDR…[,stop_at_exit=on]][,start_at=ADDR:ADDR…][,keep_last=BYTES]`
//! `[,filter=ADDR:ADDR…][,notrace=ADDR:ADDR…][,time_filter=N]`
//! `[,lib_filter=DEV.INO.ADDR:…][,lib_notrace=…][,lib_stop_at=…][,lib_start_at=…]`
//! `[,lib_trace_on_at=…][,lib_trace_off_at=…]`
//! `[,file_filter=HEXPATH.OFFSET:…][,file_notrace=…][,file_stop_at=…][,file_start_at=…]`
//! `[,file_trace_on_at=…][,file_trace_off_at=…]`
//! `[,pie_entry=ADDR[,pie_filter=…][,pie_notrace=…][,pie_stop_at=…][,pie_start_at=…]`
//! `[,pie_trace_on_at=…][,pie_trace_off_at=…]]`, or
//! `probe=on` to check that this QEMU loads the plugin at all. Arguments are bytes: DIR is
//! a file name, which need not be UTF-8.

use super::aims::{Aims, Pie};
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
    /// Where an OS task's thread group sits in its task structure (Linux
    /// `task_struct.tgid`), read at switches to a task whose PID is known: the process
    /// that `plugin.tasks` groups its threads by.
    pub task_tgid: Option<u64>,
    /// Where an OS task's state sits in its task structure (Linux `task_struct.__state`),
    /// read at each switch away: `TASK_DEAD` there is the task's last switch, which frees
    /// its context.
    pub task_state: Option<u64>,
    /// User mode: this QEMU runs a guest process other than the first (a forked child's
    /// image after exec), whose files go to `procs/<KEY>/` (see `process`).
    pub proc_key: Option<String>,
    /// User mode: how many of QEMU's arguments after `-plugin VALUE` are its own options
    /// (the program follows), for running QEMU again at an exec.
    pub user_opts: Option<usize>,
    /// User mode: QEMU runs with one malloc arena (`one_arena=on`,
    /// `qemu_uftrace_engine::arena`), and so does the QEMU run for an exec'd program.
    pub one_arena: bool,
    /// User mode: an exec'd image started once the size cap had no room left for another
    /// image's files (`untraced=on`): it records nothing and writes no file, and only
    /// follows its own execs (`lifecycle::process`).
    pub untraced: bool,
    /// Where the OS keeps its running task in per-CPU memory, when not in a register
    /// (x86_64 Linux: `current_task`'s per-CPU offset); its stores are task switches.
    pub task_slot: Option<u64>,
    /// The same, written by the CLI into this file while QEMU starts (it takes a bzImage's
    /// kallsyms to find): read once the guest first runs kernel code.
    pub task_slot_file: Option<PathBuf>,
    /// The CLI's paired reading of the time-stamp counter and CLOCK_MONOTONIC, taken as it
    /// started: the wall clock's calibration runs from it to the plugin's install.
    pub tsc: Option<TscSample>,
    /// The most bytes of records the trace holds (`max_size=`, the CLI's `--max-size`):
    /// the writer stops at the last whole record within it, and the trace is incomplete.
    pub max_size: Option<u64>,
    /// Stop QEMU cleanly once `max_size` is reached (`max_size_exit=on`).
    pub max_size_exit: bool,
    /// User mode: the count every process image takes `max_size` from
    /// (`max_size_file=`, `state::taken`); without it, this image's own.
    pub max_size_file: Option<PathBuf>,
    /// Where the trace ends (`stop_at=ADDR:ADDR…`, hex): the first entry into any of these
    /// addresses (the CLI's `--stop-at FUNC`).
    pub stop_at: Vec<u64>,
    /// Stop QEMU there too (`stop_at_exit=on`).
    pub stop_at_exit: bool,
    /// The flight recorder's window in bytes of records (`keep_last=BYTES`, the CLI's
    /// `--keep-last SIZE`).
    pub keep_last: Option<u64>,
    /// Where the trace begins (`start_at=ADDR:ADDR…`, hex): the first entry into any of
    /// these (the CLI's `--start-at FUNC`).
    pub start_at: Vec<u64>,
    /// Only the subtrees of these functions are written (`filter=ADDR:ADDR…`, hex: the
    /// CLI's `-F`); empty: all.
    pub filter: Vec<u64>,
    /// These functions' subtrees are left out (`notrace=ADDR:ADDR…`: the CLI's `-N`).
    pub notrace: Vec<u64>,
    /// Calls shorter than this are not written (`time_filter=N`, in the clock's unit: ns or
    /// instructions; the CLI's `-t`, its unit already applied); 0: all are.
    pub time_filter: u64,
    /// User mode: shared libraries' `-F`/`-N` functions, each its file's device and inode
    /// and its link address (`lib_filter=DEV.INO.ADDR:…`, `lib_notrace=…`, hex), placed where
    /// the guest maps the file (`state::lib_aims`).
    pub lib_filter: Vec<LibAim>,
    pub lib_notrace: Vec<LibAim>,
    /// The same for `--stop-at` and `--start-at` (`lib_stop_at=`, `lib_start_at=`), and for
    /// `--trace-on-at` and `--trace-off-at` (`lib_trace_on_at=`, `lib_trace_off_at=`).
    pub lib_stop_at: Vec<LibAim>,
    pub lib_start_at: Vec<LibAim>,
    pub lib_trace_on_at: Vec<LibAim>,
    pub lib_trace_off_at: Vec<LibAim>,
    /// System mode: the same six for guest files' functions, each the file's guest path
    /// and the function's offset in it (`file_filter=HEXPATH.OFFSET:…`, `file_notrace=`,
    /// `file_stop_at=`, `file_start_at=`, `file_trace_on_at=`, `file_trace_off_at=`), found
    /// where a process maps the file (`state::file_aims`).
    pub file_aims: FileAims,
    /// User mode, a position-independent program: the same six lists for its functions,
    /// at link addresses (`pie_filter=`…), and its link entry point (`pie_entry=`), which
    /// place them once it runs (`aims`).
    pub pie: Option<Pie>,
    /// User mode, an exec'd image: the pidfd of `record` the image before it watched
    /// (`lifecycle::record_watch`).
    pub record_pidfd: Option<i32>,
    /// System mode, Linux: the kernel functions where guest processes map files, exec and
    /// start (the plugin's `handlers::procmaps`), and where the fields read there are (boxed: rarely
    /// given, and the configuration is moved around whole).
    pub proc_watch: Option<Box<(Watch, Offsets)>>,
    /// System mode, Linux, with `proc_watch`: where kernel modules load and go, and the
    /// fields read there (`mod_watch=LOAD:FREE[:MODULES:LIST],mod_offsets=…`:
    /// `handlers::modules`; `MODULES` the list head's address, 0 where not known, `LIST`
    /// `module.list`'s offset: read at a switch on).
    pub mod_watch: Option<Box<ModWatch>>,
    /// System mode, Linux, with `proc_watch`: the kernel's `munmap` syscall wrapper and
    /// where its `struct pt_regs` keeps the address and the length
    /// (`munmap_watch=ADDR:START_OFF:LEN_OFF`: `handlers::procmaps`).
    pub munmap_watch: Option<[u64; 3]>,
    /// System mode, Linux: the kernel's `PAGE_SIZE` (`kernel_page=BYTES`, 4 KiB unless
    /// given), the unit of a mapping's `pgoff`: 16 or 64 KiB on an arm64 kernel built so.
    pub kernel_page: u64,
    /// System mode, Linux, with `proc_watch`: `init_task`'s address (0: not known) and the
    /// fields read to list processes and their mappings at a switch on (`proc_walk=INIT:TASKS:…`:
    /// `handlers::proc_walk`, `engine::linux_walk`).
    pub proc_walk: Option<Box<(u64, qemu_uftrace_engine::linux_walk::Layout)>>,
    /// The guest's function entries, written by the CLI before QEMU starts: direct jumps
    /// into another function's entry are shown as calls (`entries`).
    pub entries: Option<PathBuf>,
    /// `entries_file=`: the list is still being written by the CLI as QEMU starts (a
    /// kernel's symbols), and waited for at the first translation.
    pub entries_later: bool,
    /// User mode: the shared libraries' function entries, still being written by the CLI
    /// as QEMU starts (`lib_entries=`, `state::lib_entries`).
    pub lib_entries: Option<PathBuf>,
    /// The run starts mid-way (`-loadvm`, `-incoming`): each vCPU's first instruction
    /// saves a stack cookie (`resume=on`).
    pub resume: bool,
    /// System mode, Linux: where the CLI writes the kernel's anchor for finding its
    /// randomised base (`kaslr_file=`, `state::kaslr`).
    pub kaslr_file: Option<PathBuf>,
    /// Tracing starts off (`trace=off`): switched on from `switch=`'s file or a
    /// `trace_on_at=` function (`handlers::switch`).
    pub trace_off: bool,
    /// The file `record` writes `on` or `off` into to switch tracing while the guest runs.
    pub switch_file: Option<PathBuf>,
    /// Functions whose entry switches tracing on (`trace_on_at=`), and off.
    pub trace_on_at: Vec<u64>,
    pub trace_off_at: Vec<u64>,
    /// `-A`/`-R`: the functions whose values are read (`args_file=FILE`, `state::args`).
    pub args_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// How records are timed: guest instructions retired, or host nanoseconds.
pub enum ClockKind {
    Insn,
    Wall,
}

impl ClockKind {
    pub fn name(self) -> &'static str {
        match self {
            ClockKind::Insn => "insn",
            ClockKind::Wall => "wall",
        }
    }
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
    /// Boxed: the configuration is large, the probe's variant empty.
    Record(Box<Config>),
}

/// A switch: `on` or `off`.
fn on_off(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{key}={value}: expected on or off")),
    }
}

/// A byte offset in the guest's task structure, below a bound no such structure reaches.
fn task_offset(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse::<u64>()
        .ok()
        .filter(|&o| o < qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
        .ok_or_else(|| format!("{key}={value}: expected a byte offset"))
}

// System mode, Linux: the kernel points `handlers::procmaps` watches.

/// The watched functions' entry addresses (`proc_watch=MMAP:EXEC:NEWTASK:EXIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    pub mmap_region: u64,
    pub begin_new_exec: u64,
    pub wake_up_new_task: u64,
    pub do_exit: u64,
}

/// Where the fields read are (`proc_offsets=TGID:FILE_DENTRY:D_NAME:D_PARENT`):
/// `task_struct.tgid`, `file.f_path.dentry`, `dentry.d_name.name`, `dentry.d_parent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub tgid: u64,
    pub file_dentry: u64,
    pub d_name: u64,
    pub d_parent: u64,
}

fn numbers<const N: usize>(key: &str, value: &str) -> Result<[u64; N], String> {
    let parts: Vec<u64> = value
        .split(':')
        .map(str::parse::<u64>)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{key}={value}: expected {N} numbers separated by ':'"))?;
    parts
        .try_into()
        .map_err(|_| format!("{key}={value}: expected {N} numbers separated by ':'"))
}

impl Watch {
    pub fn parse(value: &str) -> Result<Watch, String> {
        let [mmap_region, begin_new_exec, wake_up_new_task, do_exit] =
            numbers("proc_watch", value)?;
        Ok(Watch {
            mmap_region,
            begin_new_exec,
            wake_up_new_task,
            do_exit,
        })
    }
}

impl Offsets {
    pub fn parse(value: &str) -> Result<Offsets, String> {
        let [tgid, file_dentry, d_name, d_parent] = numbers("proc_offsets", value)?;
        // Bounded like the other structure offsets: a wild one would read far off.
        if [tgid, file_dentry, d_name, d_parent]
            .iter()
            .any(|&o| o >= qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
        {
            return Err(format!("proc_offsets={value}: expected byte offsets"));
        }
        Ok(Offsets {
            tgid,
            file_dentry,
            d_name,
            d_parent,
        })
    }
}

/// System mode, Linux: where kernel modules load and go, and the fields read there
/// (`mod_watch=LOAD:FREE,mod_offsets=…`, given with `proc_watch=`), for `handlers::modules`:
/// `do_init_module` and `free_module`'s entry addresses, and the struct offsets read there:
/// `module.name`, `module.kallsyms`, `mod_kallsyms.{symtab,num_symtab,strtab}`, and the text
/// of the module's core and init layouts (`module.core_layout.base`, `.text_size`, and the
/// same for `init_layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModWatch {
    pub load: u64,
    pub free: u64,
    /// The `modules` list head (0: not known) and `module.list`'s offset.
    pub modules: u64,
    pub list: u64,
    pub name: u64,
    pub kallsyms: u64,
    pub symtab: u64,
    pub num_symtab: u64,
    pub strtab: u64,
    pub core_base: u64,
    pub core_text: u64,
    pub init_base: u64,
    pub init_text: u64,
}

impl ModWatch {
    /// `watch` is `mod_watch=`'s value, `offsets` `mod_offsets=`'s.
    pub fn parse(watch: &str, offsets: &str) -> Result<ModWatch, String> {
        let [load, free, modules, list] = match numbers::<4>("mod_watch", watch) {
            Ok(n) => n,
            Err(_) => {
                let [load, free] = numbers("mod_watch", watch)?;
                [load, free, 0, 0]
            }
        };
        if list >= qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET {
            return Err(format!("mod_watch={watch}: expected an offset last"));
        }
        let o: [u64; 9] = numbers("mod_offsets", offsets)?;
        // Bounded like the other structure offsets: a wild one would read far off.
        if o.iter()
            .any(|&o| o >= qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
        {
            return Err(format!("mod_offsets={offsets}: expected byte offsets"));
        }
        let [name, kallsyms, symtab, num_symtab, strtab, core_base, core_text, init_base, init_text] =
            o;
        Ok(ModWatch {
            load,
            free,
            modules,
            list,
            name,
            kallsyms,
            symtab,
            num_symtab,
            strtab,
            core_base,
            core_text,
            init_base,
            init_text,
        })
    }
}

/// A shared library's function: its file's device and inode, its link address.
pub type LibAim = (u64, u64, u64);

/// A function of a guest file (`state::file_aims`): the file's guest path (as the
/// process-map watch renders it) and the function's offset in the file.
pub type FileAim = (String, u64);

/// The guest files' functions, by what names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileAims {
    pub filter: Vec<FileAim>,
    pub notrace: Vec<FileAim>,
    pub stop_at: Vec<FileAim>,
    pub start_at: Vec<FileAim>,
    pub trace_on_at: Vec<FileAim>,
    pub trace_off_at: Vec<FileAim>,
}

/// `DEV.INO.ADDR:…` (hex each).
fn lib_aims(key: &str, value: &str) -> Result<Vec<LibAim>, String> {
    let hex = |a: &str| u64::from_str_radix(a, 16).ok();
    value
        .split(':')
        .map(|aim| {
            let mut w = aim.split('.');
            let aim = (hex(w.next()?)?, hex(w.next()?)?, hex(w.next()?)?);
            w.next().is_none().then_some(aim)
        })
        .collect::<Option<Vec<LibAim>>>()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{key}={value}: expected DEV.INO.ADDR:DEV.INO.ADDR… (hex)"))
}

/// Parses `HEXPATH.OFFSET:HEXPATH.OFFSET…` (the path's bytes in hex, as the process-map
/// watch renders a path: escaped, so always UTF-8).
fn guest_file_aims(key: &str, value: &str) -> Result<Vec<FileAim>, String> {
    let one = |aim: &str| -> Option<FileAim> {
        let (path, offset) = aim.split_once('.')?;
        Some((hex_path(path)?, u64::from_str_radix(offset, 16).ok()?))
    };
    value
        .split(':')
        .map(one)
        .collect::<Option<Vec<FileAim>>>()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{key}={value}: expected HEXPATH.OFFSET:HEXPATH.OFFSET… (hex)"))
}

/// A guest path written as the hex of its bytes (as the CLI renders a guest file's path:
/// any byte but `/` and NUL may be in it); `None` where it is not one, or not absolute.
pub fn hex_path(hex: &str) -> Option<String> {
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok().filter(|p| p.starts_with('/'))
}

/// `ADDR:ADDR…`, hex.
fn addresses(key: &str, value: &str) -> Result<Vec<u64>, String> {
    value
        .split(':')
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .collect::<Option<Vec<u64>>>()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{key}={value}: expected hex addresses ADDR:ADDR…"))
}

/// Parses `key=value` arguments; errors are one line for QEMU to print.
pub fn parse(raw: &[OsString]) -> Result<Mode, String> {
    let mut out = None;
    let mut clock = ClockChoice::Auto;
    let mut split_levels = false;
    let mut task_comm = None;
    let mut task_pid = None;
    let mut task_tgid = None;
    let mut task_state = None;
    let mut task_slot = None;
    let mut task_slot_file = None;
    let mut max_depth = qemu_uftrace_format::MAX_STACK as usize;
    let mut proc_key = None;
    let mut user_opts = None;
    let mut one_arena = false;
    let mut untraced = false;
    let mut tsc = None;
    let mut max_size = None;
    let mut max_size_exit = false;
    let mut record_pidfd = None;
    let mut proc_watch = None;
    let mut proc_offsets = None;
    let mut mod_watch: Option<String> = None;
    let mut mod_offsets: Option<String> = None;
    let mut munmap_watch: Option<[u64; 3]> = None;
    let mut kernel_page = 4096;
    let mut proc_walk = None;
    let mut entries = None;
    let mut entries_later = false;
    let mut lib_entries = None;
    let mut resume = false;
    let mut kaslr_file = None;
    let mut max_size_file = None;
    let mut trace_off = false;
    let mut switch_file = None;
    let mut trace_on_at = Vec::new();
    let mut trace_off_at = Vec::new();
    let mut args_file = None;
    let mut stop_at = Vec::new();
    let mut stop_at_exit = false;
    let mut start_at = Vec::new();
    let mut keep_last = None;
    let mut filter = Vec::new();
    let mut notrace = Vec::new();
    let (mut lib_filter, mut lib_notrace) = (Vec::new(), Vec::new());
    let (mut lib_stop_at, mut lib_start_at) = (Vec::new(), Vec::new());
    let (mut lib_trace_on_at, mut lib_trace_off_at) = (Vec::new(), Vec::new());
    let mut file_aims = FileAims::default();
    let mut time_filter = 0;
    let mut pie_entry = None;
    let mut pie = Aims::default();
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
            "split_levels" => split_levels = on_off("split_levels", value)?,
            "task_comm" => task_comm = Some(task_offset("task_comm", value)?),
            "task_pid" => task_pid = Some(task_offset("task_pid", value)?),
            "task_tgid" => task_tgid = Some(task_offset("task_tgid", value)?),
            "task_state" => task_state = Some(task_offset("task_state", value)?),
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
            "lib_entries" => {
                lib_entries = (!raw_value.is_empty()).then(|| PathBuf::from(raw_value))
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
            "one_arena" => one_arena = on_off("one_arena", value)?,
            "untraced" => untraced = on_off("untraced", value)?,
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
            "max_size" => {
                max_size = Some(
                    value
                        .parse::<u64>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| {
                            format!("max_size={value}: expected a byte count above 0")
                        })?,
                )
            }
            "max_size_exit" => max_size_exit = on_off("max_size_exit", value)?,
            "stop_at" => stop_at = addresses(&key, value)?,
            "start_at" => start_at = addresses(&key, value)?,
            "filter" => filter = addresses(&key, value)?,
            "notrace" => notrace = addresses(&key, value)?,
            "lib_filter" => lib_filter = lib_aims(&key, value)?,
            "lib_notrace" => lib_notrace = lib_aims(&key, value)?,
            "lib_stop_at" => lib_stop_at = lib_aims(&key, value)?,
            "lib_start_at" => lib_start_at = lib_aims(&key, value)?,
            "lib_trace_on_at" => lib_trace_on_at = lib_aims(&key, value)?,
            "lib_trace_off_at" => lib_trace_off_at = lib_aims(&key, value)?,
            "file_filter" => file_aims.filter = guest_file_aims(&key, value)?,
            "file_notrace" => file_aims.notrace = guest_file_aims(&key, value)?,
            "file_stop_at" => file_aims.stop_at = guest_file_aims(&key, value)?,
            "file_start_at" => file_aims.start_at = guest_file_aims(&key, value)?,
            "file_trace_on_at" => file_aims.trace_on_at = guest_file_aims(&key, value)?,
            "file_trace_off_at" => file_aims.trace_off_at = guest_file_aims(&key, value)?,
            "time_filter" => {
                time_filter = value
                    .parse::<u64>()
                    .map_err(|_| format!("time_filter={value}: expected a whole number"))?
            }
            "pie_entry" => pie_entry = Some(addresses(&key, value)?[0]),
            "pie_filter" => pie.filter = addresses(&key, value)?,
            "pie_notrace" => pie.notrace = addresses(&key, value)?,
            "pie_stop_at" => pie.stop_at = addresses(&key, value)?,
            "pie_start_at" => pie.start_at = addresses(&key, value)?,
            "pie_trace_on_at" => pie.trace_on_at = addresses(&key, value)?,
            "pie_trace_off_at" => pie.trace_off_at = addresses(&key, value)?,
            "keep_last" => {
                keep_last = Some(
                    value
                        .parse::<u64>()
                        .ok()
                        .filter(|&n| n >= qemu_uftrace_format::record::RECORD_SIZE as u64)
                        .ok_or_else(|| format!("keep_last={value}: expected a byte count"))?,
                )
            }
            "stop_at_exit" => stop_at_exit = on_off("stop_at_exit", value)?,
            "record_pidfd" => {
                record_pidfd = Some(
                    value
                        .parse::<i32>()
                        .ok()
                        .filter(|&fd| fd >= 0)
                        .ok_or_else(|| format!("record_pidfd={value}: expected a descriptor"))?,
                )
            }
            "proc_watch" => proc_watch = Some(Watch::parse(value)?),
            "proc_offsets" => proc_offsets = Some(Offsets::parse(value)?),
            "mod_watch" => mod_watch = Some(value.to_string()),
            "mod_offsets" => mod_offsets = Some(value.to_string()),
            "munmap_watch" => {
                let w: [u64; 3] = numbers("munmap_watch", value)?;
                // Bounded like the other structure offsets: a wild one would read far off.
                if w[1..]
                    .iter()
                    .any(|&o| o >= qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
                {
                    return Err(format!("munmap_watch={value}: expected byte offsets"));
                }
                munmap_watch = Some(w);
            }
            "kernel_page" => {
                kernel_page = value
                    .parse::<u64>()
                    .ok()
                    .filter(|p| matches!(p, 4096 | 16384 | 65536))
                    .ok_or_else(|| format!("kernel_page={value}: expected 4096, 16384 or 65536"))?;
            }
            "proc_walk" => {
                let n: [u64; 17] = numbers("proc_walk", value)?;
                // Bounded like the other structure offsets: a wild one would read far off.
                if n[1..]
                    .iter()
                    .any(|&o| o >= qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
                {
                    return Err(format!(
                        "proc_walk={value}: expected an address, then byte offsets"
                    ));
                }
                let mut layout = [0; 16];
                layout.copy_from_slice(&n[1..]);
                proc_walk = Some(Box::new((
                    n[0],
                    qemu_uftrace_engine::linux_walk::Layout::from_numbers(layout),
                )));
            }
            "resume" => resume = on_off("resume", value)?,
            "kaslr_file" => kaslr_file = Some(PathBuf::from(raw_value)),
            "max_size_file" => max_size_file = Some(PathBuf::from(raw_value)),
            "trace" => trace_off = !on_off("trace", value)?,
            "switch" => switch_file = Some(PathBuf::from(raw_value)),
            "trace_on_at" => trace_on_at = addresses(&key, value)?,
            "trace_off_at" => trace_off_at = addresses(&key, value)?,
            "args_file" => args_file = Some(PathBuf::from(raw_value)),
            _ => return Err(format!("unknown argument {key:?}")),
        }
    }
    let out = out.ok_or("missing out=DIR")?;
    let proc_watch = match (proc_watch, proc_offsets) {
        (Some(w), Some(o)) => Some(Box::new((w, o))),
        (None, None) => None,
        _ => return Err("proc_watch=… and proc_offsets=… go together".into()),
    };
    let mod_watch = match (mod_watch, mod_offsets) {
        (Some(w), Some(o)) if proc_watch.is_some() => Some(Box::new(ModWatch::parse(&w, &o)?)),
        (None, None) => None,
        _ => return Err("mod_watch=… and mod_offsets=… go together, with proc_watch=…".into()),
    };
    if munmap_watch.is_some() && proc_watch.is_none() {
        return Err("munmap_watch=… goes with proc_watch=…".into());
    }
    if proc_walk.is_some() && proc_watch.is_none() {
        return Err("proc_walk=… goes with proc_watch=…".into());
    }
    let pie = match pie_entry {
        Some(entry) => Some(Pie { entry, aims: pie }),
        None if pie.is_empty() => None,
        None => return Err("pie_filter=… and the like need pie_entry=ADDR".into()),
    };
    if max_size_exit && max_size.is_none() {
        return Err("max_size_exit=on needs max_size=BYTES".into());
    }
    if max_size_file.is_some() && max_size.is_none() {
        return Err("max_size_file=FILE needs max_size=BYTES".into());
    }
    Ok(Mode::Record(Box::new(Config {
        out,
        clock,
        max_depth,
        split_levels,
        task_comm,
        task_pid,
        task_tgid,
        task_state,
        proc_key,
        user_opts,
        one_arena,
        untraced,
        task_slot,
        task_slot_file,
        tsc,
        max_size,
        max_size_exit,
        max_size_file,
        record_pidfd,
        proc_watch,
        mod_watch,
        munmap_watch,
        kernel_page,
        proc_walk,
        entries,
        entries_later,
        lib_entries,
        resume,
        kaslr_file,
        trace_off,
        switch_file,
        trace_on_at,
        trace_off_at,
        stop_at,
        stop_at_exit,
        start_at,
        keep_last,
        filter,
        notrace,
        lib_filter,
        lib_notrace,
        lib_stop_at,
        lib_start_at,
        lib_trace_on_at,
        lib_trace_off_at,
        file_aims,
        time_filter,
        pie,
        args_file,
    })))
}
