//! The struct offsets `record` gives the plugin, as it finds them: from the first of the
//! files whose DWARF defines `task_struct`, else from the first with the kernel's BTF; with
//! the time that takes (bench/kernel_types.sh).
//!   cargo run --release -p qemu-uftrace-symbols --example kernel_offsets -- FILE...

use std::path::PathBuf;
use std::time::Instant;

use qemu_uftrace_symbols::KernelTypes;

/// What cli/src/symbol_source.rs and cli/src/guest_procs read.
const MEMBERS: [(&str, &str); 8] = [
    ("task_struct", "comm"),
    ("task_struct", "pid"),
    ("task_struct", "tgid"),
    ("file", "f_path"),
    ("path", "dentry"),
    ("dentry", "d_name"),
    ("qstr", "name"),
    ("dentry", "d_parent"),
];

fn main() {
    let files: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let paths: Vec<&std::path::Path> = files.iter().map(PathBuf::as_path).collect();
    let t = Instant::now();
    let types = match KernelTypes::find(&paths) {
        Ok(Some(types)) => types,
        Ok(None) => {
            eprintln!("no file has the kernel's DWARF or BTF");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let found = t.elapsed();
    let mut offsets = Vec::new();
    for (s, m) in MEMBERS {
        match types.member_offset(s, m) {
            Ok(o) => offsets.push(format!("{s}.{m}={o}")),
            Err(e) => offsets.push(format!("{s}.{m}: {e}")),
        }
    }
    println!(
        "{:?} from {}: found in {:.1} ms, all offsets in {:.1} ms",
        types.source(),
        types.path().display(),
        found.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );
    println!("  {}", offsets.join(" "));
}
