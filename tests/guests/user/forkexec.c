/*
 * A static glibc program that forks: the child calls child_step() CHILD_STEPS times, then
 * execs argv[1] (execd.c) with arguments "execd from-child", or without argv[1] ends at
 * once with _exit(5); the parent calls parent_step() PARENT_STEPS times, waits for the
 * child and prints "parent pid=<P> child=<C> status=<S>". With "-orphan SECONDS" the
 * parent ends at once ("parent pid=<P> child=<C> orphan"), and the child sleeps SECONDS,
 * calls child_step() CHILD_STEPS times, prints "child pid=<C> acc=<A>" and exits with 5.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))
#define CHILD_STEPS 6
#define PARENT_STEPS 4

NOIPA long parent_step(long x)
{
    return x * 3 + 1;
}

NOIPA long child_step(long x)
{
    return x * 5 + 2;
}

NOIPA void child(const char *prog)
{
    long acc = 0;

    for (long i = 0; i < CHILD_STEPS; i++)
        acc += child_step(i);
    if (prog) {
        execl(prog, "execd", "from-child", (char *)NULL);
        _exit(126);
    }
    _exit(acc == 87 ? 5 : 1);
}

NOIPA void orphan(unsigned seconds)
{
    long acc = 0;

    sleep(seconds);
    for (long i = 0; i < CHILD_STEPS; i++)
        acc += child_step(i);
    printf("child pid=%d acc=%ld\n", (int)getpid(), acc);
    exit(5);
}

int main(int argc, char **argv)
{
    long acc = 0;
    int status = 0;
    int orphaned = argc > 2 && strcmp(argv[1], "-orphan") == 0;
    pid_t pid = fork();

    if (pid == 0 && orphaned)
        orphan((unsigned)atoi(argv[2]));
    if (pid == 0)
        child(argc > 1 ? argv[1] : NULL);
    if (pid < 0)
        return 1;
    if (orphaned) {
        printf("parent pid=%d child=%d orphan\n", (int)getpid(), (int)pid);
        return 0;
    }
    for (long i = 0; i < PARENT_STEPS; i++)
        acc += parent_step(i);
    if (waitpid(pid, &status, 0) != pid)
        return 1;
    printf("parent pid=%d child=%d status=%d acc=%ld\n", (int)getpid(), (int)pid,
           WEXITSTATUS(status), acc);
    return 0;
}
