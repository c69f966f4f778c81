/* Arguments and return values (cli/tests/record_args.rs): leaf functions taking ints of
 * each size and sign, negatives, pointers, strings (long, NULL, unreadable), chars,
 * enums, floating-point values among integers (a double, a float) and arguments past the
 * registers (on the stack), each call logged by main as uftrace replay shows it under the specs of
 * ARGS_SPECS in the test ("log: add(1, 2) = 3;"). Built plainly (qemu-uftrace) and with
 * -pg (native uftrace, x86_64); -O1, no sibling calls, no inlining. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

enum color { RED, GREEN = 5, BLUE };

static char long_text[160];
static int cell;

NOINLINE int add(int a, int b) { return a + b; }
NOINLINE long neg(long x) { return -x; }
NOINLINE int greet(const char *who, int n)
{
	int len = 0;
	while (who[len])
		len++;
	return len + n;
}
NOINLINE const char *pick(int i) { return i ? "yes" : "no"; }
NOINLINE void *ptr(void *p) { return p; }
NOINLINE int paint(enum color c) { return (int)c * 2; }
NOINLINE char up(char c) { return (char)(c - 32); }
NOINLINE int bad(const char *s) { return s != 0; }
NOINLINE unsigned short narrow(unsigned char a, short b, unsigned c)
{
	return (unsigned short)(a + b + c);
}
NOINLINE long six(long a, long b, long c, long d, long e, long f)
{
	return a - b + c - d + e - f;
}
/* x and y in the first two floating-point registers, n in the first integer one; a
 * double's return in the first floating-point register. */
NOINLINE double scale(double x, float y, int n) { return x * y * n; }
NOINLINE float half(float f) { return f / 2; }
NOINLINE long eight(long a, long b, long c, long d, long e, long f, long g, long h)
{
	return a + b + c + d + e + f + g + h;
}
/* Past every convention's argument registers: i and j on the stack everywhere (and g, h
 * on x86_64), a negative int among them. */
NOINLINE long ten(long a, long b, long c, long d, long e, long f, long g, long h, long i,
		  int j)
{
	return a + b + c + d + e + f + g + h + i + j;
}

int main(int argc, char **argv)
{
	(void)argv;
	int r;
	long l;
	for (int i = 0; i < (int)sizeof(long_text) - 1; i++)
		long_text[i] = (char)('a' + i % 26);

	r = add(argc, 2);
	printf("log: add(%d, 2) = %d;\n", argc, r);
	l = neg(-1234567890123L);
	printf("log: neg(-1234567890123) = %ld;\n", l);
	r = greet("world", -7);
	printf("log: greet(\"world\", -7) = %d;\n", r);
	r = greet(long_text, 0);
	printf("log: greet(\"%.95s...\", 0) = %d;\n", long_text, r);
	const char *p = pick(argc);
	printf("log: pick(%d) = \"%s\";\n", argc, p);
	void *q = ptr(&cell);
	printf("log: ptr(%#lx) = %#lx;\n", (unsigned long)&cell, (unsigned long)q);
	r = paint(BLUE);
	printf("log: paint(%d) = %d;\n", BLUE, r);
	char c = up('a');
	printf("log: up('a') = '%c';\n", c);
	r = bad((const char *)0x10);
	printf("log: bad(\"<0x10>\") = %d;\n", r);
	r = bad(0);
	printf("log: bad(\"NULL\") = %d;\n", r);
	unsigned short n = narrow(200, -300, 70000);
	printf("log: narrow(200, -300, 70000) = %u;\n", n);
	l = six(1, -2, 3, -4, 5, -6);
	printf("log: six(1, -2, 3, -4, 5, -6) = %ld;\n", l);
	double d = scale(1.5, 2.25f, -2);
	printf("log: scale(%#f, %#f, -2) = %#f;\n", 1.5, 2.25, d);
	float h = half(-0.125f);
	printf("log: half(%#f) = %#f;\n", -0.125, (double)h);
	l = eight(1, 2, 3, 4, 5, 6, 7, -8);
	printf("log: eight(1, 2, 3, 4, 5, 6, 7, -8) = %ld;\n", l);
	l = ten(1, 2, 3, 4, 5, 6, 7, 8, 9, -10);
	printf("log: ten(1, 2, 3, 4, 5, 6, 7, 8, 9, -10) = %ld;\n", l);
	return 0;
}
