//! User mode's clocks against what the docs promise. The default, wall time, is the host's
//! clock read every 1,024 guest instructions and after system calls and translations, the
//! instructions in between advancing it: every record's time moves with the instructions
//! run (distinct, never going back, durations roughly proportional to the instruction
//! clock's), a system call's wait included, within the host time QEMU ran. `--clock insn` counts the guest's instructions:
//! the same in every run, a leaf's duration its instructions. On aarch64 and x86_64, with a
//! dynamic PIE (the loader's start-up translates code all the time: where the default clock
//! stood still for dozens of records) computing `fib` (the same leaf, 7.108 µs every time).
//! The same in every run because QEMU runs with the host's address randomisation off.

mod common;

use common::user::{compile, record_with, text};
use qemu_uftrace_tests::replay::uftrace;
use qemu_uftrace_tests::{cached, disassemble_by, user_qemu};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Straight-line: its duration under --clock insn is its instruction count. */
__attribute__((noipa)) long leaf(long x) { return x * 3 + 1; }

__attribute__((noipa)) long fib(long n)
{
    if (n < 2)
        return leaf(n);
    return fib(n - 1) + fib(n - 2);
}

/* A loop without calls: n iterations, one event at each end. */
__attribute__((noipa)) long spin(long n)
{
    volatile long acc = 0;
    for (long i = 0; i < n; i++)
        acc += i;
    return acc;
}

/* 20 ms in a system call, no instruction run. */
__attribute__((noipa)) void nap(void) { usleep(20000); }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 8, sum = 0;
    /* Six rounds: the shortest of the last five is each size's time (one descheduled
       run, 3 ms where 1 ms was due, failed the proportions under the full suite's load). */
    for (int round = 0; round < 6; round++)
        for (long k = 10; k <= 100000; k *= 10)
            sum += spin(k);
    nap();
    printf("fib(%ld)=%ld spin=%ld\n", n, fib(n), sum);
    return 0;
}
"#;

/// One architecture: its user-mode QEMU, compiler, objdump and QEMU options.
struct Arch {
    qemu: PathBuf,
    gcc: &'static str,
    objdump: &'static str,
    qemu_opts: &'static [&'static str],
}

fn aarch64() -> Arch {
    Arch {
        qemu: user_qemu(),
        gcc: "aarch64-linux-gnu-gcc",
        objdump: "aarch64-linux-gnu-objdump",
        qemu_opts: &["-L", "/usr/aarch64-linux-gnu"],
    }
}

fn x86_64() -> Arch {
    Arch {
        qemu: cached("qemu-10.2.2/bin/qemu-x86_64"),
        gcc: "gcc",
        objdump: "objdump",
        qemu_opts: &[],
    }
}

/// The program, a dynamic PIE built now.
fn build(arch: &Arch, dir: &Path) -> PathBuf {
    compile(
        arch.gcc,
        &["-O2", "-g", "-fno-inline"],
        dir,
        "prog",
        PROGRAM,
    )
}

/// CLOCK_MONOTONIC in ns: the clock wall-time traces are on.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One record as `uftrace dump` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    time: u64,
    entry: bool,
    name: String,
}

/// A trace's records, all of one task (the program is single-threaded).
fn records(dir: &Path) -> Vec<Rec> {
    let dump = uftrace(&["dump", "--no-pager", "-d", &dir.to_string_lossy()]).expect("dump");
    let mut tids = Vec::new();
    let recs: Vec<Rec> = dump
        .lines()
        .filter_map(|l| {
            // `5389.345839599  1234: [entry] main(5500000a10) depth: 0`
            let (head, rest) = l.split_once(": [")?;
            let (time, tid) = head.trim().split_once(char::is_whitespace)?;
            let (sec, ns) = time.split_once('.')?;
            let entry = rest.starts_with("entry]");
            if !entry && !rest.starts_with("exit ]") {
                return None;
            }
            let name = rest.split_once("] ")?.1.rsplit_once('(')?.0;
            // Unnamed code (`<7f6ffe743260>`, the vDSO's) is mapped elsewhere every run.
            let name = if name.starts_with('<') {
                "<unnamed>"
            } else {
                name
            }
            .to_owned();
            tids.push(tid.trim().to_owned());
            Some(Rec {
                time: sec.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?,
                entry,
                name,
            })
        })
        .collect();
    tids.dedup();
    assert_eq!(tids.len(), 1, "one task: {tids:?}");
    assert!(recs.len() > 500, "{} records:\n{dump}", recs.len());
    recs
}

/// Each call's (record index of its entry, name, duration) in a balanced sequence.
fn calls(recs: &[Rec]) -> Vec<(usize, String, u64)> {
    let mut open: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        if r.entry {
            open.push(i);
        } else if let Some(e) = open.pop() {
            assert_eq!(recs[e].name, r.name, "records {e} and {i}");
            out.push((e, r.name.clone(), r.time - recs[e].time));
        }
    }
    out.sort_unstable();
    out
}

/// `name`'s instructions up to its first return, which no branch may come before.
fn straight_line_length(arch: &Arch, elf: &Path, name: &str) -> u64 {
    let funcs = disassemble_by(arch.objdump, elf, Some(name)).expect("objdump");
    let body = funcs
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no {name} in the disassembly"));
    let mut n = 0;
    for (_, insn) in &body.insns {
        n += 1;
        if insn.starts_with("ret") {
            return n;
        }
        let mnemonic = insn.split_whitespace().next().unwrap_or("");
        assert!(
            !(mnemonic.starts_with('b') && mnemonic != "bti"
                || ["j", "cb", "tb"].iter().any(|p| mnemonic.starts_with(p))),
            "{name} branches: {insn}"
        );
    }
    panic!("{name} has no ret:\n{body:?}");
}

fn check(arch: Arch) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = build(&arch, tmp.path());
    let mut args: Vec<&str> = arch.qemu_opts.to_vec();
    let elf_arg = elf.to_string_lossy();
    args.extend([&*elf_arg, "12"]);
    let expect = "fib(12)=665 spin=30302696970\n";
    let record = |opts: &[&str]| {
        let before = monotonic_ns();
        let (tmp, dir, out) = record_with(&arch.qemu, opts, &args);
        let after = monotonic_ns();
        assert!(out.status.success(), "{opts:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expect);
        // The clock the trace says it has: user mode's default is wall.
        let info = uftrace(&["info", "-d", &dir.to_string_lossy()]).expect("info");
        let clock = if opts.contains(&"insn") {
            "(clock insn: times count guest instructions, not ns)"
        } else {
            "(clock wall: times are host nanoseconds)"
        };
        assert!(info.contains(clock), "{opts:?}: {info}");
        (tmp, records(&dir), before, after)
    };
    // The default (wall) and the instruction clock, twice: deterministic.
    let (_t0, wall, before, after) = record(&[]);
    let (_t1, insn) = {
        let (t, r, ..) = record(&["--clock", "insn"]);
        (t, r)
    };
    let (_t2, insn_again) = {
        let (t, r, ..) = record(&["--clock", "insn"]);
        (t, r)
    };
    assert!(insn == insn_again, "--clock insn differs between two runs");
    let shape = |r: &[Rec]| -> Vec<(bool, String)> {
        r.iter().map(|r| (r.entry, r.name.clone())).collect()
    };
    assert!(
        shape(&wall) == shape(&insn),
        "the same run records the same calls under either clock"
    );

    // What a count means: a straight-line leaf's duration is its instruction count.
    let leaf = straight_line_length(&arch, &elf, "leaf");
    let insn_calls = calls(&insn);
    let leaves: Vec<u64> = (insn_calls.iter())
        .filter(|c| c.1 == "leaf")
        .map(|c| c.2)
        .collect();
    assert_eq!(leaves.len(), 144 + 89, "fib(12)'s leaves");
    assert!(leaves.iter().all(|&d| d == leaf), "{leaf}: {leaves:?}");

    // Moving with the instructions: records 16 or more instructions apart have distinct
    // times (16 instructions take a few ns even at a quarter of QEMU's fastest rate).
    let apart: Vec<usize> = (1..wall.len())
        .filter(|&i| insn[i].time - insn[i - 1].time >= 16)
        .collect();
    let frozen: Vec<usize> = (apart.iter().copied())
        .filter(|&i| wall[i].time == wall[i - 1].time)
        .collect();
    let same = (1..wall.len())
        .filter(|&i| wall[i].time == wall[i - 1].time)
        .count();
    eprintln!(
        "{}: {} of {} records 16+ instructions apart share the time of the one before \
         ({same} of {} records in all)",
        arch.gcc,
        frozen.len(),
        apart.len(),
        wall.len()
    );
    assert!(
        frozen.is_empty(),
        "{} of {} records stand still, first at {:?}",
        frozen.len(),
        apart.len(),
        frozen.iter().take(5).map(|&i| &wall[i]).collect::<Vec<_>>()
    );

    // Within the host time QEMU ran, never going back.
    let (first, last) = (wall[0].time, wall[wall.len() - 1].time);
    assert!(
        before <= first && last <= after,
        "records from {first} to {last}, QEMU ran from {before} to {after}"
    );
    let back: Vec<usize> = (1..wall.len())
        .filter(|&i| wall[i].time < wall[i - 1].time)
        .collect();
    assert!(back.is_empty(), "time went back at records {back:?}");

    // Real durations: a system call's wait shows, where the instruction clock sees a few
    // hundred instructions.
    let wall_calls = calls(&wall);
    let nap = |calls: &[(usize, String, u64)]| {
        calls
            .iter()
            .find(|c| c.1 == "nap")
            .map(|c| c.2)
            .expect("nap")
    };
    let (nap_wall, nap_insns) = (nap(&wall_calls), nap(&insn_calls));
    assert!(
        (20_000_000..after - before).contains(&nap_wall) && nap_insns < 20_000,
        "nap: {nap_wall} ns, {nap_insns} instructions"
    );

    // Durations: every call of 16 or more instructions took time, and roughly in
    // proportion to its instructions. Per function and instruction count (`fib(k)` has one
    // for each k, `spin(n)` one for each n), the shortest duration from the second call on
    // (the first one's code is translated as it runs; QEMU descheduled only lengthens
    // one): a call running 4 times the instructions of another call of its function or
    // more takes longer.
    let mut by_size: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for (w, i) in wall_calls.iter().zip(&insn_calls) {
        assert_eq!((w.0, &w.1), (i.0, &i.1));
        assert!(
            i.2 < 16 || w.2 > 0,
            "{} at record {} ran {} instructions in no time",
            w.1,
            w.0,
            i.2
        );
        // The program's own functions: the loader's and libc's later calls run code paths
        // their earlier ones did not (translated as they run), and aarch64's are unnamed.
        // Per function: how fast code runs differs between functions (a loop without calls
        // against fib's call every few instructions, each a callback).
        if seen.insert((i.1.clone(), i.2)) || i.2 < 64 || !["fib", "spin"].contains(&&*i.1) {
            continue;
        }
        let shortest = by_size.entry((i.1.clone(), i.2)).or_insert(u64::MAX);
        *shortest = (*shortest).min(w.2);
    }
    let sizes: Vec<(u64, u64, &str)> = (by_size.iter())
        .map(|((name, insns), &wall)| (*insns, wall, name.as_str()))
        .collect();
    eprintln!("{}: (instructions, ns, function): {sizes:?}", arch.gcc);
    assert!(sizes.len() >= 10, "{sizes:?}");
    for a in &sizes {
        for b in &sizes {
            if a.2 == b.2 && a.0 >= 4 * b.0 {
                assert!(a.1 > b.1, "{a:?} took no longer than {b:?}");
            }
        }
    }
    // One loop's code, of 6,000 instructions and more (several intervals): 10 times the
    // iterations take 4 to 25 times as long. Intervals around translations once set the
    // rates here: spin(1000) took 217 ns, spin(10000) 340.
    let spins: Vec<&(u64, u64, &str)> = sizes
        .iter()
        .filter(|s| s.2 == "spin" && s.0 >= 6_000)
        .collect();
    assert_eq!(spins.len(), 3, "{sizes:?}");
    for w in spins.windows(2) {
        assert!(
            (4 * w[0].1..=25 * w[0].1).contains(&w[1].1),
            "not in proportion: {:?} and {:?}",
            w[0],
            w[1]
        );
    }
}

/// The trace's mappings: what the programs and their libraries were mapped at, each
/// session's (in sorted order: session ids are random), the trace's directory said `DIR`
/// and process ids `PID`.
fn layout_of(dir: &Path) -> String {
    let pids = regex::Regex::new(r"/procs/[0-9]+\.").expect("regex");
    let mut maps: Vec<String> = (std::fs::read_dir(dir).expect("the trace").flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with("sid-"))
        .map(|e| std::fs::read_to_string(e.path()).expect("read the map"))
        .map(|m| {
            let m = m.replace(&*dir.to_string_lossy(), "DIR");
            pids.replace_all(&m, "/procs/PID.").into_owned()
        })
        .collect();
    maps.sort();
    let text = maps.concat();
    assert!(text.contains("/libc.so.6"), "{text}");
    text
}

/// `record -o DIR -- QEMU ARGS…` with `env` added, under strace with every `munmap` made
/// 2 ms late when `late`: DIR's layout and the program's output.
fn record_layout(qemu: &Path, args: &[&str], env: &[(&str, &str)], late: bool) -> (String, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let mut cmd = if late {
        let mut c = Command::new("strace");
        c.args(["-f", "-o", "/dev/null", "-e", "trace=munmap"])
            .args(["-e", "inject=munmap:delay_enter=2000", common::BIN]);
        c
    } else {
        Command::new(common::BIN)
    };
    let out = cmd
        .envs(env.iter().copied())
        .args(["record", "-o"])
        .arg(&dir)
        .arg("--")
        .arg(qemu)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run qemu-uftrace (strace: scripts/install-deps.sh installs it)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    (layout_of(&dir), text(&out.stdout))
}

/// QEMU runs without the host's address randomisation (as gdb runs a program): the loader
/// landed wherever mmap put it, and its work (hence `--clock insn`'s count) depended on
/// where; one run in three differed. And with one malloc arena (`run_qemu::OneArena`): a
/// thread's first malloc maps 128 MiB and trims it, and a mapping QEMU's main thread made
/// in between moved the guest's libc (under two suites at once, one run in about twenty).
/// strace makes every `munmap` 2 ms late, as a preemption there would: the same layout.
/// `--aslr` leaves randomisation on.
#[test]
fn user_mode_maps_the_guest_at_the_same_addresses_unless_aslr() {
    let arch = x86_64();
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = build(&arch, tmp.path());
    let elf_arg = elf.to_string_lossy();
    let layout = |opts: &[&str]| {
        let (_tmp, dir, out) = record_with(&arch.qemu, opts, &[&elf_arg, "3"]);
        assert!(out.status.success(), "{opts:?}: {}", text(&out.stderr));
        layout_of(&dir)
    };
    let fixed = layout(&[]);
    assert_eq!(fixed, layout(&[]), "two runs, two layouts");
    let (late, _) = record_layout(&arch.qemu, &[&elf_arg, "3"], &[], true);
    assert_eq!(fixed, late, "munmap made late moved the layout");
    let random = [layout(&["--aslr"]), layout(&["--aslr"])];
    assert!(
        random[0] != random[1] && !random.contains(&fixed),
        "--aslr: {random:?}"
    );
}

/// A program that execs itself once; the exec'd one says what it got for GLIBC_TUNABLES.
const EXECS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1) {
        const char *v = getenv("GLIBC_TUNABLES");
        printf("exec'd: GLIBC_TUNABLES=%s\n", v ? v : "(unset)");
        return 0;
    }
    execl(argv[0], argv[0], "again", (char *)0);
    return 1;
}
"#;

/// The QEMU the plugin runs for an exec'd program keeps to one malloc arena too: with
/// every `munmap` late, both programs' layouts stay; and each program gets the environment
/// it was given, GLIBC_TUNABLES included (QEMU's own has the tunable added).
#[test]
fn an_exec_d_program_keeps_its_layout_and_its_environment() {
    let qemu = cached("qemu-10.2.2/bin/qemu-x86_64");
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = compile("gcc", &["-O1"], tmp.path(), "execs", EXECS);
    let elf = elf.to_string_lossy();
    let (fixed, said) = record_layout(&qemu, &[&elf], &[], false);
    assert_eq!(said, "exec'd: GLIBC_TUNABLES=(unset)\n");
    assert_eq!(fixed.matches("/libc.so.6").count(), 2, "{fixed}");
    let (late, _) = record_layout(&qemu, &[&elf], &[], true);
    assert_eq!(fixed, late, "munmap made late moved a layout");
    let theirs = [("GLIBC_TUNABLES", "glibc.malloc.check=0")];
    let (_, said) = record_layout(&qemu, &[&elf], &theirs, false);
    assert_eq!(said, "exec'd: GLIBC_TUNABLES=glibc.malloc.check=0\n");
}

#[test]
fn aarch64_user_wall_clock_moves_with_instructions() {
    check(aarch64());
}

#[test]
fn x86_64_user_wall_clock_moves_with_instructions() {
    check(x86_64());
}
