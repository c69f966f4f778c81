// Entry and exception vectors of el3.elf, a firmware-style guest for
// `qemu-system-aarch64 -M virt,secure=on,virtualization=on -cpu cortex-a57`.
//
// With secure=on the CPU has EL3 (and EL2 with virtualization=on), and QEMU
// starts a -kernel ELF (not a Linux Image) at its entry point at EL3, in
// AArch64, MMU off, with nothing set up. _start runs el3_main (C) at EL3,
// then drops to Non-secure EL1 with ERET; el1_start runs main (C) there and
// ends QEMU through semihosting, which QEMU accepts from EL1.
//
// Exceptions the scenario takes (el3.c):
//   svc #0 at EL1            -> VBAR_EL1 + 0x200 -> el1_svc_handler
//   IRQ (a GIC SGI) at EL1   -> VBAR_EL1 + 0x280 -> el1_irq_handler
//   smc #0 from EL1 to EL3   -> VBAR_EL3 + 0x400 -> el3_smc_handler
// Any other vector stops the guest with a message (rt_unexpected).

    .section .text.start, "ax"
    .global _start
    .type _start, %function
_start:
    ldr     x0, =el3_stack_top
    mov     sp, x0
    mov     x29, xzr                // a zero frame pointer ends the frame-record chain
    mov     x30, xzr

    // No FP/SIMD traps anywhere: GCC may use q/d registers in integer code.
    // CPTR_EL3 = 0: TFP clear (EL3 and below do not trap to EL3).
    msr     cptr_el3, xzr
    // CPTR_EL2 = RES1 bits only (0x33ff): TFP clear, nothing trapped to EL2.
    mov     x0, #0x33ff
    msr     cptr_el2, x0
    // CPACR_EL1.FPEN = 0b11: EL1 and EL0 do not trap either.
    mov     x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb

    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    stp     xzr, xzr, [x0], #16
    b       1b
2:
    ldr     x0, =el3_vectors
    msr     vbar_el3, x0
    isb

    bl      el3_main                // int el3_main(void): the number of failed checks
    cbnz    w0, rt_exit             // a failure at EL3 ends the run with that status

    // The state EL1 will run in, written from EL3 before the ERET:
    // SCR_EL3 = 0x431:
    //   NS (bit 0) = 1   the lower levels are Non-secure,
    //   IRQ, FIQ, EA (bits 1-3) = 0   interrupts and SErrors are not routed
    //                    to EL3: the IRQ goes to EL1 (HCR_EL2.IMO is 0 too),
    //   bits 5:4 RES1,
    //   SMD (bit 7) = 0  SMC is enabled (el3_smc_handler serves it),
    //   HCE (bit 8) = 0  HVC is undefined: EL2 stays unused,
    //   RW (bit 10) = 1  the level below EL3 (EL2) is AArch64.
    mov     x0, #0x431
    msr     scr_el3, x0
    // HCR_EL2 = RW (bit 31) only: EL1 is AArch64 (with EL2 present, HCR_EL2.RW
    // decides EL1's execution state); no trap or routing to EL2 (IMO, TSC … 0).
    mov     x0, #(1 << 31)
    msr     hcr_el2, x0
    // SCTLR_EL1 = its RES1 bits (0x30d00800): MMU, caches and alignment
    // checks off, little-endian, as at EL3.
    ldr     x0, =0x30d00800
    msr     sctlr_el1, x0
    // EL1 runs on its own stack (SP_EL1: EL1h below).
    ldr     x0, =__stack_top
    msr     sp_el1, x0
    // SPSR_EL3 = 0x3c5: M[3:0] = 0b0101 (EL1h: EL1 using SP_EL1), AArch64,
    // D, A, I, F (bits 9:6) all masked; main unmasks IRQs itself when it
    // wants the interrupt (irq_window).
    mov     x0, #0x3c5
    msr     spsr_el3, x0
    ldr     x0, =el1_start
    msr     elr_el3, x0
    eret                            // to Non-secure EL1, at el1_start
    .size _start, . - _start

// Non-secure EL1 from here on.
    .text
    .global el1_start
    .type el1_start, %function
el1_start:
    ldr     x0, =el1_vectors
    msr     vbar_el1, x0
    isb
    mov     x29, xzr
    mov     x30, xzr
    bl      main
    bl      rt_fini                 // int rt_fini(int status): returns the exit status
    b       rt_exit
    .size el1_start, . - el1_start

// void rt_exit(int status): semihosting SYS_EXIT (0x18), AArch64 form with a
// parameter block { ADP_Stopped_ApplicationExit, status } so that QEMU's own
// exit status is `status`. Works from EL3 and EL1 alike.
    .global rt_exit
    .type rt_exit, %function
rt_exit:
    sxtw    x2, w0
    ldr     x1, =0x20026
    stp     x1, x2, [sp, #-16]!
    mov     x1, sp
    mov     w0, #0x18
    hlt     #0xf000
3:  wfi                             // not reached unless semihosting is disabled
    b       3b
    .size rt_exit, . - rt_exit

// Saves the registers a C call may clobber (x0-x18, x29, x30) on the current
// stack, 176 bytes rounded up to 192. ELR/SPSR are not saved: no handler
// here takes a nested exception.
.macro save_caller_saved
    sub     sp, sp, #192
    stp     x0, x1, [sp, #0]
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x29, [sp, #144]
    str     x30, [sp, #160]
.endm

.macro restore_caller_saved_and_eret
    ldp     x0, x1, [sp, #0]
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x29, [sp, #144]
    ldr     x30, [sp, #160]
    add     sp, sp, #192
    eret
.endm

// A vector slot (0x80 bytes) for an exception the scenario never takes:
// rt_unexpected(level, slot offset) prints it and ends the run.
.macro unexpected level, offset
    .balign 0x80
    mov     x0, #\level
    mov     x1, #\offset
    b       rt_unexpected
.endm

// EL1's vector table (VBAR_EL1: 2 KiB aligned, 16 slots of 0x80 bytes).
    .balign 0x800
    .global el1_vectors
el1_vectors:
    unexpected 1, 0x000             // current EL with SP_EL0: never (EL1h only)
    unexpected 1, 0x080
    unexpected 1, 0x100
    unexpected 1, 0x180
    // 0x200: synchronous, current EL with SP_EL1: the svc in do_syscall.
    // long el1_svc_handler(long arg, unsigned long esr); its result replaces
    // the caller's x0, as a system call's return value.
    .balign 0x80
    save_caller_saved
    mrs     x1, esr_el1
    bl      el1_svc_handler
    str     x0, [sp, #0]
    restore_caller_saved_and_eret   // ELR_EL1: the instruction after the svc
    // 0x280: IRQ, current EL with SP_EL1: the SGI in irq_window.
    .balign 0x80
    save_caller_saved
    bl      el1_irq_handler
    restore_caller_saved_and_eret   // ELR_EL1: where irq_window was interrupted
    unexpected 1, 0x300             // FIQ
    unexpected 1, 0x380             // SError
    unexpected 1, 0x400             // lower EL: no EL0 here
    unexpected 1, 0x480
    unexpected 1, 0x500
    unexpected 1, 0x580
    unexpected 1, 0x600
    unexpected 1, 0x680
    unexpected 1, 0x700
    unexpected 1, 0x780

// EL3's vector table (VBAR_EL3).
    .balign 0x800
    .global el3_vectors
el3_vectors:
    unexpected 3, 0x000
    unexpected 3, 0x080
    unexpected 3, 0x100
    unexpected 3, 0x180
    unexpected 3, 0x200             // an exception in EL3's own code
    unexpected 3, 0x280
    unexpected 3, 0x300
    unexpected 3, 0x380
    // 0x400: synchronous from a lower EL in AArch64: the smc in
    // firmware_call. long el3_smc_handler(long function_id, long arg,
    // unsigned long esr) runs on SP_EL3 (EL3 always uses its own stack);
    // its result goes back in x0.
    .balign 0x80
    save_caller_saved
    mrs     x2, esr_el3
    bl      el3_smc_handler
    str     x0, [sp, #0]
    restore_caller_saved_and_eret   // ELR_EL3: the instruction after the smc
    unexpected 3, 0x480             // IRQ, FIQ, SError: routed to EL1, never here
    unexpected 3, 0x500
    unexpected 3, 0x580
    unexpected 3, 0x600             // lower EL in AArch32: none
    unexpected 3, 0x680
    unexpected 3, 0x700
    unexpected 3, 0x780

// EL3's stack: the smc handler's too. EL1 uses __stack_top (link.ld).
    .bss
    .balign 16
el3_stack:
    .skip   0x4000
el3_stack_top:
