/*
 * A tiny bare-metal AArch64 program to try qemu-uftrace on: it prints to the
 * PL011 UART of QEMU's virt board and exercises nested calls, recursion, a
 * call through a function pointer (BLR) and leaf functions.
 *
 * Call tree (-O1 -fno-inline keeps every one of these a real call):
 *   main
 *   ├─ print_line ─ uart_puts ─ uart_putc                 (uart_putc is a leaf)
 *   ├─ run_demo ─ compute_report ─ sum_squares ─ square   (4 levels, square is a leaf)
 *   │            └─ print_number ─ uart_putc
 *   ├─ factorial ─ factorial ─ … (recursion, depth 10)
 *   └─ apply_op ─ (*op)() = op_mul                        (BLR to a leaf)
 */

#define UART0_BASE 0x09000000UL
#define UART_DR (*(volatile unsigned int *)(UART0_BASE + 0x00))
#define UART_FR (*(volatile unsigned int *)(UART0_BASE + 0x18))
#define UART_FR_TXFF (1u << 5)

#define NOINLINE __attribute__((noinline))

typedef long (*binop_fn)(long, long);

NOINLINE void uart_putc(char c)
{
    while (UART_FR & UART_FR_TXFF)
        ;
    UART_DR = (unsigned int)(unsigned char)c;
}

NOINLINE void uart_puts(const char *s)
{
    while (*s)
        uart_putc(*s++);
}

NOINLINE void print_line(const char *s)
{
    uart_puts(s);
    uart_putc('\n');
}

NOINLINE void print_number(unsigned long v)
{
    char buf[21];
    int i = 0;

    do {
        buf[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i > 0)
        uart_putc(buf[--i]);
}

NOINLINE long square(long x)
{
    return x * x;
}

NOINLINE long sum_squares(long n)
{
    long sum = 0;

    for (long i = 1; i <= n; i++)
        sum += square(i);
    return sum;
}

NOINLINE long compute_report(long n)
{
    long s = sum_squares(n);

    uart_puts("sum_squares(");
    print_number((unsigned long)n);
    uart_puts(") = ");
    print_number((unsigned long)s);
    uart_putc('\n');
    return s;
}

NOINLINE long run_demo(void)
{
    return compute_report(10);
}

NOINLINE unsigned long factorial(unsigned long n)
{
    if (n <= 1)
        return 1;
    return n * factorial(n - 1);
}

NOINLINE long op_mul(long a, long b)
{
    return a * b;
}

NOINLINE long op_add(long a, long b)
{
    return a + b;
}

NOINLINE long apply_op(binop_fn op, long a, long b)
{
    return op(a, b);
}

/* volatile: the compiler must load the pointer, so apply_op really BLRs. */
static binop_fn volatile chosen_op = op_mul;

int main(void)
{
    int failures = 0;

    print_line("Hello from qemu-uftrace!");

    if (run_demo() != 385)
        failures++;

    unsigned long f = factorial(10);
    uart_puts("factorial(10) = ");
    print_number(f);
    uart_putc('\n');
    if (f != 3628800)
        failures++;

    long p = apply_op(chosen_op, 6, 7);
    uart_puts("apply_op(op_mul, 6, 7) = ");
    print_number((unsigned long)p);
    uart_putc('\n');
    if (p != 42 || op_add(p, 1) != 43)
        failures++;

    print_line(failures ? "FAILED" : "Goodbye.");
    return failures;
}
