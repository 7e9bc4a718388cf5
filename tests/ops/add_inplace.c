/* tests/ops/add_inplace.c: add_inplace's checks: a += b.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
/* one fp32 add per element: exactly the sum of the two floats */
static void test_add_inplace_values(void)
{
	enum { N = 20 };
	float out[N], b[N];
	double sum[N];

	fill_f32(out, N, -3.0, 3.0);
	fill_f32(b, N, -1.0, 1.0);
	for (int i = 0; i < N; i++)
		sum[i] = (double)(out[i] + b[i]);
	add_inplace_cpu(out, b, N);
	check_close("add_inplace", out, sum, N, 0.0, 0.0);
}

static void add_inplace_values_check(void)
{
	test_add_inplace_values();
}
#endif

/* no gradient check here: the identity on both operands: nothing to check */
#define add_inplace_grad_check NULL

#ifdef OPS_TEST_CUDA
struct add_args {
	float *a;
	const float *b;
	long n;
};

static void add_gpu(const void *p)
{
	const struct add_args *a = p;
	gpu->ops->add_inplace(a->a, a->b, a->n);
}

/* One fp32 add per element on both sides: bitwise equal. */
static void test_add_inplace(long n, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "add_inplace n=%ld%s", n, offset ? " unaligned" : ""))
		return;
	size_t off = offset ? 4 : 0;
	float *a0 = rand_f32((size_t)n, -1, 1), *b = rand_f32((size_t)n, -1, 1);
	float *ref = dup_bytes(a0, (size_t)n * 4);
	double t0 = now_ms();
	add_inplace_cpu(ref, b, n);
	c.cpu_ms = now_ms() - t0;
	struct add_args a = { NULL, dev_from(b, (size_t)n * 4, off), n };
	a.a = case_out(&c, "a", (size_t)n * 4, a0, off);
	case_run(&c, add_gpu, &a);
	check_exact(&c, "a", ref, (size_t)n * 4, 4);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void add_inplace_cuda_check(int realistic)
{
	if (!realistic) {
		test_add_inplace(1001, 1);
	} else {
		test_add_inplace(512L * 4096 + 3, 0);
	}
}
#endif
