/* tests/ops/lora_forward.c: lora_forward's checks: the LoRA forward u = xd
 * A^T, out = scale u B^T (written), with dropout; the CUDA check covers every
 * path the hints select.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
/* (T,K) -> (T,N) at rank R: T = 1 with R = 64 (four of the CPU's rank
 * tiles) is the shape CUDA's small-T cases compare against. */
static void test_lora_forward(int T, int K, int N, int R, float p)
{
	const float scale = 0.5f;
	const uint64_t seed = 99;
	bf16 *x = NEW(bf16, T * K);
	float *A = NEW(float, R * K), *B = NEW(float, N * R), *out = NEW(float, T * N), *u = NEW(float, T * R);
	double *want = NEW(double, T * N), *want_u = NEW(double, T * R);

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_f32(A, R * K, -0.5, 0.5);
	fill_f32(B, N * R, -0.5, 0.5);
	fill_f32(out, T * N, -1.0, 1.0); /* written over, not added to */
	lora_forward_cpu(&(struct lora_fwd_args){ .out = out, .u = u, .in = x, .ld_in = K, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });

	long dropped = ref_lora(want, want_u, x, A, B, scale, p, seed, T, K, N, R);
	/* K <= 70 term fp32 sums of O(1): ~1e-6 */
	check_closef(u, want_u, T * R, 1e-5, 1e-5, "lora_forward u (T %d, R %d, dropout %.1f)", T, R, p);
	check_closef(out, want, T * N, 1e-5, 1e-5, "lora_forward out = (T %d, R %d, dropout %.1f)", T, R, p);
	if (p > 0.0f && T * K >= 4096) {
		/* 4096 Bernoulli(p) draws: 5 standard deviations is +-0.04 at p = 0.5 */
		double frac = (double)dropped / (T * K);
		printf("%s lora_forward dropout %.2f drops %.3f of the inputs\n",
		       fabs(frac - p) < 0.04 ? "ok  " : "FAIL", p, frac);
		failures += fabs(frac - p) >= 0.04;
	}
	free(x), free(A), free(B), free(out), free(u), free(want), free(want_u);
}

static void lora_forward_values_check(void)
{
	test_lora_forward(64, 64, 12, 4, 0.0f);
	test_lora_forward(64, 64, 12, 4, 0.5f);
	test_lora_forward(1, 70, 12, 64, 0.0f);
	test_lora_forward(2, 70, 12, 16, 0.5f);
}
#endif

/* no gradient check here: its gradients are lora_backward's check */
#define lora_forward_grad_check NULL

#ifdef OPS_TEST_CUDA
#include "lora_case.h"

static void lora_fwd_gpu(const void *p)
{
	const struct lora_case *a = p;
	gpu->ops->lora_forward(&(struct lora_fwd_args){ .out = a->out, .u = a->u, .scratch = a->scratch, .in = a->in,
		.ld_in = a->K, .A = a->A, .B = a->B, .scale = a->scale, .dropout_p = a->p, .dropout_seed = a->seed,
		.T = a->T, .K = a->K, .N = a->N, .R = a->R });
}

/* u is a K-term fp32 sum (the CPU in order; the GPU on tensor cores
 * through the exact three-way bf16 split of A, at every T), out is written
 * as scale * u @ B^T (cuBLAS over R): sums of the GEMM kind with inputs in
 * [-1,1] and A in +-1/sqrt(K), so GEMM_A_REL's argument applies.  spare:
 * a scratch T*K floats larger than the op needs. */
static void test_lora_forward(int T, int K, int N, int R, float p, int spare)
{
	struct gpu_case c;
	if (!case_begin(&c, "lora_forward T=%d K=%d N=%d R=%d dropout=%g%s", T, K, N, R, p, spare ? " spare" : ""))
		return;
	float bound = 1.0f / sqrtf((float)K); /* PEFT's kaiming-uniform range for A */
	bf16 *in = rand_bf16((size_t)T * K, -1, 1);
	float *A = rand_f32((size_t)R * K, -bound, bound), *B = rand_f32((size_t)N * R, -0.5f, 0.5f);
	float *out0 = rand_f32((size_t)T * N, -1, 1);
	float scale = 2.0f;
	uint64_t seed = 0xd40b0u + (uint64_t)K;
	float *ref = dup_bytes(out0, (size_t)T * N * 4), *ref_u = host_alloc((size_t)T * R * 4);
	double t0 = now_ms();
	lora_forward_cpu(&(struct lora_fwd_args){ .out = ref, .u = ref_u, .in = in, .ld_in = K, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });
	c.cpu_ms = now_ms() - t0;

	struct lora_case a = { 0 };
	lora_case_inputs(&a, in, A, B, scale, p, seed, T, K, N, R);
	a.out = case_out(&c, "out", (size_t)T * N * 4, NULL, 0); /* written, not added to */
	a.u = case_out(&c, "u", (size_t)T * R * 4, NULL, 0);
	a.scratch = case_lora_scratch(&c, T, K, N, R, spare);
	case_run(&c, lora_fwd_gpu, &a);
	check(&c, "u", ref_u, (size_t)T * R, 0, GEMM_A_REL, GEMM_RTOL);
	check(&c, "out", ref, (size_t)T * N, 0, GEMM_A_REL, GEMM_RTOL);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void lora_forward_cuda_check(int realistic)
{
	if (!realistic) {
		for (int spare = 0; spare <= 1; spare++) {
			test_lora_forward(5, 33, 7, 3, 0.5f, spare); /* odd K: unaligned rows */
			test_lora_forward(40, 64, 24, 4, 0.3f, spare);
			test_lora_forward(64, 300, 70, 40, 0.1f, spare); /* rank 40 */
			test_lora_forward(1, 64, 48, 8, 0.5f, spare);   /* one token */
			test_lora_forward(2, 40, 300, 16, 0.0f, spare); /* N >> K */
		}
	} else {
		/* K = 27648 is Qwen2.5-32B's down_proj */
		for (int spare = 0; spare <= 1; spare++) {
			test_lora_forward(512, 4096, 4096, 16, 0.05f, spare);
			test_lora_forward(512, 4096, 1024, 8, 0.0f, spare);
			test_lora_forward(512, 27648, 5120, 16, 0.0f, spare);
			test_lora_forward(512, 5120, 27648, 16, 0.0f, spare); /* 32B gate/up */
		}
		/* small T, every rank and projection: where a T*K scratch could not
		 * hold the split operands (CUDA-core sums ran there once) */
		for (int ti = 0; ti < 3; ti++)
			for (int ri = 0; ri < 3; ri++)
				for (int pi = 0; pi < 4; pi++)
					test_lora_forward(lora_small_t[ti], lora_proj_shapes[pi][0], lora_proj_shapes[pi][1],
					                  lora_ranks[ri], lora_ranks[ri] == 16 ? 0.1f : 0.0f, 0);
	}
}
#endif
