/* The library /worker loads with dlopen (the process tests): plug_step is called through
 * the pointer dlsym gives, PLUG_STEPS times per worker. */
#include <unistd.h>

__attribute__((noipa, noinline)) long plug_step(long acc)
{
    return acc + getppid();
}
