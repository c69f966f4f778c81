/*
 * The oracle: linked only into <prog>-oracle.elf, whose code is built with
 * -finstrument-functions. GCC calls the hooks below on every entry and exit
 * of an instrumented function; they log (kind, this_fn, call_site) in RAM and
 * rt_fini prints the log after main returns:
 *
 *   ORACLE-BEGIN
 *   E <this_fn hex> <call_site hex>
 *   X <this_fn hex> <call_site hex>
 *   ORACLE-END
 *
 * this_fn is the function's entry address, call_site the return address in
 * its caller (the instruction after the BL/BLR). The log is always balanced:
 * frames that longjmp discards never run their exit hook, so the hooks detect
 * the unwinding (see oracle_unwind_to) and log those frames' X lines,
 * innermost first, just before the next event of the frame longjmp landed in.
 *
 * The oracle build needs -fno-optimize-sibling-calls: otherwise GCC turns the
 * exit hook call at the end of a void function into `b
 * __cyg_profile_func_exit` after tearing the frame down, and the hook could
 * no longer tell which frame is exiting.
 */
#include "guest.h"

#define ORACLE_MAX_EVENTS 16384
#define ORACLE_MAX_DEPTH 512

struct event {
    unsigned long kind; /* 'E' or 'X' */
    void *fn;
    void *site;
};

struct frame {
    void *fn;
    void *site;
    void *fp; /* the instrumented function's frame pointer (x29) */
};

static struct event events[ORACLE_MAX_EVENTS];
static unsigned long n_events;
static int overflow;
static struct frame frames[ORACLE_MAX_DEPTH];
static unsigned long depth;

void __cyg_profile_func_enter(void *this_fn, void *call_site) NOINSTR;
void __cyg_profile_func_exit(void *this_fn, void *call_site) NOINSTR;

NOINSTR static void oracle_record(unsigned long kind, void *fn, void *site)
{
    if (n_events == ORACLE_MAX_EVENTS) {
        overflow = 1;
        return;
    }
    events[n_events].kind = kind;
    events[n_events].fn = fn;
    events[n_events].site = site;
    n_events++;
}

/*
 * Pops (logging X for) every frame above the live one whose frame pointer is
 * fp. Frames above it are gone only through longjmp. If no frame matches,
 * nothing is popped: the caller was not instrumented (e.g. _start).
 */
NOINSTR static void oracle_unwind_to(void *fp)
{
    unsigned long i = depth;

    while (i > 0 && frames[i - 1].fp != fp)
        i--;
    if (i == 0)
        return;
    while (depth > i) {
        depth--;
        oracle_record('X', frames[depth].fn, frames[depth].site);
    }
}

/*
 * The hooks are called right after the instrumented function's prologue, so
 * its x29 is its frame record; the hook's own frame record (which using
 * __builtin_frame_address forces) holds that x29 in its first slot.
 */
#ifdef __riscv
/* RISC-V's frame pointer points past its record: the caller's fp is at fp - 16. */
#define CALLER_FP(fp) (((void **)(fp))[-2])
#else
#define CALLER_FP(fp) (((void **)(fp))[0])
#endif

NOINSTR void __cyg_profile_func_enter(void *this_fn, void *call_site)
{
    void **hook_fp = __builtin_frame_address(0);
    void **fp = CALLER_FP(hook_fp);

    /* fp[0] is the caller's x29: everything above the caller's frame is dead. */
    oracle_unwind_to(CALLER_FP(fp));
    if (depth < ORACLE_MAX_DEPTH) {
        frames[depth].fn = this_fn;
        frames[depth].site = call_site;
        frames[depth].fp = fp;
        depth++;
    } else {
        overflow = 1;
    }
    oracle_record('E', this_fn, call_site);
}

NOINSTR void __cyg_profile_func_exit(void *this_fn, void *call_site)
{
    void **hook_fp = __builtin_frame_address(0);
    void *fp = CALLER_FP(hook_fp);

    oracle_unwind_to(fp);
    /* An unmatched exit is still logged: the test then sees an unbalanced log. */
    if (depth > 0 && frames[depth - 1].fp == fp && frames[depth - 1].fn == this_fn)
        depth--;
    oracle_record('X', this_fn, call_site);
}

NOINSTR void oracle_dump(void)
{
    rt_puts("ORACLE-BEGIN\n");
    for (unsigned long i = 0; i < n_events; i++) {
        rt_putc((char)events[i].kind);
        rt_putc(' ');
        rt_put_hex((unsigned long)events[i].fn);
        rt_putc(' ');
        rt_put_hex((unsigned long)events[i].site);
        rt_putc('\n');
    }
    if (overflow)
        rt_puts("ORACLE-OVERFLOW\n");
    rt_puts("ORACLE-END\n");
}
