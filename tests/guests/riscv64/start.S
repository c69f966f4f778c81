// Entry point of the riscv64 bare-metal builds of the test guests (qemu-system-riscv64 -M virt
// -bios none: QEMU's reset code jumps here in M-mode, hart id in a0, the DTB's address in a1).
// The same shape as ../start.S: a zero frame pointer and return address end the frame chain,
// .bss is cleared, then `call main`, `call rt_fini`, and rt_exit ends QEMU with main's status
// through the virt board's test device (sifive_test).

    .section .text.start, "ax"
    .global _start
    .type _start, %function
_start:
    .option push
    .option norelax
    lla     gp, __global_pointer$
    .option pop
    lla     sp, __stack_top
    li      fp, 0
    li      ra, 0
    lla     t0, __bss_start
    lla     t1, __bss_end
1:  bgeu    t0, t1, 2f
    sd      zero, 0(t0)
    addi    t0, t0, 8
    j       1b
2:
    call    main
    call    rt_fini             // int rt_fini(int status): returns the exit status
    j       rt_exit
    .size _start, . - _start

// void rt_exit(int status): the test device at 0x100000 ends QEMU: 0x5555 with status 0,
// (status << 16) | 0x3333 with any other (QEMU then exits with that status).
    .text
    .global rt_exit
    .type rt_exit, %function
rt_exit:
    li      t0, 0x100000
    li      t1, 0x5555
    beqz    a0, 3f
    slli    t1, a0, 16
    li      t2, 0x3333
    or      t1, t1, t2
3:  sw      t1, 0(t0)
4:  wfi                         // not reached: QEMU has exited
    j       4b
    .size rt_exit, . - rt_exit
