static int __attribute__((noinline)) helper(int x)
{
	return x + 3;
}

int two(int x)
{
	return helper(x) * 3;
}

int one(int x);
int alias_impl(int x);
int weak_fn(int x);

int main(int argc, char **argv)
{
	(void)argv;
	return one(argc) + two(argc) + alias_impl(argc) + weak_fn(argc);
}
