/*
 * /init of the initramfs guest: PID 1 of Debian's arm64 kernel, a static glibc program whose
 * functions make known syscalls and take known exceptions a known number of times
 * (counts.h), then powers the machine off so that QEMU exits with status 0.
 *
 *   main
 *     do_open             x 2             one openat(2) each: /init (fd 3, closed again) and
 *                                         a path that is not there (-ENOENT); the first
 *                                         line says what each got (cli/tests/record_args.rs)
 *     do_write            x WRITE_CALLS   one write(2) to the console each
 *     do_getpid_loop      once            one_getpid x GETPID_CALLS, one getpid(2) each
 *     do_sleep            x SLEEP_CALLS   one nanosleep(2) of 50 ms each
 *     do_fault            once            mmap(2), touch_page x FAULT_PAGES: one page fault each
 *     do_fork             once            fork(2); the child runs child_work (child_step x
 *                                         CHILD_STEPS, one getppid(2) each) and _exit(2)s;
 *                                         the parent waits for it
 *   reboot(RB_POWER_OFF)
 *
 * Built with -O2 -fno-inline -fno-omit-frame-pointer -fno-optimize-sibling-calls; every function here is noipa, so the
 * calls stay as written (no inlining, cloning or sibling calls folded across functions).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "counts.h"

#define NOIPA __attribute__((noipa))

static int console = 1;

/* One write(2) of a line to the console. */
NOIPA void do_write(const char *line)
{
    (void)!write(console, line, strlen(line));
}

/* One openat(2) of `path`, closed again: what the kernel returned (an fd, or -errno). */
NOIPA int do_open(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -errno;
    close(fd);
    return fd;
}

/* One getpid(2). */
NOIPA int one_getpid(void)
{
    return getpid();
}

NOIPA long do_getpid_loop(int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += one_getpid();
    return sum;
}

/* One nanosleep(2) of 50 ms: long enough that the timer cannot fire before the kernel
 * schedules the task out (with 1 ms, a host preempting QEMU's vCPU thread at that moment
 * let the timer expire first, and nanosleep returned without sleeping). */
NOIPA void do_sleep(void)
{
    struct timespec ts = {0, 50000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The first store to a fresh anonymous page: one page fault. */
NOIPA void touch_page(volatile char *page)
{
    *page = 1;
}

NOIPA int do_fault(int pages)
{
    long size = sysconf(_SC_PAGESIZE);
    char *buf = mmap(NULL, pages * size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return -1;
    for (int i = 0; i < pages; i++)
        touch_page(buf + i * size);
    return munmap(buf, pages * size);
}

/* One getppid(2): the child's own syscall. */
NOIPA int child_step(void)
{
    return getppid();
}

NOIPA int child_work(int steps)
{
    int ppid = 0;
    for (int i = 0; i < steps; i++)
        ppid = child_step();
    return ppid;
}

/* Forks a child that runs child_work and exits; returns the child's PID once it is reaped,
 * -1 when something failed. */
NOIPA int do_fork(void)
{
    pid_t child = fork();
    if (child < 0)
        return -1;
    if (child == 0)
        _exit(child_work(CHILD_STEPS) == 1 ? 0 : 1);
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? child : -1;
}

int main(void)
{
    /* The kernel gives /init the console as fds 0-2 when /dev/console exists; open it
     * ourselves otherwise. */
    if (fcntl(1, F_GETFD) < 0) {
        int fd = open("/dev/console", O_WRONLY);
        if (fd >= 0)
            console = fd;
    }
    char line[128];
    int init_fd = do_open("/init");
    int none_fd = do_open("/no/such/file");
    snprintf(line, sizeof line, "INIT: start open /init = %d, open /no/such/file = %d\n",
             init_fd, none_fd);
    do_write(line);
    long sum = do_getpid_loop(GETPID_CALLS);
    for (int i = 0; i < SLEEP_CALLS; i++)
        do_sleep();
    int faulted = do_fault(FAULT_PAGES);
    int child = do_fork();
    snprintf(line, sizeof line, "INIT: pid=%d getpid_sum=%ld fault=%d child=%d\n",
             (int)getpid(), sum, faulted, child);
    do_write(line);
    do_write(sum == GETPID_CALLS && faulted == 0 && child > 1 ? "INIT: ok\n" : "INIT: FAILED\n");
    sync();
    reboot(RB_POWER_OFF);
    return 1; /* PID 1 exiting panics the kernel: QEMU (-no-reboot, panic=-1) still ends. */
}
