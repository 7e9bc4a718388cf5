// defines: swiglu_forward_cuda, swiglu_backward_cuda,
//          swiglu_forward_kernel, swiglu_backward_kernel,
//          swiglu_forward_rows_kernel, swiglu_backward_rows_kernel
//
// The SwiGLU gate: out = silu(gate) * up, silu(g) = g / (1 + e^-g), in the
// CPU's operation order (expf, not the fast __expf).  Elementwise and
// memory-bound: gate and up are bf16 (the projections store them so), read
// eight at a time as one 16-byte load where the pointers allow, dout (fp32)
// as two.  The inputs are (T,F) contiguous; the bf16 outputs'
// rows are a pitch apart (the next GEMM's input, with room for its LoRA
// extension).  With the pitch equal to F the outputs are contiguous too and
// the flat kernels run; otherwise the row kernels, eight elements at a time
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

// Eight outputs from eight gate and up elements (16-byte aligned), packed
// as they sit in memory.
__device__ __forceinline__ uint4 swiglu8(const bf16 *gate, const bf16 *up)
{
	float g[8], u[8], y[8];
	load8(gate, g);
	load8(up, u);
#pragma unroll
	for (int k = 0; k < 8; k++)
		y[k] = silu_times(g[k], u[k]);
	return pack8(y);
}

// out (n) bf16 = silu(gate) * up; gate, up (n).  vec: every base 16-byte
// aligned, the first n/8*8 elements go eight at a time (32 bytes a thread
// in flight: at four, the loads' latency, not the bandwidth, bound it).
__global__ void swiglu_forward_kernel(bf16 *out, const bf16 *gate, const bf16 *up, long n, bool vec)
{
	long stride = (long)gridDim.x * blockDim.x, i0 = (long)blockIdx.x * blockDim.x + threadIdx.x, done = 0;
	if (vec) {
		for (long i = i0; i < n / 8; i += stride)
			((uint4 *)out)[i] = swiglu8(gate + 8 * i, up + 8 * i);
		done = n / 8 * 8;
	}
	for (long i = done + i0; i < n; i += stride)
		out[i] = swiglu1(gate[i], up[i]);
}

// out (T,F) rows ld_out apart; gate, up (T,F).  vec: F and ld_out
// multiples of 8, every base 16-byte aligned.
__global__ void swiglu_forward_rows_kernel(bf16 *out, long ld_out, const bf16 *gate, const bf16 *up, long T, long F,
                                           bool vec)
{
	rows_elementwise_by(T, F, vec ? 8 : 1, [&](long t, long f) {
		long e = t * F + f;
		bf16 *y = out + t * ld_out + f;
		if (vec)
			*(uint4 *)y = swiglu8(gate + e, up + e);
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
	bool aligned = aligned16(gate) && aligned16(up) && aligned16(out);
	if (ld_out == F) {
		long n = (long)T * F;
		swiglu_forward_kernel<<<grid_for(aligned ? (n + 7) / 8 : n, SWIGLU_THREADS), SWIGLU_THREADS, 0,
		                        stream>>>(out, gate, up, n, aligned);
	} else {
		bool vec = aligned && F % 8 == 0 && ld_out % 8 == 0;
		long items = (long)T * (vec ? F / 8 : F);
		swiglu_forward_rows_kernel<<<grid_for(items, SWIGLU_THREADS), SWIGLU_THREADS, 0, stream>>>(
			out, ld_out, gate, up, T, F, vec);
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

// Eight elements' gradients into dgate, dup from dout, gate and up at the
// same element, every pointer 16-byte aligned.
__device__ __forceinline__ void swiglu_grad8(bf16 *dgate, bf16 *dup, const float *dout, const bf16 *gate,
                                             const bf16 *up)
{
	float g[8], u[8], dg[8], du[8];
	float4 d0 = *(const float4 *)dout, d1 = *(const float4 *)(dout + 4);
	float dy[8] = { d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w };
	load8(gate, g);
	load8(up, u);
#pragma unroll
	for (int k = 0; k < 8; k++)
		swiglu_grad(dg[k], du[k], dy[k], g[k], u[k]);
	*(uint4 *)dgate = pack8(dg);
	*(uint4 *)dup = pack8(du);
}

// vec: every base 16-byte aligned, the first n/8*8 elements eight at a
// time (the same arithmetic per element, so the same bits either way).
// The outputs are bf16 (the gate/up backward reads them so), which also
// halves what this kernel writes.
__global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const float *dout, const bf16 *gate, const bf16 *up,
                                       long n, bool vec)
{
	long stride = (long)gridDim.x * blockDim.x, i0 = (long)blockIdx.x * blockDim.x + threadIdx.x, done = 0;
	if (vec) {
		for (long i = i0; i < n / 8; i += stride)
			swiglu_grad8(dgate + 8 * i, dup + 8 * i, dout + 8 * i, gate + 8 * i, up + 8 * i);
		done = n / 8 * 8;
	}
	for (long i = done + i0; i < n; i += stride)
		swiglu_grad16(dgate[i], dup[i], dout[i], gate[i], up[i]);
}

// dgate, dup (T,F) rows ld_d apart; dout, gate, up (T,F).  vec: F and
// ld_d multiples of 8, every base 16-byte aligned.
__global__ void swiglu_backward_rows_kernel(bf16 *dgate, bf16 *dup, long ld_d, const float *dout, const bf16 *gate,
                                            const bf16 *up, long T, long F, bool vec)
{
	rows_elementwise_by(T, F, vec ? 8 : 1, [&](long t, long f) {
		long e = t * F + f, o = t * ld_d + f;
		if (vec)
			swiglu_grad8(dgate + o, dup + o, dout + e, gate + e, up + e);
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
	bool aligned = aligned16(dgate) && aligned16(dup) && aligned16(dout) && aligned16(gate) && aligned16(up);
	if (ld_d == F) {
		long n = (long)T * F;
		swiglu_backward_kernel<<<grid_for(aligned ? (n + 7) / 8 : n, SWIGLU_THREADS), SWIGLU_THREADS, 0,
		                         stream>>>(dgate, dup, dout, gate, up, n, aligned);
	} else {
		bool vec = aligned && F % 8 == 0 && ld_d % 8 == 0;
		long items = (long)T * (vec ? F / 8 : F);
		swiglu_backward_rows_kernel<<<grid_for(items, SWIGLU_THREADS), SWIGLU_THREADS, 0, stream>>>(
			dgate, dup, ld_d, dout, gate, up, T, F, vec);
	}
	launchCheck();
}
