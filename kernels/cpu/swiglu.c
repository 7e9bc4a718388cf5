// defines: swiglu_forward_cpu swiglu_backward_cpu
/* The SwiGLU MLP's gate: silu(gate) * up, with silu(g) = g / (1 + e^-g) as
 * torch computes it in fp32.  For g << 0, e^-g overflows to inf and silu
 * is -0, the right limit; for g >> 0 it is g. */
#include <math.h>

#include "ops.h"
#include "cpu_par.h"

/* out (n) bf16 = silu(gate) * up; gate, up (n) */
void swiglu_forward_cpu(bf16 *out, const float *gate, const float *up, long n)
{
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (long i = 0; i < n; i++) {
		float g = gate[i];
		float silu = g / (1.0f + expf(-g));
		out[i] = bf16_from_f32(silu * up[i]);
	}
}

/* dgate, dup (n) bf16 written from dout (n), computed in fp32:
 *   dup = dout * silu(g),  dgate = dout * up * sig(g) * (1 + g * (1 - sig(g))) */
void swiglu_backward_cpu(bf16 *dgate, bf16 *dup, const float *dout, const float *gate, const float *up, long n)
{
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (long i = 0; i < n; i++) {
		float g = gate[i];
		float denom = 1.0f + expf(-g);
		float sig = 1.0f / denom;
		float silu = g / denom;
		dup[i] = bf16_from_f32(dout[i] * silu);
		dgate[i] = bf16_from_f32(dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig))));
	}
}
