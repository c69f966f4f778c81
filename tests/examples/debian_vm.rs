//! Prints the Debian VM's boot for the benchmarks (`bench/vm.sh`), as the tests boot it
//! (`qemu_uftrace_tests::debian_vm`): the root `--sysroot` takes on the first line, then the
//! QEMU command line, one argument a line. Usage: `debian_vm amd64|arm64 EMULATOR`.

fn main() -> anyhow::Result<()> {
    use qemu_uftrace_tests::debian_vm as vm;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [arch, qemu] = &args[..] else {
        anyhow::bail!("usage: debian_vm amd64|arm64 EMULATOR");
    };
    let (root, argv) = match arch.as_str() {
        "amd64" => (vm::debian_vm_root(), vm::debian_vm_boot_args_on(qemu)),
        "arm64" => (
            vm::debian_vm_arm64_root(),
            vm::debian_vm_arm64_boot_args_on(qemu),
        ),
        other => anyhow::bail!("{other}: not a VM architecture (amd64 or arm64)"),
    };
    println!("{}", root.display());
    for a in argv {
        println!("{a}");
    }
    Ok(())
}
