/* Coroutine-like stack switches at -O2 without frame pointers (cli/tests/record_user_resync.rs).
 * main resumes a coroutine twice. The first switch enters it at co_entry; the coroutine
 * yields back from three calls deep. The second switch lands in co_yield on the coroutine's
 * stack, where no frame the tracer saw is open and no frame record tells the stack (no frame
 * pointers): a resync it can only guess, or unwind with the binary's tables. The coroutine
 * then finishes the run on its own stack (co_done exits).
 *
 * Each function notes its entry (a store, no call); co_done prints them: the entries-only
 * log. The coroutine's functions sit in .text.unlikely.*, which the linker places before all
 * other code: a return whose landing function is not open is taken for a longjmp into the
 * innermost open function whose entry lies below the landing, so the landing must lie below
 * every open one (crt1's __wrap_main on aarch64 included) to be the guess it really is.
 *
 * Built with -DVIA_LIB, co_outer reaches co_inner through co_via in a shared library
 * (coswitch-via.c), so the stack the resync lands on runs through that library's frame.
 * The dynamic builds (-DOWN_START -nostartfiles) enter main from their own _start: glibc's
 * start code is in libc, which qemu-aarch64 maps below the program, and its open frames
 * would lie below the landing (libc's initialisers run from ld.so all the same).
 *
 * Built with -DIN_HANDLER, co_inner does not yield itself: co_wait sends itself SIGUSR1,
 * whose handler (installed by sigaction, without a restorer of its own: arm64's glibc gives
 * none, so the kernel's, here QEMU's, vDSO trampoline is the handler's return address)
 * yields. The resync then lands inside the handler, on a stack that runs through the
 * signal frame into kill and co_wait.
 *
 * Built with -DIN_CHILD, main forks first and the child does it all (the parent waits and
 * prints `CHILD <pid>`): the child's resync is unwound with the files it inherited. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define F __attribute__((noinline, noclone))
#define CO __attribute__((noinline, noclone, section(".text.unlikely.coroutine")))
#define NOTE(name) (log_[nlog_++] = (name))

void switch_to(void **save, void *to);

static const char *log_[64];
static int nlog_;
static void *main_sp, *co_sp;
volatile int sink;
static char co_stack[64 * 1024] __attribute__((aligned(16)));

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

#ifdef IN_HANDLER
static volatile sig_atomic_t handled;

CO void co_handler(int sig)
{
	NOTE("co_handler");
	co_yield();
	handled = sig;
}

CO void co_wait(void)
{
	struct timespec now;

	NOTE("co_wait");
	/* A call into the vDSO (glibc's clock_gettime), for its name in the trace. */
	clock_gettime(CLOCK_MONOTONIC, &now);
	kill(getpid(), SIGUSR1);
	while (!handled)
		;
}
#endif

CO void co_inner(int n)
{
	NOTE("co_inner");
	co_leaf(n);
#ifdef IN_HANDLER
	co_wait();
#else
	co_yield();
#endif
	co_leaf(n + 1);
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
}

/* co_entry before co_done, whose last instruction is its call to exit: an entry right
 * after a call looks like a return address (RISC-V pads nothing between functions; its
 * build keeps the order they are first declared in, -fno-toplevel-reorder). */
CO __attribute__((noreturn)) void co_entry(void);
CO __attribute__((noreturn)) void co_done(void);

CO __attribute__((noreturn)) void co_entry(void)
{
	NOTE("co_entry");
	co_outer();
	co_done();
}

CO __attribute__((noreturn)) void co_done(void)
{
	NOTE("co_done");
	for (int i = 0; i < nlog_; i++)
		printf("ENTRY %s\n", log_[i]);
	exit(0);
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
#ifdef IN_CHILD
	pid_t child = fork();
	if (child > 0) {
		int status;
		waitpid(child, &status, 0);
		printf("CHILD %d\n", (int)child);
		return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	}
#endif
#ifdef IN_HANDLER
	struct sigaction sa = { .sa_handler = co_handler };
	sigaction(SIGUSR1, &sa, 0);
#endif
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
#elif defined(__riscv) && __riscv_xlen == 64
	/* switch_to loads ra and s0..s11 from 112 bytes: ra (at 0) is co_entry, s0 0. */
	sp -= 14;
	for (int i = 0; i < 14; i++)
		sp[i] = 0;
	sp[0] = (void *)co_entry;
#else
#error "x86_64, aarch64 and riscv64 only"
#endif
	co_sp = sp;
	resume();
	m_leaf(1);
	resume();
	return 1;
}

#ifdef OWN_START
/* No frame below _start: zero return address and frame pointer, then main and exit. */
#if defined(__x86_64__)
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
	"xor %ebp,%ebp\ncall main\nmov %eax,%edi\ncall exit@PLT\n"
	".size _start,.-_start\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl _start\n.type _start,%function\n_start:\n"
	"mov x29, #0\nmov x30, #0\nbl main\nbl exit\n"
	".size _start,.-_start\n");
#else
/* The program's own gp, which its code may be relaxed to address by. */
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
	".option push\n.option norelax\nlla gp, __global_pointer$\n.option pop\n"
	"li s0, 0\nli ra, 0\ncall main\ncall exit\n"
	".size _start,.-_start\n");
#endif
#endif

/* switch_to(save, to): saves the callee-saved registers on this stack and its stack pointer
 * in *save, then takes the stack `to` and returns into what it holds. */
#if defined(__x86_64__)
__asm__(".text\n.globl switch_to\n.type switch_to,@function\nswitch_to:\n"
	"push %rbp\npush %rbx\npush %r12\npush %r13\npush %r14\npush %r15\n"
	"mov %rsp,(%rdi)\nmov %rsi,%rsp\n"
	"pop %r15\npop %r14\npop %r13\npop %r12\npop %rbx\npop %rbp\nret\n"
	".size switch_to,.-switch_to\n");
#elif defined(__riscv)
__asm__(".text\n.globl switch_to\n.type switch_to,@function\nswitch_to:\n"
	"addi sp, sp, -112\n"
	"sd ra, 0(sp)\nsd s0, 8(sp)\nsd s1, 16(sp)\nsd s2, 24(sp)\nsd s3, 32(sp)\n"
	"sd s4, 40(sp)\nsd s5, 48(sp)\nsd s6, 56(sp)\nsd s7, 64(sp)\nsd s8, 72(sp)\n"
	"sd s9, 80(sp)\nsd s10, 88(sp)\nsd s11, 96(sp)\n"
	"sd sp, 0(a0)\nmv sp, a1\n"
	"ld ra, 0(sp)\nld s0, 8(sp)\nld s1, 16(sp)\nld s2, 24(sp)\nld s3, 32(sp)\n"
	"ld s4, 40(sp)\nld s5, 48(sp)\nld s6, 56(sp)\nld s7, 64(sp)\nld s8, 72(sp)\n"
	"ld s9, 80(sp)\nld s10, 88(sp)\nld s11, 96(sp)\n"
	"addi sp, sp, 112\nret\n.size switch_to,.-switch_to\n");
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
