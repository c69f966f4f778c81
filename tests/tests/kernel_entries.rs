//! The facts the execlog comparison (`cli/tests/whole_system.rs`) rests on, checked on the
//! cached Debian kernel without our plugin: the compared functions are single functions in
//! System.map, entered only by `bl`, and QEMU's execlog plugin counts their entries when
//! given their addresses with `afilter=`.

use qemu_uftrace_tests::execlog::{
    branches_to, debian_system_map, debian_vmlinux, execlog_plugin, system_map_addresses, Execlog,
    KERNEL_ENTRY_FUNCTIONS,
};
use qemu_uftrace_tests::linux_guest::run_qemu_argv;
use qemu_uftrace_tests::{kernel_boot_args_on, system_qemus};

#[test]
fn compared_functions_are_entered_only_by_calls() {
    let addrs = system_map_addresses(&debian_system_map(), KERNEL_ENTRY_FUNCTIONS)
        .expect("every function once in System.map");
    let entries: Vec<u64> = addrs.values().copied().collect();
    let branches = branches_to(&debian_vmlinux(), &entries).expect("objdump");
    for (name, addr) in &addrs {
        let b = branches[addr];
        eprintln!(
            "{name} {addr:#x}: {} bl, {} other branches",
            b.linked, b.unlinked
        );
        assert!(b.linked > 0, "{name}: no bl to it at all? {b:?}");
        assert_eq!(b.unlinked, 0, "{name} is entered by branches without link");
    }
    // The scan does see tail calls: the exception vectors branch to their handlers' asm.
    let vectors = system_map_addresses(&debian_system_map(), &["el0t_64_sync", "ret_to_user"])
        .expect("asm symbols");
    let targets: Vec<u64> = vectors.values().copied().collect();
    let branches = branches_to(&debian_vmlinux(), &targets).expect("objdump");
    for (name, addr) in &vectors {
        assert!(branches[addr].unlinked > 0, "{name}: {:?}", branches[addr]);
    }
}

/// The option syntax: `-plugin libexeclog.so,afilter=0xADDR,afilter=0xADDR -d plugin -D LOG`
/// on QEMU 10.2.2 (the QEMU the plugin was built with), over the boot to the root-fs panic.
#[test]
fn execlog_counts_entries_of_the_compared_functions() {
    let tmp = std::env::temp_dir().join(format!("execlog-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let log = tmp.join("execlog.log");
    let execlog = Execlog::for_kernel_functions(KERNEL_ENTRY_FUNCTIONS, &log).expect("System.map");
    let qemu = system_qemus()
        .into_iter()
        .find(|q| q.label == "10.2.2")
        .expect("QEMU 10.2.2");
    let mut argv = kernel_boot_args_on(&qemu.program, "cortex-a57");
    argv.extend(execlog.qemu_args(&execlog_plugin()));
    let (code, console) =
        run_qemu_argv(&argv, std::time::Duration::from_secs(120)).expect("QEMU starts");
    assert_eq!(code, Some(0), "{console}");
    let counts = execlog.entry_counts().expect("the log parses");
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("{counts:?}");
    for (name, n) in &counts {
        assert!(*n >= 50, "{name} entered only {n} times");
    }
}
