//! Checks, before recording, that the QEMU command can be traced, in an order that makes
//! the first failing one the most useful to report: is it QEMU at all, is it installed, is it
//! new enough, can it load our plugin, is its target supported, does it run under TCG.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use crate::errors::{fail, usage};
use crate::qemu_cmd::{self, Emulator, Mode};

/// Oldest QEMU whose plugin API has what the plugin needs.
pub const MIN_VERSION: (u32, u32) = (9, 2);
/// The probe line the plugin prints.
const PROBE_PREFIX: &str = "qemu-uftrace-probe ";
/// QEMU exits at once in a probe; anything slower is hung.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What the checks learnt about the QEMU to run.
#[derive(Debug, Clone)]
pub struct Qemu {
    pub emulator: Emulator,
    /// The resolved executable.
    pub path: PathBuf,
    /// `10.0.2`, as `--version` says.
    pub version: String,
}

impl Qemu {
    /// `qemu-system-aarch64 10.0.2`.
    pub fn describe(&self) -> String {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("{name} {}", self.version)
    }
}

/// Runs the remaining checks, in order, on the QEMU command `argv0` `opts` with `plugin`.
/// The first check, [`qemu_cmd::detect_emulator`], is the caller's: it gives `emulator`.
pub fn preflight(
    argv0: &OsString,
    emulator: Emulator,
    opts: &[qemu_cmd::QemuOption],
    plugin: &Path,
    plugin_given: bool,
) -> Result<Qemu> {
    let path = find_executable(argv0)?;
    let version = match crate::probe_memo::recall(&path, plugin) {
        Some(version) => version,
        None => {
            let version = check_version(&path)?;
            probe_plugin(&path, &emulator, plugin, plugin_given)?;
            crate::probe_memo::remember(&path, plugin, &version);
            version
        }
    };
    if !emulator.is_supported() {
        return Err(usage(
            format!(
                "{} guests are not supported yet by qemu-uftrace",
                emulator.describe()
            ),
            "only system-mode aarch64 (qemu-system-aarch64) can be recorded for now",
        ));
    }
    if let Some(opt) = qemu_cmd::hardware_accel(opts) {
        return Err(usage(
            format!("'{opt}' runs the guest on a hardware accelerator, but qemu-uftrace needs TCG"),
            "remove it (or use -accel tcg)",
        ));
    }
    Ok(Qemu {
        emulator,
        path,
        version,
    })
}

/// Resolves argv[0] the way `execvp` would.
pub fn find_executable(argv0: &OsString) -> Result<PathBuf> {
    let p = Path::new(argv0);
    if p.components().count() > 1 {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(fail(
                format!("{} does not exist or is not executable", p.display()),
                install_hint(),
            ))
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(p))
        .find(|c| is_executable(c))
        .ok_or_else(|| {
            fail(
                format!("'{}' not found on PATH", p.display()),
                install_hint(),
            )
        })
}

fn install_hint() -> String {
    format!(
        "install QEMU {}.{} or newer (Debian: apt-get install qemu-system-arm, from \
         bookworm-backports on bookworm)",
        MIN_VERSION.0, MIN_VERSION.1
    )
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Parses `QEMU emulator version 10.0.2 (Debian …)` or `qemu-aarch64 version 7.2.0`.
pub fn parse_version(text: &str) -> Option<(u32, u32, u32, String)> {
    let line = text.lines().next()?;
    let rest = &line[line.find("version ")? + "version ".len()..];
    let word = rest.split_whitespace().next()?;
    let mut nums = word
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().ok());
    let major = nums.next()??;
    let minor = nums.next().flatten().unwrap_or(0);
    let micro = nums.next().flatten().unwrap_or(0);
    Some((major, minor, micro, word.to_string()))
}

fn check_version(path: &Path) -> Result<String> {
    let out = run_with_timeout(path, &["--version".into()]).map_err(|e| {
        fail(
            format!("cannot run {} --version: {e}", path.display()),
            install_hint(),
        )
    })?;
    let Some((major, minor, _, text)) = parse_version(&out.stdout) else {
        crate::errors::warn(format!(
            "cannot tell the version of {} from --version; going on",
            path.display()
        ));
        return Ok(String::from("(unknown version)"));
    };
    if (major, minor) < MIN_VERSION {
        return Err(fail(
            format!(
                "{} is QEMU {text}, but qemu-uftrace needs {}.{} or newer",
                path.display(),
                MIN_VERSION.0,
                MIN_VERSION.1
            ),
            install_hint(),
        ));
    }
    Ok(text)
}

struct Captured {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

fn run_with_timeout(path: &Path, args: &[OsString]) -> std::io::Result<Captured> {
    let handle = duct::cmd(path, args)
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .start()?;
    match handle.wait_timeout(PROBE_TIMEOUT)? {
        Some(out) => Ok(Captured {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }),
        None => {
            let _ = handle.kill();
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", PROBE_TIMEOUT.as_secs()),
            ))
        }
    }
}

/// Result of the plugin probe.
#[derive(Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The plugin answered with its target.
    Ok { target: String },
    /// This QEMU cannot load plugins at all.
    NoPluginSupport,
    /// QEMU tried and failed; its reason.
    LoadFailed(String),
    /// QEMU ran but the plugin did not answer (not our plugin, or an old one).
    NoAnswer,
}

/// Reads a probe's output.
pub fn classify_probe(success: bool, stdout: &str, stderr: &str) -> ProbeOutcome {
    let unsupported = stderr.lines().any(|l| {
        l.contains("plugin") && (l.contains("invalid option") || l.contains("unknown option"))
    });
    if unsupported {
        return ProbeOutcome::NoPluginSupport;
    }
    if let Some(line) = stdout.lines().find(|l| l.starts_with(PROBE_PREFIX)) {
        let target = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("target="))
            .unwrap_or("")
            .to_string();
        return ProbeOutcome::Ok { target };
    }
    if success {
        return ProbeOutcome::NoAnswer;
    }
    let reason = stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("QEMU exited with an error and said nothing")
        .to_string();
    ProbeOutcome::LoadFailed(reason)
}

fn probe_plugin(path: &Path, emulator: &Emulator, plugin: &Path, plugin_given: bool) -> Result<()> {
    let probe = format!(
        "{},probe=on",
        qemu_cmd::escape_keyval(&plugin.to_string_lossy())
    );
    let args: Vec<OsString> = match emulator.mode {
        Mode::System => ["-M", "none", "-nodefaults", "-display", "none", "-plugin"]
            .iter()
            .map(OsString::from)
            .chain([OsString::from(probe)])
            .collect(),
        // User mode loads plugins before the guest program, which the probe never reaches.
        Mode::User => vec!["-plugin".into(), probe.into(), "/bin/true".into()],
    };
    let out = run_with_timeout(path, &args).map_err(|e| {
        fail(
            format!("the plugin probe of {} failed: {e}", path.display()),
            "check that this QEMU starts at all",
        )
    })?;
    let way_out = if plugin_given {
        "check the file given with --plugin (it must be qemu-uftrace's plugin)".to_string()
    } else {
        "reinstall qemu-uftrace (cargo install --path cli), or pass --plugin PATH".to_string()
    };
    match classify_probe(out.status.success(), &out.stdout, &out.stderr) {
        ProbeOutcome::Ok { .. } => Ok(()),
        ProbeOutcome::NoPluginSupport => Err(fail(
            format!("{} was built without TCG plugin support", path.display()),
            format!(
                "install a QEMU {}.{} or newer with plugins (Debian: qemu-system-arm, from \
                 bookworm-backports on bookworm)",
                MIN_VERSION.0, MIN_VERSION.1
            ),
        )),
        ProbeOutcome::LoadFailed(reason) => Err(fail(
            format!(
                "{} could not load the plugin {}: {reason}",
                path.display(),
                plugin.display()
            ),
            way_out,
        )),
        ProbeOutcome::NoAnswer => Err(fail(
            format!(
                "the plugin {} loaded but did not answer qemu-uftrace's probe",
                plugin.display()
            ),
            way_out,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        let v = parse_version(
            "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\nCopyright",
        )
        .unwrap();
        assert_eq!((v.0, v.1, v.2, v.3.as_str()), (10, 0, 2, "10.0.2"));
        let v = parse_version("qemu-aarch64 version 7.2.19 (Debian 1:7.2+dfsg-7)").unwrap();
        assert_eq!((v.0, v.1), (7, 2));
        let v = parse_version("QEMU emulator version 9.2.50 (v9.2.0-1234-gabc)").unwrap();
        assert_eq!((v.0, v.1, v.2), (9, 2, 50));
        assert!(parse_version("something else").is_none());
        assert!((9, 1) < MIN_VERSION && (9, 2) >= MIN_VERSION && (10, 0) >= MIN_VERSION);
    }

    #[test]
    fn classifies_probe_output() {
        assert_eq!(
            classify_probe(true, "qemu-uftrace-probe target=aarch64 api=4\n", ""),
            ProbeOutcome::Ok {
                target: "aarch64".into()
            }
        );
        assert_eq!(
            classify_probe(false, "", "qemu: unknown option 'plugin'\n"),
            ProbeOutcome::NoPluginSupport
        );
        assert_eq!(
            classify_probe(false, "", "qemu-system-aarch64: -plugin: invalid option\n"),
            ProbeOutcome::NoPluginSupport
        );
        assert_eq!(
            classify_probe(
                false,
                "",
                "qemu-system-aarch64: Could not load plugin /x.so: undefined symbol\n"
            ),
            ProbeOutcome::LoadFailed(
                "qemu-system-aarch64: Could not load plugin /x.so: undefined symbol".into()
            )
        );
        assert_eq!(classify_probe(true, "", ""), ProbeOutcome::NoAnswer);
    }

    #[test]
    fn missing_executable_is_reported() {
        let e = find_executable(&"qemu-system-nonexistent-xyz".into()).unwrap_err();
        assert!(format!("{e:#}").starts_with("'qemu-system-nonexistent-xyz' not found on PATH; "));
        let e = find_executable(&"/nonexistent/qemu-system-aarch64".into()).unwrap_err();
        assert!(format!("{e:#}").contains("does not exist"));
    }
}
