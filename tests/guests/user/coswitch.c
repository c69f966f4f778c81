/* Coroutine-like stack switches at -O2 without frame pointers (cli/tests/record_user_resync.rs),
 * with ../coswitch.h's coroutine. main resumes it twice. The first switch enters it at
 * co_entry; the coroutine yields back from three calls deep. The second switch lands in
 * co_yield on the coroutine's stack, where no frame the tracer saw is open and no frame record
 * tells the stack (no frame pointers): a resync it can only guess, or unwind with the
 * binary's tables. The coroutine then finishes the run on its own stack (co_done exits).
 *
 * co_done prints the entries-only log. The coroutine's functions sit in .text.unlikely.*,
 * which the linker places before all other code, below every open function (crt1's
 * __wrap_main on aarch64 included).
 *
 * Built with -DVIA_LIB, co_outer reaches co_inner through co_via in a shared library
 * (coswitch-via.c). The dynamic builds (-DOWN_START -nostartfiles) enter main from their own
 * _start: glibc's start code is in libc, which qemu-aarch64 maps below the program, and its
 * open frames would lie below the landing (libc's initialisers run from ld.so all the same). */
#include <stdio.h>
#include <stdlib.h>

#define CO_SECTION ".text.unlikely.coroutine"
#include "../coswitch.h"

static char co_stack[64 * 1024] __attribute__((aligned(16)));

CO __attribute__((noreturn)) void co_done(void)
{
	NOTE("co_done");
	for (int i = 0; i < nlog_; i++)
		printf("ENTRY %s\n", log_[i]);
	exit(0);
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

#ifdef OWN_START
/* No frame below _start: zero return address and frame pointer, then main and exit. */
#if defined(__x86_64__)
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
	"xor %ebp,%ebp\ncall main\nmov %eax,%edi\ncall exit@PLT\n"
	".size _start,.-_start\n");
#else
__asm__(".text\n.globl _start\n.type _start,%function\n_start:\n"
	"mov x29, #0\nmov x30, #0\nbl main\nbl exit\n"
	".size _start,.-_start\n");
#endif
#endif
