// defines: lora_forward_cpu lora_backward_cpu lora_weight_ext_cpu
/* A LoRA adapter beside a frozen linear, as PEFT computes it:
 *   out = (dropout(x) @ A^T @ B^T) * scale, then the base GEMM adds onto it
 * x is the bf16 input of the base GEMM and dout, in backward, the bf16
 * upstream gradient; A, B and every product are fp32.
 * Dropout keeps element (t,k) iff poros_dropout_keep(seed, t*K+k, p) and
 * scales kept ones by 1/(1-p); backward recomputes the mask from the seed
 * rather than storing it.  Every sum runs in a fixed order and each output
 * element belongs to one thread, so the bits do not depend on the thread
 * count.  Stack tiles bound the per-thread accumulators whatever R and K. */
#include <stdio.h>

#include "ops.h"
#include "cpu_par.h"

#define LORA_TILE 64   /* columns of an accumulator row kept on the stack */
#define LORA_R_TILE 16 /* rows of A whose gradient shares one dropout mask pass */

/* The input element (t,k) after dropout; rows of in are ld apart, the
 * mask index is t*K + k whatever the pitch. */
static inline float dropped_input(const bf16 *in, int ld, float p, float keep_scale, uint64_t seed, int t, int k,
				  int K)
{
	return poros_dropped(f32_from_bf16(in[(size_t)t * ld + k]), seed, (uint64_t)t * K + k, p, keep_scale);
}

static inline int min_int(int a, int b)
{
	return a < b ? a : b;
}

/* The activation side of the LoRA extension (ops.h) of row t: ext (E)
 * from v (R), u's or du's row; with_one puts the 1 that meets the bias. */
static void ext_row(bf16 *ext, const float *v, int R, int with_one)
{
	int E = lora_ext_cols(R);

	for (int r = 0; r < R; r++)
		lora_ext_put(ext, v[r], r, R);
	for (int c = 9 * R; c < E; c++)
		ext[c] = 0;
	if (with_one)
		ext[9 * R] = bf16_from_f32(1.0f);
}

/* u (T,R) = xd @ A^T (saved), where in (T,K) bf16 (rows ld_in apart), A
 * (R,K); then out (T,N) = scale * u @ B^T with B (N,R), or u's extension
 * parts into ext.  The CPU hashes the mask tile by tile and sums A in
 * fp32 itself: it reads none of the hints (scratch, A3). */
void lora_forward_cpu(const struct lora_fwd_args *args)
{
	float *out = args->out, *u = args->u;
	bf16 *ext = args->ext;
	const bf16 *in = args->in;
	const float *A = args->A, *B = args->B;
	float scale = args->scale, dropout_p = args->dropout_p;
	uint64_t dropout_seed = args->dropout_seed;
	int ld_in = args->ld_in, T = args->T, K = args->K, N = args->N, R = args->R;
	float keep_scale = poros_dropout_keep_scale(dropout_p);
#pragma omp parallel for schedule(static) if ((long)T * K * R >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		float *ut = u + (size_t)t * R;
		for (int r = 0; r < R; r++)
			ut[r] = 0.0f;
		/* one tile of the dropped input at a time, so each mask bit is
		 * hashed once; every u[t][r] still sums k = 0..K-1 in order */
		for (int k0 = 0; k0 < K; k0 += LORA_TILE) {
			int kn = min_int(LORA_TILE, K - k0);
			float xd[LORA_TILE];
			for (int kk = 0; kk < kn; kk++)
				xd[kk] = dropped_input(in, ld_in, dropout_p, keep_scale, dropout_seed, t, k0 + kk, K);
			for (int r = 0; r < R; r++) {
				const float *a = A + (size_t)r * K + k0;
				float acc = ut[r];
				for (int kk = 0; kk < kn; kk++)
					acc += xd[kk] * a[kk];
				ut[r] = acc;
			}
		}
		if (ext) {
			ext_row(ext + (size_t)t * ld_in, ut, R, 1);
			continue;
		}
		for (int n = 0; out && n < N; n++) {
			const float *b = B + (size_t)n * R;
			float acc = 0.0f;
			for (int r = 0; r < R; r++)
				acc += ut[r] * b[r];
			/* PEFT: lora_B(lora_A(x)) * scaling; the base GEMM adds */
			out[(size_t)t * N + n] = acc * scale;
		}
	}
}

/* Given dout (T,N) bf16 (rows ld_dout apart):
 *   du (T,R)  = scale * dout @ B            (written; scratch for the next two)
 *   dB (N,R) += scale * dout^T @ u
 *   dA (R,K) += du^T @ xd
 *   din (T,K) = (du @ A) * keep / (1-p), or += when accumulate (skipped
 *               when din is NULL; a dropped element gets 0, or keeps its
 *               value), or du's extension parts into ext (no dropout)
 * The CPU sums B in fp32 itself: it reads none of the hints (scratch, B3). */
void lora_backward_cpu(const struct lora_bwd_args *args)
{
	float *din = args->din, *dA = args->dA, *dB = args->dB, *du = args->du;
	bf16 *ext = args->ext;
	const bf16 *dout = args->dout, *in = args->in;
	const float *u = args->u, *A = args->A, *B = args->B;
	float scale = args->scale, dropout_p = args->dropout_p;
	uint64_t dropout_seed = args->dropout_seed;
	int ld_dout = args->ld_dout, ld_in = args->ld_in, T = args->T, K = args->K, N = args->N, R = args->R;
	int accumulate = args->accumulate, segs = args->segs > 1 ? args->segs : 1, rows = T / segs;
	long stride = args->seg_stride;
	float keep_scale = poros_dropout_keep_scale(dropout_p);

	if (segs > 1 && dropout_p != 0.0f) { /* one seed cannot draw each micro-batch's mask */
		fprintf(stderr, "lora_backward_cpu: a group of %d takes no dropout (p = %g)\n", segs, dropout_p);
		exit(1);
	}
	int r_tiles = (R + LORA_TILE - 1) / LORA_TILE;
	int k_tiles = (K + LORA_TILE - 1) / LORA_TILE;
	int ra_tiles = (R + LORA_R_TILE - 1) / LORA_R_TILE;

	/* du: sums over n = 0..N-1, rows of B read contiguously */
#pragma omp parallel for collapse(2) schedule(static) if ((long)T * N * R >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		for (int rt = 0; rt < r_tiles; rt++) {
			int r0 = rt * LORA_TILE, rn = min_int(LORA_TILE, R - r0);
			float acc[LORA_TILE] = { 0 };
			for (int n = 0; n < N; n++) {
				float g = f32_from_bf16(dout[(size_t)t * ld_dout + n]);
				const float *b = B + (size_t)n * R + r0;
				for (int rr = 0; rr < rn; rr++)
					acc[rr] += g * b[rr];
			}
			for (int rr = 0; rr < rn; rr++)
				du[(size_t)t * R + r0 + rr] = scale * acc[rr];
		}
	}

	/* dB: sums over a segment's t (0..T-1 unless a group), rows of u read contiguously */
	for (int sg = 0; sg < segs; sg++) {
		float *dBs = dB + sg * stride;
		int t_lo = sg * rows, t_hi = t_lo + rows;
#pragma omp parallel for collapse(2) schedule(static) if ((long)N * rows * R >= POROS_CPU_PAR_MIN)
		for (int n = 0; n < N; n++) {
			for (int rt = 0; rt < r_tiles; rt++) {
				int r0 = rt * LORA_TILE, rn = min_int(LORA_TILE, R - r0);
				float acc[LORA_TILE] = { 0 };
				for (int t = t_lo; t < t_hi; t++) {
					float g = f32_from_bf16(dout[(size_t)t * ld_dout + n]);
					const float *ut = u + (size_t)t * R + r0;
					for (int rr = 0; rr < rn; rr++)
						acc[rr] += g * ut[rr];
				}
				for (int rr = 0; rr < rn; rr++)
					dBs[(size_t)n * R + r0 + rr] += scale * acc[rr];
			}
		}
	}

	/* dA: sums over a segment's t; a tile of xd is hashed once per t and
	 * used for LORA_R_TILE rows of A */
	for (int sg = 0; sg < segs; sg++) {
		float *dAs = dA + sg * stride;
		int t_lo = sg * rows, t_hi = t_lo + rows;
#pragma omp parallel for collapse(2) schedule(static) if ((long)R * K * rows >= POROS_CPU_PAR_MIN)
		for (int rt = 0; rt < ra_tiles; rt++) {
			for (int kt = 0; kt < k_tiles; kt++) {
				int r0 = rt * LORA_R_TILE, rn = min_int(LORA_R_TILE, R - r0);
				int k0 = kt * LORA_TILE, kn = min_int(LORA_TILE, K - k0);
				float acc[LORA_R_TILE][LORA_TILE] = { { 0 } };
				for (int t = t_lo; t < t_hi; t++) {
					float xd[LORA_TILE];
					for (int kk = 0; kk < kn; kk++)
						xd[kk] = dropped_input(in, ld_in, dropout_p, keep_scale, dropout_seed, t, k0 + kk, K);
					for (int rr = 0; rr < rn; rr++) {
						float g = du[(size_t)t * R + r0 + rr];
						for (int kk = 0; kk < kn; kk++)
							acc[rr][kk] += g * xd[kk];
					}
				}
				for (int rr = 0; rr < rn; rr++)
					for (int kk = 0; kk < kn; kk++)
						dAs[(size_t)(r0 + rr) * K + k0 + kk] += acc[rr][kk];
			}
		}
	}

	if (ext) {
		for (int t = 0; t < T; t++)
			ext_row(ext + (size_t)t * ld_dout, du + (size_t)t * R, R, 0);
		return;
	}
	if (!din)
		return;
	/* din: sums over r = 0..R-1, rows of A read contiguously; the dropout
	 * mask and scale apply to the finished sum, as autograd does */
#pragma omp parallel for collapse(2) schedule(static) if ((long)T * K * R >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		for (int kt = 0; kt < k_tiles; kt++) {
			int k0 = kt * LORA_TILE, kn = min_int(LORA_TILE, K - k0);
			float acc[LORA_TILE] = { 0 };
			for (int r = 0; r < R; r++) {
				float g = du[(size_t)t * R + r];
				const float *a = A + (size_t)r * K + k0;
				for (int kk = 0; kk < kn; kk++)
					acc[kk] += g * a[kk];
			}
			float *d = din + (size_t)t * K + k0;
			for (int kk = 0; kk < kn; kk++) {
				float prev = accumulate ? d[kk] : 0.0f;
				if (dropout_p == 0.0f)
					d[kk] = prev + acc[kk];
				else if (poros_dropout_keep(dropout_seed, (uint64_t)t * K + k0 + kk, dropout_p))
					d[kk] = prev + acc[kk] * keep_scale;
				else
					d[kk] = prev;
			}
		}
	}
}

/* The weight side of the LoRA extension (ops.h): columns K.. of rows 0..N-1
 * from scale*B and the bias, rows N.. of columns 0..K-1 from A. */
void lora_weight_ext_cpu(bf16 *w, int ld_w, const float *A, const float *B, const bf16 *bias, float scale, int K,
			 int N, int R)
{
	int E = lora_ext_cols(R);

#pragma omp parallel for schedule(static) if ((long)N * E >= POROS_CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		bf16 *row = w + (size_t)n * ld_w + K;
		for (int c = 0; c < 9 * R; c++)
			row[c] = lora_ext_weight_at(scale * B[(size_t)n * R + c % R], c, R);
		for (int c = 9 * R; c < E; c++)
			row[c] = 0;
		if (bias)
			row[9 * R] = bias[n];
	}
#pragma omp parallel for schedule(static) if ((long)E * K >= POROS_CPU_PAR_MIN)
	for (int c = 0; c < E; c++) {
		bf16 *row = w + (size_t)(N + c) * ld_w;
		for (int k = 0; k < K; k++)
			row[k] = c < 9 * R ? lora_ext_weight_at(A[(size_t)(c % R) * K + k], c, R) : 0;
	}
}
