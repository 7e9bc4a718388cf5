/* tests/ops/sumsq.c: sumsq's checks: the sum of squares (gradient clipping),
 * deterministic order.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_sumsq_values(void)
{
	enum { N = 100000 };
	float *x = NEW(float, N), out = -1.0f;
	float scratch[4096];

	CHECK(sumsq_scratch_floats(N) == 4096);
	for (int i = 0; i < N; i++)
		x[i] = (float)(i + 1);
	/* 1^2 + ... + N^2 = N (N+1) (2N+1) / 6 = 333338333350000, exact in double
	 * (< 2^53), then rounded once to fp32: 333338317422592.  Summing in
	 * fp32 instead would be off by far more than that one rounding. */
	sumsq_cpu(&out, scratch, x, N);
	double want = 333338317422592.0;
	check_close("sumsq of 1..100000 = fp32(333338333350000)", &out, &want, 1, 0.0, 0.0);
	sumsq_cpu(&out, scratch, x, 0);
	want = 0.0;
	check_close("sumsq of nothing", &out, &want, 1, 0.0, 0.0);
	sumsq_cpu(&out, scratch, x + 2, 1);
	want = 9.0;
	check_close("sumsq of one element", &out, &want, 1, 0.0, 0.0);
	free(x);
}

static void sumsq_values_check(void)
{
	test_sumsq_values();
}
#endif

/* no gradient check here: a reduction for clipping, outside the graph */
#define sumsq_grad_check NULL

#ifdef OPS_TEST_CUDA
struct sumsq_args {
	float *out, *scratch;
	const float *x;
	long n;
};

static void sumsq_gpu(const void *p)
{
	const struct sumsq_args *a = p;
	gpu->ops->sumsq(a->out, a->scratch, a->x, a->n);
}

/* The CPU sums in double; the GPU in fp32, at most ~8 terms per thread
 * plus two trees of 8 and 10 levels: relative error well under 1e-5. */
static void test_sumsq(long n, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "sumsq n=%ld%s", n, offset ? " unaligned" : ""))
		return;
	float *x = rand_f32((size_t)n, -1, 1);
	float ref;
	double t0 = now_ms();
	sumsq_cpu(&ref, NULL, x, n);
	c.cpu_ms = now_ms() - t0;
	struct sumsq_args a = { NULL, NULL, dev_from(x, (size_t)n * 4, offset ? 4 : 0), n };
	a.out = case_out(&c, "out", 4, NULL, 0);
	a.scratch = case_scratch(&c, sumsq_scratch_floats(n) * 4);
	case_run(&c, sumsq_gpu, &a);
	check(&c, "out", &ref, 1, 0, 0, 1e-5);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void sumsq_cuda_check(int realistic)
{
	if (!realistic) {
		test_sumsq(1, 0);
		test_sumsq(1000, 1);
	} else {
		test_sumsq(16L * 1024 * 1024 + 5, 0);
	}
}
#endif
