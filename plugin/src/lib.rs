//! qemu-uftrace's QEMU TCG plugin: follows every guest call and return and writes uftrace
//! records, one task per vCPU.
//!
//! Layout: `translate` instruments calls and returns found by `isa`; `callbacks` run when
//! they execute and drive `hot` (the per-event engine) over `shadow` stacks; `resync` rebuilds
//! a lost stack from guest frame records; `output` writes records off the vCPU threads;
//! `finish` runs at exit.

pub mod api;
mod callbacks;
mod clock;
mod config;
mod exceptions;
mod guest;
mod hot;
mod isa;
mod landing;
mod output;
mod resync;
mod scoreboard;
mod shadow;
mod sites;
mod stats;
mod translate;
mod vcpu;

use config::{Config, Mode};
use isa::Isa;
use output::Output;
use std::ffi::{c_char, c_int, CStr, OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

static ISA: OnceLock<&'static dyn Isa> = OnceLock::new();
static CONFIG: OnceLock<Config> = OnceLock::new();
static OUTPUT: OnceLock<Output> = OnceLock::new();
static TARGET: OnceLock<String> = OnceLock::new();
static SYSTEM_MODE: OnceLock<bool> = OnceLock::new();
/// The running QEMU's plugin API range, `(min, cur)`, as it told us at install.
static QEMU_API: OnceLock<(i32, i32)> = OnceLock::new();

pub(crate) fn isa_or_default() -> &'static dyn Isa {
    ISA.get().copied().unwrap_or(&isa::aarch64::Aarch64)
}

/// The API version QEMU reads before it calls `qemu_plugin_install`.
#[no_mangle]
pub static qemu_plugin_version: c_int = api::API_VERSION;

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
    id: api::qemu_plugin_id_t,
    info: *const api::qemu_info_t,
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

fn install(id: api::qemu_plugin_id_t, info: &api::qemu_info_t, args: &[OsString]) {
    // SAFETY: QEMU's target name is a NUL-terminated string, live during install.
    let target_name = unsafe { CStr::from_ptr(info.target_name) }
        .to_string_lossy()
        .into_owned();
    let _ = QEMU_API.set((info.version_min, info.version_cur));
    let mode = config::parse(args).unwrap_or_else(|msg| fail(&msg));
    let isa = isa::for_target(&target_name);
    if let Mode::Probe = mode {
        println!(
            "qemu-uftrace-probe target={target_name} api={} api_min={} plugin_api={} \
             system={} supported={} discontinuity={}",
            info.version_cur,
            info.version_min,
            api::API_VERSION,
            info.system_emulation as u8,
            isa.is_some() as u8,
            api::discontinuity_api().is_some() as u8,
        );
        let _ = std::io::stdout().flush();
        // SAFETY: ends the probe QEMU before it builds a machine.
        unsafe { libc::_exit(0) };
    }
    let Mode::Record(cfg) = mode else {
        unreachable!()
    };
    let Some(isa) = isa else {
        fail(&format!("target {target_name} is not supported yet"))
    };
    let _ = ISA.set(isa);
    let _ = TARGET.set(target_name);
    let system = info.system_emulation;
    let _ = SYSTEM_MODE.set(system);
    vcpu::init(if system {
        info.max_vcpus.max(info.smp_vcpus).max(1) as usize
    } else {
        4096 // user mode: one vCPU per guest thread
    });
    let output =
        Output::start(cfg.out.clone()).unwrap_or_else(|e| fail(&format!("writer thread: {e}")));
    let _ = OUTPUT.set(output);
    let (counter, pending) = scoreboard::clock_and_pending();
    clock::init(cfg.clock, counter);
    landing::init(pending);
    let _ = CONFIG.set(cfg);
    // SAFETY: registering our callbacks for our own plugin id, during install.
    unsafe { api::register_callbacks(id) };
}

pub(crate) fn vcpu_init(vcpu_id: u32) {
    let (Some(cfg), Some(out)) = (CONFIG.get(), OUTPUT.get()) else {
        return;
    };
    guest::init_registers(isa_or_default());
    let tid = vcpu_id + 1; // uftrace task ids must not be 0
    let spill = Box::new(move |full: Vec<u8>| {
        out.send(tid, full);
        out.fresh()
    });
    let engine = hot::Engine::new(out.fresh(), spill, cfg.max_depth);
    let system = SYSTEM_MODE.get().copied().unwrap_or(false);
    let (fast, clock, pending) = vcpu_words(vcpu_id, system);
    let state = vcpu::VcpuState {
        tid,
        fast,
        clock,
        pending,
        engine,
        regs: guest::ByteBuf::new(),
    };
    vcpu::install(vcpu_id, state);
    if system {
        // Creating a vCPU may have grown the scoreboards: point every vCPU at the new
        // ones. Only system mode caches pointers (all vCPUs exist before the guest
        // runs); user mode's words go through the API and never go stale, and its
        // other vCPUs are running, so their state must not be touched from here.
        vcpu::for_each(|i, s| (s.fast, s.clock, s.pending) = vcpu_words(i, system));
    }
}

/// How vCPU `i` reaches its instruction counter and pending flag: the fast path's pointer
/// and the general path's words, taken together so that they never disagree.
fn vcpu_words(i: u32, system: bool) -> (scoreboard::FastWords, clock::VcpuClock, landing::Pending) {
    let clock = clock::VcpuClock::for_vcpu(i, system);
    (
        clock.fast_words(),
        clock,
        landing::Pending::for_vcpu(i, system),
    )
}

/// At QEMU exit: flush every vCPU, wait for the writer, then say how it went.
pub(crate) fn finish() {
    let (Some(cfg), Some(out)) = (CONFIG.get(), OUTPUT.get()) else {
        return;
    };
    let mut states = vcpu::take_all();
    for s in &mut states {
        s.engine.flush();
    }
    let written = out.finish();
    let mut total = stats::Stats::default();
    let mut text = String::new();
    let mut tids = Vec::new();
    for s in &states {
        total.add(&s.engine.stats());
        if written.bytes.get(&s.tid).copied().unwrap_or(0) > 0 {
            tids.push(s.tid.to_string());
        }
    }
    let complete = written.errors.is_empty();
    text.push_str(&format!("complete={}\n", complete as u8));
    text.push_str(&format!(
        "target={}\n",
        TARGET.get().map_or("", |t| t.as_str())
    ));
    text.push_str(&format!("clock={}\n", cfg.clock.name()));
    text.push_str(&format!("vcpus={}\n", states.len()));
    text.push_str(&format!("tids={}\n", tids.join(",")));
    for (k, v) in total.lines() {
        text.push_str(&format!("{k}={v}\n"));
    }
    text.push_str(&format!("bytes={}\n", written.bytes.values().sum::<u64>()));
    text.push_str(&format!("max_depth={}\n", cfg.max_depth));
    text.push_str(&format!(
        "discontinuity_api={}\n",
        api::discontinuity_api().is_some() as u8
    ));
    let (api_min, api_cur) = QEMU_API.get().copied().unwrap_or_default();
    text.push_str(&format!("plugin_api={}\n", api::API_VERSION));
    text.push_str(&format!("qemu_api={api_min}..{api_cur}\n"));
    for s in &states {
        let open: usize = s.engine.stacks.iter().map(|(_, st)| st.len()).sum();
        text.push_str(&format!("vcpu{}.open_frames={open}\n", s.tid - 1));
        for (k, v) in s.engine.stats().lines() {
            text.push_str(&format!("vcpu{}.{k}={v}\n", s.tid - 1));
        }
    }
    for e in &written.errors {
        text.push_str(&format!("error={e}\n"));
    }
    let tmp = cfg.out.join("plugin.stats.tmp");
    let result = std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, cfg.out.join("plugin.stats")));
    if let Err(e) = result {
        eprintln!(
            "qemu-uftrace plugin: cannot write {}: {e}",
            cfg.out.join("plugin.stats").display()
        );
    }
}
