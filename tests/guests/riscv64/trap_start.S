// Entry and trap vectors of trap.elf (trap.c): the program runs at every RISC-V privilege
// level in turn, each level's C code called from here and returning here:
//   M: _start calls m_main, then drops to S with mret (mstatus.MPP = S, mepc = s_entry);
//   S: s_entry calls s_main, then drops to U with sret (sstatus.SPP = U, sepc = u_entry);
//   U: u_entry calls u_main, then rt_fini, and ends QEMU through the test device.
// Traps: m_vector (mtvec) serves everything not delegated, s_vector (stvec) the environment
// calls from U (medeleg bit 8). Each saves the caller-saved registers, calls its C handler
// with (cause, epc, saved registers), writes the epc it returns, restores, and returns with
// mret/sret.

#include "reset.inc"

    .section .text.start, "ax"
    .global _start
    .type _start, %function
_start:
    reset_to_c
    lla     t0, m_vector
    csrw    mtvec, t0
    // S and U may touch all memory (the UART, the test device): one PMP entry over it all.
    li      t0, -1
    csrw    pmpaddr0, t0
    li      t0, 0x1f            // NAPOT, R, W, X
    csrw    pmpcfg0, t0
    call    m_main
    // Environment calls from U go to S; everything else stays in M.
    li      t0, 1 << 8
    csrw    medeleg, t0
    lla     t0, s_vector
    csrw    stvec, t0
    li      t0, 3 << 11         // mstatus.MPP = S
    csrc    mstatus, t0
    li      t0, 1 << 11
    csrs    mstatus, t0
    lla     t0, s_entry
    csrw    mepc, t0
    li      ra, 0
    mret
    .size _start, . - _start

    .text
    .type s_entry, %function
s_entry:
    call    s_main
    li      t0, 1 << 8          // sstatus.SPP = U
    csrc    sstatus, t0
    lla     t0, u_entry
    csrw    sepc, t0
    li      ra, 0
    sret
    .size s_entry, . - s_entry

    .type u_entry, %function
u_entry:
    call    u_main
    call    rt_fini
    j       rt_exit
    .size u_entry, . - u_entry

// Saves ra, t0-t6, a0-a7 (16 slots; a0 at 8*8), calls \handler(cause, epc, regs), sets the
// epc it returns, restores and returns with \ret.
.macro vector name, cause, epc, handler, ret
    .global \name
    .type \name, %function
    .balign 4
\name:
    addi    sp, sp, -128
    sd      ra, 0(sp)
    sd      t0, 8(sp)
    sd      t1, 16(sp)
    sd      t2, 24(sp)
    sd      t3, 32(sp)
    sd      t4, 40(sp)
    sd      t5, 48(sp)
    sd      t6, 56(sp)
    sd      a0, 64(sp)
    sd      a1, 72(sp)
    sd      a2, 80(sp)
    sd      a3, 88(sp)
    sd      a4, 96(sp)
    sd      a5, 104(sp)
    sd      a6, 112(sp)
    sd      a7, 120(sp)
    csrr    a0, \cause
    csrr    a1, \epc
    mv      a2, sp
    call    \handler
    csrw    \epc, a0
    ld      ra, 0(sp)
    ld      t0, 8(sp)
    ld      t1, 16(sp)
    ld      t2, 24(sp)
    ld      t3, 32(sp)
    ld      t4, 40(sp)
    ld      t5, 48(sp)
    ld      t6, 56(sp)
    ld      a0, 64(sp)
    ld      a1, 72(sp)
    ld      a2, 80(sp)
    ld      a3, 88(sp)
    ld      a4, 96(sp)
    ld      a5, 104(sp)
    ld      a6, 112(sp)
    ld      a7, 120(sp)
    addi    sp, sp, 128
    \ret
    .size \name, . - \name
.endm

    vector  m_vector, mcause, mepc, m_trap_handler, mret
    vector  s_vector, scause, sepc, s_trap_handler, sret

    rt_exit_body
