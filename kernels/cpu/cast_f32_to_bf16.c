// defines: cast_f32_to_bf16_cpu
/* fp32 -> bf16, round to nearest even (NaN stays NaN), the rounding every
 * bf16 store in Poros uses. */
#include "ops.h"
#include "cpu_par.h"

/* out (rows,cols) = bf16(in (rows,cols)); in contiguous, rows of out ld_out
 * apart (columns cols..ld_out-1 belong to someone else: not written) */
void cast_f32_to_bf16_cpu(bf16 *out, int ld_out, const float *in, long rows, int cols)
{
#pragma omp parallel for schedule(static) if (rows * cols >= POROS_CPU_PAR_MIN)
	for (long r = 0; r < rows; r++) {
		const float *x = in + (size_t)r * cols;
		bf16 *o = out + (size_t)r * ld_out;
		for (int c = 0; c < cols; c++)
			o[c] = bf16_from_f32(x[c]);
	}
}
