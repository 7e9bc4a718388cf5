// defines: attention_forward_cuda, attention_backward_cuda,
//          attention_pack_kernel, attention_first_kernel, attention_fwd_kernel,
//          attention_delta_kernel, attention_dq_kernel, attention_dkdv_kernel,
//          attention_group_sum_kernel, attention_group_sum_rot_kernel
//
// Causal grouped-query attention with document masks, fused in the manner
// of FlashAttention: tiles of q, k, v in shared memory, the products on
// tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulators), an
// online softmax in registers, and no (S,S) tensor anywhere in device
// memory.  Query head h reads key/value head g = h / (H/G).  Token i of a
// row attends key j iff first_i <= j <= i, first_i = i - pos[i] (ops.h).
// The rounding is ops.h's contract, the steps those of kernels/cpu/
// attention.c (the reference), so the two differ in the order of fp32 sums
// and in the exponential: here 2^x on the MUFU unit over log2(e)-scaled
// scores (attention.cuh), a few fp32 ulps from the CPU's expf.  The
// element-wise work of a tile (softmax step, dS, stores) is attention.cuh's.
//
// Where ops.h's attention_cudnn_route takes a call (rows of one document,
// D = Dp), the packs feed cuDNN's fused attention instead
// (attention_cudnn.cu; cudnn_backward below expands k, v to the query heads
// and sums cuDNN's per-head dk, dv with the group sums here).
//
// Shapes: the head dimension is padded with zeros to Dp = 64 or 128
// (attention_dpad), the template parameter DP; D > 128 is refused.
// Blocks of 128 threads, 4 warps; each warp owns 16 rows of the block's
// tile.  Key tiles are ATTN_KEY_TILE = 64 keys, aligned at multiples of
// 64 in the row (the online softmax's steps, as on the CPU).
// Both directions first pack q, k, v (and dout) into bf16 copies at Dp;
// given the rotary tables, the packs of q and k rotate them on the way,
// and the backward turns dq (in the dq kernel's store) and dk (in the
// group sum) back through the rotation: the engine keeps q and k
// unrotated and runs no pass of its own for RoPE.
//
// Forward, one block per (query tile of 64 rows, head, sequence):
//   q16 rows -> registers; for each key tile from the one holding the tile's
//   earliest first key up to the diagonal: K and V into shared memory (the
//   next tile's copy in flight under this one's products), S = q K^T, mask
//   (the diagonal tile and document masks only), running max and sum, acc
//   = acc c + bf16(p) V.
// Backward, four launches after the casts (in this order on one stream):
//   delta kernel, a warp per (query row, head): delta = bf16(dout) . out
//     over d, the forward's bf16 out (ops.h: rowsum(P dP) up to rounding,
//     as FlashAttention computes it), saved for both kernels below
//   dq kernel, per (query tile, head): one pass over the key tiles rebuilds
//     P and dP, dS = P (dP - delta), dq = scale bf16(dS) K
//   dk/dv kernel, per (key tile, head): over the query groups of 32 rows
//     that reach the tile, P^T and dS^T from lse and delta, dv_h += bf16(P)^T
//     dout, dk_h += bf16(dS)^T q; with G < H into per-head buffers that
//   the group sum adds, heads ascending.
// Tile products per (query tile, key tile) pair: 3 in the dq kernel (S,
// dP, dS K) and 4 in the dk/dv kernel (S^T, dP^T, P^T dout, dS^T q), 7 in
// all: FlashAttention's 5 and the S and dP the dq kernel recomputes so
// that no sum needs atomics.
// Determinism: every output element is summed by one thread in a fixed
// order of tiles (and the tensor core's fixed order inside a product);
// the cross-thread sums are fixed xor butterflies.  No atomics.
//
// Scratch (ops.h's attention_scratch_at, which the CPU carves too, in
// this order):
//   q16 (B,H,S,Dp) bf16, dout16 (B,H,S,Dp), k16 (B,G,S,Dp), v16 (B,G,S,Dp),
//   delta (B,H,S) fp32, first (B, ceil(S/32)) int32: the earliest first key
//   of each group of 32 query rows (with pos only), then with G < H dk_h,
//   dv_h (T,attention_dkdv_heads,D) fp32.  O(B*S*H*D): no (S,S) square (docs/perf-notes.md
//   gives the sizes).
#include "attention.cuh"

#define ATTN_THREADS 128
#define PACK_THREADS 256
#define SUM_THREADS 256
#define DELTA_THREADS 256 // 8 warps, a row each

// ---------------------------------------------------------------------------
// Small kernels.

// dst (B,nh,S,DP) bf16 = bf16(src (B*S,nh,D)), zeros for d >= D; eight
// elements per item, one 16-byte store.  With the rotary tables (S, D/2),
// src's rows are rotated first (numerics.h's pair in fp32, the bits
// rope_forward gives), token t at its position's angles.  vec: D = DP and
// every base 16-byte aligned, so the item's eight elements, their pairs
// (all in the other half: D/2 is a multiple of 8) and their angles load
// as float4s; otherwise element by element, the same values.
template <int DP>
__global__ void attention_pack_kernel(bf16 *dst, const float *src, const float *cos, const float *sin,
                                      const int32_t *pos, int S, int nh, int D, long items, bool vec)
{
	constexpr int PER_ROW = DP / 8, HALF = DP / 2;
	for (long it = (long)blockIdx.x * blockDim.x + threadIdx.x; it < items; it += (long)gridDim.x * blockDim.x) {
		long row = it / PER_ROW; // (b, h, s)
		int d0 = (int)(it % PER_ROW) * 8, s = (int)(row % S);
		long bh = row / S, t = bh / nh * S + s;
		const float *x = src + (t * nh + bh % nh) * D;
		float v[8];
		if (vec) {
			float4 a0 = *(const float4 *)(x + d0), a1 = *(const float4 *)(x + d0 + 4);
			float a[8] = { a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w };
			if (cos) {
				bool first = d0 < HALF;
				int i0 = first ? d0 : d0 - HALF;
				const float *px = x + (first ? d0 + HALF : d0 - HALF);
				size_t at = (size_t)poros_rope_position(pos, S, t) * HALF + i0;
				float4 p0 = *(const float4 *)px, p1 = *(const float4 *)(px + 4);
				float4 c0 = *(const float4 *)(cos + at), c1 = *(const float4 *)(cos + at + 4);
				float4 s0 = *(const float4 *)(sin + at), s1 = *(const float4 *)(sin + at + 4);
				float pr[8] = { p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w };
				float cs[8] = { c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w };
				float sn[8] = { s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w };
#pragma unroll
				for (int k = 0; k < 8; k++)
					v[k] = first ? poros_rope_first(a[k], pr[k], cs[k], sn[k])
					             : poros_rope_second(pr[k], a[k], cs[k], sn[k]);
			} else {
#pragma unroll
				for (int k = 0; k < 8; k++)
					v[k] = a[k];
			}
		} else {
			int at = cos ? poros_rope_position(pos, S, t) : 0;
#pragma unroll
			for (int k = 0; k < 8; k++) {
				int d = d0 + k;
				v[k] = d >= D ? 0.0f : cos ? poros_rope_element(x, cos, sin, at, d, D) : x[d];
			}
		}
		*(uint4 *)(dst + row * DP + d0) = pack8(v);
	}
}

// delta (B,H,S) fp32: row w = (b H + h) S + s gets sum over d < D of
// dout16[w, d] out[b S + s, h D + d] (out rows ld_out apart), one warp a
// row: lane l sums d = l, l+32, .. ascending, then a fixed xor butterfly
// (every lane ends with the same bits; lane 0 stores).  The products of
// two bf16 are exact in fp32.
__global__ void attention_delta_kernel(float *delta, const bf16 *do16, const bf16 *out, int ld_out, int S, int H,
                                       int D, int DP, long rows)
{
	int lane = threadIdx.x & 31;
	long warps = (long)gridDim.x * (blockDim.x >> 5);
	for (long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows; w += warps) {
		int s = (int)(w % S), h = (int)(w / S % H);
		long b = w / S / H;
		const bf16 *x = do16 + w * DP, *o = out + (b * S + s) * ld_out + (long)h * D;
		float acc = 0.0f;
		for (int d = lane; d < D; d += 32)
			acc += bf16_to_f32(x[d]) * bf16_to_f32(o[d]);
#pragma unroll
		for (int m = 16; m > 0; m >>= 1)
			acc += __shfl_xor_sync(0xffffffffu, acc, m);
		if (lane == 0)
			delta[w] = acc;
	}
}

// first (B, ceil(S/32)): the least first key over each group of 32 rows.
__global__ void attention_first_kernel(int *first, const int32_t *pos, int B, int S)
{
	int groups = (S + ATTN_ROW_GROUP - 1) / ATTN_ROW_GROUP;
	for (long w = (long)blockIdx.x * blockDim.x + threadIdx.x; w < (long)B * groups;
	     w += (long)gridDim.x * blockDim.x) {
		int b = (int)(w / groups), i0 = (int)(w % groups) * ATTN_ROW_GROUP, m = INT_MAX;
		for (int i = i0; i < i0 + ATTN_ROW_GROUP && i < S; i++)
			m = min(m, poros_first_key(pos, b, S, i));
		first[w] = m;
	}
}

// Groups g0..g0+Gc-1 of dst (T,Gd,D) = the sum over each group's heads,
// ascending, of heads (T,Hh,D), which holds those Gc groups' Hh heads.  n =
// T*Gc*D elements, four per item when vec; either way each element adds
// the same values in the same order.
__global__ void attention_group_sum_kernel(float *dst, const float *heads, long n, int Hh, int Gc, int Gd, int g0,
                                           int D, bool vec)
{
	int group = Hh / Gc;
	int per = vec ? 4 : 1;
	long items = n / per, stride = (long)gridDim.x * blockDim.x;
	for (long it = (long)blockIdx.x * blockDim.x + threadIdx.x; it < items; it += stride) {
		long e = it * per;
		long t = e / ((long)Gc * D);
		int g = (int)(e / D % Gc), d = (int)(e % D);
		const float *src = heads + (t * Hh + (long)g * group) * D + d;
		float *out = dst + (t * Gd + g0 + g) * D + d;
		if (vec) {
			float4 acc = *(const float4 *)src;
			for (int i = 1; i < group; i++) {
				float4 w = *(const float4 *)(src + (long)i * D);
				acc.x += w.x, acc.y += w.y, acc.z += w.z, acc.w += w.w;
			}
			*(float4 *)out = acc;
		} else {
			float acc = src[0];
			for (int i = 1; i < group; i++)
				acc += src[(long)i * D];
			*out = acc;
		}
	}
}

// As attention_group_sum_kernel, each pair (d, d + D/2) of the sums then
// turned back through the rotation at its token's angles: the bits rope_backward gives the summed dk.  One
// item a pair, and an odd D's unpaired last element one of its own.
__global__ void attention_group_sum_rot_kernel(float *dst, const float *heads, const float *cos, const float *sin,
                                               const int32_t *pos, int S, long items, int Hh, int Gc, int Gd,
                                               int g0, int D)
{
	int group = Hh / Gc, half = D / 2, per = D - half;
	for (long it = (long)blockIdx.x * blockDim.x + threadIdx.x; it < items; it += (long)gridDim.x * blockDim.x) {
		long t = it / ((long)Gc * per);
		int g = (int)(it / per % Gc), i = (int)(it % per);
		const float *src = heads + (t * Hh + (long)g * group) * D;
		float *out = dst + (t * Gd + g0 + g) * D;
		if (i == half) { /* odd D */
			float acc = src[D - 1];
			for (int k = 1; k < group; k++)
				acc += src[(long)k * D + D - 1];
			out[D - 1] = acc;
			continue;
		}
		float a = src[i], b = src[i + half];
		for (int k = 1; k < group; k++) {
			a += src[(long)k * D + i];
			b += src[(long)k * D + i + half];
		}
		size_t at = (size_t)poros_rope_position(pos, S, t) * half + i;
		float cs = cos[at], sn = -sin[at];
		out[i] = poros_rope_first(a, b, cs, sn);
		out[i + half] = poros_rope_second(a, b, cs, sn);
	}
}

// ---------------------------------------------------------------------------
// Tiles and tensor-core fragments.  A tile of ROWS rows of DP bf16 sits in
// shared memory row-major with a pitch of DP + 8 (rows 16 bytes apart mod
// 128 bytes, so the 8 rows an ldmatrix phase reads hit all 32 banks).  The
// tiles arrive by cp.async, two buffers deep where a loop walks them, so
// the next tile's copy runs under the current tile's products.  Every
// fragment comes from ldmatrix (four 8x8 matrices a warp instruction);
// the .trans form hands out the transposed fragments (V for P V, K for
// dS K, q and dout for the key-side products), so no tile is stored twice.

// Rows 0..ROWS-1 of src (rows of DP) into dst (ROWS, DP+8) by cp.async,
// zeros from row valid (the copy reads no bytes there).  Item w = thread
// + i ATTN_THREADS is row w / VEC, chunk w % VEC: the thread's chunk is
// fixed and its rows STEP apart, so the unrolled copies cost a compare
// and two additions each (a loop over w cost ~24 instructions a copy).
template <int DP, int ROWS>
__device__ __forceinline__ void load_rows_async(bf16 *dst, const bf16 *src, int valid)
{
	constexpr int VEC = DP / 8, STEP = ATTN_THREADS / VEC, PER = ROWS / STEP;
	static_assert(ATTN_THREADS % VEC == 0 && ROWS % STEP == 0, "whole rows of copies per pass");
	int r0 = threadIdx.x / VEC, c = threadIdx.x % VEC * 8;
#pragma unroll
	for (int i = 0; i < PER; i++) {
		int r = r0 + i * STEP;
		bool in = r < valid;
		cp_async16(dst + r * (DP + 8) + c, src + (size_t)(in ? r : 0) * DP + c, in);
	}
}

// The key tile at key k0 of K and V (rows of DP, S in all) into sK, sV
// (64, DP+8); not committed.
template <int DP>
__device__ __forceinline__ void load_kv_async(bf16 *sK, bf16 *sV, const bf16 *kh, const bf16 *vh, int k0, int S)
{
	load_rows_async<DP, 64>(sK, kh + (size_t)k0 * DP, S - k0);
	load_rows_async<DP, 64>(sV, vh + (size_t)k0 * DP, S - k0);
}

// c (16x8 fp32) += a (16x16 bf16, row) b (16x8 bf16, col).
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
	             "{%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 bf16 matrices; lane l gives the address of row l % 8 of matrix
// l / 8, and gets in register m row lane/4, columns 2(lane%4).. of matrix
// m (.trans: rows 2(lane%4)..+1 of column lane/4).
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p)
{
	uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16 *p)
{
	uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

// The A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile
// (matrices: rows r0, r0+8 by columns k0, then k0+8).
__device__ __forceinline__ void frag_a(uint32_t a[4], const bf16 *tile, int pitch, int r0, int k0, int lane)
{
	ldsm_x4(a, tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * pitch + k0 + (lane >> 4) * 8);
}

// B fragments of n-tiles n0 and n0+8, k0..k0+15, for B = Y^T with Y a
// row-major tile of rows n (matrices: rows n0 by k0, k0+8, rows n0+8 by
// k0, k0+8).
__device__ __forceinline__ void frag_b2(uint32_t b[2][2], const bf16 *tile, int pitch, int n0, int k0, int lane)
{
	uint32_t r[4];
	ldsm_x4(r, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * pitch + k0 + ((lane >> 3) & 1) * 8);
	b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// The same for B = X with X a row-major tile of rows k (transposed loads;
// matrices: rows k0, k0+8 by columns n0, then n0+8).
__device__ __forceinline__ void frag_bt2(uint32_t b[2][2], const bf16 *tile, int pitch, int k0, int n0, int lane)
{
	uint32_t r[4];
	ldsm_x4_t(r, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * pitch + n0 + (lane >> 4) * 8);
	b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// c[NT] += a (16 rows, k0..k0+15 of tile kt) @ B for NT n-tiles of B:
// B = Y^T (Y rows n, row-major), or with BT, B = X (X rows k, row-major).
template <int NT, bool BT>
__device__ __forceinline__ void mma_row(float c[NT][4], const uint32_t a[4], const bf16 *YX, int pitch, int k0,
                                        int lane)
{
#pragma unroll
	for (int n = 0; n < NT; n += 2) {
		uint32_t b[2][2];
		if (BT)
			frag_bt2(b, YX, pitch, k0, n * 8, lane);
		else
			frag_b2(b, YX, pitch, n * 8, k0, lane);
		mma_bf16(c[n], a, b[0]);
		mma_bf16(c[n + 1], a, b[1]);
	}
}

template <int NT>
__device__ __forceinline__ void mma_row_b(float c[NT][4], const uint32_t a[4], const bf16 *Y, int pitch, int k0,
                                          int lane)
{
	mma_row<NT, false>(c, a, Y, pitch, k0, lane);
}

// The copy step of iteration it of a loop over key tiles: when more, the
// tile at key k1 into the buffers iteration it+1 reads (the ones read one
// iteration ago); then every thread waits for this iteration's tile.
template <int DP>
__device__ __forceinline__ void next_kv_async(bf16 *sK, bf16 *sV, const bf16 *kh, const bf16 *vh, int it, bool more,
                                              int k1, int S)
{
	constexpr int TILE = 64 * (DP + 8);
	if (more) {
		load_kv_async<DP>(sK + ((it + 1) & 1) * TILE, sV + ((it + 1) & 1) * TILE, kh, vh, k1, S);
		async_commit();
		async_wait<1>();
	} else {
		async_wait<0>();
	}
	__syncthreads();
}

// s += A B^T and dp += C D^T over the KS k-steps: the warp's 16 rows (from
// r0) of the (., 16 KS) tiles A and C, against NT n-tiles of B and D.
template <int KS, int NT>
__device__ __forceinline__ void mma_two_b(float s[NT][4], float dp[NT][4], const bf16 *A, const bf16 *B,
                                          const bf16 *C, const bf16 *D, int pitch, int r0, int lane)
{
#pragma unroll
	for (int ks = 0; ks < KS; ks++) {
		uint32_t a[4];
		frag_a(a, A, pitch, r0, ks * 16, lane);
		mma_row_b<NT>(s, a, B, pitch, ks * 16, lane);
		frag_a(a, C, pitch, r0, ks * 16, lane);
		mma_row_b<NT>(dp, a, D, pitch, ks * 16, lane);
	}
}

template <int NT>
__device__ __forceinline__ void mma_row_bt(float c[NT][4], const uint32_t a[4], const bf16 *X, int pitch, int k0,
                                           int lane)
{
	mma_row<NT, true>(c, a, X, pitch, k0, lane);
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
// Shared: the q tile, then two buffers each of K and V tiles (64, DP+8).
// Only the diagonal tile and document masks need the mask; below the
// diagonal every key of a real row is seen (rows past S are never stored).
template <int DP>
__global__ void __launch_bounds__(ATTN_THREADS) attention_fwd_kernel(bf16 *out, int ld_out, float *lse,
                                                                     const bf16 *q16, const bf16 *k16,
                                                                     const bf16 *v16, const int32_t *pos,
                                                                     const int *first, int S, int H, int G, int D,
                                                                     float scale)
{
	constexpr int PQ = DP + 8, KS = DP / 16, NT = DP / 8, TILE = 64 * PQ;
	extern __shared__ uint4 attn_smem[];
	bf16 *sQ = (bf16 *)attn_smem, *sK = sQ + TILE, *sV = sK + 2 * TILE;
	int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / G);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
	int q0 = qt * 64, kt0 = first_tile(first, b, qt, S);
	const bf16 *qh = q16 + ((size_t)b * H + h) * S * DP;
	const bf16 *kh = k16 + ((size_t)b * G + g) * S * DP, *vh = v16 + ((size_t)b * G + g) * S * DP;

	load_rows_async<DP, 64>(sQ, qh + (size_t)q0 * DP, S - q0);
	load_kv_async<DP>(sK, sV, kh, vh, kt0 * 64, S);
	async_commit();
	async_wait<0>();
	__syncthreads();
	uint32_t qa[KS][4];
#pragma unroll
	for (int ks = 0; ks < KS; ks++)
		frag_a(qa[ks], sQ, PQ, warp * 16, ks * 16, lane);

	struct attn_rows w = attn_rows_at(pos, b, S, q0 + warp * 16 + gr); // this thread's two rows
	float o[NT][4];
	zero<NT>(o);

	for (int kt = kt0, it = 0; kt <= qt; kt++, it++) {
		const bf16 *cK = sK + (it & 1) * TILE, *cV = sV + (it & 1) * TILE;
		next_kv_async<DP>(sK, sV, kh, vh, it, kt < qt, (kt + 1) * 64, S);

		float s[8][4];
		zero<8>(s);
#pragma unroll
		for (int ks = 0; ks < KS; ks++)
			mma_row_b<8>(s, qa[ks], cK, PQ, ks * 16, lane);
		softmax_tile<NT>(s, o, &w, pos != NULL || kt == qt, kt * 64, S, scale * ATTN_LOG2E, tq);
		uint32_t pa[4][4];
		c_to_a<8>(pa, s);
#pragma unroll
		for (int ks = 0; ks < 4; ks++)
			mma_row_bt<NT>(o, pa[ks], cV, PQ, ks * 16, lane);
		__syncthreads(); // this tile's buffers are free for the copy after next
	}
	forward_store<NT>(out, ld_out, lse, o, &w, b, S, h, H, D, tq);
}

// ---------------------------------------------------------------------------
// Backward, dq.  grid (query tiles, H, B), longest rows first.  Shared:
// the q and dout tiles, two buffers each of K and V tiles.  One walk over
// the key tiles, delta read from the delta kernel: dS = P (dP - delta), dq
// = scale bf16(dS) K.  Rows past S compute garbage-free zeros (their q,
// dout and delta are 0) and are never stored.
template <int DP>
__global__ void __launch_bounds__(ATTN_THREADS) attention_dq_kernel(float *dq, const float *delta, const bf16 *q16,
                                                                    const bf16 *k16, const bf16 *v16,
                                                                    const bf16 *do16, const float *lse,
                                                                    const float *cos, const float *sin,
                                                                    const int32_t *pos, const int *first, int S,
                                                                    int H, int G, int D, float scale)
{
	constexpr int PQ = DP + 8, KS = DP / 16, NT = DP / 8, TILE = 64 * PQ;
	extern __shared__ uint4 attn_smem[];
	bf16 *sQ = (bf16 *)attn_smem, *sdO = sQ + TILE, *sK = sdO + TILE, *sV = sK + 2 * TILE;
	int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / G);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
	int q0 = qt * 64, kt0 = first_tile(first, b, qt, S), nk = qt - kt0 + 1;
	size_t head = ((size_t)b * H + h) * S;
	const bf16 *kh = k16 + ((size_t)b * G + g) * S * DP, *vh = v16 + ((size_t)b * G + g) * S * DP;

	load_rows_async<DP, 64>(sQ, q16 + (head + q0) * DP, S - q0);
	load_rows_async<DP, 64>(sdO, do16 + (head + q0) * DP, S - q0);
	load_kv_async<DP>(sK, sV, kh, vh, kt0 * 64, S);
	async_commit();
	struct attn_rows w = attn_rows_at(pos, b, S, q0 + warp * 16 + gr);
	int r0 = w.r0, r1 = w.r1;
	float lse0 = r0 < S ? lse[head + r0] * ATTN_LOG2E : 0.0f, lse1 = r1 < S ? lse[head + r1] * ATTN_LOG2E : 0.0f;
	float delta0 = r0 < S ? delta[head + r0] : 0.0f, delta1 = r1 < S ? delta[head + r1] : 0.0f;
	float acc[NT][4];
	zero<NT>(acc);

	for (int it = 0; it < nk; it++) {
		int kt = kt0 + it;
		const bf16 *cK = sK + (it & 1) * TILE, *cV = sV + (it & 1) * TILE;
		next_kv_async<DP>(sK, sV, kh, vh, it, it + 1 < nk, (kt + 1) * 64, S);

		float s[8][4], dp[8][4];
		zero<8>(s);
		zero<8>(dp);
		mma_two_b<KS, 8>(s, dp, sQ, cK, sdO, cV, PQ, warp * 16, lane);
		dq_tile(s, dp, &w, pos != NULL || kt == qt, kt * 64, S, scale * ATTN_LOG2E, lse0, lse1, delta0, delta1, tq);
		uint32_t da[4][4];
		c_to_a<8>(da, s);
#pragma unroll
		for (int ks = 0; ks < 4; ks++)
			mma_row_bt<NT>(acc, da[ks], cK, PQ, ks * 16, lane);
		__syncthreads();
	}
	dq_store<NT>(dq, acc, &w, b, S, h, H, D, scale, tq, cos, sin, pos);
}

// ---------------------------------------------------------------------------
// Backward, dk and dv of one query head.  grid (key tiles, heads, B): the
// call's query heads h0.. of the H, the first key tiles (the most query
// rows) first.  Shared: the K and V tiles
// (64, DP+8); two buffers of q and dout (32, DP+8) for a group of 32 query
// rows, with the rows' lse, delta and first key.  A row past S gets lse =
// +inf, so P = 0 and dS = 0 exactly.  dk, dv (T,Hs,D): head h's at h - h0.

// The next group of 32 query rows from qg on that reaches keys up to k_end.
__device__ __forceinline__ int next_group(const int *first, int b, int groups, int qg, int k_end)
{
	while (first && qg < groups && first[b * groups + qg] > k_end)
		qg++;
	return qg;
}

template <int DP>
__device__ __forceinline__ void load_group(bf16 *sQ, bf16 *sdO, float *sL, float *sD, int *sF, const bf16 *q16,
                                           const bf16 *do16, const float *lse, const float *delta,
                                           const int32_t *pos, size_t head, int b, int S, int i0)
{
	load_rows_async<DP, 32>(sQ, q16 + (head + i0) * DP, S - i0);
	load_rows_async<DP, 32>(sdO, do16 + (head + i0) * DP, S - i0);
	async_commit();
	if (threadIdx.x < 32) {
		int i = i0 + threadIdx.x;
		bool in = i < S;
		sL[threadIdx.x] = in ? lse[head + i] * ATTN_LOG2E : INFINITY; // lse2
		sD[threadIdx.x] = in ? delta[head + i] : 0.0f;
		sF[threadIdx.x] = in ? poros_first_key(pos, b, S, i) : INT_MAX;
	}
}

template <int DP>
__global__ void __launch_bounds__(ATTN_THREADS) attention_dkdv_kernel(float *dk, float *dv, const bf16 *q16,
                                                                      const bf16 *k16, const bf16 *v16,
                                                                      const bf16 *do16, const float *lse,
                                                                      const float *delta, const int32_t *pos,
                                                                      const int *first, int S, int H, int G, int D,
                                                                      int h0, int Hs, float scale)
{
	constexpr int PQ = DP + 8, KS = DP / 16, NT = DP / 8, TILE = 64 * PQ, HALF = 32 * PQ;
	extern __shared__ uint4 attn_smem[];
	bf16 *sK = (bf16 *)attn_smem, *sV = sK + TILE, *sQ = sV + TILE, *sdO = sQ + 2 * HALF;
	float *sL = (float *)(sdO + 2 * HALF), *sD = sL + 64;
	int *sF = (int *)(sD + 64);
	int kt = blockIdx.x, h = h0 + blockIdx.y, b = blockIdx.z, g = h / (H / G);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
	int k0 = kt * 64, groups = (S + 31) / 32;
	size_t head = ((size_t)b * H + h) * S;
	const bf16 *kh = k16 + ((size_t)b * G + g) * S * DP, *vh = v16 + ((size_t)b * G + g) * S * DP;

	load_kv_async<DP>(sK, sV, kh, vh, k0, S);
	int qg = next_group(first, b, groups, k0 / 32, k0 + 63);
	if (qg < groups)
		load_group<DP>(sQ, sdO, sL, sD, sF, q16, do16, lse, delta, pos, head, b, S, qg * 32);
	else
		async_commit();
	int j0 = k0 + warp * 16 + gr, j1 = j0 + 8; // this thread's two keys
	float adk[NT][4], adv[NT][4];
	zero<NT>(adk);
	zero<NT>(adv);

	for (int it = 0; qg < groups; it++) {
		int cur = it & 1, nq = next_group(first, b, groups, qg + 1, k0 + 63);
		const bf16 *cQ = sQ + cur * HALF, *cdO = sdO + cur * HALF;
		const float *cL = sL + cur * 32, *cD = sD + cur * 32;
		const int *cF = sF + cur * 32;
		if (nq < groups) {
			int nx = cur ^ 1;
			load_group<DP>(sQ + nx * HALF, sdO + nx * HALF, sL + nx * 32, sD + nx * 32, sF + nx * 32, q16,
			               do16, lse, delta, pos, head, b, S, nq * 32);
			async_wait<1>();
		} else {
			async_wait<0>();
		}
		__syncthreads();

		// s^T = K q^T, dp^T = V dout^T: the warp's 16 keys by 32 rows
		float st[4][4], dpt[4][4];
		zero<4>(st);
		zero<4>(dpt);
		mma_two_b<KS, 4>(st, dpt, sK, cQ, sV, cdO, PQ, warp * 16, lane);
		int i0 = qg * 32;
		dkdv_tile<4>(st, dpt, pos != NULL || i0 < k0 + 64, i0, j0, j1, cL, cD, cF, scale * ATTN_LOG2E, tq);
		uint32_t pa[2][4], da[2][4];
		c_to_a<4>(pa, st);
		c_to_a<4>(da, dpt);
#pragma unroll
		for (int ks = 0; ks < 2; ks++) {
			mma_row_bt<NT>(adv, pa[ks], cdO, PQ, ks * 16, lane);
			mma_row_bt<NT>(adk, da[ks], cQ, PQ, ks * 16, lane);
		}
		__syncthreads();
		qg = nq;
	}
	async_wait<0>(); // no copy outlives the block (none is pending when a group ran)
	dkdv_store<NT>(dk, dv, adk, adv, j0, j1, b, S, h - h0, Hs, D, scale, tq);
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

// dst = bf16 copy of src at the padded head dim; rotated when cos is given.
static void pack(bf16 *dst, const float *src, const float *cos, const float *sin, const int32_t *pos, int B, int S,
                 int nh, int D)
{
	int dp = attention_dpad(D);
	long items = (long)B * nh * S * (dp / 8);
	bool vec = D == dp && aligned16(src) && (!cos || (aligned16(cos) && aligned16(sin)));
	unsigned grid = grid_for(items, PACK_THREADS);
	cudaStream_t stream = poros_cuda_compute_stream();
	if (dp == 64)
		attention_pack_kernel<64><<<grid, PACK_THREADS, 0, stream>>>(dst, src, cos, sin, pos, S, nh, D, items, vec);
	else
		attention_pack_kernel<128><<<grid, PACK_THREADS, 0, stream>>>(dst, src, cos, sin, pos, S, nh, D, items, vec);
	launchCheck();
}

// delta (B,H,S) from the packed dout16 and the forward's out, a warp a row.
static void deltas(float *delta, const bf16 *do16, const bf16 *out, int ld_out, int B, int S, int H, int D)
{
	long rows = (long)B * H * S;
	attention_delta_kernel<<<grid_for(rows * 32, DELTA_THREADS), DELTA_THREADS, 0, poros_cuda_compute_stream()>>>(
		delta, do16, out, ld_out, S, H, D, attention_dpad(D), rows);
	launchCheck();
}

// The first-key table when pos is given; NULL (no mask beyond causal) else.
static const int *first_keys(const struct attention_scratch *p, const int32_t *pos, int B, int S)
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
	return (size_t)5 * 64 * (DP + 8) * sizeof(bf16); // q, 2 K, 2 V
}

template <int DP>
static size_t dq_smem(void)
{
	return (size_t)6 * 64 * (DP + 8) * sizeof(bf16); // q, dout, 2 K, 2 V
}

template <int DP>
static size_t dkdv_smem(void)
{
	// K, V; 2 q, 2 dout of 32 rows; 2 x 32 lse, delta, first
	return (size_t)(2 * 64 + 4 * 32) * (DP + 8) * sizeof(bf16) + 3 * 64 * 4;
}

template <int DP>
static void forward_launch(bf16 *out, int ld_out, float *lse, const struct attention_scratch *p, const int32_t *pos,
                           const int *first, int B, int S, int H, int G, int D)
{
	dim3 grid((unsigned)((S + 63) / 64), (unsigned)H, (unsigned)B);
	allow_smem(attention_fwd_kernel<DP>, fwd_smem<DP>());
	attention_fwd_kernel<DP><<<grid, ATTN_THREADS, fwd_smem<DP>(), poros_cuda_compute_stream()>>>(
		out, ld_out, lse, p->q16, p->k16, p->v16, pos, first, S, H, G, D, softmax_scale(D));
	launchCheck();
}

template <int DP>
static void dq_launch(float *dq, const float *lse, const struct attention_scratch *p, const float *cos,
                      const float *sin, const int32_t *pos, const int *first, int B, int S, int H, int G, int D)
{
	dim3 grid((unsigned)((S + 63) / 64), (unsigned)H, (unsigned)B);
	allow_smem(attention_dq_kernel<DP>, dq_smem<DP>());
	attention_dq_kernel<DP><<<grid, ATTN_THREADS, dq_smem<DP>(), poros_cuda_compute_stream()>>>(
		dq, p->delta, p->q16, p->k16, p->v16, p->dout16, lse, cos, sin, pos, first, S, H, G, D, softmax_scale(D));
	launchCheck();
}

// dk, dv (T,nh,D) of query heads h0..h0+nh-1.
template <int DP>
static void dkdv_launch(float *dk, float *dv, const float *lse, const struct attention_scratch *p,
                        const int32_t *pos, const int *first, int B, int S, int H, int G, int D, int h0, int nh)
{
	dim3 grid((unsigned)((S + 63) / 64), (unsigned)nh, (unsigned)B);
	allow_smem(attention_dkdv_kernel<DP>, dkdv_smem<DP>());
	attention_dkdv_kernel<DP><<<grid, ATTN_THREADS, dkdv_smem<DP>(), poros_cuda_compute_stream()>>>(
		dk, dv, p->q16, p->k16, p->v16, p->dout16, lse, p->delta, pos, first, S, H, G, D, h0, nh,
		softmax_scale(D));
	launchCheck();
}

// Groups g0..g0+Gc-1 of dst (T,G,D) from heads (T,Gc*H/G,D), those groups' heads.
static void group_sum(float *dst, const float *heads, int B, int S, int H, int G, int D, int g0, int Gc)
{
	long n = (long)B * S * Gc * D;
	bool vec = D % 4 == 0 && aligned16(dst) && aligned16(heads);
	attention_group_sum_kernel<<<grid_for(vec ? n / 4 : n, SUM_THREADS), SUM_THREADS, 0,
	                             poros_cuda_compute_stream()>>>(dst, heads, n, Gc * (H / G), Gc, G, g0, D, vec);
	launchCheck();
}

// dk's groups as group_sum gives them, turned back through the rotation.
static void group_sum_rot(float *dst, const float *heads, const float *cos, const float *sin, const int32_t *pos,
                          int B, int S, int H, int G, int D, int g0, int Gc)
{
	long items = (long)B * S * Gc * (D - D / 2);
	attention_group_sum_rot_kernel<<<grid_for(items, SUM_THREADS), SUM_THREADS, 0, poros_cuda_compute_stream()>>>(
		dst, heads, cos, sin, pos, S, items, Gc * (H / G), Gc, G, g0, D);
	launchCheck();
}

// dk, dv (T,G,D) of the per-head sums: every group at once, or (grouped
// scratch, ops.h's attention_dkdv_heads) one group at a time, each group's
// heads computed into dk_h, dv_h and summed before the next.
template <int DP>
static void dkdv_groups(float *dk, float *dv, const float *lse, const struct attention_scratch *p, const float *cos,
                        const float *sin, const int32_t *pos, const int *first, int B, int S, int H, int G, int D)
{
	if (G == H) {
		dkdv_launch<DP>(dk, dv, lse, p, pos, first, B, S, H, G, D, 0, H);
		if (cos)
			rope_backward_cuda(dk, cos, sin, pos, B, S, G, D);
		return;
	}
	int r = H / G, gc = attention_dkdv_heads(B, S, H, G, D) / r;
	for (int g0 = 0; g0 < G; g0 += gc) {
		dkdv_launch<DP>(p->dk_h, p->dv_h, lse, p, pos, first, B, S, H, G, D, g0 * r, gc * r);
		if (cos)
			group_sum_rot(dk, p->dk_h, cos, sin, pos, B, S, H, G, D, g0, gc);
		else
			group_sum(dk, p->dk_h, B, S, H, G, D, g0, gc);
		group_sum(dv, p->dv_h, B, S, H, G, D, g0, gc);
	}
}

// The cuDNN route's parts after the scratch (ops.h's attention_cudnn_parts).
struct cudnn_scratch {
	bf16 *kx, *vx;            // (B,H,S,D): k, v expanded to the query heads (G < H); tiles: (B,hc,C,D)
	bf16 *grads;              // (B,heads,S,D) three times: one call's dq, dk, dv (tiles: (B,hc,C,D))
	size_t grads_elems;       // bf16 elements of each of the three
	void *workspace;
	size_t workspace_bytes;
};

static struct cudnn_scratch cudnn_scratch_at(float *scratch, int B, int S, int H, int G, int D)
{
	struct attention_cudnn_parts q = attention_cudnn_parts_of(B, S, H, G, D);
	float *at = scratch + attention_scratch_floats(B, S, H, G, D);
	struct cudnn_scratch c;
	c.kx = q.kv ? (bf16 *)at : NULL;
	c.vx = q.kv ? (bf16 *)(at + q.kv) : NULL;
	at += 2 * q.kv;
	c.grads = (bf16 *)at;
	c.grads_elems = 2 * q.grads;
	c.workspace = at + 3 * q.grads;
	c.workspace_bytes = q.workspace * sizeof(float);
	return c;
}

// dst (B,hc,len,D) = rows r0 .. r0+len-1 of query heads h0 .. h0+hc-1 of
// src (B,G,S,D) expanded, query head h taking key/value head h/(H/G); 16
// bytes an item (S*D and len*D are multiples of 8, the parts 16-byte
// aligned).  Grid-stride: grid_for's grid covers at most 2^24 items (2^27
// bf16).
__global__ void attention_expand_kernel(uint4 *dst, const uint4 *src, long head_items, long src_head_items,
                                        long src_at, int H, int G, int h0, int hc, long items)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += (long)gridDim.x * blockDim.x) {
		long bh = i / head_items, e = i % head_items;
		long b = bh / hc, h = h0 + bh % hc;
		dst[i] = src[(b * G + h / (H / G)) * src_head_items + src_at + e];
	}
}

static void expand(bf16 *dst, const bf16 *src, int B, int S, int H, int G, int D, int h0, int hc, int r0, int len)
{
	long head_items = (long)len * D / 8, items = (long)B * hc * head_items;
	attention_expand_kernel<<<grid_for(items, SUM_THREADS), SUM_THREADS, 0, poros_cuda_compute_stream()>>>(
		(uint4 *)dst, (const uint4 *)src, head_items, (long)S * D / 8, (long)r0 * D / 8, H, G, h0, hc, items);
	launchCheck();
}


// Packed rows on cuDNN: the engine names the host copy of the positions it
// gives the ops (attention_cuda_pos_mirror), so the documents of a call are
// known on the host without waiting for the device; a call whose pos is
// not inside the mirror takes the kernels.
static struct {
	const int32_t *dev, *host;
	size_t n;
} mirror;

extern "C" void attention_cuda_pos_mirror(const int32_t *dev, const int32_t *host, size_t n)
{
	mirror.dev = dev, mirror.host = host, mirror.n = host ? n : 0;
}

// The documents of a call's rows (pos read from the mirror, clamped as the
// kernels clamp it): the maximal runs whose first keys agree.  0 when pos
// is not mirrored, a row is not block-diagonal (a first key that neither
// continues the run nor starts a new one), or there are more than
// ATTN_CUDNN_MAX_DOCS documents, or one shorter than attention_cudnn_doc_min
// or not a multiple of the quantum (ops.h says why).
static int documents(struct attention_doc *docs, const int32_t *pos, int B, int S)
{
	if (!mirror.host || pos < mirror.dev || pos + (size_t)B * S > mirror.dev + mirror.n)
		return 0;
	const int32_t *h = mirror.host + (pos - mirror.dev);
	int n = 0, min_len = attention_cudnn_doc_min(), quantum = attention_cudnn_doc_quantum();
	for (int b = 0; b < B; b++) {
		int start = 0;
		for (int i = 1; i <= S; i++) {
			int f = i < S ? poros_first_key(h, b, S, i) : S;
			if (f == start)
				continue;
			if (f != i || n == ATTN_CUDNN_MAX_DOCS || i - start < min_len || (i - start) % quantum)
				return 0;
			docs[n].b = b, docs[n].start = start, docs[n].len = i - start;
			n++, start = i;
		}
	}
	return n;
}

// A long row's backward through cuDNN in tiles (ops.h's
// attention_cudnn_tiles), after the packs: hc query heads at a time, key
// chunk by key chunk (with G < H, k and v of the chunk expanded to those
// heads), each tile's gradients summed into dq and the per-head dk_h, dv_h
// of their group, which is summed (and dk rotated) once its heads are
// done, as the grouped kernels do.  false (nothing run) when a tile's plan
// does not build or fit.
static bool cudnn_backward_tiles(float *dq, float *dk, float *dv, float *scratch, const struct attention_scratch *p,
                                 const bf16 *out, int ld_out, const float *cos, const float *sin, const float *lse,
                                 struct attention_cudnn_tiling t, int B, int S, int H, int G, int D)
{
	struct cudnn_scratch c = cudnn_scratch_at(scratch, B, S, H, G, D);
	int r = H / G, n = (S + t.C - 1) / t.C;
	bool expanded = G != H;
	if (!attention_cudnn_tiles_ready(out, lse, p->delta, B, S, H, t.hc, t.C, expanded, D, ld_out, c.workspace_bytes))
		return false;
	float *dk_acc = expanded ? p->dk_h : dk, *dv_acc = expanded ? p->dv_h : dv;
	for (int h0 = 0; h0 < H; h0 += t.hc) {
		int Hd = expanded ? r : H, hd0 = expanded ? h0 % r : h0;
		for (int j = 0; j < n; j++) {
			const bf16 *kx = p->k16, *vx = p->v16;
			if (expanded) {
				int len = S - j * t.C < t.C ? S - j * t.C : t.C;
				expand(c.kx, p->k16, B, S, H, G, D, h0, t.hc, j * t.C, len);
				expand(c.vx, p->v16, B, S, H, G, D, h0, t.hc, j * t.C, len);
				kx = c.kx, vx = c.vx;
			}
			attention_cudnn_backward_tiles(dq, dk_acc, dv_acc, Hd, hd0, c.grads, p->delta, c.workspace, p->q16,
			                               kx, vx, expanded, p->dout16, out, ld_out, lse, h0, t.hc, j, t.C, B,
			                               S, H, D);
		}
		if (expanded && (h0 + t.hc) % r == 0) { // group h0 / r has all its heads
			if (cos)
				group_sum_rot(dk, p->dk_h, cos, sin, NULL, B, S, H, G, D, h0 / r, 1);
			else
				group_sum(dk, p->dk_h, B, S, H, G, D, h0 / r, 1);
			group_sum(dv, p->dv_h, B, S, H, G, D, h0 / r, 1);
		}
	}
	if (cos) {
		rope_backward_cuda(dq, cos, sin, NULL, B, S, H, D);
		if (!expanded)
			rope_backward_cuda(dk, cos, sin, NULL, B, S, G, D);
	}
	return true;
}

// The backward through cuDNN after the packs: dq, dk, dv (fp32, at q and k
// as given when the tables are), or false when its plan does not run here.
// cuDNN's gradients per query head are widened into dq and (G = H) dk, dv,
// or (G < H) the per-head parts, summed over each group's heads in
// ascending order as the kernels' are.  With pos, packed rows: one call
// per document (false when the documents do not take the route).
static bool cudnn_backward(float *dq, float *dk, float *dv, float *scratch, const struct attention_scratch *p,
                           const bf16 *out, int ld_out, const float *cos, const float *sin, const float *lse,
                           const int32_t *pos, int B, int S, int H, int G, int D)
{
	struct attention_doc docs[ATTN_CUDNN_MAX_DOCS];
	int ndocs = pos ? documents(docs, pos, B, S) : 0, hc = attention_cudnn_heads(B, S, H, D);
	if (pos && ndocs == 0)
		return false;
	struct cudnn_scratch c = cudnn_scratch_at(scratch, B, S, H, G, D);
	const bf16 *kx = p->k16, *vx = p->v16;
	if (G != H) {
		expand(c.kx, p->k16, B, S, H, G, D, 0, H, 0, S);
		expand(c.vx, p->v16, B, S, H, G, D, 0, H, 0, S);
		kx = c.kx, vx = c.vx;
	}
	float *dk_h = G == H ? dk : p->dk_h, *dv_h = G == H ? dv : p->dv_h;
	bool ran = pos ? attention_cudnn_backward_docs(dq, dk_h, dv_h, c.grads, c.grads_elems, p->delta,
	                                              c.workspace, c.workspace_bytes, p->q16, kx, vx, p->dout16, out,
	                                              ld_out, lse, S, H, D, docs, ndocs)
	               : attention_cudnn_backward(dq, dk_h, dv_h, c.grads, p->delta, c.workspace, c.workspace_bytes,
	                                          p->q16, kx, vx, p->dout16, out, ld_out, lse, hc, B, S, H, D);
	if (!ran)
		return false;
	if (cos)
		rope_backward_cuda(dq, cos, sin, pos, B, S, H, D);
	if (G == H) {
		if (cos)
			rope_backward_cuda(dk, cos, sin, pos, B, S, G, D);
		return true;
	}
	if (cos)
		group_sum_rot(dk, dk_h, cos, sin, pos, B, S, H, G, D, 0, G);
	else
		group_sum(dk, dk_h, B, S, H, G, D, 0, G);
	group_sum(dv, dv_h, B, S, H, G, D, 0, G);
	return true;
}

// out (T,H*D) bf16, rows ld_out apart (the o projection's input, with room
// for its LoRA extension); lse (B,H,S); q (T,H,D), k, v (T,G,D), q and k
// rotated as they are packed when the tables are given; pos (T) or NULL.
extern "C" void attention_forward_cuda(bf16 *out, int ld_out, float *lse, float *scratch, const float *q,
                                       const float *k, const float *v, const float *rope_cos,
                                       const float *rope_sin, const int32_t *pos, int B, int S, int H, int G,
                                       int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	check_shape("attention_forward_cuda", scratch, B, S, H, G, D);
	check_pitch("attention_forward_cuda", "ld_out", ld_out, (long)H * D);
	struct attention_scratch p = attention_scratch_at(scratch, B, S, H, G, D);
	pack(p.q16, q, rope_cos, rope_sin, pos, B, S, H, D);
	pack(p.k16, k, rope_cos, rope_sin, pos, B, S, G, D);
	pack(p.v16, v, NULL, NULL, NULL, B, S, G, D);
	if (!pos && attention_cudnn_route(D, S)) {
		struct cudnn_scratch c = cudnn_scratch_at(scratch, B, S, H, G, D);
		if (attention_cudnn_forward(out, ld_out, lse, c.workspace, c.workspace_bytes, p.q16, p.k16, p.v16, B, S,
		                            H, G, D))
			return;
	}
	struct attention_doc docs[ATTN_CUDNN_MAX_DOCS];
	int ndocs = pos && attention_cudnn_route(D, S) ? documents(docs, pos, B, S) : 0;
	if (ndocs > 0) {
		struct cudnn_scratch c = cudnn_scratch_at(scratch, B, S, H, G, D);
		if (attention_cudnn_forward_docs(out, ld_out, lse, c.workspace, c.workspace_bytes, p.q16, p.k16, p.v16, S,
		                                 H, G, D, docs, ndocs))
			return;
	}
	const int *first = first_keys(&p, pos, B, S);
	if (attention_dpad(D) == 64)
		forward_launch<64>(out, ld_out, lse, &p, pos, first, B, S, H, G, D);
	else
		forward_launch<128>(out, ld_out, lse, &p, pos, first, B, S, H, G, D);
}

// dq (T,H,D), dk, dv (T,G,D) written from dout (T,H*D), the forward's out
// (T,H*D) bf16 (rows ld_out apart), q, k, v, the tables (as in forward; dq
// and dk are then at q and k as given, before the rotation), lse, pos.
extern "C" void attention_backward_cuda(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                        const bf16 *out, int ld_out, const float *q, const float *k,
                                        const float *v, const float *rope_cos, const float *rope_sin,
                                        const float *lse, const int32_t *pos, int B, int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	check_shape("attention_backward_cuda", scratch, B, S, H, G, D);
	check_pitch("attention_backward_cuda", "ld_out", ld_out, (long)H * D);
	struct attention_scratch p = attention_scratch_at(scratch, B, S, H, G, D);
	pack(p.q16, q, rope_cos, rope_sin, pos, B, S, H, D);
	pack(p.dout16, dout, NULL, NULL, NULL, B, S, H, D);
	pack(p.k16, k, rope_cos, rope_sin, pos, B, S, G, D);
	pack(p.v16, v, NULL, NULL, NULL, B, S, G, D);
	struct attention_cudnn_tiling tiles = attention_cudnn_tiles(B, S, H, G, D);
	if (!pos && tiles.hc > 0 &&
	    cudnn_backward_tiles(dq, dk, dv, scratch, &p, out, ld_out, rope_cos, rope_sin, lse, tiles, B, S, H, G, D))
		return;
	if (tiles.hc == 0 && attention_cudnn_route(D, S) && attention_cudnn_heads(B, S, H, D) > 0 &&
	    cudnn_backward(dq, dk, dv, scratch, &p, out, ld_out, rope_cos, rope_sin, lse, pos, B, S, H, G, D))
		return;
	deltas(p.delta, p.dout16, out, ld_out, B, S, H, D); // before the dq and dk/dv kernels, which read it
	const int *first = first_keys(&p, pos, B, S);
	/* dq and dk back through the rotation: dq in the dq kernel's store
	 * where D fills the padded width (a pair in one thread), dk in the
	 * group sum; otherwise a rope_backward pass after */
	bool dq_rot = rope_cos && D == attention_dpad(D);
	const float *cq = dq_rot ? rope_cos : NULL, *sq = dq_rot ? rope_sin : NULL;
	if (attention_dpad(D) == 64) {
		dq_launch<64>(dq, lse, &p, cq, sq, pos, first, B, S, H, G, D);
		dkdv_groups<64>(dk, dv, lse, &p, rope_cos, rope_sin, pos, first, B, S, H, G, D);
	} else {
		dq_launch<128>(dq, lse, &p, cq, sq, pos, first, B, S, H, G, D);
		dkdv_groups<128>(dk, dv, lse, &p, rope_cos, rope_sin, pos, first, B, S, H, G, D);
	}
	if (rope_cos && !dq_rot)
		rope_backward_cuda(dq, rope_cos, rope_sin, pos, B, S, H, D);
}
