// defines: matmul_forward_cuda, matmul_forward_bf16_cuda, matmul_backward_input_cuda,
//          add_bias_kernel
//
// The base-weight linear layers: bf16 inputs and weights, fp32 outputs
// (bf16 for the gate and up projections), fp32 accumulation on the tensor
// cores through cuBLASLt (gemm.cu), one algorithm a shape, that of one
// micro-batch's rows for a multiple of them: a row gets the same bits in a
// call over one micro-batch or several.
#include "common.cuh"

#define BIAS_THREADS 256

// out (T,N) += bias (N), broadcast over rows.
__global__ void add_bias_kernel(float *out, const bf16 *bias, long total, int N)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x)
		out[i] += bf16_to_f32(bias[i % N]);
}

// out (T,N) = in (T,K) @ weight^T + bias; weight (N,K), bias (N) or NULL;
// accumulate: out = (out + in @ weight^T) + bias, the old out read in the
// GEMM's epilogue (beta = 1), where a compute-bound GEMM hides it.  Rows
// of in are ld_in apart, rows of weight ld_w (the LoRA extension's room);
// out is contiguous.
// Column-major view: out^T (N,T) = weight_cm^T (N,K) @ in_cm (K,T), where
// weight_cm is weight read as a (K,N) column-major matrix (ld ld_w) and
// in_cm is in read as (K,T) (ld ld_in): the "TN" GEMM, cuBLAS's fastest
// layout.  The pitches are cuBLAS's leading dimensions, so a pitch costs
// nothing; a pitch that is not a multiple of 8 (16 bytes of bf16) only
// narrows cuBLAS's choice of kernels.
extern "C" void matmul_forward_cuda(float *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w,
                                    const bf16 *bias, int T, int K, int N, int accumulate)
{
	if (T <= 0 || N <= 0)
		return;
	check_pitch("matmul_forward_cuda", "ld_in", ld_in, K);
	check_pitch("matmul_forward_cuda", "ld_w", ld_w, K);
	gemm(CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, 1.0f, weight, ld_w, in, ld_in, accumulate ? 1.0f : 0.0f, out, N);
	if (bias) {
		long total = (long)T * N;
		add_bias_kernel<<<grid_for(total, BIAS_THREADS), BIAS_THREADS, 0, poros_cuda_compute_stream()>>>(
			out, bias, total, N);
		launchCheck();
	}
}

// out (T,N) bf16 = bf16(in (T,K) @ weight^T), no bias: matmul_forward_cuda's
// GEMM with a bf16 C, so the fp32 sum is rounded once in the epilogue and
// the (T,N) output is written in half the bytes.
extern "C" void matmul_forward_bf16_cuda(bf16 *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w, int T,
                                         int K, int N)
{
	if (T <= 0 || N <= 0)
		return;
	check_pitch("matmul_forward_bf16_cuda", "ld_in", ld_in, K);
	check_pitch("matmul_forward_bf16_cuda", "ld_w", ld_w, K);
	gemm(CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, 1.0f, weight, ld_w, in, ld_in, 0.0f, out, N);
}

// din (T,K) = dout (T,N) @ weight (N,K), or += when accumulate; rows of
// dout ld_dout apart, rows of weight ld_w; din contiguous.
// Column-major view: din^T (K,T) = weight_cm (K,N) @ dout_cm (N,T), with
// leading dimensions ld_w and ld_dout.
extern "C" void matmul_backward_input_cuda(float *din, const bf16 *dout, int ld_dout, const bf16 *weight, int ld_w,
                                           int T, int K, int N, int accumulate)
{
	if (T <= 0 || K <= 0)
		return;
	check_pitch("matmul_backward_input_cuda", "ld_dout", ld_dout, N);
	check_pitch("matmul_backward_input_cuda", "ld_w", ld_w, K);
	gemm(CUBLAS_OP_N, CUBLAS_OP_N, K, T, N, 1.0f, weight, ld_w, dout, ld_dout, accumulate ? 1.0f : 0.0f,
	     din, K);
}
