//! QEMU's entry point: parse the arguments, set the state up, register the callbacks.

use crate::entry::register;
use crate::ffi;
use crate::lifecycle::{process, record_watch};
use crate::state::config::{self, ClockChoice, ClockKind, Mode};
use crate::state::output::{Limits, Output};
use crate::state::{ARCH, CONFIG, ONE_CLOCK, OUTPUT, QEMU_API, SYSTEM_MODE, TARGET, TASKS};
use crate::vcpu::{self, clock, landing, scoreboard};
use qemu_uftrace_engine::arch::Arch;
use qemu_uftrace_engine::tasks::TaskTable;
use std::ffi::{c_char, c_int, CStr, OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

/// The API version QEMU reads before it calls `qemu_plugin_install`.
#[no_mangle]
pub static qemu_plugin_version: c_int = ffi::API_VERSION;

/// Refuses to load: says what is wrong in one line and ends QEMU before it starts the guest.
fn fail(msg: &str) -> ! {
    eprintln!("qemu-uftrace plugin: {msg}");
    // SAFETY: nothing of ours needs tearing down yet.
    unsafe { libc::_exit(1) }
}

/// QEMU's entry point.
///
/// # Safety
/// Called once by QEMU with a live `info` and `argc` NUL-terminated arguments.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: ffi::qemu_plugin_id_t,
    info: *const ffi::qemu_info_t,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: QEMU passes valid pointers (the function's contract).
    let (info, args) = unsafe {
        // Bytes, not text: a directory name need not be UTF-8.
        let args: Vec<OsString> = (0..argc.max(0) as usize)
            .map(|i| OsStr::from_bytes(CStr::from_ptr(*argv.add(i)).to_bytes()).to_owned())
            .collect();
        (&*info, args)
    };
    // A panic must not unwind into QEMU's C frames.
    match std::panic::catch_unwind(|| install(id, info, &args)) {
        Ok(()) => 0,
        Err(_) => fail("internal error while loading (see the message above)"),
    }
}

fn install(id: ffi::qemu_plugin_id_t, info: &ffi::qemu_info_t, args: &[OsString]) {
    // SAFETY: QEMU's target name is a NUL-terminated string, live during install.
    let target_name = unsafe { CStr::from_ptr(info.target_name) }
        .to_string_lossy()
        .into_owned();
    let _ = QEMU_API.set((info.version_min, info.version_cur));
    let mode = config::parse(args).unwrap_or_else(|msg| fail(&msg));
    let arch = Arch::from_qemu_target(&target_name);
    if let Mode::Probe = mode {
        println!(
            "qemu-uftrace-probe target={target_name} api={} api_min={} plugin_api={} \
             system={} supported={} discontinuity={}",
            info.version_cur,
            info.version_min,
            ffi::API_VERSION,
            info.system_emulation as u8,
            arch.is_some() as u8,
            ffi::discontinuity_api().is_some() as u8,
        );
        let _ = std::io::stdout().flush();
        // SAFETY: ends the probe QEMU before it builds a machine.
        unsafe { libc::_exit(0) };
    }
    let Mode::Record(cfg) = mode else {
        unreachable!()
    };
    let mut cfg = *cfg;
    let Some(arch) = arch else {
        fail(&format!("target {target_name} is not supported yet"))
    };
    let _ = ARCH.set(arch);
    let _ = TARGET.set(target_name);
    let system = info.system_emulation;
    let _ = SYSTEM_MODE.set(system);
    let vcpus = if system {
        info.max_vcpus.max(info.smp_vcpus).max(1) as usize
    } else {
        4096 // user mode: one vCPU per guest thread
    };
    // Instruction counts are one clock only on one vCPU: with several, each vCPU counts its
    // own, and a task moving between them would see time jump.
    let one_vcpu = system && vcpus == 1;
    let clock = match cfg.clock {
        // Counting instructions while tracing is off costs a count a block: started off,
        // the default is wall time.
        ClockChoice::Auto if one_vcpu && !cfg.trace_off => ClockKind::Insn,
        ClockChoice::Auto => ClockKind::Wall,
        ClockChoice::Fixed(kind) => kind,
    };
    cfg.clock = ClockChoice::Fixed(clock);
    let _ = ONE_CLOCK.set(one_vcpu);
    // User mode, an exec'd program the size cap had no room for: no writer and no file,
    // only its own forks and execs followed (`lifecycle::process`), untraced too.
    if cfg.untraced && !system {
        crate::lifecycle::image::set_untraced();
        process::install(&cfg.out, cfg.proc_key.clone(), register::retire);
        if let Some(fd) = cfg.record_pidfd {
            record_watch::start_inherited(fd);
        }
        let _ = CONFIG.set(cfg);
        // SAFETY: registering our callbacks for our own plugin id, during install.
        unsafe { register::register_syscalls(id) };
        register::remember(id, false);
        return;
    }
    *TASKS.lock().unwrap_or_else(|e| e.into_inner()) = Some(TaskTable::new(cfg.split_levels));
    vcpu::init(vcpus);
    let limits = Limits {
        max_bytes: cfg.max_size,
        on_cap: cfg
            .max_size_exit
            .then_some(crate::lifecycle::finish::stop_at_size_cap as fn()),
        insn_time: one_vcpu && clock == ClockKind::Insn,
        keep_last: cfg.keep_last,
        start_at: !cfg.start_at.is_empty()
            || !cfg.lib_start_at.is_empty()
            || !cfg.file_aims.start_at.is_empty()
            || cfg
                .pie
                .as_ref()
                .is_some_and(|p| !p.aims.start_at.is_empty()),
    };
    let given = crate::state::aims::Aims {
        filter: cfg.filter.clone(),
        notrace: cfg.notrace.clone(),
        stop_at: cfg.stop_at.clone(),
        start_at: cfg.start_at.clone(),
        trace_on_at: cfg.trace_on_at.clone(),
        trace_off_at: cfg.trace_off_at.clone(),
    };
    // An exec'd image runs another program: the first one's functions are not its.
    let pie = cfg.pie.clone().filter(|_| cfg.proc_key.is_none());
    // -A/-R's list first: a PIE's functions there are placed as `-F`'s are.
    if let Some(path) = &cfg.args_file {
        crate::state::args::load(path, cfg.proc_key.is_some()).unwrap_or_else(|msg| fail(&msg));
        crate::handlers::args::install();
        if crate::state::args::has_pie() {
            crate::state::aims::place_anyway();
        }
    }
    crate::state::aims::install(given, pie);
    crate::state::lib_aims::install(crate::state::lib_aims::LibAims {
        filter: cfg.lib_filter.clone(),
        notrace: cfg.lib_notrace.clone(),
        stop_at: cfg.lib_stop_at.clone(),
        start_at: cfg.lib_start_at.clone(),
        trace_on_at: cfg.lib_trace_on_at.clone(),
        trace_off_at: cfg.lib_trace_off_at.clone(),
    });
    crate::state::file_aims::install(cfg.file_aims.clone());
    // Before the writer's first status, which says whether tracing is on.
    crate::handlers::switch::install(&cfg, register::request_reset);
    // A count of this image's own when the shared one cannot be had: the cap then holds
    // per process, as it says.
    let taken = match &cfg.max_size_file {
        Some(file) => crate::state::taken::Taken::shared(file).unwrap_or_else(|e| {
            eprintln!(
                "qemu-uftrace plugin: max_size_file={}: {e}: this process counts the size \
                 cap on its own",
                file.display()
            );
            crate::state::taken::Taken::own()
        }),
        None => crate::state::taken::Taken::own(),
    };
    let output = Output::start(cfg.out.clone(), limits, &taken)
        .unwrap_or_else(|e| fail(&format!("writer thread: {e}")));
    let _ = OUTPUT.set(output);
    let _ = crate::handlers::stop_at::ON_STOP.set(crate::lifecycle::finish::stop_at_size_cap);
    let (counter, pending) = scoreboard::clock_and_pending();
    if !system {
        scoreboard::track_moving(&pending);
    }
    if let Some(file) = cfg.kaslr_file.clone().filter(|_| system) {
        crate::state::kaslr::install(file);
    }
    match &cfg.entries {
        Some(path) if cfg.entries_later => crate::state::entries::load_later(path.clone()),
        Some(path) => crate::state::entries::load(path).unwrap_or_else(|msg| fail(&msg)),
        None => {}
    }
    if let Some(path) = &cfg.lib_entries {
        crate::state::lib_entries::load_later(path.clone());
    }
    clock::init(clock, counter, cfg.tsc, !system);
    landing::init(pending);
    if !system {
        process::install(&cfg.out, cfg.proc_key.clone(), register::retire);
        // Every process of the run ends with `record` (a guest's forks too).
        match cfg.record_pidfd {
            Some(fd) => record_watch::start_inherited(fd),
            None if cfg.proc_key.is_none() => record_watch::start_first(),
            None => {}
        }
    }
    let _ = CONFIG.set(cfg);
    crate::handlers::midway::install();
    // SAFETY: registering our callbacks for our own plugin id, during install.
    unsafe {
        register::register_callbacks(id, !system);
        let discontinuities = register::register_discontinuities(id);
        if discontinuities {
            crate::state::set_discontinuities_registered();
        }
        register::remember(id, discontinuities);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::test_stubs::BYTE_ARRAYS_FREED;
    use crate::lifecycle::vcpus::{vcpu_exit, vcpu_init, RETIRED};
    use std::sync::atomic::Ordering;

    /// A user-mode run without QEMU (its functions are the test stubs): the one test that
    /// sets the plugin's process-wide state. A thread that exits keeps only what the end
    /// needs (its register buffer is freed); a callback's panic is caught and reported;
    /// `plugin.maps` that cannot be written makes the trace incomplete, with an error naming
    /// it.
    #[test]
    fn a_user_mode_run_without_qemu() {
        let dir = std::env::temp_dir().join(format!("plugin-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let info = ffi::qemu_info_t {
            target_name: c"x86_64".as_ptr(),
            version_min: 2,
            version_cur: 4,
            system_emulation: false,
            smp_vcpus: 1,
            max_vcpus: 1,
        };
        let mut out = OsString::from("out=");
        out.push(&dir);
        install(1, &info, &[out, OsString::from("clock=wall")]);

        vcpu_init(0);
        // Only a translation takes the scoreboards' base (vCPU init might store a stale one).
        assert!(scoreboard::moving_base().is_null());
        let freed = BYTE_ARRAYS_FREED.load(Ordering::SeqCst);
        vcpu_exit(0);
        assert_eq!(BYTE_ARRAYS_FREED.load(Ordering::SeqCst), freed + 1);
        assert_eq!(RETIRED.lock().unwrap().len(), 1);
        // A second thread's end is folded into the first's: a thread loop grows nothing.
        vcpu_init(0);
        vcpu_exit(0);
        assert_eq!(RETIRED.lock().unwrap().len(), 1);
        assert_eq!(RETIRED.lock().unwrap()[0].vcpus, 2);
        vcpu_init(0);
        // A callback that panics: caught at the boundary, the vCPU free for the next one.
        assert_eq!(vcpu::with(0, |_| -> u8 { panic!("a bug") }), None);
        assert_eq!(vcpu::with(0, |_| 1), Some(1));

        // A directory where plugin.maps goes: its rename fails.
        std::fs::create_dir_all(dir.join("plugin.maps").join("in-the-way")).unwrap();
        crate::lifecycle::finish::finish();
        let stats = std::fs::read_to_string(dir.join("plugin.stats")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(stats.starts_with("complete=0\n"), "{stats}");
        assert!(stats.contains("vcpus=3\n"), "{stats}");
        // Each exited thread's context was freed; its id came back for the next.
        assert!(
            stats.contains("tasks=3\ntask_conflicts=0\ntasks_past_cap=0\ntasks_ended=2\n"),
            "{stats}"
        );
        let errors: Vec<&str> = stats.lines().filter(|l| l.starts_with("error=")).collect();
        assert!(errors.iter().any(|e| e.contains("plugin.maps")), "{stats}");
        assert!(
            errors
                .iter()
                .any(|e| e.contains("internal error in a vCPU callback") && e.contains("a bug")),
            "{stats}"
        );
    }
}
