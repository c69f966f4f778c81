//! Checks, before recording, that the QEMU command can be traced, in an order that makes
//! the first failing one the most useful to report: is it QEMU at all, is it installed, is it
//! new enough, can it load our plugin, is its target supported, then what its command line
//! asks for ([`crate::qemu::refusals`]: TCG, a foreground QEMU that can end, a kernel file).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use qemu_uftrace_format::Arch;

use crate::errors::{fail, usage};
use crate::plugin_select::Accepts;
use crate::qemu::{self, Emulator, Mode};

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
    /// The plugin file this QEMU loads.
    pub plugin: PathBuf,
    /// What the plugin said about this QEMU when probed.
    pub probe: ProbeInfo,
    /// The files the probe memo is keyed on (see [`crate::probe_memo`]).
    memo_key: Vec<PathBuf>,
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

    /// Whatever went wrong with a recording, check this QEMU afresh next time.
    pub fn forget_probe(&self) {
        crate::probe_memo::forget(&self.path, &self.memo_key);
    }
}

/// The plugin to load: one the user named, or the embedded build this QEMU accepts.
#[derive(Debug, Clone)]
pub enum PluginChoice {
    Given(PathBuf),
    Embedded,
}

/// Runs the remaining checks, in order, on the QEMU command `argv0` `opts` with `plugin`.
/// The first check, [`qemu::detect_emulator`], is the caller's: it gives `emulator`.
/// Returns the QEMU and the guest architecture it emulates.
pub fn preflight(
    argv0: &OsString,
    emulator: Emulator,
    opts: &[qemu::QemuOption],
    plugin: &PluginChoice,
) -> Result<(Qemu, Arch)> {
    let qemu = check_qemu(argv0, emulator, plugin)?;
    let Some(arch) = qemu.emulator.arch else {
        return Err(usage(
            format!(
                "{} guests are not supported yet by qemu-uftrace",
                qemu.emulator.describe()
            ),
            "aarch64, x86_64 and riscv64 guests can be recorded, in system mode \
             (qemu-system-<arch>) and user mode (qemu-<arch>)",
        ));
    };
    match qemu.emulator.mode {
        Mode::System => {
            let name = format!("qemu-system-{}", qemu.emulator.target);
            qemu::refusals::check(opts, arch, &name)?
        }
        // User mode has no kernel, accelerator or monitor: only a second copy of our plugin
        // is in the way.
        Mode::User => qemu::refusals::check_plugin_clash(opts)?,
    }
    Ok((qemu, arch))
}

/// Finds the QEMU, checks its version and finds the plugin build it loads (probing it, or
/// recalling an earlier probe of the same files).
pub fn check_qemu(argv0: &OsString, emulator: Emulator, plugin: &PluginChoice) -> Result<Qemu> {
    let path = find_emulator(argv0, emulator.mode)?;
    let candidates: Vec<(u32, PathBuf)> = match plugin {
        PluginChoice::Given(p) => vec![(0, p.clone())],
        PluginChoice::Embedded => crate::embedded::PLUGINS
            .iter()
            .map(|p| Ok((p.api, crate::plugin_cache::embedded_plugin(p)?)))
            .collect::<Result<_>>()?,
    };
    let memo_key: Vec<PathBuf> = candidates.iter().map(|(_, p)| p.clone()).collect();
    let recalled = crate::probe_memo::recall(&path, &memo_key)
        .and_then(|(version, line)| Some((version, parse_probe_line(&line)?)));
    let (version, info) = match recalled {
        Some(found) => found,
        None => {
            let version = check_version(&path)?;
            let (line, info) = probe_builds(&path, &emulator, &candidates, &version, plugin)?;
            crate::probe_memo::remember(&path, &memo_key, &version, &line);
            (version, info)
        }
    };
    let plugin = match plugin {
        PluginChoice::Given(p) => p.clone(),
        PluginChoice::Embedded => candidates
            .iter()
            .find(|(api, _)| *api == info.plugin_api)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| {
                fail(
                    format!("the probe answered for plugin API {}", info.plugin_api),
                    "run the command again (the probe memo was stale)",
                )
            })?,
    };
    Ok(Qemu {
        emulator,
        path,
        version,
        plugin,
        probe: info,
        memo_key,
    })
}

/// Resolves argv[0] the way `execvp` would (the `which` crate: a name with a `/` as a path,
/// any other searched on PATH).
pub fn find_executable(argv0: &OsString) -> Result<PathBuf> {
    find_executable_or(argv0, install_hint)
}

/// [`find_executable`] for this kind of emulator, whose missing one is found elsewhere.
pub fn find_emulator(argv0: &OsString, mode: Mode) -> Result<PathBuf> {
    match mode {
        Mode::System => find_executable(argv0),
        Mode::User => find_executable_or(argv0, user_install_hint),
    }
}

fn find_executable_or(argv0: &OsString, install_hint: fn() -> String) -> Result<PathBuf> {
    let p = Path::new(argv0);
    let found = which::which(p).ok();
    if p.components().count() > 1 {
        return if let Some(found) = found {
            Ok(found)
        } else {
            Err(fail(
                format!("{} does not exist or is not executable", p.display()),
                install_hint(),
            ))
        };
    }
    found.ok_or_else(|| {
        fail(
            format!("'{}' not found on PATH", p.display()),
            install_hint(),
        )
    })
}

pub fn install_hint() -> String {
    format!(
        "install QEMU {}.{} or newer (Debian: apt-get install qemu-system-arm, from \
         bookworm-backports on bookworm)",
        MIN_VERSION.0, MIN_VERSION.1
    )
}

/// Debian's qemu-user is built without plugin support, so no package is the way out.
pub fn user_install_hint() -> String {
    "user mode needs a QEMU built with plugin support (Debian's qemu-user is not): \
     scripts/install-deps.sh builds one into ~/.cache/qemu-uftrace/qemu-10.2.2/bin; put that \
     directory on PATH or name the emulator by its path"
        .to_string()
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

/// QEMU's version as `--version` gives it: major, minor and the text (`10.0.2`); `None`
/// when it names none.
pub fn read_version(path: &Path) -> Result<Option<(u32, u32, String)>> {
    let out = run_with_timeout(path, &["--version".into()]).map_err(|e| {
        fail(
            format!("cannot run {} --version: {e}", path.display()),
            install_hint(),
        )
    })?;
    Ok(parse_version(&out.stdout).map(|(major, minor, _, text)| (major, minor, text)))
}

fn check_version(path: &Path) -> Result<String> {
    let Some((major, minor, text)) = read_version(path)? else {
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

/// What the plugin's probe line says about the QEMU that loaded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeInfo {
    /// The target as QEMU names it (`aarch64`).
    pub target: String,
    /// QEMU's plugin API range.
    pub api_min: u32,
    pub api_cur: u32,
    /// The API the loaded plugin build declares.
    pub plugin_api: u32,
    /// Whether the plugin can record this target.
    pub supported: bool,
    /// Whether QEMU reports discontinuities (exceptions, interrupts) to plugins (10.2 on).
    pub discontinuity: bool,
}

/// Reads `qemu-uftrace-probe target=aarch64 api=4 api_min=2 plugin_api=4 …`.
pub fn parse_probe_line(line: &str) -> Option<ProbeInfo> {
    let fields = line.strip_prefix(PROBE_PREFIX)?;
    let get = |key: &str| {
        fields
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    };
    let num = |key: &str| get(key).and_then(|v| v.parse::<u32>().ok());
    let flag = |key: &str| get(key) == Some("1");
    Some(ProbeInfo {
        target: get("target")?.to_string(),
        api_cur: num("api")?,
        api_min: num("api_min").unwrap_or(0),
        plugin_api: num("plugin_api").unwrap_or(0),
        supported: flag("supported"),
        discontinuity: flag("discontinuity"),
    })
}

/// Result of the plugin probe.
#[derive(Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The plugin answered with this line.
    Ok { line: String, info: ProbeInfo },
    /// This QEMU cannot load plugins at all.
    NoPluginSupport,
    /// QEMU refused the plugin for its API version, and said what it accepts.
    WrongApi(Accepts),
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
        return match parse_probe_line(line) {
            Some(info) => ProbeOutcome::Ok {
                line: line.to_string(),
                info,
            },
            None => ProbeOutcome::NoAnswer,
        };
    }
    if let Some(accepts) = crate::plugin_select::parse_refusal(stderr) {
        return ProbeOutcome::WrongApi(accepts);
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

/// Runs the probe of one plugin file.
fn probe_once(path: &Path, emulator: &Emulator, plugin: &Path) -> Result<ProbeOutcome> {
    let probe = qemu::rewrite::plugin_value(plugin, &[("probe", "on".as_ref())]);
    let args: Vec<OsString> = match emulator.mode {
        Mode::System => ["-M", "none", "-nodefaults", "-display", "none", "-plugin"]
            .iter()
            .map(OsString::from)
            .chain([probe])
            .collect(),
        // User mode loads plugins before the guest program, which the probe never reaches.
        Mode::User => vec!["-plugin".into(), probe, "/bin/true".into()],
    };
    let out = run_with_timeout(path, &args).map_err(|e| {
        fail(
            format!("the plugin probe of {} failed: {e}", path.display()),
            "check that this QEMU starts at all",
        )
    })?;
    Ok(classify_probe(
        out.status.success(),
        &out.stdout,
        &out.stderr,
    ))
}

/// Probes `candidates` (API version, file), starting with the oldest build, until one loads
/// in the build this QEMU's API range calls for. Returns the probe line and what it says.
fn probe_builds(
    path: &Path,
    emulator: &Emulator,
    candidates: &[(u32, PathBuf)],
    version: &str,
    choice: &PluginChoice,
) -> Result<(String, ProbeInfo)> {
    let builds: Vec<u32> = candidates.iter().map(|(api, _)| *api).collect();
    let mut tried = Vec::new();
    let mut next = candidates.first().map(|(api, _)| *api);
    while let Some(api) = next.filter(|a| !tried.contains(a)) {
        tried.push(api);
        let plugin = &candidates
            .iter()
            .find(|(a, _)| *a == api)
            .expect("chosen among the candidates")
            .1;
        let accepts = match probe_once(path, emulator, plugin)? {
            ProbeOutcome::Ok { line, info } => {
                let range = Accepts::Range {
                    min: info.api_min,
                    cur: info.api_cur,
                };
                let best = crate::plugin_select::choose(&builds, range);
                if matches!(choice, PluginChoice::Given(_)) || best == Some(api) || best.is_none() {
                    return Ok((line, info));
                }
                next = best;
                continue;
            }
            ProbeOutcome::WrongApi(accepts) => accepts,
            other => return Err(probe_error(path, plugin, choice, other)),
        };
        next = match choice {
            PluginChoice::Given(_) => None,
            PluginChoice::Embedded => crate::plugin_select::choose(&builds, accepts),
        };
        if next.is_none() || next.is_some_and(|a| tried.contains(&a)) {
            return Err(api_mismatch(path, version, accepts, choice));
        }
    }
    Err(fail(
        format!("no plugin build loads in {}", path.display()),
        "report this as a qemu-uftrace bug",
    ))
}

/// The one line for a QEMU that accepts none of the plugin builds carried.
fn api_mismatch(
    path: &Path,
    version: &str,
    accepts: Accepts,
    choice: &PluginChoice,
) -> anyhow::Error {
    match choice {
        PluginChoice::Given(p) => fail(
            format!(
                "{} (QEMU {version}) accepts plugin API {}, which {} was not built for",
                path.display(),
                accepts.describe(),
                p.display()
            ),
            "leave --plugin out to use the plugins built into qemu-uftrace",
        ),
        PluginChoice::Embedded => fail(
            format!(
                "{} is QEMU {version}, which accepts plugin API {}, but qemu-uftrace carries \
                 plugins for API {} only",
                path.display(),
                accepts.describe(),
                crate::embedded::api_list()
            ),
            "use a qemu-uftrace release that supports this QEMU, or a QEMU from 9.2 up to the \
             newest API listed",
        ),
    }
}

fn probe_error(
    path: &Path,
    plugin: &Path,
    choice: &PluginChoice,
    outcome: ProbeOutcome,
) -> anyhow::Error {
    let way_out = match choice {
        PluginChoice::Given(_) => {
            "check the file given with --plugin (it must be qemu-uftrace's plugin)".to_string()
        }
        PluginChoice::Embedded => {
            "reinstall qemu-uftrace (cargo install --path cli), or pass --plugin PATH".to_string()
        }
    };
    match outcome {
        ProbeOutcome::NoPluginSupport => fail(
            format!("{} was built without TCG plugin support", path.display()),
            no_plugins_hint(),
        ),
        ProbeOutcome::LoadFailed(reason) => fail(
            format!(
                "{} could not load the plugin {}: {reason}",
                path.display(),
                plugin.display()
            ),
            way_out,
        ),
        ProbeOutcome::NoAnswer => fail(
            format!(
                "the plugin {} loaded but did not answer qemu-uftrace's probe",
                plugin.display()
            ),
            way_out,
        ),
        ProbeOutcome::Ok { .. } | ProbeOutcome::WrongApi(_) => {
            unreachable!("handled by probe_builds")
        }
    }
}

/// How to get a QEMU that loads plugins.
pub fn no_plugins_hint() -> String {
    format!(
        "install a QEMU {}.{} or newer built with plugins (Debian: qemu-system-arm, from \
         bookworm-backports on bookworm; Debian's qemu-user has none: build QEMU from source \
         with --enable-plugins)",
        MIN_VERSION.0, MIN_VERSION.1
    )
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
        let line = "qemu-uftrace-probe target=aarch64 api=7 api_min=7 plugin_api=7 system=1 \
                    supported=1 discontinuity=1";
        assert_eq!(
            classify_probe(true, &format!("{line}\n"), ""),
            ProbeOutcome::Ok {
                line: line.into(),
                info: ProbeInfo {
                    target: "aarch64".into(),
                    api_min: 7,
                    api_cur: 7,
                    plugin_api: 7,
                    supported: true,
                    discontinuity: true,
                }
            }
        );
        assert_eq!(
            classify_probe(
                false,
                "",
                "qemu-system-aarch64: Could not load plugin /c/p.so: plugin requires API version \
                 4, but this QEMU supports only a minimum version of 7\n"
            ),
            ProbeOutcome::WrongApi(Accepts::AtLeast(7))
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
    fn a_qemu_no_build_fits_is_named_with_both_sides_versions() {
        let e = api_mismatch(
            Path::new("/opt/qemu/bin/qemu-system-aarch64"),
            "12.0.0",
            Accepts::AtLeast(8),
            &PluginChoice::Embedded,
        );
        assert_eq!(
            format!("{e:#}"),
            "/opt/qemu/bin/qemu-system-aarch64 is QEMU 12.0.0, which accepts plugin API 8 and \
             newer, but qemu-uftrace carries plugins for API 4, 7 only; use a qemu-uftrace \
             release that supports this QEMU, or a QEMU from 9.2 up to the newest API listed"
        );
        assert!(!format!("{e:#}").contains("reinstall"));
    }

    #[test]
    fn missing_executable_is_reported() {
        let e = find_executable(&"qemu-system-nonexistent-xyz".into()).unwrap_err();
        assert!(format!("{e:#}").starts_with("'qemu-system-nonexistent-xyz' not found on PATH; "));
        let e = find_executable(&"/nonexistent/qemu-system-aarch64".into()).unwrap_err();
        assert!(format!("{e:#}").contains("does not exist"));
    }
}
