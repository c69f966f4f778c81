# The unwinder's kernel-exception test (cli/src/unwind/mod.rs), for the host's gcc (x86-64),
# with ORC tables of its own (Linux 6.4's numbering): `work` (called by _start) was
# interrupted at `in_work`; the interrupt's entry code (an untyped label, as idtentry.h's)
# saved a `struct pt_regs` at its stack pointer (`UNWIND_HINT_REGS`, at `regs_hint`) and
# called `handler`, stopped at `in_handler`.
    .text
    .globl _start
    .type _start, @function
_start:
    call work
    .globl after_work
after_work:
    jmp .
    .size _start, . - _start

    .globl work
    .type work, @function
work:
    .globl in_work
in_work:
    nop
    ret
    .size work, . - work

    .globl asm_sysvec_apic_timer_interrupt
asm_sysvec_apic_timer_interrupt:
    nop
regs_hint:
    call handler
    .globl after_handler
after_handler:
    jmp .

    .globl handler
    .type handler, @function
handler:
    .globl in_handler
in_handler:
    nop
    ret
    .size handler, . - handler
code_end:

    .section .orc_unwind_ip, "a"
    .long _start - .
    .long work - .
    .long asm_sysvec_apic_timer_interrupt - .
    .long regs_hint - .
    .long handler - .
    .long code_end - .
    # sp_offset, bp_offset, then sp_reg:4 bp_reg:4 type:3 signal:1 (sp_reg 5: sp; types:
    # END_OF_STACK 1, CALL 2, REGS 3).
    .section .orc_unwind, "a"
    .short 0, 0, 0x100
    .short 8, 0, 0x205
    .short 8, 0, 0x205
    .short 0, 0, 0x305
    .short 8, 0, 0x205
    .short 0, 0, 0x000
