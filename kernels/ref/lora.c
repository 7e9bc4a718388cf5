/* kernels/ref/lora.c: the LoRA term in double (ref.h): the reference of
 * lora_forward and of lora_backward's gradient check. */
#include <stddef.h>

#include "ref.h"

long ref_lora(double *out, double *u, const bf16 *x, const float *A, const float *B, double scale, float p,
              uint64_t seed, int T, int K, int N, int R)
{
	long dropped = 0;
	for (int t = 0; t < T; t++) {
		for (int r = 0; r < R; r++) {
			double s = 0.0;
			for (int k = 0; k < K; k++) {
				int kept = p == 0.0f || poros_dropout_keep(seed, (uint64_t)t * K + k, p);
				dropped += r == 0 && !kept;
				if (kept)
					s += f32_from_bf16(x[t * K + k]) / (1.0 - (double)p) * A[r * K + k];
			}
			u[t * R + r] = s;
		}
		for (int n = 0; n < N; n++) {
			double s = 0.0;
			for (int r = 0; r < R; r++)
				s += u[t * R + r] * B[n * R + r];
			out[t * N + n] = scale * s;
		}
	}
	return dropped;
}

double ref_lora_dot(const double *lw, const double *x, const double *keep, const double *A, const double *B,
                    double scale, int T, int K, int N, int R)
{
	double L = 0.0;
	for (int t = 0; t < T; t++) {
		double u[64];
		for (int r = 0; r < R; r++) {
			u[r] = 0.0;
			for (int k = 0; k < K; k++) {
				size_t tk = (size_t)t * K + k;
				u[r] += x[tk] * keep[tk] * A[(size_t)r * K + k];
			}
		}
		for (int n = 0; n < N; n++) {
			double y = 0.0;
			for (int r = 0; r < R; r++)
				y += u[r] * B[(size_t)n * R + r];
			L += lw[(size_t)t * N + n] * scale * y;
		}
	}
	return L;
}
