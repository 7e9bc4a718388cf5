/* tests/ops/matmul_forward_bf16.c: matmul_forward_bf16's checks: the gate
 * and up projections' GEMM out = bf16(in @ weight^T), matmul_forward's
 * fp32 sum rounded once, at any row pitch.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_matmul_forward_bf16(void)
{
	enum { T = 3, K = 130, N = 5 };
	bf16 x[T * K], W[N * K], out[T * N], rounded[T * N];
	float outf[T * N], sum[T * N];
	double want[T * N];

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_bf16(W, N * K, -1.0, 1.0);
	ref_matmul(want, x, W, T, K, N);
	matmul_forward_bf16_cpu(out, x, K, W, K, T, K, N);
	matmul_forward_cpu(sum, x, K, W, K, NULL, T, K, N, 0);
	for (int i = 0; i < T * N; i++) {
		outf[i] = f32_from_bf16(out[i]);
		rounded[i] = bf16_from_f32(sum[i]);
	}
	/* the fp32 sum v is within matmul_forward's bound e = 1e-5 (1 + |want|)
	 * of the double sum (matmul_forward.c says why), and rounding it to
	 * bf16 (8 significant bits) moves it by at most 2^-8 |v| <= 2^-8
	 * (|want| + e): so atol (1 + 2^-8) 1e-5, rtol that plus 2^-8 */
	check_close("matmul_forward_bf16 vs double", outf, want, T * N, 1e-5 * (1.0 + 1.0 / 256),
		    1e-5 * (1.0 + 1.0 / 256) + 1.0 / 256);
	check_same_bits("matmul_forward_bf16 = bf16_from_f32(matmul_forward)", out, rounded, sizeof out);
}

static void test_pitched_matmul_forward_bf16(void)
{
	enum { T = 5, K = 70, N = 9, LD_IN = K + 13, LD_W = K + 6 };
	bf16 x[T * K], W[N * K], xp[T * LD_IN], Wp[N * LD_W], out[T * N], outp[T * N];
	char name[120];

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_bf16(W, N * K, -1.0, 1.0);
	pitch_bf16(xp, LD_IN, x, T, K);
	pitch_bf16(Wp, LD_W, W, N, K);
	matmul_forward_bf16_cpu(out, x, K, W, K, T, K, N);
	matmul_forward_bf16_cpu(outp, xp, LD_IN, Wp, LD_W, T, K, N);
	snprintf(name, sizeof name, "matmul_forward_bf16 at ld_in %d, ld_w %d (K %d, NaN pads) = unpitched", LD_IN,
		 LD_W, K);
	check_same_bits(name, outp, out, sizeof out);
}

static void matmul_forward_bf16_values_check(void)
{
	test_matmul_forward_bf16();
	test_pitched_matmul_forward_bf16();
}
#endif

/* no gradient check here: its input gradient is matmul_backward_input's
 * check (the gate and up backward runs through it); the base weights are
 * frozen */
#define matmul_forward_bf16_grad_check NULL

#ifdef OPS_TEST_CUDA
#include "matmul_case.h"

static void matmul_fwd_bf16_gpu(const void *p)
{
	const struct matmul_args *a = p;
	gpu->ops->matmul_forward_bf16(a->out, a->in, a->ld_in, a->weight, a->ld_w, a->T, a->K, a->N);
}

/* matmul_forward's case with a bf16 output (matmul_case_end says what one
 * rounding on each side adds to GEMM_A_REL); the output starts NaN, so
 * an element cuBLAS skips cannot pass. */
static void test_matmul_forward_bf16(int T, int K, int N, int ld_in, int ld_w)
{
	struct gpu_case c;
	if (!case_begin(&c, "matmul_forward_bf16 T=%d K=%d N=%d ld_in=%d ld_w=%d", T, K, N, ld_in, ld_w))
		return;
	struct matmul_args a;
	bf16 *in, *w;
	matmul_fwd_operands(&a, &in, &w, T, K, N, ld_in, ld_w);
	bf16 *ref = host_alloc((size_t)T * N * 2);
	double t0 = now_ms();
	matmul_forward_bf16_cpu(ref, in, ld_in, w, ld_w, T, K, N);
	c.cpu_ms = now_ms() - t0;

	a.out = case_out(&c, "out", (size_t)T * N * 2, NULL, 0);
	case_run(&c, matmul_fwd_bf16_gpu, &a);
	matmul_case_end(&c, "out", ref, (size_t)T * N, 1, T, K, N);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void matmul_forward_bf16_cuda_check(int realistic)
{
	if (!realistic) {
		test_matmul_forward_bf16(5, 19, 7, 19, 19); /* odd N: bf16 rows of 14 bytes */
		/* pitched operands with NaN pads: odd pitches, then 16-byte ones */
		test_matmul_forward_bf16(5, 19, 7, 23, 21);
		test_matmul_forward_bf16(6, 40, 9, 48, 56);
	} else {
		/* 32B's gate/up with the extension (K = 5120 + 160, the pitch of
		 * xn2 and of the weight as the engine lays them), then the base
		 * GEMM alone (no LoRA on it) at 7B's in the extension's pitch */
		test_matmul_forward_bf16(512, 5280, 27648, 5280, 5280);
		test_matmul_forward_bf16(512, 3584, 18944, 3744, 3744);
	}
}
#endif
