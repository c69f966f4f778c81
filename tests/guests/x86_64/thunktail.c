/*
 * Scenario "thunktail": indirect calls and tail calls through a retpoline, as an x86_64
 * Linux kernel built with retpolines makes them (cli/tests/record_guests_x86_64.rs). Built
 * with -mindirect-branch=thunk-extern: a call through a pointer is `call
 * __x86_indirect_thunk_<reg>`, a tail call through one `jmp __x86_indirect_thunk_<reg>`.
 * The thunks are the kernel's (arch/x86/lib/retpoline.S): `call 1f; 2: pause; lfence; jmp
 * 2b; 1: mov %reg,(%rsp); ret`, the `ret` branching to the pointer.
 *
 *   tt_driver   -> tt_via_thunk (direct call)
 *   tt_via_thunk-> jmp thunk -> tt_callee      (indirect tail call through the retpoline)
 *   tt_callee   -> tt_leaf (direct call)
 *   tt_driver   -> tt_via_thunk -> jmp thunk -> tt_leaf (to a leaf: its return is the next
 *                                                event, right after the thunk's own)
 *   tt_driver   -> call thunk -> tt_chain      (indirect call through the retpoline)
 *   tt_chain    -> jmp tt_via_thunk -> jmp thunk -> tt_leaf
 *   tt_driver   -> tt_leaf (after them all: nested in tt_driver)
 *
 * Each function notes its entry (a store, no call); main prints them ("ENTRY name"): the
 * entries-only log (-finstrument-functions' exit hook would keep the sibling calls from
 * being made).
 */
#include "../guest.h"

#define NOTE(name) (log_[nlog_++] = (name))

typedef long (*unary_fn)(long);

static const char *log_[64];
static int nlog_;
volatile long sink;

NOIPA long tt_leaf(long x)
{
    NOTE("tt_leaf");
    return x * 7;
}

NOIPA long tt_callee(long x)
{
    NOTE("tt_callee");
    long r = tt_leaf(x);

    BARRIER(r);
    return r + 1;
}

NOIPA long tt_via_thunk(unary_fn fn, long x)
{
    NOTE("tt_via_thunk");
    return fn(x - 1); /* jmp __x86_indirect_thunk_<reg> */
}

NOIPA long tt_chain(long x)
{
    NOTE("tt_chain");
    return tt_via_thunk(tt_leaf, x + 1);
}

NOIPA long tt_driver(unary_fn fn, long x)
{
    NOTE("tt_driver");
    long a = tt_via_thunk(tt_callee, x); /* 7(x-1)+1 */
    BARRIER(a);
    long b = tt_via_thunk(tt_leaf, a); /* 7(a-1) */
    BARRIER(b);
    long c = fn(x); /* call __x86_indirect_thunk_<reg>: tt_chain, 7x */
    BARRIER(c);
    long d = tt_leaf(c); /* 7c */
    BARRIER(d);
    return a + b + c + d;
}

int main(void)
{
    NOTE("main");
    unary_fn chain = tt_chain;
    BARRIER(chain);
    /* x = 3: 15 + 98 + 21 + 147 */
    int bad = rt_check("tt_driver(3)", tt_driver(chain, 3), 281);
    for (int i = 0; i < nlog_; i++) {
        rt_puts("ENTRY ");
        rt_puts(log_[i]);
        rt_puts("\n");
    }
    BARRIER(bad); /* keeps main itself free of tail calls */
    return bad;
}

/* The kernel's retpolines, one per register as arch/x86/lib/retpoline.S makes them (GCC
 * picks the register: rdx for tt_via_thunk's jump, r13 for tt_driver's call). */
__asm__(".text\n"
        ".irp reg, rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15\n"
        ".globl __x86_indirect_thunk_\\reg\n"
        ".type __x86_indirect_thunk_\\reg,@function\n"
        "__x86_indirect_thunk_\\reg:\n"
        "call 1f\n2: pause\nlfence\njmp 2b\n1: mov %\\reg,(%rsp)\nret\n"
        ".size __x86_indirect_thunk_\\reg,.-__x86_indirect_thunk_\\reg\n"
        ".endr\n");
