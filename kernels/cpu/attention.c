// defines: attention_forward_cpu attention_backward_cpu
/* Causal grouped-query attention with document masks: the rounding
 * contract (ops.h, docs/numerics.md) the CUDA kernels are tested against.
 *
 * Query head h reads key/value head h / (H/G).  Token i of a row attends
 * key j of the same row iff first <= j <= i, first = i - pos[i] (pos NULL:
 * first = 0, plain causal).  Scores s_ij = scale * bf16(q_i) . bf16(k_j),
 * summed d = 0..D-1 in fp32, scale = D^-1/2, with q and k rotated (RoPE,
 * in fp32) before the rounding when the op is given the tables.
 *
 * Forward, one query row at a time: an online softmax over the key tiles
 * of ATTN_KEY_TILE keys that hold the row's keys (tile t: keys 64t..),
 * exactly the steps ops.h's contract gives, so the CUDA kernel differs
 * only in the order of its fp32 sums:
 *   m' = max(m, tile max),  p_j = e^(s_j - m'),  c = e^(m - m')
 *   l = l c + sum p_j,      acc = acc c + sum bf16(p_j) bf16(v_j)
 *   out = bf16(acc / l),    lse = m + log(l)
 * While no key of the row has been seen, m' is -inf and the exponent is
 * taken against 0 instead, so p and c are 0 (not NaN) and a tile wholly
 * before the row's first key leaves l = acc = 0: skipping it or not gives
 * the same bits.
 *
 * Backward: P_ij = e^(s_ij - lse_i), dP_ij = bf16(dout_i) . bf16(v_j),
 * delta_i = bf16(dout_i) . out_i (fp32, d ascending; the forward's bf16
 * out, so delta is rowsum_j P_ij dP_ij up to rounding without a pass over
 * the keys), dS_ij = P_ij (dP_ij - delta_i); then
 *   dq_i = scale sum_j bf16(dS_ij) k_j                  (pass 1, per query row)
 *   dk_j = scale sum_h sum_i bf16(dS_ij) q_i,  dv_j = sum_h sum_i bf16(P_ij) dout_i
 *                                                       (pass 2, per key row)
 * with heads h of the group ascending, then rows i ascending.  Both passes
 * rebuild P and dS with one function, so they agree bit for bit.
 *
 * Memory: no score square.  The scratch, carved by ops.h's
 * attention_scratch_at as CUDA's is, holds bf16 copies of q, k, v, dout,
 * read here as rows of D elements (q16, dout16 (T,H,D), k16, v16
 * (T,G,D)), and delta (B,H,S); each row works on its own stack (D
 * floats, one key tile of scores).  Parallel loops give each output row to one thread, so the
 * bits do not depend on the thread count. */
#include <math.h>

#include "ops.h"
#include "cpu_par.h"

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

static inline float dot_bf16(const bf16 *a, const bf16 *b, int n)
{
	float acc = 0.0f;
	for (int i = 0; i < n; i++)
		acc += f32_from_bf16(a[i]) * f32_from_bf16(b[i]);
	return acc;
}

/* out (T,nh,D) = bf16(the rotary embedding of in (T,nh,D)), tokens at
 * their positions' angles (ops.h, rope_forward): numerics.h's pair in
 * fp32, then one rounding. */
static void copy_rotated_bf16(bf16 *out, const float *in, const float *cos, const float *sin, const int32_t *pos,
			      int B, int S, int nh, int D)
{
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * S * nh * D >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < B * S; t++)
		for (int h = 0; h < nh; h++) {
			size_t row = ((size_t)t * nh + h) * D;
			int at = poros_rope_position(pos, S, t);
			for (int d = 0; d < D; d++)
				out[row + d] = bf16_from_f32(poros_rope_element(in + row, cos, sin, at, d, D));
		}
}

/* The call's scratch, with q (T,H,D), dout (T,H,D) unless NULL, and k, v
 * (T,G,D) rounded to bf16 into it, as both passes read them; q and k
 * rotated first when the tables are given. */
static struct attention_scratch cast_inputs(float *scratch, const float *q, const float *dout, const float *k,
					    const float *v, const float *cos, const float *sin, const int32_t *pos,
					    int B, int S, int H, int G, int D)
{
	size_t tokens = (size_t)B * S;
	struct attention_scratch c = attention_scratch_at(scratch, B, S, H, G, D);

	if (cos) {
		copy_rotated_bf16(c.q16, q, cos, sin, pos, B, S, H, D);
		copy_rotated_bf16(c.k16, k, cos, sin, pos, B, S, G, D);
	} else {
		copy_bf16(c.q16, q, tokens * H * D);
		copy_bf16(c.k16, k, tokens * G * D);
	}
	if (dout)
		copy_bf16(c.dout16, dout, tokens * H * D);
	copy_bf16(c.v16, v, tokens * G * D);
	return c;
}

/* out (T,H*D) bf16, rows ld_out apart; lse (B,H,S), q (T,H,D), k, v
 * (T,G,D), the rotary tables (S,D/2) or NULL, pos (T) or NULL, T = B*S */
void attention_forward_cpu(bf16 *out, int ld_out, float *lse, float *scratch, const float *q, const float *k,
			   const float *v, const float *rope_cos, const float *rope_sin, const int32_t *pos, int B,
			   int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	int group = H / G;
	float scale = softmax_scale(D);
	struct attention_scratch c = cast_inputs(scratch, q, NULL, k, v, rope_cos, rope_sin, pos, B, S, H, G, D);

#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < H; h++) {
			for (int i = 0; i < S; i++) {
				int g = h / group, first = poros_first_key(pos, b, S, i);
				const bf16 *qi = c.q16 + (((size_t)b * S + i) * H + h) * D;
				float acc[D], s[ATTN_KEY_TILE];
				float m = -INFINITY, l = 0.0f;
				for (int d = 0; d < D; d++)
					acc[d] = 0.0f;
				for (int t0 = first / ATTN_KEY_TILE * ATTN_KEY_TILE; t0 <= i; t0 += ATTN_KEY_TILE) {
					int n = i + 1 - t0 < ATTN_KEY_TILE ? i + 1 - t0 : ATTN_KEY_TILE;
					float tile_max = -INFINITY;
					for (int u = 0; u < n; u++) {
						int j = t0 + u;
						const bf16 *kj = c.k16 + (((size_t)b * S + j) * G + g) * D;
						s[u] = j < first ? -INFINITY : dot_bf16(qi, kj, D) * scale;
						tile_max = fmaxf(tile_max, s[u]);
					}
					float m_new = fmaxf(m, tile_max);
					float base = m_new == -INFINITY ? 0.0f : m_new;
					float c_old = expf(m - base);
					l *= c_old;
					for (int d = 0; d < D; d++)
						acc[d] *= c_old;
					for (int u = 0; u < n; u++) {
						float p = expf(s[u] - base), p16 = round_bf16(p);
						const bf16 *vj = c.v16 + (((size_t)b * S + t0 + u) * G + g) * D;
						l += p;
						for (int d = 0; d < D; d++)
							acc[d] += p16 * f32_from_bf16(vj[d]);
					}
					m = m_new;
				}
				bf16 *o = out + ((size_t)b * S + i) * ld_out + (size_t)h * D;
				for (int d = 0; d < D; d++)
					o[d] = bf16_from_f32(acc[d] / l);
				lse[((size_t)b * H + h) * S + i] = m + logf(l);
			}
		}
	}
}

/* P_ij and dS_ij of query row (b,i) of head h and key j of its group g,
 * given lse_i and delta_i: the one definition both backward passes use. */
static inline void prob_and_grad(float *p, float *ds, const struct attention_scratch *c, int b, int h, int g, int i,
				 int j, int S, int H, int G, int D, float scale, float lse_i, float delta_i)
{
	size_t qo = (((size_t)b * S + i) * H + h) * D, ko = (((size_t)b * S + j) * G + g) * D;
	*p = expf(dot_bf16(c->q16 + qo, c->k16 + ko, D) * scale - lse_i);
	*ds = *p * (dot_bf16(c->dout16 + qo, c->v16 + ko, D) - delta_i);
}

/* dq (T,H,D), dk, dv (T,G,D) written from dout (T,H*D) and the forward's
 * out (T,H*D) bf16 (rows ld_out apart), q, k, v, lse; the tables and pos
 * as in forward (dq, dk then at q, k as given: turned back through the
 * rotation at the end). */
void attention_backward_cpu(float *dq, float *dk, float *dv, float *scratch, const float *dout, const bf16 *out,
			    int ld_out, const float *q, const float *k, const float *v, const float *rope_cos,
			    const float *rope_sin, const float *lse, const int32_t *pos, int B, int S, int H, int G,
			    int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	int group = H / G;
	float scale = softmax_scale(D);
	struct attention_scratch c = cast_inputs(scratch, q, dout, k, v, rope_cos, rope_sin, pos, B, S, H, G, D);

	/* delta, one query row and head per iteration: bf16(dout_i) . out_i */
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < S; i++)
				c.delta[((size_t)b * H + h) * S + i] =
					dot_bf16(c.dout16 + (((size_t)b * S + i) * H + h) * D,
						 out + ((size_t)b * S + i) * ld_out + (size_t)h * D, D);

	/* pass 1, one query row per iteration: dq */
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < H; h++) {
			for (int i = 0; i < S; i++) {
				int g = h / group, first = poros_first_key(pos, b, S, i);
				size_t row = ((size_t)b * H + h) * S + i;
				float delta = c.delta[row], p, ds, acc[D];
				for (int d = 0; d < D; d++)
					acc[d] = 0.0f;
				for (int j = first; j <= i; j++) {
					prob_and_grad(&p, &ds, &c, b, h, g, i, j, S, H, G, D, scale, lse[row], delta);
					float ds16 = round_bf16(ds);
					const bf16 *kj = c.k16 + (((size_t)b * S + j) * G + g) * D;
					for (int d = 0; d < D; d++)
						acc[d] += ds16 * f32_from_bf16(kj[d]);
				}
				float *dqi = dq + (((size_t)b * S + i) * H + h) * D;
				for (int d = 0; d < D; d++)
					dqi[d] = scale * acc[d];
			}
		}
	}

	/* pass 2, one key row per iteration: the group's query heads in order,
	 * then the query rows that attend key j in order */
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * H * S * S * D >= POROS_CPU_PAR_MIN)
	for (int b = 0; b < B; b++) {
		for (int g = 0; g < G; g++) {
			for (int j = 0; j < S; j++) {
				float acc_k[D], acc_v[D], p, ds;
				for (int d = 0; d < D; d++)
					acc_k[d] = acc_v[d] = 0.0f;
				for (int h = g * group; h < (g + 1) * group; h++) {
					for (int i = j; i < S; i++) {
						if (j < poros_first_key(pos, b, S, i))
							continue;
						size_t row = ((size_t)b * H + h) * S + i;
						prob_and_grad(&p, &ds, &c, b, h, g, i, j, S, H, G, D, scale, lse[row],
							      c.delta[row]);
						float p16 = round_bf16(p), ds16 = round_bf16(ds);
						size_t qo = (((size_t)b * S + i) * H + h) * D;
						for (int d = 0; d < D; d++) {
							acc_k[d] += ds16 * f32_from_bf16(c.q16[qo + d]);
							acc_v[d] += p16 * f32_from_bf16(c.dout16[qo + d]);
						}
					}
				}
				size_t kvo = (((size_t)b * S + j) * G + g) * D;
				for (int d = 0; d < D; d++) {
					dk[kvo + d] = scale * acc_k[d];
					dv[kvo + d] = acc_v[d];
				}
			}
		}
	}
	if (rope_cos) { /* the gradients at the unrotated q and k */
		rope_backward_cpu(dq, rope_cos, rope_sin, pos, B, S, H, D);
		rope_backward_cpu(dk, rope_cos, rope_sin, pos, B, S, G, D);
	}
}
