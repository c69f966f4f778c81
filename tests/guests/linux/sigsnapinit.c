/*
 * /init of the signal snapshot guest (cli/tests/record_snapshot_linux.rs): PID 1 spins in
 * snap_spin until SIGUSR1 arrives (a child sends it), and the handler sleeps in read(2) on
 * the console two calls deep; the child prints the marker 100 ms later (so that PID 1 is
 * surely asleep when the test saves the machine), then sleeps too. A run from that
 * snapshot is given a line: the handler returns, through sig_restorer's rt_sigreturn,
 * into snap_spin, which sees the flag and returns; main calls snap_later and powers off.
 *
 *   main > snap_spin > [SIGUSR1] > sig_handler > sig_a > sig_wait > read   (asleep)
 *
 * On arm64, sig_restorer is the handler's return address (SA_RESTORER, as glibc's x86-64
 * __restore_rt; glibc's arm64 handlers return into the vDSO): its CFI says 'S'
 * (.cfi_signal_frame) and reads the interrupted code's sp, x29, x30 and pc from the
 * sigcontext, which is what the unwinder follows. On x86-64, glibc's sigaction sets its own
 * __restore_rt, whose CFI does the same.
 */
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/reboot.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

#ifdef __aarch64__
/* Where the sigcontext's registers sit above the stack pointer at sig_restorer: the
 * kernel's rt_sigframe is the siginfo, then the ucontext. The CFI below encodes these. */
#define AT(field) (sizeof(siginfo_t) + offsetof(ucontext_t, uc_mcontext.field))
_Static_assert(AT(regs[29]) == 544, "x29's offset in the CFI");
_Static_assert(AT(regs[30]) == 552, "x30's offset in the CFI");
_Static_assert(AT(sp) == 560, "sp's offset in the CFI");
_Static_assert(AT(pc) == 568, "pc's offset in the CFI");

void sig_restorer(void);
/* DW_OP_breg31 (sp) N as sleb128: 544 = a0 04, 552 = a8 04, 560 = b0 04, 568 = b8 04.
 * The pc gets column 32 (the return-address column here): x30 is a register of its own. */
__asm__(".text\n"
        ".globl sig_restorer\n"
        ".type sig_restorer, %function\n"
        "sig_restorer:\n"
        ".cfi_startproc\n"
        ".cfi_return_column 32\n"
        ".cfi_signal_frame\n"
        ".cfi_escape 0x0f, 0x04, 0x8f, 0xb0, 0x04, 0x06\n" /* CFA = *(sp + 560) */
        ".cfi_escape 0x10, 0x1d, 0x03, 0x8f, 0xa0, 0x04\n" /* x29 at sp + 544 */
        ".cfi_escape 0x10, 0x1e, 0x03, 0x8f, 0xa8, 0x04\n" /* x30 at sp + 552 */
        ".cfi_escape 0x10, 0x20, 0x03, 0x8f, 0xb8, 0x04\n" /* pc at sp + 568 */
        "mov x8, #139\n"                                   /* rt_sigreturn */
        "svc #0\n"
        ".cfi_endproc\n"
        ".size sig_restorer, . - sig_restorer\n");

/* The kernel's struct sigaction on arm64. */
struct ksigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    unsigned long mask;
};
#define KSA_RESTORER 0x04000000UL
#endif

static volatile sig_atomic_t woke;

NOIPA void say(const char *line)
{
    (void)!write(1, line, strlen(line));
}

/* Blocks in read(2) until a line arrives: the task sleeps in the kernel meanwhile. */
NOIPA int sig_wait(void)
{
    char buf[16];
    return (int)read(0, buf, sizeof buf);
}

NOIPA int sig_a(void)
{
    return sig_wait() + 1;
}

NOIPA void sig_handler(int signo)
{
    if (signo == SIGUSR1 && sig_a() > 1)
        woke = 1;
}

/* Runs until the handler has run: the signal interrupts it here. */
NOIPA void snap_spin(void)
{
    while (!woke)
        ;
}

NOIPA void snap_later(void)
{
    say(woke ? "SNAP: done\n" : "SNAP: FAILED\n");
}

int main(void)
{
#ifdef __aarch64__
    struct ksigaction sa = {sig_handler, KSA_RESTORER, sig_restorer, 0};
    if (syscall(SYS_rt_sigaction, SIGUSR1, &sa, NULL, sizeof sa.mask) != 0)
        say("SNAP: FAILED sigaction\n");
#else
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sig_handler;
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        say("SNAP: FAILED sigaction\n");
#endif
    if (fork() == 0) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        kill(1, SIGUSR1);
        nanosleep(&ts, NULL);
        say("SNAP: waiting\n");
        for (;;)
            pause();
    }
    snap_spin();
    snap_later();
    sync();
    reboot(RB_POWER_OFF);
    return 1;
}
