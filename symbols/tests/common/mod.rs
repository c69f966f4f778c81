//! Helpers shared by the integration tests: build test ELFs with the real cross compiler
//! and ask the real binutils about them. A missing tool fails the test: run
//! scripts/install-deps.sh.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const CC: &str = "aarch64-linux-gnu-gcc";
pub const NM: &str = "aarch64-linux-gnu-nm";
pub const ADDR2LINE: &str = "aarch64-linux-gnu-addr2line";
pub const STRIP: &str = "aarch64-linux-gnu-strip";
pub const OBJDUMP: &str = "aarch64-linux-gnu-objdump";
pub const READELF: &str = "aarch64-linux-gnu-readelf";

pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Runs a tool and returns its stdout; panics (test failure) when it is missing or fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/install-deps.sh)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tool output is UTF-8")
}

/// `path`'s ELF entry point, as readelf's header shows it (0 where it has none).
pub fn readelf_entry(path: &Path) -> u64 {
    let header = run(Command::new("readelf").arg("-hW").arg(path));
    header
        .lines()
        .find_map(|l| l.trim().strip_prefix("Entry point address:"))
        .and_then(|a| u64::from_str_radix(a.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("no entry point in {header}"))
}

/// Compiles `sources` (under tests/data) into `dir/out` with `flags`.
pub fn build(dir: &Path, out: &str, sources: &[&str], flags: &[&str]) -> PathBuf {
    let path = dir.join(out);
    let mut cmd = Command::new(CC);
    cmd.args(flags).arg("-o").arg(&path);
    for s in sources {
        cmd.arg(data(s));
    }
    run(&mut cmd);
    path
}

/// The test programs: a dynamic executable, a PIE and a freestanding image at 0x40080000,
/// each at `opt`.
pub fn build_all(dir: &Path, opt: &str) -> Vec<PathBuf> {
    vec![
        build(
            dir,
            "exe",
            &["one.c", "two.c"],
            &["-g", opt, "-no-pie", "-fno-pie"],
        ),
        build(
            dir,
            "pie",
            &["one.c", "two.c"],
            &["-g", opt, "-fPIE", "-pie"],
        ),
        build(
            dir,
            "bare",
            &["bare.c"],
            &[
                "-g",
                opt,
                "-ffreestanding",
                "-nostdlib",
                "-static",
                "-Wl,-Ttext=0x40080000",
            ],
        ),
    ]
}

/// The install script's cache, and a file in it (failing loudly when missing).
#[allow(unused_imports)] // not every test file looks in the cache
pub use qemu_uftrace_tests::{cache_dir as cache, cached};

/// One address's symbols as `nm --defined-only -S` lists them.
#[derive(Debug, Default, Clone)]
pub struct NmEntry {
    pub names: Vec<String>,
    pub size: u64,
    pub global: bool,
}

fn is_mapping(name: &str) -> bool {
    let name = name.strip_prefix("__kvm_nvhe_").unwrap_or(name);
    let b = name.as_bytes();
    b.len() >= 2 && b[0] == b'$' && matches!(b[1], b'x' | b'd' | b'a' | b't')
}

/// Names of the executable (`X` flag) sections, per `readelf -SW`.
pub fn executable_sections(path: &Path) -> Vec<String> {
    let out = run(Command::new(READELF).arg("-SW").arg(path));
    out.lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix('[')?;
            let (_, rest) = l.split_once(']')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            // Name Type Address Off Size ES Flg Lk Inf Al
            (f.len() >= 10 && f[6].contains('X')).then(|| f[0].to_string())
        })
        .collect()
}

/// Functions as `nm --defined-only -S` (sysv format, which shows symbol type and section)
/// lists them: FUNC/IFUNC symbols, and NOTYPE ones in executable sections; mapping symbols
/// left out; aliases grouped by address.
pub fn nm_functions(path: &Path) -> BTreeMap<u64, NmEntry> {
    let exec = executable_sections(path);
    let out = run(Command::new(NM)
        .args(["--defined-only", "-S", "-f", "sysv"])
        .arg(path));
    let mut map: BTreeMap<u64, NmEntry> = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        let [name, value, class, kind, size, _line, section] = f.as_slice() else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(value, 16) else {
            continue;
        };
        let function = match *kind {
            "FUNC" | "IFUNC" => true,
            "NOTYPE" => exec.iter().any(|s| s == section),
            _ => false,
        };
        if !function || is_mapping(name) {
            continue;
        }
        let e = map.entry(addr).or_default();
        e.names.push(name.to_string());
        e.size = e.size.max(if size.is_empty() {
            0
        } else {
            u64::from_str_radix(size, 16).unwrap()
        });
        e.global |= class.chars().all(|c| c.is_ascii_uppercase());
    }
    // PLT entries, which we name after their targets: objdump's `<malloc@plt>` labels.
    if exec.iter().any(|s| s == ".plt") {
        let out = run(Command::new(OBJDUMP).args(["-d", "-j", ".plt"]).arg(path));
        for line in out.lines() {
            let Some((addr, rest)) = line.split_once(" <") else {
                continue;
            };
            let (Ok(addr), Some(name)) = (
                u64::from_str_radix(addr.trim(), 16),
                rest.strip_suffix("@plt>:"),
            ) else {
                continue;
            };
            let e = map.entry(addr).or_default();
            e.names.push(name.to_string());
            e.size = 16;
            e.global = true;
        }
    }
    map
}

/// A cached raw kernel `Image`, detected as one and read (kallsyms recovered) for aarch64.
pub fn load_kernel_image(rel: &str) -> qemu_uftrace_symbols::Image {
    load_kernel_image_as(rel, qemu_uftrace_symbols::Arch::Aarch64)
}

/// [`load_kernel_image`] of a kernel for `arch` (an x86 bzImage).
pub fn load_kernel_image_as(
    rel: &str,
    arch: qemu_uftrace_symbols::Arch,
) -> qemu_uftrace_symbols::Image {
    use qemu_uftrace_symbols::{detect_kind, load, Kind, LoadOptions};
    let path = cached(rel);
    assert_eq!(detect_kind(&path).unwrap(), Kind::KernelImage);
    let opts = LoadOptions {
        expected_arch: Some(arch),
        ..Default::default()
    };
    let image = load(&path, &opts).unwrap();
    assert_eq!(image.arch, Some(arch));
    image
}

/// Asserts that two tables cover the same addresses, showing up to ten of each side's extras.
pub fn assert_same_addresses<A: std::fmt::Debug, B: std::fmt::Debug>(
    ours: &BTreeMap<u64, A>,
    theirs: &BTreeMap<u64, B>,
    theirs_name: &str,
) {
    let only_theirs: Vec<_> = theirs
        .iter()
        .filter(|(a, _)| !ours.contains_key(a))
        .take(10)
        .collect();
    let only_ours: Vec<_> = ours
        .iter()
        .filter(|(a, _)| !theirs.contains_key(a))
        .take(10)
        .collect();
    assert!(
        only_theirs.is_empty() && only_ours.is_empty(),
        "only {theirs_name} has {only_theirs:x?}\nonly we have {only_ours:x?}"
    );
}

/// Compares an image's functions with `nm`'s: same addresses (shifted by `offset`), same
/// sizes, our name one of nm's names there, global when any alias is.
pub fn assert_matches_nm(
    image: &qemu_uftrace_symbols::Image,
    nm: &BTreeMap<u64, NmEntry>,
    offset: u64,
) {
    let ours: BTreeMap<u64, &qemu_uftrace_symbols::Function> = image
        .functions
        .iter()
        .map(|f| (f.addr.wrapping_sub(offset), f))
        .collect();
    assert_eq!(ours.len(), image.functions.len(), "duplicate addresses");
    assert_same_addresses(&ours, nm, "nm");
    for (addr, f) in ours {
        let e = &nm[&addr];
        assert!(
            e.names.contains(&f.name),
            "{addr:#x}: {} not among {:?}",
            f.name,
            e.names
        );
        assert_eq!(f.size, e.size, "{addr:#x} {}", f.name);
        assert_eq!(f.global, e.global, "{addr:#x} {}", f.name);
    }
    assert!(
        image.functions.windows(2).all(|w| w[0].addr < w[1].addr),
        "not sorted"
    );
}

/// `addr2line` for each address: (file, line) or None for `??`/`?`.
pub fn addr2line(path: &Path, addrs: &[u64]) -> Vec<Option<(String, u32)>> {
    let mut cmd = Command::new(ADDR2LINE);
    cmd.arg("-e").arg(path);
    for a in addrs {
        cmd.arg(format!("{a:#x}"));
    }
    run(&mut cmd)
        .lines()
        .map(|l| {
            let l = l.split(" (discriminator").next().unwrap();
            let (file, line) = l.rsplit_once(':')?;
            let line: u32 = line.trim().parse().ok()?;
            (file != "??" && line != 0).then(|| (file.to_string(), line))
        })
        .collect()
}

/// The row `symbols` promises for each address that has rows of its own, from
/// `objdump --dwarf=decodedline`: the first `is_stmt` row there, else the first row.
/// Values are (file name as objdump shows it, line).
pub fn first_rows(path: &Path) -> BTreeMap<u64, (String, u32)> {
    let out = run(Command::new(OBJDUMP).arg("--dwarf=decodedline").arg(path));
    let mut rows: BTreeMap<u64, (String, u32, bool)> = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !f[2].starts_with("0x") {
            continue;
        }
        let (Ok(line_no), Ok(addr)) = (f[1].parse::<u32>(), u64::from_str_radix(&f[2][2..], 16))
        else {
            continue;
        };
        let is_stmt = f.len() >= 4 && f[f.len() - 1] == "x";
        match rows.get(&addr) {
            Some((_, _, true)) => {}
            Some((_, _, false)) if !is_stmt => {}
            _ => {
                rows.insert(addr, (f[0].to_string(), line_no, is_stmt));
            }
        }
    }
    rows.into_iter().map(|(a, (f, l, _))| (a, (f, l))).collect()
}

pub fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}
