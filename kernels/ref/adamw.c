/* kernels/ref/adamw.c: AdamW's step in double, the textbook form (ref.h):
 * the reference of adamw_update. */
#include <math.h>

#include "ref.h"

void ref_adamw(double *param, double *m, double *v, const float *param_in, const float *grad, const float *m_in,
               const float *v_in, long n, double lr, double b1, double b2, double eps, double wd, double grad_scale,
               int step)
{
	double bc1 = 1.0, bc2 = 1.0;
	for (int s = 0; s < step; s++)
		bc1 *= b1, bc2 *= b2;
	for (long i = 0; i < n; i++) {
		double g = (double)grad[i] * grad_scale;
		m[i] = b1 * (double)m_in[i] + (1.0 - b1) * g;
		v[i] = b2 * (double)v_in[i] + (1.0 - b2) * g * g;
		double mhat = m[i] / (1.0 - bc1), vhat = v[i] / (1.0 - bc2);
		param[i] = (double)param_in[i] * (1.0 - lr * wd) - lr * mhat / (sqrt(vhat) + eps);
	}
}
