//! Options of a system-mode command line that qemu-uftrace refuses before running QEMU,
//! each with one line naming the problem and the way out: those that take the guest away
//! from the plugin (a hardware accelerator), keep QEMU from ever ending or from ending in
//! the foreground (`-S` with nothing to continue it, `-daemonize`), clash with our own
//! `-plugin`, or name no kernel QEMU could load (no file, or one this QEMU cannot boot).

use std::path::Path;

use anyhow::Result;
use qemu_uftrace_symbols::{Arch, BootFormat};

use super::options::{keyval, QemuOption};
use crate::errors::{fail, usage};

/// Refuses the command line `opts` (without argv[0]) of `qemu` (its name, for messages),
/// which runs `arch` guests, at its first problem.
pub fn check(opts: &[QemuOption], arch: Arch, qemu: &str) -> Result<()> {
    if opts.iter().any(|o| o.name == "daemonize") {
        return Err(usage(
            "-daemonize makes QEMU return at once and run on in the background, so the trace \
             would be assembled while QEMU still writes it",
            "remove -daemonize (record runs QEMU in the foreground; stop it with Ctrl-C)",
        ));
    }
    if let Some(opt) = hardware_accel(opts) {
        return Err(usage(
            format!("'{opt}' runs the guest on a hardware accelerator, but qemu-uftrace needs TCG"),
            "remove it (or use -accel tcg)",
        ));
    }
    check_plugin_clash(opts)?;
    if paused_for_good(opts) {
        return Err(usage(
            "-S starts the guest paused, and nothing on this command line can continue it (no \
             gdb stub, no monitor): QEMU would wait forever",
            "remove -S, or add -s and continue from gdb (target remote :1234, then continue), \
             or add -monitor stdio and type cont",
        ));
    }
    check_kernel(opts, arch, qemu)
}

/// Refuses a command that loads qemu-uftrace's plugin itself (system and user mode).
pub fn check_plugin_clash(opts: &[QemuOption]) -> Result<()> {
    // Other plugins (QEMU's execlog, say) run beside ours; a second copy of ours would write
    // into a trace of its own choosing, or into ours.
    if let Some(o) = opts
        .iter()
        .find(|o| o.name == "plugin" && loads_our_plugin(o))
    {
        let value = o.value.as_deref().unwrap_or_default().to_string_lossy();
        return Err(usage(
            format!(
                "the QEMU command already loads qemu-uftrace's plugin (-plugin {value}), and \
                 record adds its own"
            ),
            "remove that -plugin (to record with another build of qemu-uftrace's plugin, \
             give it with --plugin PATH)",
        ));
    }
    Ok(())
}

/// Whether a `-plugin` option loads qemu-uftrace's plugin: a file named like our builds
/// (`libqemu_uftrace_plugin.so`, the cache's `qemu-uftrace-plugin-v4-….so`) or our `out=`.
fn loads_our_plugin(o: &QemuOption) -> bool {
    let value = o.value.as_deref().unwrap_or_default();
    keyval(value, "file").iter().any(|(k, v)| {
        let name = Path::new(v)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        (k == "file"
            && name.is_some_and(|n| {
                n.starts_with("qemu-uftrace-plugin") || n.starts_with("libqemu_uftrace_plugin")
            }))
            || k == "out"
    })
}

/// True when `-S` pauses the guest at start and the command gives nothing that could
/// continue it: no gdb stub (`-s`, `-gdb`), no monitor (`-monitor`, `-mon`, `-qmp`, a
/// `mon:` serial or parallel port, or the one `-nographic` puts on stdio unless
/// `-nodefaults`). The monitor of a graphical display is not counted: nothing on the
/// command line says that a display will open.
fn paused_for_good(opts: &[QemuOption]) -> bool {
    let has = |name: &str| opts.iter().any(|o| o.name == name);
    let value = |o: &QemuOption| {
        o.value
            .as_ref()
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let can_continue = opts.iter().any(|o| match o.name.as_str() {
        "s" | "mon" | "qmp" | "qmp-pretty" => true,
        "gdb" | "monitor" => value(o) != "none",
        "serial" | "parallel" => value(o).starts_with("mon:"),
        "nographic" => !has("nodefaults"),
        _ => false,
    });
    has("S") && !can_continue
}

/// The kernel QEMU would load (the last `-kernel`) must be a file: refused here, QEMU's own
/// failure would come after the plugin and symbol loading have started, as a bare "could
/// not load kernel". And one this QEMU can boot: Arm and RISC-V boards load what they do
/// not recognise as raw code and run it, so a text file or another machine's kernel left
/// QEMU spinning without a word.
fn check_kernel(opts: &[QemuOption], arch: Arch, qemu: &str) -> Result<()> {
    let Some(value) = opts
        .iter()
        .rev()
        .find(|o| o.name == "kernel")
        .and_then(|o| o.value.as_ref())
    else {
        return Ok(());
    };
    let path = Path::new(value);
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(usage(
            format!("-kernel {} is a directory", path.display()),
            "give the kernel image file itself (an ELF such as vmlinux, or an arm64 Image)",
        )),
        Ok(m) if m.is_file() => check_boot_format(path, arch, qemu),
        // A FIFO or a device (`-kernel /dev/stdin`): reading it could block; QEMU decides.
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(usage(
            format!("-kernel {}: no such file", path.display()),
            "give the path of the kernel or bare-metal ELF to boot",
        )),
        Err(e) => Err(fail(
            format!("-kernel {}: {e}", path.display()),
            "make the kernel image readable, or give another one",
        )),
    }
}

/// Refuses a `-kernel` file that `qemu` (running `arch` guests) cannot boot, by its first
/// bytes. What nothing tells apart from code (a raw binary, a uImage, a compressed image
/// naming no machine) is left to QEMU.
fn check_boot_format(path: &Path, arch: Arch, qemu: &str) -> Result<()> {
    use std::io::Read;
    let mut head = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| {
        f.take(qemu_uftrace_symbols::BOOT_HEAD_BYTES as u64)
            .read_to_end(&mut head)
    });
    if let Err(e) = read {
        return Err(fail(
            format!("-kernel {}: {e}", path.display()),
            "make the kernel image readable, or give another one",
        ));
    }
    let file = format!("-kernel {}", path.display());
    let give = format!(
        "give {qemu} a kernel built for {arch} (vmlinux, {}) or an ELF program for it",
        match arch {
            Arch::X86_64 => "bzImage",
            _ => "Image",
        }
    );
    let elsewhere = |other: Arch| format!("{give}, or boot this one with qemu-system-{other}");
    match qemu_uftrace_symbols::boot_format(&head) {
        BootFormat::Empty => Err(usage(format!("{file} is an empty file"), give)),
        BootFormat::Text => Err(usage(
            format!("{file} is a text file, not a kernel or program {qemu} can boot"),
            give,
        )),
        BootFormat::Elf { machine, arch: a } if !elf_runs_on(machine, arch) => {
            let what = format!("{file} is an ELF file for {}", machine_name(machine));
            Err(usage(
                format!("{what}, which {qemu} cannot run"),
                match a {
                    Some(other) => elsewhere(other),
                    None => give,
                },
            ))
        }
        BootFormat::Image(other) if other != arch => Err(usage(
            format!("{file} is a kernel Image for {other}, which {qemu} cannot boot"),
            elsewhere(other),
        )),
        BootFormat::BzImage if arch != Arch::X86_64 => Err(usage(
            format!("{file} is an x86 bzImage, which {qemu} cannot boot"),
            elsewhere(Arch::X86_64),
        )),
        _ => Ok(()),
    }
}

/// Whether an ELF file for `machine` runs on an `arch` QEMU: its own machine, or the
/// 32-bit one the same QEMU also runs (qemu-system-aarch64 runs 32-bit Arm cores, and an
/// x86 kernel may be a 32-bit multiboot ELF).
fn elf_runs_on(machine: u16, arch: Arch) -> bool {
    use object::elf::{EM_386, EM_AARCH64, EM_ARM, EM_RISCV, EM_X86_64};
    match arch {
        Arch::Aarch64 => matches!(machine, EM_AARCH64 | EM_ARM),
        Arch::X86_64 => matches!(machine, EM_X86_64 | EM_386),
        Arch::Riscv64 => machine == EM_RISCV,
    }
}

/// An ELF machine's name, for messages.
fn machine_name(machine: u16) -> String {
    use object::elf::*;
    match machine {
        EM_AARCH64 => "aarch64".into(),
        EM_ARM => "32-bit Arm".into(),
        EM_X86_64 => "x86_64".into(),
        EM_386 => "i386".into(),
        EM_RISCV => "RISC-V".into(),
        EM_PPC => "PowerPC".into(),
        EM_PPC64 => "64-bit PowerPC".into(),
        EM_S390 => "s390".into(),
        EM_MIPS => "MIPS".into(),
        EM_LOONGARCH => "LoongArch".into(),
        n => format!("machine {n} (e_machine)"),
    }
}

/// Hardware accelerators that bypass TCG, and so our plugin.
const HW_ACCELS: &[&str] = &["kvm", "hvf", "whpx", "xen", "nvmm"];

/// The option that asks for a hardware accelerator, if any, as the user wrote it.
pub fn hardware_accel(opts: &[QemuOption]) -> Option<String> {
    for o in opts {
        let Some(v) = &o.value else {
            if o.name == "enable-kvm" {
                return Some("-enable-kvm".into());
            }
            continue;
        };
        let (implied, written) = match o.name.as_str() {
            "accel" => ("accel", "-accel"),
            "machine" => ("type", "-machine"),
            "M" => ("type", "-M"),
            _ => continue,
        };
        let accels = keyval(v, implied)
            .into_iter()
            .find(|(k, _)| k == "accel")
            .map(|(_, a)| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        // `-M accel=kvm:tcg` tries KVM first.
        if accels.split(':').any(|a| HW_ACCELS.contains(&a)) {
            return Some(format!("{written} {}", v.to_string_lossy()));
        }
    }
    None
}
#[cfg(test)]
mod tests {
    use super::*;

    const QEMU: &str = "qemu-system-aarch64";
    use crate::qemu::options::options;
    use std::ffi::OsString;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn detects_hardware_accelerators() {
        let cases = [
            (vec!["-enable-kvm"], Some("-enable-kvm")),
            (vec!["--enable-kvm"], Some("-enable-kvm")),
            (vec!["-accel", "kvm"], Some("-accel kvm")),
            (
                vec!["-accel", "hvf,thread=single"],
                Some("-accel hvf,thread=single"),
            ),
            (vec!["-accel", "accel=kvm"], Some("-accel accel=kvm")),
            (
                vec!["-M", "virt,accel=kvm:tcg"],
                Some("-M virt,accel=kvm:tcg"),
            ),
            (vec!["-machine", "accel=whpx"], Some("-machine accel=whpx")),
            (vec!["-accel", "tcg"], None),
            (vec!["-accel", "tcg,thread=multi"], None),
            (vec!["-M", "virt,accel=tcg"], None),
            (vec!["-append", "-enable-kvm"], None),
            (vec!["-M", "virt"], None),
        ];
        for (argv, want) in cases {
            assert_eq!(
                hardware_accel(&options(&os(&argv))).as_deref(),
                want,
                "{argv:?}"
            );
        }
    }

    #[test]
    fn a_paused_start_needs_something_to_continue_it() {
        let paused = |v: &[&str]| paused_for_good(&options(&os(v)));
        assert!(paused(&["-S"]));
        assert!(paused(&["-S", "-display", "none", "-monitor", "none"]));
        assert!(paused(&["-S", "-nographic", "-nodefaults"]));
        assert!(paused(&["-S", "-gdb", "none"]));
        assert!(!paused(&["-M", "virt"]));
        assert!(!paused(&["-S", "-s"]));
        assert!(!paused(&["-S", "-gdb", "tcp::1234"]));
        assert!(!paused(&["-S", "-qmp", "unix:/tmp/q,server,wait=off"]));
        assert!(!paused(&["-S", "-monitor", "stdio"]));
        assert!(!paused(&["-S", "-serial", "mon:stdio"]));
        assert!(!paused(&["-S", "-nographic"]));
        // `-S` as the value of another option is no pause.
        assert!(!paused(&["-append", "-S"]));
    }

    #[test]
    fn refusals_name_the_option() {
        let refused = |v: &[&str]| {
            let e = check(&options(&os(v)), Arch::Aarch64, QEMU).unwrap_err();
            (crate::errors::exit_code(&e), format!("{e:#}"))
        };
        let (code, msg) = refused(&[
            "-plugin",
            "/c/qemu-uftrace-plugin-v4-0123.so,out=/t.partial",
            "-M",
            "virt",
        ]);
        assert_eq!(code, 2);
        assert!(
            msg.starts_with(
                "the QEMU command already loads qemu-uftrace's plugin (-plugin \
                 /c/qemu-uftrace-plugin-v4-0123.so,out=/t.partial)"
            ),
            "{msg}"
        );
        // Any other plugin runs beside ours.
        let opts = options(&os(&[
            "-plugin",
            "/x/libexeclog.so,afilter=0x40",
            "-M",
            "virt",
        ]));
        assert!(check(&opts, Arch::Aarch64, QEMU).is_ok());
        let (code, msg) = refused(&["-kernel", "/nonexistent/Image"]);
        assert_eq!(code, 2);
        assert!(
            msg.starts_with("-kernel /nonexistent/Image: no such file; "),
            "{msg}"
        );
        let (code, msg) = refused(&["-kernel", "/"]);
        assert_eq!(code, 2);
        assert!(msg.starts_with("-kernel / is a directory; "), "{msg}");
        // The last -kernel is the one QEMU loads (this host's /bin/sh: an x86_64 ELF).
        let opts = options(&os(&["-kernel", "/nonexistent", "-kernel", "/bin/sh"]));
        assert!(check(&opts, Arch::X86_64, "qemu-system-x86_64").is_ok());
        assert!(check(
            &options(&os(&["-M", "virt", "-kernel"])),
            Arch::Aarch64,
            QEMU
        )
        .is_ok());
    }

    /// A `-kernel` that this QEMU cannot boot: one line naming what it is, and the way out.
    #[test]
    fn kernels_of_another_machine_or_no_kernel_at_all_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p.display().to_string()
        };
        let header = |at: usize, magic: &[u8]| {
            let mut h = vec![0u8; 0x260];
            h[at..at + magic.len()].copy_from_slice(magic);
            h
        };
        let text = file("notes.txt", b"console=ttyAMA0 nokaslr\n");
        let riscv = file("Image-riscv", &header(0x38, b"RSC\x05"));
        let arm = file("Image-arm", &header(0x38, b"ARM\x64"));
        let bz = file("bzImage", &header(0x202, b"HdrS"));
        let empty = file("empty", b"");
        let raw = file("loop.bin", &[0, 0, 0, 0x14]);
        let refused = |kernel: &str, arch: Arch| {
            let qemu = format!("qemu-system-{arch}");
            let e = check(&options(&os(&["-kernel", kernel])), arch, &qemu).unwrap_err();
            assert_eq!(crate::errors::exit_code(&e), 2);
            format!("{e:#}")
        };
        let give = "give qemu-system-aarch64 a kernel built for aarch64 (vmlinux, Image) or an \
                    ELF program for it";
        assert_eq!(
            refused(&text, Arch::Aarch64),
            format!("-kernel {text} is a text file, not a kernel or program qemu-system-aarch64 can boot; {give}")
        );
        assert_eq!(
            refused(&riscv, Arch::Aarch64),
            format!("-kernel {riscv} is a kernel Image for riscv64, which qemu-system-aarch64 cannot boot; {give}, or boot this one with qemu-system-riscv64")
        );
        assert_eq!(
            refused("/bin/sh", Arch::Aarch64),
            format!("-kernel /bin/sh is an ELF file for x86_64, which qemu-system-aarch64 cannot run; {give}, or boot this one with qemu-system-x86_64")
        );
        assert_eq!(
            refused(&empty, Arch::Aarch64),
            format!("-kernel {empty} is an empty file; {give}")
        );
        assert!(refused(&bz, Arch::Riscv64)
            .contains(" is an x86 bzImage, which qemu-system-riscv64 cannot boot; "));
        assert!(refused(&arm, Arch::X86_64).contains(" is a kernel Image for aarch64, which qemu-system-x86_64 cannot boot; give qemu-system-x86_64 a kernel built for x86_64 (vmlinux, bzImage)"));
        let ok = |kernel: &str, arch: Arch| {
            check(&options(&os(&["-kernel", kernel])), arch, "q").is_ok()
        };
        assert!(ok(&arm, Arch::Aarch64) && ok(&riscv, Arch::Riscv64) && ok(&bz, Arch::X86_64));
        // Raw code is loaded as is: QEMU decides.
        assert!(ok(&raw, Arch::Aarch64) && ok(&raw, Arch::Riscv64));
    }
}
