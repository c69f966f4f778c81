// setjmp/longjmp for the x86_64 longjmp test guest. jmp_buf (8-byte slots): rbx, rbp,
// r12-r15 [0..5], the stack pointer after setjmp's return [6], its return address [7].
// As on aarch64 (../setjmp.S), longjmp leaves through `ret` to setjmp's return address, so a
// tracer sees one return that unwinds several frames at once.

    .text
    .global setjmp
    .type setjmp, @function
setjmp:
    mov     %rbx, 0(%rdi)
    mov     %rbp, 8(%rdi)
    mov     %r12, 16(%rdi)
    mov     %r13, 24(%rdi)
    mov     %r14, 32(%rdi)
    mov     %r15, 40(%rdi)
    lea     8(%rsp), %rdx
    mov     %rdx, 48(%rdi)
    mov     (%rsp), %rdx
    mov     %rdx, 56(%rdi)
    xor     %eax, %eax
    ret
    .size setjmp, . - setjmp

    .global longjmp
    .type longjmp, @function
longjmp:
    mov     0(%rdi), %rbx
    mov     8(%rdi), %rbp
    mov     16(%rdi), %r12
    mov     24(%rdi), %r13
    mov     32(%rdi), %r14
    mov     40(%rdi), %r15
    mov     48(%rdi), %rsp
    push    56(%rdi)
    mov     %esi, %eax
    test    %eax, %eax
    jnz     1f
    inc     %eax
1:  ret
    .size longjmp, . - longjmp

    .section .note.GNU-stack, "", @progbits
