/* Only a declaration of task_struct: the first unit must not end the search. */
struct task_struct;

struct task_struct *current_task;

int main(void)
{
	return current_task != 0;
}
