/*
 * An /init that does what any unprivileged guest user can (cli/tests/guest_names.rs): it
 * makes 17 nested directories of 255-byte names (the last with ESC and CR in it), copies
 * /worker to the bottom (a path of about 4.4 KB, longer than uftrace's map line buffer) and
 * runs it from there, with a comm holding ESC and CR in both processes.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEPTH 17

static void fail(const char *what)
{
    printf("DEEP: %s failed\n", what);
    fflush(stdout);
    reboot(RB_POWER_OFF);
    _exit(1);
}

static void copy(const char *from, const char *to)
{
    char buf[65536];
    ssize_t n;
    int in = open(from, O_RDONLY);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (in < 0 || out < 0)
        fail("open");
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, n) != n)
            fail("write");
    close(in);
    close(out);
}

int main(void)
{
    char name[256];
    prctl(PR_SET_NAME, "in\x1b[2J\rit");
    for (int i = 0; i < DEPTH; i++) {
        memset(name, 'a' + i, 255);
        name[255] = 0;
        if (i == DEPTH - 1)
            memcpy(name, "esc\x1b[31m\r", 9);
        if (mkdir(name, 0755) < 0)
            fail("mkdir");
        if (chdir(name) < 0)
            fail("chdir");
    }
    copy("/worker", "worker");
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"./worker", "deep", NULL};
        char *envp[] = {NULL};
        prctl(PR_SET_NAME, "ch\x1b]0;x\x07\r");
        execve("./worker", argv, envp);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("DEEP: worker %d status %d\n", pid, status);
    puts("INIT: ok");
    fflush(stdout);
    reboot(RB_POWER_OFF);
    return 1;
}
