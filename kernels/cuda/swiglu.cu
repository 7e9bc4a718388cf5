// defines: swiglu_forward_cuda, swiglu_backward_cuda,
//          swiglu_forward_kernel, swiglu_backward_kernel,
//          swiglu_forward_rows_kernel, swiglu_backward_rows_kernel
//
// The SwiGLU gate: out = silu(gate) * up, silu(g) = g / (1 + e^-g), in the
// CPU's operation order (expf, not the fast __expf).  Elementwise and
// memory-bound: float4 loads where the pointers allow.  The inputs are
// (T,F) contiguous; the bf16 outputs' rows are a pitch apart (the next
// GEMM's input, with room for its LoRA extension).  With the pitch equal to
// F the outputs are contiguous too and the flat kernels run; otherwise the
// row kernels, four elements at a time when every row starts aligned, and
// never past a row's F.
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
	flat_elementwise(
		n, vec4,
		[&](long i) {
			float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
			((uint2 *)out)[i] = make_uint2(pack_bf16x2(silu_times(g.x, u.x), silu_times(g.y, u.y)),
			                               pack_bf16x2(silu_times(g.z, u.z), silu_times(g.w, u.w)));
		},
		[&](long i) { out[i] = f32_to_bf16(silu_times(gate[i], up[i])); });
}

// out (T,F) rows ld_out apart; gate, up (T,F).  vec4: F and ld_out
// multiples of 4, the fp32 bases 16-byte aligned, out 8.
__global__ void swiglu_forward_rows_kernel(bf16 *out, long ld_out, const float *gate, const float *up, long T,
                                           long F, bool vec4)
{
	rows_elementwise(T, F, vec4, [&](long t, long f) {
		long e = t * F + f;
		bf16 *y = out + t * ld_out + f;
		if (vec4) {
			float4 g = *(const float4 *)(gate + e), u = *(const float4 *)(up + e);
			*(uint2 *)y = make_uint2(pack_bf16x2(silu_times(g.x, u.x), silu_times(g.y, u.y)),
			                         pack_bf16x2(silu_times(g.z, u.z), silu_times(g.w, u.w)));
		} else {
			*y = f32_to_bf16(silu_times(gate[e], up[e]));
		}
	});
}

extern "C" void swiglu_forward_cuda(bf16 *out, int ld_out, const float *gate, const float *up, int T, int F)
{
	if (T <= 0 || F <= 0)
		return;
	check_pitch("swiglu_forward_cuda", "ld_out", ld_out, F);
	cudaStream_t stream = poros_cuda_compute_stream();
	if (ld_out == F) {
		long n = (long)T * F;
		bool vec4 = aligned16(gate) && aligned16(up) && ((uintptr_t)out & 7u) == 0;
		swiglu_forward_kernel<<<flat_grid(n, vec4, SWIGLU_THREADS), SWIGLU_THREADS, 0, stream>>>(
			out, gate, up, n, vec4);
	} else {
		bool vec4 = F % 4 == 0 && ld_out % 4 == 0 && aligned16(gate) && aligned16(up) &&
		            ((uintptr_t)out & 7u) == 0;
		long items = (long)T * (vec4 ? F / 4 : F);
		swiglu_forward_rows_kernel<<<grid_for(items, SWIGLU_THREADS), SWIGLU_THREADS, 0, stream>>>(
			out, ld_out, gate, up, T, F, vec4);
	}
	launchCheck();
}

// dup = dout * silu(g);  dgate = dout * up * sig(g) * (1 + g (1 - sig(g)))
__device__ __forceinline__ void swiglu_grad(float &dg, float &du, float dy, float g, float u)
{
	float denom = 1.0f + expf(-g);
	float sig = 1.0f / denom;
	float silu = g / denom;
	du = dy * silu;
	dg = dy * u * (sig * (1.0f + g * (1.0f - sig)));
}

__device__ __forceinline__ void swiglu_grad16(bf16 &dg, bf16 &du, float dy, float g, float u)
{
	float a, b;
	swiglu_grad(a, b, dy, g, u);
	dg = f32_to_bf16(a);
	du = f32_to_bf16(b);
}

// vec4: the fp32 bases 16-byte aligned and the bf16 ones 8, the first n/4*4
// elements four at a time (the same arithmetic per element, so the same
// bits either way).  The outputs are bf16 (the gate/up backward reads them
// so), which also halves what this kernel writes.
__global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const float *dout, const float *gate, const float *up,
                                       long n, bool vec4)
{
	flat_elementwise(
		n, vec4,
		[&](long i) {
			float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i], dy = ((const float4 *)dout)[i];
			bf16 dg[4], du[4];
			swiglu_grad16(dg[0], du[0], dy.x, g.x, u.x);
			swiglu_grad16(dg[1], du[1], dy.y, g.y, u.y);
			swiglu_grad16(dg[2], du[2], dy.z, g.z, u.z);
			swiglu_grad16(dg[3], du[3], dy.w, g.w, u.w);
			((uint2 *)dgate)[i] = make_uint2(dg[0] | (unsigned)dg[1] << 16, dg[2] | (unsigned)dg[3] << 16);
			((uint2 *)dup)[i] = make_uint2(du[0] | (unsigned)du[1] << 16, du[2] | (unsigned)du[3] << 16);
		},
		[&](long i) { swiglu_grad16(dgate[i], dup[i], dout[i], gate[i], up[i]); });
}

// dgate, dup (T,F) rows ld_d apart; dout, gate, up (T,F).  vec4: F and
// ld_d multiples of 4, the fp32 bases 16-byte aligned, the bf16 ones 8.
__global__ void swiglu_backward_rows_kernel(bf16 *dgate, bf16 *dup, long ld_d, const float *dout, const float *gate,
                                            const float *up, long T, long F, bool vec4)
{
	rows_elementwise(T, F, vec4, [&](long t, long f) {
		long e = t * F + f, o = t * ld_d + f;
		if (vec4) {
			float4 g = *(const float4 *)(gate + e), u = *(const float4 *)(up + e);
			float4 dy = *(const float4 *)(dout + e);
			bf16 dg[4], du[4];
			swiglu_grad16(dg[0], du[0], dy.x, g.x, u.x);
			swiglu_grad16(dg[1], du[1], dy.y, g.y, u.y);
			swiglu_grad16(dg[2], du[2], dy.z, g.z, u.z);
			swiglu_grad16(dg[3], du[3], dy.w, g.w, u.w);
			*(uint2 *)(dgate + o) = make_uint2(dg[0] | (unsigned)dg[1] << 16, dg[2] | (unsigned)dg[3] << 16);
			*(uint2 *)(dup + o) = make_uint2(du[0] | (unsigned)du[1] << 16, du[2] | (unsigned)du[3] << 16);
		} else {
			swiglu_grad16(dgate[o], dup[o], dout[e], gate[e], up[e]);
		}
	});
}

extern "C" void swiglu_backward_cuda(bf16 *dgate, bf16 *dup, int ld_d, const float *dout, const float *gate,
                                     const float *up, int T, int F)
{
	if (T <= 0 || F <= 0)
		return;
	check_pitch("swiglu_backward_cuda", "ld_d", ld_d, F);
	cudaStream_t stream = poros_cuda_compute_stream();
	bool aligned = ((uintptr_t)dgate & 7u) == 0 && ((uintptr_t)dup & 7u) == 0 && aligned16(dout) &&
	               aligned16(gate) && aligned16(up);
	if (ld_d == F) {
		long n = (long)T * F;
		swiglu_backward_kernel<<<flat_grid(n, aligned, SWIGLU_THREADS), SWIGLU_THREADS, 0, stream>>>(
			dgate, dup, dout, gate, up, n, aligned);
	} else {
		bool vec4 = aligned && F % 4 == 0 && ld_d % 4 == 0;
		long items = (long)T * (vec4 ? F / 4 : F);
		swiglu_backward_rows_kernel<<<grid_for(items, SWIGLU_THREADS), SWIGLU_THREADS, 0, stream>>>(
			dgate, dup, ld_d, dout, gate, up, T, F, vec4);
	}
	launchCheck();
}
