//! The initramfs guest under plain QEMU (no plugin): `/init` runs as PID 1, makes its calls,
//! forks its child and powers the machine off, so QEMU exits 0 by itself; on one vCPU and on
//! four, on every QEMU of `system_qemus`. Its symbols sit far below the kernel's.

use std::time::Instant;

use qemu_uftrace_tests::execlog::{branches_to, execlog_plugin, Execlog};
use qemu_uftrace_tests::linux_guest::init_expected_calls;
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
    for (name, _, _) in init_expected_calls() {
        assert!(
            symbols.values().any(|n| n == name),
            "no {name} in {}",
            elf.display()
        );
    }
    let (lo, hi) = function_span(&elf).expect("functions");
    assert!(lo >= 0x40_0000 && hi < 0x4020_0000, "{lo:#x}..{hi:#x}");
}

/// The expected call counts are right: every listed function is entered only by `bl`
/// (`main`, tail-called by glibc's `__wrap_main`, is not listed), and QEMU's execlog plugin,
/// counting executions of their first instructions under plain QEMU 10.2.2, agrees with
/// `init_expected_calls` (both processes together).
#[test]
fn execlog_confirms_the_expected_call_counts() {
    let (_, elf) = initramfs_guest().expect("the guest builds");
    let symbols = nm_functions(&elf).expect("nm");
    let expected = init_expected_calls();
    let functions: std::collections::BTreeMap<String, u64> = expected
        .iter()
        .map(|(name, _, _)| {
            let addr = symbols
                .iter()
                .find_map(|(a, n)| (n == name).then_some(*a))
                .expect("in init.elf");
            (name.to_string(), addr)
        })
        .collect();
    let addrs: Vec<u64> = functions.values().copied().collect();
    let branches = branches_to(&elf, &addrs).expect("objdump");
    for (name, addr) in &functions {
        assert_eq!(
            branches[addr].unlinked, 0,
            "{name} is entered without a call"
        );
        assert!(branches[addr].linked > 0, "{name} is never called by bl");
    }
    let main = symbols
        .iter()
        .find_map(|(a, n)| (n == "main").then_some(*a))
        .expect("main");
    assert!(
        branches_to(&elf, &[main]).expect("objdump")[&main].unlinked > 0,
        "main is no longer tail-called by __wrap_main: list it in init_expected_calls"
    );

    let tmp = std::env::temp_dir().join(format!("init-execlog-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let execlog = Execlog {
        functions,
        log: tmp.join("execlog.log"),
    };
    let qemu = system_qemus()
        .into_iter()
        .find(|q| q.label == "10.2.2")
        .expect("QEMU 10.2.2");
    let mut argv = initramfs_boot_args_on(&qemu.program, 1).expect("the guest builds");
    argv.extend(execlog.qemu_args(&execlog_plugin()));
    let (code, console) = run_qemu_argv(&argv, INITRAMFS_TIMEOUT).expect("QEMU starts");
    assert_eq!(code, Some(0), "{console}");
    let counts = execlog.entry_counts().expect("the execlog log");
    let _ = std::fs::remove_dir_all(&tmp);
    for (name, _, n) in expected {
        assert_eq!(counts[name], n, "executions of {name}'s entry");
    }
}
