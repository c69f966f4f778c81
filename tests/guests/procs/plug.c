/* The library /worker loads with dlopen (the process tests): plug_step is called through
 * the pointer dlsym gives, PLUG_STEPS times per worker, then plug_tail once. */
#include <unistd.h>

__attribute__((noipa, noinline)) long plug_step(long acc)
{
    return acc + getppid();
}

static __attribute__((noipa, noinline)) long plug_add(long acc, long n)
{
    return acc + n;
}

/* Leaves by a tail call (a jump to plug_add, whose return gives its value), the one
 * function here built so: the Makefile keeps every other call a call. */
__attribute__((noipa, noinline, optimize("optimize-sibling-calls"))) long plug_tail(long acc)
{
    return plug_add(acc, 2);
}
