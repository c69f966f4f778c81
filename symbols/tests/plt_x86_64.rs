//! x86_64 PLT entries, built with the host gcc: every entry objdump labels `<malloc@plt>`
//! (in `.plt`, or `.plt.sec` with IBT, and `.plt.got`) is a function named `malloc` at
//! that address, and nothing else is a function inside those sections.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::run;
use qemu_uftrace_symbols::{load, Arch, LoadOptions};

const SOURCE: &str = "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
    int (*volatile out)(const char *) = puts;\n\
    int main(int argc, char **argv) {\n\
      char *p = malloc(32 + argc);\n\
      strcpy(p, argv[0]);\n\
      printf(\"%zu\\n\", strlen(p));\n\
      out(p);\n\
      puts(p);\n\
      free(p);\n\
      return 0;\n\
    }\n";

/// Address ranges of the PLT sections, per the host `readelf -SW`.
fn plt_sections(path: &Path) -> Vec<(String, u64, u64)> {
    let out = run(Command::new("readelf").arg("-SW").arg(path));
    out.lines()
        .filter_map(|l| {
            let (_, rest) = l.trim_start().strip_prefix('[')?.split_once(']')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            // Name Type Address Off Size ...
            if f.len() < 5 || !f[0].starts_with(".plt") {
                return None;
            }
            let addr = u64::from_str_radix(f[2], 16).ok()?;
            let size = u64::from_str_radix(f[4], 16).ok()?;
            Some((f[0].to_string(), addr, addr + size))
        })
        .collect()
}

/// objdump's `<name@plt>` labels, by address.
fn objdump_plt(path: &Path) -> BTreeMap<u64, String> {
    let out = run(Command::new("objdump").arg("-d").arg(path));
    out.lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(" <")?;
            let name = rest.strip_suffix("@plt>:")?;
            Some((u64::from_str_radix(addr.trim(), 16).ok()?, name.to_string()))
        })
        .collect()
}

#[test]
fn x86_64_plt_entries_are_named_after_their_targets() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("plt.c");
    std::fs::write(&src, SOURCE).unwrap();
    let builds: [(&str, &[&str]); 5] = [
        ("pie", &["-fpie", "-pie"]),
        ("exe", &["-fno-pie", "-no-pie"]),
        ("now", &["-fpie", "-pie", "-Wl,-z,now"]),
        (
            "ibt",
            &["-fpie", "-pie", "-fcf-protection", "-Wl,-z,ibtplt"],
        ),
        (
            "ibt-exe",
            &["-fno-pie", "-no-pie", "-fcf-protection", "-Wl,-z,ibtplt"],
        ),
    ];
    for (name, flags) in builds {
        let elf = dir.path().join(name);
        run(Command::new("gcc")
            .args(["-O1", "-g"])
            .args(flags)
            .arg("-o")
            .arg(&elf)
            .arg(&src));
        let sections = plt_sections(&elf);
        if name.starts_with("ibt") {
            assert!(sections.iter().any(|s| s.0 == ".plt.sec"), "{sections:?}");
        }
        let image = load(&elf, &LoadOptions::default()).unwrap();
        assert_eq!(image.arch, Some(Arch::X86_64));
        let ours: BTreeMap<u64, String> = image
            .functions
            .iter()
            .filter(|f| sections.iter().any(|s| f.addr >= s.1 && f.addr < s.2))
            .map(|f| (f.addr, f.name.clone()))
            .collect();
        let theirs = objdump_plt(&elf);
        assert_eq!(ours, theirs, "{name}: {sections:x?}");
        let names: Vec<&str> = theirs.values().map(String::as_str).collect();
        for f in ["malloc", "printf", "puts", "free"] {
            assert!(names.contains(&f), "{name}: {names:?}");
        }
        for f in image
            .functions
            .iter()
            .filter(|f| theirs.contains_key(&f.addr))
        {
            let sec = sections
                .iter()
                .find(|s| f.addr >= s.1 && f.addr < s.2)
                .unwrap();
            let size = if sec.0 == ".plt.got" && !name.starts_with("ibt") {
                8
            } else {
                16
            };
            assert_eq!(f.size, size, "{name}: {f:?} in {}", sec.0);
        }
    }
}
