/* Two files define a static `helper`: both must be kept, at their own addresses. */
static int __attribute__((noinline)) helper(int x)
{
	return x * 2;
}

int one(int x)
{
	return helper(x) + 1;
}

/* An alias: two names, one address, one function. */
int real_impl(int x)
{
	return x - 7;
}
int alias_impl(int x) __attribute__((alias("real_impl")));

__attribute__((weak)) int weak_fn(int x)
{
	return x ^ 5;
}
