//! The files the plugin writes and the CLI reads back after the run, which a guest fills
//! (paths, names, addresses, stack bytes): `plugin.procs` (`guest_procs::events`),
//! `plugin.maps` (`qemu::user_maps`), `plugin.tasks` (`guest_tasks`), and stack cookies
//! (`format::cookie`), which a decoded cookie then unwinds with no image (the stack's words
//! are the guest's). Any bytes are refused or read, never a panic (overflow checks on).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qemu_uftrace::{guest_procs, guest_tasks, qemu::user_maps, unwind};
use qemu_uftrace_format::cookie::StackCookie;
use qemu_uftrace_format::Arch;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let procs = guest_procs::events::parse(&text);
    for space in procs.spaces.iter().take(16) {
        let _ = space.program();
    }
    let maps = user_maps::parse(&text);
    let _ = user_maps::vdso(&maps);
    for task in guest_tasks::parse(&text).iter().take(16) {
        let _ = (task.process(), task.thread_group(), task.display_name());
    }
    if let Ok(cookie) = StackCookie::decode(data) {
        assert_eq!(
            StackCookie::decode(&cookie.encode()).ok(),
            Some(cookie.clone())
        );
        for arch in [Arch::Aarch64, Arch::X86_64, Arch::Riscv64] {
            let _ = unwind::unwind(&cookie, arch, &[]);
        }
    }
});
