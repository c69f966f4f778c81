//! The `-initrd` archive reader (`cli/src/guest_procs/initrd.rs`): a newc cpio archive the
//! guest's user chose, members named by it. Any bytes are refused or read, never a panic
//! (overflow checks on), and never more memory than the archive's size asks for.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = qemu_uftrace::guest_procs::initrd::parse(data);
});
