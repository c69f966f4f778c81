/*
 * Scenario "recursion": self and mutual recursion.
 *
 *   rec_depth(12)  linear recursion, 13 nested frames (sum of 1..12)
 *   fib(10)        tree recursion, 177 calls, 10 frames deep
 *   rec_even(10)   mutual recursion rec_even <-> rec_odd, 11 frames deep; in
 *                  the -O2 builds both are shrink-wrapped: the n == 0 call
 *                  returns before the prologue, without a frame record
 *
 * BARRIER after each recursive call keeps GCC from turning the recursion
 * into loops (tail recursion elimination with an accumulator) and keeps the
 * mutual recursion from becoming tail calls.
 */
#include "guest.h"

NOIPA long rec_depth(long n)
{
    if (n == 0)
        return 0;
    long r = rec_depth(n - 1);
    BARRIER(r);
    return r + n;
}

NOIPA long fib(long n)
{
    if (n < 2)
        return n;
    long a = fib(n - 1);
    BARRIER(a);
    long b = fib(n - 2);
    BARRIER(b);
    return a + b;
}

NOIPA long rec_odd(long n);

NOIPA long rec_even(long n)
{
    if (n == 0)
        return 1;
    long r = rec_odd(n - 1);
    BARRIER(r);
    return r;
}

NOIPA long rec_odd(long n)
{
    if (n == 0)
        return 0;
    long r = rec_even(n - 1);
    BARRIER(r);
    return r;
}

int main(void)
{
    int bad = 0;

    bad += rt_check("rec_depth(12)", rec_depth(12), 78);
    bad += rt_check("fib(10)", fib(10), 55);
    bad += rt_check("rec_even(10)", rec_even(10), 1);
    return bad;
}
