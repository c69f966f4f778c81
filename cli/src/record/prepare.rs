//! Stage 2 of `record`: everything decided before QEMU starts. The checks on this QEMU and
//! its command line (in the order that makes the first failure the most useful), the plugin
//! it loads and the options it gets, and the jobs that run beside QEMU: the symbol files
//! (system mode), the program's expected files (user mode), the kernel's task slot.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use anyhow::Result;
use qemu_uftrace_symbols::Arch;

use crate::args::RecordArgs;
use crate::errors::usage;
use crate::max_size::{Cap, MaxSize};
use crate::qemu::{self, GuestImage, ImageOrigin, Mode};
use crate::qemu_checks::{self, PluginChoice, Qemu};
use crate::symbol_source::{self, BackgroundLoad, ReadOnce, SourceArg, ToRead};

use super::invocation::Invocation;
use super::kaslr;
use super::symbols::{self, SymbolContext, SymbolJob};

/// What the run and the assembly need from preparation.
pub struct Prepared {
    pub qemu: Qemu,
    pub arch: Arch,
    /// The guest images on the command line (user mode: the program).
    pub images: Vec<GuestImage>,
    /// The symbol sources known before the run (user mode adds the libraries after it).
    pub sources: Vec<SourceArg>,
    /// `sources`, read once by the first stage to need them (user mode: the names FUNCs
    /// resolve in, if any, before QEMU starts).
    pub read: ReadOnce,
    /// The command QEMU runs: the user's, with our `-plugin` option.
    pub command: Vec<OsString>,
    /// The size cap the plugin stops writing at.
    pub cap: Option<Cap>,
    /// `-F`/`-N`, resolved.
    pub filters: crate::filter::Filters,
    /// `-A`/`-R`, resolved.
    pub arg_specs: crate::argspec::ArgSpecs,
    /// User mode without `--aslr`: QEMU runs with the host's address randomisation off.
    pub fixed_layout: bool,
    /// With `fixed_layout`: QEMU's `GLIBC_TUNABLES` (`qemu_uftrace_engine::arena`).
    pub tunables: Option<OsString>,
    /// `-D`: the CLI applies it too, to windows switched on under `-F`/`-N`.
    pub max_depth: Option<u16>,
    /// Kernel modules' debug files (`--symbols`), for their source lines.
    pub module_debug: crate::guest_procs::module_debug::ModuleDebug,
}

/// The work that runs beside QEMU, joined by the run stage.
pub struct Jobs {
    /// System mode: the symbol files, written while QEMU runs.
    pub symbols: Option<BackgroundLoad<SymbolJob>>,
    /// User mode: the program's files read while it runs.
    pub preload: Option<BackgroundLoad<symbol_source::Preloaded>>,
    /// x86_64: where the kernel keeps its running task, found while QEMU starts.
    pub task_slot: Option<TaskSlot>,
    pub entries: Option<Entries>,
    /// User mode: the shared libraries' entries, written while QEMU starts.
    pub lib_entries: Option<Entries>,
}

/// The guest's function entries, for the jumps into them (tail calls), and the thread still
/// writing them (a kernel's: the plugin waits for them where the kernel proper starts).
pub struct Entries {
    pub file: PathBuf,
    /// Still being written as QEMU starts (`entries_file=`), else written (`entries=`).
    pub later: bool,
    pub job: Option<std::thread::JoinHandle<bool>>,
}

/// The thread that writes the task slot file the plugin waits for, and the file.
pub struct TaskSlot {
    pub job: JoinHandle<()>,
    pub file: PathBuf,
}

pub fn prepare(
    args: &RecordArgs,
    inv: &Invocation,
    staging: &Path,
    extra_sources: Vec<SourceArg>,
) -> Result<(Prepared, Jobs)> {
    let (qemu, arch) = qemu_checks::preflight(
        inv.argv0(),
        inv.emulator.clone(),
        &inv.opts,
        &plugin_choice(args)?,
    )?;
    let images = match &inv.user {
        None => inv.images.clone(),
        Some(user) => vec![qemu::user::check_program(
            user.program.as_ref(),
            &inv.name(),
            arch,
        )?],
    };
    if args.split_levels && !qemu.probe.discontinuity {
        return Err(usage(
            format!(
                "--split-levels needs a QEMU that reports exceptions to plugins (10.2 or \
                 newer), and {} does not",
                inv.argv0().to_string_lossy()
            ),
            "use a newer QEMU or record without --split-levels",
        ));
    }
    let kernel = images
        .iter()
        .find(|i| i.origin == ImageOrigin::Kernel)
        .map(|k| k.path.clone());
    let linux = inv.mode() == Mode::System && kernel.as_deref().is_some_and(kaslr::is_linux_kernel);
    // Kernel modules given to --symbols name no image: their debug files, by module name.
    let (extra_sources, module_debug) =
        crate::guest_procs::module_debug::ModuleDebug::take(extra_sources, inv.sysroot.as_deref())?;
    // User mode: where the program and its libraries landed is known once it ran.
    let sources = symbols::sources(
        extra_sources,
        if inv.is_user_mode() { &[] } else { &images },
        args.no_auto_symbols,
    );
    // A user who gave no cap gets one that keeps the disk from filling up.
    let cap = match &args.max_size {
        Some(MaxSize::Off) => None,
        Some(MaxSize::Cap(cap)) => Some(cap.clone()),
        None => crate::max_size::default_cap(staging),
    };
    // A panic that never ends QEMU records until the size cap (unless that stops QEMU):
    // said before the boot scrolls it away.
    let cap_stops_qemu = cap.as_ref().is_some_and(|c| c.exit);
    if let Some(why) = inv.panic_end.warning().filter(|_| linux && !cap_stops_qemu) {
        crate::errors::warn_early(why);
    }
    // User mode: the program's own functions, for its jump entries and the FUNCs below
    // (without automatic symbols they are not known either).
    let program = match (inv.is_user_mode(), images.first()) {
        (true, Some(p)) if !args.no_auto_symbols => {
            crate::entries::Program::read(&p.path, arch).map(|f| (p.path.clone(), f))
        }
        _ => None,
    };
    let wants_names = args.stop_at.is_some()
        || args.start_at.is_some()
        || !args.trace_on_at.is_empty()
        || !args.trace_off_at.is_empty()
        || !args.filter.is_empty()
        || !args.notrace.is_empty()
        || !args.argument.is_empty()
        || !args.retval.is_empty()
        || args.auto_args;
    // The kernel's struct layouts (its DWARF, else its own BTF), read once for the tasks'
    // names and the processes' watch: a system guest's only (user mode has no kernel tasks,
    // and would parse its --symbols files for nothing). Parsing a stock kernel's BTF takes
    // ~120 ms of CPU: beside the names, not before them.
    let layouts = (inv.mode() == Mode::System).then(|| {
        let sources = sources.clone();
        std::thread::spawn(move || symbol_source::kernel_layouts(&sources))
    });
    // The sources read once for the names, the entries and the symbol job alike.
    let read = ReadOnce::new(&sources, Some(arch));
    let mut names = if wants_names {
        crate::stop_at::Names::new(&read, (program.as_ref()).map(|(_, f)| (&f.image, f.rebase)))
    } else {
        Default::default()
    };
    // User mode: a FUNC of -F/-N, --stop-at/--start-at, --trace-on-at/--trace-off-at, -A or
    // -R may be a shared library's, placed where the guest maps it by the libraries' entries
    // (so not without them: `program` is then none).
    let lib_sizes = match &program {
        Some((path, _))
            if !(args.filter.is_empty()
                && args.notrace.is_empty()
                && args.stop_at.is_none()
                && args.start_at.is_none()
                && args.trace_on_at.is_empty()
                && args.trace_off_at.is_empty()
                && args.argument.is_empty()
                && args.retval.is_empty()
                && !args.auto_args) =>
        {
            let files = qemu::user_maps::expected_images(path, inv.sysroot.as_deref(), arch);
            names.add_libraries(files.get(1..).unwrap_or_default(), arch)
        }
        _ => Default::default(),
    };
    // PATH:FUNC, a guest file's function: system mode, from the guest's root.
    let mut triggers: Vec<(&str, &str)> = Vec::new();
    triggers.extend(args.filter.iter().map(|f| ("-F", f.as_str())));
    triggers.extend(args.notrace.iter().map(|f| ("-N", f.as_str())));
    triggers.extend(args.stop_at.iter().map(|s| ("--stop-at", s.func.as_str())));
    triggers.extend(args.start_at.iter().map(|f| ("--start-at", f.as_str())));
    triggers.extend(
        args.trace_on_at
            .iter()
            .map(|f| ("--trace-on-at", f.as_str())),
    );
    triggers.extend(
        args.trace_off_at
            .iter()
            .map(|f| ("--trace-off-at", f.as_str())),
    );
    // -A/-R's FUNC, before its `@`: a guest file's function's values too.
    fn spec_func(spec: &str) -> &str {
        spec.split_once('@').map_or(spec, |(f, _)| f)
    }
    triggers.extend(args.argument.iter().map(|s| ("-A", spec_func(s))));
    triggers.extend(args.retval.iter().map(|s| ("-R", spec_func(s))));
    crate::guest_functions::refused(&triggers, inv.is_user_mode())?;
    let initrd = inv.initrd();
    let root = crate::guest_functions::GuestRoot {
        sysroot: inv.sysroot.as_deref(),
        initrd: initrd.as_deref(),
        scratch: staging,
    };
    let file_sizes = crate::guest_functions::add(&mut names, &triggers, &root, arch)?;
    let stop_at = match &args.stop_at {
        Some(stop) => Some(crate::stop_at::resolve("--stop-at", &stop.func, &names)?),
        None => None,
    };
    let start_at = match &args.start_at {
        Some(func) => Some(crate::stop_at::resolve("--start-at", func, &names)?),
        None => None,
    };
    let trace_on_at = crate::switch::resolve("--trace-on-at", &args.trace_on_at, &names)?;
    let trace_off_at = crate::switch::resolve("--trace-off-at", &args.trace_off_at, &names)?;
    let filters = crate::filter::Filters::resolve(&args.filter, &args.notrace, &names)?;
    // A Linux kernel's randomised base is found as it boots, from an anchor in its symbols
    // (written beside the entries, which need the same symbols), or in a run from a
    // snapshot by its banner in memory: the warning then waits for what the plugin found.
    let finds_base = linux && !sources.is_empty();
    let kaslr_warning = kaslr_first(inv, kernel.as_deref(), finds_base);
    let layouts = layouts.and_then(|job| {
        let read = job
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        read.unwrap_or_else(|e| {
            crate::errors::warn_early(format!(
                "the guest's tasks and processes are not named: {e} (give the kernel's -dbg \
                 vmlinux with --symbols)"
            ));
            None
        })
    });
    let mut argument = args.argument.clone();
    let retval = args.retval.clone();
    let mut enums = Vec::new();
    // -a: every typed function's values, given to uftrace in the `.dbg` files (by each
    // function's offset in its file's image, which moves with the image). Only then are
    // the sources read before QEMU starts (one may be a FIFO, or slow to read).
    let (auto, auto_files) = if args.auto_args {
        use crate::argspec::Placed;
        let mut files: Vec<(std::path::PathBuf, Placed, u64)> = (read.sources().iter())
            .filter(|s| s.offset == 0 && crate::qemu::file_is_elf(&s.path))
            .filter_map(|s| {
                let img = read.images().find(|i| i.path == s.path)?;
                Some((s.path.clone(), Placed::Fixed, img.start))
            })
            .collect();
        if let Some((path, p)) = &program {
            let pie = p.rebase.is_some();
            files.push((path.clone(), Placed::Program { pie }, p.image.start));
        }
        // User mode: the shared libraries the program maps, typed from their debug files.
        for (i, lib) in names.libraries.iter().enumerate() {
            files.push((lib.path.clone(), Placed::Lib(i as u32), lib.start));
        }
        let aim = crate::argspec::Aim::new(&filters);
        let auto = crate::argspec::auto_specs(&files, &names, &aim, arch)?;
        if auto.funcs.is_empty() {
            crate::errors::warn_early(
                "-a: no function has DWARF types (or -N leaves out all that have): -a adds no \
                 values",
            );
        }
        (Some(auto).filter(|a| !a.funcs.is_empty()), files)
    } else {
        (None, Vec::new())
    };
    let arg_specs = if argument.is_empty() && retval.is_empty() && auto.is_none() {
        crate::argspec::ArgSpecs::default()
    } else {
        let mut sizes =
            crate::argspec::sizes(&read, (program.as_ref()).map(|(_, f)| (&f.image, f.rebase)));
        sizes.extend(lib_sizes);
        sizes.extend(file_sizes);
        // A bare `-A FUNC` of the kernel's syscall wrappers: the syscall's own arguments.
        if argument.iter().any(|a| !a.contains('@')) {
            let files: Vec<std::path::PathBuf> = (read.sources().iter())
                .filter(|s| s.offset == 0 && crate::qemu::file_is_elf(&s.path))
                .map(|s| s.path.clone())
                .collect();
            let (expanded, e) = crate::argspec::expand_syscalls(&argument, &names, arch, &files)?;
            argument = expanded;
            enums = e;
        }
        let mut specs =
            crate::argspec::ArgSpecs::resolve(&argument, &retval, &names, &sizes, arch)?;
        specs.info.enums = enums;
        if let Some(auto) = auto {
            let kept = specs.add_auto(auto, &sizes);
            // Each file's canonical path once (a kernel's 37 k functions each asked it).
            let canonical: Vec<std::path::PathBuf> = (auto_files.iter())
                .map(|(path, _, _)| std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()))
                .collect();
            let mut by_file: std::collections::HashMap<std::path::PathBuf, _> = Default::default();
            for f in kept {
                let Some(path) = canonical.get(f.file) else {
                    continue;
                };
                (by_file.entry(path.clone()))
                    .or_insert_with(std::collections::HashMap::new)
                    .insert(f.offset, f.values);
            }
            crate::symfiles::set_auto_values(by_file);
        }
        let pt_regs =
            (layouts.as_ref()).and_then(|l| crate::argspec::pt_regs_offsets(&l.types, arch).ok());
        specs.read_syscalls(&names, arch, pt_regs)?;
        specs
    };
    let abs_staging = std::path::absolute(staging).unwrap_or_else(|_| staging.to_path_buf());
    // A Linux guest's processes: where they map files, watched where the kernel's layouts
    // say (issue 24); without them, said when there is a userland to name.
    let trace_off = args.trace == Some(crate::args::OnOff::Off);
    let proc_watch = if linux {
        // The unit of a mapping's file offset: the image's own page size.
        let from: Vec<&Path> = (kernel.iter().map(PathBuf::as_path))
            .chain(layouts.iter().map(|l| l.source.path.as_path()))
            .collect();
        let page = crate::guest_procs::kernel_page(&from);
        match crate::guest_procs::watch_options(layouts.as_ref(), trace_off, page) {
            Ok(opts) => Some(opts),
            // A guest file's function is found where a process maps the file.
            Err(why) if !names.guest_files.is_empty() => {
                return Err(crate::errors::usage(
                    format!("PATH:FUNC cannot be found while the guest runs: {why}"),
                    "a guest file's function is found where a process maps the file, which \
                     that watch sees",
                ));
            }
            Err(why) => {
                if inv.initrd().is_some() || inv.sysroot.is_some() {
                    crate::errors::warn_early(why);
                }
                None
            }
        }
    } else if !names.guest_files.is_empty() {
        return Err(crate::errors::usage(
            "PATH:FUNC names a function of a file a Linux guest's processes map, and this \
             guest is not Linux (no Linux kernel among its images)",
            "name the function alone",
        ));
    } else {
        None
    };
    let task_slot = match (inv.mode(), &kernel) {
        (Mode::System, Some(kernel)) => start_task_slot(kernel, &abs_staging, arch),
        _ => None,
    };
    let anchor = finds_base.then(|| abs_staging.join(kaslr::ANCHOR_FILE));
    let entries = start_entries(
        inv,
        program.as_ref().map(|(_, f)| f),
        &read,
        kernel.as_deref(),
        &abs_staging,
        anchor.as_deref().map(|file| (file, arch)),
        // A run that starts off may translate nothing until it goes on, long after the
        // boot's anchor ran: the banner finds the base from any block, as a snapshot's.
        inv.resume || trace_off,
    );
    let lib_entries = match (inv.is_user_mode(), images.first(), args.no_auto_symbols) {
        (true, Some(program), false) => Some(start_lib_entries(
            program.path.clone(),
            inv.sysroot.clone(),
            arch,
            &abs_staging,
        )),
        _ => None,
    };
    // User mode: one count of the cap for all the guest's processes.
    let cap_file = match (&cap, inv.is_user_mode()) {
        (Some(_), true) => Some(crate::max_size::make_count_file(&abs_staging)?),
        _ => None,
    };
    let fixed_layout = inv.is_user_mode() && !args.aslr && crate::run_qemu::can_fix_layout();
    // One malloc arena for QEMU (`qemu_uftrace_engine::arena`), the guest's environment
    // kept by options after the user's (the plugin does the same for an exec'd program).
    let one_arena = match &inv.user {
        Some(_) if fixed_layout => {
            let user_says = (qemu_uftrace_engine::arena::QEMU_ENV_OPTIONS.iter())
                .any(|k| std::env::var_os(k).is_some())
                || (inv.opts.iter()).any(|o| {
                    let value = o.value.as_deref().unwrap_or_default();
                    qemu_uftrace_engine::arena::touches(&o.name, value.as_bytes())
                });
            let current = std::env::var_os(qemu_uftrace_engine::arena::NAME);
            let current = current.as_deref().map(OsStrExt::as_bytes);
            qemu_uftrace_engine::arena::one_arena(current, user_says)
        }
        _ => None,
    };
    let plugin = PluginOptions {
        args,
        inv,
        layouts: layouts.as_ref(),
        staging: &abs_staging,
        task_slot: task_slot.as_ref(),
        cap: cap.as_ref(),
        cap_file: cap_file.as_deref(),
        one_arena: one_arena.is_some(),
        proc_watch: proc_watch.as_deref(),
        entries: entries.as_ref(),
        lib_entries: lib_entries.as_ref(),
        stop_at: stop_at.as_deref(),
        start_at: start_at.as_deref(),
        filters: &filters,
        names: &names,
        kaslr_file: anchor.as_deref(),
        trace_on_at: &trace_on_at,
        trace_off_at: &trace_off_at,
        arg_specs: &arg_specs,
    }
    .value(&qemu);
    let symbols = (!inv.is_user_mode()).then(|| {
        let ctx = SymbolContext {
            kernel: kernel.clone(),
            board: inv.board.clone(),
            kaslr_warning,
            // System mode's processes say what stays unnamed themselves.
            arch: None,
            keep_images: finds_base,
        };
        symbols::start(ToRead::Once(read.clone()), staging, ctx)
    });
    // User mode: the program's files are read while it runs, at offset 0; where they were
    // loaded is known once it ran.
    let preload = match (inv.is_user_mode(), images.first(), args.no_auto_symbols) {
        (true, Some(program), false) => {
            let root = inv.sysroot.clone();
            let program = program.path.clone();
            let files = move || qemu::user_maps::expected_images(&program, root.as_deref(), arch);
            Some(symbol_source::preload(files, Some(arch)))
        }
        _ => None,
    };
    let mut command = qemu::with_plugin(&inv.argv, plugin);
    if let (Some(a), Some(user)) = (&one_arena, &inv.user) {
        // argv[0], `-plugin VALUE`, the user's options.
        let at = (3 + user.opt_words).min(command.len());
        command.splice(
            at..at,
            a.guest_words.iter().cloned().map(OsString::from_vec),
        );
    }
    Ok((
        Prepared {
            qemu,
            arch,
            images,
            sources,
            read,
            command,
            cap,
            filters,
            arg_specs,
            fixed_layout,
            tunables: one_arena.map(|a| OsString::from_vec(a.tunables)),
            max_depth: args.max_depth,
            module_debug,
        },
        Jobs {
            symbols,
            preload,
            task_slot,
            entries,
            lib_entries,
        },
    ))
}

/// What the plugin's `-plugin` value is made of.
struct PluginOptions<'a> {
    args: &'a RecordArgs,
    inv: &'a Invocation,
    /// The kernel's struct layouts, when a source has them.
    layouts: Option<&'a symbol_source::KernelLayouts>,
    /// The staging directory, absolute.
    staging: &'a Path,
    task_slot: Option<&'a TaskSlot>,
    cap: Option<&'a Cap>,
    /// The count every process image of a user-mode guest takes the cap from.
    cap_file: Option<&'a Path>,
    /// QEMU runs with one malloc arena, and so does the QEMU run for an exec'd program.
    one_arena: bool,
    /// Where a Linux guest's processes map files (`guest_procs::watch_options`).
    proc_watch: Option<&'a str>,
    entries: Option<&'a Entries>,
    lib_entries: Option<&'a Entries>,
    /// `--stop-at`'s addresses.
    stop_at: Option<&'a [crate::stop_at::Addr]>,
    /// `--start-at`'s addresses.
    start_at: Option<&'a [crate::stop_at::Addr]>,
    filters: &'a crate::filter::Filters,
    /// What FUNCs were resolved in (a PIE's link entry point).
    names: &'a crate::stop_at::Names,
    /// Where the kernel's anchor for finding its randomised base is written (`kaslr`).
    kaslr_file: Option<&'a Path>,
    /// `--trace-on-at`'s and `--trace-off-at`'s addresses.
    trace_on_at: &'a [crate::stop_at::Addr],
    trace_off_at: &'a [crate::stop_at::Addr],
    /// `-A`/`-R`'s functions.
    arg_specs: &'a crate::argspec::ArgSpecs,
}

impl PluginOptions<'_> {
    /// `file=PLUGIN,out=STAGING,clock=…` and whatever else this recording needs.
    fn value(&self, qemu: &Qemu) -> OsString {
        let args = self.args;
        let mut v = qemu::plugin_option(&qemu.plugin, self.staging, args.clock, args.max_depth);
        if let Some(start) = super::common::START.get().copied().flatten() {
            v.push(format!(",tsc={}", start.to_arg()));
        }
        if args.split_levels {
            v.push(",split_levels=on");
        }
        // A run from a snapshot: each vCPU's first block saves a stack cookie.
        if self.inv.resume {
            v.push(",resume=on");
        }
        if let Some(cap) = self.cap {
            v.push(cap_options(cap));
            if let Some(file) = self.cap_file {
                v.push(",max_size_file=");
                v.push(qemu::escape_keyval(file.as_os_str()));
            }
        }
        if let (Some(stop), Some(addrs)) = (&args.stop_at, self.stop_at) {
            v.push(crate::stop_at::plugin_options(
                stop,
                addrs,
                &self.names.libraries,
            ));
        }
        if let Some(addrs) = self.start_at {
            v.push(crate::stop_at::start_option(addrs, &self.names.libraries));
        }
        if let Some(bytes) = args.keep_last {
            v.push(format!(",keep_last={bytes}"));
        }
        // Tracing can be switched in every recording (`trace on|off`, issue 37).
        v.push(crate::switch::plugin_options(
            self.staging,
            args.trace,
            self.trace_on_at,
            self.trace_off_at,
            &self.names.libraries,
        ));
        // System mode: a guest file's functions (`PATH:FUNC`), found where a process maps
        // the file.
        let files = &self.names.guest_files;
        for (key, addrs) in [
            ("stop_at", self.stop_at.unwrap_or_default()),
            ("start_at", self.start_at.unwrap_or_default()),
            ("trace_on_at", self.trace_on_at),
            ("trace_off_at", self.trace_off_at),
        ] {
            v.push(crate::stop_at::file_keyed(key, addrs, files));
        }
        // 0 filters nothing: no option, so the plugin keeps its fast path.
        if let Some(threshold) = args.time_filter.filter(|&t| t > 0) {
            v.push(format!(",time_filter={threshold}"));
        }
        v.push(self.filters.plugin_options());
        v.push(self.names.plugin_option());
        match self.arg_specs.write_plugin_file(self.staging) {
            Ok(Some(path)) => {
                v.push(",args_file=");
                v.push(qemu::escape_keyval(path.as_os_str()));
            }
            Ok(None) => {}
            Err(e) => crate::errors::warn_early(format!("arguments not recorded: {e:#}")),
        }
        // Names for the guest's tasks when a source has the kernel's DWARF or BTF (else
        // `pid-N`), and where their PIDs are for a guest with no PID register (else
        // synthetic ids).
        if let Some(kernel) = self.layouts {
            if let Some(offset) = symbol_source::task_comm_offset(kernel) {
                v.push(format!(",task_comm={offset}"));
            }
            if let Some(offset) = symbol_source::task_pid_offset(kernel) {
                v.push(format!(",task_pid={offset}"));
            }
            if let Some(offset) = symbol_source::task_tgid_offset(kernel) {
                v.push(format!(",task_tgid={offset}"));
            }
            // Ended tasks' contexts are freed at their last switch (else only capped).
            if let Some(offset) = symbol_source::task_state_offset(kernel) {
                v.push(format!(",task_state={offset}"));
            }
        }
        if let Some(watch) = self.proc_watch {
            v.push(watch);
        }
        // User mode: the plugin runs QEMU again with these options for a program the guest
        // execs (`qemu::user_procs`).
        if let Some(user) = &self.inv.user {
            v.push(format!(",user_opts={}", user.opt_words));
            if self.one_arena {
                v.push(",one_arena=on");
            }
        }
        if let Some(slot) = self.task_slot {
            v.push(",task_slot_file=");
            v.push(qemu::escape_keyval(slot.file.as_os_str()));
        }
        if let Some(e) = self.entries {
            v.push(if e.later {
                ",entries_file="
            } else {
                ",entries="
            });
            v.push(qemu::escape_keyval(e.file.as_os_str()));
        }
        if let Some(e) = self.lib_entries {
            v.push(",lib_entries=");
            v.push(qemu::escape_keyval(e.file.as_os_str()));
        }
        if let Some(file) = self.kaslr_file {
            v.push(",kaslr_file=");
            v.push(qemu::escape_keyval(file.as_os_str()));
        }
        v
    }
}

/// The plugin's options for a size cap: it stops writing at `max_size` bytes, and stops
/// QEMU there with `max_size_exit=on`.
fn cap_options(cap: &Cap) -> String {
    let exit = if cap.exit { ",max_size_exit=on" } else { "" };
    format!(",max_size={}{exit}", cap.bytes)
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

/// Says before QEMU starts that a Linux kernel will randomise its base (then none of its
/// symbols would match). Returns the warning still to give after the run, for a kernel
/// whose file did not tell (the symbols will), `None` when there is none to give.
fn kaslr_first(inv: &Invocation, kernel: Option<&Path>, finds_base: bool) -> Option<String> {
    if inv.kaslr_off || inv.is_user_mode() || finds_base {
        return None;
    }
    let text = kaslr::warning(inv.kaslr_advice());
    if kernel.is_some_and(kaslr::is_linux_kernel) {
        crate::errors::warn_early(text);
        return None;
    }
    Some(text)
}

/// Finds where the kernel keeps its running task, when in per-CPU memory (x86_64), while
/// QEMU starts (decompressing a bzImage takes ~0.1 s): the plugin waits for the file only
/// once the kernel proper runs.
fn start_task_slot(kernel: &Path, staging: &Path, arch: Arch) -> Option<TaskSlot> {
    let slot_names = qemu_uftrace_engine::arch::isa(arch).task_slot_symbols();
    if slot_names.is_empty() {
        return None;
    }
    let file = staging.join(".task_slot");
    let kernel = kernel.to_path_buf();
    let out = file.clone();
    let job = std::thread::spawn(move || {
        let text =
            symbol_source::task_slot(&kernel, slot_names).map_or(String::new(), |s| s.to_string());
        let tmp = out.with_extension("tmp");
        // Written aside and renamed: the plugin never reads half a number.
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &out);
        }
    });
    Some(TaskSlot { job, file })
}

/// The guest's function entries, written where the plugin reads them: a user-mode program's
/// (rebased at its entry when it is a PIE) and a bare-metal guest's before QEMU starts, a
/// kernel's while it starts. `None` where there are none to give.
fn start_entries(
    inv: &Invocation,
    program: Option<&crate::entries::Program>,
    read: &ReadOnce,
    kernel: Option<&Path>,
    staging: &Path,
    anchor: Option<(&Path, Arch)>,
    banner: bool,
) -> Option<Entries> {
    let file = staging.join(".entries");
    if inv.is_user_mode() {
        return program?.write(&file).then_some(Entries {
            file,
            later: false,
            job: None,
        });
    }
    if read.sources().is_empty() {
        return None;
    }
    let (read, board, path) = (read.clone(), inv.board.clone(), file.clone());
    let kernel = kernel.map(Path::to_path_buf);
    let later = kernel.is_some();
    let anchor = anchor.map(|(file, arch)| (file.to_path_buf(), arch));
    let job = move || {
        // First: the plugin waits for it only where the kernel proper starts, and for the
        // entries at the first translation.
        if let Some((file, arch)) = &anchor {
            let text = if banner {
                super::kaslr::banner_text(read.images(), kernel.as_deref(), *arch)
            } else {
                super::kaslr::anchor_text(read.images(), *arch)
            };
            crate::entries::write_atomically(file, &text);
        }
        let text = crate::entries::system_text(&read, kernel.as_deref(), &board);
        crate::entries::write_atomically(&path, &text)
    };
    if later {
        Some(Entries {
            file,
            later,
            job: Some(std::thread::spawn(job)),
        })
    } else {
        job().then_some(Entries {
            file,
            later,
            job: None,
        })
    }
}

/// User mode: the shared libraries' and dynamic loader's function entries, written while
/// QEMU starts (a dynamic program waits for them at its first instruction). Always
/// written, empty when there are none, so that the plugin never waits in vain.
fn start_lib_entries(
    program: PathBuf,
    sysroot: Option<PathBuf>,
    arch: Arch,
    staging: &Path,
) -> Entries {
    let file = staging.join(".libentries");
    let path = file.clone();
    let job = move || {
        let root = sysroot.as_deref();
        let files = qemu::user_maps::expected_images(&program, root, arch);
        let interp = qemu::user::Elf::read(&program)
            .and_then(|e| e.interp)
            .map(|i| qemu::user_maps::host_path(root, &i));
        let text = crate::entries::libraries_text(&files[1..], interp.as_deref(), arch);
        crate::entries::write_atomically(&path, &text)
    };
    Entries {
        file,
        later: true,
        job: Some(std::thread::spawn(job)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_reaches_the_plugin_as_bytes() {
        let cap = |text: &str| match crate::max_size::parse(text).unwrap() {
            MaxSize::Cap(c) => c,
            MaxSize::Off => panic!(),
        };
        assert_eq!(cap_options(&cap("500M")), ",max_size=524288000");
        assert_eq!(
            cap_options(&cap("2G,exit")),
            ",max_size=2147483648,max_size_exit=on"
        );
    }
}
