// defines: cast_f32_to_bf16_cuda, cast_f32_to_bf16_kernel
//
// out (n) = bf16(in (n)), round to nearest even with ops.h's bit recipe, so
// the bits equal the CPU's for every input, NaN included.  float4 loads and
// 8-byte stores when aligned, then the scalar tail.
#include "common.cuh"

#define CAST_THREADS 256

__global__ void cast_f32_to_bf16_kernel(bf16 *out, const float *in, long n, bool vec4)
{
	long stride = (long)gridDim.x * blockDim.x;
	long i0 = (long)blockIdx.x * blockDim.x + threadIdx.x;
	long done = 0;
	if (vec4) {
		long n4 = n / 4;
		for (long i = i0; i < n4; i += stride) {
			float4 x = ((const float4 *)in)[i];
			((uint2 *)out)[i] = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
		}
		done = n4 * 4;
	}
	for (long i = done + i0; i < n; i += stride)
		out[i] = f32_to_bf16(in[i]);
}

extern "C" void cast_f32_to_bf16_cuda(bf16 *out, const float *in, long n)
{
	if (n <= 0)
		return;
	bool vec4 = aligned16(in) && ((uintptr_t)out & 7u) == 0;
	cast_f32_to_bf16_kernel<<<grid_for(vec4 ? (n + 3) / 4 : n, CAST_THREADS), CAST_THREADS, 0,
	                          poros_cuda_compute_stream()>>>(out, in, n, vec4);
	launchCheck();
}
