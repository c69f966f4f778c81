/*
 * Scenario "coswitch": the bare-metal twin of user/coswitch.c (cli/tests/record_system_resync.rs),
 * built -O2 -fomit-frame-pointer. main resumes a coroutine twice. The first switch enters it
 * at co_entry; the coroutine yields back from three calls deep. The second switch lands in
 * co_yield on the coroutine's stack, where no frame the tracer saw is open and no frame
 * record tells the stack: a resync it can only guess, or unwind with the ELF's tables. The
 * coroutine then ends the run on its own stack (co_done).
 *
 * Each function notes its entry (a store, no call); co_done prints them ("ENTRY name"): the
 * entries-only log. The coroutine's functions sit in .text.start, after start.S's (the
 * Makefiles link start.o first): a return landing in a function that is not open is taken
 * for a longjmp into the innermost open function whose entry lies below the landing, so the
 * landing must lie below every open one to be the guess it really is.
 */
#include "guest.h"

#define F __attribute__((noinline, noclone))
#define CO __attribute__((noinline, noclone, section(".text.start")))
#define NOTE(name) (log_[nlog_++] = (name))

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
}

CO void co_inner(int n)
{
    NOTE("co_inner");
    co_leaf(n);
    co_yield();
    co_leaf(n + 1);
}

CO void co_outer(void)
{
    NOTE("co_outer");
    co_inner(1);
    co_leaf(3);
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
    void **sp = (void **)(co_stack + sizeof co_stack);
#if defined(__x86_64__)
    /* switch_to pops six registers and returns into co_entry, whose own return address
     * (0) ends the stack. */
    *--sp = 0;
    *--sp = (void *)co_entry;
    for (int i = 0; i < 6; i++)
        *--sp = 0;
#elif defined(__aarch64__)
    /* switch_to loads x19..x30 from 112 bytes: x30 (at 88) is co_entry, x29 0. */
    sp -= 14;
    for (int i = 0; i < 14; i++)
        sp[i] = 0;
    sp[11] = (void *)co_entry;
#else
#error "x86_64 and aarch64 only"
#endif
    co_sp = sp;
    resume();
    m_leaf(1);
    resume();
    return 1;
}

/* switch_to(save, to): saves the callee-saved registers on this stack and its stack pointer
 * in *save, then takes the stack `to` and returns into what it holds. */
#if defined(__x86_64__)
__asm__(".text\n.globl switch_to\n.type switch_to,@function\nswitch_to:\n"
        "push %rbp\npush %rbx\npush %r12\npush %r13\npush %r14\npush %r15\n"
        "mov %rsp,(%rdi)\nmov %rsi,%rsp\n"
        "pop %r15\npop %r14\npop %r13\npop %r12\npop %rbx\npop %rbp\nret\n"
        ".size switch_to,.-switch_to\n");
#else
__asm__(".text\n.globl switch_to\n.type switch_to,%function\nswitch_to:\n"
        "sub sp, sp, #112\n"
        "stp x19, x20, [sp, #0]\nstp x21, x22, [sp, #16]\nstp x23, x24, [sp, #32]\n"
        "stp x25, x26, [sp, #48]\nstp x27, x28, [sp, #64]\nstp x29, x30, [sp, #80]\n"
        "mov x2, sp\nstr x2, [x0]\nmov sp, x1\n"
        "ldp x19, x20, [sp, #0]\nldp x21, x22, [sp, #16]\nldp x23, x24, [sp, #32]\n"
        "ldp x25, x26, [sp, #48]\nldp x27, x28, [sp, #64]\nldp x29, x30, [sp, #80]\n"
        "add sp, sp, #112\nret\n.size switch_to,.-switch_to\n");
#endif
