/* kernels/ref/matmul.c: the linear layer in double (ref.h): the reference
 * of matmul_forward, matmul_forward_bf16 and matmul_backward_input. */
#include "ref.h"

void ref_matmul(double *out, const bf16 *x, const bf16 *W, int T, int K, int N)
{
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = 0.0;
			for (int k = 0; k < K; k++)
				s += (double)f32_from_bf16(x[t * K + k]) * f32_from_bf16(W[n * K + k]);
			out[t * N + n] = s;
		}
}

void ref_matmul_backward_input(double *din, const double *dout, const double *W, int T, int K, int N)
{
	for (int t = 0; t < T; t++)
		for (int k = 0; k < K; k++) {
			double s = 0.0;
			for (int n = 0; n < N; n++)
				s += dout[(size_t)t * N + n] * W[(size_t)n * K + k];
			din[(size_t)t * K + k] = s;
		}
}

double ref_matmul_dot(const double *lw, const double *x, const double *W, int T, int K, int N)
{
	double L = 0.0;
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double y = 0.0;
			for (int k = 0; k < K; k++)
				y += x[(size_t)t * K + k] * W[(size_t)n * K + k];
			L += lw[(size_t)t * N + n] * y;
		}
	return L;
}
