/* tests/ops/rmsnorm_backward.c: rmsnorm_backward's checks: RMSNorm backward:
 * din += d/d in.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

/* no value check here: its values are the gradient check's (test_ops_grad) */
#define rmsnorm_backward_values_check NULL

#ifdef OPS_TEST_GRAD
struct rmsnorm_ctx {
	int T, C;
	double eps;
	const double *w, *lw;
	double *x;
};

static double rmsnorm_loss(const void *p)
{
	const struct rmsnorm_ctx *c = p;
	return ref_rmsnorm_dot(c->lw, c->x, c->w, c->eps, c->T, c->C);
}

static void test_rmsnorm_backward(void)
{
	enum { T = 3, C = 16, N = T * C };
	float x[N], lw[N], rstd[T], din[N] = { 0 }, din2[N];
	bf16 weight[C];
	double xd[N], wd[C], lwd[N], want[N];
	float eps = 1e-5f;

	fill_f32(x, N, -2.0, 2.0);
	for (int i = 2 * C; i < 3 * C; i++)
		x[i] *= 0.01f; /* a row whose mean square is near eps, so eps matters */
	fill_bf16(weight, C, 0.5, 1.5);
	fill_f32(lw, N, -1.0, 1.0);
	rmsnorm_forward_cpu(NULL, NULL, C, rstd, x, weight, eps, T, C);
	rmsnorm_backward_cpu(din, lw, x, weight, rstd, T, C);

	widen_f32(xd, x, N);
	widen_bf16(wd, weight, C);
	widen_f32(lwd, lw, N);
	struct rmsnorm_ctx ctx = { T, C, eps, wd, lwd, xd };
	finite_diff(want, xd, N, rmsnorm_loss, &ctx);
	/* Each element is a C-term double dot plus a few fp32 ops on values up
	 * to ~100 (the small row's rstd): fp32 rounding gives ~1e-7 relative;
	 * rtol 1e-5 leaves room, atol covers elements that cancel to ~0. */
	check_close("rmsnorm_backward din", din, want, N, 1e-5, 1e-5);

	memcpy(din2, din, sizeof din);
	rmsnorm_backward_cpu(din2, lw, x, weight, rstd, T, C);
	check_accumulated("rmsnorm_backward din", din2, din, N);
}

static void rmsnorm_backward_grad_check(void)
{
	test_rmsnorm_backward();
}
#endif

#ifdef OPS_TEST_CUDA
struct rmsnorm_bwd_args {
	float *din;
	const float *in, *dout, *rstd_in;
	const bf16 *weight;
	int T, C;
};

static void rmsnorm_bwd_gpu(const void *p)
{
	const struct rmsnorm_bwd_args *a = p;
	gpu->ops->rmsnorm_backward(a->din, a->dout, a->in, a->weight, a->rstd_in, a->T, a->C);
}

/* The row dot sum(dy w x) runs in double on the CPU and in fp32 on the GPU;
 * it enters din scaled by r^3/C, so its error is tiny next to din's own
 * roundings: 1e-5 of the largest |din| plus 1e-5 relative. */
static void test_rmsnorm_backward(int T, int C)
{
	struct gpu_case c;
	if (!case_begin(&c, "rmsnorm_backward T=%d C=%d", T, C))
		return;
	size_t n = (size_t)T * C;
	float *in = rand_f32(n, -2, 2), *dout = rand_f32(n, -1, 1), *din0 = rand_f32(n, -1, 1);
	bf16 *w = rand_bf16((size_t)C, 0.5f, 1.5f);
	float *rstd = host_alloc((size_t)T * 4);
	rmsnorm_forward_cpu(NULL, NULL, C, rstd, in, w, 1e-6f, T, C);
	float *ref = dup_bytes(din0, n * 4);
	double t0 = now_ms();
	rmsnorm_backward_cpu(ref, dout, in, w, rstd, T, C);
	c.cpu_ms = now_ms() - t0;

	struct rmsnorm_bwd_args a = { 0 };
	a.in = dev_from(in, n * 4, 0);
	a.dout = dev_from(dout, n * 4, 0);
	a.weight = dev_from(w, (size_t)C * 2, 0);
	a.rstd_in = dev_from(rstd, (size_t)T * 4, 0);
	a.T = T;
	a.C = C;
	a.din = case_out(&c, "din", n * 4, din0, 0);
	case_run(&c, rmsnorm_bwd_gpu, &a);
	check(&c, "din", ref, n, 0, 1e-5, 1e-5);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void rmsnorm_backward_cuda_check(int realistic)
{
	if (!realistic) {
		test_rmsnorm_backward(3, 33);
	} else {
		test_rmsnorm_backward(512, 4096);
	}
}
#endif
