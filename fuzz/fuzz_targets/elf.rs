//! ELF symbols and DWARF line tables from arbitrary bytes: errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = qemu_uftrace_symbols::fuzzing::elf(data, true);
});
