// defines: rope_forward_cpu rope_backward_cpu
/* Rotary position embedding in HF's rotate_half layout: the two halves of
 * a head, x1 = x[:D/2] and x2 = x[D/2:], rotate as pairs (x1[i], x2[i]):
 *   out = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x2, x1)
 * HF's cos/sin rows are cat(freqs, freqs), so a (S, D/2) table holds all.
 * The backward applies the transposed (inverse) rotation to the gradient.
 * Token t takes the angles of position pos[t] (NULL: t % S), clamped into
 * [0, t % S] as ops.h says. */
#include "ops.h"
#include "cpu_par.h"

/* Each head of x (T,nh,D) rotated in place by its token's angles, times
 * sign: +1 the rotation, -1 its inverse (sin -> -sin; exact, so each
 * direction keeps the bits of writing it out).  The pair's arithmetic is
 * numerics.h's, which the attention ops' rotation and CUDA share. */
static void rotate(float *x, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D,
                   float sign)
{
	int half = D / 2;
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * S * nh * D >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < B * S; t++) {
		for (int h = 0; h < nh; h++) {
			int at = poros_rope_position(pos, S, t);
			const float *c = cos + (size_t)at * half;
			const float *s = sin + (size_t)at * half;
			float *x1 = x + ((size_t)t * nh + h) * D;
			float *x2 = x1 + half;
			for (int i = 0; i < half; i++) {
				float a = x1[i], b = x2[i], si = sign * s[i];
				x1[i] = poros_rope_first(a, b, c[i], si);
				x2[i] = poros_rope_second(a, b, c[i], si);
			}
		}
	}
}

/* x (T,nh,D) in place, T = B*S; cos, sin (S, D/2); pos (T) or NULL:
 * x1 = x1 cos - x2 sin, x2 = x2 cos + x1 sin */
void rope_forward_cpu(float *x, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D)
{
	rotate(x, cos, sin, pos, B, S, nh, D, 1.0f);
}

/* dx (T,nh,D) in place: dx1 = dy1 cos + dy2 sin, dx2 = dy2 cos - dy1 sin */
void rope_backward_cpu(float *dx, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D)
{
	rotate(dx, cos, sin, pos, B, S, nh, D, -1.0f);
}
