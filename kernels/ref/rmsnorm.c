/* kernels/ref/rmsnorm.c: RMSNorm in double (ref.h): the reference of
 * rmsnorm_backward's gradient check. */
#include <math.h>
#include <stddef.h>

#include "ref.h"

double ref_rmsnorm_dot(const double *lw, const double *x, const double *w, double eps, int T, int C)
{
	double L = 0.0;
	for (int t = 0; t < T; t++) {
		const double *xt = x + (size_t)t * C;
		double ss = 0.0;
		for (int i = 0; i < C; i++)
			ss += xt[i] * xt[i];
		double r = 1.0 / sqrt(ss / C + eps);
		for (int i = 0; i < C; i++)
			L += lw[(size_t)t * C + i] * w[i] * xt[i] * r;
	}
	return L;
}
