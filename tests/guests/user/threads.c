/*
 * A glibc program (static, or dynamic: threads-dyn.elf) with three threads besides main: thread k calls thread_step()
 * THREAD_STEPS_k times, prints its thread id, and ends; main joins them in order.
 * Output: "main tid=<T>", then one "thread <k> tid=<T> steps=<n>" line per thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

static const long steps[3] = {5, 9, 13};

NOIPA long thread_step(long x)
{
    return x * 2 + 1;
}

NOIPA void *thread_main(void *arg)
{
    long k = (long)arg;
    long acc = 0;

    for (long i = 0; i < steps[k]; i++)
        acc += thread_step(i);
    printf("thread %ld tid=%ld steps=%ld acc=%ld\n", k, syscall(SYS_gettid), steps[k], acc);
    return NULL;
}

int main(void)
{
    pthread_t t[3];

    printf("main tid=%ld\n", syscall(SYS_gettid));
    for (long k = 0; k < 3; k++)
        if (pthread_create(&t[k], NULL, thread_main, (void *)k) != 0)
            return 1;
    for (int k = 0; k < 3; k++)
        pthread_join(t[k], NULL);
    return 0;
}
