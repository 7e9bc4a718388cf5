/* tests/ops/swiglu_backward.c: swiglu_backward's checks: dgate, dup of
 * silu(gate) * up at bf16 gate and up, rounded to bf16 at any row pitch.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

/* no value check here: swiglu_forward.c's pitch check runs it too */
#define swiglu_backward_values_check NULL

#ifdef OPS_TEST_GRAD
struct swiglu_ctx {
	long n;
	const double *lw;
	double *gate, *up;
};

static double swiglu_loss(const void *p)
{
	const struct swiglu_ctx *c = p;
	return ref_swiglu_dot(c->lw, c->gate, c->up, c->n);
}

static void test_swiglu_backward(void)
{
	enum { N = 48 };
	float lw[N], dgate[N], dup[N];
	bf16 gate[N], up[N], dgate16[N], dup16[N];
	double gd[N], ud[N], lwd[N], want_g[N], want_u[N];

	fill_bf16(gate, N, -8.0, 8.0); /* both tails of the sigmoid */
	fill_bf16(up, N, -2.0, 2.0);
	fill_f32(lw, N, -1.0, 1.0);
	swiglu_backward_cpu(dgate16, dup16, N, lw, gate, up, 1, N);
	for (int i = 0; i < N; i++)
		dgate[i] = f32_from_bf16(dgate16[i]), dup[i] = f32_from_bf16(dup16[i]);

	widen_bf16(gd, gate, N); /* the derivative at the bf16 points the op reads */
	widen_bf16(ud, up, N);
	widen_f32(lwd, lw, N);
	struct swiglu_ctx ctx = { N, lwd, gd, ud };
	finite_diff(want_g, gd, N, swiglu_loss, &ctx);
	finite_diff(want_u, ud, N, swiglu_loss, &ctx);
	/* fp32 arithmetic (a few ulp), then one rounding to bf16: at most half
	 * a bf16 ulp, 2^-8 relative (8 significant bits); the (1 - sig)
	 * cancellation for large g costs absolute accuracy, hence the atol */
	check_close("swiglu_backward dgate", dgate, want_g, N, 1e-6, 4e-3);
	check_close("swiglu_backward dup", dup, want_u, N, 1e-6, 4e-3);
}

static void swiglu_backward_grad_check(void)
{
	test_swiglu_backward();
}
#endif

#ifdef OPS_TEST_CUDA
#include "swiglu_case.h"

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void swiglu_backward_cuda_check(int realistic)
{
	if (!realistic) {
		test_swiglu(7, 143, 143, 1, 1); /* swiglu_forward's cases, backward */
		test_swiglu(7, 143, 143, 0, 1);
		test_swiglu(7, 143, 150, 0, 1);
		test_swiglu(5, 64, 72, 0, 1);
		test_swiglu(5, 60, 68, 0, 1);
		test_swiglu(5, 64, 72, 1, 1);
	} else {
		test_swiglu(512, 11008, 11008, 0, 1);
		test_swiglu(512, 27648, 27648 + 160, 0, 1);
	}
}
#endif
