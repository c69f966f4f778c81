//! A Linux guest's address spaces (`qemu_uftrace_engine::spaces`) under a fork loop: the
//! plugin's memory stays bounded however many processes the guest starts and ends, and what
//! the bound costs is counted.

use qemu_uftrace_engine::spaces::{Spaces, KEPT_ENDED};

/// `init` (1) maps its program and libc; then `n` children fork from it, each mapping a
/// program of its own, and exit.
fn fork_loop(s: &mut Spaces, n: u32) -> Vec<u32> {
    s.exec(1);
    s.mmap(1, "/init", 0xaaaa_0000_0000, 0x2000, 0);
    s.mmap(1, "/lib/libc.so.6", 0xffff_8000_0000, 0x10_0000, 0);
    let mut children = Vec::new();
    for pid in 2..2 + n {
        let child = s.fork(pid, 1);
        s.exec(pid);
        s.mmap(pid, "/bin/true", 0xaaab_0000_0000, 0x1000, 0);
        s.mmap(pid, "/lib/libc.so.6", 0xffff_9000_0000, 0x10_0000, 0);
        s.exit(pid);
        children.push(child);
    }
    children
}

#[test]
fn a_fork_loop_keeps_the_live_spaces_and_the_latest_ended_ones() {
    // Under Miri fewer spaces kept and fewer children, still well past them.
    let (kept, n): (usize, u32) = if cfg!(miri) {
        (256, 400)
    } else {
        (KEPT_ENDED, 20_000)
    };
    let mut s = Spaces::keeping(kept);
    let children = fork_loop(&mut s, n);
    // init's space, and the latest ended ones (each child left two: the forked copy and
    // the exec'd one).
    assert_eq!(s.kept(), 1 + kept);
    assert_eq!(s.freed, 2 * u64::from(n) - kept as u64);
    let init = s.of(1);
    assert_ne!(init, 0);
    // The latest ended space (the last child's exec'd one) still moves its code's addresses
    // into init's.
    let latest_exec = children[children.len() - 1] + 1;
    assert_eq!(
        s.delta(latest_exec, init, 0xffff_9000_0040),
        Some(0xffff_8000_0040u64.wrapping_sub(0xffff_9000_0040))
    );
    assert_eq!(s.unmoved, 0);
    // The first child's was freed: its code runs at its translated addresses, counted.
    assert_eq!(s.delta(children[0] + 1, init, 0xffff_9000_0040), None);
    assert_eq!(s.unmoved, 1);
    // A space nobody ever had is no freed one.
    assert_eq!(s.delta(u32::MAX, init, 0xffff_9000_0040), None);
    assert_eq!(s.unmoved, 1);
}

#[test]
fn guest_chosen_mappings_at_the_top_of_the_address_space_do_not_overflow() {
    let mut s = Spaces::default();
    let a = s.exec(1);
    s.mmap(1, "/x", u64::MAX - 0xfff, 0x1000, u64::MAX - 0x10);
    // Mapped over at its middle: what is left after has an offset past 2^64.
    s.mmap(1, "/y", u64::MAX - 0x7ff, 0x100, 0);
    let b = s.exec(2);
    s.mmap(2, "/x", 0x1000, 0x1000, u64::MAX - 0x10);
    let at = u64::MAX - 0xff0;
    assert_eq!(s.delta(a, b, at).map(|d| at.wrapping_add(d)), Some(0x100f));
    let _ = s.delta(a, b, u64::MAX - 1);
}
