/* Tail calls as -O2 leaves them (cli/tests/record_user_shape.rs): each function notes its
 * own entry in a log (entries only: -finstrument-functions' exit hook would keep the
 * sibling calls from being made), printed at the end as `ENTRY name` lines. */
#include <unistd.h>

#include "entries_log.h"

volatile int sink;

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

/* A tail call through a pointer: a jump through a register into leaf's entry. */
F int ptrtail(int (*f)(int), int x)
{
	note("ptrtail");
	sink += x;
	return f(x + 1);
}

/* The same in a function of a PLT entry's size (8-12 bytes): it is no PLT entry, so the
 * jump enters leaf. It notes nothing (a call would make it larger); leaf notes itself. */
F int tinyjump(int (*f)(int), int x)
{
	return f(x + 1);
}

/* A switch table: jumps through a register within one function, never an entry, some to
 * code right after a call. */
F int pick(int x)
{
	int r = 0;
	note("pick");
	switch (x) {
	case 0:
		r = leaf(1);
		/* fall through */
	case 1:
		r += 7;
		break;
	case 2:
		r = leaf(2);
		/* fall through */
	case 3:
		r += sink;
		break;
	case 4:
		r = 13;
		break;
	case 5:
		r = leaf(5) * 3;
		break;
	case 6:
		r = sink * 5;
		break;
	case 7:
		r = sink ^ 9;
		break;
	case 8:
		r = leaf(8) - sink;
		break;
	case 9:
		r = 21;
		break;
	default:
		r = 1;
	}
	sink += r;
	return r;
}

int main(void)
{
	note("main");
	caller(1);
	vtail(2);
	count(2);
	caller(3);
	ptrtail(leaf, 4);
	tinyjump(leaf, 6);
	for (int i = 0; i < 11; i++)
		pick(i);
	print_entries();
	return 0;
}
