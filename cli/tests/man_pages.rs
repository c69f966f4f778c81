//! The checked-in man pages must match the clap definitions. Regenerate them with
//! `UPDATE_MAN=1 cargo test -p qemu-uftrace --test man_pages`.

use std::path::PathBuf;

#[test]
fn man_pages_are_up_to_date() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../man");
    let pages = qemu_uftrace::man::pages().expect("render man pages");
    let update = std::env::var_os("UPDATE_MAN").is_some_and(|v| v != "0");
    let mut stale = Vec::new();
    for (name, text) in &pages {
        let path = dir.join(name);
        if std::fs::read(&path).ok().as_deref() != Some(text.as_slice()) {
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, text).unwrap();
            } else {
                stale.push(name.clone());
            }
        }
    }
    // Pages of subcommands that no longer exist.
    let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.starts_with("qemu-uftrace")
            && file.ends_with(".1")
            && !names.contains(&file.as_str())
        {
            if update {
                std::fs::remove_file(entry.path()).unwrap();
            } else {
                stale.push(format!("{file} (no such command)"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "man pages out of date: {stale:?}; run UPDATE_MAN=1 cargo test -p qemu-uftrace --test man_pages"
    );
    assert!(names.contains(&"qemu-uftrace.1"));
    assert!(names.contains(&"qemu-uftrace-record.1"));
}
