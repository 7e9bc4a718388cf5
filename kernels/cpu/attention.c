// defines: attention_forward_cpu attention_backward_cpu attention_scratch_floats
/* Causal grouped-query attention, as HF's eager path computes it in fp32:
 * scores = (q . k) * D^-1/2, softmax over keys j <= i, out = P @ v; query
 * head h reads key/value head h / (H/G).  The forward saves each row's
 * log-sum-exp so the backward rebuilds P = exp(score - lse) without
 * another max/sum pass.  Dot products sum d = 0..D-1 in fp32; softmax sums
 * run in double.  Parallel loops give each output row to one thread, so the
 * bits do not depend on the thread count.
 *
 * Scratch layout (floats), shared in size with the CUDA backend:
 *   [0, BHSS)       probabilities P (b,h,i,j)
 *   [BHSS, 2 BHSS)  score gradients dS (b,h,i,j)  (backward only)
 *   then 4 BHS      row statistics room for the CUDA kernels (unused here) */
#include <math.h>

#include "ops.h"
#include "cpu_par.h"

/* Head-dim columns of an output row accumulated together on the stack. */
#define ATTN_D_TILE 128

size_t attention_scratch_floats(int B, int S, int H, int G, int D)
{
	(void)G;
	(void)D;
	size_t rows = (size_t)B * H * S;
	return 2 * rows * (size_t)S + 4 * rows;
}

static inline float dot(const float *a, const float *b, int n)
{
	float acc = 0.0f;
	for (int i = 0; i < n; i++)
		acc += a[i] * b[i];
	return acc;
}

/* The softmax scale as torch applies a Python float to an fp32 tensor. */
static inline float softmax_scale(int D)
{
	return (float)(1.0 / sqrt((double)D));
}

/* out (T,H*D) bf16, lse (B,H,S), q (T,H,D), k, v (T,G,D), T = B*S */
void attention_forward_cpu(bf16 *out, float *lse, float *scratch, const float *q, const float *k, const float *v,
			   int B, int S, int H, int G, int D)
{
	int group = H / G;
	float scale = softmax_scale(D);
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < H; h++) {
			for (int i = 0; i < S; i++) {
				size_t row = ((size_t)b * H + h) * S + i;
				int kvh = h / group;
				const float *qi = q + (((size_t)b * S + i) * H + h) * D;
				float *p = scratch + row * S;
				float max = -INFINITY;
				for (int j = 0; j <= i; j++) {
					const float *kj = k + (((size_t)b * S + j) * G + kvh) * D;
					p[j] = dot(qi, kj, D) * scale;
					if (p[j] > max)
						max = p[j];
				}
				double sum = 0.0;
				for (int j = 0; j <= i; j++) {
					p[j] = expf(p[j] - max);
					sum += p[j];
				}
				float sumf = (float)sum;
				for (int j = 0; j <= i; j++)
					p[j] /= sumf;
				lse[row] = (float)(max + log(sum));

				bf16 *o = out + (((size_t)b * S + i) * H + h) * D;
				for (int d0 = 0; d0 < D; d0 += ATTN_D_TILE) {
					int dn = D - d0 < ATTN_D_TILE ? D - d0 : ATTN_D_TILE;
					float acc[ATTN_D_TILE] = { 0 };
					for (int j = 0; j <= i; j++) {
						const float *vj = v + (((size_t)b * S + j) * G + kvh) * D + d0;
						for (int dd = 0; dd < dn; dd++)
							acc[dd] += p[j] * vj[dd];
					}
					for (int dd = 0; dd < dn; dd++)
						o[d0 + dd] = bf16_from_f32(acc[dd]);
				}
			}
		}
	}
}

/* dq (T,H,D), dk, dv (T,G,D) written from dout (T,H*D) and the forward's
 * q, k, v, lse.  With P the probabilities and dP = dout . v:
 *   dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij')
 *   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_{h in group, i >= j} dS_ij q_i,
 *   dv_j = sum_{h in group, i >= j} P_ij dout_i */
void attention_backward_cpu(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *q,
			    const float *k, const float *v, const float *lse, int B, int S, int H, int G, int D)
{
	int group = H / G;
	float scale = softmax_scale(D);
	size_t bhss = (size_t)B * H * S * S;
	float *P = scratch;
	float *dS = scratch + bhss;

	/* pass 1, one query row per iteration: P, dS and dq */
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < H; h++) {
			for (int i = 0; i < S; i++) {
				size_t row = ((size_t)b * H + h) * S + i;
				int kvh = h / group;
				size_t qoff = (((size_t)b * S + i) * H + h) * D;
				float *p = P + row * S, *ds = dS + row * S;
				double delta = 0.0;
				for (int j = 0; j <= i; j++) {
					size_t kvoff = (((size_t)b * S + j) * G + kvh) * D;
					p[j] = expf(dot(q + qoff, k + kvoff, D) * scale - lse[row]);
					ds[j] = dot(dout + qoff, v + kvoff, D); /* dP for now */
					delta += (double)p[j] * ds[j];
				}
				float deltaf = (float)delta;
				for (int j = 0; j <= i; j++)
					ds[j] = p[j] * (ds[j] - deltaf);
				for (int d0 = 0; d0 < D; d0 += ATTN_D_TILE) {
					int dn = D - d0 < ATTN_D_TILE ? D - d0 : ATTN_D_TILE;
					float acc[ATTN_D_TILE] = { 0 };
					for (int j = 0; j <= i; j++) {
						const float *kj = k + (((size_t)b * S + j) * G + kvh) * D + d0;
						for (int dd = 0; dd < dn; dd++)
							acc[dd] += ds[j] * kj[dd];
					}
					for (int dd = 0; dd < dn; dd++)
						dq[qoff + d0 + dd] = scale * acc[dd];
				}
			}
		}
	}

	/* pass 2, one key row per iteration: dk and dv sum the group's query
	 * heads in order, then the query rows i = j..S-1 in order */
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int g = 0; g < G; g++) {
			for (int j = 0; j < S; j++) {
				size_t kvoff = (((size_t)b * S + j) * G + g) * D;
				for (int d0 = 0; d0 < D; d0 += ATTN_D_TILE) {
					int dn = D - d0 < ATTN_D_TILE ? D - d0 : ATTN_D_TILE;
					float acc_k[ATTN_D_TILE] = { 0 }, acc_v[ATTN_D_TILE] = { 0 };
					for (int h = g * group; h < (g + 1) * group; h++) {
						for (int i = j; i < S; i++) {
							size_t idx = (((size_t)b * H + h) * S + i) * S + j;
							size_t qoff = (((size_t)b * S + i) * H + h) * D + d0;
							for (int dd = 0; dd < dn; dd++) {
								acc_k[dd] += dS[idx] * q[qoff + dd];
								acc_v[dd] += P[idx] * dout[qoff + dd];
							}
						}
					}
					for (int dd = 0; dd < dn; dd++) {
						dk[kvoff + d0 + dd] = scale * acc_k[dd];
						dv[kvoff + d0 + dd] = acc_v[dd];
					}
				}
			}
		}
	}
}
