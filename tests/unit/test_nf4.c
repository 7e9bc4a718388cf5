/* tests/unit/test_nf4.c: host NF4 quantization against hand-computed codes,
 * ties, packing order, zero blocks, and the quantize -> dequantize error
 * bound through the CPU dequantize op. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "ops.h"
#include "test_common.h"

#define B POROS_NF4_BLOCK

static int code_at(const uint8_t *packed, long i)
{
	return i % 2 == 0 ? packed[i / 2] >> 4 : packed[i / 2] & 0xf;
}

/* A block whose values are exactly code * absmax comes back as those codes
 * and dequantizes to bf16(value) bit for bit. */
static void test_exact_block(void)
{
	float in[B], absmax = -1;
	uint8_t packed[B / 2];
	bf16 out[B];
	int bad = 0;

	for (int i = 0; i < B; i++)
		in[i] = poros_nf4_code[(i * 7) % 16] * 2.0f; /* 7 is coprime to 16: every code appears */
	nf4_quantize(packed, &absmax, in, B);
	CHECKF(absmax == 2.0f, "absmax %g, want 2", absmax);
	for (int i = 0; i < B; i++)
		if (code_at(packed, i) != (i * 7) % 16 && bad++ < 3)
			fprintf(stderr, "  element %d: code %d, want %d\n", i, code_at(packed, i), (i * 7) % 16);
	CHECKF(bad == 0, "%d codes differ", bad);
	/* element 0 -> code 0 (high nibble), element 1 -> code 7 (low nibble) */
	CHECKF(packed[0] == 0x07, "first byte 0x%02x, want 0x07 (element 0 in the high nibble)", packed[0]);
	CHECKF(packed[1] == 0xe5, "second byte 0x%02x, want 0xe5 (codes 14, 5)", packed[1]);
	nf4_dequantize_cpu(out, B, packed, &absmax, 1, B);
	bad = 0;
	for (int i = 0; i < B; i++)
		bad += out[i] != bf16_from_f32(in[i]);
	CHECKF(bad == 0, "%d dequantized values differ from bf16(code * absmax)", bad);
}

/* Hand-computed nearest codes (absmax 1, the block holds a 1.0). */
static void test_nearest(void)
{
	const struct {
		float x;
		int code;
	} cases[] = {
		{ 0.30f, 11 },   /* 0.3379 is 0.038 away, 0.2461 is 0.054 */
		{ 0.29f, 10 },   /* 0.2461 is 0.044 away, 0.3379 is 0.048 */
		{ -0.90f, 0 },   /* -1 is 0.10 away, -0.6962 is 0.20 */
		{ -0.80f, 1 },   /* -0.6962 is 0.104 away, -1 is 0.20 */
		{ 0.01f, 7 },
		{ 0.05f, 8 },    /* 0.0796 is 0.0296 away, 0 is 0.05 */
		{ 0.95f, 15 },
		{ 0.86f, 14 },   /* 0.7230 is 0.137 away, 1 is 0.14 */
		{ 0.87f, 15 },   /* 1 is 0.13 away, 0.7230 is 0.147 */
		/* exact midpoints (halving a code is exact) tie to the lower index */
		{ 0.03979014977812767f, 7 },
		{ -0.045525018125772476f, 6 },
	};
	float in[B];
	uint8_t packed[B / 2];
	float absmax;
	const int n = (int)(sizeof cases / sizeof *cases);

	CHECKF(cases[9].x == poros_nf4_code[8] / 2 && cases[10].x == poros_nf4_code[6] / 2, "midpoints are exact");
	for (int i = 0; i < B; i++)
		in[i] = i < n ? cases[i].x : 1.0f;
	nf4_quantize(packed, &absmax, in, B);
	CHECKF(absmax == 1.0f, "absmax %g", absmax);
	for (int i = 0; i < n; i++)
		CHECKF(code_at(packed, i) == cases[i].code, "x = %.9g -> code %d, want %d", cases[i].x, code_at(packed, i),
		       cases[i].code);
	/* just past a midpoint goes up */
	CHECKF(nf4_nearest_code(nextafterf(poros_nf4_code[8] / 2, 1)) == 8, "above midpoint 7|8");
	CHECKF(nf4_nearest_code(nextafterf(poros_nf4_code[8] / 2, 0)) == 7, "below midpoint 7|8");
	CHECKF(nf4_nearest_code(nextafterf(poros_nf4_code[6] / 2, -1)) == 6, "below midpoint 6|7");
	CHECKF(nf4_nearest_code(nextafterf(poros_nf4_code[6] / 2, 0)) == 7, "above midpoint 6|7");
	CHECKF(nf4_nearest_code(NAN) == 7, "NaN takes the zero code");
	/* the code index never decreases as x grows */
	{
		int prev = 0, monotone = 1;

		for (int i = -100000; i <= 100000; i++) {
			int c = nf4_nearest_code((float)i / 100000.0f);

			monotone &= c >= prev;
			prev = c;
		}
		CHECKF(monotone && prev == 15, "nearest code is monotone over [-1, 1]");
	}
}

static void test_scales_and_zero(void)
{
	float in[3 * B], absmax[3];
	uint16_t in_bf16[3 * B];
	uint8_t packed[3 * B / 2], packed_bf16[3 * B / 2];
	float absmax_bf16[3];
	int zeros = 1;

	/* block 0: all zero (and -0): absmax 0, every element the code of 0.0 */
	for (int i = 0; i < B; i++)
		in[i] = i % 2 ? -0.0f : 0.0f;
	/* block 1: max |x| from a negative value */
	for (int i = 0; i < B; i++)
		in[B + i] = (float)(i - 32) / 8.0f; /* -4 .. 3.875 */
	/* block 2: tiny values, scaled by their own absmax */
	for (int i = 0; i < B; i++)
		in[2 * B + i] = ldexpf((float)(i % 5) - 2.0f, -100);
	nf4_quantize(packed, absmax, in, 3 * B);
	CHECKF(absmax[0] == 0.0f, "zero block absmax %g", absmax[0]);
	for (int i = 0; i < B / 2; i++)
		zeros &= packed[i] == 0x77;
	CHECKF(zeros, "zero block packs to 0x77 (the code of 0.0)");
	CHECKF(absmax[1] == 4.0f && code_at(packed, B) == 0, "negative absmax: absmax %g, code %d", absmax[1],
		code_at(packed, B));
	CHECKF(code_at(packed, B + 32) == 7 && code_at(packed, B + 63) == 15,
	       "0 -> code 7 (%d), 3.875/4 -> code 15 (%d)", code_at(packed, B + 32), code_at(packed, B + 63));
	CHECKF(absmax[2] == ldexpf(2, -100) && code_at(packed, 2 * B) == 0 && code_at(packed, 2 * B + 2) == 7 &&
	           code_at(packed, 2 * B + 4) == 15,
	       "tiny block scaled by its own absmax");
	/* the bf16 entry point gives the same result on bf16-exact inputs */
	for (int i = 0; i < 3 * B; i++)
		in_bf16[i] = bf16_from_f32(in[i]);
	nf4_quantize_bf16(packed_bf16, absmax_bf16, in_bf16, 3 * B);
	CHECKF(memcmp(packed, packed_bf16, sizeof packed) == 0 && memcmp(absmax, absmax_bf16, sizeof absmax) == 0,
	       "bf16 input quantizes like its fp32 value");
}

/* quantize -> dequantize: every element within half the widest code gap
 * times its block's absmax, plus bf16 rounding; and the code is the nearest. */
static void test_error_bound(void)
{
	enum { NB = 64, N = NB * B };
	float *in = malloc(N * sizeof *in), absmax[NB], max_half_gap = 0, worst = 0;
	uint8_t *packed = malloc(N / 2);
	bf16 *out = malloc(N * sizeof *out);
	uint64_t state = 12345;
	int bad = 0, not_nearest = 0;
	double sum_sq = 0, sum_sq_x = 0;

	for (int i = 0; i < 15; i++)
		max_half_gap = fmaxf(max_half_gap, (poros_nf4_code[i + 1] - poros_nf4_code[i]) / 2);
	for (int i = 0; i < N; i++) {
		/* roughly normal: sum of uniforms, block scales spread over 2^-8..2^8 */
		double s = 0;

		for (int k = 0; k < 4; k++) {
			state = state * 6364136223846793005ull + 1442695040888963407ull;
			s += (double)(state >> 11) / 9007199254740992.0 - 0.5;
		}
		in[i] = (float)(s * ldexp(1, (i / B) % 17 - 8));
	}
	nf4_quantize(packed, absmax, in, N);
	nf4_dequantize_cpu(out, B, packed, absmax, NB, B); /* one block a row */
	for (int i = 0; i < N; i++) {
		float a = absmax[i / B], y = f32_from_bf16(out[i]);
		float err = fabsf(in[i] - y), bound = a * max_half_gap * (1 + 1e-6f) + fabsf(y) * ldexpf(1, -8);
		int q = code_at(packed, i);

		if (err > bound && bad++ < 3)
			fprintf(stderr, "  element %d: x %g -> %g, error %g > %g\n", i, in[i], y, err, bound);
		worst = fmaxf(worst, err / a);
		for (int j = 0; j < 16; j++)
			if (fabs((double)in[i] / a - poros_nf4_code[j]) < fabs((double)in[i] / a - poros_nf4_code[q]) - 1e-7)
				not_nearest++;
		sum_sq += (double)err * err;
		sum_sq_x += (double)in[i] * in[i];
	}
	CHECKF(bad == 0, "%d elements outside the error bound", bad);
	CHECKF(not_nearest == 0, "%d elements not at their nearest code", not_nearest);
	CHECKF(worst <= max_half_gap * 1.01f && worst > 0.05f, "worst relative error %g (half gap %g)", worst, max_half_gap);
	/* NF4 keeps roughly 4 bits: the relative RMS error of normal data is ~0.1 */
	CHECKF(sqrt(sum_sq / sum_sq_x) < 0.15, "relative RMS error %g", sqrt(sum_sq / sum_sq_x));
	free(in);
	free(packed);
	free(out);
}

int main(void)
{
	test_exact_block();
	test_nearest();
	test_scales_and_zero();
	test_error_bound();
	return test_verdict("test_nf4");
}
