/*
 * The runtime of ../rt.c for the x86_64 bare-metal guests: output to the PC's first 16550
 * UART (COM1 at 0x3f8, QEMU's -serial / -nographic console), unbuffered.
 */
#include "../guest.h"

#define RT_OUTPUT_DEFINED
#define COM1 0x3f8
#define LSR_THRE 0x20

NOINSTR static unsigned char rt_inb(unsigned short port)
{
    unsigned char v;

    __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}

NOINSTR void rt_putc(char c)
{
    while (!(rt_inb(COM1 + 5) & LSR_THRE))
        ;
    __asm__ volatile("outb %0, %1" : : "a"(c), "Nd"((unsigned short)COM1));
}

NOINSTR static void rt_flush(void)
{
}

#include "../rt.c"
