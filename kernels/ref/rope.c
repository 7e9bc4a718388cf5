/* kernels/ref/rope.c: rotary embedding in double (ref.h), and the cos/sin
 * tables as HF builds them: the reference of rope_forward and
 * rope_backward, the tables of every rope and attention test. */
#include <math.h>
#include <stddef.h>

#include "ref.h"

void ref_rope_tables(float *cos_t, float *sin_t, int S, int D, double theta)
{
	for (int s = 0; s < S; s++)
		for (int i = 0; i < D / 2; i++) {
			float inv_freq = (float)(1.0 / pow(theta, 2.0 * i / D));
			float angle = (float)s * inv_freq;
			cos_t[s * (D / 2) + i] = cosf(angle);
			sin_t[s * (D / 2) + i] = sinf(angle);
		}
}

void ref_rope(double *out, const float *x, const float *cos_t, const float *sin_t, int T, int S, int nh, int D)
{
	int half = D / 2;
	for (int t = 0; t < T; t++)
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < half; i++) {
				size_t o = ((size_t)t * nh + h) * D;
				double c = cos_t[(t % S) * half + i], s = sin_t[(t % S) * half + i];
				out[o + i] = x[o + i] * c - x[o + i + half] * s;
				out[o + i + half] = x[o + i + half] * c + x[o + i] * s;
			}
}

double ref_rope_dot(const double *lw, const double *x, const double *cos_t, const double *sin_t, int T, int S,
                    int nh, int D)
{
	int half = D / 2;
	double L = 0.0;
	for (int t = 0; t < T; t++)
		for (int h = 0; h < nh; h++) {
			size_t off = ((size_t)t * nh + h) * D;
			const double *cs = cos_t + (size_t)(t % S) * half, *sn = sin_t + (size_t)(t % S) * half;
			for (int d = 0; d < D; d++) {
				/* out = x cos + rotate_half(x) sin, rotate_half(x) = cat(-x2, x1) */
				int i = d % half;
				double rot = d < half ? -x[off + d + half] : x[off + d - half];
				L += lw[off + d] * (x[off + d] * cs[i] + rot * sn[i]);
			}
		}
	return L;
}
