/*
 * Exits with status 3: main's return value reaches QEMU's exit status through
 * semihosting (rt_exit in start.S), for the CLI's exit-status test.
 */
#include "guest.h"

NOIPA int exit_status(void)
{
    return 3;
}

int main(void)
{
    int status;

    rt_puts("exiting with status 3\n");
    status = exit_status();
    BARRIER(status); /* a call, not a tail call (`b exit_status`) */
    return status;
}
