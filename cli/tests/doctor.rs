//! `qemu-uftrace doctor` on real QEMUs: the three the tests record with (plugin API 4, 5 and
//! 7 only), Debian's plugin-less user-mode QEMU and bookworm's 7.2; and `record`'s one line
//! for a plugin build a QEMU's API range refuses.

mod common;

use common::{qemu_uftrace, single_error, stdout};
use qemu_uftrace_tests::{cached, system_qemus};
use std::path::{Path, PathBuf};

/// The report block doctor printed for `qemu`: its own line (the name as given, then the
/// resolved path in brackets when they differ) and the indented lines under it.
fn block(out: &str, qemu: &str) -> String {
    let mut lines = out
        .lines()
        .skip_while(|l| *l != qemu && !l.strip_prefix(qemu).is_some_and(|r| r.starts_with(" (")));
    let head = lines
        .next()
        .unwrap_or_else(|| panic!("no block for {qemu} in:\n{out}"));
    std::iter::once(head)
        .chain(lines.take_while(|l| l.starts_with("  ")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn doctor_reports_each_qemus_plugin_api_and_discontinuity_support() {
    let home = tempfile::tempdir().unwrap();
    let qemus = system_qemus();
    let out = qemu_uftrace(home.path())
        .arg("doctor")
        .args(qemus.iter().map(|q| &q.program))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", common::stderr(&out));
    for q in &qemus {
        let b = block(&text, &q.program);
        let (range, build, exceptions) = match q.label {
            "10.0" => (
                "2 to 4",
                4,
                "not shown as entries: this QEMU does not report them",
            ),
            "10.2.2" => ("2 to 5", 4, "shown as entries ([irq], [svc] …)"),
            _ => ("7 only", 7, "shown as entries ([irq], [svc] …)"),
        };
        assert!(b.contains(&format!("version        {}", q.label)), "{b}");
        assert!(
            b.contains(&format!(
                "plugins        yes: QEMU accepts plugin API {range}; qemu-uftrace loads its \
                 API {build} build"
            )),
            "{b}"
        );
        assert!(b.contains(&format!("exceptions     {exceptions}")), "{b}");
        // The API's word, which no user reads as exceptions.
        assert!(!b.contains("discontinuity"), "{b}");
        assert!(
            b.contains("target         system-mode aarch64: can record"),
            "{b}"
        );
    }
    assert!(text.contains("uftrace  /usr/bin/uftrace (v0.13)"), "{text}");
}

#[test]
fn doctor_fails_with_a_qemu_that_cannot_record() {
    let home = tempfile::tempdir().unwrap();
    let plugin_less = cached("qemu-user-10.0/qemu-aarch64");
    let too_old = cached("qemu-7.2/qemu-aarch64-static");
    let out = qemu_uftrace(home.path())
        .arg("doctor")
        .arg(&plugin_less)
        .arg(&too_old)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let b = block(&text, &plugin_less.display().to_string());
    assert!(b.contains("version        10.0."), "{b}");
    assert!(b.contains("built without TCG plugin support"), "{b}");
    assert!(
        b.contains("build QEMU from source with --enable-plugins"),
        "{b}"
    );
    let b = block(&text, &too_old.display().to_string());
    assert!(b.contains("version        7.2."), "{b}");
    assert!(b.contains("but qemu-uftrace needs 9.2 or newer"), "{b}");
    assert!(
        single_error(&out).contains("recording cannot work with every QEMU named"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn doctor_without_uftrace_or_without_any_qemu_says_so() {
    let home = tempfile::tempdir().unwrap();
    // A PATH with QEMU 10.0 but no uftrace.
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(
        "/usr/bin/qemu-system-aarch64",
        bin.join("qemu-system-aarch64"),
    )
    .unwrap();
    let doctor = || {
        qemu_uftrace(home.path())
            .arg("doctor")
            .env("PATH", &bin)
            .output()
            .unwrap()
    };
    let out = doctor();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("uftrace  missing: not found on PATH"));
    assert!(single_error(&out).contains("uftrace is not installed"));
    // uftrace, and no QEMU at all.
    std::fs::remove_file(bin.join("qemu-system-aarch64")).unwrap();
    std::os::unix::fs::symlink("/usr/bin/uftrace", bin.join("uftrace")).unwrap();
    let out = doctor();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        single_error(&out).contains("no QEMU emulator (qemu-system-<arch> or qemu-<arch>) on PATH")
    );
}

/// The embedded plugin builds, as `doctor` left them in the cache under `home`.
fn cached_plugin(home: &Path, api: u32) -> PathBuf {
    let dir = home.join("cache/qemu-uftrace/plugins");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(&format!("-v{api}-")))
        })
        .unwrap_or_else(|| panic!("no API {api} plugin in {}", dir.display()))
}

/// QEMU 11.1 refuses a plugin built for API 4: `record --plugin` with that build says which
/// versions the QEMU accepts, in one line, and leaves nothing behind.
#[test]
fn record_names_the_api_versions_when_a_qemu_refuses_the_plugin() {
    let home = tempfile::tempdir().unwrap();
    let qemus = system_qemus();
    let newest = &qemus[2];
    assert!(qemu_uftrace(home.path())
        .arg("doctor")
        .arg(&newest.program)
        .output()
        .unwrap()
        .status
        .success());
    let v4 = cached_plugin(home.path(), 4);
    let out_dir = home.path().join("refused.data");
    let out = qemu_uftrace(home.path())
        .arg("record")
        .arg("-o")
        .arg(&out_dir)
        .arg("--plugin")
        .arg(&v4)
        .arg("--")
        .args(qemu_uftrace_tests::qemu_args_on(
            &newest.program,
            Path::new("/nonexistent.elf"),
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let line = single_error(&out);
    assert!(
        line.contains("(QEMU 11.1.3) accepts plugin API 7 and newer, which")
            && line.contains("was not built for; leave --plugin out"),
        "{line}"
    );
    assert!(!out_dir.exists() && !home.path().join("refused.data.partial").exists());
}

/// A HOME nobody can write in (here one under /proc, which refuses root too): `record` says
/// in one line which cache it could not make and which variable moves it; with
/// `QEMU_UFTRACE_CACHE` the plugin goes there, as install-deps' downloads do.
#[test]
fn the_plugin_cache_moves_with_qemu_uftrace_cache() {
    let home = tempfile::tempdir().unwrap();
    let qemu = "/usr/bin/qemu-system-aarch64";
    let run = |cache: Option<&Path>, args: &[&str]| {
        let mut c = std::process::Command::new(common::BIN);
        c.current_dir(home.path())
            .env("HOME", "/proc/qemu-uftrace-home")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("QEMU_UFTRACE_CACHE")
            .stdin(std::process::Stdio::null())
            .args(args);
        if let Some(cache) = cache {
            c.env("QEMU_UFTRACE_CACHE", cache);
        }
        c.output().unwrap()
    };
    let out = run(
        None,
        &["record", "--", qemu, "-M", "virt", "-display", "none"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    let line = single_error(&out);
    assert!(
        line.contains("cannot create the plugin cache /proc/qemu-uftrace-home/.cache/"),
        "{line}"
    );
    assert!(
        line.contains("; set QEMU_UFTRACE_CACHE (or XDG_CACHE_HOME) to a directory you can write"),
        "{line}"
    );
    assert!(!home.path().join("uftrace.data.partial").exists());

    let cache = home.path().join("cache");
    let out = run(Some(&cache), &["doctor", qemu]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", common::stderr(&out));
    assert!(text.contains("plugins        yes"), "{text}");
    let plugins: Vec<_> = std::fs::read_dir(cache.join("plugins"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        plugins
            .iter()
            .any(|n| n.starts_with("qemu-uftrace-plugin-v4-")),
        "{plugins:?}"
    );
}
