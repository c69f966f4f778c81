/*
 * The coroutine of the bare-metal "coswitch" guest (coswitch.c, aarch64 and x86_64 builds),
 * which differ only in how they start it and print its log (user/coswitch.c keeps its own
 * copy: its signal-handler, fork and riscv64 variants are user mode's alone): main resumes
 * a coroutine, which yields back from three calls deep; main's next resume lands in co_yield
 * on the coroutine's stack, where no frame the tracer has open returns. The coroutine then
 * ends the run on its own stack: the includer's co_done prints the log and exits.
 *
 * Each function notes its entry (a store, no call) in log_: the entries-only log. The
 * includer defines CO_SECTION, the section the coroutine's functions sit in: below every
 * function open at the resync (a return whose landing function is not open is taken for a
 * longjmp into the innermost open function whose entry lies below the landing, so the
 * landing must lie below every open one to be the guess it really is).
 *
 * With -DVIA_LIB, co_outer reaches co_inner through co_via in a shared library
 * (user/coswitch-via.c), so the stack the resync lands on runs through that library's frame.
 */
#ifndef CO_SECTION
#error "define CO_SECTION, the coroutine's section, before including coswitch.h"
#endif

#define F __attribute__((noinline, noclone))
#define CO __attribute__((noinline, noclone, section(CO_SECTION)))
#define NOTE(name) (log_[nlog_++] = (name))

void switch_to(void **save, void *to);

static const char *log_[64];
static int nlog_;
static void *main_sp, *co_sp;
volatile int sink;

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

#ifdef VIA_LIB
void co_via(void (*f)(int), int n);
#endif

CO void co_outer(void)
{
    NOTE("co_outer");
#ifdef VIA_LIB
    co_via(co_inner, 1);
#else
    co_inner(1);
#endif
    co_leaf(3);
    sink++;
}

/* The includer's: prints log_ as `ENTRY name` lines and ends the run. */
CO __attribute__((noreturn)) void co_done(void);

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

/* switch_to(save, to): saves the callee-saved registers on this stack and its stack pointer
 * in *save, then takes the stack `to` and returns into what it holds. */
#if defined(__x86_64__)
__asm__(".text\n.globl switch_to\n.type switch_to,@function\nswitch_to:\n"
        "push %rbp\npush %rbx\npush %r12\npush %r13\npush %r14\npush %r15\n"
        "mov %rsp,(%rdi)\nmov %rsi,%rsp\n"
        "pop %r15\npop %r14\npop %r13\npop %r12\npop %rbx\npop %rbp\nret\n"
        ".size switch_to,.-switch_to\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl switch_to\n.type switch_to,%function\nswitch_to:\n"
        "sub sp, sp, #112\n"
        "stp x19, x20, [sp, #0]\nstp x21, x22, [sp, #16]\nstp x23, x24, [sp, #32]\n"
        "stp x25, x26, [sp, #48]\nstp x27, x28, [sp, #64]\nstp x29, x30, [sp, #80]\n"
        "mov x2, sp\nstr x2, [x0]\nmov sp, x1\n"
        "ldp x19, x20, [sp, #0]\nldp x21, x22, [sp, #16]\nldp x23, x24, [sp, #32]\n"
        "ldp x25, x26, [sp, #48]\nldp x27, x28, [sp, #64]\nldp x29, x30, [sp, #80]\n"
        "add sp, sp, #112\nret\n.size switch_to,.-switch_to\n");
#else
#error "x86_64 and aarch64 only"
#endif
