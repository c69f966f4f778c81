// setjmp/longjmp for the riscv64 longjmp guest (integer registers only: the guests are built
// without floating point). jmp_buf slots: s0-s11 [0..11], ra [12], sp [13]. longjmp leaves
// through `ret` to setjmp's return address, so a tracer sees one return that unwinds several
// frames at once.

    .text
    .global setjmp
    .type setjmp, %function
setjmp:
    sd      s0, 0(a0)
    sd      s1, 8(a0)
    sd      s2, 16(a0)
    sd      s3, 24(a0)
    sd      s4, 32(a0)
    sd      s5, 40(a0)
    sd      s6, 48(a0)
    sd      s7, 56(a0)
    sd      s8, 64(a0)
    sd      s9, 72(a0)
    sd      s10, 80(a0)
    sd      s11, 88(a0)
    sd      ra, 96(a0)
    sd      sp, 104(a0)
    li      a0, 0
    ret
    .size setjmp, . - setjmp

    .global longjmp
    .type longjmp, %function
longjmp:
    ld      s0, 0(a0)
    ld      s1, 8(a0)
    ld      s2, 16(a0)
    ld      s3, 24(a0)
    ld      s4, 32(a0)
    ld      s5, 40(a0)
    ld      s6, 48(a0)
    ld      s7, 56(a0)
    ld      s8, 64(a0)
    ld      s9, 72(a0)
    ld      s10, 80(a0)
    ld      s11, 88(a0)
    ld      ra, 96(a0)
    ld      sp, 104(a0)
    // setjmp returns val, or 1 if val is 0.
    seqz    a0, a1
    add     a0, a0, a1
    ret
    .size longjmp, . - longjmp
