/*
 * Scenario "coswitch": a stack switch without frame pointers on bare metal
 * (cli/tests/record_system_resync.rs), built -O2 -fomit-frame-pointer. main starts a
 * coroutine on its own stack (co_start calls co_entry there); the coroutine yields back from
 * three calls deep (a return to main's co_start call: the frames between close). main then
 * resumes it: the switch returns into co_yield on the coroutine's stack, where no frame the
 * tracer has open returns and no frame record tells the stack: a resync it can only guess,
 * or unwind with the ELF's tables. The coroutine then ends the run on its own stack
 * (co_done). The coroutine is coswitch.h's, shared with the user-mode guest.
 *
 * co_done prints the entries-only log ("ENTRY name"). The coroutine's functions sit in
 * .text.start, after start.S's code (the Makefiles link start.o first) and below every
 * other.
 */
#include "guest.h"

#define CO_SECTION ".text.start"
#include "coswitch.h"

void co_start(void **save, void *stack_top, void (*fn)(void));

static char co_stack[16 * 1024] __attribute__((aligned(16)));

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

int main(void)
{
    NOTE("main");
    co_start(&main_sp, co_stack + sizeof co_stack, co_entry);
    m_leaf(1);
    resume();
    return 1;
}

/* co_start(save, top, fn) saves the callee-saved registers as switch_to does, then calls fn
 * on the stack ending at top with a zero frame pointer (as code without frame pointers
 * leaves it); switching back to what it saved returns from co_start. */
#if defined(__x86_64__)
__asm__(".text\n.globl co_start\n.type co_start,@function\nco_start:\n"
        "push %rbp\npush %rbx\npush %r12\npush %r13\npush %r14\npush %r15\n"
        "mov %rsp,(%rdi)\nmov %rsi,%rsp\nxor %ebp,%ebp\ncall *%rdx\nud2\n"
        ".size co_start,.-co_start\n");
#else
__asm__(".text\n.globl co_start\n.type co_start,%function\nco_start:\n"
        "sub sp, sp, #112\n"
        "stp x19, x20, [sp, #0]\nstp x21, x22, [sp, #16]\nstp x23, x24, [sp, #32]\n"
        "stp x25, x26, [sp, #48]\nstp x27, x28, [sp, #64]\nstp x29, x30, [sp, #80]\n"
        "mov x3, sp\nstr x3, [x0]\nmov sp, x1\nmov x29, xzr\nblr x2\nbrk #0\n"
        ".size co_start,.-co_start\n");
#endif
