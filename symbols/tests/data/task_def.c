/*
 * A task_struct shaped like the kernel's where it matters: `comm` sits behind members of
 * anonymous unions and structs (C11), whose offsets add up. Each `*_probe` array is one
 * byte longer than an offset the compiler computed, so `nm -S` tells the test the truth.
 */
#include <stddef.h>

#define TASK_COMM_LEN 16

struct list_head {
	struct list_head *next, *prev;
};

struct task_struct {
	unsigned int __state;
	void *stack;
	union {
		long usage;
		struct list_head tasks;
	};
	int pid;
	struct {
		char pad[3];
		union {
			unsigned long flags;
			struct {
				short prio;
				char comm[TASK_COMM_LEN];
			};
		};
	};
	struct list_head children;
	char comm_after[TASK_COMM_LEN];
};

/* Not the struct asked for, with a member of the same name at another offset. */
struct mm_struct {
	long count;
	char comm[TASK_COMM_LEN];
};

struct task_struct init_task;
struct mm_struct init_mm;

char comm_probe[offsetof(struct task_struct, comm) + 1];
char pid_probe[offsetof(struct task_struct, pid) + 1];
char tasks_probe[offsetof(struct task_struct, tasks) + 1];
char comm_after_probe[offsetof(struct task_struct, comm_after) + 1];
char mm_comm_probe[offsetof(struct mm_struct, comm) + 1];
