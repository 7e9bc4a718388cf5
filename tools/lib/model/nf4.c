/* tools/lib/model/nf4.c: NF4 quantization on the host, once per weight at load
 * time; the GPU/CPU dequantize op (kernels/) is its inverse. */
#include "nf4.h"

#include <math.h>

#include "ops.h"

int nf4_nearest_code(float x)
{
	int best = 0;
	double best_d;

	/* NaN has no nearest code: it takes the code of zero */
	if (isnan(x))
		x = 0.0f;
	best_d = fabs((double)x - (double)poros_nf4_code[0]);
	/* strict < keeps the lower index on a tie; near a midpoint x and the
	 * two codes have similar exponents, so the double differences are
	 * exact and only a true tie compares equal */
	for (int i = 1; i < 16; i++) {
		double d = fabs((double)x - (double)poros_nf4_code[i]);

		if (d < best_d) {
			best_d = d;
			best = i;
		}
	}
	return best;
}

/* One block of POROS_NF4_BLOCK values already in fp32. */
static void quantize_block(uint8_t *packed, float *absmax, const float *x)
{
	float amax = 0.0f;
	int zero = nf4_nearest_code(0.0f);

	for (int i = 0; i < POROS_NF4_BLOCK; i++) {
		float a = fabsf(x[i]);

		if (a > amax) /* NaN never wins */
			amax = a;
	}
	*absmax = amax;
	for (int i = 0; i < POROS_NF4_BLOCK; i += 2) {
		int hi = amax > 0.0f ? nf4_nearest_code(x[i] / amax) : zero;
		int lo = amax > 0.0f ? nf4_nearest_code(x[i + 1] / amax) : zero;

		packed[i / 2] = (uint8_t)(hi << 4 | lo);
	}
}

void nf4_quantize(uint8_t *packed, float *absmax, const float *in, long n)
{
	for (long b = 0; b < n / POROS_NF4_BLOCK; b++)
		quantize_block(packed + b * (POROS_NF4_BLOCK / 2), absmax + b, in + b * POROS_NF4_BLOCK);
}

void nf4_quantize_bf16(uint8_t *packed, float *absmax, const uint16_t *in, long n)
{
	float block[POROS_NF4_BLOCK];

	for (long b = 0; b < n / POROS_NF4_BLOCK; b++) {
		for (int i = 0; i < POROS_NF4_BLOCK; i++)
			block[i] = f32_from_bf16(in[b * POROS_NF4_BLOCK + i]);
		quantize_block(packed + b * (POROS_NF4_BLOCK / 2), absmax + b, block);
	}
}
