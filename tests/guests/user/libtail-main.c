/* The program of libtail.so (cli/tests/record_user_shape.rs): a dynamic PIE calling the
 * library's tail-calling function from a frame of its own, then printing the library's
 * log of the functions it entered as `ENTRY name` lines. */
#include <stdio.h>

int lib_tail1(int x);
int lib_entries(const char ***out);

volatile int sink;

__attribute__((noinline, noclone)) int caller(int x)
{
	int r = lib_tail1(x);
	sink += r;
	return r + 1;
}

int main(void)
{
	caller(1);
	caller(2);
	const char **entries;
	int n = lib_entries(&entries);
	for (int i = 0; i < n; i++)
		printf("ENTRY %s\n", entries[i]);
	return 0;
}
