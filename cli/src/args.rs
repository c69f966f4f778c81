//! The command-line surface, as clap definitions (also the source of the man pages and
//! shell completions).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Default trace directory, as uftrace's.
pub const DEFAULT_DIR: &str = "uftrace.data";

#[derive(Debug, Parser)]
#[command(
    name = "qemu-uftrace",
    version,
    about = "Record every guest function call and return under QEMU TCG, for uftrace",
    long_about = "Record every guest function call and return under QEMU TCG and leave a \
        uftrace.data/ directory that uftrace (0.13 and newer) replays, reports and graphs with \
        function names.\n\n\
        qemu-uftrace record -- qemu-system-aarch64 -M virt -cpu cortex-a57 -m 1G -nographic \
        -no-reboot -kernel ~/.cache/qemu-uftrace/kernel/vmlinuz -append \
        \"console=ttyAMA0 nokaslr panic=-1\"\n\
        qemu-uftrace replay\n\n\
        Under -nographic the terminal is the guest's console: Ctrl-C goes to the guest, \
        Ctrl-A x stops QEMU.",
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per run: a large variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a QEMU command with the tracing plugin and write a uftrace data directory
    Record(RecordArgs),
    /// Add or replace function symbols of a trace directory from ELF files, System.map,
    /// kallsyms dumps or kernel images
    Symbols(SymbolsArgs),
    /// Show the recorded calls in time order (uftrace replay)
    Replay(UftraceArgs),
    /// Show per-function totals (uftrace report)
    Report(UftraceArgs),
    /// Show the call graph (uftrace graph)
    Graph(UftraceArgs),
    /// Browse the trace interactively (uftrace tui)
    Tui(UftraceArgs),
    /// Dump the raw records, or convert them, e.g. `dump --chrome` (uftrace dump)
    Dump(UftraceArgs),
    /// Show what was recorded, when and how (uftrace info)
    Info(UftraceArgs),
    /// Write the trace in Perfetto's protobuf format, for ui.perfetto.dev
    Export(ExportArgs),
    /// Check the QEMUs on PATH (or the ones named) and uftrace: versions, plugin API,
    /// plugin support, exception reporting; exits non-zero when recording cannot work
    Doctor(DoctorArgs),
    /// Show how a recording is going (events, size, rate, tasks, LOST), from another
    /// terminal while it runs, or how the one that wrote DIR ended
    Status(StatusArgs),
    /// Switch tracing on or off in a recording that runs (started with --trace=off, or
    /// switched off before), from another terminal
    Trace(TraceArgs),
    /// Print a shell completion script
    Completions(CompletionsArgs),
}

/// The clock that stamps records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Clock {
    /// `insn` on a machine with one vCPU, `wall` with several and in user mode
    Auto,
    /// Guest instructions executed: deterministic; uftrace prints these counts in its time
    /// columns (shown as ns, read "instructions"). With several vCPUs each counts its own:
    /// times are not comparable across vCPUs, and a task's times only never go back
    Insn,
    /// Host wall-clock nanoseconds: real durations, including the emulation's slowness (in
    /// user mode read every 1,024 guest instructions, after system calls and after
    /// translating new code; the instructions in between advance it, so every record's
    /// time moves)
    Wall,
}

impl Clock {
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Auto => "auto",
            Clock::Insn => "insn",
            Clock::Wall => "wall",
        }
    }
}

/// What to show right after recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Then {
    Replay,
    Report,
    Graph,
    Tui,
    /// Write `<DIR>.pftrace` for Perfetto (as `qemu-uftrace export -d DIR` does)
    Export,
}

impl Then {
    pub fn subcommand(self) -> &'static str {
        match self {
            Then::Replay => "replay",
            Then::Report => "report",
            Then::Graph => "graph",
            Then::Tui => "tui",
            Then::Export => "export",
        }
    }
}

/// `record -h`: how to stop QEMU and two examples, after one line an option; `--help` and the
/// man page say the rest.
const RECORD_HELP: &str =
    "Under -nographic the terminal is the guest's serial console: Ctrl-C goes \
        to the guest, Ctrl-A x stops QEMU (the trace is complete up to there); SIGINT or SIGTERM \
        sent to record (kill -INT, timeout -s INT) stops it too.\n\n\
        Examples:\n  qemu-uftrace record -- qemu-system-aarch64 -M virt -cpu cortex-a57 -m 1G \
        -nographic -no-reboot -kernel ~/.cache/qemu-uftrace/kernel/vmlinuz -append \
        \"console=ttyAMA0 nokaslr panic=-1\"\n  \
        qemu-uftrace record --then report -- qemu-aarch64 -L ~/.cache/qemu-uftrace/arm64-libc \
        ~/.cache/qemu-uftrace/sqlite3/aarch64/sqlite3 :memory: \"select 6*7\"";

/// `record --help` and its man page: the short help's examples, where symbols come from,
/// stopping a kernel; the counts are the man page's own section (`man::pages`).
fn record_long_help() -> String {
    format!(
        "Symbols are read from the guest images named on the QEMU command line (-kernel, \
         -bios, -device loader,file=ELF) and from every --symbols source. In user mode \
         (qemu-aarch64, qemu-x86_64, qemu-riscv64: a build with plugin support) they come \
         from the program, its dynamic loader and every shared library where the guest mapped \
         them, looked up under -L or QEMU_LD_PREFIX; a stripped file's separate debug file is \
         found by build ID or .gnu_debuglink (beside it, in .debug/, under usr/lib/debug of / \
         or of the sysroot it lies in).\n\n\
         A Linux kernel that panics spins in its panic loop, recording hundreds of MB a \
         second, unless booted with panic=-1 and QEMU run with -no-reboot.\n\n\
         {RECORD_HELP}\n\n\
         What each count at the end of a recording means: man qemu-uftrace-record (COUNTS)."
    )
}

#[derive(Debug, Args)]
#[command(
    after_help = RECORD_HELP,
    after_long_help = record_long_help()
)]
pub struct RecordArgs {
    /// Trace directory to write (an existing one is moved to DIR.old)
    #[arg(short, long, value_name = "DIR", default_value = DEFAULT_DIR)]
    pub output: PathBuf,

    /// Timestamp source: guest instructions or host nanoseconds
    ///
    /// `insn` counts guest instructions (deterministic; uftrace's time columns then show
    /// instruction counts), `wall` uses host nanoseconds (one timeline across vCPUs), `auto`
    /// takes `insn` with one vCPU and `wall` with several
    #[arg(long, value_enum, default_value_t = Clock::Auto)]
    pub clock: Clock,

    /// One uftrace task per privilege level of each guest context
    ///
    /// aarch64: EL3, EL2, EL1, EL0, Secure or not; as QEMU's own plugin does with
    /// trace-privilege-level=on. Needs a QEMU that reports exceptions to plugins (10.2 or
    /// newer)
    #[arg(long)]
    pub split_levels: bool,

    /// Extra symbols: ELF, System.map, kallsyms, kernel image; repeatable
    ///
    /// An ELF file, a System.map, a kallsyms dump or a kernel image. Loaded at OFFSET (hex with
    /// 0x, or decimal) when given. A Linux vmlinux with DWARF
    /// adds source lines; the guest's tasks are named from the kernel's DWARF, else from its
    /// own BTF (in the -kernel image or a vmlinux; otherwise pid-N). A kernel module's
    /// debug file (NAME.ko with DWARF), or a directory of them (a -dbg package's
    /// /usr/lib/debug/lib/modules/RELEASE), adds source lines to the functions of the module
    /// NAME the guest loads
    #[arg(long = "symbols", value_name = "FILE[:OFFSET]")]
    pub symbols: Vec<OsString>,

    /// The Linux guest's root file system, to name its processes
    ///
    /// System mode. Extracted or mounted: where the files the guest's processes map are found
    /// (after the
    /// -initrd archive) to name their functions; needs the kernel's BTF (in its -kernel
    /// image) or its DWARF vmlinux among
    /// --symbols. Its usr/lib/debug/lib/modules (a -dbg package's, any release) gives the
    /// guest's kernel modules their source lines, as --symbols' do
    #[arg(long, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,

    /// Do not read symbols from the QEMU command line's images
    ///
    /// --symbols still apply
    #[arg(long)]
    pub no_auto_symbols: bool,

    /// User mode: leave the host's address randomisation on for QEMU
    ///
    /// By default QEMU runs with it off, as gdb runs a program: the guest's libraries land
    /// at the same addresses in every run, so --clock insn counts the same instructions
    /// (the dynamic loader's work depends on where things are) and unnamed addresses
    /// compare between traces
    #[arg(long)]
    pub aslr: bool,

    /// Use this QEMU plugin instead of the one built into qemu-uftrace
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<PathBuf>,

    /// Do not record calls nested deeper than N (uftrace's -D/--depth)
    ///
    /// With -F, counted from each filtered function
    #[arg(short = 'D', long, visible_alias = "depth", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=i64::from(qemu_uftrace_format::MAX_STACK)))]
    pub max_depth: Option<u16>,

    /// Stop writing at SIZE (500M, 2G); `,exit` stops QEMU too
    ///
    /// SIZE in powers of 1024, as QEMU's -m; the trace is marked incomplete, and the exit
    /// status stays QEMU's. One cap for the whole trace: in user mode the guest's forked and
    /// exec'd processes take from it too (their files ~20 KiB each; those started once it is
    /// reached run untraced, and are counted). Without it the cap is 4 GiB, or half the free disk
    /// space when that is less (QEMU runs on, and record exits 1 if it is reached); `none`
    /// sets no cap
    #[arg(long, value_name = "SIZE[,exit]", value_parser = crate::max_size::parse)]
    pub max_size: Option<crate::max_size::MaxSize>,

    /// Do not show the recording's progress in the terminal's title
    ///
    /// It is shown there, never as text, when stderr is a terminal; `qemu-uftrace status`
    /// shows it anywhere
    #[arg(short, long)]
    pub quiet: bool,

    /// End the trace at the first entry into FUNC; `,exit` stops QEMU too
    ///
    /// FUNC e.g. `panic`. Any task's entry; the symbols on the command line and --symbols name
    /// FUNC (in user mode the program's shared libraries too, as for -F). System mode, a
    /// Linux guest: PATH:FUNC is a function of the guest's file PATH, found under --sysroot
    /// and wherever a process maps it (a stripped program's main from its _start)
    #[arg(long, value_name = "FUNC[,exit]", value_parser = crate::stop_at::parse)]
    pub stop_at: Option<crate::stop_at::StopAt>,

    /// Begin the trace at the first entry into FUNC
    ///
    /// Any task's entry; each task's frames open then are written first, as entries at the
    /// times they were entered, so that the replay nests. PATH:FUNC (system mode, a Linux
    /// guest): a function of the guest's file PATH, e.g.
    /// /lib/systemd/systemd-journald:main, as for --stop-at
    #[arg(long, value_name = "FUNC")]
    pub start_at: Option<String>,

    /// Flight recorder: keep only the last SIZE of records
    ///
    /// All vCPUs together; 8M, 1G: powers of 1024. Written when QEMU exits (Ctrl-A x,
    /// SIGINT or SIGTERM to record, --stop-at …,exit); the frames open at the window's start
    /// are written first, as entries
    #[arg(long, value_name = "SIZE", value_parser = crate::max_size::parse_size)]
    pub keep_last: Option<u64>,

    /// Start with tracing off (uftrace's --trace=off)
    ///
    /// QEMU runs at nearly its own speed until tracing is switched on (QEMU 10.2 and newer,
    /// where a vCPU's next interrupt is the moment to switch: ~1.05x; before 10.2 every block
    /// listens for the switch, ~1.1x). By `qemu-uftrace trace on|off` from another terminal,
    /// --signal or --trace-on-at, any
    /// number of times; at each switch on every task's open frames are recovered by
    /// unwinding and written first (ended by a qemu:opened event), at each switch off they
    /// are closed, and qemu:trace_on/qemu:trace_off events mark the edges. Started off, the
    /// default clock is wall time: --clock insn keeps counting while off (a count a block),
    /// so that windows keep a full recording's times
    #[arg(long, value_enum, value_name = "on|off", hide_possible_values = true)]
    pub trace: Option<OnOff>,

    /// Switch tracing at a signal: SIG@trace_on|trace_off; repeatable
    ///
    /// A signal sent to record, as uftrace's --signal takes it, e.g. SIGUSR1@trace_on
    #[arg(long = "signal", value_name = "SIG@ACTION", value_parser = parse_signal)]
    pub signal: Vec<SignalAction>,

    /// Switch tracing on at each entry into FUNC; repeatable
    ///
    /// Each opens a window, until --trace-off-at or `qemu-uftrace trace off`, at FUNC's first
    /// instruction: FUNC is in its window as uftrace's trace_on trigger has it, among the
    /// opened frames with the calls it was called from (other vCPUs switch where the block
    /// they run ends). In user mode FUNC may be a position-independent program's or a
    /// shared library's, placed where the guest maps it; in system mode (a Linux guest)
    /// PATH:FUNC, a guest file's, as for --start-at
    #[arg(long, value_name = "FUNC")]
    pub trace_on_at: Vec<String>,

    /// Switch tracing off at each entry into FUNC; repeatable
    ///
    /// Each closes the window at FUNC's first instruction: FUNC's entry is its last record
    /// (as --stop-at's), and the frames open there close (other vCPUs switch where the block
    /// they run ends). In user mode FUNC may be a position-independent program's or a
    /// shared library's; in system mode (a Linux guest) PATH:FUNC, a guest file's
    #[arg(long, value_name = "FUNC")]
    pub trace_off_at: Vec<String>,

    /// Record only FUNC and what it calls (uftrace's -F); repeatable
    ///
    /// FUNC's calls and everything beneath them. Per task. FUNC is a function name, or a
    /// regular expression when it holds one of
    /// .?*+^$|()[]{}\ (matched anywhere in a name, e.g. '^sys_'); exceptions taken inside
    /// stay in. In user mode FUNC may be a shared library's (malloc, or a function libc
    /// calls only inside itself), placed where the guest maps the library. In system mode
    /// (a Linux guest) PATH:FUNC is a guest file's, as for --start-at, in every process
    /// that maps the file (e.g. /usr/lib/systemd/systemd-journald:main); its FUNC alone may
    /// be a regular expression
    #[arg(short = 'F', long, value_name = "FUNC")]
    pub filter: Vec<String>,

    /// Leave FUNC and what it calls out (uftrace's -N); repeatable
    ///
    /// FUNC and everything beneath it; FUNC as for -F
    #[arg(short = 'N', long, value_name = "FUNC")]
    pub notrace: Vec<String>,

    /// Leave out calls shorter than TIME (uftrace's -t)
    ///
    /// Their longer ancestors are kept. TIME as uftrace replay -t reads it: a bare number is
    /// ns, or 10us, 1.5ms, 2s; under
    /// the insn clock uftrace's ns are instructions, so -t 100 keeps calls of 100
    /// instructions or more. Frames still open when the recording ends are written. A kept
    /// call keeps its -A/-R/-a values; a left-out one takes them along
    #[arg(short = 't', long, value_name = "TIME", value_parser = parse_time_filter, allow_hyphen_values = true)]
    pub time_filter: Option<u64>,

    /// FUNC's arguments (uftrace's -A): FUNC@arg1/s,arg2/x32; repeatable
    ///
    /// FUNC as for -F, or in user mode a shared library's function (getenv@arg1/s), or in
    /// system mode (a Linux guest) a guest file's as PATH:FUNC (/worker:step@arg1/d), read
    /// in every process that maps the file. Each value argN (arg1 to arg32; past the calling convention's
    /// registers, x86_64 arg6 and aarch64 and riscv64 arg8, read from the stack) with a format: d (default), i, u, x, o,
    /// s (a string, read from guest memory: at most 98 bytes, <0x…> where it cannot be
    /// read), c, p or f, and a size of 8, 16, 32 or 64 bits. Floating-point values are
    /// numbered apart, as the conventions pass them: fparg2 (or arg2/f) is the second
    /// float or double, /f32 a float (fparg1 to fparg8: xmm0-7, v0-7, fa0-7).
    /// uftrace replay shows f(1, "x", 1.500000)
    #[arg(short = 'A', long = "argument", value_name = "SPEC")]
    pub argument: Vec<String>,

    /// FUNC's return value (uftrace's -R): FUNC@retval/d; repeatable
    ///
    /// FUNC@retval[/FORMAT], FUNC and the formats as -A's. Read at FUNC's return instructions
    /// (its symbol's size must be known; one that leaves by a tail call, at its callee's, but
    /// not a guest file's PATH:FUNC); uftrace
    /// replay shows } = 3; /* f */
    #[arg(short = 'R', long = "retval", value_name = "SPEC")]
    pub retval: Vec<String>,

    /// Each function's arguments and return value by DWARF (uftrace's -a)
    ///
    /// By the function's DWARF types. For the functions of the program and its shared
    /// libraries (user mode: a stripped one's from its debug file, found by build ID, e.g.
    /// Debian's libc6-dbg; a call through the program's PLT gets the library function's) or
    /// of the ELF files given as -kernel or --symbols that have DWARF: integers by size and sign, char * as strings, other
    /// pointers in hex, named enums by name (other enums and bool as integers), float and
    /// double as such; a function taking a struct by value or a long double is left out. -A/-R win where they
    /// name a function (-A for its arguments, -R for its return value). Every typed function
    /// but those -N names, however many (a whole kernel's 37 k: uftrace finds each one's
    /// values in the trace's .dbg files, as uftrace record -a writes them); with -F, the
    /// callees it records get theirs too. The kernel's syscall wrappers get their syscall's
    /// arguments, as a bare -A WRAPPER
    #[arg(short = 'a', long = "auto-args")]
    pub auto_args: bool,

    /// uftrace's -r/--time-range selects by time when a trace is shown, not recorded:
    /// refused, with the way to it
    #[arg(short = 'r', long, value_name = "START~STOP", hide = true)]
    pub time_range: Option<String>,

    /// Run this uftrace command on the new trace when recording ends
    #[arg(long, value_enum, value_name = "VIEW")]
    pub then: Option<Then>,

    /// The QEMU command line to run, after `--`
    #[arg(last = true, value_name = "QEMU_COMMAND", allow_hyphen_values = true)]
    pub qemu_command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct SymbolsArgs {
    /// Trace directory to update (one `record` wrote)
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,

    /// Write the symbol files into a DIR that holds no trace (created when missing), for
    /// `uftrace --with-syms DIR`
    #[arg(long)]
    pub syms_only: bool,

    /// Write names as IMAGE:NAME, to tell images apart in uftrace's output
    #[arg(long)]
    pub prefix: bool,

    /// Demangle C++ and Rust names
    #[arg(long)]
    pub demangle: bool,

    /// Symbol sources: ELF, System.map, kallsyms dump or kernel image, each optionally
    /// followed by :OFFSET, the address it was loaded at relative to its link address (a
    /// kernel given without one is moved by the random base the recording found, KASLR).
    /// A kernel module's debug file (NAME.ko with DWARF, or a directory of them) adds source
    /// lines to the functions of the module NAME the recording named
    #[arg(value_name = "SOURCE[:OFFSET]", required = true)]
    pub sources: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct UftraceArgs {
    /// Trace directory to read
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,

    /// Options passed to uftrace as they are, e.g. `-F start_kernel -D 3` (put them after
    /// `--` if one could be taken for ours)
    #[arg(
        value_name = "UFTRACE_ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..
    )]
    pub uftrace_args: Vec<OsString>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "One slice per call, exception entry and scheduler gap on a thread track per \
        task, grouped into processes (the guest's; a kernel's idle contexts; each vCPU's \
        firmware); LOST records, guessed stacks and the cut of an incomplete trace are instant \
        events. With --clock insn the timeline counts guest instructions (shown as ns), and the \
        trace says so in its `clock` attribute and track. The packets are written in \
        zlib-compressed bundles (TracePacket.compressed_packets, as Perfetto's traced writes \
        them), which Perfetto's UI and trace processor read as they are.\n\n\
        Examples:\n  qemu-uftrace export -d uftrace.data -o boot.pftrace\n  \
        qemu-uftrace export --no-compress -o plain.pftrace"
)]
pub struct ExportArgs {
    /// Trace directory to read
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,

    /// File to write, `-` for standard output (default: DIR.pftrace, DIR.pftrace.gz with
    /// --gzip); a name ending in .gz is gzip-compressed
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Compress with gzip (Perfetto's UI opens .gz traces as they are)
    #[arg(long)]
    pub gzip: bool,

    /// Write the packets plain, not in the zlib-compressed bundles (TracePacket
    /// compressed_packets, as Perfetto's traced writes them) that Perfetto's tools inflate,
    /// for a reader that does not
    #[arg(long)]
    pub no_compress: bool,

    /// Give each function's slices its source file and line, from the trace's .dbg files
    /// (recorded with DWARF symbols); a few bytes more per call
    #[arg(long)]
    pub srcline: bool,
}

impl ExportArgs {
    pub fn options(&self) -> crate::export::Options {
        crate::export::Options {
            dir: self.dir.clone(),
            output: self.output.clone(),
            gzip: self.gzip,
            no_compress: self.no_compress,
            srcline: self.srcline,
        }
    }
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  qemu-uftrace doctor\n  qemu-uftrace doctor /opt/qemu/bin/qemu-system-aarch64"
)]
pub struct DoctorArgs {
    /// QEMU emulators to check (names on PATH or paths); default: every qemu-system-<arch>
    /// and qemu-<arch> on PATH
    #[arg(value_name = "QEMU")]
    pub qemus: Vec<OsString>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example, from another terminal while a recording into boot.data runs (its -o \
        boot.data):\n  qemu-uftrace status -w boot.data"
)]
pub struct StatusArgs {
    /// The trace directory the recording writes (its -o DIR)
    #[arg(value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,

    /// Show it again every second until the recording ends
    #[arg(short, long)]
    pub watch: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example, from another terminal while a recording started with --trace=off into \
                  boot.data runs:\n  qemu-uftrace trace on -d boot.data\n  qemu-uftrace trace off -d boot.data"
)]
pub struct TraceArgs {
    /// Switch tracing on or off
    #[arg(value_enum, value_name = "on|off")]
    pub state: OnOff,

    /// The trace directory the recording writes (its -o DIR); without it, the one
    /// recording that runs in this directory
    #[arg(short = 'd', long = "data", value_name = "DIR")]
    pub data: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print completions for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The clap command, for tests, man pages and completions.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// `-t TIME`: uftrace's units, in ns (or instructions, under the insn clock).
fn parse_time_filter(text: &str) -> Result<u64, String> {
    qemu_uftrace_engine::timefilter::parse_time(text).map_err(|e| e.to_string())
}

// Tracing switched while the guest runs (`qemu-uftrace trace`): the values its options take.

/// A tracing state, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn word(self) -> &'static str {
        match self {
            OnOff::On => "on",
            OnOff::Off => "off",
        }
    }

    pub fn from_word(word: &str) -> Option<OnOff> {
        match word.trim() {
            "on" => Some(OnOff::On),
            "off" => Some(OnOff::Off),
            _ => None,
        }
    }
}

/// `--signal SIG@trace_on` (or `@trace_off`), as uftrace's `record --signal` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalAction {
    pub signal: i32,
    pub to: OnOff,
}

/// Parses `SIG@trace_on|trace_off` (clap's value parser): SIG is a name (`SIGUSR1`, `USR1`)
/// or a number.
pub fn parse_signal(text: &str) -> Result<SignalAction, String> {
    let Some((sig, action)) = text.split_once('@') else {
        return Err(format!(
            "'{text}': expected SIG@trace_on or SIG@trace_off (e.g. SIGUSR1@trace_on)"
        ));
    };
    let to = match action {
        "trace_on" => OnOff::On,
        "trace_off" => OnOff::Off,
        other => {
            return Err(format!(
                "'{other}': the actions are trace_on and trace_off (e.g. SIGUSR1@trace_on)"
            ))
        }
    };
    let upper = sig.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let signal = match name {
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "WINCH" => libc::SIGWINCH,
        "URG" => libc::SIGURG,
        "PWR" => libc::SIGPWR,
        _ => match sig.parse::<i32>() {
            Ok(n) if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&n) => n,
            _ => {
                return Err(format!(
                    "'{sig}': use SIGUSR1, SIGUSR2, SIGWINCH, SIGURG, SIGPWR or a real-time \
                     signal number (INT, TERM and HUP stop the recording)"
                ))
            }
        },
    };
    Ok(SignalAction { signal, to })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_takes_it_before_the_qemu_command() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "qemu-uftrace",
            "record",
            "--max-size",
            "2G,exit",
            "--",
            "qemu-system-aarch64",
        ])
        .unwrap();
        let Command::Record(r) = cli.command else {
            panic!("not record")
        };
        assert!(
            matches!(r.max_size, Some(crate::max_size::MaxSize::Cap(crate::max_size::Cap { bytes, exit: true, .. })) if bytes == 2 << 30)
        );
        let e = Cli::try_parse_from(["qemu-uftrace", "record", "--max-size", "2X"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("'2X' is not a size"), "{e}");
    }
}
