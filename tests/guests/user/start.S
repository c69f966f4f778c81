// Entry point of the Linux user-mode builds of the test guests (qemu-aarch64): the same
// shape as ../start.S (a zero frame record, `bl main`, `bl rt_fini`, exit with main's
// status) without the machine set-up; Linux gives the stack and zeroes .bss.

#ifdef __riscv
// riscv64 (qemu-riscv64): the same, with a zero frame pointer and return address; gp is
// set up for linker relaxation.
    .text
    .global _start
    .type _start, %function
_start:
    .option push
    .option norelax
    lla     gp, __global_pointer$
    .option pop
    li      fp, 0
    li      ra, 0
    call    main
    call    rt_fini
    j       rt_exit
    .size _start, . - _start

    .global rt_exit
    .type rt_exit, %function
rt_exit:
    li      a7, 94
    ecall
    j       rt_exit
    .size rt_exit, . - rt_exit
#else
    .text
    .global _start
    .type _start, %function
_start:
    mov     x29, xzr
    mov     x30, xzr
    bl      main
    bl      rt_fini             // int rt_fini(int status): flushes, returns the status
    b       rt_exit
    .size _start, . - _start

// void rt_exit(int status): exit_group(2).
    .global rt_exit
    .type rt_exit, %function
rt_exit:
    mov     x8, #94
    svc     #0
    b       rt_exit
    .size rt_exit, . - rt_exit
#endif
