/*
 * Minimal runtime: PL011 UART output on QEMU virt, and the end of the run. The Linux user
 * programs (user/rt.c) include this file with their own rt_putc and rt_flush
 * (RT_OUTPUT_DEFINED); everything else is shared.
 */
#include "guest.h"

#ifndef RT_OUTPUT_DEFINED
#define UART0_BASE 0x09000000UL
#define UART_DR (*(volatile unsigned int *)(UART0_BASE + 0x00))
#define UART_FR (*(volatile unsigned int *)(UART0_BASE + 0x18))
#define UART_FR_TXFF (1u << 5)

NOINSTR void rt_putc(char c)
{
    while (UART_FR & UART_FR_TXFF)
        ;
    UART_DR = (unsigned int)(unsigned char)c;
}

/* The UART is unbuffered. */
NOINSTR static void rt_flush(void)
{
}
#endif

NOINSTR void rt_puts(const char *s)
{
    while (*s)
        rt_putc(*s++);
}

NOINSTR void rt_put_dec(long v)
{
    char buf[24];
    int i = 0;
    unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;

    do {
        buf[i++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        rt_putc('-');
    while (i > 0)
        rt_putc(buf[--i]);
}

NOINSTR void rt_put_hex(unsigned long v)
{
    int shift = 60;

    while (shift > 0 && ((v >> shift) & 0xf) == 0)
        shift -= 4;
    for (; shift >= 0; shift -= 4)
        rt_putc("0123456789abcdef"[(v >> shift) & 0xf]);
}

NOINSTR int rt_check(const char *what, long got, long want)
{
    rt_puts(what);
    rt_puts(" = ");
    rt_put_dec(got);
    if (got != want) {
        rt_puts(" MISMATCH, expected ");
        rt_put_dec(want);
    }
    rt_putc('\n');
    return got != want;
}

/* Called by _start with main's return value; the result is the exit status. */
NOINSTR int rt_fini(int status)
{
#ifdef ORACLE
    oracle_dump();
#endif
    rt_flush();
    return status;
}
