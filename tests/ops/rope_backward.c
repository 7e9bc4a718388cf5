/* tests/ops/rope_backward.c: rope_backward's checks: the inverse rotation of
 * the gradient.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

/* no value check here: rope_forward.c checks that it inverts rope_forward and
 * rotates documents as alone */
#define rope_backward_values_check NULL

#ifdef OPS_TEST_GRAD
struct rope_ctx {
	int T, S, nh, D;
	const double *cos_t, *sin_t, *lw;
	double *x;
};

static double rope_loss(const void *p)
{
	const struct rope_ctx *c = p;
	return ref_rope_dot(c->lw, c->x, c->cos_t, c->sin_t, c->T, c->S, c->nh, c->D);
}

static void test_rope_backward(void)
{
	enum { B = 2, S = 3, NH = 2, D = 8, N = B * S * NH * D };
	float cos_t[S * D / 2], sin_t[S * D / 2], lw[N], dx[N];
	double cosd[S * D / 2], sind[S * D / 2], xd[N], lwd[N], want[N];
	float x[N];

	ref_rope_tables(cos_t, sin_t, S, D, 10000.0);
	fill_f32(x, N, -1.0, 1.0);
	fill_f32(lw, N, -1.0, 1.0);
	memcpy(dx, lw, sizeof dx);
	rope_backward_cpu(dx, cos_t, sin_t, NULL, B, S, NH, D);

	widen_f32(cosd, cos_t, S * D / 2);
	widen_f32(sind, sin_t, S * D / 2);
	widen_f32(xd, x, N);
	widen_f32(lwd, lw, N);
	struct rope_ctx ctx = { B * S, S, NH, D, cosd, sind, lwd, xd };
	finite_diff(want, xd, N, rope_loss, &ctx);
	/* two products and one sum in fp32 per element: ~2e-7 relative */
	check_close("rope_backward dx", dx, want, N, 1e-6, 1e-6);
}

static void rope_backward_grad_check(void)
{
	test_rope_backward();
}
#endif

#ifdef OPS_TEST_CUDA
#include "rope_case.h"

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void rope_backward_cuda_check(int realistic)
{
	if (!realistic) {
		test_rope(2, 3, 3, 6, 1, 0); /* rope_forward's small case, backward */
		test_rope(2, 40, 3, 8, 1, 3);
	} else {
		test_rope(1, 512, 32, 128, 1, 0);
	}
}
#endif
