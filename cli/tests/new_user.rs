//! What a new user meets (issue 21): the README's and the man pages' commands run as written
//! to their end on the kernels the install caches; the clock named by `info` and by the
//! viewers; uftrace's options after `--` reaching uftrace; `tui` refused without a
//! terminal; messages that point the right way; the end-of-record counts explained.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use qemu_uftrace_tests::{cache_dir, cached, hello_elf, qemu_args};

/// How long one README command may take under the full suite's load on two cores (a
/// kernel's boot to its panic takes 10–60 s alone).
const COMMAND_PATIENCE: Duration = Duration::from_secs(900);

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The README's fenced blocks as (info string, text), continuation lines joined.
fn readme_blocks() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let mut blocks = Vec::new();
    let mut rest = readme.as_str();
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let info_end = after.find('\n').expect("a fence ends its line");
        let body = &after[info_end + 1..];
        let close = body.find("```").expect("every README block ends");
        blocks.push((
            after[..info_end].trim().to_string(),
            body[..close].replace("\\\n", " "),
        ));
        rest = &body[close + 3..];
    }
    blocks
}

/// README lines not run here, and why: each is run elsewhere or needs root.
const NOT_RUN_HERE: &[(&str, &str)] = &[
    ("scripts/demo.sh", "installs with apt"),
    ("scripts/test.sh", "runs this test"),
    (
        "scripts/install-deps.sh",
        "installs with apt; scripts/test.sh runs it first",
    ),
    (
        "cargo install --path cli",
        "the test runs the binary cargo built from this tree",
    ),
];

/// What the README asks a user to run, in order: every line of every `sh` block (comments
/// dropped). Examples stand nowhere else: a block of another kind fails, as does a line
/// that is neither run here nor listed in [`NOT_RUN_HERE`].
fn readme_commands() -> Vec<String> {
    let mut out = Vec::new();
    for (info, text) in readme_blocks() {
        match info.as_str() {
            "sh" => out.extend(shell_lines(&text)),
            // Output shown as it was printed.
            "text" => {}
            other => panic!(
                "README has a ```{other} block: examples go in ```sh blocks (this test runs \
                 them), output in ```text"
            ),
        }
    }
    for line in &out {
        assert!(
            line.starts_with("qemu-uftrace ")
                || line.starts_with("export PATH=")
                || NOT_RUN_HERE.iter().any(|(l, _)| l == line),
            "README example `{line}` is not run by this test: make it a qemu-uftrace command \
             or teach the test how to run it"
        );
    }
    out
}

/// Lines of shell, without comments and blank lines, spaces squeezed.
fn shell_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            // A `#` after a space starts a comment (none of the commands quotes one).
            let l = l.split(" #").next().unwrap_or("");
            l.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The `qemu-uftrace record` examples of the man pages, unescaped from roff.
fn man_commands() -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(workspace().join("man")).expect("man/") {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            // The SYNOPSIS line is set in bold (\fB); examples are plain text.
            if line.contains("qemu\\-uftrace record") && !line.contains("\\fB") {
                out.extend(shell_lines(&line.replace("\\-", "-")));
            }
        }
    }
    assert!(!out.is_empty(), "no examples found in man/");
    out
}

/// Where the docs say the install caches its files.
const DOCUMENTED_CACHE: &str = "~/.cache/qemu-uftrace";

/// Where `scripts/demo.sh` builds the example guest (without `CARGO_TARGET_DIR`).
const DEMO_HELLO: &str = "target/examples/hello/hello.elf";

/// A documented command with the paths it names made this machine's: the install's cache
/// (`$QEMU_UFTRACE_CACHE` may move it) and the example guest, built for the test.
fn substitute(cmd: &str) -> String {
    let mut line = cmd.replace(DOCUMENTED_CACHE, &cache_dir().display().to_string());
    if line.contains(DEMO_HELLO) {
        let elf = hello_elf().expect("build the example");
        line = line.replace(DEMO_HELLO, &elf.display().to_string());
    }
    line
}

/// The directory of a README line `export PATH=DIR:$PATH`, which must exist.
fn exported_path(line: &str) -> Option<PathBuf> {
    let dir = line.strip_prefix("export PATH=")?;
    let dir = dir
        .strip_suffix(":$PATH")
        .unwrap_or_else(|| panic!("`{line}`: the test knows only export PATH=DIR:$PATH"));
    let dir = PathBuf::from(substitute(dir));
    assert!(dir.is_dir(), "`{line}`: {} is no directory", dir.display());
    Some(dir)
}

/// Runs one command line with `sh` in `dir`, stdout and stderr to files (a pipe nobody
/// reads would stop QEMU), stdin empty; fails when it has not ended within the patience.
fn run_to_end(dir: &Path, line: &str, n: usize, path: &std::ffi::OsStr) -> (Output, String) {
    use std::os::unix::process::CommandExt;
    let out_file = dir.join(format!("cmd{n}.stdout"));
    let err_file = dir.join(format!("cmd{n}.stderr"));
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .process_group(0)
        .spawn()
        .expect("run sh");
    let deadline = Instant::now() + COMMAND_PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            // SAFETY: kill has no memory effects; the group is the one this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            let grown = dir
                .join("uftrace.data.partial")
                .metadata()
                .map(|_| "the trace was still growing")
                .unwrap_or("");
            panic!(
                "`{line}` did not end within {COMMAND_PATIENCE:?} {grown}:\n{}",
                std::fs::read_to_string(&err_file).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read(&out_file).unwrap();
    let console = String::from_utf8_lossy(&stdout).into_owned();
    (
        Output {
            status,
            stdout,
            stderr: std::fs::read(&err_file).unwrap(),
        },
        console,
    )
}

/// Every command of the README and of the man pages' examples runs as written, in order, on
/// the files the install caches, and ends by itself: the kernels panic with `panic=-1` and
/// QEMU exits (`-no-reboot`), the viewers print and exit. Each shows what the README says
/// it shows.
#[test]
fn readme_and_man_page_commands_run_to_their_end() {
    let tmp = tempfile::tempdir().unwrap();
    let readme = readme_commands();
    let mut commands: Vec<String> = readme
        .iter()
        .filter(|c| !NOT_RUN_HERE.iter().any(|(l, _)| l == *c))
        .cloned()
        .collect();
    for c in man_commands() {
        if !commands.contains(&c) {
            commands.push(c);
        }
    }
    // The binary under test first, as `cargo install` would put it; then what the README
    // exports, in its order.
    let mut path: Vec<PathBuf> = std::iter::once(Path::new(BIN).parent().unwrap().to_path_buf())
        .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap()))
        .collect();
    let mut ran = 0;
    for (n, cmd) in commands.iter().enumerate() {
        if let Some(dir) = exported_path(cmd) {
            path.insert(1, dir);
            continue;
        }
        let joined = std::env::join_paths(&path).unwrap();
        let (o, out) = run_to_end(tmp.path(), &substitute(cmd), n, &joined);
        ran += 1;
        let err = stderr(&o);
        assert!(o.status.success(), "`{cmd}`: {}\n{err}", o.status);
        let sub = cmd.split_whitespace().nth(1).unwrap_or("");
        match sub {
            "record" => {
                assert!(err.contains("qemu-uftrace: wrote "), "`{cmd}`:\n{err}");
                assert!(!err.contains("INCOMPLETE"), "`{cmd}`:\n{err}");
                assert!(!err.contains("KASLR"), "`{cmd}`:\n{err}");
                if cmd.contains("/vmlinuz") {
                    assert!(
                        out.contains("Kernel panic") || err.contains("Kernel panic"),
                        "`{cmd}` did not reach the kernel's panic:\n{out}"
                    );
                }
                if cmd.contains("\"select 6*7\"") {
                    assert_eq!(out.lines().next(), Some("42"), "`{cmd}`");
                }
                if cmd.contains("--then report") {
                    assert!(out.contains("Total time"), "`{cmd}`:\n{out}");
                }
            }
            "replay" | "graph" => assert!(out.contains("FUNCTION"), "`{cmd}`:\n{out}\n{err}"),
            "report" => assert!(out.contains("Total time"), "`{cmd}`:\n{out}\n{err}"),
            "info" => {
                // The README's DWARF example names the tasks: the kernel's threads by name.
                assert!(out.contains("kthreadd"), "`{cmd}`:\n{out}\n{err}");
            }
            "export" => {
                let file = tmp.path().join("uftrace.data.pftrace");
                assert!(
                    file.metadata().is_ok_and(|m| m.len() > 0),
                    "`{cmd}` wrote no {}",
                    file.display()
                );
            }
            "doctor" | "status" => assert!(!out.is_empty(), "`{cmd}` said nothing:\n{err}"),
            _ => panic!("`{cmd}`: the test does not know what {sub} shows; say it here"),
        }
        if cmd.contains("--srcline") {
            assert!(
                out.lines().any(|l| l.contains("()") && l.contains(".c:")),
                "`{cmd}` shows no source line:\n{out}"
            );
        }
    }
    // Every README example ran (none skipped by a filter above), and the README kept them.
    let in_readme = readme
        .iter()
        .filter(|c| c.starts_with("qemu-uftrace "))
        .count();
    assert!(
        ran >= in_readme && in_readme >= 14,
        "{ran} run, README: {readme:?}"
    );
}

/// The README and the record man page say how to stop QEMU under -nographic, and no longer
/// that Ctrl-C does.
#[test]
fn docs_say_how_to_stop_qemu_under_nographic() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let man = std::fs::read_to_string(workspace().join("man/qemu-uftrace-record.1")).unwrap();
    assert!(readme.contains("**Ctrl-A x stops QEMU**"));
    assert!(!readme.contains("work; Ctrl-C stops QEMU"));
    assert!(man.contains("Ctrl\\-A x stops QEMU"), "{man}");
}

/// Every count of `plugin.stats` is explained in record's man page, and `--help` says
/// where; `-h` stays one screen (one line an option), without them.
#[test]
fn every_count_is_explained_in_the_man_page() {
    let man = std::fs::read_to_string(workspace().join("man/qemu-uftrace-record.1")).unwrap();
    let counts = &man[man.find(".SH COUNTS").expect("a COUNTS section")..];
    for c in qemu_uftrace::stats::COUNTS {
        assert!(
            counts.contains(&format!(".TP\n\\fB{}\\fR\n", c.key)),
            "the man page does not explain {}",
            c.key
        );
    }
    let home = tempfile::tempdir().unwrap();
    let long = stdout(&run(home.path(), &["record", "--help"]));
    assert!(long.contains("man qemu-uftrace-record (COUNTS)"), "{long}");
    let short = stdout(&run(home.path(), &["record", "-h"]));
    assert!(short.lines().count() <= 50, "record -h:\n{short}");
    for c in qemu_uftrace::stats::COUNTS {
        assert!(
            !short.contains(c.meaning) && !long.contains(c.meaning),
            "{}",
            c.key
        );
    }
}

/// The README starts with the tool: its first block is the two commands that work on a
/// fresh machine, its quick start fits in ten lines, and every guest file an example names
/// is one the install caches (or the demo builds), not a placeholder.
#[test]
fn readme_starts_with_the_tool_on_the_installed_files() {
    let blocks = readme_blocks();
    let (info, first) = &blocks[0];
    assert_eq!(info, "sh");
    assert_eq!(
        shell_lines(first),
        ["scripts/demo.sh", "scripts/test.sh"],
        "README's first block"
    );
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let opening = readme.lines().take(12).collect::<Vec<_>>().join("\n");
    assert!(opening.contains("scripts/demo.sh") && opening.contains("scripts/test.sh"));
    let quick = &readme[readme.find("## Quick start").expect("a quick start")..];
    let quick = &quick[quick.find("```sh\n").expect("its block") + 6..];
    let quick = &quick[..quick.find("```").unwrap()];
    assert!(quick.lines().count() <= 10, "quick start:\n{quick}");
    assert!(quick.contains("qemu-uftrace record") && quick.contains("qemu-uftrace replay"));
    for cmd in readme_commands().iter().chain(&man_commands()) {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        for pair in words.windows(2) {
            if ["-kernel", "-bios", "--symbols", "-L", "-initrd"].contains(&pair[0]) {
                assert!(
                    pair[1].starts_with(DOCUMENTED_CACHE) || pair[1] == DEMO_HELLO,
                    "`{cmd}`: {} is not a file the install provides",
                    pair[1]
                );
            }
        }
    }
}

/// `qemu-uftrace record -o DIR [extra] -- <hello>` in `home`, which must succeed.
fn record_hello(home: &Path, dir: &str, extra: &[&str]) -> Output {
    let elf = hello_elf().expect("build the example");
    let o = qemu_uftrace(home)
        .current_dir(home)
        .args(["record", "-o", dir])
        .args(extra)
        .arg("--")
        .args(qemu_args(&elf))
        .output()
        .expect("run qemu-uftrace record");
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

fn run(home: &Path, args: &[&str]) -> Output {
    qemu_uftrace(home)
        .current_dir(home)
        .args(args)
        .output()
        .expect("run qemu-uftrace")
}

/// `uftrace info` names the clock (in its version line, which exports carry too), and the
/// viewers say once, before uftrace's output, that the times count instructions.
#[test]
fn clock_is_named_by_info_and_the_viewers() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    record_hello(h, "insn.data", &[]);
    record_hello(h, "wall.data", &["--clock", "wall"]);
    let info = qemu_uftrace_tests::replay::uftrace(&[
        "info",
        "-d",
        &h.join("insn.data").to_string_lossy(),
    ])
    .unwrap();
    assert!(
        info.lines().any(|l| l.starts_with("# program version")
            && l.ends_with("(clock insn: times count guest instructions, not ns)")),
        "{info}"
    );
    let info = qemu_uftrace_tests::replay::uftrace(&[
        "info",
        "-d",
        &h.join("wall.data").to_string_lossy(),
    ])
    .unwrap();
    assert!(
        info.contains("(clock wall: times are host nanoseconds)"),
        "{info}"
    );
    for sub in ["replay", "report", "graph"] {
        let o = run(h, &[sub, "-d", "insn.data"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        let first = out.lines().next().unwrap_or("");
        assert!(
            first.starts_with("# clock insn: times count guest instructions, not nanoseconds"),
            "{sub}:\n{out}"
        );
        assert_eq!(out.matches("# clock insn").count(), 1, "{sub}:\n{out}");
        assert!(out.contains("main"), "{sub}:\n{out}");
        let o = run(h, &[sub, "-d", "wall.data"]);
        assert!(!stdout(&o).contains("clock"), "{sub}:\n{}", stdout(&o));
    }
    // Not in dump's output, which programs read.
    let o = run(h, &["dump", "-d", "insn.data", "--chrome"]);
    assert!(stdout(&o).starts_with('{'), "{}", stdout(&o));
}

/// `--help` tells users to put uftrace's options after `--`: they reach uftrace.
#[test]
fn options_after_double_dash_reach_uftrace() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    record_hello(h, "t", &[]);
    let full = stdout(&run(h, &["replay", "-d", "t"]));
    assert!(full.contains("factorial()"), "{full}");
    for args in [
        &["replay", "-d", "t", "--", "-D", "1"][..],
        &["replay", "-d", "t", "-D", "1"],
        &["replay", "-d", "t", "--no-pager", "--", "-D", "1"],
    ] {
        let o = run(h, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("main();"), "{args:?}:\n{out}");
        assert!(!out.contains("factorial"), "{args:?} ignored -D 1:\n{out}");
    }
    let deep = stdout(&run(h, &["dump", "-d", "t", "--chrome"]));
    let o = run(h, &["dump", "-d", "t", "--chrome", "--", "-D", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shallow = stdout(&o);
    assert!(deep.contains("\"factorial\""), "{deep}");
    assert!(shallow.contains("\"main\""), "{shallow}");
    assert!(
        !shallow.contains("\"factorial\""),
        "-D 1 ignored:\n{shallow}"
    );
}

/// Waits for `c` to end within a minute; a `tui` left spinning fails the test.
fn output_within_a_minute(mut c: Command) -> Output {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // SAFETY: kill has no memory effects; the child is ours.
            unsafe { libc::kill(id as i32, libc::SIGKILL) };
            panic!("still running after a minute");
        }
    }
}

/// `tui` without a terminal would leave uftrace spinning: one line instead, and for
/// `record --then tui` before QEMU runs.
#[test]
fn tui_without_a_terminal_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    record_hello(h, "t", &[]);
    let mut c = qemu_uftrace(h);
    c.current_dir(h).args(["tui", "-d", "t"]);
    let o = output_within_a_minute(c);
    assert_eq!(o.status.code(), Some(1));
    let line = single_error(&o);
    assert!(line.contains("tui needs a terminal"), "{line}");
    assert!(
        line.contains("qemu-uftrace replay, report or graph"),
        "{line}"
    );

    let elf = hello_elf().unwrap();
    let mut c = qemu_uftrace(h);
    c.current_dir(h)
        .args(["record", "-o", "then", "--then", "tui", "--"])
        .args(qemu_args(&elf));
    let o = output_within_a_minute(c);
    assert_eq!(o.status.code(), Some(1));
    assert!(single_error(&o).contains("tui needs a terminal"));
    assert!(!h.join("then").exists() && !h.join("then.partial").exists());
}

/// Each message the issue names points the right way.
#[test]
fn messages_point_the_right_way() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let elf = hello_elf().unwrap();
    let mut argv = qemu_args(&elf);

    // A misspelled emulator is not found, and the name meant is said.
    argv[0] = "qemu-system-aarch46".into();
    let o = qemu_uftrace(h)
        .arg("record")
        .arg("--")
        .args(&argv)
        .output()
        .unwrap();
    assert_eq!(
        single_error(&o),
        "qemu-uftrace: error: 'qemu-system-aarch46' not found on PATH; \
         did you mean qemu-system-aarch64?"
    );
    // The same status as any QEMU not found (below).
    assert_eq!(o.status.code(), Some(1));

    // A missing user-mode emulator: Debian's package has no plugin support.
    let empty = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(h)
        .env("PATH", empty.path())
        .args(["record", "--", "qemu-aarch64", "./prog"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let line = single_error(&o);
    assert!(line.contains("'qemu-aarch64' not found on PATH"), "{line}");
    assert!(line.contains("a QEMU built with plugin support"), "{line}");
    assert!(line.contains("scripts/install-deps.sh"), "{line}");
    assert!(!line.contains("apt-get install qemu-system"), "{line}");

    // An option record does not have: not handed to QEMU as its program.
    let o = qemu_uftrace(h)
        .args(["record", "--fast", "--"])
        .args(qemu_args(&elf))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let line = single_error(&o);
    assert!(line.contains("record has no option --fast"), "{line}");
    assert!(!line.contains("-- --fast"), "{line}");

    // symbols on a file that is no symbol source: no --symbols, which it does not take.
    let text = h.join("notes.txt");
    std::fs::write(&text, "not symbols\n").unwrap();
    let o = qemu_uftrace(h)
        .args(["symbols", "--syms-only", "-d", "d"])
        .arg(&text)
        .output()
        .unwrap();
    let line = single_error(&o);
    assert!(!line.contains("--symbols"), "{line}");
    assert!(line.contains("a kernel image in its place"), "{line}");
}

/// The end of `record` shows a count only with what it means and what to do.
#[test]
fn counts_are_shown_with_their_meaning() {
    let home = tempfile::tempdir().unwrap();
    let o = record_hello(home.path(), "t", &["--max-depth", "2"]);
    let err = stderr(&o);
    let line = err
        .lines()
        .find(|l| l.contains("depth_cap_hits"))
        .unwrap_or_else(|| panic!("no depth_cap_hits line:\n{err}"));
    // What was asked for is said as such, with no advice against it.
    assert!(
        line.contains(
            ": calls nested deeper than --max-depth 2, followed but not recorded (as asked)"
        ),
        "{line}"
    );
    assert!(!line.contains("larger"), "{line}");
    assert!(!err.contains("plugin also reports"), "{err}");
}

/// Whether `text` holds an address cut to 48 bits from an upper-half one: `<` and 12 hex
/// digits whose first is 8 or above, then `>`.
fn cut_address(text: &str) -> Option<&str> {
    text.split('<').skip(1).find_map(|rest| {
        let a = rest.split('>').next()?;
        (a.len() == 12
            && a.bytes().all(|b| b.is_ascii_hexdigit())
            && u8::from_str_radix(&a[..1], 16).is_ok_and(|d| d >= 8))
        .then_some(a)
    })
}

/// A kernel recorded without symbols shows its addresses whole, as System.map and the
/// kernel's own oops output have them, in report and in graph's backtraces.
#[test]
fn kernel_addresses_without_symbols_are_shown_whole() {
    let argv = qemu_uftrace_tests::kernel_boot_args("cortex-a57");
    let (_tmp, dir, _) = record_to_panic(&argv, &["--no-auto-symbols"]);
    let d = dir.to_string_lossy().into_owned();
    let map = std::fs::read_to_string(cached("kernel-dbg/System.map")).unwrap();
    let start_kernel = map
        .lines()
        .find_map(|l| l.strip_suffix(" T start_kernel"))
        .expect("start_kernel in System.map");
    let report = qemu_uftrace_tests::replay::uftrace(&["report", "-d", &d]).unwrap();
    assert!(
        report.contains(&format!("<{start_kernel}>")),
        "start_kernel ({start_kernel}) not shown whole:\n{}",
        &report[..report.len().min(3000)]
    );
    assert_eq!(cut_address(&report), None);
    // graph's backtraces give each frame's address too, as uftrace reads it from the record.
    let o = Command::new(BIN)
        .args(["graph", "-d", &d])
        .arg(format!("<{start_kernel}>"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let graph = stdout(&o);
    assert!(
        graph
            .lines()
            .any(|l| l.trim_start().starts_with("[0] <")
                && l.ends_with(&format!("(0x{start_kernel})"))),
        "{}",
        &graph[..graph.len().min(3000)]
    );
    assert_eq!(cut_address(&graph), None);
    assert!(
        !graph.contains("(0x8000"),
        "{}",
        &graph[..graph.len().min(3000)]
    );
}

/// x86_64: SeaBIOS, the option ROMs and the bzImage's real-mode and decompressor code have
/// no symbols: each region is one marked function, and no address is left bare. The
/// bzImage's own BTF names the tasks (and gives their PIDs) at record time, so a DWARF
/// vmlinux given to `symbols` afterwards has no numbered task to explain.
#[test]
fn x86_firmware_regions_are_marked_and_tasks_named() {
    let argv = qemu_uftrace_tests::amd64_kernel_boot_args_on(
        "qemu-system-x86_64",
        qemu_uftrace_tests::AMD64_PANIC_APPEND,
    );
    // record_kernel_x86_64.rs boots the same, shared; `symbols` below rewrites the trace,
    // so this test reads its own copy.
    let (_tmp, dir) = shared::record(&argv, &[]).private_copy();
    let d = dir.to_string_lossy().into_owned();
    let report = qemu_uftrace_tests::replay::uftrace(&["report", "-d", &d]).unwrap();
    for region in ["[x86 BIOS e", "[x86 option ROM c", "[x86 real-mode code "] {
        assert!(report.contains(region), "no {region}…]:\n{report}");
    }
    let bare: Vec<&str> = report
        .lines()
        .filter(|l| l.trim_end().ends_with('>'))
        .take(5)
        .collect();
    assert!(bare.is_empty(), "addresses left bare: {bare:?}");

    let o = Command::new(BIN)
        .args(["symbols", "-d", &d])
        .arg(cached("kernel-amd64-dbg/vmlinux"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        !err.contains("task(s) keep their pid-N/task-N names"),
        "{err}"
    );
    let names = qemu_uftrace_tests::replay::task_names(&dir).unwrap();
    assert_eq!(
        names.get(&2).map(String::as_str),
        Some("kthreadd"),
        "{names:?}"
    );
    // The regions the vmlinux does not cover stay marked.
    let report = qemu_uftrace_tests::replay::uftrace(&["report", "-d", &d]).unwrap();
    assert!(report.contains("[x86 BIOS e"), "{report}");
}
