//! `qemu-uftrace record`: check the QEMU command, run it with the plugin into a staging
//! directory, then assemble and publish the trace directory.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use qemu_uftrace_symbols::Arch;

use crate::args::RecordArgs;
use crate::datadir::{self, Assembled, Recording};
use crate::errors::{fail, note, usage, warn};
use crate::kernel_alias;
use crate::qemu::{self, Emulator, GuestImage};
use crate::qemu_checks::{self, PluginChoice, Qemu};
use crate::run_qemu::{self, QemuExit};
use crate::stats::Stats;
use crate::symbol_source::{self, BackgroundLoad, Loaded, SourceArg};

/// The time-stamp counter and CLOCK_MONOTONIC as the CLI started (x86-64 hosts): the plugin
/// calibrates its wall clock over the CLI's start-up instead of sleeping for it.
static START: std::sync::OnceLock<Option<qemu_uftrace_engine::tsc::TscSample>> =
    std::sync::OnceLock::new();

/// Takes the start sample; first thing in `main`.
pub fn note_start() {
    START.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        return Some(qemu_uftrace_engine::tsc::TscSample::now());
        #[cfg(not(target_arch = "x86_64"))]
        None
    });
}

/// Runs the subcommand; returns our exit status. `typed` is our whole command line.
pub fn run(mut args: RecordArgs, typed: &[OsString]) -> Result<i32> {
    // `-o dir/` names `dir`: its staging directory is `dir.partial`, not `dir/.partial`.
    args.output = args.output.components().collect();
    let argv = &args.qemu_command;
    if argv.is_empty() || argv[0].is_empty() {
        return Err(usage(
            "no QEMU command given",
            "put it after --, e.g. qemu-uftrace record -- qemu-system-aarch64 -M virt -kernel Image",
        ));
    }
    // The cheap checks on what was typed come first.
    let emulator = qemu::detect_emulator(&argv[0])?;
    let extra_sources = args
        .symbols
        .iter()
        .map(|s| symbol_source::parse_source_arg(s, "--symbols"))
        .collect::<Result<Vec<_>>>()?;

    let staging = datadir::create_staging(&args.output)?;
    let outcome = record_into(&args, typed, &staging, emulator, extra_sources);
    if outcome.is_err() {
        remove_if_empty(&staging);
    }
    outcome
}

/// Removes a staging directory that holds no recorded byte (a failed start).
fn remove_if_empty(staging: &Path) {
    let empty = datadir::dat_files(staging)
        .map(|d| d.iter().all(|&(_, len)| len == 0))
        .unwrap_or(false);
    if empty {
        let _ = std::fs::remove_dir_all(staging);
    }
}

fn plugin_choice(args: &RecordArgs) -> Result<PluginChoice> {
    match &args.plugin {
        Some(p) if p.is_file() => Ok(PluginChoice::Given(
            std::path::absolute(p).unwrap_or_else(|_| p.clone()),
        )),
        Some(p) => Err(usage(
            format!("--plugin {}: no such file", p.display()),
            "give the path of a built libqemu_uftrace_plugin.so, or leave --plugin out",
        )),
        None => Ok(PluginChoice::Embedded),
    }
}

fn record_into(
    args: &RecordArgs,
    typed: &[OsString],
    staging: &Path,
    emulator: Emulator,
    extra_sources: Vec<SourceArg>,
) -> Result<i32> {
    let argv = &args.qemu_command;
    let mode = emulator.mode;
    // User mode: QEMU's options end at the program, whose own arguments follow.
    let (opts, program, user_opts) = match mode {
        qemu::Mode::System => (qemu::options(&argv[1..]), None, None),
        qemu::Mode::User => {
            let cmd = qemu::user::user_command(&argv[1..]);
            (cmd.opts, Some(cmd.program), Some(cmd.opt_words))
        }
    };
    let (qemu, guest_arch) =
        qemu_checks::preflight(&argv[0], emulator, &opts, &plugin_choice(args)?)?;
    let images = match program {
        None => qemu::guest_images(&opts, qemu::file_is_elf),
        Some(program) => {
            let name = Path::new(&argv[0])
                .file_name()
                .unwrap_or(argv[0].as_os_str())
                .to_string_lossy()
                .into_owned();
            vec![qemu::user::check_program(
                program.as_ref(),
                &name,
                guest_arch,
            )?]
        }
    };
    // User mode: where the program and its libraries landed is known once it ran.
    let user_mode = mode == qemu::Mode::User;
    let mut sources = symbol_sources(
        extra_sources,
        if user_mode { &[] } else { &images },
        args.no_auto_symbols,
    );
    let loader = (!user_mode).then(|| {
        start_symbol_files(
            &sources,
            &images,
            &opts,
            staging,
            guest_arch,
            Default::default(),
        )
    });

    let abs_staging = std::path::absolute(staging).unwrap_or_else(|_| staging.to_path_buf());
    let mut plugin_opt =
        qemu::plugin_option(&qemu.plugin, &abs_staging, args.clock, args.max_depth);
    if let Some(start) = START.get().copied().flatten() {
        plugin_opt.push(format!(",tsc={}", start.to_arg()));
    }
    if args.split_levels {
        if !qemu.probe.discontinuity {
            return Err(usage(
                format!(
                    "--split-levels needs a QEMU that reports exceptions to plugins (10.2 or \
                     newer), and {} does not",
                    argv[0].to_string_lossy()
                ),
                "use a newer QEMU or record without --split-levels",
            ));
        }
        plugin_opt.push(",split_levels=on");
    }
    // Names for the guest's tasks when a source has the kernel's DWARF (else `pid-N`), and
    // where their PIDs are for a guest with no PID register (else synthetic ids).
    if let Some(offset) = symbol_source::task_comm_offset(&sources) {
        plugin_opt.push(format!(",task_comm={offset}"));
    }
    if let Some(offset) = symbol_source::task_pid_offset(&sources) {
        plugin_opt.push(format!(",task_pid={offset}"));
    }
    // User mode: the plugin runs QEMU again with these options for a program the guest
    // execs (`qemu::user_procs`).
    if let Some(n) = user_opts {
        plugin_opt.push(format!(",user_opts={n}"));
    }
    // Where the kernel keeps its running task, when in per-CPU memory (x86_64), from the
    // kernel image.
    let kernel = images
        .iter()
        .find(|i| i.origin == qemu::ImageOrigin::Kernel);
    let slot_names = qemu_uftrace_engine::arch::isa(guest_arch).task_slot_symbols();
    // Found while QEMU starts (decompressing a bzImage takes ~0.1 s); the plugin waits for
    // the file only once the kernel proper runs.
    let slot_file = abs_staging.join(".task_slot");
    let mut slot_job = None;
    if let (qemu::Mode::System, Some(kernel), false) = (mode, kernel, slot_names.is_empty()) {
        let kernel = kernel.path.clone();
        let file = slot_file.clone();
        slot_job = Some(std::thread::spawn(move || {
            let text = symbol_source::task_slot(&kernel, slot_names)
                .map_or(String::new(), |s| s.to_string());
            let tmp = file.with_extension("tmp");
            // Written aside and renamed: the plugin never reads half a number.
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &file);
            }
        }));
        plugin_opt.push(",task_slot_file=");
        plugin_opt.push(qemu::escape_keyval(slot_file.as_os_str()));
    }
    // The guest's function entries, for jumps into them (tail calls): a kernel's are read
    // while QEMU starts (the plugin waits for them where the kernel proper starts), others
    // before.
    let entries_file = abs_staging.join(".entries");
    let mut entries_job = None;
    if !user_mode && !sources.is_empty() {
        let (sources, opts, file) = (sources.clone(), opts.clone(), entries_file.clone());
        let kernel_path = kernel.map(|k| k.path.clone());
        let later = kernel_path.is_some();
        let job = move || {
            let text =
                crate::entries::system_text(&sources, kernel_path.as_deref(), &opts, guest_arch);
            crate::entries::write_atomically(&file, &text)
        };
        let key = if later {
            entries_job = Some(std::thread::spawn(job));
            Some(",entries_file=")
        } else {
            job().then_some(",entries=")
        };
        if let Some(key) = key {
            plugin_opt.push(key);
            plugin_opt.push(qemu::escape_keyval(entries_file.as_os_str()));
        }
    }
    if let (true, Some(program), false) = (user_mode, images.first(), args.no_auto_symbols) {
        let rebase = qemu::user::Elf::read(&program.path)
            .filter(|e| e.relocatable)
            .map(|e| e.entry);
        if crate::entries::write_for_program(&program.path, guest_arch, rebase, &entries_file) {
            plugin_opt.push(",entries=");
            plugin_opt.push(qemu::escape_keyval(entries_file.as_os_str()));
        }
    }
    let full = qemu::with_plugin(argv, plugin_opt);
    let started = SystemTime::now();
    // User mode: the guest's other processes (forked, exec'd) may outlive the first QEMU;
    // SIGTERM and SIGHUP reach them too, from QEMU's start to the end of the wait.
    let others = user_mode
        .then(crate::signal_scope::SignalScope::others)
        .transpose()?;
    // User mode: the program's files are read while it runs, at offset 0; where they were
    // loaded is known once it ran.
    let preload = match (user_mode, images.first(), args.no_auto_symbols) {
        (true, Some(program), false) => {
            let root = qemu::user_maps::sysroot(&opts);
            let program = program.path.clone();
            let files =
                move || qemu::user_maps::expected_images(&program, root.as_deref(), guest_arch);
            Some(symbol_source::preload(files, Some(guest_arch)))
        }
        _ => None,
    };
    let exit = run_qemu::run(&qemu.path, &full[1..]);
    let procs = if user_mode {
        qemu::user_procs::wait_all(staging, others.as_ref());
        qemu::user_procs::list(staging)
    } else {
        Vec::new()
    };
    drop(others);
    // Not part of the trace (joined first: a QEMU that failed at once may beat it).
    if let Some(job) = slot_job {
        let _ = job.join();
    }
    let _ = std::fs::remove_file(&slot_file);
    if let Some(job) = entries_job {
        let _ = job.join();
    }
    let _ = std::fs::remove_file(&entries_file);
    let loader = loader.unwrap_or_else(|| {
        if let (Some(program), false) = (images.first(), args.no_auto_symbols) {
            let maps = qemu::user_maps::read(staging).unwrap_or_default();
            let root = qemu::user_maps::sysroot(&opts);
            for s in qemu::user_maps::sources(&program.path, root.as_deref(), &maps) {
                if !sources.iter().any(|t| t.path == s.path) {
                    sources.push(s);
                }
            }
        }
        let preloaded = preload.and_then(|p| p.join().ok()).unwrap_or_default();
        start_symbol_files(&sources, &images, &opts, staging, guest_arch, preloaded)
    });
    // Joined whatever QEMU did: the thread writes into the staging directory.
    let symbols = loader.join().unwrap_or_else(|| {
        // A panic in a loader costs the names, never the recorded trace.
        warn("the symbol loader crashed; the trace has no function names");
        SymbolJob::default()
    });
    let exit = exit?;
    if !datadir::has_records(staging) {
        // Whatever went wrong, check this QEMU afresh next time.
        qemu.forget_probe();
        // `run` removes the empty staging directory on this error.
        return Err(match exit.complaint().filter(|_| exit.failed()) {
            // QEMU refused its command line (a machine, CPU or device it does not know, a
            // file it cannot load): its own words name the problem.
            Some(complaint) => fail(
                format!(
                    "QEMU {} before recording anything: {complaint}",
                    exit.describe()
                ),
                "fix the QEMU command line (QEMU's messages are above)",
            ),
            None => fail(
                format!("no call or return was recorded: QEMU {}", exit.describe()),
                "check QEMU's messages above (the guest must run under TCG)",
            ),
        });
    }
    let user = user_processes(&procs, staging, &opts, guest_arch, args.no_auto_symbols);
    for line in &user.failures {
        warn(line);
    }
    let stats = Stats::read(staging).map_err(|e| {
        fail(
            format!(
                "cannot read the plugin's statistics in {}: {e}",
                staging.display()
            ),
            "the recorded data is still there",
        )
    })?;
    // The guest's other processes count in what was recorded (their own completeness is
    // in `user.problems`).
    let stats = stats.map(|mut s| {
        let threads = s.tids.len();
        for p in &user.stats {
            s.events += p.events;
            s.calls += p.calls;
            s.returns += p.returns;
            s.bytes += p.bytes;
            s.tids.extend(&p.tids);
        }
        // A thread that exec'd is one thread in two images.
        s.tids.sort_unstable();
        s.tids.dedup();
        let more = s.tids.len().saturating_sub(threads) as u32;
        s.vcpus = s.vcpus.map(|v| v + more);
        s
    });
    let spinner = spinner(&args.output);
    for line in &symbols.failures {
        warn(line);
    }
    let rec = Recording {
        exename: exename(&images, &qemu.path),
        cmdline: shell_join(typed),
        wait_status: exit.wait_status,
        cpu_desc: cpu_desc(&qemu, guest_arch),
        memory: qemu::memory(&opts),
        started,
        elapsed: exit.elapsed,
        stats: stats.clone(),
        later_processes: user.task_lines,
        later_tids: user.tids,
    };
    let assembled = symbols
        .files
        .and_then(|files| datadir::assemble(staging, rec, files));
    if let Some(s) = &spinner {
        s.finish_and_clear();
    }
    let assembled = assembled.map_err(|e| {
        e.context(format!(
            "cannot assemble the trace (the raw data stays in {})",
            staging.display()
        ))
    })?;
    for why in &user.problems {
        warn(format!("INCOMPLETE TRACE: {why}"));
    }
    let incomplete = stats
        .as_ref()
        .and_then(Stats::incomplete_reason)
        .into_iter()
        .chain(user.problems)
        .reduce(|a, b| format!("{a}; {b}"));
    if stats.is_none() {
        datadir::mark_incomplete(
            staging,
            &format!(
                "QEMU {} before the qemu-uftrace plugin flushed its buffers",
                exit.describe()
            ),
        )?;
    } else if let Some(why) = &incomplete {
        datadir::mark_incomplete(staging, why)?;
    }
    let old = datadir::publish(staging, &args.output)?;
    if let Some(hint) = symbols.kaslr {
        warn(hint);
    }
    summary(
        args,
        &exit,
        stats.as_ref(),
        &assembled,
        old.as_deref(),
        sources.is_empty(),
    );

    let mut code = exit.exit_code;
    if incomplete.is_some() && code == 0 {
        // The trace is published for what it holds, but it is not all the guest did.
        code = 1;
    }
    if let Some(then) = args.then {
        let then_code = crate::uftrace_cmd::run(then.subcommand(), &args.output, &[])?;
        if code == 0 {
            code = then_code;
        }
    }
    Ok(code)
}

/// What the guest's processes after the first add to a user-mode trace.
#[derive(Default)]
struct UserProcesses {
    /// Their `task.txt` lines (FORK, and SESS and TASK for an exec'd program).
    task_lines: Vec<qemu_uftrace_format::task::Later>,
    /// The threads they recorded, which the first process's session does not hold.
    tids: Vec<u32>,
    /// Why their part of the trace is not complete.
    problems: Vec<String>,
    /// What their plugins reported.
    stats: Vec<Stats>,
    failures: Vec<String>,
}

/// Each exec'd program gets its session's map and symbols (its own image, loader and
/// libraries, where it mapped them); each process image tells whether it wrote all.
fn user_processes(
    procs: &[qemu::user_procs::Proc],
    staging: &Path,
    opts: &[qemu::QemuOption],
    arch: Arch,
    no_auto_symbols: bool,
) -> UserProcesses {
    use qemu::user_procs::Kind;
    let mut out = UserProcesses::default();
    let root = qemu::user_maps::sysroot(opts);
    let mut sids = std::collections::HashMap::new();
    for p in procs {
        let what = match &p.kind {
            Kind::Fork { .. } => format!("forked process {}", p.pid),
            Kind::Exec { exe } => format!("process {} ({})", p.pid, exe.display()),
        };
        match Stats::read(&p.dir) {
            Ok(Some(s)) => {
                if let Some(why) = s.incomplete_reason() {
                    out.problems.push(format!("{what}: {why}"));
                }
                out.stats.push(s);
            }
            _ => out.problems.push(format!(
                "{what} ended before the qemu-uftrace plugin flushed its buffers"
            )),
        }
        if let Kind::Exec { exe } = &p.kind {
            let sources = if no_auto_symbols {
                Vec::new()
            } else {
                let maps = qemu::user_maps::read(&p.dir).unwrap_or_default();
                qemu::user_maps::sources(exe, root.as_deref(), &maps)
            };
            let mut images = Vec::new();
            for l in symbol_source::load_all(&sources, Some(arch), false) {
                match l {
                    Loaded::Ok(_, img) => images.push(img),
                    Loaded::Failed(src, why) => out.failures.push(format!(
                        "no symbols from {} ({}): {why}",
                        src.path.display(),
                        src.origin
                    )),
                }
            }
            match datadir::write_symbols(staging, images) {
                Ok(files) => {
                    sids.insert(p.dir.clone(), files.sid);
                }
                Err(e) => out.failures.push(format!("{what}: no symbols: {e:#}")),
            }
        }
    }
    let tids_of = |p: &qemu::user_procs::Proc| -> Vec<u32> {
        crate::guest_tasks::read(&p.dir)
            .iter()
            .map(|t| t.tid)
            .collect()
    };
    out.task_lines = qemu::user_procs::task_lines(procs, |p| sids.get(&p.dir).cloned(), tids_of);
    // A process's first thread is the process (a child killed before it wrote its task
    // list still has it).
    out.tids = procs
        .iter()
        .flat_map(|p| tids_of(p).into_iter().chain([p.pid]))
        .collect();
    out
}

/// `--symbols` sources first (the user's choice wins an overlap), then the images on the
/// QEMU command line, without repeating a file.
fn symbol_sources(extra: Vec<SourceArg>, images: &[GuestImage], no_auto: bool) -> Vec<SourceArg> {
    let mut out = extra;
    if !no_auto {
        for img in images {
            if !out.iter().any(|s| s.path == img.path) {
                out.push(SourceArg {
                    path: img.path.clone(),
                    offset: 0,
                    origin: img.origin.option(),
                });
            }
        }
    }
    out
}

/// A Linux kernel given with -kernel randomizes its base (KASLR) unless told not to, and
/// then none of its symbols match: say how to turn it off.
fn kaslr_hint(loaded: &[Loaded], opts: &[qemu::QemuOption]) -> Option<String> {
    let linux_kernel = loaded.iter().any(|l| match l {
        Loaded::Ok(src, img) => {
            src.origin == qemu::ImageOrigin::Kernel.option()
                && img.functions.iter().any(|f| f.name == "start_kernel")
        }
        Loaded::Failed(..) => false,
    });
    let said = |name: &str, needle: &str| {
        opts.iter().any(|o| {
            o.name == name
                && o.value
                    .as_ref()
                    .is_some_and(|v| v.to_string_lossy().contains(needle))
        })
    };
    let off = said("append", "nokaslr")
        || said("M", "dtb-kaslr-seed=off")
        || said("machine", "dtb-kaslr-seed=off");
    (linux_kernel && !off).then(|| {
        "the guest kernel picks a random base address (KASLR) unless booted with nokaslr, \
         and then its symbols do not match; add nokaslr to -append"
            .to_string()
    })
}

/// What the symbol thread did while QEMU ran.
struct SymbolJob {
    /// One line per source that gave nothing, shown once QEMU is done with the terminal.
    failures: Vec<String>,
    kaslr: Option<String>,
    files: Result<datadir::SymbolFiles>,
}

impl Default for SymbolJob {
    /// No symbols at all: the trace still gets its session.
    fn default() -> Self {
        SymbolJob {
            failures: Vec::new(),
            kaslr: None,
            files: Ok(datadir::SymbolFiles {
                sid: datadir::new_session_id(),
                ..Default::default()
            }),
        }
    }
}

/// Loads the symbol sources and writes the trace's symbol files into `staging`, in a
/// low-priority thread while QEMU runs: none of it depends on the run.
fn start_symbol_files(
    sources: &[SourceArg],
    images: &[GuestImage],
    opts: &[qemu::QemuOption],
    staging: &Path,
    arch: Arch,
    preloaded: symbol_source::Preloaded,
) -> BackgroundLoad<SymbolJob> {
    let kernel = images
        .iter()
        .find(|i| i.origin == qemu::ImageOrigin::Kernel)
        .map(|k| k.path.clone());
    let opts = opts.to_vec();
    let staging = staging.to_path_buf();
    BackgroundLoad::start(sources.to_vec(), Some(arch), preloaded, move |loaded| {
        let kaslr = kaslr_hint(&loaded, &opts);
        let mut images = Vec::new();
        let mut failures = Vec::new();
        for l in loaded {
            match l {
                Loaded::Ok(_, img) => images.push(img),
                Loaded::Failed(src, why) => failures.push(format!(
                    "no symbols from {} ({}): {why}",
                    src.path.display(),
                    src.origin
                )),
            }
        }
        if let Some(alias) = kernel.and_then(|k| kernel_alias::physical_alias(&images, &k, &opts)) {
            images.push(alias);
        }
        SymbolJob {
            failures,
            kaslr,
            files: datadir::write_symbols(&staging, images),
        }
    })
}

fn exename(images: &[GuestImage], qemu: &Path) -> String {
    let p = images.first().map(|i| i.path.as_path()).unwrap_or(qemu);
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// uftrace picks the architecture from the description's first word.
fn cpu_desc(q: &Qemu, arch: Arch) -> String {
    format!(
        "{} (QEMU TCG, {}, plugin API {})",
        arch.uftrace_cpu_desc(),
        q.describe(),
        q.probe.plugin_api
    )
}

/// Joins words so that a shell would split them back the same way. A word that is not
/// UTF-8 (a file name) is written `$'…\xNN…'` (bash, zsh, ksh and POSIX sh from 2024), so
/// that a command we print can still be pasted.
pub fn shell_join(words: &[OsString]) -> String {
    words
        .iter()
        .map(|w| match w.to_str() {
            Some(s) => {
                let plain = !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c));
                if plain {
                    s.to_string()
                } else {
                    format!("'{}'", s.replace('\'', r"'\''"))
                }
            }
            None => {
                use std::os::unix::ffi::OsStrExt;
                let mut out = String::from("$'");
                for &b in w.as_bytes() {
                    match b {
                        b'\'' | b'\\' => out.push_str(&format!("\\{}", b as char)),
                        0x20..=0x7e => out.push(b as char),
                        _ => out.push_str(&format!("\\x{b:02x}")),
                    }
                }
                out.push('\'');
                out
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn spinner(output: &Path) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_message(format!("assembling {}", output.display()));
    pb.enable_steady_tick(Duration::from_millis(100));
    Some(pb)
}

fn summary(
    args: &RecordArgs,
    exit: &QemuExit,
    stats: Option<&Stats>,
    done: &Assembled,
    old: Option<&Path>,
    no_sources: bool,
) {
    let secs = exit.elapsed.as_secs_f64();
    let out = args.output.display();
    match stats {
        Some(s) => {
            let rate = if secs > 0.0 {
                format!(", {} events/s", group(s.events as f64 / secs))
            } else {
                String::new()
            };
            let unwritten = if s.lost_records > 0 {
                format!(", {} of them not written", group(s.lost_records as f64))
            } else {
                String::new()
            };
            let count = |key: &str| s.other_count(key);
            let tasks = match count("tasks") {
                Some(n) if n > 1 => format!(", {} tasks", group(n as f64)),
                _ => String::new(),
            };
            let exceptions = match (count("exceptions_shown"), count("exceptions")) {
                (Some(1), Some(n)) => format!(", {} exceptions and interrupts", group(n as f64)),
                _ => String::new(),
            };
            // User mode runs each guest thread on a vCPU of its own.
            let unit = if s.is_user_mode() { "thread" } else { "vCPU" };
            let tasks = if s.is_user_mode() {
                String::new()
            } else {
                tasks
            };
            note(format!(
                "recorded {} events ({} calls, {} returns{unwritten}) on {} {unit}{}{tasks}{exceptions}: {} in {secs:.2} s{rate}",
                group(s.events as f64),
                group(s.calls as f64),
                group(s.returns as f64),
                s.vcpus.unwrap_or(done.tids.len() as u32),
                if s.vcpus == Some(1) { "" } else { "s" },
                bytes(s.bytes.max(done.bytes)),
            ));
            if count("exceptions_shown") == Some(0) {
                note(
                    "exceptions and interrupts are not shown as entries: this QEMU does not \
                     report them to plugins (10.2 and newer do); their handlers' calls nest \
                     where they ran",
                );
            }
            let oddities: Vec<String> = [
                ("resyncs", s.resyncs),
                ("unmatched returns", s.unmatched_returns),
                ("depth-cap hits", s.depth_cap_hits),
            ]
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(what, n)| format!("{what}: {}", group(*n as f64)))
            .chain(
                s.other
                    .iter()
                    .filter(|(k, v)| worth_showing(s, k, v))
                    .map(|(k, v)| format!("{k}: {v}")),
            )
            .collect();
            if !oddities.is_empty() {
                note(format!("plugin also reports {}", oddities.join(", ")));
            }
            if let Some(why) = s.incomplete_reason() {
                warn(format!("INCOMPLETE TRACE: {why}"));
            }
        }
        None => {
            warn(format!(
                "INCOMPLETE TRACE: QEMU {} before the plugin flushed its buffers (no {}); \
                 kept {} of records from {} vCPU file{}, but the last calls of each are missing",
                exit.describe(),
                crate::stats::STATS_FILE,
                bytes(done.bytes),
                done.tids.len(),
                if done.tids.len() == 1 { "" } else { "s" },
            ));
        }
    }
    if !done.missing_tids.is_empty() {
        warn(format!(
            "no data file for task(s) {:?} that the plugin listed",
            done.missing_tids
        ));
    }
    if done.trimmed_files > 0 {
        warn(format!(
            "cut a half-written record off the end of {} file(s)",
            done.trimmed_files
        ));
    }
    for s in &done.skipped {
        note(format!("symbols skipped: {s}"));
    }
    if no_sources {
        warn(
            "no symbol source: uftrace will show addresses instead of function names; \
             add --symbols FILE[:OFFSET] (e.g. the guest's vmlinux), or run \
             qemu-uftrace symbols -d DIR FILE later",
        );
    } else if done.placed.is_empty() {
        warn(
            "no symbols could be loaded: uftrace will show addresses; \
             fix the sources named above or add --symbols FILE[:OFFSET]",
        );
    }
    let old = old
        .map(|o| format!(" (the previous one is now {})", o.display()))
        .unwrap_or_default();
    let dir_arg = if args.output == Path::new(crate::args::DEFAULT_DIR) {
        String::new()
    } else {
        format!(
            " -d {}",
            crate::record::shell_join(&[args.output.clone().into()])
        )
    };
    note(format!(
        "wrote {out}{old}; look at it with: qemu-uftrace replay{dir_arg}"
    ));
    if stats.and_then(|s| s.clock.as_deref()) == Some("insn") {
        let vcpus = stats.and_then(|s| s.vcpus).unwrap_or(1);
        note(if vcpus > 1 {
            "clock=insn: uftrace's time columns count each vCPU's guest instructions, \
             not nanoseconds, and are not comparable across vCPUs"
        } else {
            "clock=insn: uftrace's time columns count guest instructions, not nanoseconds"
        });
    }
}

/// Unknown plugin statistics are shown as they are, except zeros and the per-vCPU
/// breakdown (`vcpu0.calls`) of totals that are shown anyway.
fn worth_showing(s: &Stats, key: &str, value: &str) -> bool {
    let per_vcpu_total = key
        .strip_prefix("vcpu")
        .and_then(|k| k.split_once('.'))
        .is_some_and(|(n, total)| {
            n.bytes().all(|b| b.is_ascii_digit())
                && (crate::stats::TOTALS.contains(&total)
                    || s.other.iter().any(|(k, _)| k == total))
        });
    // Settings echoed back by the plugin, and counts of its fast paths, are not findings.
    // The whole-system model's ordinary counts are in the summary line, not findings.
    let setting = matches!(
        key,
        "max_depth"
            | "discontinuity_api"
            | "eret_returns"
            | "plugin_api"
            | "qemu_api"
            | "tasks"
            | "switches"
            | "exceptions"
            | "exception_returns"
            | "exceptions_shown"
            | "split_levels"
            | "returns_unseen"
            | "open_frames"
            | "mode"
            | "jump_entries"
    );
    value != "0" && !per_vcpu_total && !setting
}

/// `1,234,567`.
fn group(n: f64) -> String {
    let s = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `19.8 MB`.
fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.1} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_join_quotes_when_needed() {
        let w: Vec<OsString> = [
            "qemu-uftrace",
            "-o",
            "a b",
            "it's",
            "-append",
            "console=ttyAMA0",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            shell_join(&w),
            r"qemu-uftrace -o 'a b' 'it'\''s' -append console=ttyAMA0"
        );
        use std::os::unix::ffi::OsStrExt;
        let raw = std::ffi::OsStr::from_bytes(b"t\xffr 'a\\b\n").to_os_string();
        assert_eq!(shell_join(&[raw]), r"$'t\xffr \'a\\b\x0a'");
    }

    #[test]
    fn kaslr_hint_only_for_linux_kernels_without_nokaslr() {
        let kernel = || {
            vec![Loaded::Ok(
                SourceArg {
                    path: "Image".into(),
                    offset: 0,
                    origin: "-kernel",
                },
                crate::symfiles::tests::image("Image", 0x1000, &[(0x1000, 4, "start_kernel")]),
            )]
        };
        let opts = |v: &[&str]| qemu::options(&v.iter().map(OsString::from).collect::<Vec<_>>());
        assert!(kaslr_hint(&kernel(), &opts(&["-append", "console=ttyAMA0"])).is_some());
        assert!(kaslr_hint(&kernel(), &opts(&["-append", "console=ttyAMA0 nokaslr"])).is_none());
        assert!(kaslr_hint(&kernel(), &opts(&["-M", "virt,dtb-kaslr-seed=off"])).is_none());
        let bare = vec![Loaded::Ok(
            SourceArg {
                path: "fw.elf".into(),
                offset: 0,
                origin: "-kernel",
            },
            crate::symfiles::tests::image("fw.elf", 0x1000, &[(0x1000, 4, "main")]),
        )];
        assert!(kaslr_hint(&bare, &opts(&[])).is_none());
    }

    #[test]
    fn per_vcpu_copies_of_totals_are_not_shown() {
        let s = Stats::parse("calls=3\nvcpu0.calls=3\nvcpu0.open_frames=2\nlost=1\nvcpu1.lost=1\n");
        assert!(!worth_showing(&s, "vcpu0.calls", "3"));
        assert!(worth_showing(&s, "vcpu0.open_frames", "2"));
        assert!(!worth_showing(&s, "vcpu1.lost", "1"));
        assert!(worth_showing(&s, "lost", "1"));
        assert!(!worth_showing(&s, "zero", "0"));
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(group(1234567.0), "1,234,567");
        assert_eq!(group(12.0), "12");
        assert_eq!(bytes(19_800_000), "19.8 MB");
    }

    #[test]
    fn user_symbols_come_first_and_files_are_not_repeated() {
        let extra = vec![SourceArg {
            path: "vmlinux".into(),
            offset: 0,
            origin: "--symbols",
        }];
        let images = [
            GuestImage {
                path: "vmlinux".into(),
                origin: qemu::ImageOrigin::Kernel,
            },
            GuestImage {
                path: "fw.elf".into(),
                origin: qemu::ImageOrigin::Loader,
            },
        ];
        let s = symbol_sources(extra.clone(), &images, false);
        let paths: Vec<&Path> = s.iter().map(|s| s.path.as_path()).collect();
        assert_eq!(paths, [Path::new("vmlinux"), Path::new("fw.elf")]);
        assert_eq!(symbol_sources(extra, &images, true).len(), 1);
    }
}
