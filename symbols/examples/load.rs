//! Loads one symbol source and prints how many functions it has, with and without a source
//! line; used by bench/symbols.sh.
//!
//! Usage: load [--no-lines] [--list] FILE[:OFFSET]...

use std::process::ExitCode;
use std::time::Instant;

use qemu_uftrace_symbols::{load, parse_source_arg, LoadOptions};

fn main() -> ExitCode {
    let mut source_lines = true;
    let mut list = false;
    let mut files = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-lines" => source_lines = false,
            "--list" => list = true,
            _ => files.push(arg),
        }
    }
    if files.is_empty() {
        eprintln!("usage: load [--no-lines] [--list] FILE[:OFFSET]...");
        return ExitCode::from(2);
    }
    let mut status = ExitCode::SUCCESS;
    for arg in files {
        // A malformed offset stays part of the file name, as this tool always took it.
        let (path, offset) = parse_source_arg(&arg).unwrap_or_else(|| (arg.clone().into(), 0));
        let opts = LoadOptions {
            offset,
            source_lines,
            ..Default::default()
        };
        let t = Instant::now();
        let image = match load(&path, &opts) {
            Ok(image) => image,
            Err(e) => {
                eprintln!("load: {e}");
                status = ExitCode::FAILURE;
                continue;
            }
        };
        let elapsed = t.elapsed();
        let with_line = image.functions.iter().filter(|f| f.line.is_some()).count();
        let total = image.functions.len();
        if list {
            for f in &image.functions {
                match &f.line {
                    Some(l) => println!(
                        "{:016x} {:8x} {} {}:{}",
                        f.addr, f.size, f.name, l.file, l.line
                    ),
                    None => println!("{:016x} {:8x} {}", f.addr, f.size, f.name),
                }
            }
        }
        println!(
            "{}: arch {} range {:#x}-{:#x} functions {} with line {} without line {} ({:.2}%) modules {} in {:.3}s",
            path.display(),
            image.arch.map_or("?".to_string(), |a| a.to_string()),
            image.start,
            image.end,
            total,
            with_line,
            total - with_line,
            if total == 0 { 0.0 } else { 100.0 * (total - with_line) as f64 / total as f64 },
            image.modules.len(),
            elapsed.as_secs_f64(),
        );
    }
    status
}
