//! ELF symbols, DWARF line tables, struct layouts and kernel modules' lines from arbitrary
//! bytes: errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = qemu_uftrace_symbols::fuzzing::elf(data, true);
    let _ = qemu_uftrace_symbols::fuzzing::member_offset(data);
    let _ = qemu_uftrace_symbols::fuzzing::module(data);
});
