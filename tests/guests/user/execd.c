/*
 * What forkexec.c's child execs: calls execd_step() EXECD_STEPS times, prints
 * "execd pid=<P> argv0=<A> argv1=<B>" and exits with 2.
 */
#include <stdio.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))
#define EXECD_STEPS 7

NOIPA long execd_step(long x)
{
    return x * 7 + 3;
}

int main(int argc, char **argv)
{
    long acc = 0;

    for (long i = 0; i < EXECD_STEPS; i++)
        acc += execd_step(i);
    printf("execd pid=%d argv0=%s argv1=%s acc=%ld\n", (int)getpid(), argv[0],
           argc > 1 ? argv[1] : "", acc);
    return 2;
}
