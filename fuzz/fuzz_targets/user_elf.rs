//! The user-mode program reader (`cli/src/qemu/user.rs`): the headers of the program a
//! user-mode QEMU runs and of the libraries it maps, and the load biases computed from them
//! and from guest addresses. Arbitrary bytes are refused or read, never a panic (overflow
//! checks on).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qemu_uftrace::qemu::user::Elf;

fuzz_target!(|data: &[u8]| {
    let Ok(elf) = Elf::parse(data) else {
        return;
    };
    // Guest addresses as the plugin reports them: any value, here header bytes the reader
    // does not use (e_ident's padding, e_shoff, e_flags…), which the fuzzer varies freely.
    let word = |at: usize| {
        data.get(at..at + 8)
            .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
    };
    let _ = elf.bias_of_mapping(word(8), word(40));
    let _ = elf.bias_of_base(word(48));
});
