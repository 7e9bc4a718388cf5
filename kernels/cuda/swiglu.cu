// defines: swiglu_forward_cuda, swiglu_backward_cuda,
//          swiglu_forward_kernel, swiglu_backward_kernel
//
// The SwiGLU gate: out = silu(gate) * up, silu(g) = g / (1 + e^-g), in the
// CPU's operation order (expf, not the fast __expf).  Elementwise and
// memory-bound: float4 loads where the pointers allow.
#include "common.cuh"

#define SWIGLU_THREADS 256

__device__ __forceinline__ float silu_times(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

// out (n) bf16 = silu(gate) * up; gate, up (n).  vec4: every base is
// 16-byte aligned (out: 8-byte), the first n/4*4 elements go four at a time.
__global__ void swiglu_forward_kernel(bf16 *out, const float *gate, const float *up, long n, bool vec4)
{
	long stride = (long)gridDim.x * blockDim.x;
	long i0 = (long)blockIdx.x * blockDim.x + threadIdx.x;
	long done = 0;
	if (vec4) {
		long n4 = n / 4;
		for (long i = i0; i < n4; i += stride) {
			float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
			((uint2 *)out)[i] = make_uint2(pack_bf16x2(silu_times(g.x, u.x), silu_times(g.y, u.y)),
			                               pack_bf16x2(silu_times(g.z, u.z), silu_times(g.w, u.w)));
		}
		done = n4 * 4;
	}
	for (long i = done + i0; i < n; i += stride)
		out[i] = f32_to_bf16(silu_times(gate[i], up[i]));
}

extern "C" void swiglu_forward_cuda(bf16 *out, const float *gate, const float *up, long n)
{
	if (n <= 0)
		return;
	bool vec4 = aligned16(gate) && aligned16(up) && ((uintptr_t)out & 7u) == 0;
	swiglu_forward_kernel<<<grid_for(vec4 ? (n + 3) / 4 : n, SWIGLU_THREADS), SWIGLU_THREADS, 0,
	                        poros_cuda_compute_stream()>>>(out, gate, up, n, vec4);
	launchCheck();
}

// dup = dout * silu(g);  dgate = dout * up * sig(g) * (1 + g (1 - sig(g)))
__global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dout, const float *gate,
                                       const float *up, long n)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float g = gate[i];
		float denom = 1.0f + expf(-g);
		float sig = 1.0f / denom;
		float silu = g / denom;
		float dy = dout[i];
		dup[i] = dy * silu;
		dgate[i] = dy * up[i] * (sig * (1.0f + g * (1.0f - sig)));
	}
}

extern "C" void swiglu_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                     long n)
{
	if (n <= 0)
		return;
	swiglu_backward_kernel<<<grid_for(n, SWIGLU_THREADS), SWIGLU_THREADS, 0, poros_cuda_compute_stream()>>>(
		dgate, dup, dout, gate, up, n);
	launchCheck();
}
