/*
 * Scenario "trap" (riscv64, with trap_start.S): code at M, S and U level taking environment
 * calls and a timer interrupt, each served by a C handler that calls a known function and
 * returns with mret/sret:
 *
 *   M: m_main ─ m_work ─ m_leaf ×2
 *             ─ m_ecall      ecall from M (cause 11) → m_trap_handler ─ ecall_work
 *             ─ irq_window   machine timer interrupt  → m_trap_handler ─ irq_work
 *   S: s_main ─ s_work ─ s_leaf
 *             ─ s_ecall      ecall from S (cause 9, an SBI call) → m_trap_handler ─ ecall_work
 *   U: u_main ─ u_work
 *             ─ u_ecall      ecall from U (cause 8, delegated to S) → s_trap_handler ─ svc_work
 *
 * Functions run at M are named m_* (and irq_*, ecall_*), at S s_* (and svc_work), at U u_*.
 */
#include "../guest.h"

#define CLINT_MTIMECMP (*(volatile unsigned long *)0x2004000UL)
#define CLINT_MTIME (*(volatile unsigned long *)0x200bff8UL)
#define MIP_MTIP (1UL << 7)
#define MSTATUS_MIE (1UL << 3)
#define REG_A0 8 /* the saved a0's slot in the vectors' frame */

static volatile long irq_count;
static volatile unsigned long irq_cause;

NOIPA long m_leaf(long x)
{
    return x * 3 + 1;
}

NOIPA long m_work(long x)
{
    long r = m_leaf(x);
    BARRIER(r);
    return r + m_leaf(x + 1);
}

NOIPA long ecall_work(long x)
{
    BARRIER(x);
    return x * 7;
}

NOIPA void irq_work(void)
{
    irq_count++;
}

NOIPA long m_ecall(long x)
{
    register long a0 __asm__("a0") = x;
    __asm__ volatile("ecall" : "+r"(a0) : : "memory");
    return a0 + 1;
}

/* Arms the timer, opens interrupts and waits until the handler has run. */
NOIPA long irq_window(void)
{
    CLINT_MTIMECMP = CLINT_MTIME + 100;
    __asm__ volatile("csrs mie, %0" : : "r"(MIP_MTIP));
    __asm__ volatile("csrs mstatus, %0" : : "r"(MSTATUS_MIE));
    while (!irq_count)
        ;
    __asm__ volatile("csrc mstatus, %0" : : "r"(MSTATUS_MIE));
    return irq_count;
}

/* Called by m_vector: the new mepc. */
NOINSTR unsigned long m_trap_handler(unsigned long cause, unsigned long epc, long *regs)
{
    if ((long)cause < 0) {
        irq_cause = cause & 0xff;
        CLINT_MTIMECMP = ~0UL;
        irq_work();
        return epc;
    }
    regs[REG_A0] = ecall_work(regs[REG_A0]);
    return epc + 4;
}

NOIPA int m_main(void)
{
    int bad = 0;

    bad |= rt_check("m_work(2)", m_work(2), 7 + 10);
    bad |= rt_check("m_ecall(5)", m_ecall(5), 36);
    bad |= rt_check("irq_window()", irq_window(), 1);
    bad |= rt_check("irq_cause", (long)irq_cause, 7);
    return bad;
}

NOIPA long s_leaf(long x)
{
    return x + 100;
}

NOIPA long s_work(long x)
{
    long r = s_leaf(x);
    BARRIER(r);
    return r * 2;
}

NOIPA long s_ecall(long x)
{
    register long a0 __asm__("a0") = x;
    __asm__ volatile("ecall" : "+r"(a0) : : "memory");
    return a0 + 2;
}

NOIPA long svc_work(long x)
{
    BARRIER(x);
    return x + 1000;
}

/* Called by s_vector (environment calls from U): the new sepc. */
NOINSTR unsigned long s_trap_handler(unsigned long cause, unsigned long epc, long *regs)
{
    (void)cause;
    regs[REG_A0] = svc_work(regs[REG_A0]);
    return epc + 4;
}

NOIPA int s_main(void)
{
    int bad = 0;

    bad |= rt_check("s_work(1)", s_work(1), 202);
    bad |= rt_check("s_ecall(3)", s_ecall(3), 23);
    return bad;
}

NOIPA long u_work(long x)
{
    BARRIER(x);
    return x - 1;
}

NOIPA long u_ecall(long x)
{
    register long a0 __asm__("a0") = x;
    __asm__ volatile("ecall" : "+r"(a0) : : "memory");
    return a0 + 3;
}

NOIPA int u_main(void)
{
    int bad = 0;

    bad |= rt_check("u_work(9)", u_work(9), 8);
    bad |= rt_check("u_ecall(4)", u_ecall(4), 1007);
    return bad;
}
