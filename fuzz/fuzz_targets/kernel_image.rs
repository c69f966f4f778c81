//! Raw kernel images (kallsyms table search and decoding, gzip) from arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = qemu_uftrace_symbols::fuzzing::kernel_image(data);
});
