// defines: attention_forward_cpu attention_backward_cpu attention_scratch_floats
/* Causal grouped-query attention, the reference for the CUDA backend's
 * tensor-core products: scores = (q . k) * D^-1/2, softmax over keys j <= i,
 * out = P @ v; query head h reads key/value head h / (H/G).  The forward
 * saves each row's log-sum-exp so the backward rebuilds P = exp(score -
 * lse) without another max/sum pass.
 *
 * Rounding follows ops.h's precision contract, at exactly the places where
 * CUDA stores bf16, so the two backends differ only in the order of their
 * fp32 sums: q, k, v and dout are rounded to bf16 before every product,
 * the probabilities to bf16 (P16) before out = P16 v and dv = P16^T dout,
 * and the score gradients to bf16 (dS16) before dq = dS16 k and dk =
 * dS16^T q.  Dot products sum d = 0..D-1 in fp32; the softmax sums and
 * delta run in double.  Parallel loops give each output row to one thread,
 * so the bits do not depend on the thread count.
 *
 * Scratch layout (floats), inside attention_scratch_floats(B,S,H,G,D), the
 * larger of this and the CUDA backend's layout (attention_cuda_floats,
 * ops.h), which is always the larger:
 *   [0, Y)       per head (b,h) a triangle: row i holds keys 0..i, i+1
 *                floats at i(i+1)/2; Y = B*H*S(S+1)/2 rounded up to 4.
 *                Forward: the row's scores, then P16 (as fp32 values).
 *                Backward: the scores, then P (fp32), then per key j the
 *                pair (P16, dS16) packed into the key's float.
 *   [Y, Y+T*H*D) bf16 copies: k16 and v16 (T,G,D) each while rows are
 *                computed; in the backward's key pass q16 and dout16
 *                (T,H*D) each, which only that pass reads.
 * A row's q and dout are rounded on the stack (D floats each) instead, so
 * no pass needs all four copies at once. */
#include <math.h>
#include <string.h>

#include "ops.h"
#include "cpu_par.h"

/* Head-dim columns of an output row accumulated together on the stack. */
#define ATTN_D_TILE 128

static size_t triangle(size_t n)
{
	return n * (n + 1) / 2;
}

/* Floats before the bf16 copies: every head's triangle of rows. */
static size_t rows_floats(int B, int S, int H)
{
	return attention_round4((size_t)B * H * triangle((size_t)S));
}

size_t attention_scratch_floats(int B, int S, int H, int G, int D)
{
	(void)G; /* both layouts hold every query head's rows, whatever the grouping */
	size_t cpu = rows_floats(B, S, H) + (size_t)B * S * H * D;
	size_t cuda = attention_cuda_floats(B, S, H, D);
	return cpu > cuda ? cpu : cuda;
}

/* The softmax scale as torch applies a Python float to an fp32 tensor. */
static inline float softmax_scale(int D)
{
	return (float)(1.0 / sqrt((double)D));
}

static inline float round_bf16(float x)
{
	return f32_from_bf16(bf16_from_f32(x));
}

/* out (n) = bf16(in (n)) */
static void copy_bf16(bf16 *out, const float *in, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= (size_t)POROS_CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		out[i] = bf16_from_f32(in[i]);
}

/* a (n) holds values already rounded to bf16 */
static inline float dot_bf16(const float *a, const bf16 *b, int n)
{
	float acc = 0.0f;
	for (int i = 0; i < n; i++)
		acc += a[i] * f32_from_bf16(b[i]);
	return acc;
}

/* A key's (P16, dS16) pair lives in the float that held its P; memcpy,
 * because the slot is read as a float and written as two bf16. */
static inline void pair_store(float *slot, bf16 p16, bf16 ds16)
{
	uint32_t w = (uint32_t)p16 | (uint32_t)ds16 << 16;
	memcpy(slot, &w, sizeof w);
}

static inline uint32_t pair_load(const float *slot)
{
	uint32_t w;
	memcpy(&w, slot, sizeof w);
	return w;
}

static inline float pair_p(uint32_t w)
{
	return f32_from_bf16((bf16)(w & 0xffffu));
}

static inline float pair_ds(uint32_t w)
{
	return f32_from_bf16((bf16)(w >> 16));
}

/* out (T,H*D) bf16, rows ld_out apart; lse (B,H,S), q (T,H,D), k, v
 * (T,G,D), T = B*S */
void attention_forward_cpu(bf16 *out, int ld_out, float *lse, float *scratch, const float *q, const float *k,
			   const float *v, int B, int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	int group = H / G;
	float scale = softmax_scale(D);
	size_t tokens = (size_t)B * S, head_rows = triangle((size_t)S);
	bf16 *k16 = (bf16 *)(scratch + rows_floats(B, S, H)), *v16 = k16 + tokens * G * D;

	copy_bf16(k16, k, tokens * G * D);
	copy_bf16(v16, v, tokens * G * D);
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < H; h++) {
			for (int i = 0; i < S; i++) {
				size_t row = ((size_t)b * H + h) * S + i;
				int kvh = h / group;
				const float *qi = q + (((size_t)b * S + i) * H + h) * D;
				float *p = scratch + ((size_t)b * H + h) * head_rows + triangle((size_t)i);
				float q16[D]; /* this row's q, rounded once */
				for (int d = 0; d < D; d++)
					q16[d] = round_bf16(qi[d]);
				float max = -INFINITY;
				for (int j = 0; j <= i; j++) {
					const bf16 *kj = k16 + (((size_t)b * S + j) * G + kvh) * D;
					p[j] = dot_bf16(q16, kj, D) * scale;
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
					p[j] = round_bf16(p[j] / sumf); /* P16 */
				lse[row] = (float)(max + log(sum));

				bf16 *o = out + ((size_t)b * S + i) * ld_out + (size_t)h * D;
				for (int d0 = 0; d0 < D; d0 += ATTN_D_TILE) {
					int dn = D - d0 < ATTN_D_TILE ? D - d0 : ATTN_D_TILE;
					float acc[ATTN_D_TILE] = { 0 };
					for (int j = 0; j <= i; j++) {
						const bf16 *vj = v16 + (((size_t)b * S + j) * G + kvh) * D + d0;
						for (int dd = 0; dd < dn; dd++)
							acc[dd] += p[j] * f32_from_bf16(vj[dd]);
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
 *   dv_j = sum_{h in group, i >= j} P_ij dout_i
 * dP_ij is computed twice per row (for delta, then for dS) rather than
 * stored: a row's scratch holds one float per key. */
void attention_backward_cpu(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *q,
			    const float *k, const float *v, const float *lse, int B, int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	int group = H / G;
	float scale = softmax_scale(D);
	size_t tokens = (size_t)B * S, head_rows = triangle((size_t)S);
	bf16 *copies = (bf16 *)(scratch + rows_floats(B, S, H));
	bf16 *k16 = copies, *v16 = copies + tokens * G * D;

	/* pass 1, one query row per iteration: P, dS and dq */
	copy_bf16(k16, k, tokens * G * D);
	copy_bf16(v16, v, tokens * G * D);
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < H; h++) {
			for (int i = 0; i < S; i++) {
				size_t row = ((size_t)b * H + h) * S + i;
				int kvh = h / group;
				size_t qoff = (((size_t)b * S + i) * H + h) * D;
				float *p = scratch + ((size_t)b * H + h) * head_rows + triangle((size_t)i);
				float q16[D], dout16[D]; /* this row's q and dout, rounded once */
				for (int d = 0; d < D; d++) {
					q16[d] = round_bf16(q[qoff + d]);
					dout16[d] = round_bf16(dout[qoff + d]);
				}
				double delta = 0.0;
				for (int j = 0; j <= i; j++) {
					size_t kvoff = (((size_t)b * S + j) * G + kvh) * D;
					p[j] = expf(dot_bf16(q16, k16 + kvoff, D) * scale - lse[row]);
					delta += (double)p[j] * dot_bf16(dout16, v16 + kvoff, D);
				}
				float deltaf = (float)delta;
				for (int j = 0; j <= i; j++) {
					size_t kvoff = (((size_t)b * S + j) * G + kvh) * D;
					float ds = p[j] * (dot_bf16(dout16, v16 + kvoff, D) - deltaf);
					pair_store(p + j, bf16_from_f32(p[j]), bf16_from_f32(ds));
				}
				for (int d0 = 0; d0 < D; d0 += ATTN_D_TILE) {
					int dn = D - d0 < ATTN_D_TILE ? D - d0 : ATTN_D_TILE;
					float acc[ATTN_D_TILE] = { 0 };
					for (int j = 0; j <= i; j++) {
						float ds16 = pair_ds(pair_load(p + j));
						const bf16 *kj = k16 + (((size_t)b * S + j) * G + kvh) * D + d0;
						for (int dd = 0; dd < dn; dd++)
							acc[dd] += ds16 * f32_from_bf16(kj[dd]);
					}
					for (int dd = 0; dd < dn; dd++)
						dq[qoff + d0 + dd] = scale * acc[dd];
				}
			}
		}
	}

	/* pass 2, one key row per iteration: dk and dv sum the group's query
	 * heads in order, then the query rows i = j..S-1 in order */
	bf16 *q16 = copies, *dout16 = copies + tokens * H * D;
	copy_bf16(q16, q, tokens * H * D);
	copy_bf16(dout16, dout, tokens * H * D);
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int g = 0; g < G; g++) {
			for (int j = 0; j < S; j++) {
				size_t kvoff = (((size_t)b * S + j) * G + g) * D;
				for (int d0 = 0; d0 < D; d0 += ATTN_D_TILE) {
					int dn = D - d0 < ATTN_D_TILE ? D - d0 : ATTN_D_TILE;
					float acc_k[ATTN_D_TILE] = { 0 }, acc_v[ATTN_D_TILE] = { 0 };
					for (int h = g * group; h < (g + 1) * group; h++) {
						const float *rows = scratch + ((size_t)b * H + h) * head_rows;
						for (int i = j; i < S; i++) {
							uint32_t w = pair_load(rows + triangle((size_t)i) + j);
							float p16 = pair_p(w), ds16 = pair_ds(w);
							size_t qoff = (((size_t)b * S + i) * H + h) * D + d0;
							for (int dd = 0; dd < dn; dd++) {
								acc_k[dd] += ds16 * f32_from_bf16(q16[qoff + dd]);
								acc_v[dd] += p16 * f32_from_bf16(dout16[qoff + dd]);
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
