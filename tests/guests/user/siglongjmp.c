/*
 * A static glibc program that leaves a signal handler with siglongjmp: attempt() sets a
 * jump point and calls deep1() -> deep2() -> deep3(), which raises SIGUSR1; the handler
 * calls on_signal() and jumps back, past deep3..deep1 and raise's own frames, to attempt(),
 * which then calls recovered(). ROUNDS rounds. Output: "rounds=<n> recovered=<m>".
 */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define NOIPA __attribute__((noipa))
#define ROUNDS 2

static sigjmp_buf jump;
static volatile int recoveries;

NOIPA void on_signal(int sig)
{
    (void)sig;
}

NOIPA void handler(int sig)
{
    on_signal(sig);
    siglongjmp(jump, sig);
}

NOIPA void deep3(int k)
{
    raise(SIGUSR1);
    printf("deep3 %d: not reached\n", k);
}

NOIPA void deep2(int k)
{
    deep3(k);
}

NOIPA void deep1(int k)
{
    deep2(k);
}

NOIPA void recovered(int sig)
{
    if (sig == SIGUSR1)
        recoveries++;
}

NOIPA void attempt(int k)
{
    int sig = sigsetjmp(jump, 1);
    if (sig == 0)
        deep1(k);
    else
        recovered(sig);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 1;
    for (int k = 0; k < ROUNDS; k++)
        attempt(k);
    printf("rounds=%d recovered=%d\n", ROUNDS, recoveries);
    return 0;
}
