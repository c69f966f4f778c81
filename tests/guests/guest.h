/*
 * Shared by the test guests (and bench/guests): attribute macros and the
 * tiny runtime in rt.c. Runtime functions are named rt_* (and the oracle's
 * oracle_* / __cyg_profile_*) so that tests can filter them out of traces.
 */
#ifndef GUEST_H
#define GUEST_H

/*
 * noipa = noinline + noclone + no IPA propagation: every call in the source
 * stays a real call to a function with its source name (no .constprop/.isra
 * clones), while the body is still optimised (leaves, tail calls).
 */
#define NOIPA __attribute__((noipa))
/* Runtime and oracle code must not call the -finstrument-functions hooks. */
#define NOINSTR __attribute__((no_instrument_function))
/* Forces x into a register here: stops GCC from folding the surrounding
 * arithmetic across calls (e.g. turning recursion into loops). */
#define BARRIER(x) __asm__ volatile("" : "+r"(x))

void rt_putc(char c);
void rt_puts(const char *s);
void rt_put_dec(long v);
void rt_put_hex(unsigned long v);
/* Prints "<what> = <got>" and returns 1 if got != want, else 0. */
int rt_check(const char *what, long got, long want);
int rt_fini(int status);
void rt_exit(int status) __attribute__((noreturn));

#ifdef ORACLE
void oracle_dump(void);
#endif

#endif
