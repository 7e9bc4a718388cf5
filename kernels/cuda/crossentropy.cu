// defines: crossentropy_forward_backward_cuda, crossentropy_kernel
//
// Softmax cross-entropy fused with its gradient, one block per row of
// logits, two passes over V: (1) the running max and sum of exponentials
// (online softmax: each thread keeps (max, sum) and rescales its sum when
// the max grows), combined across the block in a fixed tree; (2) the
// gradient (softmax - onehot) * dloss in bf16.  No atomics: each row's
// numbers come from one block in one order.
#include "common.cuh"

#define CE_THREADS 512

struct max_sum {
	float m, s; // running max and sum of exp(x - m)
};

// Roundings spelled out (__fmaf_rn, ...) so the vector and scalar paths
// cannot differ by what the compiler chooses to fuse.
__device__ __forceinline__ void ms_add(max_sum &a, float x)
{
	if (x > a.m) {
		a.s = __fmaf_rn(a.s, expf(a.m - x), 1.0f);
		a.m = x;
	} else {
		a.s = __fadd_rn(a.s, expf(x - a.m));
	}
}

// Commutative (the two sides enter symmetrically and fp add commutes), so
// the xor butterfly leaves every lane with the same bits.
__device__ __forceinline__ max_sum ms_combine(max_sum a, max_sum b)
{
	if (b.m == -INFINITY)
		return a;
	if (a.m == -INFINITY)
		return b;
	float m = fmaxf(a.m, b.m);
	max_sum r = { m, __fadd_rn(__fmul_rn(a.s, expf(a.m - m)), __fmul_rn(b.s, expf(b.m - m))) };
	return r;
}

__device__ __forceinline__ max_sum ms_warp(max_sum v)
{
	for (int o = 16; o > 0; o >>= 1) {
		max_sum other = { __shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o) };
		v = ms_combine(v, other);
	}
	return v;
}

__device__ max_sum ms_block(max_sum v)
{
	__shared__ max_sum warp_ms[32];
	__shared__ max_sum total;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	v = ms_warp(v);
	if (lane == 0)
		warp_ms[warp] = v;
	__syncthreads();
	if (warp == 0) {
		max_sum w = { -INFINITY, 0.0f };
		if (lane < nwarps)
			w = warp_ms[lane];
		w = ms_warp(w);
		if (lane == 0)
			total = w;
	}
	__syncthreads();
	return total;
}

// dlogits (T,V) bf16, losses (T), logits (T,V), targets (T).  A target < 0
// ignores the row (loss 0, zero gradient); a target >= V is a caller bug
// and gets loss NaN and a zero gradient, as on the CPU.  vec4: V % 4 == 0,
// logits 16-byte and dlogits 8-byte aligned.
__global__ void crossentropy_kernel(bf16 *dlogits, float *losses, const float *logits, const int32_t *targets,
                                    float dloss, int V, bool vec4)
{
	int t = blockIdx.x;
	const float *x = logits + (size_t)t * V;
	bf16 *dx = dlogits + (size_t)t * V;
	int y = targets[t];
	if (y < 0 || y >= V) {
		if (threadIdx.x == 0)
			losses[t] = y < 0 ? 0.0f : NAN;
		for (int j = threadIdx.x; j < V; j += blockDim.x)
			dx[j] = 0;
		return;
	}
	// each thread walks its groups of four (j = 4*tid, 4*tid + 4*blockDim, ...)
	// in order on both paths: alignment changes the loads, not the sum
	max_sum acc = { -INFINITY, 0.0f };
	for (int j = threadIdx.x * 4; j < V; j += blockDim.x * 4) {
		if (j + 4 <= V) {
			float4 v = load4(x + j, vec4);
			ms_add(acc, v.x);
			ms_add(acc, v.y);
			ms_add(acc, v.z);
			ms_add(acc, v.w);
		} else {
			for (int i = j; i < V; i++)
				ms_add(acc, x[i]);
		}
	}
	max_sum row = ms_block(acc);
	if (threadIdx.x == 0)
		losses[t] = (row.m - x[y]) + logf(row.s);
	// (p - onehot) * dloss with p = e^(x - max) / sum: the CPU's order
	if (vec4) {
		for (int j = threadIdx.x * 4; j < V; j += blockDim.x * 4) {
			float4 v = *(const float4 *)(x + j);
			float g0 = (expf(v.x - row.m) / row.s - (float)(j == y)) * dloss;
			float g1 = (expf(v.y - row.m) / row.s - (float)(j + 1 == y)) * dloss;
			float g2 = (expf(v.z - row.m) / row.s - (float)(j + 2 == y)) * dloss;
			float g3 = (expf(v.w - row.m) / row.s - (float)(j + 3 == y)) * dloss;
			*(uint2 *)(dx + j) = make_uint2(pack_bf16x2(g0, g1), pack_bf16x2(g2, g3));
		}
	} else {
		for (int j = threadIdx.x; j < V; j += blockDim.x)
			dx[j] = f32_to_bf16((expf(x[j] - row.m) / row.s - (float)(j == y)) * dloss);
	}
}

extern "C" void crossentropy_forward_backward_cuda(bf16 *dlogits, float *losses, const float *logits,
                                                   const int32_t *targets, float dloss, int T, int V)
{
	if (T <= 0 || V <= 0)
		return;
	bool vec4 = V % 4 == 0 && aligned16(logits) && ((uintptr_t)dlogits & 7u) == 0;
	crossentropy_kernel<<<T, CE_THREADS, 0, poros_cuda_compute_stream()>>>(dlogits, losses, logits, targets, dloss,
	                                                                      V, vec4);
	launchCheck();
}
