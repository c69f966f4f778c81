//! A Linux guest's address spaces (`qemu_uftrace_engine::spaces`) under a fork loop: the
//! plugin's memory stays bounded however many processes the guest starts and ends, and what
//! the bound costs is counted.

use qemu_uftrace_engine::spaces::{Spaces, KEPT_ENDED, MAX_MAPS};

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

/// A timeline at the plugin's own caps: a process maps its program, loader and libc, then
/// 100,000 libraries one after another at new addresses (a `dlopen`/`dlclose` loop whose
/// unmaps are not seen). Its list stays at [`MAX_MAPS`], what it dropped is counted, and
/// the code of its program, libc and latest library still moves into another process.
#[test]
#[cfg_attr(
    miri,
    ignore = "100,000 mappings; the unit tests cover the same at small caps"
)]
fn a_map_unmap_loop_of_100000_libraries_stays_bounded() {
    let mut s = Spaces::default();
    let a = s.exec(1);
    s.mmap(1, "/usr/bin/worker", 0xaaaa_0000_0000, 0x2000, 0);
    s.mmap(
        1,
        "/lib/ld-linux-aarch64.so.1",
        0xffff_a000_0000,
        0x2_0000,
        0,
    );
    s.mmap(1, "/lib/libc.so.6", 0xffff_8000_0000, 0x10_0000, 0);
    let n: u64 = 100_000;
    let lib = |i: u64| {
        (
            format!("/usr/lib/plugins/p{}.so", i % 10),
            0x7000_0000 + i * 0x10_000,
        )
    };
    for i in 0..n {
        let (path, at) = lib(i);
        s.mmap(1, &path, at, 0x4000, 0);
        assert!(s.mappings() <= MAX_MAPS);
    }
    assert_eq!(s.mappings(), MAX_MAPS);
    assert_eq!(s.maps_dropped, 3 + n - MAX_MAPS as u64);
    // Another process maps the same files elsewhere.
    let b = s.exec(2);
    s.mmap(2, "/usr/bin/worker", 0xaaab_0000_0000, 0x2000, 0);
    s.mmap(2, "/lib/libc.so.6", 0xffff_9000_0000, 0x10_0000, 0);
    let (last, at) = lib(n - 1);
    s.mmap(2, &last, 0x6000_0000, 0x4000, 0);
    let moved = |s: &mut Spaces, addr: u64| s.delta(a, b, addr).map(|d| addr.wrapping_add(d));
    assert_eq!(moved(&mut s, 0xaaaa_0000_1234), Some(0xaaab_0000_1234));
    assert_eq!(moved(&mut s, 0xffff_8000_0040), Some(0xffff_9000_0040));
    assert_eq!(moved(&mut s, at + 0x10), Some(0x6000_0010));
    assert_eq!(s.unmoved_dropped, 0);
    // The same file, mapped earlier in the newer half and dropped since: its code stays
    // where it was translated, and that is counted.
    let (same, early) = lib(n - 1 - 10 * (MAX_MAPS as u64 / 10 + 1));
    assert_eq!(same, last);
    assert_eq!(moved(&mut s, early + 0x10), None);
    assert_eq!(s.unmoved_dropped, 1);
}
