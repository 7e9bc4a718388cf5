/* tests/ops/lora_case.h: the device side of a lora_forward or lora_backward
 * case, and the model shapes both run. */
#ifndef POROS_OPS_LORA_CASE_H
#define POROS_OPS_LORA_CASE_H

#include "cuda_check.h"

struct lora_case {
	float *out, *u, *din, *dA, *dB, *du, *scratch;
	const float *u_in, *A, *B;
	const bf16 *in, *dout;
	float scale, p;
	uint64_t seed;
	int T, K, N, R, accumulate;
};

/* The inputs both directions read: in (T,K) bf16, A (R,K), B (N,R) on the
 * device, and the op's scalars. */
static inline void lora_case_inputs(struct lora_case *a, const bf16 *in, const float *A, const float *B, float scale,
                                    float p, uint64_t seed, int T, int K, int N, int R)
{
	a->in = dev_from(in, (size_t)T * K * 2, 0);
	a->A = dev_from(A, (size_t)R * K * 4, 0);
	a->B = dev_from(B, (size_t)N * R * 4, 0);
	a->scale = scale;
	a->p = p;
	a->seed = seed;
	a->T = T, a->K = K, a->N = N, a->R = R;
}

/* A 7B-class layer's projections (Qwen2.5-7B: C = 3584, 4 key/value heads
 * of 128, F = 18944) as (K, N): q and o, k and v, gate and up, down; the
 * token counts and ranks of the small-T cases. */
static const int lora_proj_shapes[4][2] = { { 3584, 3584 }, { 3584, 512 }, { 3584, 18944 }, { 18944, 3584 } };
static const int lora_small_t[3] = { 1, 24, 200 };
static const int lora_ranks[3] = { 8, 16, 64 };

#endif
