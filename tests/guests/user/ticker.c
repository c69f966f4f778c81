/*
 * A static glibc program that runs until a signal stops it, making few calls: tick() every
 * 20 ms of nanosleep, far fewer records a second than one buffer holds (the status and
 * signal tests of cli/tests/record_user_stop.rs). Prints "ticking" after its first tick.
 */
#include <stdio.h>
#include <time.h>

#define NOIPA __attribute__((noipa))

NOIPA long tick(long x)
{
    return x * 3 + 1;
}

int main(void)
{
    const struct timespec pause = {0, 20 * 1000 * 1000};
    /* A tick before the line: a test that stops the program as soon as it printed (a
     * signal may end it before its next instruction) still finds one in the trace. */
    long acc = tick(0);

    puts("ticking");
    fflush(stdout);
    for (;;) {
        acc = tick(acc) & 0xffff;
        nanosleep(&pause, NULL);
    }
}
