/* Calls through a register that a load in the same block has just filled
 * (cli/tests/record_user_fed.rs): the tracer takes the target from the load's own memory
 * callback instead of reading the register (`arch::feeding_load`). Three shapes, each
 * calling through a pointer in a struct:
 *   direct    only register arithmetic between the load and the call (the load is the call)
 *   kept      a load of another register between (it may fault: the value waits for the call)
 *   faulting  that load faults once, on a page the SIGSEGV handler then makes readable: the
 *             block resumes past the pointer's load, so the call reads its register, and is
 *             recorded once
 * Each function notes its own entry (entries_log.h). aarch64 and riscv64 spell the shapes in
 * assembly, so that the compiler cannot reorder them; x86_64 calls `*(%reg)` in C, which
 * loads its target itself. Static glibc, -O2. */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "entries_log.h"

volatile long sink;

F long leaf(long x)
{
	note("leaf");
	sink += x;
	return x + 1;
}

F long other(long x)
{
	note("other");
	sink -= x;
	return x * 2;
}

struct ops {
	long (*fn)(long);
};

static struct ops ops_leaf = { leaf }, ops_other = { other };
static long readable = 1;
static long *guarded;

#if defined(__aarch64__)
#define CLOBBERS "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", \
	"x13", "x14", "x15", "x16", "x17", "x18", "x30", "v0", "v1", "v2", "v3", "v4", "v5", \
	"v6", "v7", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", \
	"v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory"
#define DIRECT "ldr x16, [%[o]]\n\tadd x0, x0, #1\n\tmov x1, #7\n\tblr x16"
#define KEPT "ldr x16, [%[o]]\n\tldr x9, [%[p]]\n\tadd x0, x0, x9\n\tblr x16"
#define ARG "x0"
#elif defined(__riscv)
#define CLOBBERS "ra", "t0", "t1", "t2", "t3", "t4", "t5", "t6", "a1", "a2", "a3", "a4", \
	"a5", "a6", "a7", "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7", "ft8", "ft9", \
	"ft10", "ft11", "fa0", "fa1", "fa2", "fa3", "fa4", "fa5", "fa6", "fa7", "memory"
#define DIRECT "ld t1, 0(%[o])\n\taddi a0, a0, 1\n\tli a1, 7\n\tjalr t1"
#define KEPT "ld t1, 0(%[o])\n\tld t2, 0(%[p])\n\tadd a0, a0, t2\n\tjalr t1"
#define ARG "a0"
#endif

F long direct(struct ops *o, long x)
{
	note("direct");
#ifdef ARG
	register long a asm(ARG) = x;
	asm volatile(DIRECT : "+r"(a) : [o] "r"(o) : CLOBBERS);
	return a;
#else
	return o->fn(x + 1);
#endif
}

F long kept(struct ops *o, long *p, long x)
{
	note("kept");
#ifdef ARG
	register long a asm(ARG) = x;
	asm volatile(KEPT : "+r"(a) : [o] "r"(o), [p] "r"(p) : CLOBBERS);
	return a;
#else
	long v = *(volatile long *)p;
	return o->fn(x + v);
#endif
}

/* The first touch of `guarded` faults: the page becomes readable and the load runs again. */
F void on_segv(int sig)
{
	note("on_segv");
	(void)sig;
	long page = sysconf(_SC_PAGESIZE);
	mprotect((void *)((unsigned long)guarded & ~(page - 1)), page, PROT_READ | PROT_WRITE);
}

F long faulting(struct ops *o, long x)
{
	note("faulting");
	return kept(o, guarded, x);
}

int main(void)
{
	note("main");
	long page = sysconf(_SC_PAGESIZE);
	char *area = mmap(0, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		return 2;
	guarded = (long *)area;
	*guarded = 3;
	mprotect(area, page, PROT_NONE);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_segv;
	sigaction(SIGSEGV, &sa, 0);
	for (int i = 0; i < 40; i++) {
		sink += direct(i & 1 ? &ops_other : &ops_leaf, i);
		sink += kept(&ops_leaf, &readable, i);
	}
	sink += faulting(&ops_other, 5);
	print_entries();
	return 0;
}
