fn main() {
    let code = qemu_uftrace::main_with(std::env::args_os().collect());
    std::process::exit(code);
}
