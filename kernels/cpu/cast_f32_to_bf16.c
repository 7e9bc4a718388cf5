// defines: cast_f32_to_bf16_cpu
/* fp32 -> bf16, round to nearest even (NaN stays NaN), the rounding every
 * bf16 store in Poros uses. */
#include "ops.h"
#include "cpu_par.h"

/* out (n) = bf16(in (n)) */
void cast_f32_to_bf16_cpu(bf16 *out, const float *in, long n)
{
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = bf16_from_f32(in[i]);
}
