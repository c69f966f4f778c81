# The unwinder's signal-frame test (cli/src/unwind/mod.rs): `handler` runs on a signal
# that interrupted `work` (called by _start) at `in_work`, and returns into `restore_rt`, a
# sigreturn trampoline described as glibc describes its x86-64 `__restore_rt`: 'S' in the
# CIE's augmentation (.cfi_signal_frame), the CFA and the registers read from the
# ucontext at the stack pointer by DWARF expressions (rbp at 120, rsp at 160, rip at 168),
# and the entry starting at the nop before it.
    .text
    .globl _start
    .type _start, @function
_start:
    .cfi_startproc
    .cfi_undefined %rip
    call work
    .globl after_work
after_work:
    xor %edi, %edi
    hlt
    .cfi_endproc
    .size _start, . - _start

    .globl work
    .type work, @function
work:
    .cfi_startproc
    push %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_offset %rbp, -16
    mov %rsp, %rbp
    .cfi_def_cfa_register %rbp
    .globl in_work
in_work:
    nop
    pop %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size work, . - work

    .globl handler
    .type handler, @function
handler:
    .cfi_startproc
    ret
    .cfi_endproc
    .size handler, . - handler

    .cfi_startproc
    .cfi_signal_frame
    # DW_CFA_def_cfa_expression: DW_OP_breg7 (rsp) 160, DW_OP_deref
    .cfi_escape 0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06
    # DW_CFA_expression rbp: DW_OP_breg7 120
    .cfi_escape 0x10, 0x06, 0x03, 0x77, 0xf8, 0x00
    # DW_CFA_expression rsp: DW_OP_breg7 160
    .cfi_escape 0x10, 0x07, 0x03, 0x77, 0xa0, 0x01
    # DW_CFA_expression rip: DW_OP_breg7 168
    .cfi_escape 0x10, 0x10, 0x03, 0x77, 0xa8, 0x01
    nop
    .globl restore_rt
    .type restore_rt, @function
restore_rt:
    mov $15, %eax
    syscall
    .cfi_endproc
    .size restore_rt, . - restore_rt
