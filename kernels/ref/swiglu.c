/* kernels/ref/swiglu.c: the SwiGLU product in double (ref.h): the
 * reference of swiglu_forward and of swiglu_backward's gradient check. */
#include <math.h>

#include "ref.h"

void ref_swiglu(double *out, const double *gate, const double *up, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

double ref_swiglu_dot(const double *lw, const double *gate, const double *up, long n)
{
	double L = 0.0;
	for (long i = 0; i < n; i++)
		L += lw[i] * gate[i] / (1.0 + exp(-gate[i])) * up[i];
	return L;
}
