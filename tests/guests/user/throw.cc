/*
 * A static C++ program whose exception unwinds through several frames: run() calls
 * level1() -> level2() -> level3() -> thrower(), which throws; level2 holds a Guard whose
 * destructor calls guard_released() during the unwinding; run() catches and calls
 * caught(). ROUNDS rounds. Output: "rounds=<n> caught=<sum of codes> released=<m>".
 */
#include <cstdio>

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
    return 0;
}
