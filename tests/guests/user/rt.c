/*
 * The runtime of ../rt.c for Linux user mode (aarch64, riscv64, x86_64; user-x86_64/ builds
 * it too): output goes to stdout through write(2),
 * buffered and flushed by rt_fini, so that the program's own calls are all there is.
 */
#include "../guest.h"

static char out[1 << 16];
static unsigned long used;

NOINSTR static void rt_flush(void)
{
    unsigned long done = 0;

    while (done < used) {
#if defined(__x86_64__)
        long x0 = 1; /* rax: write(2), then its result */

        __asm__ volatile("syscall"
                         : "+a"(x0)
                         : "D"(1L), "S"(out + done), "d"(used - done)
                         : "rcx", "r11", "memory");
#elif defined(__riscv)
        register long x0 __asm__("a0") = 1;
        register long x1 __asm__("a1") = (long)(out + done);
        register long x2 __asm__("a2") = (long)(used - done);
        register long x8 __asm__("a7") = 64; /* write */

        __asm__ volatile("ecall" : "+r"(x0) : "r"(x1), "r"(x2), "r"(x8) : "memory");
#else
        register long x0 __asm__("x0") = 1;
        register long x1 __asm__("x1") = (long)(out + done);
        register long x2 __asm__("x2") = (long)(used - done);
        register long x8 __asm__("x8") = 64; /* write */

        __asm__ volatile("svc #0" : "+r"(x0) : "r"(x1), "r"(x2), "r"(x8) : "memory");
#endif
        if (x0 <= 0)
            break;
        done += (unsigned long)x0;
    }
    used = 0;
}

NOINSTR void rt_putc(char c)
{
    if (used == sizeof(out))
        rt_flush();
    out[used++] = c;
}

/* The rest (rt_puts, rt_put_dec, rt_check, rt_fini …) is the bare-metal runtime's. */
#define RT_OUTPUT_DEFINED
#include "../rt.c"
