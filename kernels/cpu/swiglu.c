// defines: swiglu_forward_cpu swiglu_backward_cpu
/* The SwiGLU MLP's gate: silu(gate) * up, with silu(g) = g / (1 + e^-g) as
 * torch computes it in fp32, from the bf16 gate and up the projections
 * store.  For g << 0, e^-g overflows to inf and silu is -0, the right
 * limit; for g >> 0 it is g. */
#include <math.h>

#include "ops.h"
#include "cpu_par.h"

/* out (T,F) bf16 = silu(gate) * up, rows ld_out apart; gate, up (T,F) bf16
 * contiguous */
void swiglu_forward_cpu(bf16 *out, int ld_out, const bf16 *gate, const bf16 *up, int T, int F)
{
#pragma omp parallel for schedule(static) if ((long)T * F >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		const bf16 *g_row = gate + (size_t)t * F, *up_row = up + (size_t)t * F;
		bf16 *o = out + (size_t)t * ld_out;
		for (int f = 0; f < F; f++) {
			float g = f32_from_bf16(g_row[f]);
			float silu = g / (1.0f + expf(-g));
			o[f] = bf16_from_f32(silu * f32_from_bf16(up_row[f]));
		}
	}
}

/* dgate, dup (T,F) bf16, rows ld_d apart in both, written from dout (T,F)
 * fp32 and gate, up (T,F) bf16, computed in fp32; dout, gate, up contiguous:
 *   dup = dout * silu(g),  dgate = dout * up * sig(g) * (1 + g * (1 - sig(g))) */
void swiglu_backward_cpu(bf16 *dgate, bf16 *dup, int ld_d, const float *dout, const bf16 *gate, const bf16 *up,
			 int T, int F)
{
#pragma omp parallel for schedule(static) if ((long)T * F >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		size_t in_row = (size_t)t * F, out_row = (size_t)t * ld_d;
		for (int f = 0; f < F; f++) {
			float g = f32_from_bf16(gate[in_row + f]), dy = dout[in_row + f];
			float denom = 1.0f + expf(-g);
			float sig = 1.0f / denom;
			float silu = g / denom;
			dup[out_row + f] = bf16_from_f32(dy * silu);
			float u = f32_from_bf16(up[in_row + f]);
			dgate[out_row + f] = bf16_from_f32(dy * u * (sig * (1.0f + g * (1.0f - sig))));
		}
	}
}
