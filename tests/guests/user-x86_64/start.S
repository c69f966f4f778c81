// Entry point of the x86_64 Linux user-mode builds of the test guests (qemu-x86_64): as
// ../user/start.S, a zero frame pointer, `call main`, `call rt_fini`, exit with its status.

    .text
    .global _start
    .type _start, @function
_start:
    xor     %ebp, %ebp
    and     $-16, %rsp
    call    main
    mov     %eax, %edi
    call    rt_fini             // int rt_fini(int status): flushes, returns the status
    mov     %eax, %edi
    jmp     rt_exit
    .size _start, . - _start

// void rt_exit(int status): exit_group(2).
    .global rt_exit
    .type rt_exit, @function
rt_exit:
    mov     $231, %eax
    syscall
    jmp     rt_exit
    .size rt_exit, . - rt_exit

    .section .note.GNU-stack, "", @progbits
