/* A shared library's functions' arguments and return values (cli/tests/record_args.rs):
 * calls from a dynamic PIE into libc through its PLT, each logged by main as uftrace
 * replay shows it ("log: getenv("QU_ARGS") = "yes";"). Built plainly (qemu-uftrace) and
 * with -pg (native uftrace, x86_64). getenv and getpid return by their own return
 * instruction (a tail call's return value is not read: DEVELOPERS.md). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void)
{
	const char *e = getenv("QU_ARGS");
	printf("log: getenv(\"QU_ARGS\") = \"%s\";\n", e);
	int pid = getpid();
	printf("log: getpid() = %d;\n", pid);
	return 0;
}
