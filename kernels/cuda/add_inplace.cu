// defines: add_inplace_cuda, add_inplace_kernel
//
// a (n) += b (n): residual adds and gradient sums.  Memory-bound; float4
// when both pointers are 16-byte aligned, then the scalar tail.
#include "common.cuh"

#define ADD_THREADS 256

__global__ void add_inplace_kernel(float *a, const float *b, long n, bool vec4)
{
	long stride = (long)gridDim.x * blockDim.x;
	long i0 = (long)blockIdx.x * blockDim.x + threadIdx.x;
	long done = 0;
	if (vec4) {
		long n4 = n / 4;
		for (long i = i0; i < n4; i += stride) {
			float4 x = ((float4 *)a)[i], y = ((const float4 *)b)[i];
			x.x += y.x;
			x.y += y.y;
			x.z += y.z;
			x.w += y.w;
			((float4 *)a)[i] = x;
		}
		done = n4 * 4;
	}
	for (long i = done + i0; i < n; i += stride)
		a[i] += b[i];
}

extern "C" void add_inplace_cuda(float *a, const float *b, long n)
{
	if (n <= 0)
		return;
	bool vec4 = aligned16(a) && aligned16(b);
	add_inplace_kernel<<<grid_for(vec4 ? (n + 3) / 4 : n, ADD_THREADS), ADD_THREADS, 0,
	                     poros_cuda_compute_stream()>>>(a, b, n, vec4);
	launchCheck();
}
