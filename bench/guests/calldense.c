/*
 * Call-dense benchmark guest: ITERS iterations of a small call tree,
 * 4 calls each (20 million calls by default), then exit via semihosting.
 *
 *   main ─ (ITERS x) cd_top ─ cd_mid ─ cd_leaf
 *                                   └─ cd_leaf
 *
 * cd_leaf is a leaf (no frame record); cd_top and cd_mid are ordinary
 * non-leaf functions (no tail calls).
 */
#include "guest.h"

#ifndef ITERS
#define ITERS 5000000L
#endif

/* Enough work per leaf that the plain run takes about a second: the
 * benchmark measures tracing overhead relative to a realistic workload. */
#ifndef LEAF_WORK
#define LEAF_WORK 48
#endif

NOIPA long cd_leaf(long x)
{
    for (int i = 0; i < LEAF_WORK; i++) {
        x = (x ^ (x >> 3)) + i;
        BARRIER(x);
    }
    return x + 1;
}

NOIPA long cd_mid(long x)
{
    long a = cd_leaf(x);

    BARRIER(a);
    return a + cd_leaf(a);
}

NOIPA long cd_top(long x)
{
    long r = cd_mid(x);

    BARRIER(r);
    return r + 1;
}

int main(void)
{
    long sum = 0;

    for (long i = 0; i < ITERS; i++)
        sum += cd_top(i);
    rt_puts("calldense: ");
    rt_put_dec(ITERS * 4);
    rt_puts(" calls, checksum ");
    rt_put_hex((unsigned long)sum);
    rt_putc('\n');
    return 0;
}
