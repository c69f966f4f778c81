/*
 * Execs itself with an environment past the kernel's limit for execve's strings (a
 * quarter of the stack limit, at most 6 MiB): the call fails, and it prints
 * "bigexec errno=E2BIG" (another failure's name otherwise; "bigexec ran again" where the
 * exec happened) and exits with 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ONE (64 << 10)
#define KERNEL_MAX (6L << 20)

int main(int argc, char **argv)
{
    long max = sysconf(_SC_ARG_MAX);
    size_t n;
    char **envp;
    char *args[] = { argv[0], "again", NULL };

    if (argc > 1) {
        printf("bigexec ran again\n");
        return 3;
    }
    if (max <= 0 || max > KERNEL_MAX)
        max = KERNEL_MAX;
    n = max / ONE + 2;
    envp = calloc(n + 1, sizeof(*envp));
    if (!envp)
        return 1;
    for (size_t i = 0; i < n; i++) {
        envp[i] = malloc(ONE);
        if (!envp[i])
            return 1;
        memset(envp[i], 'x', ONE - 1);
        envp[i][0] = 'A';
        envp[i][1] = '=';
        envp[i][ONE - 1] = 0;
    }
    execve(argv[0], args, envp);
    printf("bigexec errno=%s\n", errno == E2BIG ? "E2BIG" : strerror(errno));
    fflush(stdout);
    return 0;
}
