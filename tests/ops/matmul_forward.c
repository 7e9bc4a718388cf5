/* tests/ops/matmul_forward.c: matmul_forward's checks: the base GEMM out = in
 * @ weight^T (+ bias), written or accumulated, at any row pitch.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_matmul_forward(void)
{
	enum { T = 3, K = 130, N = 5 };
	bf16 x[T * K], W[N * K], bias[N];
	float out[T * N], out_nobias[T * N], acc[T * N], acc_bias[T * N], prev[T * N];
	double want[T * N], want_nobias[T * N], want_acc[T * N], want_acc_bias[T * N];

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_bf16(W, N * K, -1.0, 1.0);
	fill_bf16(bias, N, -1.0, 1.0);
	fill_f32(prev, T * N, -4.0, 4.0);
	ref_matmul(want_nobias, x, W, T, K, N);
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = want_nobias[t * N + n];
			want[t * N + n] = s + f32_from_bf16(bias[n]);
			want_acc[t * N + n] = prev[t * N + n] + s;
			want_acc_bias[t * N + n] = prev[t * N + n] + s + f32_from_bf16(bias[n]);
		}
	matmul_forward_cpu(out, x, K, W, K, bias, T, K, N, 0);
	matmul_forward_cpu(out_nobias, x, K, W, K, NULL, T, K, N, 0);
	memcpy(acc, prev, sizeof acc);
	matmul_forward_cpu(acc, x, K, W, K, NULL, T, K, N, 1);
	memcpy(acc_bias, prev, sizeof acc_bias);
	matmul_forward_cpu(acc_bias, x, K, W, K, bias, T, K, N, 1);
	/* exact bf16 products, K = 130 fp32 additions of terms <= 1: the error
	 * bound K * 2^-24 * sum|terms| is ~3e-4 worst case, ~1e-6 typical */
	check_close("matmul_forward with bias", out, want, T * N, 1e-5, 1e-5);
	check_close("matmul_forward without bias", out_nobias, want_nobias, T * N, 1e-5, 1e-5);
	check_close("matmul_forward accumulate", acc, want_acc, T * N, 1e-5, 1e-5);
	check_close("matmul_forward accumulate with bias", acc_bias, want_acc_bias, T * N, 1e-5, 1e-5);
}

static void test_pitched_matmul_forward(void)
{
	enum { T = 5, K = 70, N = 9, LD_IN = K + 13, LD_W = K + 6 };
	bf16 x[T * K], W[N * K], bias[N], xp[T * LD_IN], Wp[N * LD_W];
	float prev[T * N], out[T * N], outp[T * N];
	char name[120];

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_bf16(W, N * K, -1.0, 1.0);
	fill_bf16(bias, N, -1.0, 1.0);
	fill_f32(prev, T * N, -2.0, 2.0);
	pitch_bf16(xp, LD_IN, x, T, K);
	pitch_bf16(Wp, LD_W, W, N, K);
	for (int accumulate = 0; accumulate < 2; accumulate++) {
		memcpy(out, prev, sizeof out);
		memcpy(outp, prev, sizeof outp);
		matmul_forward_cpu(out, x, K, W, K, bias, T, K, N, accumulate);
		matmul_forward_cpu(outp, xp, LD_IN, Wp, LD_W, bias, T, K, N, accumulate);
		snprintf(name, sizeof name, "matmul_forward%s at ld_in %d, ld_w %d (K %d, NaN pads) = unpitched",
			 accumulate ? " accumulate" : "", LD_IN, LD_W, K);
		check_same_bits(name, outp, out, sizeof out);
	}
}

static void matmul_forward_values_check(void)
{
	test_matmul_forward();
	test_pitched_matmul_forward();
}
#endif

/* no gradient check here: its input gradient is matmul_backward_input's
 * check; the base weights are frozen */
#define matmul_forward_grad_check NULL

#ifdef OPS_TEST_CUDA
#include "matmul_case.h"

static void matmul_fwd_gpu(const void *p)
{
	const struct matmul_args *a = p;
	gpu->ops->matmul_forward(a->out, a->in, a->ld_in, a->weight, a->ld_w, a->bias, a->T, a->K, a->N,
	                         a->accumulate);
}

/* ld_in, ld_w > K: in and weight pitched with NaN pads
 * (matmul_fwd_operands). */
static void test_matmul_forward(int T, int K, int N, int ld_in, int ld_w, int with_bias, int accumulate)
{
	struct gpu_case c;
	if (!case_begin(&c, "matmul_forward T=%d K=%d N=%d ld_in=%d ld_w=%d%s%s", T, K, N, ld_in, ld_w,
	                with_bias ? " bias" : "", accumulate ? " accumulate" : ""))
		return;
	struct matmul_args a;
	bf16 *in, *w;
	matmul_fwd_operands(&a, &in, &w, T, K, N, ld_in, ld_w);
	bf16 *bias = with_bias ? rand_bf16((size_t)N, -1, 1) : NULL;
	float *out0 = rand_f32((size_t)T * N, -1, 1);
	float *ref = dup_bytes(out0, (size_t)T * N * 4);
	double t0 = now_ms();
	matmul_forward_cpu(ref, in, ld_in, w, ld_w, bias, T, K, N, accumulate);
	c.cpu_ms = now_ms() - t0;

	a.bias = bias ? dev_from(bias, (size_t)N * 2, 0) : NULL;
	a.accumulate = accumulate;
	a.out = case_out(&c, "out", (size_t)T * N * 4, accumulate ? out0 : NULL, 0);
	case_run(&c, matmul_fwd_gpu, &a);
	matmul_case_end(&c, "out", ref, (size_t)T * N, 0, T, K, N);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void matmul_forward_cuda_check(int realistic)
{
	if (!realistic) {
		test_matmul_forward(5, 19, 7, 19, 19, 1, 0);
		test_matmul_forward(5, 19, 7, 19, 19, 1, 1);
		/* pitched operands with NaN pads: odd pitches, then 16-byte ones */
		test_matmul_forward(5, 19, 7, 23, 21, 1, 1);
		test_matmul_forward(6, 40, 9, 48, 56, 0, 0);
	} else {
		test_matmul_forward(512, 4096, 4096, 4096, 4096, 0, 0);
		test_matmul_forward(512, 4096, 4096, 4096, 4096, 0, 1);       /* onto a LoRA term */
		test_matmul_forward(512, 4096, 1024, 4096, 4096, 1, 1);       /* k/v projection with bias */
		/* 32B shapes in extension-sized buffers (pitch 5280): the base GEMM
		 * alone (K = 5120 of 5280) and the GEMM with the extension (K = 5120 +
		 * 160 of a wider pitch) */
		test_matmul_forward(512, 5120, 5120, 5280, 5280, 0, 0);
		test_matmul_forward(512, 5280, 5120, 5312, 5312, 0, 0);
	}
}
#endif
