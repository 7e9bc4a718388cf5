/* tests/ops/lora_backward.c: lora_backward's checks: the LoRA backward: dB,
 * du, dA and din through the dropout mask.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

/* no value check here: its values are the gradient check's (test_ops_grad) */
#define lora_backward_values_check NULL

#ifdef OPS_TEST_GRAD
struct lora_ctx {
	int T, K, N, R;
	double scale;
	const double *keep, *lw; /* keep (T,K): 0 or 1/(1-p) */
	double *x, *A, *B;
};

static double lora_loss(const void *p)
{
	const struct lora_ctx *c = p;
	return ref_lora_dot(c->lw, c->x, c->keep, c->A, c->B, c->scale, c->T, c->K, c->N, c->R);
}

/* (T,K) -> (T,N) at rank R (at most 64, ref_lora_dot's u), K = 70 spanning
 * two of the op's 64-wide tiles; T = 1 with R = 64 (four rank tiles) is
 * the shape CUDA's small-T cases compare against. */
static void test_lora_backward(int T, int K, int N, int R, float p)
{
	const float scale = 2.0f;
	const uint64_t seed = 1234;
	bf16 *x = NEW(bf16, T * K), *lw16 = NEW(bf16, T * N);
	float *A = NEW(float, R * K), *B = NEW(float, N * R), *lw = NEW(float, T * N), *out = NEW(float, T * N);
	float *u = NEW(float, T * R), *du = NEW(float, T * R), *dA = NEW(float, R * K), *dB = NEW(float, N * R);
	float *din = NEW(float, T * K), *dA2 = NEW(float, R * K), *dB2 = NEW(float, N * R), *din2 = NEW(float, T * K);
	float *dA3 = NEW(float, R * K), *dB3 = NEW(float, N * R);
	double *xd = NEW(double, T * K), *Ad = NEW(double, R * K), *Bd = NEW(double, N * R), *lwd = NEW(double, T * N);
	double *keep = NEW(double, T * K), *want_A = NEW(double, R * K), *want_B = NEW(double, N * R);
	double *want_x = NEW(double, T * K), *want_du = NEW(double, T * R);
	int dropped = 0;

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_f32(A, R * K, -0.5, 0.5);
	fill_f32(B, N * R, -0.5, 0.5);
	/* the upstream gradient arrives rounded to bf16 (the op's contract) */
	fill_bf16(lw16, T * N, -1.0, 1.0);
	for (int i = 0; i < T * N; i++)
		lw[i] = f32_from_bf16(lw16[i]);
	/* without accumulate din is written, whatever it held */
	fill_f32(din, T * K, 100.0, 200.0);
	for (int t = 0; t < T; t++)
		for (int k = 0; k < K; k++) {
			int kept = p == 0.0f || poros_dropout_keep(seed, (uint64_t)t * K + k, p);
			keep[t * K + k] = kept ? 1.0 / (1.0 - (double)p) : 0.0;
			dropped += !kept;
		}
	if (p > 0.0f)
		CHECK(dropped > 0 && dropped < T * K); /* the mask must matter */

	lora_forward_cpu(&(struct lora_fwd_args){ .out = out, .u = u, .in = x, .ld_in = K, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });
	lora_backward_cpu(&(struct lora_bwd_args){ .din = din, .dA = dA, .dB = dB, .du = du, .dout = lw16,
		.ld_dout = N, .in = x, .ld_in = K, .u = u, .A = A, .B = B, .scale = scale, .dropout_p = p,
		.dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });

	widen_bf16(xd, x, T * K);
	widen_f32(Ad, A, R * K);
	widen_f32(Bd, B, N * R);
	widen_f32(lwd, lw, T * N);
	struct lora_ctx ctx = { T, K, N, R, scale, keep, lwd, xd, Ad, Bd };
	finite_diff(want_A, Ad, R * K, lora_loss, &ctx);
	finite_diff(want_B, Bd, N * R, lora_loss, &ctx);
	finite_diff(want_x, xd, T * K, lora_loss, &ctx);
	ref_matmul_backward_input(want_du, lwd, Bd, T, R, N); /* du = scale dout @ B */
	for (int i = 0; i < T * R; i++)
		want_du[i] *= scale;

	/* Every gradient is a chain of two fp32 sums of at most 70 terms of O(1)
	 * values (u itself an fp32 sum saved by the forward): accumulated
	 * rounding stays below ~1e-6 relative; 1e-5 atol/rtol. */
	check_closef(dA, want_A, R * K, 1e-5, 1e-5, "lora_backward dA (T %d, R %d, dropout %.1f)", T, R, p);
	check_closef(dB, want_B, N * R, 1e-5, 1e-5, "lora_backward dB (T %d, R %d, dropout %.1f)", T, R, p);
	check_closef(din, want_x, T * K, 1e-5, 1e-5, "lora_backward din (T %d, R %d, dropout %.1f)", T, R, p);
	check_closef(du, want_du, T * R, 1e-6, 1e-6, "lora_backward du (T %d, R %d, dropout %.1f)", T, R, p);
	if (p > 0.0f) {
		/* a dropped input has no gradient at all, not a small one */
		long leaked = 0;
		for (int i = 0; i < T * K; i++)
			leaked += keep[i] == 0.0 && din[i] != 0.0f;
		CHECK(leaked == 0);
	}

	memcpy(dA2, dA, sizeof(float) * R * K);
	memcpy(dB2, dB, sizeof(float) * N * R);
	memcpy(din2, din, sizeof(float) * T * K);
	lora_backward_cpu(&(struct lora_bwd_args){ .din = din2, .dA = dA2, .dB = dB2, .du = du, .dout = lw16,
		.ld_dout = N, .in = x, .ld_in = K, .u = u, .A = A, .B = B, .scale = scale, .dropout_p = p,
		.dropout_seed = seed, .T = T, .K = K, .N = N, .R = R, .accumulate = 1 });
	check_accumulated("lora_backward dA", dA2, dA, R * K);
	check_accumulated("lora_backward dB", dB2, dB, N * R);
	check_accumulated("lora_backward din", din2, din, T * K);

	/* din == NULL: the parameter gradients alone, unchanged */
	lora_backward_cpu(&(struct lora_bwd_args){ .dA = dA3, .dB = dB3, .du = du, .dout = lw16, .ld_dout = N,
		.in = x, .ld_in = K, .u = u, .A = A, .B = B, .scale = scale, .dropout_p = p, .dropout_seed = seed,
		.T = T, .K = K, .N = N, .R = R });
	CHECK(memcmp(dA3, dA, sizeof(float) * R * K) == 0 && memcmp(dB3, dB, sizeof(float) * N * R) == 0);
	free(x), free(lw16), free(A), free(B), free(lw), free(out), free(u), free(du), free(dA), free(dB), free(din);
	free(dA2), free(dB2), free(din2), free(dA3), free(dB3), free(xd), free(Ad), free(Bd), free(lwd), free(keep);
	free(want_A), free(want_B), free(want_x), free(want_du);
}

static void lora_backward_grad_check(void)
{
	test_lora_backward(5, 70, 6, 3, 0.0f);
	test_lora_backward(5, 70, 6, 3, 0.3f);
	test_lora_backward(1, 70, 6, 64, 0.0f);
	test_lora_backward(2, 70, 6, 16, 0.3f);
}
#endif

#ifdef OPS_TEST_CUDA
#include "lora_case.h"

static void lora_bwd_gpu(const void *p)
{
	const struct lora_case *a = p;
	gpu->ops->lora_backward(&(struct lora_bwd_args){ .din = a->din, .dA = a->dA, .dB = a->dB, .du = a->du,
		.scratch = a->scratch, .dout = a->dout, .ld_dout = a->N, .in = a->in, .ld_in = a->K, .u = a->u_in,
		.A = a->A, .B = a->B, .scale = a->scale, .dropout_p = a->p, .dropout_seed = a->seed, .T = a->T,
		.K = a->K, .N = a->N, .R = a->R, .accumulate = a->accumulate });
}

/* du (sum over N), dB (over T), dA (over T, using du), din (over R, using
 * du): sums of up to 27648 fp32 terms in different orders, and dA, din
 * inherit du's rounding: 5e-5 of the largest value, 1e-4 relative.
 * with_din: 0 none, 1 written, 2 added to.  spare: as in
 * test_lora_forward. */
static void test_lora_backward(int T, int K, int N, int R, float p, int with_din, int spare)
{
	struct gpu_case c;
	if (!case_begin(&c, "lora_backward T=%d K=%d N=%d R=%d dropout=%g%s%s", T, K, N, R, p,
	                with_din == 2 ? " din+=" : with_din ? " din" : "", spare ? " spare" : ""))
		return;
	float bound = 1.0f / sqrtf((float)K);
	bf16 *in = rand_bf16((size_t)T * K, -1, 1);
	float *A = rand_f32((size_t)R * K, -bound, bound), *B = rand_f32((size_t)N * R, -0.5f, 0.5f);
	bf16 *dout = rand_bf16((size_t)T * N, -1, 1);
	float *dA0 = rand_f32((size_t)R * K, -1, 1), *dB0 = rand_f32((size_t)N * R, -1, 1);
	float *din0 = rand_f32((size_t)T * K, -1, 1);
	float scale = 2.0f;
	uint64_t seed = 0xb4c6u + (uint64_t)N;
	/* u as the CPU forward leaves it, the same input for both backwards */
	float *u = host_alloc((size_t)T * R * 4), *scratch_out = host_alloc((size_t)T * N * 4);
	memset(scratch_out, 0, (size_t)T * N * 4);
	lora_forward_cpu(&(struct lora_fwd_args){ .out = scratch_out, .u = u, .in = in, .ld_in = K, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });
	float *ref_dA = dup_bytes(dA0, (size_t)R * K * 4), *ref_dB = dup_bytes(dB0, (size_t)N * R * 4);
	float *ref_din = dup_bytes(din0, (size_t)T * K * 4), *ref_du = host_alloc((size_t)T * R * 4);
	double t0 = now_ms();
	lora_backward_cpu(&(struct lora_bwd_args){ .din = with_din ? ref_din : NULL, .dA = ref_dA, .dB = ref_dB,
		.du = ref_du, .dout = dout, .ld_dout = N, .in = in, .ld_in = K, .u = u, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R,
		.accumulate = with_din == 2 });
	c.cpu_ms = now_ms() - t0;

	struct lora_case a = { 0 };
	lora_case_inputs(&a, in, A, B, scale, p, seed, T, K, N, R);
	a.u_in = dev_from(u, (size_t)T * R * 4, 0);
	a.dout = dev_from(dout, (size_t)T * N * 2, 0);
	a.accumulate = with_din == 2;
	a.dA = case_out(&c, "dA", (size_t)R * K * 4, dA0, 0);
	a.dB = case_out(&c, "dB", (size_t)N * R * 4, dB0, 0);
	a.du = case_out(&c, "du", (size_t)T * R * 4, NULL, 0);
	if (with_din) /* written: the device buffer starts as garbage, not din0 */
		a.din = case_out(&c, "din", (size_t)T * K * 4, with_din == 2 ? din0 : NULL, 0);
	a.scratch = case_lora_scratch(&c, T, K, N, R, spare);
	case_run(&c, lora_bwd_gpu, &a);
	/* dA and dB sum over the T tokens: at half a million of them the two
	 * orders' roundings can reach, by estimate (a random walk of fp32
	 * rounding over the partial sums), ~3e-5 of the largest value, so 1e-3 */
	double sums = T > 65536 ? 1e-3 : 5e-5;
	check(&c, "du", ref_du, (size_t)T * R, 0, 5e-5, 1e-4);
	check(&c, "dB", ref_dB, (size_t)N * R, 0, sums, 1e-4);
	check(&c, "dA", ref_dA, (size_t)R * K, 0, sums, 1e-4);
	if (with_din)
		check(&c, "din", ref_din, (size_t)T * K, 0, 5e-5, 1e-4);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void lora_backward_cuda_check(int realistic)
{
	if (!realistic) {
		for (int spare = 0; spare <= 1; spare++) {
			test_lora_backward(5, 33, 7, 3, 0.5f, 1, spare);
			test_lora_backward(19, 300, 5, 20, 0.25f, 2, spare);
			test_lora_backward(40, 64, 24, 4, 0.3f, 2, spare);
			/* N >> K: dB's (N,3R) sums outgrow T*K (lora_scratch_floats) */
			test_lora_backward(512, 16, 600, 4, 0.1f, 1, spare);
			test_lora_backward(1, 64, 48, 8, 0.5f, 1, spare);   /* one token */
			test_lora_backward(2, 40, 300, 16, 0.0f, 2, spare); /* N >> K, T = 2 */
		}
	} else {
		for (int spare = 0; spare <= 1; spare++) {
			test_lora_backward(512, 4096, 4096, 16, 0.05f, 2, spare);
			test_lora_backward(512, 11008, 4096, 64, 0.1f, 1, spare);
			test_lora_backward(512, 4096, 1024, 8, 0.0f, 0, spare);
			test_lora_backward(512, 27648, 5120, 16, 0.0f, 1, spare);
			test_lora_backward(512, 5120, 27648, 16, 0.0f, 2, spare); /* 32B gate/up */
		}
		/* din's grid holds 524296 tokens, 65537 blocks of 8: past CUDA's
		 * 65535 on y, where the tokens were until 2026-12-05 */
		test_lora_backward(524296, 16, 8, 4, 0.05f, 2, 0);
		/* small T, every rank and projection (lora_case.h's tables) */
		for (int ti = 0; ti < 3; ti++)
			for (int ri = 0; ri < 3; ri++)
				for (int pi = 0; pi < 4; pi++)
					test_lora_backward(lora_small_t[ti], lora_proj_shapes[pi][0], lora_proj_shapes[pi][1],
					                   lora_ranks[ri], lora_ranks[ri] == 16 ? 0.1f : 0.0f, pi == 0 ? 2 : 1, 0);
	}
}
#endif
