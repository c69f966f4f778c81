//! Kind detection and whichever loader it picks, as `load` does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = qemu_uftrace_symbols::fuzzing::any(data);
});
