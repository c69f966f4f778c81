/* Execs the program its first argument names, with the rest as its arguments
 * (cli/tests/record_user_resync.rs: a resync in an exec'd program, with its own files). */
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	execv(argv[1], argv + 1);
	perror("execv");
	return 1;
}
