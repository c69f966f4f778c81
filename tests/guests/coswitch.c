/*
 * Scenario "coswitch": a stack switch without frame pointers on bare metal
 * (cli/tests/record_system_resync.rs), built -O2 -fomit-frame-pointer. main starts a
 * coroutine on its own stack (co_start calls co_entry there); the coroutine yields back from
 * three calls deep (a return to main's co_start call: the frames between close). main then
 * resumes it: the switch returns into co_yield on the coroutine's stack, where no frame the
 * tracer has open returns and no frame record tells the stack: a resync it can only guess,
 * or unwind with the ELF's tables. The coroutine then ends the run on its own stack
 * (co_done).
 *
 * Each function notes its entry (a store, no call); co_done prints them ("ENTRY name"): the
 * entries-only log. The coroutine's functions sit in .text.start, after start.S's code (the
 * Makefiles link start.o first) and below every other: a return landing after a call is
 * taken for a longjmp into the innermost open function whose entry lies below the call, so
 * the landing must lie below every open one to be the guess it really is.
 */
#include "guest.h"

#define F __attribute__((noinline, noclone))
#define CO __attribute__((noinline, noclone, section(".text.start")))
#define NOTE(name) (log_[nlog_++] = (name))

void co_start(void **save, void *stack_top, void (*fn)(void));
void switch_to(void **save, void *to);

static const char *log_[64];
static int nlog_;
static void *main_sp, *co_sp;
volatile int sink;
static char co_stack[16 * 1024] __attribute__((aligned(16)));

CO void co_leaf(int x)
{
    NOTE("co_leaf");
    sink += x;
}

CO void co_yield(void)
{
    NOTE("co_yield");
    switch_to(&co_sp, main_sp);
    sink++; /* no tail call: co_yield's frame stays open across the switch */
}

CO void co_inner(int n)
{
    NOTE("co_inner");
    co_leaf(n);
    co_yield();
    co_leaf(n + 1);
    sink++; /* no tail calls here either: every frame returns */
}

CO void co_outer(void)
{
    NOTE("co_outer");
    co_inner(1);
    co_leaf(3);
    sink++;
}

CO __attribute__((noreturn)) void co_done(void)
{
    NOTE("co_done");
    for (int i = 0; i < nlog_; i++) {
        rt_puts("ENTRY ");
        rt_puts(log_[i]);
        rt_puts("\n");
    }
    rt_exit(rt_fini(0));
}

CO __attribute__((noreturn)) void co_entry(void)
{
    NOTE("co_entry");
    co_outer();
    co_done();
}

F void resume(void)
{
    NOTE("resume");
    switch_to(&main_sp, co_sp);
}

F void m_leaf(int x)
{
    NOTE("m_leaf");
    sink += x;
}

int main(void)
{
    NOTE("main");
    co_start(&main_sp, co_stack + sizeof co_stack, co_entry);
    m_leaf(1);
    resume();
    return 1;
}

/* switch_to(save, to): saves the callee-saved registers on this stack and its stack pointer
 * in *save, then takes the stack `to` and returns into what it holds. co_start(save, top,
 * fn) saves the same way, then calls fn on the stack ending at top with a zero frame
 * pointer (as code without frame pointers leaves it); switching back to what it saved
 * returns from co_start. */
#if defined(__x86_64__)
__asm__(".text\n.globl switch_to\n.type switch_to,@function\nswitch_to:\n"
        "push %rbp\npush %rbx\npush %r12\npush %r13\npush %r14\npush %r15\n"
        "mov %rsp,(%rdi)\nmov %rsi,%rsp\n"
        "pop %r15\npop %r14\npop %r13\npop %r12\npop %rbx\npop %rbp\nret\n"
        ".size switch_to,.-switch_to\n"
        ".globl co_start\n.type co_start,@function\nco_start:\n"
        "push %rbp\npush %rbx\npush %r12\npush %r13\npush %r14\npush %r15\n"
        "mov %rsp,(%rdi)\nmov %rsi,%rsp\nxor %ebp,%ebp\ncall *%rdx\nud2\n"
        ".size co_start,.-co_start\n");
#else
__asm__(".text\n.globl switch_to\n.type switch_to,%function\nswitch_to:\n"
        "sub sp, sp, #112\n"
        "stp x19, x20, [sp, #0]\nstp x21, x22, [sp, #16]\nstp x23, x24, [sp, #32]\n"
        "stp x25, x26, [sp, #48]\nstp x27, x28, [sp, #64]\nstp x29, x30, [sp, #80]\n"
        "mov x2, sp\nstr x2, [x0]\nmov sp, x1\n"
        "ldp x19, x20, [sp, #0]\nldp x21, x22, [sp, #16]\nldp x23, x24, [sp, #32]\n"
        "ldp x25, x26, [sp, #48]\nldp x27, x28, [sp, #64]\nldp x29, x30, [sp, #80]\n"
        "add sp, sp, #112\nret\n.size switch_to,.-switch_to\n"
        ".globl co_start\n.type co_start,%function\nco_start:\n"
        "sub sp, sp, #112\n"
        "stp x19, x20, [sp, #0]\nstp x21, x22, [sp, #16]\nstp x23, x24, [sp, #32]\n"
        "stp x25, x26, [sp, #48]\nstp x27, x28, [sp, #64]\nstp x29, x30, [sp, #80]\n"
        "mov x3, sp\nstr x3, [x0]\nmov sp, x1\nmov x29, xzr\nblr x2\nbrk #0\n"
        ".size co_start,.-co_start\n");
#endif
