/*
 * Scenario "leaf": functions that call nothing. In the natural build (-O2,
 * frame pointers, -momit-leaf-frame-pointer) none of leaf_add, leaf_mix,
 * leaf_stack has a frame record or saves x30; leaf_stack still moves sp for
 * its local array.
 *
 *   main ─ leaf_caller ─ (4x) leaf_add, leaf_mix, leaf_stack
 *   main ─ leaf_add
 */
#include "guest.h"

NOIPA long leaf_add(long a, long b)
{
    return a + b;
}

NOIPA long leaf_mix(unsigned long x)
{
    x ^= x >> 7;
    x *= 0x9e3779b97f4a7c15UL;
    return (long)(x >> 40);
}

NOIPA long leaf_stack(long n)
{
    volatile long buf[8];
    long sum = 0;

    for (int i = 0; i < 8; i++)
        buf[i] = n + i;
    for (int i = 0; i < 8; i++)
        sum += buf[i];
    return sum;
}

NOIPA long leaf_caller(long x)
{
    long acc = 0;

    for (long i = 0; i < 4; i++) {
        acc = leaf_add(acc, x + i);
        acc += leaf_mix((unsigned long)acc) & 0xff;
        acc += leaf_stack(i);
    }
    return acc;
}

int main(void)
{
    int bad = 0;
    long r = leaf_caller(5);

    /* Value computed on the host from the same arithmetic. */
    bad += rt_check("leaf_caller(5)", r, 797);
    bad += rt_check("leaf_add(2, 3)", leaf_add(2, 3), 5);
    return bad;
}
