/*
 * A glibc program whose oracle log holds its libc calls too (cli/tests/record_user_glibc.rs).
 * Built with -finstrument-functions and -DORACLE, it logs every entry and exit of its own
 * functions (the hooks below) and, around each libc call it makes, `E =name` / `X =name`
 * (the LIB macro); a destructor prints the log after main has returned:
 *
 *   ORACLE-BEGIN
 *   E @<signed hex offset of the function's entry from main's>
 *   E =memcpy
 *   ...
 *   ORACLE-END
 *
 * Offsets from main, not addresses: a PIE is loaded at a bias the program does not know
 * from its symbol table. Without -DORACLE the same calls run unlogged (the plain build).
 * qsort calls back into cmp_int: the log shows cmp_int inside qsort, as the trace does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOIPA __attribute__((noipa))
#define NOINSTR __attribute__((no_instrument_function))

#ifdef ORACLE
#define ORACLE_MAX 4096

static struct {
    char kind;
    const char *lib; /* the libc function's name, or NULL */
    void *fn;        /* else the program function's entry */
} oracle_log[ORACLE_MAX];
static unsigned oracle_n;
static int oracle_overflow;

NOINSTR static void oracle_add(char kind, const char *lib, void *fn)
{
    if (oracle_n == ORACLE_MAX) {
        oracle_overflow = 1;
        return;
    }
    oracle_log[oracle_n].kind = kind;
    oracle_log[oracle_n].lib = lib;
    oracle_log[oracle_n].fn = fn;
    oracle_n++;
}

/* noipa: the program's calls stay around exactly the libc call they log. */
NOIPA NOINSTR void oracle_lib(char kind, const char *name)
{
    oracle_add(kind, name, NULL);
}

void __cyg_profile_func_enter(void *fn, void *site) NOINSTR;
void __cyg_profile_func_exit(void *fn, void *site) NOINSTR;

void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    oracle_add('E', NULL, fn);
}

void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    oracle_add('X', NULL, fn);
}

int main(void);

__attribute__((destructor)) NOINSTR static void oracle_dump(void)
{
    printf("ORACLE-BEGIN\n");
    for (unsigned i = 0; i < oracle_n; i++) {
        if (oracle_log[i].lib) {
            printf("%c =%s\n", oracle_log[i].kind, oracle_log[i].lib);
        } else {
            long off = (char *)oracle_log[i].fn - (char *)main;
            printf("%c @%s%lx\n", oracle_log[i].kind, off < 0 ? "-" : "+",
                   (unsigned long)(off < 0 ? -off : off));
        }
    }
    if (oracle_overflow)
        printf("ORACLE-OVERFLOW\n");
    printf("ORACLE-END\n");
}

#define LIB(name, stmt)              \
    do {                             \
        oracle_lib('E', #name);      \
        stmt;                        \
        oracle_lib('X', #name);      \
    } while (0)
#else
#define LIB(name, stmt) \
    do {                \
        stmt;           \
    } while (0)
#endif

NOIPA char *dup_name(const char *s)
{
    size_t n;
    char *p;

    LIB(strlen, n = strlen(s));
    LIB(malloc, p = malloc(n + 1));
    LIB(memcpy, memcpy(p, s, n + 1));
    return p;
}

NOIPA int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;

    return (x > y) - (x < y);
}

NOIPA int sum(const int *v, int n)
{
    return n == 0 ? 0 : v[0] + sum(v + 1, n - 1);
}

NOIPA void report(const char *name, int total)
{
    LIB(printf, printf("%s %d\n", name, total));
}

NOIPA int sorted_sum(int seed)
{
    int v[6];
    int total;

    for (int i = 0; i < 6; i++)
        v[i] = (seed * (i + 7)) % 11;
    LIB(qsort, qsort(v, 6, sizeof v[0], cmp_int));
    total = sum(v, 6);
    return total * 100 + v[0] * 10 + v[5];
}

int main(void)
{
    char *a = dup_name("alpha");
    char *b = dup_name("beta");
    int same;

    LIB(strcmp, same = strcmp(a, b));
    report(a, sorted_sum(5));
    report(b, same < 0);
    LIB(free, free(b));
    LIB(free, free(a));
    return 0;
}
