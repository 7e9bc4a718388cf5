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

/* out (rows,cols) bf16, rows ld_out apart: element e = row*cols + col of
 * the unpitched row-major stream is code[nibble e] * absmax[e / 64];
 * packed (rows*cols/2), byte e/2 holds element e (even e) in its high
 * nibble and e+1 in its low nibble; absmax (rows*cols/64); cols % 64 == 0,
 * so a row starts on a byte and on a block. */
void nf4_dequantize_cpu(bf16 *out, int ld_out, const uint8_t *packed, const float *absmax, long rows, int cols)
{
#pragma omp parallel for schedule(static) if (rows * cols >= POROS_CPU_PAR_MIN)
	for (long r = 0; r < rows; r++) {
		const uint8_t *row_bytes = packed + (size_t)r * cols / 2;
		const float *row_absmax = absmax + (size_t)r * cols / POROS_NF4_BLOCK;
		bf16 *o = out + (size_t)r * ld_out;
		for (int c = 0; c < cols; c += 2) {
			uint8_t byte = row_bytes[c / 2];
			float scale = row_absmax[c / POROS_NF4_BLOCK]; /* c and c+1 share a block: 64 is even */
			o[c] = bf16_from_f32(poros_nf4_code[byte >> 4] * scale);
			o[c + 1] = bf16_from_f32(poros_nf4_code[byte & 0x0f] * scale);
		}
	}
}
