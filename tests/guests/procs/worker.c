/*
 * The second program of the process tests: /init runs it twice. Each run calls
 * worker_step WORKER_STEPS times, each making one getpid(2), and formats its result with
 * snprintf from libc.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "counts.h"

#define NOIPA __attribute__((noipa, noinline))

NOIPA long worker_step(long acc)
{
    return acc + getpid();
}

NOIPA void worker_report(const char *tag, long acc)
{
    char line[64];
    snprintf(line, sizeof line, "WORKER %s: %ld\n", tag, acc);
    (void)!write(1, line, strlen(line));
}

int main(int argc, char **argv)
{
    long acc = 0;
    for (int i = 0; i < WORKER_STEPS; i++)
        acc = worker_step(acc);
    worker_report(argc > 1 ? argv[1] : "-", acc);
    return 0;
}
