/* makecontext/swapcontext (cli/tests/record_user_shape.rs): ctxfunc is entered by setcontext's
 * jump (aarch64 `br`, riscv64 `jr`, x86-64 `ret`) and returns to uc_link. Each function notes
 * its own entry in a log, printed at the end as `ENTRY name` lines. */
#include <ucontext.h>

#include "entries_log.h"

volatile int sink;
static ucontext_t uc_main, uc_func;
static char stack[65536];

F int leaf(int x)
{
	note("leaf");
	sink += x;
	return x + 1;
}

F void ctxfunc(int x)
{
	note("ctxfunc");
	leaf(x);
	leaf(x + 1);
}

F void run(void)
{
	note("run");
	swapcontext(&uc_main, &uc_func);
	leaf(5);
}

int main(void)
{
	note("main");
	getcontext(&uc_func);
	uc_func.uc_stack.ss_sp = stack;
	uc_func.uc_stack.ss_size = sizeof stack;
	uc_func.uc_link = &uc_main;
	makecontext(&uc_func, (void (*)(void))ctxfunc, 1, 7);
	run();
	leaf(9);
	print_entries();
	return 0;
}
