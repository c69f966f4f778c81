/* A shared library's tail calls at -O2 (cli/tests/record_user_shape.rs): lib_tail1 (called
 * from the program through its PLT) jumps to lib_tail2, which jumps to lib_leaf. Hidden, so
 * that the jumps are direct (no PLT inside the library). Each function notes its own entry
 * (entries only: an exit hook would keep the sibling calls from being made); the program
 * prints the log. */
#define F __attribute__((noinline, noclone))
#define HIDDEN __attribute__((visibility("hidden")))

static const char *entries[64];
static int n_entries;
volatile int lib_sink;

F HIDDEN void lib_note(const char *name)
{
	if (n_entries < 64)
		entries[n_entries++] = name;
}

F HIDDEN int lib_leaf(int x)
{
	lib_note("lib_leaf");
	lib_sink += x;
	return x + 1;
}

F HIDDEN int lib_tail2(int x)
{
	lib_note("lib_tail2");
	return lib_leaf(x * 3);
}

F int lib_tail1(int x)
{
	lib_note("lib_tail1");
	return lib_tail2(x + 1);
}

int lib_entries(const char ***out)
{
	*out = entries;
	return n_entries;
}
