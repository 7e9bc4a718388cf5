/* tests/unit/test_ops_grad.c: every backward op of the CPU backend against
 * central finite differences of an independent double-precision forward
 * written here.  For each op, loss = sum(w .* forward(inputs)) with random
 * w; the float backward gets dout = w, and the reference gradient perturbs
 * each input in double.  Inputs are drawn as float (or bf16) and widened, so
 * both sides see the same point.
 *
 * Finite differences use the step h = 1e-5 * max(1, |x|): the truncation
 * error (h^2/6) f''' and the rounding error eps_double * |L| / h are both
 * near 1e-10 for these O(1) losses, far below the float errors that the
 * tolerances below allow, so a tolerance is a statement about the float op. */
#include "ops_check.h"

#define FD_STEP 1e-5

typedef double (*loss_fn)(const void *ctx);

/* grad (n) = dL/dx by central differences; x is restored afterwards. */
static void finite_diff(double *grad, double *x, long n, loss_fn loss, const void *ctx)
{
	for (long i = 0; i < n; i++) {
		double x0 = x[i], h = FD_STEP * fmax(1.0, fabs(x0));
		double xp = x0 + h, xm = x0 - h;
		x[i] = xp;
		double lp = loss(ctx);
		x[i] = xm;
		double lm = loss(ctx);
		x[i] = x0;
		grad[i] = (lp - lm) / (xp - xm);
	}
}

/* Checks that a second identical call doubled buf (n), i.e. the op added
 * its result (g + g = 2g is exact in float) rather than overwriting. */
static void check_accumulated(const char *name, const float *twice, const float *once, long n)
{
	long bad = 0;
	for (long i = 0; i < n; i++)
		if (twice[i] != 2.0f * once[i])
			bad++;
	printf("%s %s: += semantics, %ld of %ld elements not doubled\n", bad ? "FAIL" : "ok  ", name, bad, n);
	if (bad)
		failures++;
}

/* --- RMSNorm ------------------------------------------------------------ */

struct rmsnorm_ctx {
	int T, C;
	double eps;
	const double *w, *lw;
	double *x;
};

static double rmsnorm_loss(const void *p)
{
	const struct rmsnorm_ctx *c = p;
	double L = 0.0;
	for (int t = 0; t < c->T; t++) {
		const double *x = c->x + (size_t)t * c->C;
		double ss = 0.0;
		for (int i = 0; i < c->C; i++)
			ss += x[i] * x[i];
		double r = 1.0 / sqrt(ss / c->C + c->eps);
		for (int i = 0; i < c->C; i++)
			L += c->lw[(size_t)t * c->C + i] * c->w[i] * x[i] * r;
	}
	return L;
}

static void test_rmsnorm_backward(void)
{
	enum { T = 3, C = 16, N = T * C };
	float x[N], lw[N], rstd[T], din[N] = { 0 }, din2[N];
	bf16 weight[C];
	double xd[N], wd[C], lwd[N], want[N];
	float eps = 1e-5f;

	fill_f32(x, N, -2.0, 2.0);
	for (int i = 2 * C; i < 3 * C; i++)
		x[i] *= 0.01f; /* a row whose mean square is near eps, so eps matters */
	fill_bf16(weight, C, 0.5, 1.5);
	fill_f32(lw, N, -1.0, 1.0);
	rmsnorm_forward_cpu(NULL, NULL, C, rstd, x, weight, eps, T, C);
	rmsnorm_backward_cpu(din, lw, x, weight, rstd, T, C);

	widen_f32(xd, x, N);
	widen_bf16(wd, weight, C);
	widen_f32(lwd, lw, N);
	struct rmsnorm_ctx ctx = { T, C, eps, wd, lwd, xd };
	finite_diff(want, xd, N, rmsnorm_loss, &ctx);
	/* Each element is a C-term double dot plus a few fp32 ops on values up
	 * to ~100 (the small row's rstd): fp32 rounding gives ~1e-7 relative;
	 * rtol 1e-5 leaves room, atol covers elements that cancel to ~0. */
	check_close("rmsnorm_backward din", din, want, N, 1e-5, 1e-5);

	memcpy(din2, din, sizeof din);
	rmsnorm_backward_cpu(din2, lw, x, weight, rstd, T, C);
	check_accumulated("rmsnorm_backward din", din2, din, N);
}

/* --- matmul_backward_input ---------------------------------------------- */

struct matmul_ctx {
	int T, K, N;
	const double *W, *lw;
	double *x;
};

static double matmul_loss(const void *p)
{
	const struct matmul_ctx *c = p;
	double L = 0.0;
	for (int t = 0; t < c->T; t++)
		for (int n = 0; n < c->N; n++) {
			double y = 0.0;
			for (int k = 0; k < c->K; k++)
				y += c->x[(size_t)t * c->K + k] * c->W[(size_t)n * c->K + k];
			L += c->lw[(size_t)t * c->N + n] * y;
		}
	return L;
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
	for (int t = 0; t < T; t++)
		for (int k = 0; k < K; k++) {
			double s = 0.0;
			for (int n = 0; n < N; n++)
				s += lwd[t * N + n] * Wd[(size_t)n * K + k];
			product[t * K + k] = s;
			want_acc[t * K + k] = 1.0 + s;
		}
	check_close("matmul_backward_input din vs dout @ W", din, product, T * K, 1e-6, 1e-6);

	for (int i = 0; i < T * K; i++)
		acc[i] = 1.0f;
	matmul_backward_input_cpu(acc, dout, N, W, K, T, K, N, 1);
	/* one more fp32 rounding for the add to 1.0 */
	check_close("matmul_backward_input accumulate", acc, want_acc, T * K, 1e-6, 1e-6);
}

/* --- LoRA ------------------------------------------------------------------ */

struct lora_ctx {
	int T, K, N, R;
	double scale;
	const double *keep, *lw; /* keep (T,K): 0 or 1/(1-p) */
	double *x, *A, *B;
};

static double lora_loss(const void *p)
{
	const struct lora_ctx *c = p;
	double L = 0.0;
	for (int t = 0; t < c->T; t++) {
		double u[64];
		for (int r = 0; r < c->R; r++) {
			u[r] = 0.0;
			for (int k = 0; k < c->K; k++) {
				size_t tk = (size_t)t * c->K + k;
				u[r] += c->x[tk] * c->keep[tk] * c->A[(size_t)r * c->K + k];
			}
		}
		for (int n = 0; n < c->N; n++) {
			double y = 0.0;
			for (int r = 0; r < c->R; r++)
				y += u[r] * c->B[(size_t)n * c->R + r];
			L += c->lw[(size_t)t * c->N + n] * c->scale * y;
		}
	}
	return L;
}

static void test_lora_backward(float p)
{
	enum { T = 5, K = 70, N = 6, R = 3 }; /* K spans two of the op's 64-wide tiles */
	const float scale = 2.0f;
	const uint64_t seed = 1234;
	bf16 x[T * K], lw16[T * N];
	float A[R * K], B[N * R], lw[T * N], out[T * N] = { 0 }, u[T * R], du[T * R];
	float dA[R * K] = { 0 }, dB[N * R] = { 0 }, din[T * K];
	float dA2[R * K], dB2[N * R], din2[T * K];
	double xd[T * K], Ad[R * K], Bd[N * R], lwd[T * N], keep[T * K];
	double want_A[R * K], want_B[N * R], want_x[T * K], want_du[T * R];
	char name[96];
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
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++) {
			double s = 0.0;
			for (int n = 0; n < N; n++)
				s += lwd[t * N + n] * Bd[n * R + r];
			want_du[t * R + r] = scale * s;
		}

	/* Every gradient is a chain of two fp32 sums of at most 70 terms of O(1)
	 * values (u itself an fp32 sum saved by the forward): accumulated
	 * rounding stays below ~1e-6 relative; 1e-5 atol/rtol. */
	snprintf(name, sizeof name, "lora_backward dA (dropout %.1f)", p);
	check_close(name, dA, want_A, R * K, 1e-5, 1e-5);
	snprintf(name, sizeof name, "lora_backward dB (dropout %.1f)", p);
	check_close(name, dB, want_B, N * R, 1e-5, 1e-5);
	snprintf(name, sizeof name, "lora_backward din (dropout %.1f)", p);
	check_close(name, din, want_x, T * K, 1e-5, 1e-5);
	snprintf(name, sizeof name, "lora_backward du (dropout %.1f)", p);
	check_close(name, du, want_du, T * R, 1e-6, 1e-6);
	if (p > 0.0f) {
		/* a dropped input has no gradient at all, not a small one */
		long leaked = 0;
		for (int i = 0; i < T * K; i++)
			leaked += keep[i] == 0.0 && din[i] != 0.0f;
		CHECK(leaked == 0);
	}

	memcpy(dA2, dA, sizeof dA);
	memcpy(dB2, dB, sizeof dB);
	memcpy(din2, din, sizeof din);
	lora_backward_cpu(&(struct lora_bwd_args){ .din = din2, .dA = dA2, .dB = dB2, .du = du, .dout = lw16,
		.ld_dout = N, .in = x, .ld_in = K, .u = u, .A = A, .B = B, .scale = scale, .dropout_p = p,
		.dropout_seed = seed, .T = T, .K = K, .N = N, .R = R, .accumulate = 1 });
	check_accumulated("lora_backward dA", dA2, dA, R * K);
	check_accumulated("lora_backward dB", dB2, dB, N * R);
	check_accumulated("lora_backward din", din2, din, T * K);

	/* din == NULL: the parameter gradients alone, unchanged */
	float dA3[R * K] = { 0 }, dB3[N * R] = { 0 };
	lora_backward_cpu(&(struct lora_bwd_args){ .dA = dA3, .dB = dB3, .du = du, .dout = lw16, .ld_dout = N,
		.in = x, .ld_in = K, .u = u, .A = A, .B = B, .scale = scale, .dropout_p = p, .dropout_seed = seed,
		.T = T, .K = K, .N = N, .R = R });
	CHECK(memcmp(dA3, dA, sizeof dA) == 0 && memcmp(dB3, dB, sizeof dB) == 0);
}

/* --- RoPE ------------------------------------------------------------------ */

/* cos, sin (S, D/2) as HF builds them in fp32: inv_freq = theta^(-2i/D),
 * angle = pos * inv_freq. */
static void rope_tables(float *cos_t, float *sin_t, int S, int D, double theta)
{
	for (int s = 0; s < S; s++)
		for (int i = 0; i < D / 2; i++) {
			float inv_freq = (float)(1.0 / pow(theta, 2.0 * i / D));
			float angle = (float)s * inv_freq;
			cos_t[s * (D / 2) + i] = cosf(angle);
			sin_t[s * (D / 2) + i] = sinf(angle);
		}
}

struct rope_ctx {
	int T, S, nh, D;
	const double *cos_t, *sin_t, *lw;
	double *x;
};

static double rope_loss(const void *p)
{
	const struct rope_ctx *c = p;
	int half = c->D / 2;
	double L = 0.0;
	for (int t = 0; t < c->T; t++)
		for (int h = 0; h < c->nh; h++) {
			size_t off = ((size_t)t * c->nh + h) * c->D;
			const double *cs = c->cos_t + (size_t)(t % c->S) * half, *sn = c->sin_t + (size_t)(t % c->S) * half;
			for (int d = 0; d < c->D; d++) {
				/* out = x cos + rotate_half(x) sin, rotate_half(x) = cat(-x2, x1) */
				int i = d % half;
				double rot = d < half ? -c->x[off + d + half] : c->x[off + d - half];
				L += c->lw[off + d] * (c->x[off + d] * cs[i] + rot * sn[i]);
			}
		}
	return L;
}

static void test_rope_backward(void)
{
	enum { B = 2, S = 3, NH = 2, D = 8, N = B * S * NH * D };
	float cos_t[S * D / 2], sin_t[S * D / 2], lw[N], dx[N];
	double cosd[S * D / 2], sind[S * D / 2], xd[N], lwd[N], want[N];
	float x[N];

	rope_tables(cos_t, sin_t, S, D, 10000.0);
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

/* --- attention ------------------------------------------------------------- */

struct attn_ctx {
	int B, S, H, G, D;
	const double *lw;
	double *q, *k, *v;
};

static double attn_loss(const void *p)
{
	const struct attn_ctx *c = p;
	int B = c->B, S = c->S, H = c->H, G = c->G, D = c->D;
	double scale = 1.0 / sqrt((double)D), L = 0.0;
	double s[64];
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			int g = h / (H / G);
			for (int i = 0; i < S; i++) {
				const double *qi = c->q + (((size_t)b * S + i) * H + h) * D;
				double max = -INFINITY, sum = 0.0;
				for (int j = 0; j <= i; j++) {
					const double *kj = c->k + (((size_t)b * S + j) * G + g) * D;
					s[j] = 0.0;
					for (int d = 0; d < D; d++)
						s[j] += qi[d] * kj[d];
					s[j] *= scale;
					max = fmax(max, s[j]);
				}
				for (int j = 0; j <= i; j++)
					sum += exp(s[j] - max);
				for (int d = 0; d < D; d++) {
					double o = 0.0;
					for (int j = 0; j <= i; j++)
						o += exp(s[j] - max) / sum * c->v[(((size_t)b * S + j) * G + g) * D + d];
					L += c->lw[(((size_t)b * S + i) * H + h) * D + d] * o;
				}
			}
		}
	return L;
}

/* The scale of the rounding the bf16 contract adds to each gradient (ops.h):
 * dv sums P16_ij dout_i and dq, dk sum scale dS16_ij k_j and scale dS16_ij
 * q_i, and rounding P or dS to bf16 moves each term by at most 2^-8 of
 * itself; bq, bk, bv get the sums of |term| in double. */
static void attn_rounding_bounds(const struct attn_ctx *c, double *bq, double *bk, double *bv)
{
	int B = c->B, S = c->S, H = c->H, G = c->G, D = c->D;
	double scale = 1.0 / sqrt((double)D), s[64], P[64], dP[64];
	memset(bq, 0, sizeof(double) * B * S * H * D);
	memset(bk, 0, sizeof(double) * B * S * G * D);
	memset(bv, 0, sizeof(double) * B * S * G * D);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			int g = h / (H / G);
			for (int i = 0; i < S; i++) {
				size_t qoff = (((size_t)b * S + i) * H + h) * D;
				double max = -INFINITY, sum = 0.0, delta = 0.0;
				for (int j = 0; j <= i; j++) {
					size_t kvoff = (((size_t)b * S + j) * G + g) * D;
					s[j] = dP[j] = 0.0;
					for (int d = 0; d < D; d++) {
						s[j] += c->q[qoff + d] * c->k[kvoff + d];
						dP[j] += c->lw[qoff + d] * c->v[kvoff + d];
					}
					s[j] *= scale;
					max = fmax(max, s[j]);
				}
				for (int j = 0; j <= i; j++)
					sum += exp(s[j] - max);
				for (int j = 0; j <= i; j++) {
					P[j] = exp(s[j] - max) / sum;
					delta += P[j] * dP[j];
				}
				for (int j = 0; j <= i; j++) {
					size_t kvoff = (((size_t)b * S + j) * G + g) * D;
					double ds = fabs(P[j] * (dP[j] - delta));
					for (int d = 0; d < D; d++) {
						bq[qoff + d] += scale * ds * fabs(c->k[kvoff + d]);
						bk[kvoff + d] += scale * ds * fabs(c->q[qoff + d]);
						bv[kvoff + d] += P[j] * fabs(c->lw[qoff + d]);
					}
				}
			}
		}
}

/* Values drawn as float, then rounded to bf16: the op rounds its inputs
 * before every product (ops.h), so only such values are a point where the
 * float op and the double reference see the same function. */
static void fill_bf16_values(float *x, long n, double lo, double hi)
{
	fill_f32(x, n, lo, hi);
	for (long i = 0; i < n; i++)
		x[i] = f32_from_bf16(bf16_from_f32(x[i]));
}

static void test_attention_backward(void)
{
	enum { B = 2, S = 5, H = 4, G = 2, D = 8, T = B * S, NQ = T * H * D, NK = T * G * D };
	float q[NQ], k[NK], v[NK], lw[NQ], lse[B * H * S], dq[NQ], dk[NK], dv[NK];
	bf16 out[NQ];
	double qd[NQ], kd[NK], vd[NK], lwd[NQ], want_q[NQ], want_k[NK], want_v[NK], bq[NQ], bk[NK], bv[NK];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	/* scores up to ~8: far from uniform, so the softmax Jacobian matters */
	fill_bf16_values(q, NQ, -2.0, 2.0);
	fill_bf16_values(k, NK, -2.0, 2.0);
	fill_bf16_values(v, NK, -1.0, 1.0);
	fill_bf16_values(lw, NQ, -1.0, 1.0);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, B, S, H, G, D);
	fill_nan(dq, NQ); /* written, not accumulated: every element must be set */
	fill_nan(dk, NK);
	fill_nan(dv, NK);
	attention_backward_cpu(dq, dk, dv, scratch, lw, q, k, v, lse, NULL, B, S, H, G, D);

	widen_f32(qd, q, NQ);
	widen_f32(kd, k, NK);
	widen_f32(vd, v, NK);
	widen_f32(lwd, lw, NQ);
	struct attn_ctx ctx = { B, S, H, G, D, lwd, qd, kd, vd };
	finite_diff(want_q, qd, NQ, attn_loss, &ctx);
	finite_diff(want_k, kd, NK, attn_loss, &ctx);
	finite_diff(want_v, vd, NK, attn_loss, &ctx);
	attn_rounding_bounds(&ctx, bq, bk, bv);
	/* The inputs are bf16 values, so their rounding changes nothing.  What
	 * the contract rounds, P and dS, moves each gradient by at most 2^-8 of
	 * its sum of |terms| (1% over for taking |dS| from the double side).
	 * The rest is fp32: P is rebuilt as exp(score - lse) with lse rounded
	 * to fp32 (|lse| <= ~10, so ~1e-6 relative in P), then two fp32 sums of
	 * <= 2*5 terms: gradients of O(1) hold ~2e-6 relative; 1e-5 atol/rtol. */
	check_bounded("attention_backward dq (B=2 H=4 G=2)", dq, want_q, bq, NQ, 1.01 / 256, 1e-5, 1e-5);
	check_bounded("attention_backward dk (B=2 H=4 G=2)", dk, want_k, bk, NK, 1.01 / 256, 1e-5, 1e-5);
	check_bounded("attention_backward dv (B=2 H=4 G=2)", dv, want_v, bv, NK, 1.01 / 256, 1e-5, 1e-5);

	/* the products read q, k, v and dout rounded to bf16 and nothing finer:
	 * moving every input by 2^-10 of itself (under half a bf16 ulp) changes
	 * no bit, moving it by 2^-6 (over one ulp) changes the gradients */
	float q2[NQ], k2[NK], v2[NK], lw2[NQ], dq2[NQ], dk2[NK], dv2[NK];
	for (int pass = 0; pass < 2; pass++) {
		float nudge = pass == 0 ? 1.0f + 1.0f / 1024 : 1.0f + 1.0f / 64;
		for (int i = 0; i < NQ; i++) {
			q2[i] = q[i] * nudge;
			lw2[i] = lw[i] * nudge;
		}
		for (int i = 0; i < NK; i++) {
			k2[i] = k[i] * nudge;
			v2[i] = v[i] * nudge;
		}
		attention_backward_cpu(dq2, dk2, dv2, scratch, lw2, q2, k2, v2, lse, NULL, B, S, H, G, D);
		int same = memcmp(dq, dq2, sizeof dq) == 0 && memcmp(dk, dk2, sizeof dk) == 0 &&
			   memcmp(dv, dv2, sizeof dv) == 0;
		int ok = pass == 0 ? same : !same;
		printf("%s attention_backward with inputs moved by %s bf16 ulp: %s bits\n", ok ? "ok  " : "FAIL",
		       pass == 0 ? "under half a" : "over one", same ? "same" : "different");
		failures += !ok;
	}
	free(scratch);
}

/* --- SwiGLU ---------------------------------------------------------------- */

struct swiglu_ctx {
	long n;
	const double *lw;
	double *gate, *up;
};

static double swiglu_loss(const void *p)
{
	const struct swiglu_ctx *c = p;
	double L = 0.0;
	for (long i = 0; i < c->n; i++)
		L += c->lw[i] * c->gate[i] / (1.0 + exp(-c->gate[i])) * c->up[i];
	return L;
}

static void test_swiglu_backward(void)
{
	enum { N = 48 };
	float gate[N], up[N], lw[N], dgate[N], dup[N];
	bf16 dgate16[N], dup16[N];
	double gd[N], ud[N], lwd[N], want_g[N], want_u[N];

	fill_f32(gate, N, -8.0, 8.0); /* both tails of the sigmoid */
	fill_f32(up, N, -2.0, 2.0);
	fill_f32(lw, N, -1.0, 1.0);
	swiglu_backward_cpu(dgate16, dup16, N, lw, gate, up, 1, N);
	for (int i = 0; i < N; i++)
		dgate[i] = f32_from_bf16(dgate16[i]), dup[i] = f32_from_bf16(dup16[i]);

	widen_f32(gd, gate, N);
	widen_f32(ud, up, N);
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

/* --- cross-entropy --------------------------------------------------------- */

struct ce_ctx {
	int T, V;
	const int32_t *targets;
	double *logits;
};

/* mean over non-ignored rows of -log softmax(logits)[target] */
static double ce_mean_loss(const void *p)
{
	const struct ce_ctx *c = p;
	double L = 0.0;
	int valid = 0;
	for (int t = 0; t < c->T; t++) {
		if (c->targets[t] < 0)
			continue;
		const double *x = c->logits + (size_t)t * c->V;
		double max = x[0], sum = 0.0;
		for (int j = 1; j < c->V; j++)
			max = fmax(max, x[j]);
		for (int j = 0; j < c->V; j++)
			sum += exp(x[j] - max);
		L += max + log(sum) - x[c->targets[t]];
		valid++;
	}
	return L / valid;
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

int main(void)
{
	test_rmsnorm_backward();
	test_matmul_backward_input();
	test_lora_backward(0.0f);
	test_lora_backward(0.3f);
	test_rope_backward();
	test_attention_backward();
	test_swiglu_backward();
	test_crossentropy();
	if (failures) {
		printf("test_ops_grad: %d checks failed\n", failures);
		return 1;
	}
	printf("test_ops_grad: all checks passed\n");
	return 0;
}
