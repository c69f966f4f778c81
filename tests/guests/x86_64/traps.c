/*
 * x86_64 exceptions under their names (cli/tests/x86_64_traps.rs): main loads an IDT with
 * lidt, then takes an INT3, a #UD (ud2), a #GP (a non-canonical load), a #PF (a load past
 * the identity-mapped first GiB) and an INT 0x80, each from a function of its own. The
 * entry stubs (traps_entry.S) call trap_handler, which calls a known function per vector
 * and steps over a faulting instruction; IRETQ returns. INT 0x80's function runs an IRETQ
 * of its own, to its next instruction, as Linux's sync_core() does, then one more call.
 */
#include "../guest.h"

struct frame {
    unsigned long r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax;
    unsigned long vector, error;
    unsigned long rip, cs, rflags, rsp, ss;
};

struct gate {
    unsigned short offset_lo, selector;
    unsigned char ist, type;
    unsigned short offset_mid;
    unsigned int offset_hi, zero;
};

static struct gate idt[256] __attribute__((aligned(16)));
static volatile long seen, last_vector;

extern char trap_int3[], trap_ud[], trap_gp[], trap_pf[], trap_svc[];

NOIPA void set_gate(int vector, void *entry)
{
    unsigned long a = (unsigned long)entry;

    idt[vector] = (struct gate){
        .offset_lo = a & 0xffff,
        .selector = 0x08,
        .type = 0xee, /* present, DPL 3, 64-bit interrupt gate */
        .offset_mid = (a >> 16) & 0xffff,
        .offset_hi = a >> 32,
    };
}

NOIPA void load_idt(void)
{
    struct __attribute__((packed)) {
        unsigned short limit;
        unsigned long base;
    } d = {sizeof idt - 1, (unsigned long)idt};

    __asm__ volatile("lidt %0" : : "m"(d));
}

NOIPA void on_int3(void) { seen += 1; }
NOIPA void on_ud(void) { seen += 10; }
NOIPA void on_gp(void) { seen += 100; }
NOIPA void on_pf(void) { seen += 1000; }
NOIPA void synced(void) { seen += 100000; }

/*
 * Linux's sync_core() where the CPU lacks SERIALIZE (QEMU's models): an IRETQ to its own
 * next instruction, run inside a system call or an interrupt (text_poke, a module's
 * alternatives). It returns from nothing: the handler goes on.
 */
NOIPA void iret_to_self(void)
{
    unsigned long tmp;

    __asm__ volatile("mov %%ss, %0\n\t"
                     "pushq %q0\n\t"
                     "pushq %%rsp\n\t"
                     "addq $8, (%%rsp)\n\t"
                     "pushfq\n\t"
                     "mov %%cs, %0\n\t"
                     "pushq %q0\n\t"
                     "pushq $1f\n\t"
                     "iretq\n\t"
                     "1:"
                     : "=&r"(tmp)
                     :
                     : "cc", "memory");
}

NOIPA void on_svc(void)
{
    seen += 10000;
    iret_to_self();
    synced();
}

/* Called by the entry stubs with the saved registers and the CPU's frame. */
NOIPA void trap_handler(struct frame *f)
{
    switch (f->vector) {
    case 3:
        on_int3();
        break;
    case 6:
        on_ud();
        f->rip += 2; /* ud2 */
        break;
    case 13:
        on_gp();
        f->rip += 3; /* mov (%rax), %rax */
        break;
    case 14:
        on_pf();
        f->rip += 3; /* mov (%rax), %rax */
        break;
    case 0x80:
        on_svc();
        break;
    }
    /* Work after the switch: no handler is tail-called. */
    last_vector = f->vector;
}

NOIPA void cause_int3(void) { __asm__ volatile("int3"); }
NOIPA void cause_ud(void) { __asm__ volatile("ud2"); }
NOIPA void cause_gp(void)
{
    unsigned long a = 0x8000000000000000ul; /* not canonical */

    __asm__ volatile("mov (%0), %0" : "+a"(a) : : "memory");
}
NOIPA void cause_pf(void)
{
    unsigned long a = 0x40000000ul; /* past the first GiB: not mapped */

    __asm__ volatile("mov (%0), %0" : "+a"(a) : : "memory");
}
NOIPA void cause_svc(void) { __asm__ volatile("int $0x80"); }

int main(void)
{
    set_gate(3, trap_int3);
    set_gate(6, trap_ud);
    set_gate(13, trap_gp);
    set_gate(14, trap_pf);
    set_gate(0x80, trap_svc);
    load_idt();
    cause_int3();
    cause_ud();
    cause_gp();
    cause_pf();
    cause_svc();
    return rt_check("seen", seen, 111111);
}
