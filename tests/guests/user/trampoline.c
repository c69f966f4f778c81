/* A GCC nested function called through its trampoline on the stack (its address is taken;
 * cli/tests/record_user_shape.rs): the trampoline loads the static chain and jumps to inner.
 * Each function notes its own entry in a log, printed at the end as `ENTRY name` lines. */

#include "entries_log.h"

volatile int sink;

F int leaf(int x)
{
	note("leaf");
	sink += x;
	return x + 1;
}

F void apply(void (*fn)(int), int x)
{
	note("apply");
	fn(x);
	fn(x + 1);
	sink++;
}

F void outer(int base)
{
	note("outer");
	F void inner(int x)
	{
		note("inner");
		leaf(x + base);
	}
	apply(inner, 1);
}

int main(void)
{
	note("main");
	outer(10);
	leaf(3);
	print_entries();
	return 0;
}
