//! Stage 1 of `record`: the QEMU command line, read once into the typed facts the later
//! stages need. Nothing after this stage looks at the command line's words again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Result;
use qemu_uftrace_symbols::Arch;

use crate::errors::usage;
use crate::kernel_alias::Board;
use crate::qemu::{self, Emulator, GuestImage, Mode, QemuOption};

/// A QEMU command as `record` runs it.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The command as typed, argv[0] first.
    pub argv: Vec<OsString>,
    /// Which QEMU argv[0] names.
    pub emulator: Emulator,
    /// QEMU's own options (in user mode, those before the program).
    pub opts: Vec<QemuOption>,
    /// User mode: the program and where QEMU's options end.
    pub user: Option<UserProgram>,
    /// System mode: the guest images the command line loads (`-kernel`, `-bios`, `-device
    /// loader`), our symbol sources. (User mode's program is checked once QEMU is.)
    pub images: Vec<GuestImage>,
    /// `-m`, for the info file.
    pub memory: Option<String>,
    /// User mode: where guest paths are looked up (`-L`, else `QEMU_LD_PREFIX`).
    pub sysroot: Option<PathBuf>,
    /// System mode: what decides where a kernel Image lands.
    pub board: Board,
    /// Whether the command line turns the kernel's address randomisation off, the way the
    /// emulator's architecture allows.
    pub kaslr_off: bool,
    /// System mode: the run starts mid-way, from a snapshot (`-loadvm`) or a migration
    /// stream (`-incoming`): the calls open at its start are unwound after it.
    pub resume: bool,
    /// How a Linux kernel's panic ends (or does not end) QEMU.
    pub panic_end: PanicEnd,
}

/// What the command line makes of a Linux kernel's panic: with `panic=0` (the default) the
/// kernel waits in `panic()` for ever, with `panic=N` it reboots, and QEMU then boots it
/// again unless told not to (`-no-reboot`, or `-action reboot=shutdown`). A boot that
/// panics otherwise never ends, and its recording runs on to the size cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PanicEnd {
    /// `panic=N` with N ≠ 0 on the kernel command line.
    pub reboots: bool,
    /// QEMU exits when the guest reboots.
    pub no_reboot: bool,
}

impl PanicEnd {
    fn of(opts: &[QemuOption]) -> PanicEnd {
        // The kernel takes the last `panic=` of its command line; QEMU the last -append.
        let reboots = opts
            .iter()
            .rev()
            .find(|o| o.name == "append")
            .and_then(|o| o.value.as_ref())
            .and_then(|v| {
                let text = v.to_string_lossy().into_owned();
                // A value the kernel cannot parse leaves its default, 0.
                text.split_whitespace()
                    .rev()
                    .find_map(|w| w.strip_prefix("panic="))
                    .map(|n| n.parse::<i64>().is_ok_and(|n| n != 0))
            })
            .unwrap_or(false);
        let no_reboot = opts.iter().any(|o| {
            o.name == "no-reboot"
                || (o.name == "action"
                    && o.value.as_ref().is_some_and(|v| {
                        qemu::options::keyval(v, "reboot")
                            .iter()
                            .any(|(k, v)| k == "reboot" && v == "shutdown")
                    }))
        });
        PanicEnd { reboots, no_reboot }
    }

    /// The warning for a Linux kernel whose panic would not end QEMU, with the way out.
    pub fn warning(self) -> Option<String> {
        let what = match (self.reboots, self.no_reboot) {
            (true, true) => return None,
            (false, false) => {
                "without panic=-1 in -append and without -no-reboot, a kernel that panics \
                 waits (or reboots) for ever and the recording runs on to the size cap; add both"
            }
            (false, true) => {
                "without panic=-1 in -append, a kernel that panics waits for ever and the \
                 recording runs on to the size cap; add panic=-1 to -append"
            }
            (true, false) => {
                "without -no-reboot, a kernel that panics reboots and boots again, for ever, \
                 and the recording runs on to the size cap; add -no-reboot"
            }
        };
        Some(what.to_string())
    }
}

/// What follows QEMU's options in a user-mode command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserProgram {
    /// The program, as given (`None`: the command names none, refused in preparation).
    pub program: Option<OsString>,
    /// How many words QEMU's options take: the plugin runs QEMU again with them for a
    /// program the guest execs.
    pub opt_words: usize,
}

impl Invocation {
    /// The `-initrd` file of a system-mode command line (the last one counts, as for QEMU).
    pub fn initrd(&self) -> Option<PathBuf> {
        self.opts
            .iter()
            .rev()
            .find(|o| o.name == "initrd")
            .and_then(|o| o.value.as_ref())
            .map(PathBuf::from)
    }

    /// Reads `argv` (the words after `--`). Only what was typed is checked here: the cheap
    /// checks come first.
    pub fn parse(argv: &[OsString]) -> Result<Invocation> {
        if argv.is_empty() || argv[0].is_empty() {
            return Err(usage(
                "no QEMU command given",
                "put it after --, e.g. qemu-uftrace record -- qemu-system-aarch64 -M virt -kernel Image",
            ));
        }
        let emulator = qemu::detect_emulator(&argv[0])?;
        // User mode: QEMU's options end at the program, whose own arguments follow.
        let (opts, user) = match emulator.mode {
            Mode::System => (qemu::options(&argv[1..]), None),
            Mode::User => {
                let cmd = qemu::user::user_command(&argv[1..]);
                let user = UserProgram {
                    program: cmd.program,
                    opt_words: cmd.opt_words,
                };
                (cmd.opts, Some(user))
            }
        };
        let kaslr_off = kaslr_off(emulator.arch, &opts);
        let images = match emulator.mode {
            Mode::System => qemu::guest_images(&opts, qemu::file_is_elf),
            Mode::User => Vec::new(),
        };
        let resume = emulator.mode == Mode::System
            && opts
                .iter()
                .any(|o| o.name == "loadvm" || o.name == "incoming" || sets_a_cpu_pc(o));
        Ok(Invocation {
            resume,
            panic_end: PanicEnd::of(&opts),
            argv: argv.to_vec(),
            memory: qemu::memory(&opts),
            sysroot: qemu::user_maps::sysroot(&opts),
            board: Board::from_options(&opts),
            kaslr_off,
            images,
            emulator,
            opts,
            user,
        })
    }

    pub fn mode(&self) -> Mode {
        self.emulator.mode
    }

    pub fn is_user_mode(&self) -> bool {
        self.emulator.mode == Mode::User
    }

    /// argv[0] as typed.
    pub fn argv0(&self) -> &OsString {
        &self.argv[0]
    }

    /// argv[0]'s file name (`qemu-aarch64`), for messages.
    pub fn name(&self) -> String {
        let argv0 = self.argv0();
        Path::new(argv0)
            .file_name()
            .unwrap_or(argv0.as_os_str())
            .to_string_lossy()
            .into_owned()
    }

    /// How to turn KASLR off on this emulator's architecture, for the warning.
    pub fn kaslr_advice(&self) -> &'static str {
        match self.emulator.arch {
            Some(Arch::Aarch64) => {
                "add nokaslr to -append (or -M virt,dtb-randomness=off, which gives the kernel \
                 no seed, on a CPU without RNDR: not -cpu max)"
            }
            _ => "add nokaslr to -append",
        }
    }
}

/// Whether the command line keeps a Linux kernel at its link address: `nokaslr` on the
/// kernel command line (every architecture), or, on arm64, a `virt` board that gives the
/// kernel no random seed in its device tree (`dtb-randomness=off`), on a CPU without RNDR
/// (the kernel then takes its seed from it: `-cpu max`, `host`). x86_64 kernels take
/// their seed from the CPU and riscv64 QEMU has no such switch: only `nokaslr` holds there.
fn kaslr_off(arch: Option<Arch>, opts: &[QemuOption]) -> bool {
    let nokaslr = opts
        .iter()
        .filter(|o| o.name == "append")
        .filter_map(|o| o.value.as_ref())
        .any(|v| {
            v.to_string_lossy()
                .split_whitespace()
                .any(|w| w == "nokaslr")
        });
    // `dtb-kaslr-seed` is QEMU's older name of `dtb-randomness` (both in 10.2).
    let no_seed = || {
        ["dtb-randomness", "dtb-kaslr-seed"].iter().any(|key| {
            qemu::last_option_key(opts, &["M", "machine"], "type", key)
                .is_some_and(|v| matches!(v.as_str(), "off" | "false" | "no"))
        })
    };
    let rndr = || {
        (opts.iter().rev())
            .find(|o| o.name == "cpu")
            .and_then(|o| o.value.as_ref())
            .is_some_and(|v| {
                let model = v.to_string_lossy();
                matches!(model.split(',').next(), Some("max" | "host"))
            })
    };
    nokaslr || (arch == Some(Arch::Aarch64) && no_seed() && !rndr())
}

/// `-device loader,addr=…,cpu-num=N`: the generic loader sets vCPU N's pc, so its first
/// instruction need not be any function's entry (a run started in the middle of code).
fn sets_a_cpu_pc(o: &QemuOption) -> bool {
    o.name == "device"
        && o.value.as_ref().is_some_and(|v| {
            let kv = qemu::images::device_fields(v);
            kv.iter().any(|(k, v)| k == "driver" && v == "loader")
                && kv.iter().any(|(k, _)| k == "cpu-num")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Invocation {
        Invocation::parse(&v.iter().map(OsString::from).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn system_command_is_read_once() {
        let inv = parse(&[
            "qemu-system-aarch64",
            "-M",
            "virt,gic-version=3",
            "-m",
            "1G",
            "-bios",
            "none",
            "-append",
            "console=ttyAMA0",
        ]);
        assert_eq!(inv.mode(), Mode::System);
        assert_eq!(inv.memory.as_deref(), Some("1G"));
        assert_eq!(inv.board.machine.as_deref(), Some("virt"));
        assert!(inv.board.no_firmware);
        assert!(inv.user.is_none());
        assert!(!inv.kaslr_off);
        assert!(!inv.resume);
    }

    #[test]
    fn snapshots_and_migration_streams_start_mid_way() {
        for (opt, value) in [
            ("-loadvm", "s1"),
            ("-incoming", "file:/tmp/vm"),
            ("-device", "loader,addr=0x40080010,cpu-num=0"),
            ("-device", "driver=loader,addr=0x40080010,cpu-num=0"),
            (
                "-device",
                r#"{"driver":"loader","addr":1074266128,"cpu-num":0}"#,
            ),
        ] {
            let inv = parse(&["qemu-system-aarch64", "-M", "virt", opt, value]);
            assert!(inv.resume, "{opt} {value}");
        }
        // A loader that only loads data leaves the pc alone.
        let inv = parse(&[
            "qemu-system-aarch64",
            "-device",
            "loader,file=blob.bin,addr=0x48000000",
        ]);
        assert!(!inv.resume);
    }

    #[test]
    fn user_command_splits_at_the_program() {
        let inv = parse(&["qemu-aarch64", "-L", "/sysroot", "./prog", "-L", "x"]);
        assert!(inv.is_user_mode());
        assert_eq!(inv.sysroot.as_deref(), Some(Path::new("/sysroot")));
        assert_eq!(inv.name(), "qemu-aarch64");
        let user = inv.user.unwrap();
        assert_eq!(user.program.as_deref(), Some("./prog".as_ref()));
        assert_eq!(user.opt_words, 2);
    }

    #[test]
    fn no_command_is_a_usage_error() {
        let e = Invocation::parse(&[]).unwrap_err();
        assert!(format!("{e:#}").starts_with("no QEMU command given"));
        assert!(Invocation::parse(&["ls".into()]).is_err());
    }

    #[test]
    fn a_panic_ends_qemu_with_panic_n_and_no_reboot() {
        let end = |v: &[&str]| {
            let mut argv = vec!["qemu-system-aarch64", "-M", "virt"];
            argv.extend(v);
            parse(&argv).panic_end
        };
        let ends = |v: &[&str]| end(v).warning().is_none();
        assert!(ends(&["-no-reboot", "-append", "console=ttyAMA0 panic=-1"]));
        assert!(ends(&["-append", "panic=5", "-action", "reboot=shutdown"]));
        assert!(ends(&[
            "-append",
            "panic=5",
            "-action",
            "panic=pause,reboot=shutdown"
        ]));
        // The last -append, and its last panic=, count; panic=0 waits for ever.
        assert!(!ends(&[
            "-no-reboot",
            "-append",
            "panic=1",
            "-append",
            "quiet"
        ]));
        assert!(!ends(&["-no-reboot", "-append", "panic=-1 panic=0"]));
        assert!(!ends(&["-append", "panic=-1", "-action", "reboot=reset"]));
        let w = |v: &[&str]| end(v).warning().unwrap();
        assert!(w(&["-append", "console=ttyAMA0 nokaslr"]).ends_with("; add both"));
        assert!(w(&["-no-reboot"]).ends_with("; add panic=-1 to -append"));
        assert!(w(&["-append", "panic=-1"]).ends_with("; add -no-reboot"));
    }

    #[test]
    fn kaslr_switches_per_architecture() {
        let off = |v: &[&str]| parse(v).kaslr_off;
        assert!(off(&[
            "qemu-system-aarch64",
            "-append",
            "console=ttyAMA0 nokaslr"
        ]));
        assert!(off(&[
            "qemu-system-aarch64",
            "-M",
            "virt,dtb-kaslr-seed=off"
        ]));
        assert!(off(&[
            "qemu-system-aarch64",
            "-machine",
            "type=virt,dtb-kaslr-seed=no"
        ]));
        assert!(!off(&[
            "qemu-system-aarch64",
            "-M",
            "virt,dtb-kaslr-seed=on"
        ]));
        assert!(off(&[
            "qemu-system-aarch64",
            "-M",
            "virt,dtb-randomness=off"
        ]));
        // A CPU with RNDR seeds the kernel without the device tree.
        assert!(!off(&[
            "qemu-system-aarch64",
            "-M",
            "virt,dtb-randomness=off",
            "-cpu",
            "max,pauth=off"
        ]));
        assert!(!off(&[
            "qemu-system-aarch64",
            "-append",
            "console=ttyAMA0 xnokaslr"
        ]));
        assert!(off(&["qemu-system-x86_64", "-append", "nokaslr"]));
        assert!(off(&[
            "qemu-system-riscv64",
            "-append",
            "console=ttyS0 nokaslr"
        ]));
        // Only arm64 kernels take their seed from QEMU's device tree.
        assert!(!off(&[
            "qemu-system-riscv64",
            "-M",
            "virt,dtb-kaslr-seed=off"
        ]));
        assert!(!off(&["qemu-system-x86_64", "-append", "console=ttyS0"]));
        assert!(parse(&["qemu-system-aarch64"])
            .kaslr_advice()
            .contains("-M virt,dtb-randomness=off"));
        assert_eq!(
            parse(&["qemu-system-riscv64"]).kaslr_advice(),
            "add nokaslr to -append"
        );
    }
}
