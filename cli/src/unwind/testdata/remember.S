# The unwinder's CFI test (cli/src/unwind/mod.rs): f saves rbx, returns early from inside
# .cfi_remember_state / .cfi_restore_state, and calls g from the restored state; _start
# calls f and marks the end of the stack with .cfi_undefined %rip.
    .text
    .globl f
    .type f, @function
f:
    .cfi_startproc
    push %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_offset %rbx, -16
    test %rdi, %rdi
    je 1f
    .cfi_remember_state
    pop %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    ret
    .cfi_restore_state
1:  call g
    .globl after_g
after_g:
    pop %rbx
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_endproc
    .size f, . - f

    .globl g
    .type g, @function
g:
    .cfi_startproc
    ret
    .cfi_endproc
    .size g, . - g

    .globl _start
    .type _start, @function
_start:
    .cfi_startproc
    .cfi_undefined %rip
    xor %edi, %edi
    call f
    .globl after_f
after_f:
    hlt
    .cfi_endproc
    .size _start, . - _start
