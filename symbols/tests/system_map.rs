//! System.map and /proc/kallsyms dumps.

use std::path::PathBuf;

use qemu_uftrace_symbols::{detect_kind, load, load_kallsyms, Kind, LoadOptions, SymbolError};

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const SYSTEM_MAP: &str = "\
ffff800008000000 T _text
ffff800008010000 T _stext
ffff800008010000 t __irqentry_text_start
ffff800008010090 t gic_handle_irq
ffff800008010090 t $x
ffff800008010100 d $d
ffff800008010200 W arch_weak
ffff800008010300 w weak_local
ffff800008010400 r some_rodata
ffff800008010500 T __efistub_memcpy
ffff800008be0000 D _etext
ffff800009390000 T init_fn
ffff800009ab0000 B _end
";

#[test]
fn system_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "System.map", SYSTEM_MAP);
    assert_eq!(detect_kind(&path).unwrap(), Kind::SystemMap);
    let image = load(&path, &LoadOptions::default()).unwrap();
    let f: Vec<_> = image
        .functions
        .iter()
        .map(|f| (f.addr, f.name.as_str(), f.global, f.size))
        .collect();
    assert_eq!(
        f,
        [
            (0xffff800008000000, "_text", true, 0),
            // Global wins over the local alias.
            (0xffff800008010000, "_stext", true, 0),
            (0xffff800008010090, "gic_handle_irq", false, 0),
            (0xffff800008010200, "arch_weak", true, 0),
            (0xffff800008010300, "weak_local", false, 0),
            (0xffff800008010500, "__efistub_memcpy", true, 0),
            (0xffff800009390000, "init_fn", true, 0),
        ]
    );
    assert_eq!(image.start, 0xffff800008000000);
    // Init text lies past _etext: a page past the last symbol.
    assert_eq!(image.end, 0xffff800009391000);
    assert!(image.modules.is_empty());
    assert_eq!(image.arch, None);

    // Without init text past it, _etext ends the image.
    let short: String = SYSTEM_MAP
        .lines()
        .filter(|l| !l.contains("init_fn"))
        .map(|l| format!("{l}\n"))
        .collect();
    let image = load(&write(&dir, "short.map", &short), &LoadOptions::default()).unwrap();
    assert_eq!(image.end, 0xffff800008be0000);

    // KASLR: the offset moves everything.
    let off = 0x1_0000_0000;
    let moved = load(
        &path,
        &LoadOptions {
            offset: off,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(moved.start, 0xffff800008000000 + off);
    assert_eq!(moved.functions[2].addr, 0xffff800008010090 + off);
}

#[test]
fn kallsyms_with_modules() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\
ffffffff81000000 T _stext
ffffffff81000100 t do_one_initcall
ffffffff81001000 T _etext
ffffffffc0002000 t ext4_fill_super\t[ext4]
ffffffffc0001000 T ext4_mount\t[ext4]
ffffffffc0001000 t ext4_mount_alias\t[ext4]
ffffffffc0100000 t vfat_lookup\t[vfat]
ffffffffc0100010 d vfat_data\t[vfat]
";
    let path = write(&dir, "kallsyms", text);
    assert_eq!(detect_kind(&path).unwrap(), Kind::Kallsyms);
    let image = load_kallsyms(&path, &LoadOptions::default()).unwrap();
    // _etext is a text symbol too, as the kernel prints it on x86.
    assert_eq!(image.functions.len(), 3);
    assert_eq!(
        (image.start, image.end),
        (0xffffffff81000000, 0xffffffff81001000)
    );
    let mods: Vec<_> = image
        .modules
        .iter()
        .map(|m| m.path.to_str().unwrap())
        .collect();
    assert_eq!(mods, ["ext4", "vfat"]);
    let ext4 = &image.modules[0];
    let names: Vec<_> = ext4.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["ext4_mount", "ext4_fill_super"]);
    assert_eq!(ext4.start, 0xffffffffc0001000);
    assert_eq!(ext4.end, 0xffffffffc0003000);
    assert_eq!(image.modules[1].functions.len(), 1);
}

#[test]
fn unusable_maps() {
    let dir = tempfile::tempdir().unwrap();
    // Debian's /boot/System.map placeholder.
    let placeholder = write(
        &dir,
        "placeholder",
        "ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n",
    );
    match load(&placeholder, &LoadOptions::default()) {
        Err(e @ SymbolError::Stripped { .. }) => {
            assert!(e.to_string().contains("-dbg package"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // kallsyms read without privileges: every address is 0.
    let hidden = write(
        &dir,
        "hidden",
        "0000000000000000 T _stext\n0000000000000000 t foo\n",
    );
    assert!(matches!(
        load(&hidden, &LoadOptions::default()),
        Err(SymbolError::Corrupt { .. })
    ));
    // Malformed lines are skipped, not fatal.
    let messy = write(
        &dir,
        "messy",
        "ffff0000 T good\nzzzz T bad\n\n12 T\nffff0010 t fine extra\n",
    );
    let image = load(&messy, &LoadOptions::default()).unwrap();
    assert_eq!(image.functions.len(), 2);
}
