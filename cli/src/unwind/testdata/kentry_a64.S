# The unwinder's kernel-exception test (cli/src/unwind/mod.rs), for aarch64-linux-gnu-gcc,
# without CFI (frame records): `work` (called by _start) was interrupted at `in_work`; the
# interrupt's entry code `el1h_64_irq` (an untyped label, as in the kernel's entry.S) saved
# a `struct pt_regs` and called `el1h_64_irq_handler`, stopped at `in_handler`.
    .text
    .globl _start
    .type _start, %function
_start:
    bl work
    .globl after_work
after_work:
    b .
    .size _start, . - _start

    .globl work
    .type work, %function
work:
    stp x29, x30, [sp, #-16]!
    mov x29, sp
    .globl in_work
in_work:
    nop
    ldp x29, x30, [sp], #16
    ret
    .size work, . - work

    .globl el1h_64_irq
el1h_64_irq:
    nop
    bl el1h_64_irq_handler
    .globl after_handler
after_handler:
    b .

    .globl el1h_64_irq_handler
    .type el1h_64_irq_handler, %function
el1h_64_irq_handler:
    stp x29, x30, [sp, #-16]!
    mov x29, sp
    .globl in_handler
in_handler:
    nop
    ldp x29, x30, [sp], #16
    ret
    .size el1h_64_irq_handler, . - el1h_64_irq_handler
