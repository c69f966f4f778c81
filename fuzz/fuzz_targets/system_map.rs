//! System.map / kallsyms text from arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = qemu_uftrace_symbols::fuzzing::system_map(data);
});
