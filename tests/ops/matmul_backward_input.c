/* tests/ops/matmul_backward_input.c: matmul_backward_input's checks: the base
 * GEMM's input gradient din = dout @ weight, written or accumulated, at any
 * row pitch.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_pitched_matmul_backward(void)
{
	/* K spans two of the op's 256-column tiles */
	enum { T = 3, K = 300, N = 7, LD_DOUT = N + 5, LD_W = K + 11 };
	bf16 dout[T * N], W[N * K], doutp[T * LD_DOUT], *Wp = NEW(bf16, N * LD_W);
	float *prev = NEW(float, T * K), *din = NEW(float, T * K), *dinp = NEW(float, T * K);
	char name[120];

	fill_bf16(dout, T * N, -1.0, 1.0);
	fill_bf16(W, N * K, -1.0, 1.0);
	fill_f32(prev, T * K, -2.0, 2.0);
	pitch_bf16(doutp, LD_DOUT, dout, T, N);
	pitch_bf16(Wp, LD_W, W, N, K);
	for (int accumulate = 0; accumulate < 2; accumulate++) {
		memcpy(din, prev, sizeof(float) * T * K);
		memcpy(dinp, prev, sizeof(float) * T * K);
		matmul_backward_input_cpu(din, dout, N, W, K, T, K, N, accumulate);
		matmul_backward_input_cpu(dinp, doutp, LD_DOUT, Wp, LD_W, T, K, N, accumulate);
		snprintf(name, sizeof name,
			 "matmul_backward_input%s at ld_dout %d, ld_w %d (N %d, K %d, NaN pads) = unpitched",
			 accumulate ? " accumulate" : "", LD_DOUT, LD_W, N, K);
		check_same_bits(name, dinp, din, sizeof(float) * T * K);
	}
	free(Wp);
	free(prev);
	free(din);
	free(dinp);
}

static void matmul_backward_input_values_check(void)
{
	test_pitched_matmul_backward();
}
#endif

#ifdef OPS_TEST_GRAD
struct matmul_ctx {
	int T, K, N;
	const double *W, *lw;
	double *x;
};

static double matmul_loss(const void *p)
{
	const struct matmul_ctx *c = p;
	return ref_matmul_dot(c->lw, c->x, c->W, c->T, c->K, c->N);
}

static void test_matmul_backward_input(void)
{
	/* K spans two of the op's column tiles (256) to cover the tile edge */
	enum { T = 3, K = 300, N = 7 };
	bf16 x[T * K], W[N * K], dout[T * N];
	float din[T * K], acc[T * K];
	double xd[T * K], Wd[N * K], lwd[T * N], want[T * K], product[T * K], want_acc[T * K];

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_bf16(W, N * K, -1.0, 1.0);
	fill_bf16(dout, T * N, -1.0, 1.0);
	widen_bf16(xd, x, T * K);
	widen_bf16(Wd, W, N * K);
	widen_bf16(lwd, dout, T * N);

	fill_nan(din, T * K); /* accumulate = 0 must overwrite every element */
	matmul_backward_input_cpu(din, dout, N, W, K, T, K, N, 0);

	struct matmul_ctx ctx = { T, K, N, Wd, lwd, xd };
	finite_diff(want, xd, T * K, matmul_loss, &ctx);
	/* bf16 x bf16 products are exact in fp32; only the N = 7 fp32 additions
	 * round (~4e-7 relative of the terms), so 1e-6 atol/rtol */
	check_close("matmul_backward_input din vs finite differences", din, want, T * K, 1e-6, 1e-6);

	/* the same against the transposed product dout @ W, in double */
	ref_matmul_backward_input(product, lwd, Wd, T, K, N);
	for (int i = 0; i < T * K; i++)
		want_acc[i] = 1.0 + product[i];
	check_close("matmul_backward_input din vs dout @ W", din, product, T * K, 1e-6, 1e-6);

	for (int i = 0; i < T * K; i++)
		acc[i] = 1.0f;
	matmul_backward_input_cpu(acc, dout, N, W, K, T, K, N, 1);
	/* one more fp32 rounding for the add to 1.0 */
	check_close("matmul_backward_input accumulate", acc, want_acc, T * K, 1e-6, 1e-6);
}

static void matmul_backward_input_grad_check(void)
{
	test_matmul_backward_input();
}
#endif

#ifdef OPS_TEST_CUDA
#include "matmul_case.h"

static void matmul_bwd_gpu(const void *p)
{
	const struct matmul_args *a = p;
	gpu->ops->matmul_backward_input(a->out, a->in, a->ld_in, a->weight, a->ld_w, a->T, a->K, a->N, a->accumulate);
}

/* din (T,K) = dout (T,N) @ W (N,K): a sum over N; see GEMM_A_REL.
 * ld_dout > N, ld_w > K: NaN pads, as in the forward. */
static void test_matmul_backward_input(int T, int K, int N, int ld_dout, int ld_w, int accumulate)
{
	struct gpu_case c;
	if (!case_begin(&c, "matmul_backward_input T=%d K=%d N=%d ld_dout=%d ld_w=%d accumulate=%d", T, K, N,
	                ld_dout, ld_w, accumulate))
		return;
	bf16 *dout0 = rand_bf16((size_t)T * N, -1, 1), *w0 = rand_bf16((size_t)N * K, -1, 1);
	bf16 *dout = pitched_copy(dout0, (size_t)T, (size_t)N, (size_t)ld_dout, 2);
	bf16 *w = pitched_copy(w0, (size_t)N, (size_t)K, (size_t)ld_w, 2);
	float *din0 = rand_f32((size_t)T * K, -1, 1);
	float *ref = dup_bytes(din0, (size_t)T * K * 4);
	double t0 = now_ms();
	matmul_backward_input_cpu(ref, dout, ld_dout, w, ld_w, T, K, N, accumulate);
	c.cpu_ms = now_ms() - t0;

	struct matmul_args a = { NULL, dev_from(dout, (size_t)T * ld_dout * 2, 0), dev_from(w, (size_t)N * ld_w * 2, 0),
	                         NULL, ld_dout, ld_w, T, K, N, accumulate };
	a.out = case_out(&c, "din", (size_t)T * K * 4, accumulate ? din0 : NULL, 0);
	case_run(&c, matmul_bwd_gpu, &a);
	matmul_case_end(&c, "din", ref, (size_t)T * K, 0, T, K, N);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void matmul_backward_input_cuda_check(int realistic)
{
	if (!realistic) {
		test_matmul_backward_input(5, 19, 7, 7, 19, 1);
		/* pitched operands with NaN pads */
		test_matmul_backward_input(5, 19, 7, 9, 23, 1);
		test_matmul_backward_input(6, 40, 24, 32, 48, 0);
	} else {
		test_matmul_backward_input(128, 4096, 11008, 11008, 4096, 1); /* through gate/up */
		test_matmul_backward_input(64, 11008, 4096, 4096, 11008, 0);  /* through down */
		/* the input gradient through a 32B weight with its extension rows
		 * (N = 5120 + 160) */
		test_matmul_backward_input(512, 5120, 5280, 5312, 5280, 0);
	}
}
#endif
