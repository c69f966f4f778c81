//! Helpers for qemu-uftrace's integration tests: building the bare-metal
//! AArch64 guests (`tests/guests`, `examples/hello`, `bench/guests`),
//! running them under plain QEMU, reading the oracle log that the `-oracle`
//! builds print, and looking at the guests' symbols and code; the Linux
//! userland guest (Debian's kernel booting an initramfs of our own `/init`,
//! [`linux_guest`]).
//!
//! Every test program is built in three [`Variant`]s from the same source;
//! [`TEST_PROGRAMS`] describes what each one contains (leaves, tail calls,
//! functions without a frame record), as checked by `tests/guests.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

pub mod cpio;
pub mod debian_vm;
pub mod execlog;
pub mod libcalls;
pub mod linux_guest;
pub mod modules_guest;
pub mod passes;
pub mod procs_guest;
pub mod replay;
pub mod riscv64;
pub mod snapshot;
pub mod x86_64_guests;

/// The QEMU system emulator the guests run under.
pub const QEMU: &str = "qemu-system-aarch64";

/// One of the aarch64 system QEMUs every recording test runs on.
#[derive(Debug, Clone)]
pub struct SystemQemu {
    /// `10.0`, `10.2.2`, `11.1.3`: for messages.
    pub label: &'static str,
    /// The emulator, as a command line's first word.
    pub program: String,
}

/// Every aarch64 QEMU the recording tests run on, as `scripts/install-deps.sh` leaves them
/// ([`system_qemus_of`]).
pub fn system_qemus() -> Vec<SystemQemu> {
    system_qemus_of(QEMU)
}

/// The aarch64 QEMU labelled `label` (`10.0`, `10.2.2`, `11.1.3`) among [`system_qemus`].
pub fn system_qemu(label: &str) -> String {
    system_qemus()
        .into_iter()
        .find(|q| q.label == label)
        .unwrap_or_else(|| panic!("QEMU {label} is not among system_qemus"))
        .program
}

/// `emulator` (`qemu-system-<arch>`) in each QEMU the recording tests run on: 10.0 on PATH
/// (plugin API 4), 10.2.2 built from Debian's source (API 5, the discontinuity callback) and
/// 11.1.3 from trixie-backports behind a wrapper (API 7).
pub fn system_qemus_of(emulator: &str) -> Vec<SystemQemu> {
    let cached = |dir: &str| {
        cached(&format!("{dir}/bin/{emulator}"))
            .display()
            .to_string()
    };
    vec![
        SystemQemu {
            label: "10.0",
            program: emulator.to_string(),
        },
        SystemQemu {
            label: "10.2.2",
            program: cached("qemu-10.2.2"),
        },
        SystemQemu {
            label: "11.1.3",
            program: cached("qemu-11.1.3"),
        },
    ]
}

/// How long [`run_plain_qemu`] lets a guest run (the slowest, `calldense`,
/// takes about a second).
pub const QEMU_TIMEOUT: Duration = Duration::from_secs(60);

/// The test programs in `tests/guests`, one scenario each.
pub const TEST_PROGRAMS: &[GuestProgram] = &[
    GuestProgram {
        name: "nested",
        functions: &[
            "main",
            "nest_level1",
            "nest_level2",
            "nest_level3",
            "nest_level4",
            "nest_leaf",
        ],
        leaves: &["nest_leaf"],
        tail_calls: &[],
        frameless: &["nest_leaf"],
        output: &["nest_level1(1) = 153", "nest_level1(2) = 201"],
    },
    GuestProgram {
        name: "recursion",
        functions: &["main", "rec_depth", "fib", "rec_even", "rec_odd"],
        leaves: &[],
        tail_calls: &[],
        frameless: &[],
        output: &["rec_depth(12) = 78", "fib(10) = 55", "rec_even(10) = 1"],
    },
    GuestProgram {
        name: "fnptr",
        functions: &[
            "main",
            "fp_apply_all",
            "fp_apply",
            "op_add",
            "op_sub",
            "op_twice_sum",
            "table_call",
        ],
        leaves: &["op_add", "op_sub"],
        tail_calls: &[],
        frameless: &["op_add", "op_sub"],
        output: &[
            "fp_apply_all(7, 3) = 34",
            "direct_op(10, 4) = 6",
            "table_call(5, 6) = 22",
        ],
    },
    GuestProgram {
        name: "leaf",
        functions: &["main", "leaf_caller", "leaf_add", "leaf_mix", "leaf_stack"],
        leaves: &["leaf_add", "leaf_mix", "leaf_stack"],
        tail_calls: &[],
        frameless: &["leaf_add", "leaf_mix", "leaf_stack"],
        output: &["leaf_caller(5) = 797", "leaf_add(2, 3) = 5"],
    },
    GuestProgram {
        name: "tailcall",
        functions: &[
            "main",
            "tail_driver",
            "tail_a",
            "tail_b",
            "tail_c",
            "tail_to_leaf",
            "tail_via_ptr",
            "tail_mixed",
            "tail_leaf",
        ],
        leaves: &["tail_leaf"],
        tail_calls: &[
            ("tail_a", Some("tail_b")),
            ("tail_b", Some("tail_c")),
            ("tail_to_leaf", Some("tail_leaf")),
            ("tail_via_ptr", None),
            ("tail_mixed", Some("tail_c")),
        ],
        frameless: &[
            "tail_leaf",
            "tail_a",
            "tail_b",
            "tail_to_leaf",
            "tail_via_ptr",
        ],
        output: &["tail_driver(2) = 185"],
    },
    GuestProgram {
        name: "longjmp",
        functions: &[
            "main",
            "lj_outer",
            "lj_level1",
            "lj_level2",
            "lj_level3",
            "lj_after",
        ],
        leaves: &["lj_after"],
        tail_calls: &[],
        frameless: &["lj_after"],
        output: &["lj_outer(42) = 85", "lj_outer(0) = 2"],
    },
];

/// What a test program in `tests/guests` contains, as built from its source.
#[derive(Debug, Clone, Copy)]
pub struct GuestProgram {
    /// `tests/guests/<name>.c`, built as `<name>.elf`, `<name>-nofp.elf`,
    /// `<name>-oracle.elf`.
    pub name: &'static str,
    /// The scenario's functions, `main` included: exactly the functions the
    /// oracle logs. The runtime ([`is_runtime_function`]) is not listed.
    pub functions: &'static [&'static str],
    /// Functions that call nothing (in every variant but the oracle one).
    pub leaves: &'static [&'static str],
    /// `(function, target)` sibling calls in the natural and `-nofp` builds:
    /// a `b target`, or a `br xN` when `target` is `None`.
    pub tail_calls: &'static [(&'static str, Option<&'static str>)],
    /// Functions without a frame record (no `mov x29, sp`) in the natural
    /// build; in the `-nofp` build no function has one.
    pub frameless: &'static [&'static str],
    /// The lines the guest prints before the oracle block.
    pub output: &'static [&'static str],
}

/// Looks up a program of [`TEST_PROGRAMS`] by name.
pub fn test_program(name: &str) -> Option<&'static GuestProgram> {
    TEST_PROGRAMS.iter().find(|p| p.name == name)
}

/// The build variants of every test program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `<prog>.elf`: `-O2 -fno-inline`, frame pointers except in leaves,
    /// tail calls as in the source.
    Natural,
    /// `<prog>-nofp.elf`: the same with `-fomit-frame-pointer`.
    NoFp,
    /// `<prog>-oracle.elf`: `-finstrument-functions`; prints the oracle log.
    Oracle,
    /// `<prog>-pac.elf`: natural, with return addresses signed by pointer authentication
    /// (`paciasp` … `retaa`, leaves included); runs under `-cpu max`.
    Pac,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Natural,
        Variant::NoFp,
        Variant::Oracle,
        Variant::Pac,
    ];

    /// The file name suffix before `.elf`.
    pub fn suffix(self) -> &'static str {
        match self {
            Variant::Natural => "",
            Variant::NoFp => "-nofp",
            Variant::Oracle => "-oracle",
            Variant::Pac => "-pac",
        }
    }
}

/// Whether a guest symbol belongs to the support code rather than to a test
/// scenario: the entry code, the UART/semihosting runtime (`rt_*`), the
/// oracle and its hooks, and the assembly `setjmp`/`longjmp`. None of these
/// appear in the oracle log, but a tracer sees them.
pub fn is_runtime_function(name: &str) -> bool {
    name == "_start"
        || name == "setjmp"
        || name == "longjmp"
        || name.starts_with("rt_")
        || name.starts_with("oracle_")
        || name.starts_with("__cyg_profile_func_")
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Where `scripts/install-deps.sh` caches what it downloads (`$QEMU_UFTRACE_CACHE`, else
/// `$XDG_CACHE_HOME/qemu-uftrace`, else `~/.cache/qemu-uftrace`), as the script computes it.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("QEMU_UFTRACE_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("qemu-uftrace"))
        })
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/qemu-uftrace")))
        .unwrap_or_else(|| PathBuf::from(".cache/qemu-uftrace"))
}

/// A file the install script caches, failing loudly when it is missing.
pub fn cached(relative: &str) -> PathBuf {
    let path = cache_dir().join(relative);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/install-deps.sh",
        path.display()
    );
    path
}

/// Debian's arm64 cloud kernel `Image`.
pub fn debian_kernel() -> PathBuf {
    cached("kernel/vmlinuz")
}

/// Debian's arm64 kernel built for 16 KiB pages (`linux-image-arm64-16k`), its raw `Image`.
pub fn debian_16k_kernel() -> PathBuf {
    cached("kernel-16k/vmlinuz")
}

/// The QEMU command that boots Debian's kernel to its "Unable to mount root fs" panic on
/// `cpu` (`nokaslr`, so that its symbols line up; `-no-reboot`, so that QEMU then exits).
pub fn kernel_boot_args(cpu: &str) -> Vec<String> {
    kernel_boot_args_on(QEMU, cpu)
}

/// [`kernel_boot_args`] on the emulator `qemu`.
pub fn kernel_boot_args_on(qemu: &str, cpu: &str) -> Vec<String> {
    let kernel = debian_kernel().to_string_lossy().into_owned();
    [
        qemu,
        "-M",
        "virt",
        "-cpu",
        cpu,
        // 256 MiB, not 1 GiB: each page of RAM is two calls at boot (262 k pages, 8 % of
        // the trace), and a boot to its panic needs little.
        "-m",
        "256M",
        "-nographic",
        "-nic",
        "none",
        "-no-reboot",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "-kernel".into(),
        kernel,
        "-append".into(),
        "console=ttyAMA0 panic=-1 nokaslr cryptomgr.notests".into(),
    ])
    .collect()
}

/// The kernel command line of Debian's amd64 kernel booted to its panic. `cryptomgr.notests`
/// (every test boot has it): the crypto self-tests' RSA arithmetic was a fifth of each boot's
/// records (x86_64 312 to 255 MB, arm64 252 to 191 MB) that no test reads, and what the
/// tests' uftrace runs spend most of their time on. `no_timer_check`:
/// on a loaded host the kernel's check that the timer ticks through the IO-APIC (a busy wait
/// calibrated earlier) can find no tick and panic there instead.
pub const AMD64_PANIC_APPEND: &str =
    "console=ttyS0 panic=-1 nokaslr no_timer_check cryptomgr.notests";

/// The QEMU command that boots Debian's amd64 kernel (a bzImage, from SeaBIOS) on `qemu`
/// with the kernel command line `append`, no initramfs.
pub fn amd64_kernel_boot_args_on(qemu: &str, append: &str) -> Vec<String> {
    let kernel = cached("kernel-amd64/vmlinuz").display().to_string();
    [
        qemu,
        "-M",
        "pc",
        "-m",
        "512M",
        "-nographic",
        "-nic",
        "none",
        "-no-reboot",
        "-kernel",
        &kernel,
        "-append",
        append,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Where each FDE of the ELF file `path` begins, as binutils' readelf reads its `.eh_frame`
/// (empty ranges left out): the oracle for what `Image::by_address` names. Its exit status
/// is not read: it fails when it also finds the file's separate debug file, whose
/// `.eh_frame` is NOBITS, after it printed the file's own.
pub fn readelf_fde_starts(path: &Path) -> BTreeSet<u64> {
    let out = Command::new("readelf")
        .arg("--debug-dump=frames")
        .arg(path)
        .output()
        .expect("run readelf (binutils)");
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(" pc=")?.1.split_once(".."))
        .filter_map(|(start, end)| Some((hex(start)?, hex(end)?)))
        .filter(|(start, end)| end > start)
        .map(|(start, _)| start)
        .collect()
}

/// The tool prefix of the AArch64 cross toolchain: `$QEMU_UFTRACE_CROSS`,
/// else `aarch64-linux-gnu-`.
pub fn cross_prefix() -> String {
    std::env::var("QEMU_UFTRACE_CROSS").unwrap_or_else(|_| "aarch64-linux-gnu-".to_owned())
}

/// Where [`build_guests`] puts the guests: `$QEMU_UFTRACE_GUEST_DIR`, else
/// `guests/` in the Cargo target directory of the running test executable
/// (so separate target directories never share, and race on, one build).
pub fn guest_build_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("QEMU_UFTRACE_GUEST_DIR") {
        return PathBuf::from(dir);
    }
    target_dir().join("guests")
}

/// `CARGO_TARGET_TMPDIR` only exists when compiling integration tests, not
/// this library, so the target directory is found from the test executable,
/// which Cargo puts in `<target>/<profile>/deps/`.
fn target_dir() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        if deps.file_name()? != "deps" {
            return None;
        }
        Some(deps.parent()?.parent()?.to_path_buf())
    });
    from_exe.unwrap_or_else(|| workspace_root().join("target"))
}

/// Builds all guests once per process and returns [`guest_build_dir`]:
///
/// * `<dir>/<prog>{,-nofp,-oracle}.elf` and `<dir>/el3{,-oracle}.elf` from `tests/guests`,
/// * `<dir>/hello/hello.elf` from `examples/hello`,
/// * `<dir>/bench/calldense.elf` from `bench/guests`.
///
/// `make` decides what is stale, so later runs cost little.
pub fn build_guests() -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_guests_uncached().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the test guests failed: {e}"))
}

fn build_guests_uncached() -> Result<PathBuf> {
    let cross = cross_prefix();
    let gcc = format!("{cross}gcc");
    match Command::new(&gcc).arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => bail!(
            "the AArch64 cross compiler `{gcc}` is missing: run scripts/install-deps.sh \
             (or set QEMU_UFTRACE_CROSS to another toolchain prefix)"
        ),
    }
    let dir = guest_build_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let root = workspace_root();
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (src, out) in [
        ("tests/guests", dir.clone()),
        ("examples/hello", dir.join("hello")),
        ("bench/guests", dir.join("bench")),
    ] {
        let mut cmd = locked(&dir.join(".lock"), "make");
        cmd.arg("-s")
            .arg(format!("-j{jobs}"))
            .arg("-C")
            .arg(root.join(src))
            .arg(format!("O={}", out.display()))
            .arg(format!("CROSS={cross}"))
            .stdin(Stdio::null());
        let output = cmd
            .output()
            .with_context(|| format!("running make in {src} (is make installed?)"))?;
        if !output.status.success() {
            bail!(
                "make -C {src} failed ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    Ok(dir)
}

/// `program` under `flock lock` when flock(1) exists: two test processes
/// sharing a target directory must not run make on one tree concurrently.
pub(crate) fn locked(lock: &Path, program: &str) -> Command {
    let have_flock = Command::new("flock")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if have_flock {
        let mut cmd = Command::new("flock");
        cmd.arg(lock).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// The path of a test program's ELF, building the guests first.
pub fn guest_elf(program: &str, variant: Variant) -> Result<PathBuf> {
    let path = build_guests()?.join(format!("{program}{}.elf", variant.suffix()));
    if !path.is_file() {
        bail!("no guest {}", path.display());
    }
    Ok(path)
}

/// The user-mode emulator the user-mode tests run (QEMU 10.2.2, built from Debian's source
/// by `scripts/install-deps.sh` with plugin support; Debian's qemu-user has none).
pub fn user_qemu() -> PathBuf {
    cached("qemu-10.2.2/bin/qemu-aarch64")
}

/// A Linux user-mode program of `tests/guests/user` (`nested.elf`, `nested-oracle.elf`,
/// `exit3.elf`, `threads.elf`…), built once per process with make into
/// `<guest_build_dir>/user`.
pub fn user_guest_elf(name: &str) -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    built_guest(&BUILT, build_user_guests, "user-mode guests", name)
}

fn build_user_guests() -> Result<PathBuf> {
    build_user_guests_in(&cross_prefix(), "user", &[])
}

/// qemu-riscv64, as [`user_qemu`].
pub fn user_qemu_riscv64() -> PathBuf {
    cached("qemu-10.2.2/bin/qemu-riscv64")
}

/// A program of `tests/guests/user` built for riscv64 (`riscv64-linux-gnu-gcc`), with frame
/// pointers or (`omit_fp`) without, once per process into `<guest_build_dir>/user-riscv64`
/// (`-nofp`).
pub fn user_guest_elf_riscv64(name: &str, omit_fp: bool) -> Result<PathBuf> {
    static BUILT: [OnceLock<std::result::Result<PathBuf, String>>; 2] =
        [OnceLock::new(), OnceLock::new()];
    let dir = BUILT[omit_fp as usize]
        .get_or_init(|| {
            let (sub, extra): (_, &[&str]) = if omit_fp {
                ("user-riscv64-nofp", &["FRAME=-fomit-frame-pointer"])
            } else {
                ("user-riscv64", &[])
            };
            build_user_guests_in("riscv64-linux-gnu-", sub, extra).map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(|e| anyhow!("building the riscv64 user-mode guests failed: {e}"))?;
    let path = dir.join(name);
    if !path.is_file() {
        bail!("no riscv64 user-mode guest {}", path.display());
    }
    Ok(path)
}

fn build_user_guests_in(cross: &str, sub: &str, extra: &[&str]) -> Result<PathBuf> {
    let mut args = vec![format!("CROSS={cross}")];
    args.extend(extra.iter().map(|a| a.to_string()));
    make_guests("user", sub, &args)
}

/// Builds the guests of `tests/guests/<src>` with make into `<guest_build_dir>/<sub>`, with
/// `args` for make (one build at a time across test processes: the directory is locked).
pub fn make_guests(src: &str, sub: &str, args: &[String]) -> Result<PathBuf> {
    let dir = guest_build_dir().join(sub);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let output = locked(&dir.join(".lock"), "make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_root().join("tests/guests").join(src))
        .arg(format!("O={}", dir.display()))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running make in tests/guests/{src} (is make installed?)"))?;
    if !output.status.success() {
        bail!(
            "make -C tests/guests/{src} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(dir)
}

/// `file` in the directory `build` makes, which runs once per process (`built` keeps its
/// outcome); `what` names the guests in errors.
pub(crate) fn built_guest(
    built: &OnceLock<std::result::Result<PathBuf, String>>,
    build: impl FnOnce() -> Result<PathBuf>,
    what: &str,
    file: &str,
) -> Result<PathBuf> {
    let dir = built
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the {what} failed: {e}"))?;
    let path = dir.join(file);
    if !path.is_file() {
        bail!("no {what} file {}", path.display());
    }
    Ok(path)
}

/// `examples/hello`'s ELF, building the guests first.
pub fn hello_elf() -> Result<PathBuf> {
    Ok(build_guests()?.join("hello").join("hello.elf"))
}

/// `bench/guests/calldense.c`'s ELF, building the guests first.
pub fn calldense_elf() -> Result<PathBuf> {
    Ok(build_guests()?.join("bench").join("calldense.elf"))
}

/// The QEMU command line that runs a guest, as argv (program first):
/// `qemu-system-aarch64 -M virt -cpu cortex-a57 -nographic -semihosting -nic none -kernel ELF`.
///
/// `-semihosting` lets the guest end QEMU with its exit status; `-nic none`
/// drops virt's default virtio NIC, whose option ROM (ipxe-qemu) may not be
/// installed.
pub fn qemu_args(elf: &Path) -> Vec<String> {
    qemu_args_on(QEMU, elf)
}

/// [`qemu_args`] on the emulator `qemu`.
pub fn qemu_args_on(qemu: &str, elf: &Path) -> Vec<String> {
    // Pointer-authenticated builds need a CPU with FEAT_PAuth; retaa is undefined on an A57.
    let pac = elf
        .to_string_lossy()
        .ends_with(&format!("{}.elf", Variant::Pac.suffix()));
    [
        qemu,
        "-M",
        "virt",
        "-cpu",
        if pac { "max" } else { "cortex-a57" },
        "-nographic",
        "-semihosting",
        "-nic",
        "none",
        "-kernel",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(elf.display().to_string()))
    .collect()
}

/// The QEMU command line of `el3.elf` (`tests/guests/el3.c`), which starts at EL3, on the
/// emulator `qemu`: [`qemu_args_on`] with `-M virt,secure=on,virtualization=on,gic-version=2`.
/// `secure=on` gives the CPU EL3, where QEMU starts an ELF `-kernel` (at its entry point, with
/// nothing set up); `virtualization=on` adds EL2, which the guest leaves unused; the guest
/// programs the GICv2 (QEMU's default on `virt`, named so that it stays that).
pub fn el3_qemu_args_on(qemu: &str, elf: &Path) -> Vec<String> {
    let mut args = qemu_args_on(qemu, elf);
    let machine = args
        .iter()
        .position(|a| a == "virt")
        .expect("qemu_args_on names the virt machine");
    args[machine] = "virt,secure=on,virtualization=on,gic-version=2".to_string();
    args
}

/// `key=value` from the `plugin.stats` of a trace directory; panics, quoting the file, when
/// the key is missing.
pub fn plugin_stat(dir: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(dir.join("plugin.stats")).expect("plugin.stats");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in plugin.stats:\n{text}"))
        .to_string()
}

/// Runs a guest under plain QEMU (no plugin) with stdin closed and returns
/// QEMU's exit status (the guest's `main` return value) and the UART output.
pub fn run_plain_qemu(elf: &Path) -> Result<(i32, String)> {
    run_plain_qemu_with_timeout(elf, QEMU_TIMEOUT)
}

/// [`run_plain_qemu`] with an explicit time limit; QEMU is killed past it.
pub fn run_plain_qemu_with_timeout(elf: &Path, timeout: Duration) -> Result<(i32, String)> {
    run_plain_qemu_argv(&qemu_args(elf), timeout)
}

/// [`run_plain_qemu_with_timeout`] of the QEMU command line `args` (program first).
pub fn run_plain_qemu_argv(args: &[String], timeout: Duration) -> Result<(i32, String)> {
    let child = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} (run scripts/install-deps.sh)", args[0]))?;
    let (status, stdout, stderr) =
        wait_with_timeout(child, timeout).with_context(|| format!("running {}", args.join(" ")))?;
    let Some(code) = status else {
        bail!(
            "{} did not exit by itself within {timeout:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            args.join(" ")
        );
    };
    let code = code.ok_or_else(|| {
        anyhow!("{QEMU} was killed by a signal\nstdout:\n{stdout}\nstderr:\n{stderr}")
    })?;
    Ok((code, stdout))
}

/// Waits for `child`, reading its stdout and stderr meanwhile. The status is
/// `None` on timeout (the child is then killed), `Some(None)` when a signal
/// ended it, else `Some(Some(code))`.
#[allow(clippy::type_complexity)]
pub(crate) fn wait_with_timeout(
    mut child: Child,
    timeout: Duration,
) -> Result<(Option<Option<i32>>, String, String)> {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                // A read error only truncates the captured text.
                let _ = pipe.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status.code());
        }
        if Instant::now() >= deadline {
            // The child may have exited just now; either way it is reaped.
            let _ = child.kill();
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out.join().map_err(|_| anyhow!("stdout reader panicked"))?;
    let stderr = err.join().map_err(|_| anyhow!("stderr reader panicked"))?;
    Ok((status, stdout, stderr))
}

/// One line of the oracle log: entry to or exit from `func` (its entry
/// address), called from `site` (the return address in the caller: the
/// instruction after the BL/BLR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OracleEvent {
    Enter { func: u64, site: u64 },
    Exit { func: u64, site: u64 },
}

impl OracleEvent {
    pub fn func(&self) -> u64 {
        match *self {
            OracleEvent::Enter { func, .. } | OracleEvent::Exit { func, .. } => func,
        }
    }

    pub fn site(&self) -> u64 {
        match *self {
            OracleEvent::Enter { site, .. } | OracleEvent::Exit { site, .. } => site,
        }
    }

    pub fn is_enter(&self) -> bool {
        matches!(self, OracleEvent::Enter { .. })
    }
}

/// Parses the oracle block of an `-oracle` guest's UART output:
///
/// ```text
/// ORACLE-BEGIN
/// E <this_fn hex> <call_site hex>
/// X <this_fn hex> <call_site hex>
/// ORACLE-END
/// ```
///
/// Hex is lowercase without `0x` (a `0x` prefix is accepted too). Fails if
/// the block is missing, cut short, or the guest's log overflowed.
pub fn parse_oracle(uart: &str) -> Result<Vec<OracleEvent>> {
    let mut lines = uart.lines().map(str::trim).enumerate();
    if !lines.any(|(_, l)| l == "ORACLE-BEGIN") {
        bail!("no ORACLE-BEGIN line in the guest output");
    }
    let mut events = Vec::new();
    for (n, line) in lines {
        let lineno = n + 1;
        match line {
            "ORACLE-END" => return Ok(events),
            "ORACLE-OVERFLOW" => bail!("the guest's oracle log overflowed"),
            _ => {}
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [kind, func, site] = fields[..] else {
            bail!("line {lineno}: malformed oracle line {line:?}");
        };
        let func = parse_hex(func).with_context(|| format!("line {lineno}: {line:?}"))?;
        let site = parse_hex(site).with_context(|| format!("line {lineno}: {line:?}"))?;
        events.push(match kind {
            "E" => OracleEvent::Enter { func, site },
            "X" => OracleEvent::Exit { func, site },
            _ => bail!("line {lineno}: unknown oracle event kind in {line:?}"),
        });
    }
    bail!("the oracle log has no ORACLE-END line (guest output cut short?)")
}

fn parse_hex(s: &str) -> Result<u64> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(digits, 16).with_context(|| format!("bad hex number {s:?}"))
}

/// Checks that every exit matches the innermost open entry (same function
/// and call site) and that nothing is left open.
pub fn check_balanced(events: &[OracleEvent]) -> Result<()> {
    let mut stack: Vec<(u64, u64)> = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        match *ev {
            OracleEvent::Enter { func, site } => stack.push((func, site)),
            OracleEvent::Exit { func, site } => match stack.pop() {
                Some(top) if top == (func, site) => {}
                Some((f, s)) => bail!(
                    "event {i}: exit of {func:#x} (site {site:#x}) while {f:#x} (site {s:#x}) is innermost"
                ),
                None => bail!("event {i}: exit of {func:#x} with no open entry"),
            },
        }
    }
    if let Some((f, s)) = stack.last() {
        bail!(
            "{} entries never exit, innermost {f:#x} (site {s:#x})",
            stack.len()
        );
    }
    Ok(())
}

/// The oracle log as `"E name"` / `"X name"` strings, for readable
/// assertions; addresses without a symbol stay hex.
pub fn oracle_names(events: &[OracleEvent], symbols: &BTreeMap<u64, String>) -> Vec<String> {
    events
        .iter()
        .map(|ev| {
            let kind = if ev.is_enter() { 'E' } else { 'X' };
            match symbols.get(&ev.func()) {
                Some(name) => format!("{kind} {name}"),
                None => format!("{kind} {:#x}", ev.func()),
            }
        })
        .collect()
}

/// What the cross toolchain's `nm --defined-only` lists for `elf`.
pub fn nm_defined(elf: &Path) -> Result<String> {
    let nm = format!("{}nm", cross_prefix());
    let out = Command::new(&nm)
        .arg("--defined-only")
        .arg(elf)
        .output()
        .with_context(|| format!("running {nm} (run scripts/install-deps.sh)"))?;
    if !out.status.success() {
        bail!(
            "{nm} {} failed: {}",
            elf.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The guest's text symbols (address → name) from `aarch64-linux-gnu-nm`.
/// Where several names share an address the first listed wins.
pub fn nm_functions(elf: &Path) -> Result<BTreeMap<u64, String>> {
    let mut map = BTreeMap::new();
    for line in nm_defined(elf)?.lines() {
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // `$x…`: RISC-V mapping symbols, which a non-RISC-V nm lists as local text.
        if !matches!(kind, "T" | "t" | "W" | "w") || name.starts_with('$') {
            continue;
        }
        let addr =
            parse_hex(addr).with_context(|| format!("nm {} line {line:?}", elf.display()))?;
        map.entry(addr).or_insert_with(|| name.to_owned());
    }
    Ok(map)
}

/// The function containing `addr`: the nearest symbol at or below it.
pub fn function_at(symbols: &BTreeMap<u64, String>, addr: u64) -> Option<(u64, &str)> {
    symbols
        .range(..=addr)
        .next_back()
        .map(|(a, n)| (*a, n.as_str()))
}

/// One function of a disassembly.
#[derive(Debug, Clone)]
pub struct DisasmFunction {
    pub name: String,
    pub addr: u64,
    /// `(address, "mnemonic operands")` with single spaces, e.g.
    /// `(0x40080094, "b 40080070 <tail_c>")`.
    pub insns: Vec<(u64, String)>,
}

impl DisasmFunction {
    /// The mnemonics, one per instruction.
    pub fn mnemonics(&self) -> impl Iterator<Item = &str> {
        self.insns
            .iter()
            .filter_map(|(_, text)| text.split_whitespace().next())
    }

    /// Whether the function sets up a frame record (`mov x29, sp`).
    pub fn has_frame_record(&self) -> bool {
        self.insns
            .iter()
            .any(|(_, t)| t == "mov x29, sp" || t.starts_with("add x29, sp,"))
    }
}

/// Disassembles the guest's `.text` with `aarch64-linux-gnu-objdump -d`, in
/// address order.
pub fn disassemble(elf: &Path) -> Result<Vec<DisasmFunction>> {
    disassemble_by(&format!("{}objdump", cross_prefix()), elf, None)
}

/// Disassembles `elf`'s code with `objdump` (an architecture's own), in address order:
/// only function `only` where given (`--disassemble=FUNC`; a kernel's whole text takes
/// minutes).
pub fn disassemble_by(
    objdump: &str,
    elf: &Path,
    only: Option<&str>,
) -> Result<Vec<DisasmFunction>> {
    let out = Command::new(objdump)
        .args(["-d", "--no-show-raw-insn"])
        .args(only.map(|f| format!("--disassemble={f}")))
        .arg(elf)
        .output()
        .with_context(|| format!("running {objdump} (run scripts/install-deps.sh)"))?;
    if !out.status.success() {
        bail!(
            "{objdump} {} failed: {}",
            elf.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut funcs: Vec<DisasmFunction> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "0000000040080060 <tail_leaf>:"
        if let Some(head) = line.strip_suffix(">:") {
            if let Some((addr, name)) = head.split_once(" <") {
                funcs.push(DisasmFunction {
                    name: name.to_owned(),
                    addr: parse_hex(addr.trim())?,
                    insns: Vec::new(),
                });
            }
            continue;
        }
        // "    40080094:\tb\t40080070 <tail_c>"
        let Some((addr, text)) = line.split_once(':') else {
            continue;
        };
        let (Ok(addr), Some(func)) = (parse_hex(addr.trim()), funcs.last_mut()) else {
            continue;
        };
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() && text != "..." {
            func.insns.push((addr, text));
        }
    }
    Ok(funcs)
}

/// The sibling (tail) calls in a guest: `(function, target)` for every
/// branch that leaves its function without linking — `b`, `b.cond`,
/// `cbz`/`cbnz`, `tbz`/`tbnz` to another function (target `Some(name)`) or
/// `br` (target `None`). `ret` and `bl`/`blr` are not tail calls.
pub fn tail_calls(elf: &Path) -> Result<BTreeSet<(String, Option<String>)>> {
    let funcs = disassemble(elf)?;
    let starts: BTreeMap<u64, &str> = funcs.iter().map(|f| (f.addr, f.name.as_str())).collect();
    let mut calls = BTreeSet::new();
    for f in &funcs {
        let end = starts
            .range(f.addr + 1..)
            .next()
            .map_or(u64::MAX, |(a, _)| *a);
        for (_, text) in &f.insns {
            let mut parts = text.split_whitespace();
            let Some(mnemonic) = parts.next() else {
                continue;
            };
            if mnemonic == "br" {
                calls.insert((f.name.clone(), None));
                continue;
            }
            let is_branch = mnemonic == "b"
                || mnemonic.starts_with("b.")
                || matches!(mnemonic, "cbz" | "cbnz" | "tbz" | "tbnz");
            if !is_branch {
                continue;
            }
            // The target is the operand just before "<symbol>".
            let operands: Vec<&str> = parts.collect();
            let Some(pos) = operands.iter().position(|o| o.starts_with('<')) else {
                continue;
            };
            let Some(target) = pos
                .checked_sub(1)
                .and_then(|i| parse_hex(operands[i].trim_end_matches(',')).ok())
            else {
                continue;
            };
            if target < f.addr || target >= end {
                let name = starts.get(&target).map_or_else(
                    || {
                        operands[pos]
                            .trim_matches(|c| c == '<' || c == '>')
                            .to_owned()
                    },
                    |n| n.to_string(),
                );
                calls.insert((f.name.clone(), Some(name)));
            }
        }
    }
    Ok(calls)
}

/// The number a guest header `#define`s as `name` (`#define NAME 42`): the guests' counts
/// headers are the one place their expected call counts are written.
pub fn header_define(header: &str, name: &str) -> u64 {
    header
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some(name))
                .then(|| words.next()?.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no #define {name} in counts.h"))
}

/// Every path under `dir` (recursively, links not followed) with what it is: a link and its
/// target, a directory, or a file's length and a hash of its contents. Two snapshots taken
/// around a run show whatever it wrote, moved or removed there.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let path = e.expect("dir entry").path();
            let meta = path.symlink_metadata().expect("lstat");
            let what = if meta.is_symlink() {
                format!(
                    "link {}",
                    std::fs::read_link(&path).expect("readlink").display()
                )
            } else if meta.is_dir() {
                todo.push(path.clone());
                "dir".to_string()
            } else {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&path).expect("read").hash(&mut h);
                format!("file {} {:016x}", meta.len(), h.finish())
            };
            out.insert(path, what);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_defines_are_read_by_name() {
        let h = "#ifndef C_H\n#define WORKER_STEPS 7\n#define THREAD_STEPS   12 /* each */\n";
        assert_eq!(header_define(h, "WORKER_STEPS"), 7);
        assert_eq!(header_define(h, "THREAD_STEPS"), 12);
    }

    #[test]
    fn parses_oracle_block() {
        let uart =
            "hello\nORACLE-BEGIN\nE 40080100 40080038\r\nX 0x40080100 40080038\nORACLE-END\nbye\n";
        let events = parse_oracle(uart).expect("valid oracle block");
        assert_eq!(
            events,
            vec![
                OracleEvent::Enter {
                    func: 0x40080100,
                    site: 0x40080038
                },
                OracleEvent::Exit {
                    func: 0x40080100,
                    site: 0x40080038
                },
            ]
        );
        check_balanced(&events).expect("balanced");
    }

    #[test]
    fn rejects_bad_oracle_blocks() {
        assert!(parse_oracle("no oracle here").is_err());
        assert!(parse_oracle("ORACLE-BEGIN\nE 1 2\n").is_err());
        assert!(parse_oracle("ORACLE-BEGIN\nE 1\nORACLE-END\n").is_err());
        assert!(parse_oracle("ORACLE-BEGIN\nQ 1 2\nORACLE-END\n").is_err());
        assert!(parse_oracle("ORACLE-BEGIN\nE zz 2\nORACLE-END\n").is_err());
        assert!(parse_oracle("ORACLE-BEGIN\nORACLE-OVERFLOW\nORACLE-END\n").is_err());
    }

    #[test]
    fn detects_unbalanced_logs() {
        let e = |func, site| OracleEvent::Enter { func, site };
        let x = |func, site| OracleEvent::Exit { func, site };
        assert!(check_balanced(&[e(1, 2)]).is_err());
        assert!(check_balanced(&[x(1, 2)]).is_err());
        assert!(check_balanced(&[e(1, 2), e(3, 4), x(1, 2), x(3, 4)]).is_err());
        assert!(check_balanced(&[e(1, 2), e(3, 4), x(3, 4), x(1, 2)]).is_ok());
    }

    #[test]
    fn qemu_command_line() {
        let args = qemu_args(Path::new("/tmp/g.elf"));
        assert_eq!(args[0], QEMU);
        assert_eq!(args.last().map(String::as_str), Some("/tmp/g.elf"));
        assert!(args.iter().any(|a| a == "-semihosting"));
    }

    #[test]
    fn runtime_functions() {
        assert!(is_runtime_function("rt_putc"));
        assert!(is_runtime_function("__cyg_profile_func_exit"));
        assert!(is_runtime_function("oracle_dump"));
        assert!(!is_runtime_function("main"));
        assert!(!is_runtime_function("tail_a"));
    }
}
