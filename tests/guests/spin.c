/*
 * Runs until QEMU is stopped from outside (the CLI's signal tests): main calls
 * spin_tick forever, and spin_tick calls the leaf spin_work, which burns a few
 * thousand instructions so that the trace grows by only a few MB/s, then the
 * leaf spin_leaf, whose one block returns (a trigger there must take the
 * function in at its first instruction: record_switch.rs).
 */
#include "guest.h"

NOIPA long spin_work(long x)
{
    for (volatile int i = 0; i < 1000; i++)
        ;
    return x + 1;
}

NOIPA long spin_leaf(long x)
{
    return x ^ 1;
}

NOIPA long spin_tick(long x)
{
    long r = spin_work(x);

    BARRIER(r);
    r = spin_leaf(r);
    BARRIER(r);
    return r * 2;
}

int main(void)
{
    long x = 0;

    rt_puts("spinning until stopped\n");
    for (;;) {
        x = spin_tick(x) & 0xffff;
        BARRIER(x);
    }
}
