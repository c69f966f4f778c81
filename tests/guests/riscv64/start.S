// Entry point of the riscv64 bare-metal builds of the test guests (qemu-system-riscv64 -M virt
// -bios none: QEMU's reset code jumps here in M-mode, hart id in a0, the DTB's address in a1).
// The same shape as ../start.S: a zero frame pointer and return address end the frame chain,
// .bss is cleared, then `call main`, `call rt_fini`, and rt_exit ends QEMU with main's status
// through the virt board's test device (sifive_test).

#include "reset.inc"

    .section .text.start, "ax"
    .global _start
    .type _start, %function
_start:
    reset_to_c
    call    main
    call    rt_fini             // int rt_fini(int status): returns the exit status
    j       rt_exit
    .size _start, . - _start

    .text
    rt_exit_body
