/* tests/ops/lora_weight_ext.c: lora_weight_ext's checks: the weight side of
 * the LoRA extension, and the extension's sums through lora_forward,
 * lora_backward and the base GEMMs.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

/* no value check here: tests/unit/test_lora_ext.c checks it against the split
 * it must write */
#define lora_weight_ext_values_check NULL

/* no gradient check here: it lays out A and B, no gradient flows through it */
#define lora_weight_ext_grad_check NULL

#ifdef OPS_TEST_CUDA
struct ext_args {
	bf16 *x, *W, *dout;
	float *u, *out, *du, *dA, *dB, *din, *scratch;
	const float *u_in, *A, *B;
	const bf16 *bias;
	float scale, p;
	int T, K, N, R, E;
};

/* The engine's forward of one projection with the extension: the weight
 * side, u's parts into x's spare columns (u's GEMM reading A's parts from
 * the weight's rows N..N+3R-1, as the engine has it), one GEMM over K + E. */
static void ext_fwd_gpu(const void *p)
{
	const struct ext_args *a = p;
	int ld = a->K + a->E;
	gpu->ops->lora_weight_ext(a->W, ld, a->A, a->B, a->bias, a->scale, a->K, a->N, a->R);
	gpu->ops->lora_forward(&(struct lora_fwd_args){ .u = a->u, .ext = a->x + a->K, .scratch = a->scratch,
		.in = a->x, .ld_in = ld, .A = a->A, .A3 = a->W + (size_t)a->N * ld, .ld_a3 = ld, .B = a->B,
		.scale = a->scale, .dropout_p = a->p, .dropout_seed = 77, .T = a->T, .K = a->K, .N = a->N,
		.R = a->R });
	gpu->ops->matmul_forward(a->out, a->x, ld, a->W, ld, NULL, a->T, ld, a->N, 0);
}

/* ... and its backward (no dropout): du's parts into dout's spare
 * columns (du's GEMM reading scale*B's parts from the weight's columns
 * K..K+3R-1), one GEMM over N + E (the weight's extension rows). */
static void ext_bwd_gpu(const void *p)
{
	const struct ext_args *a = p;
	int ldw = a->K + a->E, ldd = a->N + a->E;
	gpu->ops->lora_weight_ext(a->W, ldw, a->A, a->B, a->bias, a->scale, a->K, a->N, a->R);
	gpu->ops->lora_backward(&(struct lora_bwd_args){ .dA = a->dA, .dB = a->dB, .du = a->du, .ext = a->dout + a->N,
		.scratch = a->scratch, .dout = a->dout, .ld_dout = ldd, .in = a->x, .ld_in = ldw, .u = a->u_in,
		.A = a->A, .B = a->B, .B3 = a->W + a->K, .ld_b3 = ldw, .scale = a->scale, .dropout_p = 0.0f,
		.dropout_seed = 0, .T = a->T, .K = a->K, .N = a->N, .R = a->R });
	gpu->ops->matmul_backward_input(a->din, a->dout, ldd, a->W, ldw, a->T, a->K, ldd, 0);
}

/* The extension on the GPU against the same three ops on the CPU.  The
 * weight side is one rounding per element on both (bitwise equal, the
 * unused corner untouched); u, du, dA, dB are the lora ops' sums; out and
 * din are GEMMs over K + E (N + E) exact products: GEMM tolerances.  A
 * trained B (not PEFT's zeros), a bias, and a scale that rounds.  spare:
 * as in test_lora_forward. */
static void test_lora_ext(int T, int K, int N, int R, float p, int backward, int spare)
{
	struct gpu_case c;
	if (!case_begin(&c, "lora_ext %s T=%d K=%d N=%d R=%d dropout=%g%s", backward ? "backward" : "forward", T, K, N,
	                R, p, spare ? " spare" : ""))
		return;
	int E = lora_ext_cols(R), ldx = K + E, ldd = N + E;
	float bound = 1.0f / sqrtf((float)K), scale = 0.75f;
	float *A = rand_f32((size_t)R * K, -bound, bound), *B = rand_f32((size_t)N * R, -0.5f, 0.5f);
	bf16 *bias = rand_bf16((size_t)N, -1, 1);
	bf16 *x = rand_bf16((size_t)T * ldx, -1, 1);                /* spare columns: garbage the op overwrites */
	bf16 *W = rand_bf16((size_t)(N + E) * ldx, -0.05f, 0.05f);   /* the corner too, which must survive */
	bf16 *dout = rand_bf16((size_t)T * ldd, -1, 1);
	float *u = host_alloc((size_t)T * R * 4), *out = host_alloc((size_t)T * N * 4);
	float *du = host_alloc((size_t)T * R * 4), *dA = host_alloc((size_t)R * K * 4);
	float *dB = host_alloc((size_t)N * R * 4), *din = host_alloc((size_t)T * K * 4);
	bf16 *refW = dup_bytes(W, (size_t)(N + E) * ldx * 2), *refx = dup_bytes(x, (size_t)T * ldx * 2);
	bf16 *refd = dup_bytes(dout, (size_t)T * ldd * 2);
	memset(dA, 0, (size_t)R * K * 4);
	memset(dB, 0, (size_t)N * R * 4);
	float *zA = dup_bytes(dA, (size_t)R * K * 4), *zB = dup_bytes(dB, (size_t)N * R * 4);
	double t0 = now_ms();
	lora_weight_ext_cpu(refW, ldx, A, B, bias, scale, K, N, R);
	lora_forward_cpu(&(struct lora_fwd_args){ .u = u, .ext = refx + K, .in = refx, .ld_in = ldx, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = 77, .T = T, .K = K, .N = N, .R = R });
	if (!backward) {
		matmul_forward_cpu(out, refx, ldx, refW, ldx, NULL, T, ldx, N, 0);
	} else {
		lora_backward_cpu(&(struct lora_bwd_args){ .dA = dA, .dB = dB, .du = du, .ext = refd + N,
			.dout = refd, .ld_dout = ldd, .in = refx, .ld_in = ldx, .u = u, .A = A, .B = B,
			.scale = scale, .dropout_p = 0.0f, .dropout_seed = 0, .T = T, .K = K, .N = N, .R = R });
		matmul_backward_input_cpu(din, refd, ldd, refW, ldx, T, K, ldd, 0);
	}
	c.cpu_ms = now_ms() - t0;

	struct ext_args a = { 0 };
	a.A = dev_from(A, (size_t)R * K * 4, 0);
	a.B = dev_from(B, (size_t)N * R * 4, 0);
	a.bias = dev_from(bias, (size_t)N * 2, 0);
	a.scale = scale;
	a.p = p;
	a.T = T, a.K = K, a.N = N, a.R = R, a.E = E;
	a.W = case_out(&c, "W", (size_t)(N + E) * ldx * 2, W, 0);
	a.scratch = case_lora_scratch(&c, T, K, N, R, spare);
	if (!backward) {
		a.x = case_out(&c, "x", (size_t)T * ldx * 2, x, 0);
		a.u = case_out(&c, "u", (size_t)T * R * 4, NULL, 0);
		a.out = case_out(&c, "out", (size_t)T * N * 4, NULL, 0);
		case_run(&c, ext_fwd_gpu, &a);
		check(&c, "u", u, (size_t)T * R, 0, GEMM_A_REL, GEMM_RTOL);
		check(&c, "out", out, (size_t)T * N, 0, GEMM_A_REL, GEMM_RTOL);
		check_exact_rows(&c, "x", refx, T, K, ldx, 2); /* the input itself untouched */
		check_exact_cols(&c, "x", refx, T, K + 9 * R, E - 9 * R, ldx, 2); /* the row tails: 1, zeros */
	} else {
		/* the backward reads u as the CPU forward left it, and x with the
		 * CPU's extension parts in its spare columns (never read there) */
		a.x = (bf16 *)dev_from(refx, (size_t)T * ldx * 2, 0);
		a.u_in = dev_from(u, (size_t)T * R * 4, 0);
		a.dout = case_out(&c, "dout", (size_t)T * ldd * 2, dout, 0);
		a.du = case_out(&c, "du", (size_t)T * R * 4, NULL, 0);
		a.dA = case_out(&c, "dA", (size_t)R * K * 4, zA, 0); /* accumulated from 0, as on the CPU */
		a.dB = case_out(&c, "dB", (size_t)N * R * 4, zB, 0);
		a.din = case_out(&c, "din", (size_t)T * K * 4, NULL, 0);
		case_run(&c, ext_bwd_gpu, &a);
		check(&c, "du", du, (size_t)T * R, 0, 5e-5, 1e-4);
		check(&c, "dA", dA, (size_t)R * K, 0, 5e-5, 1e-4);
		check(&c, "dB", dB, (size_t)N * R, 0, 5e-5, 1e-4);
		check(&c, "din", din, (size_t)T * K, 0, GEMM_A_REL, 1e-4);
		check_exact_rows(&c, "dout", refd, T, N, ldd, 2);
		check_exact_cols(&c, "dout", refd, T, N + 9 * R, E - 9 * R, ldd, 2); /* zeros: no ones column */
	}
	check_exact(&c, "W", refW, (size_t)(N + E) * ldx * 2, 2);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void lora_weight_ext_cuda_check(int realistic)
{
	if (!realistic) {
		for (int spare = 0; spare <= 1; spare++) {
			test_lora_ext(5, 64, 7, 3, 0.5f, 0, spare);
			test_lora_ext(5, 64, 7, 3, 0.0f, 1, spare);
			test_lora_ext(40, 128, 24, 4, 0.3f, 0, spare);
			test_lora_ext(40, 128, 24, 4, 0.0f, 1, spare);
			test_lora_ext(1, 64, 7, 3, 0.0f, 0, spare); /* one token */
			test_lora_ext(1, 64, 7, 3, 0.0f, 1, spare);
		}
	} else {
		for (int spare = 0; spare <= 1; spare++) {
			test_lora_ext(512, 5120, 5120, 16, 0.0f, 0, spare); /* 32B q/o with the extension */
			test_lora_ext(512, 5120, 5120, 16, 0.0f, 1, spare);
			test_lora_ext(512, 27648, 5120, 16, 0.0f, 1, spare); /* 32B down */
		}
		/* small T: 7B's gate (K 3584, N 18944) and down (18944, 3584) at
		 * ranks 8 and 64, both directions */
		for (int T = 1; T <= 24; T += 23)
			for (int R = 8; R <= 64; R += 56)
				for (int backward = 0; backward <= 1; backward++) {
					test_lora_ext(T, 3584, 18944, R, 0.0f, backward, 0);
					test_lora_ext(T, 18944, 3584, R, 0.0f, backward, 0);
				}
	}
}
#endif
