//! Understanding the QEMU command line we are given: which emulator it runs, which guest
//! images it loads (our symbol sources), whether it asks for a hardware accelerator, and
//! where to put our `-plugin` option. Pure functions: nothing here runs QEMU.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::args::Clock;
use crate::errors::usage;

/// System emulation (`qemu-system-<arch>`) or user-mode emulation (`qemu-<arch>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    System,
    User,
}

/// Which QEMU the command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulator {
    pub mode: Mode,
    /// The target as QEMU names it (`aarch64`, `x86_64`, `riscv64`, …).
    pub arch: String,
}

impl Emulator {
    /// The one combination the plugin supports today.
    pub fn is_supported(&self) -> bool {
        self.mode == Mode::System && self.arch == "aarch64"
    }

    /// `system-mode aarch64`, `user-mode x86_64`: for messages.
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            Mode::System => "system-mode",
            Mode::User => "user-mode",
        };
        format!("{mode} {}", self.arch)
    }
}

/// Targets QEMU builds emulators for; a name outside this list is not a QEMU emulator
/// (`qemu-img`, `qemu-nbd`, `qemu-io`, …).
const QEMU_TARGETS: &[&str] = &[
    "aarch64",
    "aarch64_be",
    "alpha",
    "arm",
    "armeb",
    "avr",
    "cris",
    "hexagon",
    "hppa",
    "i386",
    "loongarch64",
    "m68k",
    "microblaze",
    "microblazeel",
    "mips",
    "mips64",
    "mips64el",
    "mipsel",
    "mipsn32",
    "mipsn32el",
    "or1k",
    "ppc",
    "ppc64",
    "ppc64le",
    "riscv32",
    "riscv64",
    "rx",
    "s390x",
    "sh4",
    "sh4eb",
    "sparc",
    "sparc32plus",
    "sparc64",
    "tricore",
    "x86_64",
    "xtensa",
    "xtensaeb",
];

/// Detects the emulator from argv[0]'s file name.
pub fn detect_emulator(argv0: &OsStr) -> Result<Emulator> {
    let name = Path::new(argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Debian's statically linked user-mode emulators are named qemu-<arch>-static.
    let stem = name.strip_suffix("-static").unwrap_or(&name);
    let (mode, arch) = if let Some(arch) = stem.strip_prefix("qemu-system-") {
        (Mode::System, arch)
    } else if let Some(arch) = stem.strip_prefix("qemu-") {
        (Mode::User, arch)
    } else {
        return Err(not_an_emulator(argv0));
    };
    if !QEMU_TARGETS.contains(&arch) {
        return Err(not_an_emulator(argv0));
    }
    Ok(Emulator {
        mode,
        arch: arch.to_string(),
    })
}

fn not_an_emulator(argv0: &OsStr) -> anyhow::Error {
    usage(
        format!(
            "'{}' is not a QEMU emulator (expected qemu-system-<arch> or qemu-<arch>)",
            argv0.to_string_lossy()
        ),
        "give a QEMU command after --, e.g. qemu-uftrace record -- qemu-system-aarch64 -M virt -kernel Image",
    )
}

/// Options of qemu-system-* that take no argument (QEMU 9.2–10, plus a few older spellings);
/// every other option takes exactly one. Found by running each option of `-help` alone.
const FLAG_OPTIONS: &[&str] = &[
    "S",
    "alt-grab",
    "async-teardown",
    "ctrl-grab",
    "curses",
    "daemonize",
    "enable-kvm",
    "enable-sync-profile",
    "full-screen",
    "h",
    "help",
    "jitdump",
    "mem-prealloc",
    "no-acpi",
    "no-fd-bootchk",
    "no-frame",
    "no-hpet",
    "no-quit",
    "no-reboot",
    "no-shutdown",
    "no-user-config",
    "nodefaults",
    "nographic",
    "old-param",
    "one-insn-per-tb",
    "only-migratable",
    "perfmap",
    "portrait",
    "preconfig",
    "s",
    "sdl",
    "semihosting",
    "singlestep",
    "snapshot",
    "usb",
    "version",
    "win2k-hack",
    "xen-attach",
    "xen-domid-restrict",
];

/// One option of a system-mode command line, with QEMU's `--opt` spelling folded into `opt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuOption {
    pub name: String,
    pub value: Option<OsString>,
}

/// Splits a system-mode command line (without argv[0]) into options the way QEMU's
/// `lookup_opt` does: `-opt` or `--opt`, the value in the next word (QEMU has no
/// `-opt=value` form); a bare word is a disk image (`-hda`).
pub fn options(args: &[OsString]) -> Vec<QemuOption> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(word) = it.next() {
        let text = word.to_string_lossy();
        let Some(name) = text.strip_prefix('-').filter(|n| !n.is_empty()) else {
            out.push(QemuOption {
                name: "hda".into(),
                value: Some(word.clone()),
            });
            continue;
        };
        let name = name.strip_prefix('-').unwrap_or(name).to_string();
        let value = if FLAG_OPTIONS.contains(&name.as_str()) {
            None
        } else {
            it.next().cloned()
        };
        out.push(QemuOption { name, value });
    }
    out
}

/// Splits a QEMU `key=value,key=value` option string; `,,` is a literal comma. A first
/// element without `=` is returned under `implied_key` (`driver` for -device, `accel` for
/// -accel, `type` for -machine).
pub fn keyval(value: &str, implied_key: &str) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                cur.push(',');
            } else {
                parts.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .enumerate()
        .filter(|(_, p)| !p.is_empty())
        .map(|(i, p)| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None if i == 0 => (implied_key.to_string(), p),
            // A bare flag (`,foo`) means `foo=on`.
            None => (p, "on".to_string()),
        })
        .collect()
}

/// Escapes a value for a QEMU option string: a comma is written twice.
pub fn escape_keyval(value: &str) -> String {
    value.replace(',', ",,")
}

/// Where a guest image on the QEMU command line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageOrigin {
    Kernel,
    Bios,
    Loader,
}

impl ImageOrigin {
    pub fn option(self) -> &'static str {
        match self {
            ImageOrigin::Kernel => "-kernel",
            ImageOrigin::Bios => "-bios",
            ImageOrigin::Loader => "-device loader",
        }
    }
}

/// A guest image named on the QEMU command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestImage {
    pub path: PathBuf,
    pub origin: ImageOrigin,
}

/// The guest images of a system-mode command line, in command-line order by kind: kernel,
/// then firmware, then generic-loader files (ELF only; raw blobs carry no symbols, which
/// `is_elf` decides).
pub fn guest_images(opts: &[QemuOption], is_elf: impl Fn(&Path) -> bool) -> Vec<GuestImage> {
    let mut kernels = Vec::new();
    let mut bioses = Vec::new();
    let mut loaders = Vec::new();
    for o in opts {
        let Some(value) = &o.value else { continue };
        match o.name.as_str() {
            "kernel" => kernels.push(GuestImage {
                path: PathBuf::from(value),
                origin: ImageOrigin::Kernel,
            }),
            // A firmware name QEMU finds in its own data directory (edk2, u-boot blobs) is
            // not a file here and has no symbols anyway.
            "bios" if Path::new(value).exists() => bioses.push(GuestImage {
                path: PathBuf::from(value),
                origin: ImageOrigin::Bios,
            }),
            "device" => {
                let text = value.to_string_lossy();
                let kv = if text.trim_start().starts_with('{') {
                    json_fields(&text)
                } else {
                    keyval(&text, "driver")
                };
                let is_loader = kv.iter().any(|(k, v)| k == "driver" && v == "loader");
                let raw = kv
                    .iter()
                    .any(|(k, v)| k == "force-raw" && matches!(v.as_str(), "on" | "true" | "yes"));
                if !is_loader || raw {
                    continue;
                }
                if let Some((_, file)) = kv.iter().find(|(k, _)| k == "file") {
                    let path = PathBuf::from(file);
                    if is_elf(&path) {
                        loaders.push(GuestImage {
                            path,
                            origin: ImageOrigin::Loader,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    kernels.into_iter().chain(bioses).chain(loaders).collect()
}

/// The string and scalar fields of a flat JSON object (`-device {"driver":"loader",…}`),
/// enough for the generic loader's options; anything unparsable ends the scan.
pub fn json_fields(text: &str) -> Vec<(String, String)> {
    fn string(chars: &mut std::iter::Peekable<std::str::Chars>) -> Option<String> {
        let mut out = String::new();
        loop {
            match chars.next()? {
                '"' => return Some(out),
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'u' => {
                        let hex: String = chars.by_ref().take(4).collect();
                        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    c => out.push(c),
                },
                c => out.push(c),
            }
        }
    }
    let mut out = Vec::new();
    let mut chars = text
        .trim()
        .strip_prefix('{')
        .unwrap_or("")
        .chars()
        .peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.next() != Some('"') {
            break;
        }
        let Some(key) = string(&mut chars) else { break };
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ':') {
            chars.next();
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            match string(&mut chars) {
                Some(v) => v,
                None => break,
            }
        } else {
            let mut v = String::new();
            while let Some(&c) = chars.peek() {
                if c == ',' || c == '}' || c.is_whitespace() {
                    break;
                }
                v.push(c);
                chars.next();
            }
            v
        };
        out.push((key, value));
    }
    out
}

/// True when the file starts with the ELF magic (unreadable files count as ELF so that
/// loading them later reports why).
pub fn file_is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) => &magic == b"\x7fELF",
        Err(e) => e.kind() != std::io::ErrorKind::UnexpectedEof,
    }
}

/// Hardware accelerators that bypass TCG, and so our plugin.
const HW_ACCELS: &[&str] = &["kvm", "hvf", "whpx", "xen", "nvmm"];

/// The option that asks for a hardware accelerator, if any, as the user wrote it.
pub fn hardware_accel(opts: &[QemuOption]) -> Option<String> {
    for o in opts {
        let value = o.value.as_ref().map(|v| v.to_string_lossy().into_owned());
        match (o.name.as_str(), value) {
            ("enable-kvm", _) => return Some("-enable-kvm".into()),
            ("accel", Some(v)) => {
                let kv = keyval(&v, "accel");
                if let Some((_, a)) = kv.iter().find(|(k, _)| k == "accel") {
                    if HW_ACCELS.contains(&a.as_str()) {
                        return Some(format!("-accel {v}"));
                    }
                }
            }
            ("machine" | "M", Some(v)) => {
                let kv = keyval(&v, "type");
                if let Some((_, list)) = kv.iter().find(|(k, _)| k == "accel") {
                    // `accel=kvm:tcg` tries KVM first.
                    if list.split(':').any(|a| HW_ACCELS.contains(&a)) {
                        return Some(format!("-{} {v}", o.name));
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// The value of `key` in the last of the options named in `names` (QEMU keeps the last),
/// reading a bare first value as `implied` (`-m 1G` is `size=1G`, `-M virt` is `type=virt`).
pub fn last_option_key(
    opts: &[QemuOption],
    names: &[&str],
    implied: &str,
    key: &str,
) -> Option<String> {
    let value = opts
        .iter()
        .rev()
        .find(|o| names.contains(&o.name.as_str()))?
        .value
        .as_ref()?;
    keyval(&value.to_string_lossy(), implied)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// The guest memory size (`-m`), for the info file.
pub fn memory(opts: &[QemuOption]) -> Option<String> {
    last_option_key(opts, &["m"], "size", "size")
}

/// The `-plugin` value that loads our plugin and points it at the staging directory.
pub fn plugin_option(
    plugin: &Path,
    out_dir: &Path,
    clock: Clock,
    max_depth: Option<u16>,
) -> OsString {
    let mut v = format!(
        "{},out={},clock={}",
        escape_keyval(&plugin.to_string_lossy()),
        escape_keyval(&out_dir.to_string_lossy()),
        clock.as_str()
    );
    if let Some(d) = max_depth {
        v.push_str(&format!(",max_depth={d}"));
    }
    v.into()
}

/// The command with `-plugin <value>` inserted right after argv[0], so that it comes before
/// anything (like `-readconfig`) that could stop option processing.
pub fn with_plugin(argv: &[OsString], plugin_value: OsString) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len() + 2);
    out.extend(argv.first().cloned());
    out.push("-plugin".into());
    out.push(plugin_value);
    out.extend(argv.iter().skip(1).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn err_text(r: Result<Emulator>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    #[test]
    fn detects_system_and_user_emulators() {
        assert_eq!(
            detect_emulator("qemu-system-aarch64".as_ref()).unwrap(),
            Emulator {
                mode: Mode::System,
                arch: "aarch64".into()
            }
        );
        assert_eq!(
            detect_emulator("/opt/q/bin/qemu-system-x86_64".as_ref()).unwrap(),
            Emulator {
                mode: Mode::System,
                arch: "x86_64".into()
            }
        );
        let user = detect_emulator("qemu-aarch64-static".as_ref()).unwrap();
        assert_eq!(user.mode, Mode::User);
        assert_eq!(user.arch, "aarch64");
        assert!(detect_emulator("qemu-system-aarch64".as_ref())
            .unwrap()
            .is_supported());
        assert!(!user.is_supported());
        assert!(!detect_emulator("qemu-system-riscv64".as_ref())
            .unwrap()
            .is_supported());
    }

    #[test]
    fn rejects_non_emulators() {
        for name in [
            "ls",
            "qemu-img",
            "qemu-nbd",
            "qemu-system-",
            "qemu-system-foo",
            "/usr/bin/",
        ] {
            let r = detect_emulator(name.as_ref());
            assert!(r.is_err(), "{name} accepted");
        }
        assert!(err_text(detect_emulator("ls".as_ref())).starts_with(
            "'ls' is not a QEMU emulator (expected qemu-system-<arch> or qemu-<arch>)"
        ));
    }

    #[test]
    fn options_skip_values_and_fold_double_dash() {
        let opts = options(&os(&[
            "-M",
            "virt",
            "-nographic",
            "--kernel",
            "Image",
            "-append",
            "-kernel not-this",
            "disk.img",
            "-S",
        ]));
        let names: Vec<&str> = opts.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["M", "nographic", "kernel", "append", "hda", "S"]);
        assert_eq!(opts[2].value.as_deref(), Some(OsStr::new("Image")));
        assert_eq!(opts[1].value, None);
    }

    #[test]
    fn option_missing_its_value_is_kept() {
        let opts = options(&os(&["-kernel"]));
        assert_eq!(
            opts,
            [QemuOption {
                name: "kernel".into(),
                value: None
            }]
        );
    }

    #[test]
    fn keyval_handles_implied_key_escapes_and_flags() {
        assert_eq!(
            keyval("loader,file=a,,b.elf,cpu-num=0,force-raw", "driver"),
            [
                ("driver".to_string(), "loader".to_string()),
                ("file".into(), "a,b.elf".into()),
                ("cpu-num".into(), "0".into()),
                ("force-raw".into(), "on".into()),
            ]
        );
        assert_eq!(escape_keyval("a,b"), "a,,b");
    }

    #[test]
    fn finds_guest_images_in_order() {
        let opts = options(&os(&[
            "-device",
            "loader,file=fw.elf,addr=0x1000",
            "-bios",
            "/bin/sh",
            "-bios",
            "edk2-aarch64-code.fd",
            "-device",
            r#"{"driver": "loader", "file": "json.elf", "addr": 4096}"#,
            "-device",
            "virtio-net-device",
            "-device",
            "driver=loader,file=blob.bin,addr=0x2000",
            "-device",
            "loader,file=raw.elf,force-raw=on",
            "--kernel",
            "vmlinux",
        ]));
        let images = guest_images(&opts, |p| p != Path::new("blob.bin"));
        assert_eq!(
            images,
            [
                GuestImage {
                    path: "vmlinux".into(),
                    origin: ImageOrigin::Kernel
                },
                GuestImage {
                    path: "/bin/sh".into(),
                    origin: ImageOrigin::Bios
                },
                GuestImage {
                    path: "fw.elf".into(),
                    origin: ImageOrigin::Loader
                },
                GuestImage {
                    path: "json.elf".into(),
                    origin: ImageOrigin::Loader
                },
            ]
        );
    }

    #[test]
    fn json_device_fields() {
        assert_eq!(
            json_fields(r#"{"driver":"loader", "file":"a\"b.elf", "addr":4096,"x":true}"#),
            [
                ("driver".to_string(), "loader".to_string()),
                ("file".into(), "a\"b.elf".into()),
                ("addr".into(), "4096".into()),
                ("x".into(), "true".into()),
            ]
        );
        assert!(json_fields("{broken").is_empty());
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
    fn reads_memory_size() {
        assert_eq!(
            memory(&options(&os(&["-m", "512M"]))).as_deref(),
            Some("512M")
        );
        assert_eq!(
            memory(&options(&os(&["-m", "size=2G,maxmem=4G"]))).as_deref(),
            Some("2G")
        );
        assert_eq!(memory(&options(&os(&["-M", "virt"]))), None);
    }

    #[test]
    fn plugin_goes_right_after_argv0() {
        let v = plugin_option(
            Path::new("/c/p,1.so"),
            Path::new("/t/uftrace.data.partial"),
            Clock::Insn,
            Some(64),
        );
        assert_eq!(
            v,
            OsString::from("/c/p,,1.so,out=/t/uftrace.data.partial,clock=insn,max_depth=64")
        );
        let argv = with_plugin(
            &os(&["qemu-system-aarch64", "-M", "virt"]),
            "p.so,out=d,clock=wall".into(),
        );
        assert_eq!(
            argv,
            os(&[
                "qemu-system-aarch64",
                "-plugin",
                "p.so,out=d,clock=wall",
                "-M",
                "virt"
            ])
        );
    }
}
