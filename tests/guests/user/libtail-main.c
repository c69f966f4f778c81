/* The program of libtail.so (cli/tests/record_user_shape.rs): a dynamic PIE calling the
 * library's tail-calling function from a frame of its own, then printing the library's
 * log of the functions it entered as `ENTRY name` lines. With an argument N it first maps
 * the library executable at N new addresses, unmapping each (a dlopen/dlclose
 * loop's mappings, without the loader's work; with a second argument `keep`, unmapping
 * none): the plugin places the library at each and must stay bounded, the tail calls still
 * seen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int lib_tail1(int x);
int lib_entries(const char ***out);

volatile int sink;

__attribute__((noinline, noclone)) int caller(int x)
{
	int r = lib_tail1(x);
	sink += r;
	return r + 1;
}

static int map_loop(long n, int keep)
{
	Dl_info info;
	if (!dladdr((void *)lib_tail1, &info) || !info.dli_fname)
		return 1;
	int fd = open(info.dli_fname, O_RDONLY);
	if (fd < 0)
		return 2;
	/* Far from the program, its libraries and the stack: 64 KiB apart, never reused. */
	uintptr_t base = (uintptr_t)1 << 36;
	for (long i = 0; i < n; i++) {
		void *at = (void *)(base + (uintptr_t)i * 0x10000);
		/* The whole library (its code lies past its first page). */
		void *p = mmap(at, 0x8000, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED_NOREPLACE,
			       fd, 0);
		if (p != at || (!keep && munmap(p, 0x8000)))
			return 3;
	}
	close(fd);
	printf("MAPPED %ld\n", n);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && map_loop(atol(argv[1]), argc > 2 && !strcmp(argv[2], "keep")))
		return 1;
	caller(1);
	caller(2);
	const char **entries;
	int n = lib_entries(&entries);
	for (int i = 0; i < n; i++)
		printf("ENTRY %s\n", entries[i]);
	return 0;
}
