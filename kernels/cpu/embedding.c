// defines: embedding_forward_cpu
/* Token embedding lookup.  Widening bf16 to fp32 is exact, so this is a
 * plain gather; the table stays frozen, so there is no backward. */
#include "ops.h"
#include "cpu_par.h"

/* out (T,C) = wte[tokens[t]]; tokens (T) in [0, V), wte (V,C) */
void embedding_forward_cpu(float *out, const int32_t *tokens, const bf16 *wte, int T, int C)
{
#pragma omp parallel for schedule(static) if ((long)T * C >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		const bf16 *row = wte + (size_t)tokens[t] * C;
		float *o = out + (size_t)t * C;
		for (int c = 0; c < C; c++)
			o[c] = f32_from_bf16(row[c]);
	}
}
