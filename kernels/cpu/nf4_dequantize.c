// defines: poros_nf4_code nf4_dequantize_cpu
/* QLoRA NormalFloat4 (Dettmers et al. 2023): 16 quantiles of N(0,1) scaled
 * to [-1, 1], with an exact zero; the values are bitsandbytes' table, so
 * weights quantized there dequantize to the same numbers here. */
#include "ops.h"
#include "cpu_par.h"

const float poros_nf4_code[16] = {
	-1.0f,
	-0.6961928009986877f,
	-0.5250730514526367f,
	-0.39491748809814453f,
	-0.28444138169288635f,
	-0.18477343022823334f,
	-0.09105003625154495f,
	0.0f,
	0.07958029955625534f,
	0.16093020141124725f,
	0.24611230194568634f,
	0.33791524171829224f,
	0.44070982933044434f,
	0.5626170039176941f,
	0.7229568362236023f,
	1.0f,
};

/* out (n) bf16 = code[nibble i] * absmax[i / 64]; packed (n/2), byte i/2
 * holds element i (even i) in its high nibble and i+1 in its low nibble;
 * absmax (n/64); n % 64 == 0 */
void nf4_dequantize_cpu(bf16 *out, const uint8_t *packed, const float *absmax, long n)
{
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (long byte = 0; byte < n / 2; byte++) {
		long i = 2 * byte;
		float scale = absmax[i / POROS_NF4_BLOCK]; /* i and i+1 share a block: 64 is even */
		out[i] = bf16_from_f32(poros_nf4_code[packed[byte] >> 4] * scale);
		out[i + 1] = bf16_from_f32(poros_nf4_code[packed[byte] & 0x0f] * scale);
	}
}
