// Exception entry stubs of traps.c: each pushes a zero error code where the CPU pushes none
// and its vector, then the caller-saved registers, calls trap_handler(frame) and returns
// with IRETQ.
    .text
    .macro stub name, vector, has_error
    .global \name
    .type \name, @function
\name:
    .if \has_error == 0
    push    $0
    .endif
    push    $\vector
    jmp     trap_common
    .size \name, . - \name
    .endm

    stub trap_int3, 3, 0
    stub trap_ud, 6, 0
    stub trap_gp, 13, 1
    stub trap_pf, 14, 1
    stub trap_svc, 0x80, 0

trap_common:
    push    %rax
    push    %rcx
    push    %rdx
    push    %rsi
    push    %rdi
    push    %r8
    push    %r9
    push    %r10
    push    %r11
    mov     %rsp, %rdi
    call    trap_handler
    pop     %r11
    pop     %r10
    pop     %r9
    pop     %r8
    pop     %rdi
    pop     %rsi
    pop     %rdx
    pop     %rcx
    pop     %rax
    add     $16, %rsp           // vector, error code
    iretq

    .section .note.GNU-stack, "", @progbits
