/* kernels/ref/crossentropy.c: softmax cross-entropy in double (ref.h):
 * the reference of crossentropy_forward_backward's losses and gradient. */
#include <math.h>
#include <stddef.h>

#include "ref.h"

void ref_crossentropy(double *loss, const float *logits, const int32_t *targets, int T, int V)
{
	for (int t = 0; t < T; t++) {
		double max = -INFINITY, sum = 0.0;
		for (int j = 0; j < V; j++)
			max = fmax(max, logits[t * V + j]);
		for (int j = 0; j < V; j++)
			sum += exp(logits[t * V + j] - max);
		loss[t] = max + log(sum) - logits[t * V + targets[t]];
	}
}

double ref_crossentropy_mean(const double *logits, const int32_t *targets, int T, int V)
{
	double L = 0.0;
	int valid = 0;
	for (int t = 0; t < T; t++) {
		if (targets[t] < 0)
			continue;
		const double *x = logits + (size_t)t * V;
		double max = x[0], sum = 0.0;
		for (int j = 1; j < V; j++)
			max = fmax(max, x[j]);
		for (int j = 0; j < V; j++)
			sum += exp(x[j] - max);
		L += max + log(sum) - x[targets[t]];
		valid++;
	}
	return L / valid;
}
