// Entry point for the bare-metal hello guest (qemu-system-aarch64 -M virt).
// QEMU's -kernel ELF loader jumps here at EL1 with the MMU and caches off.

    .section .text.start, "ax"
    .global _start
    .type _start, %function
_start:
    // Enable FP/SIMD at EL1/EL0 (CPACR_EL1.FPEN = 0b11): GCC may use q/d
    // registers even in integer code, which would otherwise trap.
    mov     x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb

    ldr     x0, =__stack_top
    mov     sp, x0
    // Terminate the frame-record chain so unwinders (and tracers) stop here.
    mov     x29, xzr
    mov     x30, xzr

    // Zero .bss (link.ld keeps both ends 16-byte aligned).
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    stp     xzr, xzr, [x0], #16
    b       1b
2:
    bl      main

    // Semihosting SYS_EXIT (0x18), AArch64 form: x1 points to a parameter
    // block { reason, subcode }. With ADP_Stopped_ApplicationExit (0x20026)
    // QEMU exits with the subcode as its exit status, i.e. main's return value.
    sxtw    x2, w0
    ldr     x1, =0x20026
    stp     x1, x2, [sp, #-16]!
    mov     x1, sp
    mov     w0, #0x18
    hlt     #0xf000
3:  wfi                     // not reached unless semihosting is disabled
    b       3b
    .size _start, . - _start
