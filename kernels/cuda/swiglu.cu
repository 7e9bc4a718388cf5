// defines: swiglu_forward_cuda, swiglu_backward_cuda,
//          swiglu_forward_kernel, swiglu_backward_kernel,
//          swiglu_forward_rows_kernel, swiglu_backward_rows_kernel
//
// The SwiGLU gate: out = silu(gate) * up, silu(g) = g / (1 + e^-g), in the
// CPU's operation order (expf, not the fast __expf).  Elementwise and
// memory-bound: gate and up are bf16 (the projections store them so), read
// four at a time as one 8-byte load where the pointers allow, dout (fp32)
// as one 16-byte load.  The inputs are (T,F) contiguous; the bf16 outputs'
// rows are a pitch apart (the next GEMM's input, with room for its LoRA
// extension).  With the pitch equal to F the outputs are contiguous too and
// the flat kernels run; otherwise the row kernels, four elements at a time
// when every row starts aligned, and never past a row's F.
#include "common.cuh"

#define SWIGLU_THREADS 256

__device__ __forceinline__ float silu_times(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

__device__ __forceinline__ bf16 swiglu1(bf16 g, bf16 u)
{
	return f32_to_bf16(silu_times(bf16_to_f32(g), bf16_to_f32(u)));
}

// Four outputs from four gate and up elements (8-byte aligned), packed as
// they sit in memory.
__device__ __forceinline__ uint2 swiglu4(const bf16 *gate, const bf16 *up)
{
	float4 g = load4(gate, true), u = load4(up, true);
	return make_uint2(pack_bf16x2(silu_times(g.x, u.x), silu_times(g.y, u.y)),
	                  pack_bf16x2(silu_times(g.z, u.z), silu_times(g.w, u.w)));
}

// out (n) bf16 = silu(gate) * up; gate, up (n).  vec4: every base 8-byte
// aligned, the first n/4*4 elements go four at a time.
__global__ void swiglu_forward_kernel(bf16 *out, const bf16 *gate, const bf16 *up, long n, bool vec4)
{
	flat_elementwise(
		n, vec4, [&](long i) { ((uint2 *)out)[i] = swiglu4(gate + 4 * i, up + 4 * i); },
		[&](long i) { out[i] = swiglu1(gate[i], up[i]); });
}

// out (T,F) rows ld_out apart; gate, up (T,F).  vec4: F and ld_out
// multiples of 4, every base 8-byte aligned.
__global__ void swiglu_forward_rows_kernel(bf16 *out, long ld_out, const bf16 *gate, const bf16 *up, long T, long F,
                                           bool vec4)
{
	rows_elementwise(T, F, vec4, [&](long t, long f) {
		long e = t * F + f;
		bf16 *y = out + t * ld_out + f;
		if (vec4)
			*(uint2 *)y = swiglu4(gate + e, up + e);
		else
			*y = swiglu1(gate[e], up[e]);
	});
}

extern "C" void swiglu_forward_cuda(bf16 *out, int ld_out, const bf16 *gate, const bf16 *up, int T, int F)
{
	if (T <= 0 || F <= 0)
		return;
	check_pitch("swiglu_forward_cuda", "ld_out", ld_out, F);
	cudaStream_t stream = poros_cuda_compute_stream();
	bool aligned = aligned8(gate) && aligned8(up) && aligned8(out);
	if (ld_out == F) {
		long n = (long)T * F;
		swiglu_forward_kernel<<<flat_grid(n, aligned, SWIGLU_THREADS), SWIGLU_THREADS, 0, stream>>>(
			out, gate, up, n, aligned);
	} else {
		bool vec4 = aligned && F % 4 == 0 && ld_out % 4 == 0;
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

__device__ __forceinline__ void swiglu_grad16(bf16 &dg, bf16 &du, float dy, bf16 g, bf16 u)
{
	float a, b;
	swiglu_grad(a, b, dy, bf16_to_f32(g), bf16_to_f32(u));
	dg = f32_to_bf16(a);
	du = f32_to_bf16(b);
}

// Four elements' gradients into dgate, dup (8-byte aligned) from dout
// (16-byte aligned), gate and up (8-byte aligned) at the same element.
__device__ __forceinline__ void swiglu_grad4(bf16 *dgate, bf16 *dup, const float *dout, const bf16 *gate,
                                             const bf16 *up)
{
	float4 g = load4(gate, true), u = load4(up, true), dy = load4(dout, true);
	float dg[4], du[4];
	swiglu_grad(dg[0], du[0], dy.x, g.x, u.x);
	swiglu_grad(dg[1], du[1], dy.y, g.y, u.y);
	swiglu_grad(dg[2], du[2], dy.z, g.z, u.z);
	swiglu_grad(dg[3], du[3], dy.w, g.w, u.w);
	*(uint2 *)dgate = make_uint2(pack_bf16x2(dg[0], dg[1]), pack_bf16x2(dg[2], dg[3]));
	*(uint2 *)dup = make_uint2(pack_bf16x2(du[0], du[1]), pack_bf16x2(du[2], du[3]));
}

// vec4: dout's base 16-byte aligned and the bf16 ones 8, the first n/4*4
// elements four at a time (the same arithmetic per element, so the same
// bits either way).  The outputs are bf16 (the gate/up backward reads them
// so), which also halves what this kernel writes.
__global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const float *dout, const bf16 *gate, const bf16 *up,
                                       long n, bool vec4)
{
	flat_elementwise(
		n, vec4,
		[&](long i) { swiglu_grad4(dgate + 4 * i, dup + 4 * i, dout + 4 * i, gate + 4 * i, up + 4 * i); },
		[&](long i) { swiglu_grad16(dgate[i], dup[i], dout[i], gate[i], up[i]); });
}

// dgate, dup (T,F) rows ld_d apart; dout, gate, up (T,F).  vec4: F and
// ld_d multiples of 4, dout's base 16-byte aligned, the bf16 ones 8.
__global__ void swiglu_backward_rows_kernel(bf16 *dgate, bf16 *dup, long ld_d, const float *dout, const bf16 *gate,
                                            const bf16 *up, long T, long F, bool vec4)
{
	rows_elementwise(T, F, vec4, [&](long t, long f) {
		long e = t * F + f, o = t * ld_d + f;
		if (vec4)
			swiglu_grad4(dgate + o, dup + o, dout + e, gate + e, up + e);
		else
			swiglu_grad16(dgate[o], dup[o], dout[e], gate[e], up[e]);
	});
}

extern "C" void swiglu_backward_cuda(bf16 *dgate, bf16 *dup, int ld_d, const float *dout, const bf16 *gate,
                                     const bf16 *up, int T, int F)
{
	if (T <= 0 || F <= 0)
		return;
	check_pitch("swiglu_backward_cuda", "ld_d", ld_d, F);
	cudaStream_t stream = poros_cuda_compute_stream();
	bool aligned = aligned8(dgate) && aligned8(dup) && aligned16(dout) && aligned8(gate) && aligned8(up);
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
