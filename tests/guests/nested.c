/*
 * Scenario "nested": plain direct calls, 5 levels below main.
 *
 *   main ─ nest_level1 ─ nest_level2 ─ nest_level3 ─ nest_level4 ─ nest_leaf
 *                     └─ nest_leaf                └─ nest_level4 ─ nest_leaf
 *
 * nest_leaf is a leaf (no frame record in the natural build); every other
 * function does work after its calls, so none of them is a tail call.
 */
#include "guest.h"

NOIPA long nest_leaf(long x)
{
    return x * 3 + 1;
}

NOIPA long nest_level4(long x)
{
    long r = nest_leaf(x);

    BARRIER(r);
    return r + 4;
}

NOIPA long nest_level3(long x)
{
    long a = nest_level4(x);
    long b = nest_level4(x + 1);

    return a + b;
}

NOIPA long nest_level2(long x)
{
    long r = nest_level3(x);

    BARRIER(r);
    return r * 2;
}

NOIPA long nest_level1(long x)
{
    long a = nest_level2(x);
    long b = nest_leaf(a);

    return a + b;
}

int main(void)
{
    int bad = 0;

    /* level3(1) = 8 + 11 = 19, level2 = 38, leaf(38) = 115 -> 153 */
    bad += rt_check("nest_level1(1)", nest_level1(1), 153);
    /* level3(2) = 11 + 14 = 25, level2 = 50, leaf(50) = 151 -> 201 */
    bad += rt_check("nest_level1(2)", nest_level1(2), 201);
    return bad;
}
