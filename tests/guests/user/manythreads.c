/*
 * A static glibc program with 40 threads alive at once: more vCPUs than QEMU's first
 * scoreboard allocation (16), so QEMU grows every plugin scoreboard twice (to 32, then 64)
 * while the threads created first are running. Thread k calls thread_step() k + 1 times
 * before a barrier that all threads reach (by then every vCPU exists) and k + 2 times after
 * it, prints its thread id, and ends.
 * Output: "main tid=<T>", then one "thread <k> tid=<T> steps=<n>" line per thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))
#define THREADS 40

static pthread_barrier_t all_started;

NOIPA long thread_step(long x)
{
    return x * 2 + 1;
}

NOIPA void *thread_main(void *arg)
{
    long k = (long)arg;
    long acc = 0;

    for (long i = 0; i <= k; i++)
        acc += thread_step(i);
    pthread_barrier_wait(&all_started);
    for (long i = 0; i <= k + 1; i++)
        acc += thread_step(i);
    printf("thread %ld tid=%ld steps=%ld acc=%ld\n", k, syscall(SYS_gettid), 2 * k + 3, acc);
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];

    printf("main tid=%ld\n", syscall(SYS_gettid));
    fflush(stdout);
    if (pthread_barrier_init(&all_started, NULL, THREADS) != 0)
        return 1;
    for (long k = 0; k < THREADS; k++)
        if (pthread_create(&t[k], NULL, thread_main, (void *)k) != 0)
            return 1;
    for (int k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    return 0;
}
