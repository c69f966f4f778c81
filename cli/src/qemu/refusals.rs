//! Options of a system-mode command line that qemu-uftrace refuses before running QEMU,
//! each with one line naming the problem and the way out: those that take the guest away
//! from the plugin (a hardware accelerator), keep QEMU from ever ending or from ending in
//! the foreground (`-S` with nothing to continue it, `-daemonize`), clash with our own
//! `-plugin`, or name no kernel QEMU could load.

use std::path::Path;

use anyhow::Result;

use super::options::{keyval, QemuOption};
use crate::errors::{fail, usage};

/// Refuses the command line `opts` (without argv[0]) at its first problem.
pub fn check(opts: &[QemuOption]) -> Result<()> {
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
    check_kernel(opts)
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
/// not load kernel".
fn check_kernel(opts: &[QemuOption]) -> Result<()> {
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
            let e = check(&options(&os(v))).unwrap_err();
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
        assert!(check(&opts).is_ok());
        let (code, msg) = refused(&["-kernel", "/nonexistent/Image"]);
        assert_eq!(code, 2);
        assert!(
            msg.starts_with("-kernel /nonexistent/Image: no such file; "),
            "{msg}"
        );
        let (code, msg) = refused(&["-kernel", "/"]);
        assert_eq!(code, 2);
        assert!(msg.starts_with("-kernel / is a directory; "), "{msg}");
        // The last -kernel is the one QEMU loads.
        assert!(check(&options(&os(&[
            "-kernel",
            "/nonexistent",
            "-kernel",
            "/bin/sh"
        ])))
        .is_ok());
        assert!(check(&options(&os(&["-M", "virt", "-kernel"]))).is_ok());
    }
}
