/*
 * Scenario "tailcall": functions whose last action is `return g(...)`. In
 * the natural and -nofp builds (-O2) GCC emits these as sibling calls, i.e.
 * `b g` / `br xN` instead of `bl` + `ret`, so g returns straight to the
 * tail-caller's caller. (The -oracle build calls the exit hook after g
 * returns, so there they are ordinary calls.)
 *
 *   TAIL  tail_a        -> b  tail_b        (frameless tail call)
 *   TAIL  tail_b        -> b  tail_c        (chained: tail_a -> tail_b -> tail_c)
 *   TAIL  tail_to_leaf  -> b  tail_leaf     (tail call to a leaf)
 *   TAIL  tail_via_ptr  -> br xN            (indirect tail call to tail_c)
 *   TAIL  tail_mixed    -> bl tail_leaf, then tears its frame down and
 *                          b tail_c          (tail call after a real call)
 *         tail_c        -> bl tail_leaf     (ordinary call)
 *         tail_leaf        leaf
 *         tail_driver   calls all of the above, no tail call
 */
#include "guest.h"

typedef long (*unary_fn)(long);

NOIPA long tail_leaf(long x)
{
    return x * 7;
}

NOIPA long tail_c(long x)
{
    long r = tail_leaf(x);

    BARRIER(r);
    return r + 1;
}

NOIPA long tail_b(long x)
{
    return tail_c(x * 2); /* tail call */
}

NOIPA long tail_a(long x)
{
    return tail_b(x + 1); /* tail call */
}

NOIPA long tail_to_leaf(long x)
{
    return tail_leaf(x + 3); /* tail call */
}

NOIPA long tail_via_ptr(unary_fn fn, long x)
{
    return fn(x - 1); /* indirect tail call */
}

NOIPA long tail_mixed(long x)
{
    long r = tail_leaf(x);

    BARRIER(r);
    return tail_c(r); /* tail call after a call */
}

NOIPA long tail_driver(long x)
{
    long a = tail_a(x);         /* tail_c(2(x+1)) = 14(x+1)+1 */
    BARRIER(a);
    long b = tail_to_leaf(x);   /* 7(x+3) */
    BARRIER(b);
    long c = tail_via_ptr(tail_c, x); /* 7(x-1)+1 */
    BARRIER(c);
    long d = tail_mixed(x);     /* 49x+1 */
    BARRIER(d);
    return a + b + c + d;
}

int main(void)
{
    /* x = 2: 43 + 35 + 8 + 99 */
    int bad = rt_check("tail_driver(2)", tail_driver(2), 185);

    BARRIER(bad); /* keeps main itself free of tail calls */
    return bad;
}
