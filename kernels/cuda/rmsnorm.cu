// defines: rmsnorm_forward_cuda, rmsnorm_backward_cuda,
//          rmsnorm_forward_kernel, rmsnorm_backward_kernel
//
// RMSNorm over rows of C, fp32 math: y = w * (x * rstd), rstd =
// 1/sqrt(mean(x^2) + eps).  One block per row.  Each thread walks its
// groups of four elements (c = 4*tid, 4*tid + 4*blockDim, ...) in order and
// the row sum goes through block_sum: the order is fixed by C and the block
// size alone, so the bits are too (aligned rows only load wider).  Where a
// multiply meets an add the rounding is spelled out (__fmaf_rn, __fmul_rn,
// ...): the vector and scalar paths must not differ by what the compiler
// chooses to fuse.
#include "common.cuh"

#define RMSNORM_THREADS 256

// out_f32, out_bf16 (T,C) each may be NULL, rows ld_out apart in both
// (columns C.. of a row belong to someone else: never written); rstd (T)
// may be NULL; in (T,C); weight (C).  vec: C % 4 == 0, ld_out % 4 == 0 and
// every base 16-byte aligned, so every row of every buffer is too.
__global__ void rmsnorm_forward_kernel(float *out_f32, bf16 *out_bf16, int ld_out, float *rstd, const float *in,
                                       const bf16 *weight, float eps, int C, bool vec)
{
	const float *x = in + (size_t)blockIdx.x * C;
	size_t orow = (size_t)blockIdx.x * ld_out;
	float ss = 0.0f;
	for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
		if (c + 4 <= C) {
			float4 v = load4(x + c, vec);
			ss = __fmaf_rn(v.x, v.x, ss);
			ss = __fmaf_rn(v.y, v.y, ss);
			ss = __fmaf_rn(v.z, v.z, ss);
			ss = __fmaf_rn(v.w, v.w, ss);
		} else {
			for (int j = c; j < C; j++)
				ss = __fmaf_rn(x[j], x[j], ss);
		}
	}
	ss = block_sum(ss);
	float r = 1.0f / sqrtf(ss / (float)C + eps);
	if (rstd && threadIdx.x == 0)
		rstd[blockIdx.x] = r;
	if (vec) {
		for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
			float4 v = load4(x + c, true), w = load4(weight + c, true);
			float4 y = make_float4(w.x * (v.x * r), w.y * (v.y * r), w.z * (v.z * r), w.w * (v.w * r));
			if (out_f32)
				*(float4 *)(out_f32 + orow + c) = y;
			if (out_bf16)
				*(uint2 *)(out_bf16 + orow + c) = make_uint2(pack_bf16x2(y.x, y.y), pack_bf16x2(y.z, y.w));
		}
	} else {
		for (int c = threadIdx.x; c < C; c += blockDim.x) {
			float y = bf16_to_f32(weight[c]) * (x[c] * r);
			if (out_f32)
				out_f32[orow + c] = y;
			if (out_bf16)
				out_bf16[orow + c] = f32_to_bf16(y);
		}
	}
}

extern "C" void rmsnorm_forward_cuda(float *out_f32, bf16 *out_bf16, int ld_out, float *rstd, const float *in,
                                     const bf16 *weight, float eps, int T, int C)
{
	if (T <= 0 || C <= 0)
		return;
	if (out_f32 || out_bf16)
		check_pitch("rmsnorm_forward_cuda", "ld_out", ld_out, C);
	bool vec = C % 4 == 0 && ld_out % 4 == 0 && aligned16(in) && aligned16(weight) &&
	           (!out_f32 || aligned16(out_f32)) && (!out_bf16 || aligned16(out_bf16));
	rmsnorm_forward_kernel<<<T, RMSNORM_THREADS, 0, poros_cuda_compute_stream()>>>(out_f32, out_bf16, ld_out, rstd,
	                                                                              in, weight, eps, C, vec);
	launchCheck();
}

// din (T,C) += r * (w * dout - x * r^2 * mean_c(dout_c w_c x_c)), the
// derivative of y = w * x * r with r = (mean(x^2) + eps)^-1/2.  The
// per-element update rounds each step as the CPU does (nothing fused).
__device__ __forceinline__ float rms_dx(float d, float w, float g, float v, float r, float coef)
{
	return __fadd_rn(d, __fmul_rn(r, __fsub_rn(__fmul_rn(w, g), __fmul_rn(v, coef))));
}

// dout, in (T,C); weight (C); rstd (T).
__global__ void rmsnorm_backward_kernel(float *din, const float *dout, const float *in, const bf16 *weight,
                                        const float *rstd, int C, bool vec)
{
	size_t row = (size_t)blockIdx.x * C;
	const float *x = in + row, *dy = dout + row;
	float *dx = din + row;
	float dot = 0.0f;
	for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
		if (c + 4 <= C) {
			float4 g = load4(dy + c, vec), v = load4(x + c, vec), w = load4(weight + c, vec);
			dot = __fmaf_rn(__fmul_rn(g.x, w.x), v.x, dot);
			dot = __fmaf_rn(__fmul_rn(g.y, w.y), v.y, dot);
			dot = __fmaf_rn(__fmul_rn(g.z, w.z), v.z, dot);
			dot = __fmaf_rn(__fmul_rn(g.w, w.w), v.w, dot);
		} else {
			for (int j = c; j < C; j++)
				dot = __fmaf_rn(__fmul_rn(dy[j], bf16_to_f32(weight[j])), x[j], dot);
		}
	}
	dot = block_sum(dot);
	float r = rstd[blockIdx.x];
	float coef = __fmul_rn(__fmul_rn(__fdiv_rn(dot, (float)C), r), r);
	if (vec) {
		for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
			float4 g = load4(dy + c, true), v = load4(x + c, true), w = load4(weight + c, true);
			float4 d = *(float4 *)(dx + c);
			d.x = rms_dx(d.x, w.x, g.x, v.x, r, coef);
			d.y = rms_dx(d.y, w.y, g.y, v.y, r, coef);
			d.z = rms_dx(d.z, w.z, g.z, v.z, r, coef);
			d.w = rms_dx(d.w, w.w, g.w, v.w, r, coef);
			*(float4 *)(dx + c) = d;
		}
	} else {
		for (int c = threadIdx.x; c < C; c += blockDim.x)
			dx[c] = rms_dx(dx[c], bf16_to_f32(weight[c]), dy[c], x[c], r, coef);
	}
}

extern "C" void rmsnorm_backward_cuda(float *din, const float *dout, const float *in, const bf16 *weight,
                                      const float *rstd, int T, int C)
{
	if (T <= 0 || C <= 0)
		return;
	bool vec = C % 4 == 0 && aligned16(din) && aligned16(dout) && aligned16(in) && aligned16(weight);
	rmsnorm_backward_kernel<<<T, RMSNORM_THREADS, 0, poros_cuda_compute_stream()>>>(din, dout, in, weight, rstd,
	                                                                               C, vec);
	launchCheck();
}
