/*
 * A static glibc program whose signal handler runs as a plain function before it is
 * installed: main() calls handler() directly (so QEMU has translated its code), installs it
 * for SIGUSR1, then raises SIGUSR1 ROUNDS times from poke(). Each delivery must still show
 * as an entry with the handler beneath. Output: "direct=1 delivered=<n>".
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define NOIPA __attribute__((noipa))
#define ROUNDS 2

static volatile int direct, delivered;

NOIPA void on_signal(int sig)
{
    if (sig == SIGUSR1)
        delivered++;
    else
        direct++;
}

NOIPA void handler(int sig)
{
    on_signal(sig);
}

NOIPA void poke(void)
{
    raise(SIGUSR1);
}

int main(void)
{
    handler(0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 1;
    for (int k = 0; k < ROUNDS; k++)
        poke();
    printf("direct=%d delivered=%d\n", direct, delivered);
    return 0;
}
