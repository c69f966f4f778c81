/*
 * Extra "pageedge": calls that are the last word of a 4 KiB page, so their
 * returns land on the first word of the next page. There the plugin cannot
 * see the call in the landing block's own page and reads it from guest
 * memory instead (plugin/src/landing.rs).
 *
 *   main ─ edge_caller ─ edge_callee           (bl  at a page's last word)
 *        └ edge_indirect ─ edge_callee         (blr at a page's last word)
 */
#include "guest.h"

NOIPA long edge_callee(long x)
{
    return x * 2 + 1;
}

long edge_caller(long x);
long edge_indirect(long (*f)(long), long x);

/* Each function ends its page with the call; .skip puts the call at offset
 * 4092 (five and four instructions before it). */
__asm__(
    "    .pushsection .text.edge, \"ax\"\n"
    "    .balign 4096\n"
    "    .skip 4096 - 16\n"
    "    .global edge_caller\n"
    "    .type edge_caller, %function\n"
    "edge_caller:\n"
    "    stp x29, x30, [sp, #-16]!\n"
    "    mov x29, sp\n"
    "    nop\n"
    "    bl edge_callee\n"
    "    ldp x29, x30, [sp], #16\n"
    "    ret\n"
    "    .size edge_caller, . - edge_caller\n"
    "    .balign 4096\n"
    "    .skip 4096 - 20\n"
    "    .global edge_indirect\n"
    "    .type edge_indirect, %function\n"
    "edge_indirect:\n"
    "    stp x29, x30, [sp, #-16]!\n"
    "    mov x29, sp\n"
    "    mov x2, x0\n"
    "    mov x0, x1\n"
    "    blr x2\n"
    "    ldp x29, x30, [sp], #16\n"
    "    ret\n"
    "    .size edge_indirect, . - edge_indirect\n"
    "    .popsection\n");

int main(void)
{
    int bad = 0;

    for (long i = 0; i < 3; i++) {
        bad += rt_check("edge_caller", edge_caller(i), 2 * i + 1);
        bad += rt_check("edge_indirect", edge_indirect(edge_callee, i), 2 * i + 1);
    }
    return bad;
}
