/*
 * /init of the unwinding benchmark's guest (bench/unwind.sh): PID 1 forks NTASKS children
 * that sleep in pause(2), prints the marker once they are asleep, and sleeps in read(2) on
 * the console. The benchmark saves the machine there; a run from that snapshot is given a
 * line: PID 1 wakes every child with SIGUSR1 (whose handler exits), reaps them and powers
 * off. So every task runs after the start: each has its stack cookies unwound.
 */
#include <signal.h>
#include <string.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NTASKS 100

static void say(const char *line)
{
    (void)!write(1, line, strlen(line));
}

static void leave(int signo)
{
    _exit(signo == SIGUSR1 ? 0 : 1);
}

int main(void)
{
    static pid_t child[NTASKS];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = leave;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < NTASKS; i++) {
        child[i] = fork();
        if (child[i] == 0)
            for (;;)
                pause();
    }
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    say("MANY: waiting\n");
    char buf[16];
    (void)!read(0, buf, sizeof buf);
    for (int i = 0; i < NTASKS; i++)
        if (child[i] > 0)
            kill(child[i], SIGUSR1);
    int reaped = 0;
    while (wait(NULL) > 0)
        reaped++;
    say(reaped == NTASKS ? "MANY: done\n" : "MANY: FAILED\n");
    sync();
    reboot(RB_POWER_OFF);
    return 1;
}
