/*
 * Scenario "el3": firmware-style. Starts at EL3 (start_el3.S), drops to
 * Non-secure EL1 with ERET, and at EL1 takes an SVC, an interrupt and an SMC
 * back to EL3, each served by a C handler that calls a known function.
 *
 *   EL3:  el3_main ─ el3_gic_init
 *                  └ el3_sum ─ el3_leaf ×3
 *         (ERET to EL1)
 *   EL1:  main ─ el1_work ─ el1_leaf ×2
 *              ├ do_syscall ── svc #0 → [svc] el1_svc_handler ─ svc_work
 *              ├ irq_setup
 *              ├ irq_window ── SGI 3 → [irq] el1_irq_handler ─ irq_work
 *              └ firmware_call ── smc #0 → [smc] el3_smc_handler ─ el3_smc_work (EL3)
 *
 * The exceptions are taken at known instructions: the svc and smc are in
 * do_syscall and firmware_call; the SGI is made pending while IRQs are masked
 * and irq_window unmasks them, so it is taken right after that `msr daifclr`.
 * The oracle build logs the handlers as nested in the function that was
 * running (they are called with its x29), so its log is the exact call
 * sequence without the exception entries.
 *
 * Functions run at EL3 are named el3_*; all others run at EL1.
 *
 * The GIC is QEMU virt's GICv2 (gic-version=2) with the Security Extensions
 * (secure=on). At reset every interrupt is Group 0 (Secure): EL3 puts the
 * SGIs/PPIs in Group 1 (Non-secure), which the CPU interface signals as IRQ
 * (FIQEn is 0), enables the distributor and opens the priority mask; EL1
 * enables its interrupt and its CPU interface through the Non-secure view.
 */
#include "guest.h"

#define GICD_BASE 0x08000000UL
#define GICC_BASE 0x08010000UL
#define REG32(a) (*(volatile unsigned int *)(a))
#define GICD_CTLR REG32(GICD_BASE + 0x000)
#define GICD_IGROUPR0 REG32(GICD_BASE + 0x080)
#define GICD_ISENABLER0 REG32(GICD_BASE + 0x100)
#define GICD_IPRIORITYR0 REG32(GICD_BASE + 0x400) /* SGIs 0-3, a byte each */
#define GICD_SGIR REG32(GICD_BASE + 0xf00)
#define GICC_CTLR REG32(GICC_BASE + 0x000)
#define GICC_PMR REG32(GICC_BASE + 0x004)
#define GICC_IAR REG32(GICC_BASE + 0x00c)
#define GICC_EOIR REG32(GICC_BASE + 0x010)

#define SGI_ID 3
/* SMC Calling Convention: fast call, SMC64, owner SiP (2), function 1. QEMU
 * answers PSCI function IDs itself on this machine (its PSCI conduit is SMC
 * when no firmware is loaded), and only those: this one reaches EL3. */
#define SIP_FUNCTION_ID 0xc2000001UL
#define EC_SVC64 0x15
#define EC_SMC64 0x17

void rt_unexpected(long level, long offset) __attribute__((noreturn));
int el3_main(void);
long el1_svc_handler(long arg, unsigned long esr);
void el1_irq_handler(void);
long el3_smc_handler(long function_id, long arg, unsigned long esr);

/* A macro, not a function: it must not show up as a call. */
#define CURRENT_EL()                                       \
    ({                                                     \
        unsigned long el_;                                 \
        __asm__ volatile("mrs %0, CurrentEL" : "=r"(el_)); \
        (long)((el_ >> 2) & 3);                            \
    })

/* ---- EL3 ---------------------------------------------------------------- */

NOIPA long el3_leaf(long x)
{
    return x * 5 + 2;
}

NOIPA long el3_sum(long n)
{
    long s = 0;

    for (long i = 0; i < n; i++) {
        long v = el3_leaf(i);

        BARRIER(v);
        s += v;
    }
    return s;
}

/* The Secure-only part of the GIC setup. */
NOIPA void el3_gic_init(void)
{
    GICD_IGROUPR0 = 0xffffffffu; /* SGIs and PPIs: Group 1, Non-secure */
    GICD_CTLR = 3;               /* EnableGrp0 | EnableGrp1 (Secure view) */
    /* The priority mask resets to 0 (everything masked), and Non-secure
     * writes to it are ignored while it is below 0x80: open it from here. */
    GICC_PMR = 0xff;
}

int el3_main(void)
{
    int bad = 0;

    bad += rt_check("EL3 CurrentEL", CURRENT_EL(), 3);
    el3_gic_init();
    /* el3_leaf(0..2) = 2 + 7 + 12 */
    bad += rt_check("el3_sum(3)", el3_sum(3), 21);
    return bad;
}

NOIPA long el3_smc_work(long x)
{
    return x * 11;
}

/* Called from VBAR_EL3 + 0x400 for the smc in firmware_call. */
NOIPA long el3_smc_handler(long function_id, long arg, unsigned long esr)
{
    long r;

    if (((esr >> 26) & 0x3f) != EC_SMC64 || (unsigned long)function_id != SIP_FUNCTION_ID)
        rt_unexpected(3, 0x400);
    r = el3_smc_work(arg);
    BARRIER(r);
    return r + 1;
}

/* ---- Non-secure EL1 ------------------------------------------------------- */

static volatile int irq_count;
static volatile int irq_last;

NOIPA long el1_leaf(long x)
{
    return x * 7 - 1;
}

NOIPA long el1_work(long x)
{
    long a = el1_leaf(x);

    BARRIER(a);
    return a + el1_leaf(a);
}

NOIPA long svc_work(long x)
{
    return x * 3;
}

/* Called from VBAR_EL1 + 0x200 for the svc in do_syscall. */
NOIPA long el1_svc_handler(long arg, unsigned long esr)
{
    long r;

    if (((esr >> 26) & 0x3f) != EC_SVC64)
        rt_unexpected(1, 0x200);
    r = svc_work(arg);
    BARRIER(r);
    return r + 1;
}

/* A system call: the argument and the result in x0. */
NOIPA long do_syscall(long arg)
{
    register long x0 __asm__("x0") = arg;

    __asm__ volatile("svc #0" : "+r"(x0) : : "memory");
    return x0;
}

NOIPA void irq_work(int id)
{
    irq_last = id;
    irq_count = irq_count + 1;
}

/* Called from VBAR_EL1 + 0x280. Reading GICC_IAR acknowledges the interrupt,
 * writing it back to GICC_EOIR (EOImodeNS = 0) drops its priority and
 * deactivates it. A spurious interrupt (1023) calls nothing. */
NOIPA void el1_irq_handler(void)
{
    unsigned int iar = GICC_IAR;

    if ((iar & 0x3ff) == SGI_ID)
        irq_work((int)(iar & 0x3ff));
    GICC_EOIR = iar;
}

/* The Non-secure part of the GIC setup. */
NOIPA void irq_setup(void)
{
    GICD_IPRIORITYR0 = 0x80808080u; /* SGIs 0-3: a middle priority */
    GICD_ISENABLER0 = 1u << SGI_ID;
    GICC_CTLR = 1; /* Non-secure view: EnableGrp1 */
}

/* Makes SGI_ID pending on this CPU while IRQs are masked, then unmasks them:
 * the interrupt is taken right after the `msr daifclr` (QEMU ends the
 * translation block there to look at pending interrupts). The loop only
 * guards against an interrupt that never comes (the check in main fails). */
NOIPA long irq_window(void)
{
    /* TargetListFilter (bits 25:24) = 0b10: to the requesting CPU only. */
    GICD_SGIR = (2u << 24) | SGI_ID;
    __asm__ volatile("msr daifclr, #2\n\tisb" : : : "memory");
    for (long i = 0; i < 1000000 && irq_count == 0; i++)
        ;
    __asm__ volatile("msr daifset, #2" : : : "memory");
    return irq_count;
}

/* A call into the firmware at EL3, result in x0. */
NOIPA long firmware_call(long arg)
{
    register unsigned long x0 __asm__("x0") = SIP_FUNCTION_ID;
    register long x1 __asm__("x1") = arg;

    __asm__ volatile("smc #0" : "+r"(x0) : "r"(x1) : "memory");
    return (long)x0;
}

int main(void)
{
    int bad = 0;

    bad += rt_check("EL1 CurrentEL", CURRENT_EL(), 1);
    /* el1_leaf(2) = 13, el1_leaf(13) = 90 */
    bad += rt_check("el1_work(2)", el1_work(2), 103);
    /* svc_work(5) + 1 */
    bad += rt_check("do_syscall(5)", do_syscall(5), 16);
    irq_setup();
    bad += rt_check("irq_window()", irq_window(), 1);
    bad += rt_check("irq_last", irq_last, SGI_ID);
    /* el3_smc_work(4) + 1 */
    bad += rt_check("firmware_call(4)", firmware_call(4), 45);
    return bad;
}

/* An exception no vector expects, or a handler's check failing. */
NOINSTR void rt_unexpected(long level, long offset)
{
    rt_puts("UNEXPECTED EXCEPTION at EL");
    rt_put_dec(level);
    rt_puts(", vector offset 0x");
    rt_put_hex((unsigned long)offset);
    rt_putc('\n');
    rt_exit(90);
}
