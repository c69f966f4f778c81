/*
 * Scenario "longjmp": a longjmp out of three nested frames.
 *
 *   main ─ lj_outer(42) ─ setjmp                      returns 0
 *                      └─ lj_level1 ─ lj_level2 ─ lj_level3 ─ longjmp
 *                            longjmp `ret`s to setjmp's return address in
 *                            lj_outer: lj_level3, lj_level2, lj_level1 never
 *                            return normally
 *                      └─ lj_after(42)                setjmp returned 42
 *   main ─ lj_outer(0)  ─ setjmp, lj_level1 ─ lj_level2 ─ lj_level3, all
 *                         returning normally (no longjmp)
 *
 * setjmp/longjmp are the assembly functions in setjmp.S (not instrumented,
 * so they are absent from the oracle log). lj_after is a leaf.
 */
#include "guest.h"

typedef unsigned long jmp_buf[22];
int setjmp(jmp_buf env) __attribute__((returns_twice));
void longjmp(jmp_buf env, int val) __attribute__((noreturn));

static jmp_buf env;

NOIPA void lj_level3(long x)
{
    if (x > 0)
        longjmp(env, (int)x);
}

NOIPA long lj_level2(long x)
{
    lj_level3(x);
    BARRIER(x);
    return x + 1;
}

NOIPA long lj_level1(long x)
{
    long r = lj_level2(x);

    BARRIER(r);
    return r + 1;
}

NOIPA long lj_after(long v)
{
    return v * 2;
}

NOIPA long lj_outer(long x)
{
    long v = setjmp(env);

    if (v == 0) {
        long r = lj_level1(x);
        BARRIER(r);
        return r;
    }
    long r = lj_after(v);
    BARRIER(r);
    return r + 1;
}

int main(void)
{
    int bad = 0;

    /* longjmp(env, 42): lj_after(42) + 1 */
    bad += rt_check("lj_outer(42)", lj_outer(42), 85);
    /* no longjmp: 0 + 1 + 1 */
    bad += rt_check("lj_outer(0)", lj_outer(0), 2);
    return bad;
}
