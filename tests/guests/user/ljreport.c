/* a -> b -> c -> longjmp, three times (cli/tests/record_user_shape.rs): `uftrace report`
 * counts of our trace of the plain build equal those of the `-pg` build recorded natively,
 * where libmcount writes each landing's single exit as setjmp's. */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
static int rounds;

void c(void)
{
	longjmp(env, 1);
}

void b(void)
{
	c();
}

void a(void)
{
	b();
}

int main(void)
{
	if (setjmp(env) < 4) {
		if (rounds++ < 3)
			a();
	}
	printf("rounds=%d\n", rounds);
	return 0;
}
