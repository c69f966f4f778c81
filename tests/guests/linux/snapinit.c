/*
 * /init of the snapshot guest (cli/tests/record_snapshot_linux.rs): PID 1 sleeps in read(2)
 * on the console five calls deep, and a child it forked prints the marker 100 ms later (so
 * that PID 1 is surely asleep when the test saves the machine), then sleeps too. A run from
 * that snapshot is given a line, and /init returns through the chain, calls snap_later,
 * spins in user mode long enough for timer interrupts to come there (snap_spin), and
 * powers off.
 *
 *   main > snap_a > snap_b > snap_c > snap_wait > read   (asleep in the kernel)
 *
 * Built like init.c (-fno-omit-frame-pointer -fno-optimize-sibling-calls, noipa): the calls
 * stay as written.
 */
#include <string.h>
#include <sys/reboot.h>
#include <time.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

NOIPA void say(const char *line)
{
    (void)!write(1, line, strlen(line));
}

/* Blocks in read(2) until a line arrives: the task sleeps in the kernel meanwhile. */
NOIPA int snap_wait(void)
{
    char buf[16];
    if (fork() == 0) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        say("SNAP: waiting\n");
        for (;;)
            pause();
    }
    return (int)read(0, buf, sizeof buf);
}

NOIPA int snap_c(void)
{
    return snap_wait() + 1;
}

NOIPA int snap_b(void)
{
    return snap_c() + 1;
}

NOIPA int snap_a(void)
{
    return snap_b() + 1;
}

NOIPA void snap_later(int n)
{
    say(n > 3 ? "SNAP: done\n" : "SNAP: FAILED\n");
}

/* Some 50 million instructions without a call or a system call: at Linux's 250 Hz,
 * timer interrupts surely come while it runs in user mode, however fast the host. */
NOIPA void snap_spin(void)
{
    for (volatile unsigned i = 0; i < 10000000; i++)
        ;
}

int main(void)
{
    snap_later(snap_a());
    snap_spin();
    sync();
    reboot(RB_POWER_OFF);
    return 1;
}
