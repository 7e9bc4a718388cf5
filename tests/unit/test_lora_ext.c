/* tests/unit/test_lora_ext.c: the LoRA extension of the base GEMMs
 * (kernels/ops.h) on the CPU backend.  The three bf16 parts of an fp32
 * value add back to it exactly; the forward over K + E columns equals the
 * fallback (LoRA term written, base GEMM and bias added) to fp32 rounding,
 * and so does the backward's input gradient over N + E rows; u, du, dA
 * and dB are the same bits either way (the extension changes only where
 * the adapter's term is summed); the layout's pad columns are zeros, its
 * ones column meets the bias, and the weight's unused corner is not
 * written. */
#include "../ops/ops_check.h"

enum { T = 5, K = 64, N = 40, R = 4 }; /* constants, not macros: the op's fields share the names */

/* The sum of the three parts, in double (exact: 3 x 8 bits hold 24, for
 * |w| >= 2^-100; nearer the subnormals the last part would fall below
 * bf16's smallest value). */
static void test_split3(void)
{
	static const float special[] = { 0.0f, -0.0f, 1.0f, -1.5f, 3.14159274f, 1e-30f, -3.1e-30f, 3.0e38f,
	                                 1.00000012f, 0.333333343f };
	long bad = 0;

	for (int i = 0; i < 100000 + (int)(sizeof special / sizeof *special); i++) {
		float w = i < (int)(sizeof special / sizeof *special) ? special[i]
		                                                      : (float)rng_uniform(-1.0, 1.0) *
		                                                                powf(2.0f, (float)rng_uniform(-60, 60));
		bf16 p[3];
		lora_split3(w, p);
		double sum = (double)f32_from_bf16(p[0]) + f32_from_bf16(p[1]) + f32_from_bf16(p[2]);
		if (sum != (double)w && bad++ < 5)
			printf("  split3(%.9g) = %.9g + %.9g + %.9g\n", w, f32_from_bf16(p[0]), f32_from_bf16(p[1]),
			       f32_from_bf16(p[2]));
	}
	CHECKF(bad == 0, "lora_split3: %ld values whose parts do not add back", bad);
	printf("%s lora_split3: parts add back exactly\n", bad ? "FAIL" : "ok  ");
}

struct fixture {
	int E, ldx, ldd, ldw;
	bf16 *x, *dout, *W, *bias;
	float *A, *B;
};

static void fixture_make(struct fixture *f)
{
	f->E = lora_ext_cols(R);
	f->ldx = K + f->E;
	f->ldd = N + f->E;
	f->ldw = K + f->E;
	f->x = NEW(bf16, T * f->ldx);
	f->dout = NEW(bf16, T * f->ldd);
	f->W = NEW(bf16, (N + f->E) * f->ldw);
	f->bias = NEW(bf16, N);
	f->A = NEW(float, R * K);
	f->B = NEW(float, N * R);
	for (int t = 0; t < T; t++) {
		fill_bf16(f->x + t * f->ldx, K, -2, 2);
		fill_bf16(f->dout + t * f->ldd, N, -1, 1);
	}
	for (int n = 0; n < N; n++)
		fill_bf16(f->W + n * f->ldw, K, -0.2, 0.2);
	fill_bf16(f->bias, N, -1, 1);
	fill_f32(f->A, R * K, -0.125, 0.125);
	fill_f32(f->B, N * R, -0.3, 0.3); /* trained B: not zero */
}

static void fixture_free(struct fixture *f)
{
	free(f->x);
	free(f->dout);
	free(f->W);
	free(f->bias);
	free(f->A);
	free(f->B);
}

/* The weight side: B's parts, the bias, zeros; A's parts below; the
 * corner keeps what it held. */
static void test_weight_layout(const struct fixture *f0, float scale)
{
	struct fixture f = *f0;
	bf16 sentinel = 0x7fc1;
	bf16 *W = NEW(bf16, (N + f.E) * f.ldw);
	long bad = 0;

	memcpy(W, f.W, sizeof(bf16) * (N + f.E) * f.ldw);
	for (int c = 0; c < f.E; c++)
		for (int k = K; k < f.ldw; k++)
			W[(N + c) * f.ldw + k] = sentinel;
	lora_weight_ext_cpu(W, f.ldw, f.A, f.B, f.bias, scale, K, N, R);
	for (int n = 0; n < N; n++)
		for (int c = 0; c < f.E; c++) {
			bf16 want = 0, part[3];
			if (c < 9 * R) {
				lora_split3(scale * f.B[n * R + c % R], part);
				want = part[(c / R) % 3];
			} else if (c == 9 * R) {
				want = f.bias[n];
			}
			bad += W[n * f.ldw + K + c] != want;
		}
	for (int c = 0; c < f.E; c++)
		for (int k = 0; k < f.ldw; k++) {
			bf16 want = sentinel, part[3];
			if (k < K && c < 9 * R) {
				lora_split3(f.A[(c % R) * K + k], part);
				want = part[(c / R) % 3];
			} else if (k < K) {
				want = 0;
			}
			bad += W[(N + c) * f.ldw + k] != want;
		}
	for (int n = 0; n < N; n++)
		bad += memcmp(W + n * f.ldw, f.W + n * f.ldw, sizeof(bf16) * K) != 0;
	CHECKF(bad == 0, "lora_weight_ext: %ld elements not as the layout says", bad);
	printf("%s lora_weight_ext: layout (E = %d)\n", bad ? "FAIL" : "ok  ", f.E);
	free(W);
}

/* Forward: ext against the fallback, and both against a double reference
 * made from the op's own u. */
static void test_forward(const struct fixture *f0, float scale, float p)
{
	struct fixture f = *f0;
	float *u1 = NEW(float, T * R), *u2 = NEW(float, T * R);
	float *out1 = NEW(float, T * N), *out2 = NEW(float, T * N);
	double *want = NEW(double, T * N), *bound = NEW(double, T * N);
	char name[96];

	lora_forward_cpu(&(struct lora_fwd_args){ .out = out1, .u = u1, .in = f.x, .ld_in = f.ldx, .A = f.A, .B = f.B,
		.scale = scale, .dropout_p = p, .dropout_seed = 99, .T = T, .K = K, .N = N, .R = R });
	matmul_forward_cpu(out1, f.x, f.ldx, f.W, f.ldw, f.bias, T, K, N, 1);

	for (int t = 0; t < T; t++) /* garbage where the op must write */
		for (int c = 0; c < f.E; c++)
			f.x[t * f.ldx + K + c] = 0x7fc1;
	lora_forward_cpu(&(struct lora_fwd_args){ .u = u2, .ext = f.x + K, .in = f.x, .ld_in = f.ldx, .A = f.A,
		.B = f.B, .scale = scale, .dropout_p = p, .dropout_seed = 99, .T = T, .K = K, .N = N, .R = R });
	lora_weight_ext_cpu(f.W, f.ldw, f.A, f.B, f.bias, scale, K, N, R);
	matmul_forward_cpu(out2, f.x, f.ldx, f.W, f.ldw, NULL, T, K + f.E, N, 0);

	snprintf(name, sizeof name, "lora ext forward u (p %.1f)", p);
	check_same_bits(name, u1, u2, sizeof(float) * T * R);
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = f32_from_bf16(f.bias[n]), b = fabs(s);
			for (int k = 0; k < K; k++) {
				double v = (double)f32_from_bf16(f.x[t * f.ldx + k]) * f32_from_bf16(f.W[n * f.ldw + k]);
				s += v, b += fabs(v);
			}
			for (int r = 0; r < R; r++) {
				double v = (double)u1[t * R + r] * ((double)scale * f.B[n * R + r]);
				s += v, b += fabs(v);
			}
			want[t * N + n] = s;
			bound[t * N + n] = b;
		}
	/* fp32 sums of K + R terms: a few ulps of the sum of |terms| */
	snprintf(name, sizeof name, "lora ext forward out, fallback (p %.1f)", p);
	check_bounded(name, out1, want, bound, T * N, 4e-7 * (K + R), 0, 0);
	snprintf(name, sizeof name, "lora ext forward out, extension (p %.1f)", p);
	check_bounded(name, out2, want, bound, T * N, 4e-7 * (K + R), 0, 0);
	free(u1), free(u2), free(out1), free(out2), free(want), free(bound);
}

/* Backward (no dropout): din over N + E against the fallback; du, dA, dB
 * the same bits. */
static void test_backward(const struct fixture *f0, float scale)
{
	struct fixture f = *f0;
	float *u = NEW(float, T * R), *du1 = NEW(float, T * R), *du2 = NEW(float, T * R);
	float *dA1 = NEW(float, R * K), *dA2 = NEW(float, R * K), *dB1 = NEW(float, N * R), *dB2 = NEW(float, N * R);
	float *din1 = NEW(float, T * K), *din2 = NEW(float, T * K);
	double *want = NEW(double, T * K), *bound = NEW(double, T * K);

	lora_forward_cpu(&(struct lora_fwd_args){ .u = u, .in = f.x, .ld_in = f.ldx, .A = f.A, .B = f.B,
		.scale = scale, .dropout_p = 0.0f, .dropout_seed = 1, .T = T, .K = K, .N = N, .R = R });
	lora_backward_cpu(&(struct lora_bwd_args){ .din = din1, .dA = dA1, .dB = dB1, .du = du1, .dout = f.dout,
		.ld_dout = f.ldd, .in = f.x, .ld_in = f.ldx, .u = u, .A = f.A, .B = f.B, .scale = scale,
		.dropout_p = 0.0f, .dropout_seed = 1, .T = T, .K = K, .N = N, .R = R });
	matmul_backward_input_cpu(din1, f.dout, f.ldd, f.W, f.ldw, T, K, N, 1);

	for (int t = 0; t < T; t++)
		for (int c = 0; c < f.E; c++)
			f.dout[t * f.ldd + N + c] = 0x7fc1;
	lora_weight_ext_cpu(f.W, f.ldw, f.A, f.B, f.bias, scale, K, N, R);
	lora_backward_cpu(&(struct lora_bwd_args){ .dA = dA2, .dB = dB2, .du = du2, .ext = f.dout + N, .dout = f.dout,
		.ld_dout = f.ldd, .in = f.x, .ld_in = f.ldx, .u = u, .A = f.A, .B = f.B, .scale = scale,
		.dropout_p = 0.0f, .dropout_seed = 1, .T = T, .K = K, .N = N, .R = R });
	for (int t = 0; t < T; t++) {
		const bf16 *row = f.dout + t * f.ldd + N;
		int tail_ok = 1;
		for (int c = 9 * R; c < f.E; c++)
			tail_ok &= row[c] == 0;
		CHECKF(tail_ok, "lora ext backward: row %d's tail is not zeros (no ones column in backward)", t);
	}
	matmul_backward_input_cpu(din2, f.dout, f.ldd, f.W, f.ldw, T, K, N + f.E, 0);

	check_same_bits("lora ext backward du", du1, du2, sizeof(float) * T * R);
	check_same_bits("lora ext backward dA", dA1, dA2, sizeof(float) * R * K);
	check_same_bits("lora ext backward dB", dB1, dB2, sizeof(float) * N * R);
	for (int t = 0; t < T; t++)
		for (int k = 0; k < K; k++) {
			double s = 0, b = 0;
			for (int n = 0; n < N; n++) {
				double v = (double)f32_from_bf16(f.dout[t * f.ldd + n]) * f32_from_bf16(f.W[n * f.ldw + k]);
				s += v, b += fabs(v);
			}
			for (int r = 0; r < R; r++) {
				double v = (double)du1[t * R + r] * f.A[r * K + k];
				s += v, b += fabs(v);
			}
			want[t * K + k] = s;
			bound[t * K + k] = b;
		}
	check_bounded("lora ext backward din, fallback", din1, want, bound, T * K, 4e-7 * (N + R), 0, 0);
	check_bounded("lora ext backward din, extension", din2, want, bound, T * K, 4e-7 * (N + R), 0, 0);
	free(u), free(du1), free(du2), free(dA1), free(dA2), free(dB1), free(dB2), free(din1), free(din2);
	free(want), free(bound);
}

int main(void)
{
	struct fixture f;

	set_progname("test_lora_ext");
	test_split3();
	fixture_make(&f);
	CHECKF(f.E == 64 && lora_ext_cols(16) == 160 && lora_ext_cols(0) == 0, "lora_ext_cols: %d %d %d", f.E,
	       lora_ext_cols(16), lora_ext_cols(0));
	test_weight_layout(&f, 2.0f);
	test_forward(&f, 2.0f, 0.0f);
	test_forward(&f, 0.75f, 0.25f); /* a scale that rounds, and dropout */
	test_backward(&f, 2.0f);
	fixture_free(&f);
	return test_verdict("test_lora_ext");
}
