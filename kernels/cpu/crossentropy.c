// defines: crossentropy_forward_backward_cpu
/* Softmax cross-entropy fused with its gradient, one row of logits per
 * token: loss = logsumexp(x) - x[target], dlogits = (softmax(x) - onehot)
 * * dloss.  The max is subtracted before exponentiating and the row's sum
 * of exponentials runs in double in index order, one row per thread. */
#include <math.h>

#include "ops.h"
#include "cpu_par.h"

/* dlogits (T,V) bf16, losses (T), logits (T,V), targets (T): < 0 ignores
 * the row (loss 0, zero gradient).  A target >= V is a caller bug; its
 * loss is NaN (and its gradient zero) so it cannot pass unnoticed. */
void crossentropy_forward_backward_cpu(bf16 *dlogits, float *losses, const float *logits, const int32_t *targets,
				       float dloss, int T, int V)
{
#pragma omp parallel for schedule(static) if ((long)T * V >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		const float *x = logits + (size_t)t * V;
		bf16 *dx = dlogits + (size_t)t * V;
		int32_t y = targets[t];
		if (y < 0 || y >= V) {
			losses[t] = y < 0 ? 0.0f : NAN;
			for (int j = 0; j < V; j++)
				dx[j] = bf16_from_f32(0.0f);
			continue;
		}
		float max = x[0];
		for (int j = 1; j < V; j++)
			if (x[j] > max)
				max = x[j];
		double sum = 0.0;
		for (int j = 0; j < V; j++)
			sum += expf(x[j] - max);
		losses[t] = (float)(((double)max - x[y]) + log(sum));
		for (int j = 0; j < V; j++) {
			double p = expf(x[j] - max) / sum;
			dx[j] = bf16_from_f32((float)((p - (j == y)) * dloss));
		}
	}
}
