/*
 * Scenario "snap": a chain five calls deep that stops in a leaf until the UART receives a
 * byte, for the tests of runs that start from a snapshot (cli/tests/record_snapshot.rs).
 * The leaf writes "snap: waiting" straight to the UART (no call: it stays a leaf), so once
 * that line is out the vCPU is inside it; the test stops QEMU there, saves a snapshot, and
 * records a run from it, given a byte to receive.
 *
 *   main ─ snap_a ─ snap_b ─ snap_c ─ snap_d ─ snap_wait   (stopped here)
 *                                          └─ snap_after
 *   main ─ snap_later
 */
#include "guest.h"

/* The board's UART, as statements and expressions (no function: the leaf stays a leaf). */
#if defined(__aarch64__)
/* QEMU virt's PL011. */
#define UART0_BASE 0x09000000UL
#define UART_DR (*(volatile unsigned int *)(UART0_BASE + 0x00))
#define UART_FR (*(volatile unsigned int *)(UART0_BASE + 0x18))
#define UART_CR (*(volatile unsigned int *)(UART0_BASE + 0x30))
#define TX_FULL() (UART_FR & (1u << 5))
#define RX_EMPTY() (UART_FR & (1u << 4))
#define TX(c) (UART_DR = (unsigned int)(unsigned char)(c))
#define RX() (UART_DR & 0xff)
/* UARTEN | TXE | RXE */
#define UART_INIT() (UART_CR = 0x301u)
#elif defined(__x86_64__)
/* The PC's COM1 16550, by port I/O. */
#define COM1 0x3f8
#define INB(port)                                                                 \
    ({                                                                            \
        unsigned char v_;                                                         \
        __asm__ volatile("inb %1, %0" : "=a"(v_) : "Nd"((unsigned short)(port))); \
        v_;                                                                       \
    })
#define TX_FULL() (!(INB(COM1 + 5) & 0x20))
#define RX_EMPTY() (!(INB(COM1 + 5) & 0x01))
#define TX(c) __asm__ volatile("outb %0, %1" : : "a"((unsigned char)(c)), "Nd"((unsigned short)COM1))
#define RX() INB(COM1)
#define UART_INIT() ((void)0)
#elif defined(__riscv)
/* QEMU virt's NS16550A. */
#define UART0_BASE 0x10000000UL
#define UART_RBR (*(volatile unsigned char *)(UART0_BASE + 0))
#define UART_LSR (*(volatile unsigned char *)(UART0_BASE + 5))
#define TX_FULL() (!(UART_LSR & 0x20))
#define RX_EMPTY() (!(UART_LSR & 0x01))
#define TX(c) (UART_RBR = (unsigned char)(c))
#define RX() UART_RBR
#define UART_INIT() ((void)0)
#endif

static const char waiting[] = "snap: waiting\n";

NOIPA long snap_wait(long x)
{
    for (const char *m = waiting; *m; m++) {
        while (TX_FULL())
            ;
        TX(*m);
    }
    while (RX_EMPTY())
        ;
    return x * 3 + (long)RX();
}

NOIPA long snap_after(long x)
{
    return x + 7;
}

NOIPA long snap_d(long x)
{
    long r = snap_wait(x);

    BARRIER(r);
    return snap_after(r) + 1;
}

NOIPA long snap_c(long x)
{
    long r = snap_d(x + 1);

    BARRIER(r);
    return r * 2;
}

NOIPA long snap_b(long x)
{
    long r = snap_c(x);

    BARRIER(r);
    return r - 3;
}

NOIPA long snap_a(long x)
{
    long r = snap_b(x * 2);

    BARRIER(r);
    return r + 5;
}

NOIPA long snap_later(long x)
{
    return x ^ 0x55;
}

int main(void)
{
    UART_INIT();
    /* The byte received is 'g' (103): snap_wait(3) = 112, snap_d = 120, snap_c = 240,
     * snap_b = 237, snap_a = 242. */
    long r = snap_a(1);
    int bad = rt_check("snap_a(1)", r, 242);
    bad += rt_check("snap_later(242)", snap_later(r), 242 ^ 0x55);
    return bad;
}
