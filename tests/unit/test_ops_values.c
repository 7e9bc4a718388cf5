/* tests/unit/test_ops_values.c: forward values of the CPU ops against hand
 * computation or an independent double-precision reference, the bf16 and
 * NF4 encodings bit by bit, row pitches (every op with an ld argument gives
 * its unpitched bits and leaves pad columns alone), and the determinism
 * contract: the same inputs give the same bits whatever the OpenMP thread
 * count. */
#include <omp.h>

#include "ops_check.h"

static float bits_to_f32(uint32_t u)
{
	union { uint32_t u; float f; } v = { u };
	return v.f;
}

/* --- bf16 rounding --------------------------------------------------------- */

static void test_bf16_rounding(void)
{
	/* fp32 bit patterns and their bf16 under round-to-nearest-even */
	static const struct { uint32_t in; uint16_t want; const char *why; } cases[] = {
		{ 0x3f800000u, 0x3f80, "1.0 is exact" },
		{ 0x3f808000u, 0x3f80, "1 + 2^-8: a tie, down to the even 0x3f80" },
		{ 0x3f818000u, 0x3f82, "1 + 3*2^-8: a tie, up to the even 0x3f82" },
		{ 0x3f808001u, 0x3f81, "just above a tie rounds up" },
		{ 0x3f817fffu, 0x3f81, "just below a tie rounds down" },
		{ 0xbf808000u, 0xbf80, "-(1 + 2^-8): ties to even on the magnitude" },
		{ 0xbf818000u, 0xbf82, "-(1 + 3*2^-8)" },
		{ 0x7f7fffffu, 0x7f80, "FLT_MAX rounds to +inf" },
		{ 0x7f800000u, 0x7f80, "+inf stays +inf" },
		{ 0xff800000u, 0xff80, "-inf stays -inf" },
		{ 0x80000000u, 0x8000, "-0 keeps its sign" },
		{ 0x00018000u, 0x0002, "a subnormal tie rounds to even" },
	};
	enum { N = sizeof cases / sizeof cases[0] };
	float in[N + 2];
	bf16 out[N + 2];
	for (int i = 0; i < N; i++)
		in[i] = bits_to_f32(cases[i].in);
	in[N] = bits_to_f32(0x7f800001u); /* a signalling NaN must not become inf */
	in[N + 1] = bits_to_f32(0xffc00000u);
	cast_f32_to_bf16_cpu(out, N + 2, in, 1, N + 2);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		if (out[i] != cases[i].want) {
			printf("  bf16(0x%08x) = 0x%04x, want 0x%04x: %s\n", (unsigned)cases[i].in, out[i], cases[i].want,
			       cases[i].why);
			bad++;
		}
	}
	bad += !isnan(f32_from_bf16(out[N])) || !isnan(f32_from_bf16(out[N + 1]));
	printf("%s cast_f32_to_bf16: %d of %d rounding cases wrong\n", bad ? "FAIL" : "ok  ", bad, N + 2);
	failures += bad != 0;
}

/* --- embedding, add ---------------------------------------------------------- */

static void test_embedding_and_add(void)
{
	enum { V = 7, C = 5, T = 4 };
	bf16 wte[V * C];
	const int32_t tokens[T] = { 6, 0, 3, 6 };
	float out[T * C], b[T * C];
	double want[T * C], sum[T * C];

	fill_bf16(wte, V * C, -3.0, 3.0);
	embedding_forward_cpu(out, tokens, wte, T, C);
	for (int t = 0; t < T; t++)
		for (int c = 0; c < C; c++)
			want[t * C + c] = f32_from_bf16(wte[tokens[t] * C + c]);
	check_close("embedding_forward (an exact gather)", out, want, T * C, 0.0, 0.0);

	fill_f32(b, T * C, -1.0, 1.0);
	for (int i = 0; i < T * C; i++)
		sum[i] = (double)(out[i] + b[i]);
	add_inplace_cpu(out, b, T * C);
	check_close("add_inplace", out, sum, T * C, 0.0, 0.0);
}

/* --- RMSNorm ------------------------------------------------------------------- */

static void test_rmsnorm_values(void)
{
	/* by hand: mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5, rstd = 1/sqrt(7.5 + 1e-5) */
	const float x[8] = { 1, 2, 3, 4, -0.5f, 0, 0, 0.5f };
	bf16 w[4] = { bf16_from_f32(1.0f), bf16_from_f32(0.5f), bf16_from_f32(2.0f), bf16_from_f32(-1.0f) };
	float out[8], rstd[2], rstd_only[2];
	bf16 outb[8];
	const double r0 = 1.0 / sqrt(7.5 + 1e-5), r1 = 1.0 / sqrt(0.125 + 1e-5);
	const double want[8] = { 1 * r0, 0.5 * 2 * r0, 2 * 3 * r0, -1 * 4 * r0,
				 -0.5 * r1, 0, 0, -0.5 * r1 };
	const double want_rstd[2] = { r0, r1 };

	rmsnorm_forward_cpu(out, outb, 4, rstd, x, w, 1e-5f, 2, 4);
	/* three correctly rounded fp32 steps: within 2e-7 relative */
	check_close("rmsnorm_forward out (hand computed)", out, want, 8, 0.0, 2e-7);
	check_close("rmsnorm_forward rstd (hand computed)", rstd, want_rstd, 2, 0.0, 2e-7);
	int same = 1;
	for (int i = 0; i < 8; i++)
		same &= outb[i] == bf16_from_f32(out[i]);
	CHECK(same); /* the bf16 output is the fp32 one rounded once */
	rmsnorm_forward_cpu(NULL, NULL, 4, rstd_only, x, w, 1e-5f, 2, 4);
	CHECK(memcmp(rstd_only, rstd, sizeof rstd) == 0);
}

/* --- matmul -------------------------------------------------------------------- */

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
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = 0.0;
			for (int k = 0; k < K; k++)
				s += (double)f32_from_bf16(x[t * K + k]) * f32_from_bf16(W[n * K + k]);
			want_nobias[t * N + n] = s;
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

/* --- LoRA ------------------------------------------------------------------------ */

static void test_lora_forward(float p)
{
	enum { T = 64, K = 64, N = 12, R = 4 };
	const float scale = 0.5f;
	const uint64_t seed = 99;
	bf16 x[T * K];
	float A[R * K], B[N * R], out[T * N], u[T * R];
	double want[T * N], want_u[T * R];
	char name[80];
	long dropped = 0;

	fill_bf16(x, T * K, -1.0, 1.0);
	fill_f32(A, R * K, -0.5, 0.5);
	fill_f32(B, N * R, -0.5, 0.5);
	fill_f32(out, T * N, -1.0, 1.0); /* written over, not added to */
	lora_forward_cpu(&(struct lora_fwd_args){ .out = out, .u = u, .in = x, .ld_in = K, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });

	for (int t = 0; t < T; t++) {
		for (int r = 0; r < R; r++) {
			double s = 0.0;
			for (int k = 0; k < K; k++) {
				int kept = p == 0.0f || poros_dropout_keep(seed, (uint64_t)t * K + k, p);
				dropped += r == 0 && !kept;
				if (kept)
					s += f32_from_bf16(x[t * K + k]) / (1.0 - (double)p) * A[r * K + k];
			}
			want_u[t * R + r] = s;
		}
		for (int n = 0; n < N; n++) {
			double s = 0.0;
			for (int r = 0; r < R; r++)
				s += want_u[t * R + r] * B[n * R + r];
			want[t * N + n] = scale * s;
		}
	}
	/* K = 64 term fp32 sums of O(1): ~1e-6 */
	snprintf(name, sizeof name, "lora_forward u (dropout %.1f)", p);
	check_close(name, u, want_u, T * R, 1e-5, 1e-5);
	snprintf(name, sizeof name, "lora_forward out = (dropout %.1f)", p);
	check_close(name, out, want, T * N, 1e-5, 1e-5);
	if (p > 0.0f) {
		/* 4096 Bernoulli(p) draws: 5 standard deviations is +-0.04 at p = 0.5 */
		double frac = (double)dropped / (T * K);
		printf("%s lora_forward dropout %.2f drops %.3f of the inputs\n",
		       fabs(frac - p) < 0.04 ? "ok  " : "FAIL", p, frac);
		failures += fabs(frac - p) >= 0.04;
	}
}

/* --- RoPE ------------------------------------------------------------------------- */

static void test_rope_values(void)
{
	enum { B = 2, S = 3, NH = 2, D = 8, HALF = D / 2, N = B * S * NH * D };
	float cos_t[S * HALF], sin_t[S * HALF], x[N], y[N], back[N];
	double want[N], orig[N];

	for (int s = 0; s < S; s++)
		for (int i = 0; i < HALF; i++) {
			float angle = (float)s * (float)(1.0 / pow(10000.0, 2.0 * i / D));
			cos_t[s * HALF + i] = cosf(angle);
			sin_t[s * HALF + i] = sinf(angle);
		}
	fill_f32(x, N, -1.0, 1.0);
	memcpy(y, x, sizeof y);
	rope_forward_cpu(y, cos_t, sin_t, NULL, B, S, NH, D);

	/* position 0 (the first token of each sequence) is the identity, bit for bit */
	int same = 1;
	for (int b = 0; b < B; b++)
		same &= memcmp(y + (size_t)b * S * NH * D, x + (size_t)b * S * NH * D, NH * D * sizeof(float)) == 0;
	printf("%s rope_forward at position 0 is the identity\n", same ? "ok  " : "FAIL");
	failures += !same;

	/* elsewhere: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) per pair */
	for (int t = 0; t < B * S; t++)
		for (int h = 0; h < NH; h++)
			for (int i = 0; i < HALF; i++) {
				size_t o = ((size_t)t * NH + h) * D;
				double c = cos_t[(t % S) * HALF + i], s = sin_t[(t % S) * HALF + i];
				want[o + i] = x[o + i] * c - x[o + i + HALF] * s;
				want[o + i + HALF] = x[o + i + HALF] * c + x[o + i] * s;
			}
	check_close("rope_forward rotate_half pairs", y, want, N, 1e-7, 1e-6);

	/* the backward is the inverse rotation: it maps the output back to x */
	memcpy(back, y, sizeof back);
	rope_backward_cpu(back, cos_t, sin_t, NULL, B, S, NH, D);
	widen_f32(orig, x, N);
	check_close("rope_backward inverts rope_forward", back, orig, N, 1e-6, 1e-6);
}

/* --- attention ---------------------------------------------------------------------- */

/* out and lse in double from the inputs as given; bound (T,H*D) gets
 * sum_j P_ij |v_jd|, the scale of the rounding the bf16 contract adds. */
static void attention_reference(double *out, double *lse, double *bound, const float *q, const float *k,
				const float *v, int B, int S, int H, int G, int D)
{
	double scale = 1.0 / sqrt((double)D);
	double *s = NEW(double, S);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < S; i++) {
				int g = h / (H / G);
				double max = -INFINITY, sum = 0.0;
				for (int j = 0; j <= i; j++) {
					s[j] = 0.0;
					for (int d = 0; d < D; d++)
						s[j] += (double)q[(((size_t)b * S + i) * H + h) * D + d] *
							k[(((size_t)b * S + j) * G + g) * D + d];
					s[j] *= scale;
					max = fmax(max, s[j]);
				}
				for (int j = 0; j <= i; j++)
					sum += exp(s[j] - max);
				lse[((size_t)b * H + h) * S + i] = max + log(sum);
				for (int d = 0; d < D; d++) {
					double o = 0.0, o_abs = 0.0;
					for (int j = 0; j <= i; j++) {
						double vj = v[(((size_t)b * S + j) * G + g) * D + d];
						o += exp(s[j] - max) / sum * vj;
						o_abs += exp(s[j] - max) / sum * fabs(vj);
					}
					out[(((size_t)b * S + i) * H + h) * D + d] = o;
					bound[(((size_t)b * S + i) * H + h) * D + d] = o_abs;
				}
			}
	free(s);
}

/* Values drawn as float, then rounded to bf16, so that the op's own
 * rounding of its inputs changes nothing and the reference sees what the
 * products see. */
static void fill_bf16_values(float *x, long n, double lo, double hi)
{
	fill_f32(x, n, lo, hi);
	for (long i = 0; i < n; i++)
		x[i] = f32_from_bf16(bf16_from_f32(x[i]));
}

static void test_attention_values(void)
{
	enum { B = 2, S = 6, H = 4, G = 2, D = 16, T = B * S, NQ = T * H * D, NK = T * G * D };
	float q[NQ], k[NK], v[NK], lse[B * H * S], lse2[B * H * S], outf[NQ];
	bf16 out[NQ], out2[NQ];
	double want[NQ], want_lse[B * H * S], bound[NQ];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	fill_bf16_values(q, NQ, -2.0, 2.0);
	fill_bf16_values(k, NK, -2.0, 2.0);
	fill_bf16_values(v, NK, -1.0, 1.0);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, B, S, H, G, D);
	attention_reference(want, want_lse, bound, q, k, v, B, S, H, G, D);
	for (int i = 0; i < NQ; i++)
		outf[i] = f32_from_bf16(out[i]);
	/* bf16 inputs make the products exact, so the scores and the softmax
	 * are fp32-accurate (~1e-6).  Rounding P to bf16 moves out by at most
	 * 2^-8 sum_j P_j |v_j|, and rounding out to bf16 by 2^-8 |out|, which
	 * is at most as much again: 2^-7 of the sum, 1% for the fp32 steps. */
	check_bounded("attention_forward out (causal GQA)", outf, want, bound, NQ, 1.01 / 128, 1e-6, 0.0);
	check_close("attention_forward lse", lse, want_lse, B * H * S, 1e-6, 1e-6);

	/* the products read q, k, v rounded to bf16 and nothing finer: moving
	 * every input by 2^-10 of itself (under half a bf16 ulp) changes no
	 * bit, moving it by 2^-6 (over one ulp) changes out */
	float q2[NQ], k2[NK], v2[NK];
	for (int pass = 0; pass < 2; pass++) {
		float nudge = pass == 0 ? 1.0f + 1.0f / 1024 : 1.0f + 1.0f / 64;
		for (int i = 0; i < NQ; i++)
			q2[i] = q[i] * nudge;
		for (int i = 0; i < NK; i++) {
			k2[i] = k[i] * nudge;
			v2[i] = v[i] * nudge;
		}
		attention_forward_cpu(out2, H * D, lse2, scratch, q2, k2, v2, NULL, B, S, H, G, D);
		int same = memcmp(out, out2, sizeof out) == 0 && memcmp(lse, lse2, sizeof lse) == 0;
		int ok = pass == 0 ? same : !same;
		printf("%s attention_forward with inputs moved by %s bf16 ulp: %s bits\n", ok ? "ok  " : "FAIL",
		       pass == 0 ? "under half a" : "over one", same ? "same" : "different");
		failures += !ok;
	}

	/* causal: changing the last token's q, k, v leaves every earlier row alone */
	for (int b = 0; b < B; b++) {
		size_t last = (size_t)b * S + S - 1;
		for (int i = 0; i < H * D; i++)
			q[last * H * D + i] += 0.75f;
		for (int i = 0; i < G * D; i++) {
			k[last * G * D + i] -= 1.5f;
			v[last * G * D + i] *= -3.0f;
		}
	}
	attention_forward_cpu(out2, H * D, lse2, scratch, q, k, v, NULL, B, S, H, G, D);
	int same = 1, last_changed = 0;
	for (int b = 0; b < B; b++) {
		size_t first = (size_t)b * S * H * D, rows = (size_t)(S - 1) * H * D;
		same &= memcmp(out + first, out2 + first, rows * sizeof(bf16)) == 0;
		last_changed |= memcmp(out + first + rows, out2 + first + rows, (size_t)H * D * sizeof(bf16)) != 0;
		for (int h = 0; h < H; h++)
			same &= memcmp(lse + ((size_t)b * H + h) * S, lse2 + ((size_t)b * H + h) * S,
				       (S - 1) * sizeof(float)) == 0;
	}
	printf("%s attention_forward causal mask: earlier rows bit-identical after changing the last token\n",
	       same && last_changed ? "ok  " : "FAIL");
	failures += !(same && last_changed);
	free(scratch);
}

static void test_attention_single_token(void)
{
	/* S = 1: the only key gets probability exactly 1, so out = bf16(v) of
	 * the query head's kv head, h / (H/G) = 0, 0, 1, 1 */
	enum { B = 2, S = 1, H = 4, G = 2, D = 8 };
	float q[B * H * D], k[B * G * D], v[B * G * D], lse[B * H];
	bf16 out[B * H * D];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));
	int bad = 0;

	fill_f32(q, B * H * D, -3.0, 3.0);
	fill_f32(k, B * G * D, -3.0, 3.0);
	fill_f32(v, B * G * D, -1.0, 1.0);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, B, S, H, G, D);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int d = 0; d < D; d++)
				bad += out[(b * H + h) * D + d] != bf16_from_f32(v[(b * G + h / 2) * D + d]);
	printf("%s attention_forward with S=1 returns v of the head's kv group (%d mismatches)\n",
	       bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;
	free(scratch);
}

/* The scratch: O(B*S*H*D), no score square (ops.h's attention_parts):
 * two bf16 copies per query head and per key/value head at the padded head
 * dim, delta (B,H,S), the first-key table, and with G < H two (T,H,D) fp32
 * buffers for the per-head dk, dv; each part rounded up to 16 bytes.  It
 * holds the CPU's layout (the copies at D, then delta) by construction. */
static void test_attention_scratch(void)
{
	static const int heads[][2] = { { 32, 32 }, { 32, 8 }, { 40, 8 }, { 64, 8 }, { 28, 4 }, { 6, 3 }, { 2, 1 } };
	static const int lengths[] = { 1, 5, 7, 33, 128, 300, 512, 1000, 8192 };
	static const int dims[] = { 5, 8, 64, 128, 160 };
	int bad = 0;
	for (int b = 1; b <= 3; b += 2)
		for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
			for (size_t si = 0; si < sizeof lengths / sizeof lengths[0]; si++)
				for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
					int H = heads[hi][0], G = heads[hi][1], S = lengths[si], D = dims[di];
					size_t dp = (size_t)attention_dpad(D), t = (size_t)b * S;
					size_t got = attention_scratch_floats(b, S, H, G, D);
					/* what the CPU reads and writes: 4 copies at D, delta */
					size_t cpu = t * H * D + t * G * D + t * H;
					/* linear in S: copies, delta, table, heads, and the rounding */
					size_t most = t * H * dp + t * G * dp + t * H + (t + 31) / 32 + 1 +
						      (G == H ? 0 : 2 * t * H * D) + 7 * 4;
					struct attention_parts parts = attention_parts_of(b, S, H, G, D);
					int ok = got >= cpu && got <= most && got == attention_cuda_floats(b, S, H, G, D) &&
						 parts.q16 % 4 == 0 && parts.kv16 % 4 == 0 && parts.delta % 4 == 0 &&
						 parts.lo % 4 == 0 && parts.heads % 4 == 0 && dp >= (size_t)D && dp % 16 == 0;
					if (!ok && bad++ < 5)
						printf("  B=%d S=%d H=%d G=%d D=%d: %zu floats (CPU needs %zu, at most %zu)\n", b,
						       S, H, G, D, got, cpu, most);
				}
	printf("%s attention scratch holds the CPU layout and is linear in S (%d bad)\n", bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;
	/* Qwen2.5-7B at S=8192 (H=28, G=4, D=128): 2 * 28*8192*128/2 + 2 *
	 * 4*8192*128/2 + 28*8192 + 256 + 2 * 8192*28*128 = 92504320 floats (353
	 * MiB), where the two fp32 score squares alone took 2*28*8192^2 */
	CHECK(attention_scratch_floats(1, 8192, 28, 4, 128) == 92504320);
	/* MHA needs no per-head buffers: 4 copies of 512*32*128/2, delta, table */
	CHECK(attention_scratch_floats(1, 512, 32, 32, 128) == 4 * 1048576 + 16384 + 16);
	/* odd shapes round each part up to 4 floats: 3*6*5*64/2 = 2880, 3*3*5*64/2
	 * = 1440, delta 90 -> 92, table 3 -> 4, heads 720 */
	CHECK(attention_scratch_floats(3, 5, 6, 3, 8) == 2 * 2880 + 2 * 1440 + 92 + 4 + 2 * 720);
	CHECK(attention_dpad(8) == 64 && attention_dpad(64) == 64 && attention_dpad(65) == 128 &&
	      attention_dpad(128) == 128 && attention_dpad(130) == 144);
}

/* More rows than one key tile (S = 150: tiles of 64, 64, 22): the online
 * softmax's rescaling across tiles against the double reference, with
 * scores large enough (q, k in [-3, 3]) that the running max moves. */
static void test_attention_tiles(void)
{
	enum { B = 1, S = 150, H = 2, G = 1, D = 16, T = B * S, NQ = T * H * D, NK = T * G * D };
	float *q = NEW(float, NQ), *k = NEW(float, NK), *v = NEW(float, NK), *lse = NEW(float, B * H * S);
	float *outf = NEW(float, NQ);
	bf16 *out = NEW(bf16, NQ);
	double *want = NEW(double, NQ), *want_lse = NEW(double, B * H * S), *bound = NEW(double, NQ);
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	fill_bf16_values(q, NQ, -3.0, 3.0);
	fill_bf16_values(k, NK, -3.0, 3.0);
	fill_bf16_values(v, NK, -1.0, 1.0);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, B, S, H, G, D);
	attention_reference(want, want_lse, bound, q, k, v, B, S, H, G, D);
	for (int i = 0; i < NQ; i++)
		outf[i] = f32_from_bf16(out[i]);
	/* each p is rounded once, relative to the running max: still 2^-8 of
	 * its term, and out's own rounding 2^-8 of |out| (as above); the
	 * rescaling adds fp32 steps, ~1e-6 */
	check_bounded("attention_forward out over 3 key tiles", outf, want, bound, NQ, 1.01 / 128, 1e-6, 0.0);
	check_close("attention_forward lse over 3 key tiles", lse, want_lse, B * H * S, 2e-6, 1e-6);
	free(q), free(k), free(v), free(lse), free(outf), free(out), free(want), free(want_lse), free(bound);
	free(scratch);
}

/* pos (T) for rows packed with documents of the given lengths, the same
 * lengths in every row */
static void doc_positions(int32_t *pos, int B, int S, const int *len, int ndocs)
{
	for (int b = 0; b < B; b++) {
		int t = 0;
		for (int d = 0; d < ndocs; d++)
			for (int i = 0; i < len[d]; i++, t++)
				pos[b * S + t] = i;
	}
}

/* Document masks: a row packed with documents gives each document what it
 * gets alone.  The backward sums over the same keys and rows in the same
 * order, so with the same lse it is bit-identical; the forward too when the
 * documents start on key tiles (multiples of 64), and otherwise the
 * online softmax's steps fall elsewhere: within the rounding bound of the
 * double reference (each p rounded once; twice the bound for two sides). */
static void test_attention_documents(void)
{
	enum { B = 2, S = 150, H = 4, G = 2, D = 16, T = B * S, NQ = T * H * D, NK = T * G * D };
	static const int split[2][3] = { { 64, 86, 0 }, { 70, 5, 75 } };
	float *q = NEW(float, NQ), *k = NEW(float, NK), *v = NEW(float, NK), *dout = NEW(float, NQ);
	float *lse = NEW(float, B * H * S), *dq = NEW(float, NQ), *dk = NEW(float, NK), *dv = NEW(float, NK);
	float *lse1 = NEW(float, H * S), *dq1 = NEW(float, NQ), *dk1 = NEW(float, NK), *dv1 = NEW(float, NK);
	bf16 *out = NEW(bf16, NQ), *out1 = NEW(bf16, NQ);
	double *want = NEW(double, NQ), *want_lse = NEW(double, H * S), *bound = NEW(double, NQ);
	int32_t pos[T];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	fill_bf16_values(q, NQ, -3.0, 3.0);
	fill_bf16_values(k, NK, -3.0, 3.0);
	fill_bf16_values(v, NK, -1.0, 1.0);
	fill_bf16_values(dout, NQ, -1.0, 1.0);
	for (int c = 0; c < 2; c++) {
		int ndocs = split[c][2] ? 3 : 2;
		doc_positions(pos, B, S, split[c], ndocs);
		attention_forward_cpu(out, H * D, lse, scratch, q, k, v, pos, B, S, H, G, D);
		attention_backward_cpu(dq, dk, dv, scratch, dout, q, k, v, lse, pos, B, S, H, G, D);
		int exact_fwd = 1, exact_bwd = 1, t0 = 0;
		long bad_fwd = 0;
		for (int d = 0; d < ndocs; d++) {
			int n = split[c][d];
			for (int b = 0; b < B; b++) {
				size_t row = (size_t)b * S + t0; /* the document's first token */
				/* the document alone: a batch of one sequence of n tokens */
				attention_forward_cpu(out1, H * D, lse1, scratch, q + row * H * D, k + row * G * D,
						      v + row * G * D, NULL, 1, n, H, G, D);
				attention_reference(want, want_lse, bound, q + row * H * D, k + row * G * D,
						    v + row * G * D, 1, n, H, G, D);
				for (int i = 0; i < n * H * D; i++) {
					double a = f32_from_bf16(out[row * H * D + i]), e = f32_from_bf16(out1[i]);
					bad_fwd += !(fabs(a - e) <= 2 * 1.01 / 128 * bound[i] + 1e-6);
				}
				exact_fwd &= memcmp(out + row * H * D, out1, (size_t)n * H * D * sizeof(bf16)) == 0;
				/* the backward alone, fed the packed row's lse for the document */
				for (int h = 0; h < H; h++)
					memcpy(lse1 + (size_t)h * n, lse + ((size_t)b * H + h) * S + t0, n * sizeof(float));
				attention_backward_cpu(dq1, dk1, dv1, scratch, dout + row * H * D, q + row * H * D,
						       k + row * G * D, v + row * G * D, lse1, NULL, 1, n, H, G, D);
				exact_bwd &= memcmp(dq + row * H * D, dq1, (size_t)n * H * D * 4) == 0 &&
					     memcmp(dk + row * G * D, dk1, (size_t)n * G * D * 4) == 0 &&
					     memcmp(dv + row * G * D, dv1, (size_t)n * G * D * 4) == 0;
			}
			t0 += n;
		}
		int ok_fwd = bad_fwd == 0 && (c != 0 || exact_fwd);
		printf("%s attention_forward packed %d documents (%d+%d%s): each as alone, %s (%ld out of bound)\n",
		       ok_fwd ? "ok  " : "FAIL", ndocs, split[c][0], split[c][1], c ? "+75" : "",
		       exact_fwd ? "bit for bit" : "within rounding", bad_fwd);
		failures += !ok_fwd;
		printf("%s attention_backward packed %d documents: dq, dk, dv bit-identical to each alone\n",
		       exact_bwd ? "ok  " : "FAIL", ndocs);
		failures += !exact_bwd;
	}
	/* pos[t] = t % S is the plain causal mask, bit for bit */
	for (int t = 0; t < T; t++)
		pos[t] = t % S;
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, B, S, H, G, D);
	attention_forward_cpu(out1, H * D, dq1, scratch, q, k, v, pos, B, S, H, G, D); /* dq1: room for lse */
	check_same_bits("attention_forward with pos = t % S against NULL", out1, out, NQ * sizeof(bf16));
	check_same_bits("attention_forward lse with pos = t % S against NULL", dq1, lse, B * H * S * sizeof(float));
	free(q), free(k), free(v), free(dout), free(lse), free(dq), free(dk), free(dv), free(lse1), free(dq1);
	free(dk1), free(dv1), free(out), free(out1), free(want), free(want_lse), free(bound), free(scratch);
}

/* RoPE with document positions: each document rotates as if alone, and
 * pos[t] = t % S is NULL's rotation, bit for bit. */
static void test_rope_documents(void)
{
	enum { B = 2, S = 12, NH = 3, D = 8, HALF = D / 2, N = B * S * NH * D };
	static const int len[3] = { 5, 3, 4 };
	float cos_t[S * HALF], sin_t[S * HALF], x[N], y[N], z[N];
	int32_t pos[B * S];
	int same_alone = 1;

	for (int s = 0; s < S; s++)
		for (int i = 0; i < HALF; i++) {
			float angle = (float)s * (float)(1.0 / pow(10000.0, 2.0 * i / D));
			cos_t[s * HALF + i] = cosf(angle);
			sin_t[s * HALF + i] = sinf(angle);
		}
	fill_f32(x, N, -1.0, 1.0);
	doc_positions(pos, B, S, len, 3);
	for (int back = 0; back < 2; back++) {
		memcpy(y, x, sizeof y);
		(back ? rope_backward_cpu : rope_forward_cpu)(y, cos_t, sin_t, pos, B, S, NH, D);
		for (int b = 0, t0 = 0; b < B; b++, t0 = 0)
			for (int d = 0; d < 3; t0 += len[d++]) {
				size_t off = ((size_t)b * S + t0) * NH * D, n = (size_t)len[d] * NH * D;
				memcpy(z, x + off, n * sizeof(float));
				(back ? rope_backward_cpu : rope_forward_cpu)(z, cos_t, sin_t, NULL, 1, len[d], NH, D);
				same_alone &= memcmp(z, y + off, n * sizeof(float)) == 0;
			}
	}
	printf("%s rope with document positions rotates each document as alone\n", same_alone ? "ok  " : "FAIL");
	failures += !same_alone;
	for (int t = 0; t < B * S; t++)
		pos[t] = t % S;
	memcpy(y, x, sizeof y);
	memcpy(z, x, sizeof z);
	rope_forward_cpu(y, cos_t, sin_t, pos, B, S, NH, D);
	rope_forward_cpu(z, cos_t, sin_t, NULL, B, S, NH, D);
	check_same_bits("rope_forward with pos = t % S against NULL", y, z, sizeof y);
}

/* --- SwiGLU ----------------------------------------------------------------------------- */

static void test_swiglu_values(void)
{
	enum { N = 40 };
	float gate[N], up[N], outf[N];
	bf16 out[N];
	double want[N];

	fill_f32(gate, N, -6.0, 6.0);
	fill_f32(up, N, -2.0, 2.0);
	gate[0] = -100.0f; /* e^100 overflows fp32: silu must be -0, not NaN */
	gate[1] = 100.0f;
	for (int i = 0; i < N; i++)
		want[i] = (double)gate[i] / (1.0 + exp(-(double)gate[i])) * up[i];
	swiglu_forward_cpu(out, N, gate, up, 1, N);
	for (int i = 0; i < N; i++)
		outf[i] = f32_from_bf16(out[i]);
	/* bf16 output: up to 2^-8 relative; the atol only admits the -0 that
	 * stands for silu(-100) * up ~ 1e-42 */
	check_close("swiglu_forward silu(gate) * up", outf, want, N, 1e-30, 4e-3);
	CHECK(outf[0] == 0.0f);
}

/* --- cross-entropy ---------------------------------------------------------------------- */

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
	for (int t = 0; t < T; t++) {
		double max = -INFINITY, sum = 0.0;
		for (int j = 0; j < V; j++)
			max = fmax(max, logits[t * V + j]);
		for (int j = 0; j < V; j++)
			sum += exp(logits[t * V + j] - max);
		want[t] = max + log(sum) - logits[t * V + targets2[t]];
	}
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

/* --- NF4 ------------------------------------------------------------------------------- */

static void test_nf4_values(void)
{
	enum { N = 128 };
	uint8_t packed[N / 2];
	const float absmax[N / POROS_NF4_BLOCK] = { 2.0f, 0.5f };
	bf16 out[N];
	int bad = 0;

	CHECK(poros_nf4_code[0] == -1.0f && poros_nf4_code[7] == 0.0f && poros_nf4_code[15] == 1.0f);
	for (int i = 1; i < 16; i++)
		CHECK(poros_nf4_code[i] > poros_nf4_code[i - 1]);

	/* every code in both nibble positions: byte b = (b & 15) << 4 | (15 - (b & 15)) */
	for (int b = 0; b < N / 2; b++)
		packed[b] = (uint8_t)(((b & 15) << 4) | (15 - (b & 15)));
	nf4_dequantize_cpu(out, N, packed, absmax, 1, N);
	for (int i = 0; i < N; i++) {
		int code = i % 2 == 0 ? (i / 2) & 15 : 15 - ((i / 2) & 15);
		bad += out[i] != bf16_from_f32(poros_nf4_code[code] * absmax[i / 64]);
	}
	/* bf16 bit patterns worked out by hand (sign, exponent, 7-bit mantissa) */
	CHECK(out[0] == 0xc000); /* byte 0x0f, high nibble: code 0 = -1 times 2 = -2 */
	CHECK(out[1] == 0x4000); /* low nibble: code 15 = 1 times 2 = 2 */
	CHECK(out[14] == 0x0000); /* byte 0x78, high: code 7 = +0 */
	CHECK(out[15] == 0x3e23); /* low: code 8, 0.0795803 * 2 = 0.1591606 -> 1.0100011b * 2^-3 */
	CHECK(out[66] == 0xbeb2); /* block 1 (absmax 0.5), byte 0x1e, high: code 1 * 0.5 = -0.3480964 */
	CHECK(out[90] == 0x3e90); /* byte 0xd2, high: code 13 * 0.5 = 0.2813085 -> 1.0010000b * 2^-2 */
	printf("%s nf4_dequantize: %d of %d elements wrong\n", bad ? "FAIL" : "ok  ", bad, N);
	failures += bad != 0;
}

/* --- row pitches ------------------------------------------------------------------------ */

/* Every op with an ld argument, at ld above the row length, gives exactly
 * the bits it gives unpitched, writes none of its output's pad columns
 * (another op owns them) and reads none of its inputs' (they hold NaN). */

static const bf16 pad_bf16 = PAD_BF16;

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

static void test_pitched_rmsnorm(void)
{
	enum { T = 4, C = 40, LD = C + 8 };
	float x[T * C], out[T * C], outp[T * LD], rstd[T], rstdp[T];
	bf16 w[C], outb[T * C], outbp[T * LD];
	const uint32_t pad_f32 = PAD_F32_BITS;

	fill_f32(x, T * C, -2.0, 2.0);
	fill_bf16(w, C, 0.5, 1.5);
	rmsnorm_forward_cpu(out, outb, C, rstd, x, w, 1e-6f, T, C);
	fill_f32_bits(outp, T * LD, PAD_F32_BITS);
	fill_bf16_bits(outbp, T * LD, PAD_BF16);
	rmsnorm_forward_cpu(outp, outbp, LD, rstdp, x, w, 1e-6f, T, C);
	check_pitched("rmsnorm_forward out_f32 at ld_out 48", outp, LD, out, T, C, sizeof(float), &pad_f32);
	check_pitched("rmsnorm_forward out_bf16 at ld_out 48", outbp, LD, outb, T, C, sizeof(bf16), &pad_bf16);
	check_same_bits("rmsnorm_forward rstd with ld_out 48", rstdp, rstd, sizeof rstd);
	/* the bf16 output alone, as the engine asks for it */
	fill_bf16_bits(outbp, T * LD, PAD_BF16);
	rmsnorm_forward_cpu(NULL, outbp, LD, rstdp, x, w, 1e-6f, T, C);
	check_pitched("rmsnorm_forward out_bf16 alone at ld_out 48", outbp, LD, outb, T, C, sizeof(bf16), &pad_bf16);
}

static void test_pitched_attention(void)
{
	enum { B = 2, S = 5, H = 4, G = 2, D = 16, T = B * S, HD = H * D, LD = HD + 32 };
	float q[T * HD], k[T * G * D], v[T * G * D], lse[B * H * S], lsep[B * H * S];
	bf16 out[T * HD], outp[T * LD];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	fill_f32(q, T * HD, -2.0, 2.0);
	fill_f32(k, T * G * D, -2.0, 2.0);
	fill_f32(v, T * G * D, -1.0, 1.0);
	attention_forward_cpu(out, HD, lse, scratch, q, k, v, NULL, B, S, H, G, D);
	fill_bf16_bits(outp, T * LD, PAD_BF16);
	attention_forward_cpu(outp, LD, lsep, scratch, q, k, v, NULL, B, S, H, G, D);
	check_pitched("attention_forward out at ld_out 96", outp, LD, out, T, HD, sizeof(bf16), &pad_bf16);
	check_same_bits("attention_forward lse with ld_out 96", lsep, lse, sizeof lse);
	free(scratch);
}

static void test_pitched_swiglu(void)
{
	enum { T = 6, F = 50, LD = F + 14, LD_D = F + 10 };
	float gate[T * F], up[T * F], dout[T * F];
	bf16 out[T * F], outp[T * LD], dgate[T * F], dup[T * F], dgatep[T * LD_D], dupp[T * LD_D];

	fill_f32(gate, T * F, -8.0, 8.0);
	fill_f32(up, T * F, -2.0, 2.0);
	fill_f32(dout, T * F, -1.0, 1.0);
	swiglu_forward_cpu(out, F, gate, up, T, F);
	fill_bf16_bits(outp, T * LD, PAD_BF16);
	swiglu_forward_cpu(outp, LD, gate, up, T, F);
	check_pitched("swiglu_forward out at ld_out 64", outp, LD, out, T, F, sizeof(bf16), &pad_bf16);

	swiglu_backward_cpu(dgate, dup, F, dout, gate, up, T, F);
	fill_bf16_bits(dgatep, T * LD_D, PAD_BF16);
	fill_bf16_bits(dupp, T * LD_D, PAD_BF16);
	swiglu_backward_cpu(dgatep, dupp, LD_D, dout, gate, up, T, F);
	check_pitched("swiglu_backward dgate at ld_d 60", dgatep, LD_D, dgate, T, F, sizeof(bf16), &pad_bf16);
	check_pitched("swiglu_backward dup at ld_d 60", dupp, LD_D, dup, T, F, sizeof(bf16), &pad_bf16);
}

static void test_pitched_cast(void)
{
	enum { ROWS = 7, COLS = 33, LD = COLS + 31 };
	float in[ROWS * COLS];
	bf16 out[ROWS * COLS], outp[ROWS * LD];

	fill_f32(in, ROWS * COLS, -5.0, 5.0);
	cast_f32_to_bf16_cpu(out, COLS, in, ROWS, COLS);
	fill_bf16_bits(outp, ROWS * LD, PAD_BF16);
	cast_f32_to_bf16_cpu(outp, LD, in, ROWS, COLS);
	check_pitched("cast_f32_to_bf16 at ld_out 64", outp, LD, out, ROWS, COLS, sizeof(bf16), &pad_bf16);
}

static void test_pitched_nf4(void)
{
	/* the packed stream and absmax are the unpitched row-major order:
	 * element (row, col) of the pitched output is element row*COLS + col
	 * of a flat dequantization of the same bytes */
	enum { ROWS = 5, COLS = 128, LD = COLS + 32, N = ROWS * COLS };
	uint8_t packed[N / 2];
	float absmax[N / POROS_NF4_BLOCK];
	bf16 flat[N], out[N], outp[ROWS * LD];

	for (int i = 0; i < N / 2; i++)
		packed[i] = (uint8_t)rng_uniform(0, 256 - 1e-9);
	fill_f32(absmax, N / POROS_NF4_BLOCK, 0.01, 2.0);
	nf4_dequantize_cpu(flat, N, packed, absmax, 1, N);
	nf4_dequantize_cpu(out, COLS, packed, absmax, ROWS, COLS);
	check_same_bits("nf4_dequantize (5,128) = one flat row of 640", out, flat, sizeof flat);
	fill_bf16_bits(outp, ROWS * LD, PAD_BF16);
	nf4_dequantize_cpu(outp, LD, packed, absmax, ROWS, COLS);
	check_pitched("nf4_dequantize at ld_out 160", outp, LD, flat, ROWS, COLS, sizeof(bf16), &pad_bf16);
}

/* --- AdamW ------------------------------------------------------------------------------- */

static void test_adamw_values(void)
{
	/* step 1 by hand: with m = v = 0, mhat = g and vhat = g^2, so the step
	 * is lr * g / (|g| + eps) after decaying p by (1 - lr*wd) */
	float p[2] = { 1.0f, -2.0f }, g[2] = { 0.5f, -4.0f }, m[2] = { 0 }, v[2] = { 0 };
	const float lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, clip = 0.5f;
	adamw_update_cpu(p, g, m, v, 2, lr, b1, b2, eps, wd, clip, 1);
	/* g = 0.25: p = 1 * 0.999 - 0.1 * 0.25 / (0.25 + 1e-8) = 0.899000004
	 * g = -2:   p = -2 * 0.999 + 0.1 * 2 / (2 + 1e-8)     = -1.8979999995 */
	const double want_p[2] = { 0.899000004, -1.8979999995 };
	/* (1 - b1) g and (1 - b2) g^2, with the betas as the fp32 values they
	 * are: 1 - 0.999f = 9.9998713e-4, not 1e-3 */
	const double want_m[2] = { (1.0 - (double)b1) * 0.25, (1.0 - (double)b1) * -2.0 };
	const double want_v[2] = { (1.0 - (double)b2) * 0.0625, (1.0 - (double)b2) * 4.0 };
	check_close("adamw step 1 param (hand computed)", p, want_p, 2, 1e-7, 1e-6);
	check_close("adamw step 1 m (hand computed)", m, want_m, 2, 0.0, 1e-6);
	check_close("adamw step 1 v (hand computed)", v, want_v, 2, 0.0, 1e-6);

	/* step 2 against the textbook form in double */
	const float g2[2] = { 1.0f, 3.0f };
	double pd[2], md[2], vd[2], want2[2];
	for (int i = 0; i < 2; i++) {
		double gi = (double)g2[i] * clip;
		md[i] = b1 * (double)m[i] + (1.0 - b1) * gi;
		vd[i] = b2 * (double)v[i] + (1.0 - b2) * gi * gi;
		double mhat = md[i] / (1.0 - (double)b1 * b1), vhat = vd[i] / (1.0 - (double)b2 * b2);
		pd[i] = (double)p[i] * (1.0 - (double)lr * wd) - lr * mhat / (sqrt(vhat) + eps);
		want2[i] = pd[i];
	}
	adamw_update_cpu(p, g2, m, v, 2, lr, b1, b2, eps, wd, clip, 2);
	check_close("adamw step 2 param (double reference)", p, want2, 2, 1e-7, 1e-6);
	check_close("adamw step 2 m", m, md, 2, 0.0, 1e-6);
	check_close("adamw step 2 v", v, vd, 2, 0.0, 1e-6);
}

/* --- sumsq -------------------------------------------------------------------------------- */

static void test_sumsq_values(void)
{
	enum { N = 100000 };
	float *x = NEW(float, N), out = -1.0f;
	float scratch[4096];

	CHECK(sumsq_scratch_floats(N) == 4096);
	for (int i = 0; i < N; i++)
		x[i] = (float)(i + 1);
	/* 1^2 + ... + N^2 = N (N+1) (2N+1) / 6 = 333338333350000, exact in double
	 * (< 2^53), then rounded once to fp32: 333338317422592.  Summing in
	 * fp32 instead would be off by far more than that one rounding. */
	sumsq_cpu(&out, scratch, x, N);
	double want = 333338317422592.0;
	check_close("sumsq of 1..100000 = fp32(333338333350000)", &out, &want, 1, 0.0, 0.0);
	sumsq_cpu(&out, scratch, x, 0);
	want = 0.0;
	check_close("sumsq of nothing", &out, &want, 1, 0.0, 0.0);
	sumsq_cpu(&out, scratch, x + 2, 1);
	want = 9.0;
	check_close("sumsq of one element", &out, &want, 1, 0.0, 0.0);
	free(x);
}

static void test_ops_table(void)
{
	int bad = 0;
#define CHECK_ENTRY(ret, name, args) bad += poros_cpu_ops.name != name##_cpu;
	POROS_OPS_LIST(CHECK_ENTRY)
#undef CHECK_ENTRY
	printf("%s poros_cpu_ops binds every op to its _cpu function (%d wrong)\n", bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;
}

/* --- thread-count determinism ------------------------------------------------------------ */

/* Output buffers of one run over every op, taken in the same order each run
 * so two runs can be compared op by op. */
struct arena {
	unsigned char *base;
	size_t used, cap;
	int count;
	const char *names[64];
	size_t offsets[64], sizes[64];
};

static void *take(struct arena *a, const char *name, size_t bytes)
{
	bytes = (bytes + 15) & ~(size_t)15;
	if (a->used + bytes > a->cap || a->count == 64) {
		fprintf(stderr, "test arena too small\n");
		exit(1);
	}
	void *p = a->base + a->used;
	a->names[a->count] = name;
	a->offsets[a->count] = a->used;
	a->sizes[a->count++] = bytes;
	a->used += bytes;
	return p;
}

enum {
	DB = 2, DS = 24, DT = DB * DS, DC = 80, DH = 4, DG = 2, DD = 16, DN = 96, DR = 8, DV = 300,
	DSQ = 100003, DNF4 = 64 * 40
};

struct det_inputs {
	float x[DT * DC], q[DT * DH * DD], k[DT * DG * DD], v[DT * DG * DD], A[DR * DC], B[DN * DR];
	float dy[DT * DN], gate[DT * DN], up[DT * DN], logits[DT * DV], cos_t[DS * DD / 2], sin_t[DS * DD / 2];
	float big[DSQ], absmax[DNF4 / 64], dout_attn[DT * DH * DD];
	bf16 xb[DT * DC], W[DN * DC], bias[DN], wnorm[DC], wte[DV * DC], dyb[DT * DN];
	int32_t tokens[DT], targets[DT], pos[DT];
	uint8_t packed[DNF4 / 2];
};

static void run_every_op(struct arena *a, const struct det_inputs *in, float *scratch)
{
	float *f;
	bf16 *h;

	embedding_forward_cpu(take(a, "embedding_forward", sizeof(float) * DT * DC), in->tokens, in->wte, DT, DC);
	f = take(a, "rmsnorm_forward out", sizeof(float) * DT * DC);
	h = take(a, "rmsnorm_forward out_bf16", sizeof(bf16) * DT * DC);
	float *rstd = take(a, "rmsnorm_forward rstd", sizeof(float) * DT);
	rmsnorm_forward_cpu(f, h, DC, rstd, in->x, in->wnorm, 1e-6f, DT, DC);
	rmsnorm_backward_cpu(take(a, "rmsnorm_backward", sizeof(float) * DT * DC), in->x, in->x, in->wnorm, rstd,
			     DT, DC);
	matmul_forward_cpu(take(a, "matmul_forward", sizeof(float) * DT * DN), in->xb, DC, in->W, DC, in->bias, DT, DC,
			   DN, 0);
	matmul_backward_input_cpu(take(a, "matmul_backward_input", sizeof(float) * DT * DC), in->dyb, DN, in->W, DC, DT,
				  DC, DN, 0);
	float *lora_out = take(a, "lora_forward out", sizeof(float) * DT * DN);
	float *u = take(a, "lora_forward u", sizeof(float) * DT * DR);
	lora_forward_cpu(&(struct lora_fwd_args){ .out = lora_out, .u = u, .in = in->xb, .ld_in = DC, .A = in->A,
		.B = in->B, .scale = 2.0f, .dropout_p = 0.1f, .dropout_seed = 7, .T = DT, .K = DC, .N = DN, .R = DR });
	/* taken one by one: the order of a call's arguments is unspecified */
	float *din = take(a, "lora_backward din", sizeof(float) * DT * DC);
	float *dA = take(a, "lora_backward dA", sizeof(float) * DR * DC);
	float *dB = take(a, "lora_backward dB", sizeof(float) * DN * DR);
	float *du = take(a, "lora_backward du", sizeof(float) * DT * DR);
	lora_backward_cpu(&(struct lora_bwd_args){ .din = din, .dA = dA, .dB = dB, .du = du, .dout = in->dyb,
		.ld_dout = DN, .in = in->xb, .ld_in = DC, .u = u, .A = in->A, .B = in->B, .scale = 2.0f,
		.dropout_p = 0.1f, .dropout_seed = 7, .T = DT, .K = DC, .N = DN, .R = DR });
	f = take(a, "rope_forward", sizeof in->q);
	memcpy(f, in->q, sizeof in->q);
	rope_forward_cpu(f, in->cos_t, in->sin_t, in->pos, DB, DS, DH, DD);
	f = take(a, "rope_backward", sizeof in->q);
	memcpy(f, in->q, sizeof in->q);
	rope_backward_cpu(f, in->cos_t, in->sin_t, in->pos, DB, DS, DH, DD);
	float *lse = take(a, "attention_forward lse", sizeof(float) * DB * DH * DS);
	attention_forward_cpu(take(a, "attention_forward out", sizeof(bf16) * DT * DH * DD), DH * DD, lse, scratch, in->q,
			      in->k, in->v, in->pos, DB, DS, DH, DG, DD);
	attention_backward_cpu(take(a, "attention_backward dq", sizeof in->q), take(a, "attention_backward dk", sizeof in->k),
			       take(a, "attention_backward dv", sizeof in->v), scratch, in->dout_attn, in->q, in->k,
			       in->v, lse, in->pos, DB, DS, DH, DG, DD);
	swiglu_forward_cpu(take(a, "swiglu_forward", sizeof(bf16) * DT * DN), DN, in->gate, in->up, DT, DN);
	swiglu_backward_cpu(take(a, "swiglu_backward dgate", sizeof(bf16) * DT * DN),
			    take(a, "swiglu_backward dup", sizeof(bf16) * DT * DN), DN, in->dy, in->gate, in->up, DT, DN);
	crossentropy_forward_backward_cpu(take(a, "crossentropy dlogits", sizeof(bf16) * DT * DV),
					  take(a, "crossentropy losses", sizeof(float) * DT), in->logits, in->targets,
					  1.0f / DT, DT, DV);
	f = take(a, "add_inplace", sizeof in->big);
	memcpy(f, in->big, sizeof in->big);
	add_inplace_cpu(f, in->big, DSQ);
	cast_f32_to_bf16_cpu(take(a, "cast_f32_to_bf16", sizeof(bf16) * DSQ), DSQ, in->big, 1, DSQ);
	nf4_dequantize_cpu(take(a, "nf4_dequantize", sizeof(bf16) * DNF4), 64 * 8, in->packed, in->absmax, DNF4 / (64 * 8),
			   64 * 8);
	sumsq_cpu(take(a, "sumsq", sizeof(float)), scratch, in->big, DSQ);
	float *param = take(a, "adamw param", sizeof in->big), *m = take(a, "adamw m", sizeof in->big),
	      *v = take(a, "adamw v", sizeof in->big);
	memcpy(param, in->big, sizeof in->big);
	for (int step = 1; step <= 2; step++)
		adamw_update_cpu(param, in->big, m, v, DSQ, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.7f, step);
}

static void test_thread_determinism(void)
{
	struct det_inputs *in = NEW(struct det_inputs, 1);
	size_t cap = 16u << 20;
	struct arena one = { NEW(unsigned char, cap), 0, cap, 0, { 0 }, { 0 }, { 0 } };
	struct arena four = { NEW(unsigned char, cap), 0, cap, 0, { 0 }, { 0 }, { 0 } };
	size_t scratch_n = attention_scratch_floats(DB, DS, DH, DG, DD);
	float *scratch = NEW(float, scratch_n > 4096 ? scratch_n : 4096);

	fill_f32(in->x, DT * DC, -2, 2);
	fill_f32(in->q, DT * DH * DD, -2, 2);
	fill_f32(in->k, DT * DG * DD, -2, 2);
	fill_f32(in->v, DT * DG * DD, -1, 1);
	fill_f32(in->A, DR * DC, -0.5, 0.5);
	fill_f32(in->B, DN * DR, -0.5, 0.5);
	fill_f32(in->dy, DT * DN, -1, 1);
	fill_f32(in->gate, DT * DN, -6, 6);
	fill_f32(in->up, DT * DN, -2, 2);
	fill_f32(in->logits, DT * DV, -8, 8);
	fill_f32(in->cos_t, DS * DD / 2, -1, 1);
	fill_f32(in->sin_t, DS * DD / 2, -1, 1);
	fill_f32(in->big, DSQ, -3, 3);
	fill_f32(in->absmax, DNF4 / 64, 0.01, 2);
	fill_f32(in->dout_attn, DT * DH * DD, -1, 1);
	fill_bf16(in->xb, DT * DC, -2, 2);
	fill_bf16(in->W, DN * DC, -0.2, 0.2);
	fill_bf16(in->bias, DN, -1, 1);
	fill_bf16(in->wnorm, DC, 0.5, 1.5);
	fill_bf16(in->wte, DV * DC, -1, 1);
	fill_bf16(in->dyb, DT * DN, -1, 1);
	for (int t = 0; t < DT; t++) {
		in->tokens[t] = (int32_t)(rng_uniform(0, DV - 1e-9));
		in->targets[t] = t % 7 == 3 ? -1 : (int32_t)(rng_uniform(0, DV - 1e-9));
		in->pos[t] = t % DS < 10 ? t % DS : t % DS - 10; /* two documents a row */
	}
	for (int i = 0; i < DNF4 / 2; i++)
		in->packed[i] = (uint8_t)rng_uniform(0, 256 - 1e-9);

	int saved = omp_get_max_threads();
	omp_set_num_threads(1);
	run_every_op(&one, in, scratch);
	omp_set_num_threads(4);
	CHECK(omp_get_max_threads() == 4);
	run_every_op(&four, in, scratch);
	omp_set_num_threads(saved);

	int differ = 0;
	for (int i = 0; i < one.count; i++) {
		if (memcmp(one.base + one.offsets[i], four.base + four.offsets[i], one.sizes[i]) != 0) {
			printf("  %s: 1 and 4 threads give different bits\n", one.names[i]);
			differ++;
		}
	}
	printf("%s %d op outputs bit-identical with 1 and 4 OpenMP threads (%d differ)\n", differ ? "FAIL" : "ok  ",
	       one.count, differ);
	failures += differ != 0;
	free(in);
	free(one.base);
	free(four.base);
	free(scratch);
}

int main(void)
{
	test_bf16_rounding();
	test_embedding_and_add();
	test_rmsnorm_values();
	test_matmul_forward();
	test_lora_forward(0.0f);
	test_lora_forward(0.5f);
	test_rope_values();
	test_attention_values();
	test_attention_single_token();
	test_attention_scratch();
	test_attention_tiles();
	test_attention_documents();
	test_rope_documents();
	test_swiglu_values();
	test_crossentropy_values();
	test_nf4_values();
	test_adamw_values();
	test_sumsq_values();
	test_pitched_matmul_forward();
	test_pitched_matmul_backward();
	test_pitched_rmsnorm();
	test_pitched_attention();
	test_pitched_swiglu();
	test_pitched_cast();
	test_pitched_nf4();
	test_ops_table();
	test_thread_determinism();
	if (failures) {
		printf("test_ops_values: %d checks failed\n", failures);
		return 1;
	}
	printf("test_ops_values: all checks passed\n");
	return 0;
}
