// defines: matmul_forward_cpu matmul_forward_bf16_cpu matmul_backward_input_cpu
/* The base-weight GEMMs: bf16 operands, fp32 accumulation in a fixed order
 * (k = 0..K-1 for the forward, n = 0..N-1 for the input gradient), one
 * thread per output row, so the bits do not depend on the thread count.
 * Both loops run innermost over contiguous memory of both operands.  Rows
 * of the bf16 operands are a pitch (ld) apart, so a GEMM can read the
 * first K (or N) columns of a wider buffer, e.g. one with the LoRA
 * extension (ops.h); columns past K (N) are never read. */
#include "ops.h"
#include "cpu_par.h"

/* Columns of din accumulated together on the stack in the backward. */
#define MATMUL_K_TILE 256

/* The forward's fp32 sum of one output, x (K) . w (K) in order k = 0..K-1:
 * both forwards take it from here, so the bf16 one is the fp32 one rounded. */
static inline float matmul_dot(const bf16 *x, const bf16 *w, int K)
{
	float acc = 0.0f;
	for (int k = 0; k < K; k++)
		acc += f32_from_bf16(x[k]) * f32_from_bf16(w[k]);
	return acc;
}

/* out (T,N) = in (T,K) @ weight^T + bias; in rows ld_in apart, weight (N,K)
 * rows ld_w apart, bias (N) or NULL; out contiguous.  accumulate != 0:
 * out = (out + product) + bias, the order of the CUDA backend's GEMM with
 * beta = 1 and its bias pass */
void matmul_forward_cpu(float *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w, const bf16 *bias, int T,
			int K, int N, int accumulate)
{
#pragma omp parallel for collapse(2) schedule(static) if ((long)T * N * K >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		for (int n = 0; n < N; n++) {
			float acc = matmul_dot(in + (size_t)t * ld_in, weight + (size_t)n * ld_w, K);
			float *o = out + (size_t)t * N + n;
			if (accumulate)
				acc = *o + acc;
			/* bias after the product, as addmm (beta * bias) does */
			*o = bias ? acc + f32_from_bf16(bias[n]) : acc;
		}
	}
}

/* out (T,N) bf16 = bf16(in (T,K) @ weight^T), the sum matmul_forward_cpu
 * forms (no bias) rounded once to nearest even, as cuBLAS rounds its fp32
 * accumulator into a bf16 C; in rows ld_in apart, weight rows ld_w apart,
 * out contiguous */
void matmul_forward_bf16_cpu(bf16 *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w, int T, int K, int N)
{
#pragma omp parallel for collapse(2) schedule(static) if ((long)T * N * K >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++)
			out[(size_t)t * N + n] =
				bf16_from_f32(matmul_dot(in + (size_t)t * ld_in, weight + (size_t)n * ld_w, K));
}

/* din (T,K) = dout (T,N) @ weight (N,K), or += when accumulate != 0 (the
 * product is formed first and then added, as GEMM with beta = 1 does);
 * dout rows ld_dout apart, weight rows ld_w apart, din contiguous. */
void matmul_backward_input_cpu(float *din, const bf16 *dout, int ld_dout, const bf16 *weight, int ld_w, int T, int K,
			       int N, int accumulate)
{
	int k_tiles = (K + MATMUL_K_TILE - 1) / MATMUL_K_TILE;
#pragma omp parallel for collapse(2) schedule(static) if ((long)T * N * K >= POROS_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		for (int kt = 0; kt < k_tiles; kt++) {
			int k0 = kt * MATMUL_K_TILE;
			int kn = K - k0 < MATMUL_K_TILE ? K - k0 : MATMUL_K_TILE;
			float acc[MATMUL_K_TILE] = { 0 };
			for (int n = 0; n < N; n++) {
				float g = f32_from_bf16(dout[(size_t)t * ld_dout + n]);
				const bf16 *w = weight + (size_t)n * ld_w + k0;
				for (int kk = 0; kk < kn; kk++)
					acc[kk] += g * f32_from_bf16(w[kk]);
			}
			float *d = din + (size_t)t * K + k0;
			for (int kk = 0; kk < kn; kk++)
				d[kk] = accumulate ? d[kk] + acc[kk] : acc[kk];
		}
	}
}
