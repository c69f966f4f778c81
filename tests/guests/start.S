// Entry point shared by the test and benchmark guests (QEMU -M virt, EL1,
// MMU and caches off). Runs main, lets rt_fini report (the oracle dump in
// -oracle builds), then ends QEMU through semihosting with main's status.

    .section .text.start, "ax"
    .global _start
    .type _start, %function
_start:
    // Enable FP/SIMD (CPACR_EL1.FPEN = 0b11): GCC may use q/d registers in
    // integer code and setjmp saves d8-d15; both would trap otherwise.
    mov     x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb
#ifdef PAC
    // -pac builds: turn on instruction-address signing with key A (SCTLR_EL1.EnIA) and give
    // the key a value, so that return addresses really carry authentication codes.
    mov     x0, #0x5a5a
    msr     apiakeylo_el1, x0
    msr     apiakeyhi_el1, x0
    mrs     x0, sctlr_el1
    orr     x0, x0, #(1 << 31)
    msr     sctlr_el1, x0
    isb
#endif

    ldr     x0, =__stack_top
    mov     sp, x0
    // A zero frame pointer ends the frame-record chain (the oracle relies on
    // main's saved x29 being 0).
    mov     x29, xzr
    mov     x30, xzr

    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    stp     xzr, xzr, [x0], #16
    b       1b
2:
    bl      main
    bl      rt_fini             // int rt_fini(int status): returns the exit status
    b       rt_exit
    .size _start, . - _start

// void rt_exit(int status): semihosting SYS_EXIT (0x18), AArch64 form with a
// parameter block { ADP_Stopped_ApplicationExit, status } so that QEMU's own
// exit status is `status`.
    .text
    .global rt_exit
    .type rt_exit, %function
rt_exit:
    sxtw    x2, w0
    ldr     x1, =0x20026
    stp     x1, x2, [sp, #-16]!
    mov     x1, sp
    mov     w0, #0x18
    hlt     #0xf000
3:  wfi                         // not reached unless semihosting is disabled
    b       3b
    .size rt_exit, . - rt_exit
