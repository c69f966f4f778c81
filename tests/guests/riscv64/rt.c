/*
 * The runtime of ../rt.c on qemu-system-riscv64 -M virt: output to the board's NS16550A UART
 * at 0x10000000 (QEMU's takes a byte whenever the transmit register is empty).
 */
#include "../guest.h"

#define UART0_BASE 0x10000000UL
#define UART_THR (*(volatile unsigned char *)(UART0_BASE + 0))
#define UART_LSR (*(volatile unsigned char *)(UART0_BASE + 5))
#define UART_LSR_THRE (1u << 5)

NOINSTR void rt_putc(char c)
{
    while (!(UART_LSR & UART_LSR_THRE))
        ;
    UART_THR = (unsigned char)c;
}

/* The UART is unbuffered. */
NOINSTR static void rt_flush(void)
{
}

/* The rest (rt_puts, rt_put_dec, rt_check, rt_fini …) is the shared runtime's. */
#define RT_OUTPUT_DEFINED
#include "../rt.c"
