# The unwinder's known-sigreturn test (cli/src/unwind/mod.rs), for aarch64-linux-gnu-gcc:
# `handler` runs on a signal that interrupted `work` (called by _start) at `in_work`, and
# returns into `restorer`, a sigreturn trampoline with no CFI, as QEMU's aarch64 vDSO has
# `__kernel_rt_sigreturn`: known by its two instructions, the interrupted registers read
# from the signal frame at the stack pointer (x29, x30, sp, pc at 544, 552, 560, 568).
    .text
    .globl _start
    .type _start, %function
_start:
    .cfi_startproc
    .cfi_undefined x30
    bl work
    .globl after_work
after_work:
    b .
    .cfi_endproc
    .size _start, . - _start

    .globl work
    .type work, %function
work:
    .cfi_startproc
    stp x29, x30, [sp, #-16]!
    .cfi_def_cfa_offset 16
    .cfi_offset x29, -16
    .cfi_offset x30, -8
    .globl in_work
in_work:
    nop
    ldp x29, x30, [sp], #16
    ret
    .cfi_endproc
    .size work, . - work

    .globl handler
    .type handler, %function
handler:
    .cfi_startproc
    ret
    .cfi_endproc
    .size handler, . - handler

    nop
    .globl restorer
    .type restorer, %function
restorer:
    mov x8, #139
    svc #0
    .size restorer, . - restorer
