// defines: attention_forward_cuda, attention_backward_cuda,
//          attention_pack_kernel, attention_first_kernel, attention_fwd_kernel,
//          attention_dq_kernel, attention_dkdv_kernel, attention_group_sum_kernel
//
// Causal grouped-query attention with document masks, fused in the manner
// of FlashAttention: tiles of q, k, v in shared memory, the products on
// tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulators), an
// online softmax in registers, and no (S,S) tensor anywhere in device
// memory.  Query head h reads key/value head g = h / (H/G).  Token i of a
// row attends key j iff first_i <= j <= i, first_i = i - pos[i] (ops.h).
// The rounding is ops.h's contract, the steps those of kernels/cpu/
// attention.c (the reference), so the two differ in the order of fp32 sums.
//
// Shapes: the head dimension is padded with zeros to Dp = 64 or 128
// (attention_dpad), the template parameter DP; D > 128 is refused.
// Blocks of 128 threads, 4 warps; each warp owns 16 rows of the block's
// tile.  Key tiles are ATTN_KEY_TILE = 64 keys, aligned at multiples of
// 64 in the row (the online softmax's steps, as on the CPU).
//
// Forward, one block per (query tile of 64 rows, head, sequence):
//   q16 rows -> registers; for each key tile from the one holding the tile's
//   earliest first key up to the diagonal: K and V^T into shared memory,
//   S = q K^T, mask, running max and sum, acc = acc c + bf16(p) V.
// Backward, three launches after the casts:
//   dq kernel, per (query tile, head): pass 1 over the key tiles sums delta
//     = rowsum(P dP), saved; pass 2 rebuilds P and dP, dS = P (dP - delta),
//     dq = scale bf16(dS) K
//   dk/dv kernel, per (key tile, head): over the query groups of 32 rows
//     that reach the tile, P^T and dS^T from lse and delta, dv_h += bf16(P)^T
//     dout, dk_h += bf16(dS)^T q; with G < H into per-head buffers that
//   the group sum adds, heads ascending.
// Determinism: every output element is summed by one thread in a fixed
// order of tiles (and the tensor core's fixed order inside a product);
// the cross-thread sums are fixed xor butterflies.  No atomics.
//
// Scratch (ops.h's attention_parts, in this order):
//   q16 (B,H,S,Dp) bf16, dout16 (B,H,S,Dp), k16 (B,G,S,Dp), v16 (B,G,S,Dp),
//   delta (B,H,S) fp32, first (B, ceil(S/32)) int32: the earliest first key
//   of each group of 32 query rows (with pos only), then with G < H dk_h,
//   dv_h (T,H,D) fp32.  O(B*S*H*D): 7B at S=8192 (H=28, G=4) takes 353 MiB
//   where the cuBLAS squares took 14.7 GiB.
#include <limits.h>
#include <math.h>

#include "common.cuh"

#define ATTN_THREADS 128
#define PACK_THREADS 256
#define SUM_THREADS 256

struct attn_plan {
	bf16 *q16, *dout16, *k16, *v16;
	float *delta;
	int *first;
	float *dk_h, *dv_h;
};

static struct attn_plan plan_of(float *scratch, int B, int S, int H, int G, int D)
{
	struct attention_parts p = attention_parts_of(B, S, H, G, D);
	struct attn_plan a;
	a.q16 = (bf16 *)scratch;
	a.dout16 = (bf16 *)(scratch + p.q16);
	a.k16 = (bf16 *)(scratch + 2 * p.q16);
	a.v16 = (bf16 *)(scratch + 2 * p.q16 + p.kv16);
	a.delta = scratch + 2 * p.q16 + 2 * p.kv16;
	a.first = (int *)(a.delta + p.delta);
	a.dk_h = G == H ? NULL : a.delta + p.delta + p.lo;
	a.dv_h = G == H ? NULL : a.dk_h + p.heads;
	return a;
}

// ---------------------------------------------------------------------------
// Small kernels.

// dst (B,nh,S,DP) bf16 = bf16(src (B*S,nh,D)), zeros for d >= D; two
// elements per item.
__global__ void attention_pack_kernel(bf16 *dst, const float *src, int S, int nh, int D, int DP, long items)
{
	for (long it = (long)blockIdx.x * blockDim.x + threadIdx.x; it < items; it += (long)gridDim.x * blockDim.x) {
		long e = it * 2, row = e / DP;
		int d = (int)(e % DP), s = (int)(row % S), h = (int)(row / S % nh);
		long b = row / S / nh;
		const float *x = src + ((b * S + s) * nh + h) * D;
		float lo = d < D ? x[d] : 0.0f, hi = d + 1 < D ? x[d + 1] : 0.0f;
		*(uint32_t *)(dst + e) = pack_bf16x2(lo, hi);
	}
}

// The first key row i (0..S-1 of row b) attends: i - pos clamped into [0, i].
__device__ __forceinline__ int first_key(const int32_t *pos, int b, int S, int i)
{
	if (!pos)
		return 0;
	int p = pos[(size_t)b * S + i];
	p = p < 0 ? 0 : p > i ? i : p;
	return i - p;
}

// first (B, ceil(S/32)): the least first key over each group of 32 rows.
__global__ void attention_first_kernel(int *first, const int32_t *pos, int B, int S)
{
	int groups = (S + ATTN_ROW_GROUP - 1) / ATTN_ROW_GROUP;
	for (long w = (long)blockIdx.x * blockDim.x + threadIdx.x; w < (long)B * groups;
	     w += (long)gridDim.x * blockDim.x) {
		int b = (int)(w / groups), i0 = (int)(w % groups) * ATTN_ROW_GROUP, m = INT_MAX;
		for (int i = i0; i < i0 + ATTN_ROW_GROUP && i < S; i++)
			m = min(m, first_key(pos, b, S, i));
		first[w] = m;
	}
}

// dst (T,G,D) = sum over the heads of each group, ascending, of heads
// (T,H,D).  n = T*G*D elements, four per item when vec; either way each
// element adds the same values in the same order.
__global__ void attention_group_sum_kernel(float *dst, const float *heads, long n, int H, int G, int D, bool vec)
{
	int group = H / G;
	int per = vec ? 4 : 1;
	long items = n / per, stride = (long)gridDim.x * blockDim.x;
	for (long it = (long)blockIdx.x * blockDim.x + threadIdx.x; it < items; it += stride) {
		long e = it * per;
		long t = e / ((long)G * D);
		int g = (int)(e / D % G), d = (int)(e % D);
		const float *src = heads + (t * H + (long)g * group) * D + d;
		if (vec) {
			float4 acc = *(const float4 *)src;
			for (int i = 1; i < group; i++) {
				float4 w = *(const float4 *)(src + (long)i * D);
				acc.x += w.x, acc.y += w.y, acc.z += w.z, acc.w += w.w;
			}
			*(float4 *)(dst + e) = acc;
		} else {
			float acc = src[0];
			for (int i = 1; i < group; i++)
				acc += src[(long)i * D];
			dst[e] = acc;
		}
	}
}

// ---------------------------------------------------------------------------
// Tiles and tensor-core fragments.  A row-major tile of ROWS rows of DP
// bf16 sits in shared memory with a pitch of DP + 8 (rows 16 bytes apart
// mod 128, so a warp's fragment loads hit 32 banks); a transposed tile
// (DP rows of ROWS) with a pitch of ROWS + 8.

// dst (ROWS, DP+8) = rows 0..ROWS-1 of src (rows of DP), zeros from row valid.
template <int DP, int ROWS>
__device__ __forceinline__ void load_rows(bf16 *dst, const bf16 *src, int valid)
{
	constexpr int VEC = DP / 8;
	for (int w = threadIdx.x; w < ROWS * VEC; w += ATTN_THREADS) {
		int r = w / VEC, c = w % VEC * 8;
		uint4 x = make_uint4(0, 0, 0, 0);
		if (r < valid)
			x = *(const uint4 *)(src + (size_t)r * DP + c);
		*(uint4 *)(dst + r * (DP + 8) + c) = x;
	}
}

// dst (DP, ROWS+8) = the transpose of rows 0..ROWS-1 of src, zeros from row
// valid.  An item moves a 2x2 block (two 32-bit loads, two stores); a warp
// takes 4 row pairs by 8 column pairs, so its loads cover 32-byte
// segments and its stores fall in 16 banks.
template <int DP, int ROWS>
__device__ __forceinline__ void load_rows_t(bf16 *dst, const bf16 *src, int valid)
{
	constexpr int PT = ROWS + 8, RP4 = ROWS / 8; // row pairs / 4
	for (int w = threadIdx.x; w < ROWS / 2 * DP / 2; w += ATTN_THREADS) {
		int chunk = w >> 5;
		int r = 2 * ((chunk % RP4) * 4 + ((w >> 3) & 3));
		int d = 2 * ((chunk / RP4) * 8 + (w & 7));
		uint32_t x = r < valid ? *(const uint32_t *)(src + (size_t)r * DP + d) : 0u;
		uint32_t y = r + 1 < valid ? *(const uint32_t *)(src + (size_t)(r + 1) * DP + d) : 0u;
		*(uint32_t *)(dst + d * PT + r) = (x & 0xffffu) | (y << 16);
		*(uint32_t *)(dst + (d + 1) * PT + r) = (x >> 16) | (y & 0xffff0000u);
	}
}

// c (16x8 fp32) += a (16x16 bf16, row) b (16x8 bf16, col).
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
	             "{%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile:
// lane (gr = lane/4, tq = lane%4) holds (gr, 2tq..), (gr+8, 2tq..),
// (gr, 2tq+8..), (gr+8, 2tq+8..), two bf16 a register, lower column low.
__device__ __forceinline__ void frag_a(uint32_t a[4], const bf16 *tile, int pitch, int r0, int k0, int gr, int tq)
{
	const bf16 *p = tile + (r0 + gr) * pitch + k0 + 2 * tq;
	a[0] = *(const uint32_t *)p;
	a[1] = *(const uint32_t *)(p + 8 * pitch);
	a[2] = *(const uint32_t *)(p + 8);
	a[3] = *(const uint32_t *)(p + 8 * pitch + 8);
}

// The B fragment (k0..k0+15 by n0..n0+7) of B = Y^T, Y a row-major tile
// with rows n: lane holds Y[n0+gr][k0+2tq..] and Y[n0+gr][k0+2tq+8..].
__device__ __forceinline__ void frag_b(uint32_t b[2], const bf16 *tile, int pitch, int n0, int k0, int gr, int tq)
{
	const bf16 *p = tile + (n0 + gr) * pitch + k0 + 2 * tq;
	b[0] = *(const uint32_t *)p;
	b[1] = *(const uint32_t *)(p + 8);
}

// An accumulator (16 rows by 8*2*KS columns in n-tiles of 8, C layout) as
// the A fragments of KS k-steps: n-tile 2k gives registers 0, 1 of k-step
// k, n-tile 2k+1 registers 2, 3, rounded to bf16.
template <int NT>
__device__ __forceinline__ void c_to_a(uint32_t a[][4], float c[NT][4])
{
#pragma unroll
	for (int n = 0; n < NT; n++) {
		a[n >> 1][(n & 1) * 2] = pack_bf16x2(c[n][0], c[n][1]);
		a[n >> 1][(n & 1) * 2 + 1] = pack_bf16x2(c[n][2], c[n][3]);
	}
}

__device__ __forceinline__ float quad_max(float x)
{
	x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
	return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x)
{
	x += __shfl_xor_sync(0xffffffffu, x, 1);
	return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The first key tile a query tile of 64 rows (rows 64 qt..) reaches.
__device__ __forceinline__ int first_tile(const int *first, int b, int qt, int S)
{
	if (!first)
		return 0;
	int groups = (S + ATTN_ROW_GROUP - 1) / ATTN_ROW_GROUP;
	int m = first[b * groups + 2 * qt];
	if (2 * qt + 1 < groups)
		m = min(m, first[b * groups + 2 * qt + 1]);
	return m / ATTN_KEY_TILE;
}

// ---------------------------------------------------------------------------
// Forward.  grid (query tiles, H, B), the longest rows (last tiles) first.
// Shared: q tile (64, DP+8), K tile (64, DP+8), V^T tile (DP, 72).
template <int DP>
__global__ void __launch_bounds__(ATTN_THREADS) attention_fwd_kernel(bf16 *out, int ld_out, float *lse,
                                                                     const bf16 *q16, const bf16 *k16,
                                                                     const bf16 *v16, const int32_t *pos,
                                                                     const int *first, int S, int H, int G, int D,
                                                                     float scale)
{
	constexpr int PQ = DP + 8, PT = 64 + 8, KS = DP / 16, NT = DP / 8;
	extern __shared__ uint4 attn_smem[];
	bf16 *sQ = (bf16 *)attn_smem, *sK = sQ + 64 * PQ, *sVt = sK + 64 * PQ;
	int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / G);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
	int q0 = qt * 64;
	const bf16 *qh = q16 + ((size_t)b * H + h) * S * DP;
	const bf16 *kh = k16 + ((size_t)b * G + g) * S * DP, *vh = v16 + ((size_t)b * G + g) * S * DP;

	load_rows<DP, 64>(sQ, qh + (size_t)q0 * DP, S - q0);
	__syncthreads();
	uint32_t qa[KS][4];
#pragma unroll
	for (int ks = 0; ks < KS; ks++)
		frag_a(qa[ks], sQ, PQ, warp * 16, ks * 16, gr, tq);

	int r0 = q0 + warp * 16 + gr, r1 = r0 + 8; // this thread's two rows
	int f0 = r0 < S ? first_key(pos, b, S, r0) : 0, f1 = r1 < S ? first_key(pos, b, S, r1) : 0;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
	float o[NT][4];
#pragma unroll
	for (int n = 0; n < NT; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

	for (int kt = first_tile(first, b, qt, S); kt <= qt; kt++) {
		int k0 = kt * 64;
		__syncthreads(); // the last tile's readers are done
		load_rows<DP, 64>(sK, kh + (size_t)k0 * DP, S - k0);
		load_rows_t<DP, 64>(sVt, vh + (size_t)k0 * DP, S - k0);
		__syncthreads();

		float s[8][4];
#pragma unroll
		for (int n = 0; n < 8; n++)
			s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
		for (int ks = 0; ks < KS; ks++)
#pragma unroll
			for (int n = 0; n < 8; n++) {
				uint32_t bb[2];
				frag_b(bb, sK, PQ, n * 8, ks * 16, gr, tq);
				mma_bf16(s[n], qa[ks], bb);
			}
		float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
		for (int n = 0; n < 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int j = k0 + n * 8 + 2 * tq + (e & 1), r = e < 2 ? r0 : r1, f = e < 2 ? f0 : f1;
				bool ok = r < S && j <= r && j >= f;
				s[n][e] = ok ? s[n][e] * scale : -INFINITY;
				if (e < 2)
					mx0 = fmaxf(mx0, s[n][e]);
				else
					mx1 = fmaxf(mx1, s[n][e]);
			}
		float n0 = fmaxf(m0, quad_max(mx0)), n1 = fmaxf(m1, quad_max(mx1));
		float base0 = n0 == -INFINITY ? 0.0f : n0, base1 = n1 == -INFINITY ? 0.0f : n1;
		float c0 = expf(m0 - base0), c1 = expf(m1 - base1);
		m0 = n0, m1 = n1;
		l0 *= c0, l1 *= c1;
#pragma unroll
		for (int n = 0; n < NT; n++)
			o[n][0] *= c0, o[n][1] *= c0, o[n][2] *= c1, o[n][3] *= c1;
#pragma unroll
		for (int n = 0; n < 8; n++) {
			s[n][0] = expf(s[n][0] - base0), s[n][1] = expf(s[n][1] - base0);
			s[n][2] = expf(s[n][2] - base1), s[n][3] = expf(s[n][3] - base1);
			l0 += s[n][0], l0 += s[n][1], l1 += s[n][2], l1 += s[n][3];
		}
		uint32_t pa[4][4];
		c_to_a<8>(pa, s);
#pragma unroll
		for (int ks = 0; ks < 4; ks++)
#pragma unroll
			for (int n = 0; n < NT; n++) {
				uint32_t bb[2];
				frag_b(bb, sVt, PT, n * 8, ks * 16, gr, tq);
				mma_bf16(o[n], pa[ks], bb);
			}
	}
	l0 = quad_sum(l0), l1 = quad_sum(l1);
#pragma unroll
	for (int n = 0; n < NT; n++) {
		int col = n * 8 + 2 * tq;
		if (r0 < S) {
			bf16 *dst = out + ((size_t)b * S + r0) * ld_out + (size_t)h * D + col;
			if (col < D)
				dst[0] = f32_to_bf16(o[n][0] / l0);
			if (col + 1 < D)
				dst[1] = f32_to_bf16(o[n][1] / l0);
		}
		if (r1 < S) {
			bf16 *dst = out + ((size_t)b * S + r1) * ld_out + (size_t)h * D + col;
			if (col < D)
				dst[0] = f32_to_bf16(o[n][2] / l1);
			if (col + 1 < D)
				dst[1] = f32_to_bf16(o[n][3] / l1);
		}
	}
	if (tq == 0) {
		if (r0 < S)
			lse[((size_t)b * H + h) * S + r0] = m0 + logf(l0);
		if (r1 < S)
			lse[((size_t)b * H + h) * S + r1] = m1 + logf(l1);
	}
}

// ---------------------------------------------------------------------------
// Backward, dq and delta.  grid (query tiles, H, B), longest rows first.
// Shared: q, dout, K, V tiles (64, DP+8), K^T (DP, 72).

// s = q K^T, dp = dout V^T for the warp's 16 rows and the tile's 64 keys.
template <int DP>
__device__ __forceinline__ void scores_and_dp(float s[8][4], float dp[8][4], const bf16 *sQ, const bf16 *sdO,
                                              const bf16 *sK, const bf16 *sV, int warp, int gr, int tq)
{
	constexpr int PQ = DP + 8;
#pragma unroll
	for (int n = 0; n < 8; n++)
		s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
#pragma unroll
	for (int ks = 0; ks < DP / 16; ks++) {
		uint32_t a[4], ad[4];
		frag_a(a, sQ, PQ, warp * 16, ks * 16, gr, tq);
		frag_a(ad, sdO, PQ, warp * 16, ks * 16, gr, tq);
#pragma unroll
		for (int n = 0; n < 8; n++) {
			uint32_t bb[2];
			frag_b(bb, sK, PQ, n * 8, ks * 16, gr, tq);
			mma_bf16(s[n], a, bb);
			frag_b(bb, sV, PQ, n * 8, ks * 16, gr, tq);
			mma_bf16(dp[n], ad, bb);
		}
	}
}

template <int DP>
__global__ void __launch_bounds__(ATTN_THREADS) attention_dq_kernel(float *dq, float *delta, const bf16 *q16,
                                                                    const bf16 *k16, const bf16 *v16,
                                                                    const bf16 *do16, const float *lse,
                                                                    const int32_t *pos, const int *first, int S,
                                                                    int H, int G, int D, float scale)
{
	constexpr int PQ = DP + 8, PT = 64 + 8, NT = DP / 8;
	extern __shared__ uint4 attn_smem[];
	bf16 *sQ = (bf16 *)attn_smem, *sdO = sQ + 64 * PQ, *sK = sdO + 64 * PQ, *sV = sK + 64 * PQ;
	bf16 *sKt = sV + 64 * PQ;
	int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / G);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
	int q0 = qt * 64;
	size_t head = ((size_t)b * H + h) * S;
	const bf16 *kh = k16 + ((size_t)b * G + g) * S * DP, *vh = v16 + ((size_t)b * G + g) * S * DP;

	load_rows<DP, 64>(sQ, q16 + (head + q0) * DP, S - q0);
	load_rows<DP, 64>(sdO, do16 + (head + q0) * DP, S - q0);
	int r0 = q0 + warp * 16 + gr, r1 = r0 + 8;
	int f0 = r0 < S ? first_key(pos, b, S, r0) : 0, f1 = r1 < S ? first_key(pos, b, S, r1) : 0;
	float lse0 = r0 < S ? lse[head + r0] : 0.0f, lse1 = r1 < S ? lse[head + r1] : 0.0f;
	int kt0 = first_tile(first, b, qt, S);
	float s[8][4], dp[8][4];

	// pass 1: delta = sum_j P dP
	float sum0 = 0.0f, sum1 = 0.0f;
	for (int kt = kt0; kt <= qt; kt++) {
		int k0 = kt * 64;
		__syncthreads();
		load_rows<DP, 64>(sK, kh + (size_t)k0 * DP, S - k0);
		load_rows<DP, 64>(sV, vh + (size_t)k0 * DP, S - k0);
		__syncthreads();
		scores_and_dp<DP>(s, dp, sQ, sdO, sK, sV, warp, gr, tq);
#pragma unroll
		for (int n = 0; n < 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int j = k0 + n * 8 + 2 * tq + (e & 1), r = e < 2 ? r0 : r1, f = e < 2 ? f0 : f1;
				bool ok = r < S && j <= r && j >= f;
				float p = ok ? expf(s[n][e] * scale - (e < 2 ? lse0 : lse1)) : 0.0f;
				if (e < 2)
					sum0 += p * dp[n][e];
				else
					sum1 += p * dp[n][e];
			}
	}
	float delta0 = quad_sum(sum0), delta1 = quad_sum(sum1);
	if (tq == 0) {
		if (r0 < S)
			delta[head + r0] = delta0;
		if (r1 < S)
			delta[head + r1] = delta1;
	}

	// pass 2: dS = P (dP - delta), dq = scale bf16(dS) K
	float acc[NT][4];
#pragma unroll
	for (int n = 0; n < NT; n++)
		acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
	for (int kt = kt0; kt <= qt; kt++) {
		int k0 = kt * 64;
		__syncthreads();
		load_rows<DP, 64>(sK, kh + (size_t)k0 * DP, S - k0);
		load_rows<DP, 64>(sV, vh + (size_t)k0 * DP, S - k0);
		load_rows_t<DP, 64>(sKt, kh + (size_t)k0 * DP, S - k0);
		__syncthreads();
		scores_and_dp<DP>(s, dp, sQ, sdO, sK, sV, warp, gr, tq);
#pragma unroll
		for (int n = 0; n < 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int j = k0 + n * 8 + 2 * tq + (e & 1), r = e < 2 ? r0 : r1, f = e < 2 ? f0 : f1;
				bool ok = r < S && j <= r && j >= f;
				float p = ok ? expf(s[n][e] * scale - (e < 2 ? lse0 : lse1)) : 0.0f;
				s[n][e] = ok ? p * (dp[n][e] - (e < 2 ? delta0 : delta1)) : 0.0f;
			}
		uint32_t da[4][4];
		c_to_a<8>(da, s);
#pragma unroll
		for (int ks = 0; ks < 4; ks++)
#pragma unroll
			for (int n = 0; n < NT; n++) {
				uint32_t bb[2];
				frag_b(bb, sKt, PT, n * 8, ks * 16, gr, tq);
				mma_bf16(acc[n], da[ks], bb);
			}
	}
#pragma unroll
	for (int n = 0; n < NT; n++) {
		int col = n * 8 + 2 * tq;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = e < 2 ? r0 : r1, c = col + (e & 1);
			if (r < S && c < D)
				dq[(((size_t)b * S + r) * H + h) * D + c] = scale * acc[n][e];
		}
	}
}

// ---------------------------------------------------------------------------
// Backward, dk and dv of one query head.  grid (key tiles, H, B), the
// first key tiles (the most query rows) first.  Shared: K, V tiles (64,
// DP+8); per group of 32 query rows q, dout (32, DP+8), q^T, dout^T (DP,
// 40), and the rows' lse, delta and first key.  dk, dv (T,H,D): head h's.
template <int DP>
__global__ void __launch_bounds__(ATTN_THREADS) attention_dkdv_kernel(float *dk, float *dv, const bf16 *q16,
                                                                      const bf16 *k16, const bf16 *v16,
                                                                      const bf16 *do16, const float *lse,
                                                                      const float *delta, const int32_t *pos,
                                                                      const int *first, int S, int H, int G, int D,
                                                                      float scale)
{
	constexpr int PQ = DP + 8, PT = 32 + 8, NT = DP / 8;
	extern __shared__ uint4 attn_smem[];
	bf16 *sK = (bf16 *)attn_smem, *sV = sK + 64 * PQ, *sQ = sV + 64 * PQ, *sdO = sQ + 32 * PQ;
	bf16 *sQt = sdO + 32 * PQ, *sdOt = sQt + DP * PT;
	float *sL = (float *)(sdOt + DP * PT), *sD = sL + 32;
	int *sF = (int *)(sD + 32);
	int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / G);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
	int k0 = kt * 64, groups = (S + 31) / 32;
	size_t head = ((size_t)b * H + h) * S;
	const bf16 *kh = k16 + ((size_t)b * G + g) * S * DP, *vh = v16 + ((size_t)b * G + g) * S * DP;

	load_rows<DP, 64>(sK, kh + (size_t)k0 * DP, S - k0);
	load_rows<DP, 64>(sV, vh + (size_t)k0 * DP, S - k0);
	int j0 = k0 + warp * 16 + gr, j1 = j0 + 8; // this thread's two keys
	float adk[NT][4], adv[NT][4];
#pragma unroll
	for (int n = 0; n < NT; n++)
		adk[n][0] = adk[n][1] = adk[n][2] = adk[n][3] = adv[n][0] = adv[n][1] = adv[n][2] = adv[n][3] = 0.0f;

	for (int qg = k0 / 32; qg < groups; qg++) {
		if (first && first[b * groups + qg] > k0 + 63)
			continue; // no row of the group reaches this key tile
		int i0 = qg * 32;
		__syncthreads();
		load_rows<DP, 32>(sQ, q16 + (head + i0) * DP, S - i0);
		load_rows<DP, 32>(sdO, do16 + (head + i0) * DP, S - i0);
		load_rows_t<DP, 32>(sQt, q16 + (head + i0) * DP, S - i0);
		load_rows_t<DP, 32>(sdOt, do16 + (head + i0) * DP, S - i0);
		if (threadIdx.x < 32) {
			int i = i0 + threadIdx.x;
			bool in = i < S;
			sL[threadIdx.x] = in ? lse[head + i] : 0.0f;
			sD[threadIdx.x] = in ? delta[head + i] : 0.0f;
			sF[threadIdx.x] = in ? first_key(pos, b, S, i) : INT_MAX;
		}
		__syncthreads();

		// s^T = K q^T, dp^T = V dout^T: the warp's 16 keys by 32 rows
		float st[4][4], dpt[4][4];
#pragma unroll
		for (int n = 0; n < 4; n++)
			st[n][0] = st[n][1] = st[n][2] = st[n][3] = dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
#pragma unroll
		for (int ks = 0; ks < DP / 16; ks++) {
			uint32_t a[4], av[4];
			frag_a(a, sK, PQ, warp * 16, ks * 16, gr, tq);
			frag_a(av, sV, PQ, warp * 16, ks * 16, gr, tq);
#pragma unroll
			for (int n = 0; n < 4; n++) {
				uint32_t bb[2];
				frag_b(bb, sQ, PQ, n * 8, ks * 16, gr, tq);
				mma_bf16(st[n], a, bb);
				frag_b(bb, sdO, PQ, n * 8, ks * 16, gr, tq);
				mma_bf16(dpt[n], av, bb);
			}
		}
#pragma unroll
		for (int n = 0; n < 4; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int ii = n * 8 + 2 * tq + (e & 1), i = i0 + ii, j = e < 2 ? j0 : j1;
				bool ok = j <= i && j >= sF[ii];
				float p = ok ? expf(st[n][e] * scale - sL[ii]) : 0.0f;
				dpt[n][e] = ok ? p * (dpt[n][e] - sD[ii]) : 0.0f;
				st[n][e] = p;
			}
		uint32_t pa[2][4], da[2][4];
		c_to_a<4>(pa, st);
		c_to_a<4>(da, dpt);
#pragma unroll
		for (int ks = 0; ks < 2; ks++)
#pragma unroll
			for (int n = 0; n < NT; n++) {
				uint32_t bb[2];
				frag_b(bb, sdOt, PT, n * 8, ks * 16, gr, tq);
				mma_bf16(adv[n], pa[ks], bb);
				frag_b(bb, sQt, PT, n * 8, ks * 16, gr, tq);
				mma_bf16(adk[n], da[ks], bb);
			}
	}
#pragma unroll
	for (int n = 0; n < NT; n++) {
		int col = n * 8 + 2 * tq;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int j = e < 2 ? j0 : j1, c = col + (e & 1);
			if (j < S && c < D) {
				size_t o = (((size_t)b * S + j) * H + h) * D + c;
				dk[o] = scale * adk[n][e];
				dv[o] = adv[n][e];
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Launchers.

// The softmax scale as the CPU computes it (torch's Python float).
static float softmax_scale(int D)
{
	return (float)(1.0 / sqrt((double)D));
}

static void check_shape(const char *op, const float *scratch, int B, int S, int H, int G, int D)
{
	if (G <= 0 || H % G != 0) {
		fprintf(stderr, "%s: %s: %d query heads do not split into %d key/value groups\n", poros_cuda_progname(),
		        op, H, G);
		exit(1);
	}
	if (D > 128) {
		fprintf(stderr, "%s: %s: head dim %d is over 128, which the CUDA attention kernels do not take\n",
		        poros_cuda_progname(), op, D);
		exit(1);
	}
	if (H > 65535 || B > 65535 || (long long)B * S > INT_MAX || (long long)H * D > INT_MAX) {
		fprintf(stderr, "%s: %s: B=%d S=%d H=%d is too large for the launch grid\n", poros_cuda_progname(), op,
		        B, S, H);
		exit(1);
	}
	if (!aligned16(scratch)) {
		fprintf(stderr, "%s: %s: the scratch is not 16-byte aligned\n", poros_cuda_progname(), op);
		exit(1);
	}
}

static void pack(bf16 *dst, const float *src, int B, int S, int nh, int D)
{
	int dp = attention_dpad(D);
	long items = (long)B * nh * S * dp / 2;
	attention_pack_kernel<<<grid_for(items, PACK_THREADS), PACK_THREADS, 0, poros_cuda_compute_stream()>>>(
		dst, src, S, nh, D, dp, items);
	launchCheck();
}

// The first-key table when pos is given; NULL (no mask beyond causal) else.
static const int *first_keys(const struct attn_plan *p, const int32_t *pos, int B, int S)
{
	if (!pos)
		return NULL;
	long n = (long)B * ((S + ATTN_ROW_GROUP - 1) / ATTN_ROW_GROUP);
	attention_first_kernel<<<grid_for(n, 128), 128, 0, poros_cuda_compute_stream()>>>(p->first, pos, B, S);
	launchCheck();
	return p->first;
}

template <typename K>
static void allow_smem(K kernel, size_t bytes)
{
	cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int DP>
static size_t fwd_smem(void)
{
	return (size_t)(2 * 64 * (DP + 8) + DP * 72) * sizeof(bf16);
}

template <int DP>
static size_t dq_smem(void)
{
	return (size_t)(4 * 64 * (DP + 8) + DP * 72) * sizeof(bf16);
}

template <int DP>
static size_t dkdv_smem(void)
{
	return (size_t)(2 * 64 * (DP + 8) + 2 * 32 * (DP + 8) + 2 * DP * 40) * sizeof(bf16) + 3 * 32 * 4;
}

template <int DP>
static void forward_launch(bf16 *out, int ld_out, float *lse, const struct attn_plan *p, const int32_t *pos,
                           const int *first, int B, int S, int H, int G, int D)
{
	dim3 grid((unsigned)((S + 63) / 64), (unsigned)H, (unsigned)B);
	allow_smem(attention_fwd_kernel<DP>, fwd_smem<DP>());
	attention_fwd_kernel<DP><<<grid, ATTN_THREADS, fwd_smem<DP>(), poros_cuda_compute_stream()>>>(
		out, ld_out, lse, p->q16, p->k16, p->v16, pos, first, S, H, G, D, softmax_scale(D));
	launchCheck();
}

template <int DP>
static void backward_launch(float *dq, float *dk_h, float *dv_h, const float *lse, const struct attn_plan *p,
                            const int32_t *pos, const int *first, int B, int S, int H, int G, int D)
{
	float scale = softmax_scale(D);
	dim3 grid_q((unsigned)((S + 63) / 64), (unsigned)H, (unsigned)B);
	allow_smem(attention_dq_kernel<DP>, dq_smem<DP>());
	attention_dq_kernel<DP><<<grid_q, ATTN_THREADS, dq_smem<DP>(), poros_cuda_compute_stream()>>>(
		dq, p->delta, p->q16, p->k16, p->v16, p->dout16, lse, pos, first, S, H, G, D, scale);
	launchCheck();
	allow_smem(attention_dkdv_kernel<DP>, dkdv_smem<DP>());
	attention_dkdv_kernel<DP><<<grid_q, ATTN_THREADS, dkdv_smem<DP>(), poros_cuda_compute_stream()>>>(
		dk_h, dv_h, p->q16, p->k16, p->v16, p->dout16, lse, p->delta, pos, first, S, H, G, D, scale);
	launchCheck();
}

static void group_sum(float *dst, const float *heads, int B, int S, int H, int G, int D)
{
	long n = (long)B * S * G * D;
	bool vec = D % 4 == 0 && aligned16(dst) && aligned16(heads);
	attention_group_sum_kernel<<<grid_for(vec ? n / 4 : n, SUM_THREADS), SUM_THREADS, 0,
	                             poros_cuda_compute_stream()>>>(dst, heads, n, H, G, D, vec);
	launchCheck();
}

// out (T,H*D) bf16, rows ld_out apart (the o projection's input, with room
// for its LoRA extension); lse (B,H,S); q (T,H,D), k, v (T,G,D); pos (T)
// or NULL.
extern "C" void attention_forward_cuda(bf16 *out, int ld_out, float *lse, float *scratch, const float *q,
                                       const float *k, const float *v, const int32_t *pos, int B, int S, int H,
                                       int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	check_shape("attention_forward_cuda", scratch, B, S, H, G, D);
	check_pitch("attention_forward_cuda", "ld_out", ld_out, (long)H * D);
	struct attn_plan p = plan_of(scratch, B, S, H, G, D);
	pack(p.q16, q, B, S, H, D);
	pack(p.k16, k, B, S, G, D);
	pack(p.v16, v, B, S, G, D);
	const int *first = first_keys(&p, pos, B, S);
	if (attention_dpad(D) == 64)
		forward_launch<64>(out, ld_out, lse, &p, pos, first, B, S, H, G, D);
	else
		forward_launch<128>(out, ld_out, lse, &p, pos, first, B, S, H, G, D);
}

// dq (T,H,D), dk, dv (T,G,D) written from dout (T,H*D), q, k, v, lse, pos.
extern "C" void attention_backward_cuda(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                        const float *q, const float *k, const float *v, const float *lse,
                                        const int32_t *pos, int B, int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	check_shape("attention_backward_cuda", scratch, B, S, H, G, D);
	struct attn_plan p = plan_of(scratch, B, S, H, G, D);
	pack(p.q16, q, B, S, H, D);
	pack(p.dout16, dout, B, S, H, D);
	pack(p.k16, k, B, S, G, D);
	pack(p.v16, v, B, S, G, D);
	const int *first = first_keys(&p, pos, B, S);
	float *dk_h = G == H ? dk : p.dk_h, *dv_h = G == H ? dv : p.dv_h;
	if (attention_dpad(D) == 64)
		backward_launch<64>(dq, dk_h, dv_h, lse, &p, pos, first, B, S, H, G, D);
	else
		backward_launch<128>(dq, dk_h, dv_h, lse, &p, pos, first, B, S, H, G, D);
	if (G != H) {
		group_sum(dk, dk_h, B, S, H, G, D);
		group_sum(dv, dv_h, B, S, H, G, D);
	}
}
