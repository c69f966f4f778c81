/* How often the process tests' programs call their functions (read by the tests too). */
#define INIT_STEPS 7
#define CHILD_STEPS 5
#define WORKER_STEPS 11
#define THREAD_STEPS 13
#define PLUG_STEPS 3
