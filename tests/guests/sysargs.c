/*
 * Arguments and return values on bare metal (cli/tests/record_args.rs): leaf functions
 * taking ints of each size and sign, negatives, pointers, strings (long, NULL,
 * unreadable), chars and enums; main logs each call as uftrace replay shows it under the
 * test's specs ("log: add(1, 2) = 3;"). Natural build only.
 */
#include "guest.h"

enum color { RED, GREEN = 5, BLUE };

static char long_text[160];
static int cell;
/* A pointer no page holds (past every board's RAM and devices here). */
#define UNMAPPED ((const char *)0x7ff000000000UL)

NOIPA int add(int a, int b) { return a + b; }
NOIPA long neg(long x) { return -x; }
NOIPA int greet(const char *who, int n)
{
    int len = 0;
    while (who[len])
        len++;
    return len + n;
}
NOIPA const char *pick(int i) { return i ? "yes" : "no"; }
NOIPA void *ptr(void *p) { return p; }
NOIPA int paint(enum color c) { return (int)c * 2; }
NOIPA char up(char c) { return (char)(c - 32); }
NOIPA int bad(const char *s) { return s != 0; }
NOIPA unsigned short narrow(unsigned char a, short b, unsigned c)
{
    return (unsigned short)(a + b + c);
}
NOIPA long six(long a, long b, long c, long d, long e, long f)
{
    return a - b + c - d + e - f;
}

static void log_call(const char *name) { rt_puts("log: "); rt_puts(name); }
static void dec(long v) { rt_put_dec(v); }
static void hex(unsigned long v) { rt_puts("0x"); rt_put_hex(v); }
static void end(void) { rt_puts(";\n"); }

int main(void)
{
    int r;
    long l;
    for (int i = 0; i < (int)sizeof(long_text) - 1; i++)
        long_text[i] = (char)('a' + i % 26);

    r = add(1, 2);
    log_call("add(1, 2) = "); dec(r); end();
    l = neg(-1234567890123L);
    log_call("neg(-1234567890123) = "); dec(l); end();
    r = greet("world", -7);
    log_call("greet(\"world\", -7) = "); dec(r); end();
    r = greet(long_text, 0);
    log_call("greet(\"");
    for (int i = 0; i < 95; i++)
        rt_putc(long_text[i]);
    rt_puts("...\", 0) = "); dec(r); end();
    const char *p = pick(1);
    log_call("pick(1) = \""); rt_puts(p); rt_puts("\""); end();
    void *q = ptr(&cell);
    log_call("ptr("); hex((unsigned long)&cell); rt_puts(") = "); hex((unsigned long)q); end();
    r = paint(BLUE);
    log_call("paint(6) = "); dec(r); end();
    char c = up('a');
    log_call("up('a') = '"); rt_putc(c); rt_puts("'"); end();
    r = bad(UNMAPPED);
    log_call("bad(\"<0x7ff000000000>\") = "); dec(r); end();
    r = bad(0);
    log_call("bad(\"NULL\") = "); dec(r); end();
    unsigned short n = narrow(200, -300, 70000);
    log_call("narrow(200, -300, 70000) = "); dec(n); end();
    l = six(1, -2, 3, -4, 5, -6);
    log_call("six(1, -2, 3, -4, 5, -6) = "); dec(l); end();
    return 0;
}
