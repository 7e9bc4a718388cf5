/* kernels/ref/attention.c: causal GQA attention in double (ref.h): the
 * reference of attention_forward, and the loss and rounding bounds of
 * attention_backward's gradient check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

void ref_attention(double *out, double *lse, double *bound, const float *q, const float *k, const float *v, int B,
                   int S, int H, int G, int D)
{
	double scale = 1.0 / sqrt((double)D);
	double *s = malloc(sizeof(double) * (S ? S : 1));
	if (!s)
		abort();
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < S; i++) {
				int g = h / (H / G);
				double max = -INFINITY, sum = 0.0;
				for (int j = 0; j <= i; j++) {
					s[j] = 0.0;
					for (int d = 0; d < D; d++)
						s[j] += (double)q[(((size_t)b * S + i) * H + h) * D + d] *
							k[(((size_t)b * S + j) * G + g) * D + d];
					s[j] *= scale;
					max = fmax(max, s[j]);
				}
				for (int j = 0; j <= i; j++)
					sum += exp(s[j] - max);
				lse[((size_t)b * H + h) * S + i] = max + log(sum);
				for (int d = 0; d < D; d++) {
					double o = 0.0, o_abs = 0.0;
					for (int j = 0; j <= i; j++) {
						double vj = v[(((size_t)b * S + j) * G + g) * D + d];
						o += exp(s[j] - max) / sum * vj;
						o_abs += exp(s[j] - max) / sum * fabs(vj);
					}
					out[(((size_t)b * S + i) * H + h) * D + d] = o;
					bound[(((size_t)b * S + i) * H + h) * D + d] = o_abs;
				}
			}
	free(s);
}

double ref_attention_dot(const double *lw, const double *q, const double *k, const double *v, int B, int S, int H,
                         int G, int D)
{
	double scale = 1.0 / sqrt((double)D), L = 0.0;
	double s[64];
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			int g = h / (H / G);
			for (int i = 0; i < S; i++) {
				const double *qi = q + (((size_t)b * S + i) * H + h) * D;
				double max = -INFINITY, sum = 0.0;
				for (int j = 0; j <= i; j++) {
					const double *kj = k + (((size_t)b * S + j) * G + g) * D;
					s[j] = 0.0;
					for (int d = 0; d < D; d++)
						s[j] += qi[d] * kj[d];
					s[j] *= scale;
					max = fmax(max, s[j]);
				}
				for (int j = 0; j <= i; j++)
					sum += exp(s[j] - max);
				for (int d = 0; d < D; d++) {
					double o = 0.0;
					for (int j = 0; j <= i; j++)
						o += exp(s[j] - max) / sum * v[(((size_t)b * S + j) * G + g) * D + d];
					L += lw[(((size_t)b * S + i) * H + h) * D + d] * o;
				}
			}
		}
	return L;
}

/* dv sums P16_ij dout_i and dq, dk sum scale dS16_ij k_j and scale dS16_ij
 * q_i, and rounding P or dS to bf16 moves each term by at most 2^-8 of
 * itself.  delta_i = dout_i . out_i reads the forward's out, whose bf16 p
 * (each term P_ij v_j) and bf16 out_i (<= sum_j P_ij |v_j|) move it by at
 * most 2 2^-8 W_i, W_i = sum_d |dout_id| sum_j P_ij |v_jd|; that moves dS_ij
 * by P_ij times as much, a term scale P_ij 2 W_i |k_j| (|q_i|) of dq (dk).
 * bq, bk, bv get the sums of |term| in double; delta the double rowsum(P
 * dP) and bdelta 2 W_i. */
void ref_attention_bounds(double *bq, double *bk, double *bv, double *delta_ref, double *bdelta, const double *lw,
                          const double *q, const double *k, const double *v, int B, int S, int H, int G, int D)
{
	double scale = 1.0 / sqrt((double)D), s[64], P[64], dP[64];
	memset(bq, 0, sizeof(double) * B * S * H * D);
	memset(bk, 0, sizeof(double) * B * S * G * D);
	memset(bv, 0, sizeof(double) * B * S * G * D);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			int g = h / (H / G);
			for (int i = 0; i < S; i++) {
				size_t qoff = (((size_t)b * S + i) * H + h) * D;
				double max = -INFINITY, sum = 0.0, delta = 0.0;
				for (int j = 0; j <= i; j++) {
					size_t kvoff = (((size_t)b * S + j) * G + g) * D;
					s[j] = dP[j] = 0.0;
					for (int d = 0; d < D; d++) {
						s[j] += q[qoff + d] * k[kvoff + d];
						dP[j] += lw[qoff + d] * v[kvoff + d];
					}
					s[j] *= scale;
					max = fmax(max, s[j]);
				}
				for (int j = 0; j <= i; j++)
					sum += exp(s[j] - max);
				for (int j = 0; j <= i; j++) {
					P[j] = exp(s[j] - max) / sum;
					delta += P[j] * dP[j];
				}
				double w = 0.0;
				for (int d = 0; d < D; d++) {
					double pv = 0.0;
					for (int j = 0; j <= i; j++)
						pv += P[j] * fabs(v[(((size_t)b * S + j) * G + g) * D + d]);
					w += fabs(lw[qoff + d]) * pv;
				}
				delta_ref[((size_t)b * H + h) * S + i] = delta;
				bdelta[((size_t)b * H + h) * S + i] = 2.0 * w;
				for (int j = 0; j <= i; j++) {
					size_t kvoff = (((size_t)b * S + j) * G + g) * D;
					double ds = fabs(P[j] * (dP[j] - delta)) + P[j] * 2.0 * w;
					for (int d = 0; d < D; d++) {
						bq[qoff + d] += scale * ds * fabs(k[kvoff + d]);
						bk[kvoff + d] += scale * ds * fabs(q[qoff + d]);
						bv[kvoff + d] += P[j] * fabs(lw[qoff + d]);
					}
				}
			}
		}
}
