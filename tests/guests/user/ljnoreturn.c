/* longjmp out of a function that never returns, at -O2 (cli/tests/record_user_shape.rs):
 * main's call to fail() is its last instruction, so fail's return address lies past main's
 * end; the longjmp lands after main's call to setjmp, and main goes on (after(), twice). */
#include <setjmp.h>
#include <stdio.h>

#define F __attribute__((noinline, noclone))

static jmp_buf env;
volatile int sink;

F void after(int x)
{
	sink += x;
}

F __attribute__((noreturn)) void fail(int code)
{
	sink += code;
	longjmp(env, code);
}

F int work(int x)
{
	if (x > 2)
		fail(x);
	return x + 1;
}

int main(void)
{
	int r = setjmp(env);
	if (r == 0) {
		work(1);
		fail(7);
	}
	after(r);
	after(r + 1);
	printf("r=%d\n", r);
	return 0;
}
