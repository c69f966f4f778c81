/* How many times /init's functions run: read by init.c and, through include_str!, by the
 * tests (tests/src/linux_guest.rs), so that the expected call counts have one source. */
#define WRITE_CALLS 3
#define GETPID_CALLS 100
#define SLEEP_CALLS 2
#define FAULT_PAGES 64
#define CHILD_STEPS 5
