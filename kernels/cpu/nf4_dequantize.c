// defines: poros_nf4_code nf4_dequantize_cpu
/* QLoRA NormalFloat4: the code book is numerics.h's, shared with the
 * CUDA kernel's constant table. */
#include "ops.h"
#include "cpu_par.h"

const float poros_nf4_code[16] = POROS_NF4_CODE_INIT;

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
