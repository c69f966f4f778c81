/*
 * A program inside libc's qsort_r for as long as a test wants (cli/tests/record_switch.rs):
 * main sorts with libc's qsort (which jumps to qsort_r), whose first call back into cmp says
 * "sorting" on stdout and waits for the file argv[1] to exist (libc's access and usleep,
 * inside qsort_r's subtree).
 * Then the sort ends and main calls after(), outside it. A test switches tracing on while
 * the program waits, with `-F qsort_r`: the window opens inside it, a shared library's
 * function, and must write its subtree and nothing of main's own calls after it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

static const char *go;
static int waited;

NOIPA static int cmp(const void *a, const void *b)
{
    if (!waited) {
        static const char msg[] = "sorting\n";
        waited = 1;
        /* write(2), not stdio: stdout is a file, and stdio would hold the line. */
        if (write(1, msg, sizeof msg - 1) < 0)
            return 0;
        while (access(go, F_OK) != 0)
            usleep(1000);
    }
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

NOIPA static long after(const int *v, int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += (long)v[i] * i;
    return sum;
}

int main(int argc, char **argv)
{
    int v[64];
    if (argc < 2) {
        fprintf(stderr, "usage: libsort.elf GO-FILE\n");
        return 2;
    }
    go = argv[1];
    for (int i = 0; i < 64; i++)
        v[i] = (i * 37) % 64;
    qsort(v, 64, sizeof v[0], cmp);
    printf("sorted: %ld\n", after(v, 64));
    return 0;
}
