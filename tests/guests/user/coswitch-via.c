/* The shared library of coswitch-lib.elf (coswitch.c built with -DVIA_LIB): co_via calls
 * back into the program, so the coroutine's stack runs through this library's frame when it
 * yields. -O2 without frame pointers: only its .eh_frame, at its load bias, unwinds it. */
volatile int via_sink;

void co_via(void (*f)(int), int n)
{
	via_sink++;
	f(n);
	via_sink++;
}
