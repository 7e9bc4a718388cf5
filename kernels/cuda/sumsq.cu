// defines: sumsq_cuda, sumsq_partial_kernel, sumsq_final_kernel
//
// out[0] = sum of x^2 (the gradient norm for clipping), deterministic in
// two levels and without float atomics: (1) SUMSQ_BLOCKS(n) blocks each
// sum a fixed grid-stride subset into scratch[block]; (2) one block sums
// the partials in a fixed tree.  The block count depends on n only, never
// on the device, so the bits are the same on every GPU.
#include "common.cuh"

#define SUMSQ_THREADS 256
// At most this many partials: sumsq_scratch_floats() (kernels/cpu/sumsq.c)
// gives 4096 floats, and one final block of SUMSQ_MAX_BLOCKS threads adds
// one partial per thread.
#define SUMSQ_MAX_BLOCKS 1024

// scratch (gridDim.x) partial sums of x (n); vec4: x 16-byte aligned.
__global__ void sumsq_partial_kernel(float *scratch, const float *x, long n, bool vec4)
{
	long stride = (long)gridDim.x * blockDim.x;
	long i0 = (long)blockIdx.x * blockDim.x + threadIdx.x;
	// groups of four on both paths, then the tail: alignment changes the
	// loads, never the order; fused multiply-adds spelled out for the same
	// reason
	long n4 = n / 4;
	float s = 0.0f;
	for (long i = i0; i < n4; i += stride) {
		float4 v = load4(x + 4 * i, vec4);
		s = __fmaf_rn(v.x, v.x, s);
		s = __fmaf_rn(v.y, v.y, s);
		s = __fmaf_rn(v.z, v.z, s);
		s = __fmaf_rn(v.w, v.w, s);
	}
	for (long i = n4 * 4 + i0; i < n; i += stride)
		s = __fmaf_rn(x[i], x[i], s);
	s = block_sum(s);
	if (threadIdx.x == 0)
		scratch[blockIdx.x] = s;
}

// out[0] = sum of scratch (parts); one block of SUMSQ_MAX_BLOCKS threads.
__global__ void sumsq_final_kernel(float *out, const float *scratch, int parts)
{
	float s = threadIdx.x < parts ? scratch[threadIdx.x] : 0.0f;
	s = block_sum(s);
	if (threadIdx.x == 0)
		out[0] = s;
}

extern "C" void sumsq_cuda(float *out, float *scratch, const float *x, long n)
{
	cudaStream_t stream = poros_cuda_compute_stream();
	bool vec4 = aligned16(x);
	// about 8 groups of four per thread before the block count caps; a
	// function of n only, so alignment cannot change the partition
	long per_block = (long)SUMSQ_THREADS * 32;
	long blocks = (n + per_block - 1) / per_block;
	if (blocks < 1)
		blocks = 1;
	if (blocks > SUMSQ_MAX_BLOCKS)
		blocks = SUMSQ_MAX_BLOCKS;
	sumsq_partial_kernel<<<(unsigned)blocks, SUMSQ_THREADS, 0, stream>>>(scratch, x, n > 0 ? n : 0, vec4);
	launchCheck();
	sumsq_final_kernel<<<1, SUMSQ_MAX_BLOCKS, 0, stream>>>(out, scratch, (int)blocks);
	launchCheck();
}
