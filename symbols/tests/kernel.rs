//! Kernel scale: Debian's arm64 cloud kernel (scripts/install-deps.sh caches the image and
//! its -dbg package's vmlinux and System.map). Missing files fail these tests.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Instant;

use common::*;
use qemu_uftrace_symbols::{load, Arch, LoadOptions};

/// System.map's text symbols, as kallsyms keeps them: no `__efistub_` aliases (the EFI
/// stub's private names), no mapping symbols.
fn system_map_text() -> BTreeMap<u64, BTreeSet<String>> {
    let text = std::fs::read_to_string(cached("kernel-dbg/System.map")).unwrap();
    let mut map: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [addr, kind, name] = f[..] else { continue };
        if !matches!(kind, "T" | "t" | "W" | "w")
            || name.starts_with("__efistub_")
            || name.starts_with('$')
        {
            continue;
        }
        map.entry(u64::from_str_radix(addr, 16).unwrap())
            .or_default()
            .insert(name.to_string());
    }
    map
}

#[test]
fn vmlinux_functions_match_nm_and_have_lines() {
    let vmlinux = cached("kernel-dbg/vmlinux");
    let t = Instant::now();
    let image = load(
        &vmlinux,
        &LoadOptions {
            source_lines: true,
            expected_arch: Some(Arch::Aarch64),
            ..Default::default()
        },
    )
    .unwrap();
    eprintln!(
        "vmlinux with lines: {:?} ({} functions)",
        t.elapsed(),
        image.functions.len()
    );
    assert!(image.functions.len() > 40_000);
    assert_matches_nm(&image, &nm_functions(&vmlinux), 0);

    let without: Vec<_> = image
        .functions
        .iter()
        .filter(|f| f.line.is_none())
        .collect();
    let pct = 100.0 * without.len() as f64 / image.functions.len() as f64;
    eprintln!("without line: {} ({pct:.2}%)", without.len());
    assert!(
        pct <= 1.0,
        "{pct:.2}% without line: {:?}",
        &without[..without.len().min(20)]
    );
    // Files relative to the build tree, as uftrace shows them.
    let f = image
        .functions
        .iter()
        .find(|f| f.name == "schedule")
        .expect("schedule");
    assert_eq!(f.line.as_ref().unwrap().file, "kernel/sched/core.c");
    assert!(
        image.start <= image.functions[0].addr && image.functions.last().unwrap().addr < image.end
    );
}

/// The ftrace NOPs at each kernel function's entry have no row: the function's first row
/// counts (addr2line reports the previous function's last line there).
#[test]
fn vmlinux_lines_after_ftrace_nops() {
    let vmlinux = cached("kernel-dbg/vmlinux");
    let image = load(
        &vmlinux,
        &LoadOptions {
            source_lines: true,
            ..Default::default()
        },
    )
    .unwrap();
    let sample: Vec<_> = image
        .functions
        .iter()
        .filter(|f| f.size > 16)
        .step_by(997)
        .collect();
    let addrs: Vec<u64> = sample.iter().map(|f| f.addr + 8).collect();
    let theirs = addr2line(&vmlinux, &addrs);
    let (mut same_file, mut total) = (0, 0);
    for (f, theirs) in sample.iter().zip(theirs) {
        let (Some(ours), Some((file, _))) = (&f.line, theirs) else {
            continue;
        };
        total += 1;
        // Inlined header code may sit at entry + 8; the file mostly agrees.
        same_file += usize::from(file.ends_with(&ours.file));
    }
    assert!(
        total >= 30 && same_file * 10 >= total * 8,
        "{same_file}/{total} agree"
    );
}

#[test]
fn kallsyms_from_raw_image_match_system_map() {
    let vmlinuz = cached("kernel/vmlinuz");
    let image = load_kernel_image("kernel/vmlinuz");
    let map = system_map_text();
    let mut wrong = Vec::new();
    for f in &image.functions {
        if !map
            .get(&f.addr)
            .is_some_and(|names| names.contains(&f.name))
        {
            wrong.push(f);
        }
    }
    assert!(
        wrong.is_empty(),
        "{} not in System.map: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    let found: BTreeSet<u64> = image.functions.iter().map(|f| f.addr).collect();
    let missing = map.keys().filter(|a| !found.contains(a)).count();
    let pct = 100.0 * missing as f64 / map.len() as f64;
    eprintln!(
        "kallsyms: {} functions, System.map {} addresses, {missing} missing ({pct:.2}%)",
        found.len(),
        map.len()
    );
    assert!(pct <= 0.5, "{pct:.2}% of System.map's text symbols missing");

    // The same, gzip-compressed (as some distributions ship vmlinuz).
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("vmlinuz.gz");
    let out = Command::new("gzip")
        .arg("-1c")
        .arg(&vmlinuz)
        .output()
        .expect("gzip");
    std::fs::write(&gz, out.stdout).unwrap();
    let unzipped = load(&gz, &LoadOptions::default()).unwrap();
    assert_eq!(unzipped.functions, image.functions);
}

#[test]
fn system_map_of_the_dbg_package() {
    let image = load(&cached("kernel-dbg/System.map"), &LoadOptions::default()).unwrap();
    let map = system_map_text();
    assert!(image.functions.len() + 300 >= map.len());
    assert_eq!(image.start, 0xffff_8000_0800_0000, "_text");
    assert!(image
        .functions
        .iter()
        .all(|f| f.addr >= image.start && f.addr < image.end));
}

/// `-a`: the kernel's typed functions, each at its DWARF `low_pc` (8 bytes past its symbol,
/// after the ftrace NOPs), every unit of the file read.
#[test]
fn auto_specs_type_the_kernel_s_functions() {
    let vmlinux = cached("kernel-dbg/vmlinux");
    let map = system_map_text();
    let at = |name: &str| {
        let found = map.iter().find(|(_, n)| n.contains(name));
        *found.unwrap_or_else(|| panic!("{name} in System.map")).0
    };
    let specs = qemu_uftrace_symbols::auto_specs(&vmlinux).unwrap();
    let spec = |name: &str| {
        let s = specs.iter().find(|s| s.name == name);
        s.unwrap_or_else(|| panic!("{name} typed ({} specs)", specs.len()))
    };
    let openat = spec("do_sys_openat2");
    assert_eq!(openat.addr, at("do_sys_openat2") + 8);
    assert_eq!(openat.args, ["i32", "s", "p"]);
    assert_eq!(openat.ret.as_deref(), Some("i64"));
    assert_eq!(spec("of_find_property").args, ["p", "s", "p"]);
    assert_eq!(spec("ext4_file_open").args, ["p", "p"]);
    assert!(specs.len() > 30_000, "{} specs", specs.len());
    // Read on several threads, in the file's order all the same (the first description of
    // a function wins).
    assert!(qemu_uftrace_symbols::auto_specs_on(&vmlinux, 1).unwrap() == specs);
    assert!(qemu_uftrace_symbols::auto_specs_on(&vmlinux, 3).unwrap() == specs);
}
