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

/// The shell commands of the README's `## Use` block, continuation lines joined and
/// comments dropped: what a user would paste.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let use_section = &readme[readme.find("## Use").expect("README has ## Use")..];
    let start = use_section
        .find("```sh\n")
        .expect("a sh block under ## Use")
        + 6;
    let block = &use_section[start..];
    let block = &block[..block.find("```").expect("the block ends")];
    shell_lines(&block.replace("\\\n", " "))
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

/// A small dynamically linked aarch64 program with source lines, for `./prog 10`.
fn build_prog(dir: &Path) -> PathBuf {
    let src = dir.join("prog.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n\
         static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
         int main(int argc, char **argv) {\n\
         \tprintf(\"%d\\n\", fib(argc > 1 ? atoi(argv[1]) : 5));\n\treturn 0;\n}\n",
    )
    .unwrap();
    let prog = dir.join("prog");
    let out = Command::new(format!("{}gcc", qemu_uftrace_tests::cross_prefix()))
        .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .expect("run the aarch64 cross compiler (scripts/install-deps.sh installs it)");
    assert!(out.status.success(), "{}", stderr(&out));
    prog
}

/// A README command with the files it names replaced by the ones the install caches: the
/// kernel `Image` of the emulator the command runs, `bzImage`, OpenSBI, the example guest
/// and the user program.
fn substitute(cmd: &str, prog: &Path) -> String {
    let emulator = cmd
        .split(" -- ")
        .nth(1)
        .and_then(|q| q.split_whitespace().next())
        .unwrap_or("");
    cmd.split(' ')
        .map(|w| match w {
            "Image" if emulator.ends_with("riscv64") => {
                cached("kernel-riscv64/vmlinuz").display().to_string()
            }
            "Image" => cached("kernel/vmlinuz").display().to_string(),
            "bzImage" => cached("kernel-amd64/vmlinuz").display().to_string(),
            "fw_dynamic.elf" => cached("opensbi-riscv64/fw_dynamic.elf")
                .display()
                .to_string(),
            "hello.elf" => hello_elf()
                .expect("build the example")
                .display()
                .to_string(),
            "./prog" => prog.display().to_string(),
            w => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs one command line with `sh` in `dir`, stdout and stderr to files (a pipe nobody
/// reads would stop QEMU), stdin empty; fails when it has not ended within the patience.
fn run_to_end(dir: &Path, line: &str, n: usize) -> (Output, String) {
    use std::os::unix::process::CommandExt;
    let bin_dir = Path::new(BIN).parent().unwrap();
    // The install's QEMU 10.2.2 first: Debian's qemu-user has no plugin support.
    let path = std::env::join_paths(
        [bin_dir.to_path_buf(), cache_dir().join("qemu-10.2.2/bin")]
            .into_iter()
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
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

/// Every `qemu-uftrace` command of the README's `## Use` block and of the man pages' examples
/// runs as written, with the cached kernels, firmware and a small program in place of the
/// files it names, and ends by itself: the kernels panic with `panic=-1` and QEMU exits
/// (`-no-reboot`), the viewers print and exit.
#[test]
fn readme_and_man_page_commands_run_to_their_end() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_prog(tmp.path());
    let mut commands: Vec<String> = readme_commands()
        .into_iter()
        .filter(|c| c.starts_with("qemu-uftrace "))
        .collect();
    assert!(
        commands.len() >= 7,
        "README's Use block lost its commands: {commands:?}"
    );
    for c in man_commands() {
        if !commands.contains(&c) {
            commands.push(c);
        }
    }
    for (n, cmd) in commands.iter().enumerate() {
        let line = substitute(cmd, &prog);
        let (o, out) = run_to_end(tmp.path(), &line, n);
        let err = stderr(&o);
        assert!(o.status.success(), "`{cmd}`: {}\n{err}", o.status);
        if cmd.starts_with("qemu-uftrace record") {
            assert!(err.contains("qemu-uftrace: wrote "), "`{cmd}`:\n{err}");
            assert!(!err.contains("INCOMPLETE"), "`{cmd}`:\n{err}");
            assert!(!err.contains("KASLR"), "`{cmd}`:\n{err}");
            if cmd.contains("-kernel Image") || cmd.contains("-kernel bzImage") {
                assert!(
                    out.contains("Kernel panic") || err.contains("Kernel panic"),
                    "`{cmd}` did not reach the kernel's panic:\n{out}"
                );
            }
            if cmd.contains("./prog 10") {
                assert_eq!(out.trim(), "55", "`{cmd}`");
            }
            if cmd.contains("--then report") {
                assert!(out.contains("Total time"), "`{cmd}`:\n{out}");
            }
        } else {
            assert!(out.contains("FUNCTION"), "`{cmd}`:\n{out}\n{err}");
        }
        if cmd.contains("--srcline") {
            assert!(
                out.contains("fib()") && out.contains("prog.c:"),
                "`{cmd}`:\n{out}"
            );
        }
    }
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

/// Every count of `plugin.stats` is explained in the README and in record's man page.
#[test]
fn every_count_is_explained_in_readme_and_man_page() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let man = std::fs::read_to_string(workspace().join("man/qemu-uftrace-record.1")).unwrap();
    for c in qemu_uftrace::stats::COUNTS {
        assert!(
            readme.contains(&format!("- `{}`: ", c.key)),
            "README does not explain {}",
            c.key
        );
        assert!(
            man.contains(&format!("{}: ", c.key.replace('-', "\\-"))),
            "the man page does not explain {}",
            c.key
        );
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

    // A missing user-mode emulator: Debian's package has no plugin support.
    let empty = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(h)
        .env("PATH", empty.path())
        .args(["record", "--", "qemu-aarch64", "./prog"])
        .output()
        .unwrap();
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
        .args(["symbols", "-d", "d"])
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
    assert!(
        line.contains("calls nested deeper than the depth cap, followed but not recorded")
            && line.ends_with("record with a larger --max-depth (up to 1024) to see them"),
        "{line}"
    );
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
/// no symbols: each region is one marked function, and no address is left bare. A DWARF
/// vmlinux given to `symbols` afterwards says why the tasks keep their numbers.
#[test]
fn x86_firmware_regions_are_marked_and_tasks_explained() {
    let kernel = cached("kernel-amd64/vmlinuz").display().to_string();
    let argv: Vec<String> = [
        "qemu-system-x86_64",
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
        "console=ttyS0 panic=-1 nokaslr no_timer_check",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (_tmp, dir, _) = record_argv(&argv, &[]);
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
        err.lines()
            .any(|l| l.contains("task(s) keep their pid-N/task-N names")
                && l.contains("record again with --symbols")),
        "{err}"
    );
    // The regions the vmlinux does not cover stay marked.
    let report = qemu_uftrace_tests::replay::uftrace(&["report", "-d", &d]).unwrap();
    assert!(report.contains("[x86 BIOS e"), "{report}");
}
