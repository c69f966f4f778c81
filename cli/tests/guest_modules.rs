//! Kernel modules named (issue 34): Debian's arm64 and amd64 kernels, given as their stock
//! images only (no debug package), boot an initramfs whose `/init` loads two of that kernel's own modules
//! with `finit_module` (`dummy.ko`, whose init creates a device and whose exit removes it),
//! unloads it, then loads `ifb.ko`, which the kernel places at the range `dummy.ko` left
//! (`tests/guests/linux/modinit.c`). Every module function the guest ran is named, as the
//! module's own symbol table names it, and called as often as QEMU's `execlog` saw its first
//! instruction run in the same run, the module it belonged to at that moment told apart by
//! the unload between them. The recording starts at the first `finit_module` (`--start-at`).
//! Its Perfetto export names the reused range by the module loaded there at each call.
//!
//! execlog needs the addresses before QEMU starts: a plain boot of the same guest (no plugin,
//! a few seconds) prints where the kernel places each section (`/sys/module/*/sections`); the
//! `.ko` files' own symbols are placed by them. The recorded boot prints them again: the
//! same (the boot is deterministic, `nokaslr`, one vCPU), or the test says so.
//!
//! Run: `cargo test -p qemu-uftrace --test guest_modules`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use qemu_uftrace_tests::execlog::execlog_plugin;
use qemu_uftrace_tests::linux_guest::{run_qemu_argv, INITRAMFS_TIMEOUT};
use qemu_uftrace_tests::modules_guest::{
    debian_module, modules_boot_args, placed_sections, ModArch, MODULES,
};
use qemu_uftrace_tests::replay::{replay_body, report_calls, uftrace_at, uftrace_versions};
use qemu_uftrace_tests::{cached, system_qemus_of};

/// The kernel function between the two modules' lives (`dummy.ko`'s unload): execlog's lines
/// before its first run are `dummy.ko`'s, after it `ifb.ko`'s.
const BETWEEN: &str = "free_module";

/// QEMU 10.2.2: the QEMU execlog was built for.
fn qemu(arch: ModArch) -> String {
    system_qemus_of(arch.emulator())
        .into_iter()
        .find(|q| q.label == "10.2.2")
        .expect("QEMU 10.2.2 in system_qemus")
        .program
}

/// A module's debug file, from the kernel's -dbg package.
fn module_debug(arch: ModArch, module: &str) -> PathBuf {
    cached(&match arch {
        ModArch::Arm64 => format!("kernel-dbg/{module}.ko"),
        ModArch::Amd64 => format!("kernel-amd64-dbg/{module}.ko"),
    })
}

/// The oracle for a module function's source line (`file:line`, the file by its base
/// name): the line table of the module's debug file as elfutils' `eu-readelf` decodes it
/// (its own DWARF reader, which relocates a module's debug sections and gives each row's
/// section), read as `record` reads one: of the rows at the function's entry the first
/// statement (else the first), where none is there the first row inside it (ftrace's NOPs
/// have none).
fn decoded_line(arch: ModArch, module: &str, function: &str) -> Option<String> {
    let path = module_debug(arch, module);
    let data = std::fs::read(&path).expect("read the debug .ko");
    let file = object::File::parse(&*data).expect("parse the debug .ko");
    let sym = (file.symbols())
        .find(|s| s.name() == Ok(function) && s.kind() == SymbolKind::Text)
        .unwrap_or_else(|| panic!("{} has no {function}", path.display()));
    let section = file
        .section_by_index(sym.section_index().expect("its section"))
        .expect("its section");
    let section = section.name().expect("section name");
    let (entry, size) = (sym.address(), sym.size());
    let out = Command::new("eu-readelf")
        .arg("--debug-dump=decodedline")
        .arg(&path)
        .output()
        .expect("run eu-readelf (elfutils: scripts/install-deps.sh)");
    assert!(out.status.success(), "eu-readelf failed: {out:?}");
    // `  drivers/net/dummy.c (mtime: 0, length: 0)` names the file of the rows below it:
    // `    60:1   S   0   0  0 .text+0x00000000000002fc <dummy_xmit+0x8>`.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut current = "";
    let mut rows: Vec<(String, bool, u64)> = Vec::new();
    for l in text.lines() {
        if let Some(name) = l.strip_suffix(')').and_then(|l| l.split(" (mtime:").next()) {
            current = name.trim().rsplit('/').next().unwrap_or("");
            continue;
        }
        let words: Vec<&str> = l.split_whitespace().collect();
        let Some(line) = words.first().and_then(|w| w.split(':').next()) else {
            continue;
        };
        let Some((sec, off)) = (words.iter()).find_map(|w| w.split_once('+')) else {
            continue;
        };
        let off = u64::from_str_radix(off.trim_start_matches("0x"), 16).unwrap_or(u64::MAX);
        if sec == section && off >= entry && off < entry + size.max(1) {
            let stmt = words.get(1).is_some_and(|w| w.starts_with('S'));
            rows.push((format!("{current}:{line}"), stmt, off));
        }
    }
    let at: Vec<&(String, bool, u64)> = rows.iter().filter(|r| r.2 == entry).collect();
    let first = at.iter().find(|r| r.1).or(at.first()).copied();
    first
        .or_else(|| rows.iter().find(|r| r.2 > entry))
        .map(|r| r.0.clone())
}

/// [`BETWEEN`]'s address, from the kernel's -dbg vmlinux (its symbol table).
fn between(arch: ModArch) -> u64 {
    let vmlinux = cached(match arch {
        ModArch::Arm64 => "kernel-dbg/vmlinux",
        ModArch::Amd64 => "kernel-amd64-dbg/vmlinux",
    });
    let data = std::fs::read(&vmlinux).expect("read the vmlinux");
    let file = object::File::parse(&*data).expect("parse the vmlinux");
    file.symbols()
        .find(|s| s.name() == Ok(BETWEEN))
        .map(|s| s.address())
        .unwrap_or_else(|| panic!("{} has no {BETWEEN}", vmlinux.display()))
}

/// A module's functions (`FUNC` symbols in its code sections, the `init_module` and
/// `cleanup_module` aliases left out) at the addresses the kernel placed their sections.
fn placed_functions(
    arch: ModArch,
    module: &str,
    sections: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    let path = debian_module(arch, module);
    let data = std::fs::read(&path).expect("read the .ko");
    let file = object::File::parse(&*data).expect("parse the .ko");
    let mut out = BTreeMap::new();
    for sym in file.symbols() {
        let name = sym.name().unwrap_or("");
        if sym.kind() != SymbolKind::Text
            || name.is_empty()
            || ["init_module", "cleanup_module"].contains(&name)
        {
            continue;
        }
        let Some(index) = sym.section_index() else {
            continue;
        };
        let section = file.section_by_index(index).expect("its section");
        let section = section.name().expect("section name");
        let base = sections
            .get(section)
            .unwrap_or_else(|| panic!("{module}: the kernel placed no {section}"));
        out.insert(name.to_string(), base + sym.address());
    }
    assert!(!out.is_empty(), "{module}.ko has no functions");
    out
}

/// Every execlog line's address, in the order they ran.
fn execlog_sequence(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log).expect("read the execlog log");
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ", ");
            let (_vcpu, pc) = (f.next()?.trim().parse::<u32>().ok()?, f.next()?);
            u64::from_str_radix(pc.strip_prefix("0x")?, 16).ok()
        })
        .collect()
}

#[test]
fn arm64_modules_named_and_counted_as_execlog_counts() {
    named_and_counted(ModArch::Arm64);
}

#[test]
fn amd64_modules_named_and_counted_as_execlog_counts() {
    named_and_counted(ModArch::Amd64);
}

fn named_and_counted(arch: ModArch) {
    let argv = modules_boot_args(arch, &qemu(arch)).expect("the module guest builds");

    // Where the kernel places the modules: a plain boot.
    let (code, plain) = run_qemu_argv(&argv, INITRAMFS_TIMEOUT).expect("run QEMU");
    assert!(
        code == Some(0) && plain.contains("MOD done"),
        "the plain boot failed ({code:?}):\n{plain}"
    );
    for m in MODULES {
        assert!(
            plain.contains(&format!("MOD loaded {m} 0"))
                && plain.contains(&format!("MOD unloaded {m} 0")),
            "{m} not loaded and unloaded:\n{plain}"
        );
    }
    let placed = placed_sections(&plain);
    assert_eq!(
        placed["dummy"][".text"], placed["ifb"][".text"],
        "ifb.ko is not placed where dummy.ko was: the test needs a reused range"
    );
    let functions: BTreeMap<&str, BTreeMap<String, u64>> = MODULES
        .iter()
        .map(|&m| (m, placed_functions(arch, m, &placed[m])))
        .collect();
    let between = between(arch);

    // The recorded boot, execlog beside it: the stock image only.
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir: PathBuf = tmp.path().join("trace.data");
    let log = tmp.path().join("execlog.log");
    let mut plugin = execlog_plugin().to_string_lossy().into_owned();
    let mut addresses: Vec<u64> = functions
        .values()
        .flat_map(|f| f.values().copied())
        .collect();
    addresses.push(between);
    addresses.sort_unstable();
    addresses.dedup();
    for a in &addresses {
        plugin.push_str(&format!(",afilter={a:#x}"));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
        .arg("record")
        .arg("-o")
        .arg(&dir)
        // From the first module load on: the boot before it is no module's (331 MB of
        // trace on amd64; its export took Perfetto's decoder five minutes).
        .args(["--start-at", "__do_sys_finit_module"])
        // ifb's debug file: its functions' source lines (dummy's come after the run).
        .arg("--symbols")
        .arg(module_debug(arch, "ifb"))
        .arg("--")
        .args(&argv)
        .args(["-plugin", &plugin, "-d", "plugin", "-D"])
        .arg(&log)
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    let console = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && console.contains("MOD done"),
        "record failed ({}):\n{stderr}\nconsole:\n{console}",
        out.status
    );
    assert_eq!(
        placed_sections(&console),
        placed,
        "the recorded boot placed the modules elsewhere than the plain one: execlog watched \
         the wrong addresses"
    );
    assert!(
        stderr.contains("kernel modules: 2 loads (2 unloads)")
            && stderr.contains("; source lines of ifb\n"),
        "record did not say what it named:\n{stderr}"
    );
    // dummy's debug file given after the run, to `symbols`.
    let added = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
        .arg("symbols")
        .arg("-d")
        .arg(&dir)
        .arg(module_debug(arch, "dummy"))
        .output()
        .expect("run qemu-uftrace symbols");
    let said = String::from_utf8_lossy(&added.stderr);
    assert!(
        added.status.success() && said.contains("kernel modules: source lines of dummy\n"),
        "symbols did not add dummy's lines ({}):\n{said}",
        added.status
    );

    // execlog's counts, each module's from its own life.
    let sequence = execlog_sequence(&log);
    let split = sequence
        .iter()
        .position(|&a| a == between)
        .expect("execlog saw dummy.ko freed");
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for (module, lines) in [
        ("dummy", &sequence[..split]),
        ("ifb", &sequence[split + 1..]),
    ] {
        for (name, addr) in &functions[module] {
            let n = lines.iter().filter(|&&a| a == *addr).count() as u64;
            if n > 0 {
                assert!(
                    expected.insert(name.clone(), n).is_none(),
                    "{name} is in both modules"
                );
            }
        }
    }
    for must in [
        "dummy_init_module",
        "dummy_cleanup_module",
        "ifb_init_module",
        "ifb_cleanup_module",
        "dummy_setup",
        "ifb_setup",
    ] {
        assert!(
            expected.contains_key(must),
            "execlog never saw {must} run: {expected:?}"
        );
    }

    // The trace's counts of every module function, by name.
    let calls = report_calls(&dir, &[]).expect("uftrace report");
    // Nothing in the modules' ranges left unnamed: report lists every function, an unnamed
    // one by its address (cut to 48 bits by uftrace, whole by `unnamed`).
    let range = format!("{:x}", (placed["dummy"][".text"] & 0xffff_ffff_ffff) >> 16);
    let bare: Vec<&String> = calls.keys().filter(|n| n.contains(&range)).collect();
    assert!(bare.is_empty(), "module code left unnamed: {bare:?}");
    let all_names: Vec<&String> = functions.values().flat_map(|f| f.keys()).collect();
    let traced: BTreeMap<String, u64> = calls
        .into_iter()
        .filter(|(name, _)| all_names.contains(&name))
        .collect();
    assert_eq!(
        traced, expected,
        "module functions: the trace's calls against execlog's"
    );
    exported_by_load(arch, &dir, &functions, &expected);
    source_lines(arch, &dir, &functions, &expected);
}

/// Every module function the guest ran has its source line in uftrace's replay
/// (`--srcline`; 0.17 and 0.19 read a module's `.dbg`, 0.13 does not), one of those
/// `eu-readelf` decodes for its entry ([`decoded_line`]).
fn source_lines(
    arch: ModArch,
    dir: &Path,
    functions: &BTreeMap<&str, BTreeMap<String, u64>>,
    expected: &BTreeMap<String, u64>,
) {
    let d = dir.to_string_lossy();
    for u in uftrace_versions().expect("uftrace versions") {
        if u.version == "0.13" {
            continue;
        }
        let text = uftrace_at(&u.program, &["replay", "--no-pager", "--srcline", "-d", &d])
            .expect("uftrace replay --srcline");
        // `dummy_setup() { /* drivers/net/dummy.c:115 */` or `dummy_setup(); /* … */`.
        let mut shown: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for l in text.lines() {
            let Some((_, body)) = replay_body(l) else {
                continue;
            };
            let Some((name, rest)) = body.split_once("()") else {
                continue;
            };
            if let Some(at) = rest.split("/* ").nth(1).and_then(|r| r.strip_suffix(" */")) {
                shown.entry(name).or_default().insert(at);
            }
        }
        for (module, funcs) in functions {
            for name in funcs.keys().filter(|n| expected.contains_key(*n)) {
                let oracle = decoded_line(arch, module, name).expect("eu-readelf's line");
                // By the file's base name: uftrace shows it as the unit names it.
                let lines: Option<BTreeSet<&str>> = (shown.get(name.as_str())).map(|l| {
                    l.iter()
                        .map(|l| l.rsplit('/').next().unwrap_or(l))
                        .collect()
                });
                assert_eq!(
                    lines,
                    Some(BTreeSet::from([oracle.as_str()])),
                    "uftrace {}: {name}'s source lines against eu-readelf's",
                    u.version
                );
            }
        }
    }
}

/// The Perfetto export of the same trace (decoded with Perfetto's own schema by
/// perfetto_check.py) names the reused range as uftrace does, by the module loaded there at
/// each call: every module function's slices as many as execlog's runs, every `dummy.ko`
/// one begun before every `ifb.ko` one, each with its source line (`--srcline`).
fn exported_by_load(
    arch: ModArch,
    dir: &Path,
    functions: &BTreeMap<&str, BTreeMap<String, u64>>,
    expected: &BTreeMap<String, u64>,
) {
    let trace = dir.with_extension("pftrace");
    let out = common::export(dir, &["--srcline", "-o", &trace.to_string_lossy()]);
    assert!(
        out.status.success(),
        "export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = common::perfetto_decoded(&trace);
    assert_eq!(t["problems"], serde_json::json!([]), "{}", t["problems"]);
    // Per module function: slices, and its first and last begin time, over every task.
    let mut slices: BTreeMap<String, u64> = BTreeMap::new();
    let mut times: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for th in t["threads"].as_array().expect("threads") {
        for (module, names) in functions {
            for name in names.keys() {
                if let Some(n) = th["slices"][name].as_u64() {
                    *slices.entry(name.clone()).or_default() += n;
                    // Its source line from the module's debug file, as replay has it.
                    let line = th["srclines"][name].as_str().map(|l| l.rsplit('/').next());
                    let oracle = decoded_line(arch, module, name);
                    assert_eq!(line.flatten(), oracle.as_deref(), "{name}'s exported line");
                }
                if let Some([first, last]) = th["begins"][name]
                    .as_array()
                    .map(|b| b.iter().filter_map(|v| v.as_u64()).collect::<Vec<_>>())
                    .as_deref()
                {
                    let span = times.entry(module).or_insert((u64::MAX, 0));
                    *span = (span.0.min(*first), span.1.max(*last));
                }
            }
        }
    }
    assert_eq!(
        &slices, expected,
        "module functions: the export's slices against execlog's runs"
    );
    let (dummy, ifb) = (times["dummy"], times["ifb"]);
    assert!(
        dummy.1 < ifb.0,
        "the export names a dummy.ko function after ifb.ko's first (dummy's begins {dummy:?}, \
         ifb's {ifb:?})"
    );
}

/// Issue 37: modules loaded while tracing was off are named from the switch on. The
/// recording starts off and goes on at `dummy.ko`'s unload (`delete_module`): `dummy.ko` was
/// loaded while nothing was watched, and is read from the kernel's `modules` list at the
/// switch on (amd64's kallsyms has the list head; arm64's has no data symbols: its -dbg
/// vmlinux gives it). Its exit functions and `ifb.ko`'s whole life (loaded while on, at the
/// range `dummy.ko` left) are named, nothing in that range is a bare address. Before,
/// `dummy.ko`'s functions were addresses.
///
/// The debug files (issue 34) on amd64 as a directory given to `--symbols`: ifb's own, and
/// in dummy's place another module's, which record refuses in one line. On arm64 as a
/// guest root's debug tree (`--sysroot`), two releases: the first has another module's
/// file in dummy's place, the second dummy's own, which record takes without a word.
#[test]
fn amd64_modules_loaded_while_tracing_was_off_are_named_at_the_switch_on() {
    loaded_while_off(ModArch::Amd64, None, "__x64_sys_delete_module", false);
}

#[test]
fn arm64_modules_loaded_while_tracing_was_off_are_named_at_the_switch_on() {
    let vmlinux = cached("kernel-dbg/vmlinux");
    loaded_while_off(
        ModArch::Arm64,
        Some(&vmlinux),
        "__arm64_sys_delete_module",
        true,
    );
}

fn loaded_while_off(arch: ModArch, vmlinux: Option<&Path>, syscall: &str, sysroot: bool) {
    let argv = modules_boot_args(arch, &qemu(arch)).expect("the module guest builds");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir: PathBuf = tmp.path().join("trace.data");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"));
    cmd.arg("record").arg("-o").arg(&dir);
    if let Some(v) = vmlinux {
        cmd.arg("--symbols").arg(v);
    }
    // Debug files: ifb's own, and in dummy's place another module's (ifb's again), which
    // record must not take for dummy's; in a root's tree, dummy's own in a later release.
    let root = tmp.path().join("root");
    let (debug, files): (PathBuf, &[(&str, &str)]) = if sysroot {
        (
            root.join("usr/lib/debug/lib/modules"),
            &[
                ("ifb", "0.1-other/kernel/drivers/net/dummy.ko"),
                ("dummy", "6.1-guest/kernel/drivers/net/dummy.ko"),
                ("ifb", "6.1-guest/kernel/drivers/net/ifb.ko"),
            ],
        )
    } else {
        (
            tmp.path().join("debug"),
            &[("ifb", "kernel/drivers/net/ifb.ko"), ("ifb", "dummy.ko")],
        )
    };
    for (from, to) in files {
        let to = debug.join(to);
        std::fs::create_dir_all(to.parent().expect("a directory")).expect("mkdir");
        std::fs::copy(module_debug(arch, from), to).expect("copy a debug file");
    }
    if sysroot {
        cmd.arg("--sysroot").arg(&root);
    } else {
        cmd.arg("--symbols").arg(&debug);
    }
    let out = cmd
        .args(["--trace=off", "--trace-on-at", syscall])
        .arg("--")
        .args(&argv)
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    let console = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && console.contains("MOD done") && !stderr.contains("INCOMPLETE"),
        "record failed ({}):\n{stderr}\nconsole:\n{console}",
        out.status
    );
    // dummy.ko told by the walk, ifb.ko by its load; both unloads while on. ifb's debug
    // file gives its lines; the other one in dummy's name is refused, in one line, where
    // it is the only one.
    let lines_of = if sysroot { "dummy, ifb" } else { "ifb" };
    assert!(
        stderr.contains("kernel modules: 2 loads (2 unloads)")
            && stderr.contains(&format!("; source lines of {lines_of}\n")),
        "record did not say what it named:\n{stderr}"
    );
    let refused: Vec<&str> = (stderr.lines())
        .filter(|l| l.contains("is not the debug file of the module dummy"))
        .collect();
    if sysroot {
        assert_eq!(refused, [""; 0], "{stderr}");
    } else {
        assert_eq!(refused.len(), 1, "{stderr}");
        assert!(
            refused[0].contains(&format!("{}", debug.join("dummy.ko").display())),
            "{stderr}"
        );
        // Given again after the run, to `symbols`: refused the same way, and the command
        // fails, having added nothing.
        let again = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
            .args(["symbols", "-d"])
            .arg(&dir)
            .arg(debug.join("dummy.ko"))
            .output()
            .expect("run qemu-uftrace symbols");
        let said = String::from_utf8_lossy(&again.stderr);
        assert_eq!(again.status.code(), Some(1), "{said}");
        assert!(
            said.contains("is not the debug file of the module dummy")
                && said.contains("no kernel module's source lines were added"),
            "{said}"
        );
        assert!(!dir.join("dummy.ko.dbg").exists());
    }
    let placed = placed_sections(&console);
    let calls = report_calls(&dir, &[]).expect("uftrace report");
    let range = format!("{:x}", (placed["dummy"][".text"] & 0xffff_ffff_ffff) >> 16);
    let bare: Vec<&String> = calls.keys().filter(|n| n.contains(&range)).collect();
    assert!(bare.is_empty(), "module code left unnamed: {bare:?}");
    for (name, n) in [
        ("dummy_cleanup_module", Some(&1)),
        ("ifb_init_module", Some(&1)),
        ("ifb_cleanup_module", Some(&1)),
        // Its load and init ran while off.
        ("dummy_init_module", None),
    ] {
        assert_eq!(calls.get(name), n, "{name}: {calls:?}");
    }
}
