/*
 * The second program of the process tests: /init runs it twice. Each run calls
 * worker_step WORKER_STEPS times, each making one getpid(2), runs a thread that calls
 * thread_step THREAD_STEPS times, loads /lib/libplug.so with dlopen and calls its plug_step
 * PLUG_STEPS times and its plug_tail (which leaves by a tail call) once, and formats its
 * result with snprintf from libc. The second run executes
 * the program's, the loader's and libc's code QEMU translated for the first (translations
 * are shared by physical page), at its own addresses: the recording must be its own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "counts.h"

#define NOIPA __attribute__((noipa, noinline))

NOIPA long worker_step(long acc)
{
    return acc + getpid();
}

NOIPA long thread_step(long acc)
{
    return acc + gettid();
}

static long thread_tid;

static void *thread_main(void *arg)
{
    long acc = 0;
    (void)arg;
    thread_tid = gettid();
    for (int i = 0; i < THREAD_STEPS; i++)
        acc = thread_step(acc);
    return (void *)acc;
}

NOIPA void worker_report(const char *tag, long acc)
{
    char line[96];
    snprintf(line, sizeof line, "WORKER %s: pid %d thread %ld sum %ld\n", tag, getpid(),
             thread_tid, acc);
    (void)!write(1, line, strlen(line));
}

int main(int argc, char **argv)
{
    long acc = 0;
    pthread_t thread;
    void *ret = NULL;
    for (int i = 0; i < WORKER_STEPS; i++)
        acc = worker_step(acc);
    if (pthread_create(&thread, NULL, thread_main, NULL) == 0)
        pthread_join(thread, &ret);
    void *plug = dlopen("/lib/libplug.so", RTLD_NOW);
    long (*plug_step)(long) = plug ? (long (*)(long))dlsym(plug, "plug_step") : NULL;
    for (int i = 0; plug_step && i < PLUG_STEPS; i++)
        acc = plug_step(acc);
    long (*plug_tail)(long) = plug ? (long (*)(long))dlsym(plug, "plug_tail") : NULL;
    if (plug_tail)
        acc = plug_tail(acc);
    if (!plug_step)
        acc = -1;
    worker_report(argc > 1 ? argv[1] : "-", acc + (long)ret);
    return 0;
}
