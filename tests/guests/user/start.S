// Entry point of the Linux user-mode builds of the test guests (qemu-aarch64): the same
// shape as ../start.S (a zero frame record, `bl main`, `bl rt_fini`, exit with main's
// status) without the machine set-up; Linux gives the stack and zeroes .bss.

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
