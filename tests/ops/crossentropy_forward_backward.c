/* tests/ops/crossentropy_forward_backward.c: crossentropy_forward_backward's
 * checks: the fused softmax cross-entropy: losses and dlogits.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_crossentropy_values(void)
{
	enum { T = 4, V = 1000 };
	float logits[T * V], losses[T];
	bf16 dlogits[T * V];
	const int32_t targets[T] = { 17, -1, 999, 1000 };
	const float dloss = 0.25f;

	/* uniform rows (at a large offset, which needs the max shift): loss = log V */
	for (int i = 0; i < T * V; i++)
		logits[i] = i < V ? 3.5f : 1000.0f;
	crossentropy_forward_backward_cpu(dlogits, losses, logits, targets, dloss, T, V);
	double want_loss[2] = { log(V), 0.0 };
	check_close("crossentropy uniform logits: loss = log V", losses, want_loss, 1, 0.0, 2e-7);
	check_close("crossentropy ignored row: loss 0", losses + 1, want_loss + 1, 1, 0.0, 0.0);
	want_loss[0] = log(V);
	check_close("crossentropy uniform logits at +1000: loss = log V", losses + 2, want_loss, 1, 0.0, 2e-7);
	CHECK(isnan(losses[3])); /* target >= V: a caller bug, reported as NaN */

	int bad = 0;
	for (int j = 0; j < V; j++) {
		bf16 want0 = bf16_from_f32((float)((1.0 / V - (j == 17)) * dloss));
		bf16 want2 = bf16_from_f32((float)((1.0 / V - (j == 999)) * dloss));
		bad += dlogits[j] != want0 || dlogits[2 * V + j] != want2;
		bad += dlogits[V + j] != 0 || dlogits[3 * V + j] != 0;
	}
	printf("%s crossentropy uniform dlogits = bf16((1/V - onehot) * dloss) (%d mismatches)\n",
	       bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;

	/* random logits against a double reference */
	fill_f32(logits, T * V, -10.0, 10.0);
	const int32_t targets2[T] = { 0, 500, 999, 3 };
	double want[T];
	ref_crossentropy(want, logits, targets2, T, V);
	crossentropy_forward_backward_cpu(dlogits, losses, logits, targets2, dloss, T, V);
	check_close("crossentropy random logits: loss", losses, want, T, 1e-6, 1e-6);

	/* the row's maximum in its last column, 200 above the rest: exp(200)
	 * overflows fp32 unless the shift uses the true maximum.  loss(target
	 * V-1) = log(1 + (V-1) e^-200) ~ 1e-84 -> 0; loss(target 0) = 200 + that */
	for (int i = 0; i < T * V; i++)
		logits[i] = i % V == V - 1 ? 200.0f : 0.0f;
	const int32_t targets3[T] = { V - 1, 0, -1, -1 };
	crossentropy_forward_backward_cpu(dlogits, losses, logits, targets3, dloss, T, V);
	const double want3[2] = { 0.0, 200.0 };
	check_close("crossentropy max in the last column: loss", losses, want3, 2, 1e-30, 1e-7);
	CHECK(f32_from_bf16(dlogits[V + V - 1]) == dloss && f32_from_bf16(dlogits[V]) == -dloss);
}

static void crossentropy_forward_backward_values_check(void)
{
	test_crossentropy_values();
}
#endif

#ifdef OPS_TEST_GRAD
struct ce_ctx {
	int T, V;
	const int32_t *targets;
	double *logits;
};

/* mean over non-ignored rows of -log softmax(logits)[target] */
static double ce_mean_loss(const void *p)
{
	const struct ce_ctx *c = p;
	return ref_crossentropy_mean(c->logits, c->targets, c->T, c->V);
}

static void test_crossentropy(void)
{
	enum { T = 4, V = 11 };
	const int32_t targets[T] = { 3, -1, 10, 0 };
	float logits[T * V], losses[T], dl[T * V];
	bf16 dlogits[T * V];
	double xd[T * V], want[T * V];

	fill_f32(logits, T * V, -4.0, 4.0);
	for (int j = 0; j < V; j++)
		logits[3 * V + j] += 80.0f; /* exp would overflow without the max shift */
	crossentropy_forward_backward_cpu(dlogits, losses, logits, targets, 1.0f / 3, T, V);
	for (int i = 0; i < T * V; i++)
		dl[i] = f32_from_bf16(dlogits[i]);

	widen_f32(xd, logits, T * V);
	struct ce_ctx ctx = { T, V, targets, xd };
	finite_diff(want, xd, T * V, ce_mean_loss, &ctx);
	/* dlogits is stored as bf16: rounding to nearest on a 7-bit mantissa
	 * costs up to 2^-8 relative; rtol 4e-3 is that plus room for the fp32
	 * softmax before it (~1e-6), atol the fp32 error of tiny probabilities */
	check_close("crossentropy dlogits vs d(mean loss)", dl, want, T * V, 1e-7, 4e-3);
	for (int j = 0; j < V; j++)
		CHECK(dlogits[V + j] == 0); /* the ignored row: +0.0 exactly */
	CHECK(losses[1] == 0.0f);
}

static void crossentropy_forward_backward_grad_check(void)
{
	test_crossentropy();
}
#endif

#ifdef OPS_TEST_CUDA
struct ce_args {
	bf16 *dlogits;
	float *losses;
	const float *logits;
	const int32_t *targets;
	float dloss;
	int T, V;
};

static void ce_gpu(const void *p)
{
	const struct ce_args *a = p;
	gpu->ops->crossentropy_forward_backward(a->dlogits, a->losses, a->logits, a->targets, a->dloss, a->T, a->V);
}

/* The CPU sums the row's exponentials in double, the GPU in fp32 (online,
 * then a tree): the sum agrees to ~1e-6 relative, so the loss (a log of
 * it, plus max - x[y]) to ~1e-6 absolute, whatever its size: a row whose
 * target holds nearly all the mass has a loss near 0 made of two terms
 * of order 10 that cancel, so the bound is 1e-6 of the largest loss
 * plus 1e-5 relative (a loss of 6.6e-4 came out 8.9e-8 apart, 1.4e-4
 * relative).  dlogits are
 * (p - onehot) * dloss in bf16: one bf16 ulp relative, and an absolute
 * floor far below the smallest probabilities (~1e-7 * dloss here), so a
 * wrong small p cannot hide under it.  Every ignore_every-th row is
 * ignored (target -1); target_past_end puts one target at V (NaN loss). */
static void test_crossentropy(int T, int V, int ignore_every, int target_past_end)
{
	struct gpu_case c;
	if (!case_begin(&c, "crossentropy_forward_backward T=%d V=%d", T, V))
		return;
	size_t n = (size_t)T * V;
	float *logits = rand_f32(n, -8, 8);
	int32_t *targets = host_alloc((size_t)T * 4);
	for (int t = 0; t < T; t++)
		targets[t] = ignore_every && t % ignore_every == 1 ? -1 : (int32_t)(rand_unit() * V);
	if (target_past_end)
		targets[T - 1] = V;
	float dloss = 1.0f / (float)T;
	bf16 *ref = host_alloc(n * 2);
	float *ref_loss = host_alloc((size_t)T * 4);
	double t0 = now_ms();
	crossentropy_forward_backward_cpu(ref, ref_loss, logits, targets, dloss, T, V);
	c.cpu_ms = now_ms() - t0;

	struct ce_args a = { NULL, NULL, dev_from(logits, n * 4, 0), dev_from(targets, (size_t)T * 4, 0), dloss, T, V };
	a.dlogits = case_out(&c, "dlogits", n * 2, NULL, 0);
	a.losses = case_out(&c, "losses", (size_t)T * 4, NULL, 0);
	case_run(&c, ce_gpu, &a);
	check(&c, "losses", ref_loss, (size_t)T, 0, 1e-6, 1e-5);
	check(&c, "dlogits", ref, n, 1, 1e-9, BF16_RTOL);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void crossentropy_forward_backward_cuda_check(int realistic)
{
	if (!realistic) {
		test_crossentropy(3, 5, 2, 0);
		test_crossentropy(4, 7, 0, 1); /* a target past the vocabulary: NaN loss */
	} else {
		test_crossentropy(512, 32000, 10, 0);
	}
}
#endif
