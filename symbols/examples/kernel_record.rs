//! What `record` reads from a stock kernel image given no DWARF vmlinux, in its order and
//! timed: the BTF (struct offsets, before QEMU starts), the kallsyms addresses the process
//! watch and the task slot need, then the kallsyms symbols (the symbol job). A compressed
//! image (bzImage, gzip, EFI zboot) is decompressed by the first step only.
//!   cargo run --release -p qemu-uftrace-symbols --example kernel_record -- IMAGE

use std::path::PathBuf;
use std::time::Instant;

use qemu_uftrace_symbols::{
    kernel_symbol_address, kernel_symbol_addresses, load_kernel_image, KernelTypes, LoadOptions,
};

/// What cli/src/guest_procs watches.
const WATCHED: [&str; 4] = [
    "mmap_region",
    "begin_new_exec",
    "wake_up_new_task",
    "do_exit",
];

fn main() {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: kernel_record IMAGE");
        std::process::exit(2);
    };
    let start = Instant::now();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let btf = KernelTypes::btf(&path)
        .map(|_| ())
        .map_err(|e| e.to_string());
    println!("btf: {btf:?} in {:.1} ms", ms(t));
    let t = Instant::now();
    let addrs = kernel_symbol_addresses(&path, &WATCHED);
    println!("kallsyms addresses: {addrs:x?} in {:.1} ms", ms(t));
    // x86_64's task slot (Isa::task_slot_symbols); the other kernels have none.
    let t = Instant::now();
    let slot = kernel_symbol_address(&path, "current_task");
    println!("task slot: {slot:x?} in {:.1} ms", ms(t));
    let t = Instant::now();
    let image = load_kernel_image(&path, &LoadOptions::default());
    let count = image.map(|i| i.functions.len()).map_err(|e| e.to_string());
    println!("kallsyms image: {count:?} functions in {:.1} ms", ms(t));
    println!("total {:.1} ms", ms(start));
}
