/*
 * A static glibc program interrupted by SIGALRM: a timer fires while main's busy loop calls
 * spin_step() over and over (spin() arms it first, through arm()); the handler calls on_alarm(), which arms it again until the
 * ALARMS-th, and the loop ends then. Output: "alarms=<n> steps=<m>".
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define NOIPA __attribute__((noipa))
#define ALARMS 3

static volatile sig_atomic_t alarms;

/* One alarm at a time: each arms the next, so no extra one can be pending once the last
 * has come (an interval timer could fire once more before it was stopped). */
static const struct itimerval once = {{0, 0}, {0, 2000}};

NOIPA void on_alarm(int sig)
{
    if (sig == SIGALRM && ++alarms < ALARMS)
        setitimer(ITIMER_REAL, &once, NULL); /* async-signal-safe */
}

NOIPA void handler(int sig)
{
    on_alarm(sig);
}

NOIPA long spin_step(long x)
{
    return x * 3 + 1;
}

/* Armed from inside spin(): a loaded host may stall the guest for more than the first 2 ms
 * anywhere, and an alarm taken before spin() was entered would interrupt main instead. */
NOIPA int arm(void)
{
    return setitimer(ITIMER_REAL, &once, NULL);
}

NOIPA long spin(void)
{
    long acc = 0, steps = 0;

    if (arm() != 0)
        return -1;
    while (alarms < ALARMS) {
        acc += spin_step(steps);
        steps++;
    }
    return steps + (acc & 0);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0)
        return 1;
    long steps = spin();
    if (steps < 0)
        return 1;
    printf("alarms=%d steps=%ld\n", (int)alarms, steps);
    return 0;
}
