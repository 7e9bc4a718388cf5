// defines: rmsnorm_forward_cpu rmsnorm_backward_cpu
/* RMSNorm as HF Llama/Qwen compute it: y = w * (x * rsqrt(mean(x^2) + eps)),
 * all in fp32 (HF casts x*rstd to the weight dtype before the product; we
 * keep fp32 and round once, at the bf16 output).  The row's sum of squares
 * is accumulated in double: it costs nothing here and makes this the more
 * exact side when other backends are checked against it. */
#include <math.h>

#include "ops.h"
#include "cpu_par.h"

/* out_f32, out_bf16 (T,C) (either may be NULL), rows ld_out apart in both;
 * rstd (T), in (T,C) contiguous, weight (C) */
void rmsnorm_forward_cpu(float *out_f32, bf16 *out_bf16, int ld_out, float *rstd, const float *in,
			 const bf16 *weight, float eps, int T, int C)
{
#pragma omp parallel for schedule(static) if ((long)T * C >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		const float *x = in + (size_t)t * C;
		double sumsq = 0.0;
		for (int c = 0; c < C; c++)
			sumsq += (double)x[c] * x[c];
		float r = 1.0f / sqrtf((float)(sumsq / C) + eps);
		rstd[t] = r;
		for (int c = 0; c < C; c++) {
			float y = f32_from_bf16(weight[c]) * (x[c] * r);
			if (out_f32)
				out_f32[(size_t)t * ld_out + c] = y;
			if (out_bf16)
				out_bf16[(size_t)t * ld_out + c] = bf16_from_f32(y);
		}
	}
}

/* din (T,C) += dL/din given dout (T,C), in (T,C), weight (C), rstd (T).
 * With y_i = w_i x_i r and r = (mean(x^2) + eps)^-1/2:
 *   dx_i = r * (w_i dy_i - x_i * r^2 * mean_j(dy_j w_j x_j)) */
void rmsnorm_backward_cpu(float *din, const float *dout, const float *in, const bf16 *weight, const float *rstd,
			  int T, int C)
{
#pragma omp parallel for schedule(static) if ((long)T * C >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		const float *x = in + (size_t)t * C;
		const float *dy = dout + (size_t)t * C;
		float *dx = din + (size_t)t * C;
		float r = rstd[t];
		double dot = 0.0;
		for (int c = 0; c < C; c++)
			dot += (double)dy[c] * f32_from_bf16(weight[c]) * x[c];
		float coef = (float)(dot / C) * r * r;
		for (int c = 0; c < C; c++)
			dx[c] += r * (f32_from_bf16(weight[c]) * dy[c] - x[c] * coef);
	}
}
