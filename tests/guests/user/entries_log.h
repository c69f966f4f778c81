/* The entries-only log of the shape guests (cli/tests/record_user_shape.rs): each function
 * notes its own entry, and main prints the log at the end as `ENTRY name` lines. Entries
 * only: -finstrument-functions' exit hook would keep the sibling calls from being made. */
#include <stdio.h>

#define F __attribute__((noinline, noclone))

static const char *entries[256];
static int n_entries;

F static void note(const char *name)
{
	if (n_entries < 256)
		entries[n_entries++] = name;
}

static void print_entries(void)
{
	for (int i = 0; i < n_entries; i++)
		printf("ENTRY %s\n", entries[i]);
}
