/*
 * Scenario "fnptr": indirect calls (BLR).
 *
 *   main ─ fp_apply_all ─ fp_apply ─BLR→ op_add | op_sub | op_twice_sum ─ op_add
 *   main ─BLR→ op_sub                (through a volatile pointer)
 *   main ─ table_call ─→ op_twice_sum ─ op_add   (through a pointer in a struct:
 *                                      x86's `call *(%rdi)`, which loads its target)
 *
 * op_add and op_sub are leaves; fp_apply uses the result after the call, so
 * its BLR is a real call, not a tail call (BR).
 */
#include "guest.h"

typedef long (*op_fn)(long, long);

NOIPA long op_add(long a, long b)
{
    return a + b;
}

NOIPA long op_sub(long a, long b)
{
    return a - b;
}

NOIPA long op_twice_sum(long a, long b)
{
    long r = op_add(a, b);

    BARRIER(r);
    return r * 2;
}

NOIPA long fp_apply(op_fn fn, long a, long b)
{
    long r = fn(a, b);

    BARRIER(r);
    return r;
}

static const op_fn ops[] = { op_add, op_sub, op_twice_sum };

NOIPA long fp_apply_all(long a, long b)
{
    long sum = 0;

    for (unsigned long i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        sum += fp_apply(ops[i], a, b);
    return sum;
}

struct op_table {
    op_fn fn;
};

/* The call reads its target from the table: x86 makes it one `call *(%reg)`. */
NOIPA long table_call(const struct op_table *t, long a, long b)
{
    long r = t->fn(a, b);

    BARRIER(r);
    return r;
}

static const struct op_table twice = { op_twice_sum };

/* volatile: main must load the pointer and BLR through it. */
static op_fn volatile direct_op = op_sub;

int main(void)
{
    int bad = 0;

    /* 10 + 4 + 20 */
    bad += rt_check("fp_apply_all(7, 3)", fp_apply_all(7, 3), 34);
    bad += rt_check("direct_op(10, 4)", direct_op(10, 4), 6);
    bad += rt_check("table_call(5, 6)", table_call(&twice, 5, 6), 22);
    return bad;
}
