// defines: add_inplace_cuda, add_inplace_kernel
//
// a (n) += b (n): residual adds and gradient sums.  Memory-bound; float4
// when both pointers are 16-byte aligned, then the scalar tail.
#include "common.cuh"

#define ADD_THREADS 256

__global__ void add_inplace_kernel(float *a, const float *b, long n, bool vec4)
{
	flat_elementwise(
		n, vec4,
		[&](long i) {
			float4 x = ((float4 *)a)[i], y = ((const float4 *)b)[i];
			x.x += y.x;
			x.y += y.y;
			x.z += y.z;
			x.w += y.w;
			((float4 *)a)[i] = x;
		},
		[&](long i) { a[i] += b[i]; });
}

extern "C" void add_inplace_cuda(float *a, const float *b, long n)
{
	if (n <= 0)
		return;
	bool vec4 = aligned16(a) && aligned16(b);
	cudaStream_t stream = poros_cuda_compute_stream();
	add_inplace_kernel<<<flat_grid(n, vec4, ADD_THREADS), ADD_THREADS, 0, stream>>>(a, b, n, vec4);
	launchCheck();
}
