/* A shared library's functions' arguments and return values (cli/tests/record_args.rs):
 * calls from a dynamic PIE into libc through its PLT, each logged by main as uftrace
 * replay shows it ("log: getenv("QU_ARGS") = "yes";"). Built plainly (qemu-uftrace) and
 * with -pg (native uftrace, x86_64). getenv and getpid return by their own return
 * instruction; glibc's strtol and strdup leave by a tail call (into
 * ____strtol_l_internal, into memcpy), whose return gives their value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	const char *e = getenv("QU_ARGS");
	printf("log: getenv(\"QU_ARGS\") = \"%s\";\n", e);
	int pid = getpid();
	printf("log: getpid() = %d;\n", pid);
	long n = strtol("-42", NULL, 10);
	printf("log: strtol(\"-42\") = %ld;\n", n);
	char *copy = strdup("copied");
	printf("log: strdup(\"copied\") = \"%s\";\n", copy);
	free(copy);
	return 0;
}
