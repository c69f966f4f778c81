/* Freestanding firmware-like image, linked at 0x40080000. */
static volatile int sink;

/* Hand-written code leaves entry points untyped (STT_NOTYPE): still functions. */
__asm__(".text\n"
	".globl untyped_entry\n"
	"untyped_entry:\n"
	"	mov x0, #1\n"
	"	ret\n");

static void __attribute__((noinline)) spin(int n)
{
	for (int i = 0; i < n; i++)
		sink = i;
}

void __attribute__((noinline)) work(int n)
{
	spin(n);
	spin(n + 1);
}

void _start(void)
{
	work(3);
	for (;;)
		;
}
