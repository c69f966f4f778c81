/* Tail calls as -O2 leaves them (cli/tests/record_user_shape.rs): each function notes its
 * own entry in a log (entries only: -finstrument-functions' exit hook would keep the
 * sibling calls from being made), printed at the end as `ENTRY name` lines. */
#include <stdio.h>
#include <unistd.h>

#define F __attribute__((noinline, noclone))

static const char *entries[256];
static int n_entries;
volatile int sink;

F static void note(const char *name)
{
	if (n_entries < 256)
		entries[n_entries++] = name;
}

F int leaf(int x)
{
	note("leaf");
	sink += x;
	return x + 1;
}

/* A chain of tail calls: tail1 -> tail2 -> leaf. */
F int tail2(int x)
{
	note("tail2");
	return leaf(x * 3);
}

F int tail1(int x)
{
	note("tail1");
	return tail2(x + 1);
}

/* A plain caller of the chain: its frame is the one the tail calls replace. */
F int caller(int x)
{
	note("caller");
	int r = tail1(x);
	sink += r;
	return r + 1;
}

/* A void function whose last act is a call. */
F void vtail(int x)
{
	note("vtail");
	sink += x;
	leaf(x);
}

/* A loop that jumps back to its own start is not an entry. */
F int count(int x)
{
	note("count");
	int s = 0;
	for (int i = 0; i < x; i++)
		s += leaf(i);
	return s;
}

int main(void)
{
	note("main");
	caller(1);
	vtail(2);
	count(2);
	caller(3);
	for (int i = 0; i < n_entries; i++)
		printf("ENTRY %s\n", entries[i]);
	return 0;
}
