/*
 * A dynamic PIE /init for the whole-system process tests (cli/tests/guest_procs.rs):
 * linked with glibc from the cross toolchain, it runs under the dynamic loader from the
 * initramfs. It calls its own functions a known number of times (counts.h), forks a child
 * that does not exec, runs /worker (another dynamic PIE) twice, one after the other, and
 * powers the machine off.
 *
 *   init_step    x INIT_STEPS    each one getppid(2) (a syscall under its user caller)
 *   do_fork      x 1             fork; the child calls child_step CHILD_STEPS times, no exec
 *   run_worker   x 2             fork + execve("/worker") + waitpid
 *   reboot(RB_POWER_OFF)
 */
#include <stdio.h>
#include <string.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <unistd.h>

#include "counts.h"

#define NOIPA __attribute__((noipa, noinline))

NOIPA int init_step(int i)
{
    return (int)getppid() + i;
}

NOIPA int child_step(int i)
{
    return (int)getpid() + i;
}

NOIPA void do_fork(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int sum = 0;
        for (int i = 0; i < CHILD_STEPS; i++)
            sum += child_step(i);
        _exit(sum == 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("INIT: child %d status %d\n", pid, status);
}

NOIPA void run_worker(const char *arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"/worker", (char *)arg, NULL};
        char *envp[] = {NULL};
        execve("/worker", argv, envp);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("INIT: worker %d status %d\n", pid, status);
}

int main(void)
{
    int sum = 0;
    for (int i = 0; i < INIT_STEPS; i++)
        sum += init_step(i);
    do_fork();
    run_worker("a");
    run_worker("b");
    printf("INIT: steps %d\n", sum);
    puts("INIT: ok");
    fflush(stdout);
    reboot(RB_POWER_OFF);
    return 1;
}
