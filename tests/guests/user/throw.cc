/*
 * A static C++ program whose exception unwinds through several frames: run() calls
 * level1() -> level2() -> level3() -> thrower(), which throws; level2 holds a Guard whose
 * destructor calls guard_released() during the unwinding; run() catches and calls
 * caught(). ROUNDS rounds. Output: "rounds=<n> caught=<sum of codes> released=<m>".
 *
 * Built with -DORACLE -finstrument-functions (throw-oracle.elf), it also prints its own log
 * of every entry and exit after that line, in ../oracle.c's format: GCC runs an
 * instrumented function's exit hook as a cleanup while an exception leaves it.
 */
#include <cstdio>

#ifdef ORACLE
#define NOINSTR __attribute__((no_instrument_function))
static struct {
    char kind;
    void *fn, *site;
} oracle_log[256];
static unsigned oracle_n;

extern "C" NOINSTR void __cyg_profile_func_enter(void *fn, void *site)
{
    if (oracle_n < 256)
        oracle_log[oracle_n] = {'E', fn, site};
    oracle_n++;
}

extern "C" NOINSTR void __cyg_profile_func_exit(void *fn, void *site)
{
    if (oracle_n < 256)
        oracle_log[oracle_n] = {'X', fn, site};
    oracle_n++;
}

NOINSTR static void oracle_print()
{
    std::printf("ORACLE-BEGIN\n");
    if (oracle_n > 256)
        std::printf("ORACLE-OVERFLOW\n");
    for (unsigned i = 0; i < oracle_n && i < 256; i++)
        std::printf("%c %lx %lx\n", oracle_log[i].kind, (unsigned long)oracle_log[i].fn,
                    (unsigned long)oracle_log[i].site);
    std::printf("ORACLE-END\n");
}
#endif

#define NOIPA __attribute__((noipa))
#define ROUNDS 2

namespace demo {

struct Failure {
    int code;
};

static int released;

NOIPA void guard_released() { released++; }

struct Guard {
    NOIPA ~Guard() { guard_released(); }
};

NOIPA void thrower(int k) { throw Failure{k + 10}; }

NOIPA int level3(int k)
{
    thrower(k);
    return k;
}

NOIPA int level2(int k)
{
    Guard g;
    return level3(k) + 1;
}

NOIPA int level1(int k) { return level2(k) + 1; }

NOIPA int caught(const Failure &f) { return f.code; }

NOIPA int run(int k)
{
    try {
        return level1(k);
    } catch (const Failure &f) {
        return caught(f);
    }
}

} // namespace demo

int main()
{
    int sum = 0;
    for (int k = 0; k < ROUNDS; k++)
        sum += demo::run(k);
    std::printf("rounds=%d caught=%d released=%d\n", ROUNDS, sum, demo::released);
#ifdef ORACLE
    oracle_print(); /* main's own exit comes after: not in the log */
#endif
    return 0;
}
