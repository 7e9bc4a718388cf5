/* tests/ops/matmul_case.h: the device side of a matmul_forward,
 * matmul_forward_bf16 or matmul_backward_input case, a forward case's
 * operands and a GEMM case's end. */
#ifndef POROS_OPS_MATMUL_CASE_H
#define POROS_OPS_MATMUL_CASE_H

#include "cuda_check.h"

struct matmul_args {
	void *out; /* out (forward: fp32, or bf16) or din (backward, fp32) */
	const bf16 *in, *weight, *bias; /* in: in (forward) or dout (backward) */
	int ld_in, ld_w; /* ld_in: rows of in (forward) or dout (backward) */
	int T, K, N, accumulate;
};

/* The end of a GEMM case: its one output (fp32, or bf16) against the
 * CPU's (no NaN there: the CPU read no pad) at GEMM_A_REL, and the GPU's
 * throughput.  A bf16 output is each side's fp32 sum rounded once, half
 * an ulp either way: where the two sums straddle a rounding boundary the
 * results are one bf16 ulp apart, BF16_ULP_REL on top of GEMM_RTOL. */
static inline void matmul_case_end(struct gpu_case *c, const char *name, const void *ref, size_t n, int is_bf16,
                                   int T, int K, int N)
{
	check_ref_finite(c, name, ref, n, is_bf16);
	check(c, name, ref, n, is_bf16, GEMM_A_REL, GEMM_RTOL + (is_bf16 ? BF16_ULP_REL : 0.0));
	printf("    %.1f TFLOP/s\n", 2.0 * T * K * N / (c->gpu_ms * 1e-3) / 1e12);
	case_end(c);
}

/* A forward case's operands: in (T,K) and weight (N,K) uniform in [-1,1]
 * in buffers of rows ld_in and ld_w apart whose pad columns hold NaN (one
 * read of them makes NaN of a whole output row or column), on the host
 * (*in, *w) and on the device (a's in and weight, the rest of a set but
 * out, bias and accumulate). */
static inline void matmul_fwd_operands(struct matmul_args *a, bf16 **in, bf16 **w, int T, int K, int N, int ld_in,
                                       int ld_w)
{
	bf16 *in0 = rand_bf16((size_t)T * K, -1, 1), *w0 = rand_bf16((size_t)N * K, -1, 1);
	*in = pitched_copy(in0, (size_t)T, (size_t)K, (size_t)ld_in, 2);
	*w = pitched_copy(w0, (size_t)N, (size_t)K, (size_t)ld_w, 2);
	*a = (struct matmul_args){ NULL, dev_from(*in, (size_t)T * ld_in * 2, 0), dev_from(*w, (size_t)N * ld_w * 2, 0),
	                           NULL, ld_in, ld_w, T, K, N, 0 };
}

#endif
