/* tests/ops/adamw_update.c: adamw_update's checks: AdamW with bias
 * correction, decoupled weight decay and the clipping scale.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_adamw_values(void)
{
	/* step 1 by hand: with m = v = 0, mhat = g and vhat = g^2, so the step
	 * is lr * g / (|g| + eps) after decaying p by (1 - lr*wd) */
	float p[2] = { 1.0f, -2.0f }, g[2] = { 0.5f, -4.0f }, m[2] = { 0 }, v[2] = { 0 };
	const float lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, clip = 0.5f;
	adamw_update_cpu(p, g, m, v, 2, lr, b1, b2, eps, wd, clip, 1);
	/* g = 0.25: p = 1 * 0.999 - 0.1 * 0.25 / (0.25 + 1e-8) = 0.899000004
	 * g = -2:   p = -2 * 0.999 + 0.1 * 2 / (2 + 1e-8)     = -1.8979999995 */
	const double want_p[2] = { 0.899000004, -1.8979999995 };
	/* (1 - b1) g and (1 - b2) g^2, with the betas as the fp32 values they
	 * are: 1 - 0.999f = 9.9998713e-4, not 1e-3 */
	const double want_m[2] = { (1.0 - (double)b1) * 0.25, (1.0 - (double)b1) * -2.0 };
	const double want_v[2] = { (1.0 - (double)b2) * 0.0625, (1.0 - (double)b2) * 4.0 };
	check_close("adamw step 1 param (hand computed)", p, want_p, 2, 1e-7, 1e-6);
	check_close("adamw step 1 m (hand computed)", m, want_m, 2, 0.0, 1e-6);
	check_close("adamw step 1 v (hand computed)", v, want_v, 2, 0.0, 1e-6);

	/* step 2 against the textbook form in double */
	const float g2[2] = { 1.0f, 3.0f };
	double md[2], vd[2], want2[2];
	ref_adamw(want2, md, vd, p, g2, m, v, 2, lr, b1, b2, eps, wd, clip, 2);
	adamw_update_cpu(p, g2, m, v, 2, lr, b1, b2, eps, wd, clip, 2);
	check_close("adamw step 2 param (double reference)", p, want2, 2, 1e-7, 1e-6);
	check_close("adamw step 2 m", m, md, 2, 0.0, 1e-6);
	check_close("adamw step 2 v", v, vd, 2, 0.0, 1e-6);
}

static void adamw_update_values_check(void)
{
	test_adamw_values();
}
#endif

/* no gradient check here: the optimizer step, outside the graph */
#define adamw_update_grad_check NULL

#ifdef OPS_TEST_CUDA
struct adamw_args {
	float *param, *m, *v;
	const float *grad;
	long n;
	float lr, wd, grad_scale;
	int t;
};

static void adamw_gpu(const void *p)
{
	const struct adamw_args *a = p;
	gpu->ops->adamw_update(a->param, a->grad, a->m, a->v, a->n, a->lr, 0.9f, 0.999f, 1e-8f, a->wd, a->grad_scale,
	                       a->t);
}

/* The same operation order and host-side constants; the GPU may fuse a
 * multiply-add the CPU rounds twice, so m, v and param differ by a few
 * ulps: 1e-6 of the largest value plus 1e-5 relative. */
static void test_adamw(long n, int t, float wd, float grad_scale)
{
	struct gpu_case c;
	if (!case_begin(&c, "adamw_update n=%ld t=%d wd=%g grad_scale=%g", n, t, wd, grad_scale))
		return;
	float *param0 = rand_f32((size_t)n, -1, 1), *grad = rand_f32((size_t)n, -1, 1);
	float *m0 = rand_f32((size_t)n, -0.1f, 0.1f), *v0 = rand_f32((size_t)n, 0, 0.01f);
	if (t == 1) { /* the first step starts from zero moments */
		memset(m0, 0, (size_t)n * 4);
		memset(v0, 0, (size_t)n * 4);
	}
	float *ref_p = dup_bytes(param0, (size_t)n * 4), *ref_m = dup_bytes(m0, (size_t)n * 4);
	float *ref_v = dup_bytes(v0, (size_t)n * 4);
	float lr = 2e-4f;
	double t0 = now_ms();
	adamw_update_cpu(ref_p, grad, ref_m, ref_v, n, lr, 0.9f, 0.999f, 1e-8f, wd, grad_scale, t);
	c.cpu_ms = now_ms() - t0;
	struct adamw_args a = { NULL, NULL, NULL, dev_from(grad, (size_t)n * 4, 0), n, lr, wd, grad_scale, t };
	a.param = case_out(&c, "param", (size_t)n * 4, param0, 0);
	a.m = case_out(&c, "m", (size_t)n * 4, m0, 0);
	a.v = case_out(&c, "v", (size_t)n * 4, v0, 0);
	case_run(&c, adamw_gpu, &a);
	check(&c, "param", ref_p, (size_t)n, 0, 1e-6, 1e-5);
	check(&c, "m", ref_m, (size_t)n, 0, 1e-6, 1e-5);
	check(&c, "v", ref_v, (size_t)n, 0, 1e-6, 1e-5);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void adamw_update_cuda_check(int realistic)
{
	if (!realistic) {
		test_adamw(37, 10, 0.0f, 0.5f);
	} else {
		test_adamw(1L << 20, 1, 0.01f, 1.0f);
	}
}
#endif
