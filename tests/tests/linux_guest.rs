//! The initramfs guest under plain QEMU (no plugin): `/init` runs as PID 1, makes its calls,
//! forks its child and powers the machine off, so QEMU exits 0 by itself; on one vCPU and on
//! four, on every QEMU of `system_qemus`. Its symbols sit far below the kernel's.

use std::time::Instant;

use qemu_uftrace_tests::linux_guest::{
    function_span, init_child_pid, initramfs_boot_args_on, initramfs_guest, run_qemu_argv,
    INITRAMFS_TIMEOUT, INIT_OK,
};
use qemu_uftrace_tests::{nm_functions, system_qemus};

#[test]
fn initramfs_guest_boots_runs_init_and_powers_off() {
    for qemu in system_qemus() {
        for smp in [1, 4] {
            let argv = initramfs_boot_args_on(&qemu.program, smp).expect("the guest builds");
            let start = Instant::now();
            let (code, console) = run_qemu_argv(&argv, INITRAMFS_TIMEOUT).expect("QEMU starts");
            let took = start.elapsed();
            let on = format!("QEMU {} -smp {smp} ({took:?})", qemu.label);
            assert_eq!(
                code,
                Some(0),
                "{on}: QEMU did not exit 0 by itself:\n{console}"
            );
            assert!(
                console.contains("INIT: start"),
                "{on}: no output from /init:\n{console}"
            );
            assert!(console.contains(INIT_OK), "{on}: /init failed:\n{console}");
            assert!(
                console.contains("INIT: pid=1 getpid_sum=100 fault=0 child="),
                "{on}: /init is not PID 1 or its figures are off:\n{console}"
            );
            let child = init_child_pid(&console).expect("the child's PID");
            assert!(child > 1, "{on}: child PID {child}");
            assert!(
                console.contains("reboot: Power down"),
                "{on}: the machine was not powered off:\n{console}"
            );
            eprintln!("{on}: ok, child PID {child}");
        }
    }
}

/// `/init` is a static ELF with its symbols: `main` and the scenario's functions, all in the
/// 0x400000 region, below any kernel address (0xffff_8000_0000_0000 up) and below the
/// kernel's physical load address on `virt` (0x4020_0000 up), so one trace can name both.
#[test]
fn init_elf_has_its_functions_at_user_addresses() {
    let (cpio, elf) = initramfs_guest().expect("the guest builds");
    assert!(std::fs::metadata(&cpio).expect("the cpio").len() > 100_000);
    let symbols = nm_functions(&elf).expect("nm");
    for (name, _, _) in qemu_uftrace_tests::linux_guest::init_expected_calls() {
        assert!(
            symbols.values().any(|n| n == name),
            "no {name} in {}",
            elf.display()
        );
    }
    let (lo, hi) = function_span(&elf).expect("functions");
    assert!(lo >= 0x40_0000 && hi < 0x4020_0000, "{lo:#x}..{hi:#x}");
}
