// The attention kernels' element-wise parts (kernels/cuda/attention.cu): on
// the tensor cores' m16n8 accumulator layout (which Hopper's wgmma
// accumulators repeat, so kernels on either keep these), the forward's
// online-softmax step, the backward's dS of the dq pass and P^T, dS^T of
// the dk/dv pass, and the stores.
#pragma once
#include <limits.h>
#include <math.h>

#include "common.cuh"

// The cuDNN route (attention_cudnn.cu): false when it does not take the
// shape, its plan wants more workspace than given or out, lse, delta are
// not 16-byte aligned where a call starts (then the kernels here run).  Inputs are the packs at D = Dp.
extern "C" bool attention_cudnn_forward(bf16 *out, int ld_out, float *lse, void *workspace, size_t workspace_bytes,
                                        const bf16 *q16, const bf16 *k16, const bf16 *v16, int B, int S, int H,
                                        int G, int D);
extern "C" bool attention_cudnn_backward(float *dq_h, float *dk_h, float *dv_h, bf16 *grads, float *delta,
                                         void *workspace, size_t workspace_bytes, const bf16 *q16,
                                         const bf16 *kx16, const bf16 *vx16, const bf16 *do16, const bf16 *out,
                                         int ld_out, const float *lse, int heads_per_call, int B, int S, int H,
                                         int D);

// A document of a packed row: row b's tokens start .. start+len-1.
struct attention_doc {
	int b, start, len;
};

extern "C" bool attention_cudnn_forward_docs(bf16 *out, int ld_out, float *lse, void *workspace,
                                             size_t workspace_bytes, const bf16 *q16, const bf16 *k16,
                                             const bf16 *v16, int S, int H, int G, int D,
                                             const struct attention_doc *docs, int ndocs);
extern "C" bool attention_cudnn_backward_docs(float *dq_h, float *dk_h, float *dv_h, bf16 *grads,
                                              size_t grads_elems, float *delta, void *workspace,
                                              size_t workspace_bytes, const bf16 *q16, const bf16 *kx16,
                                              const bf16 *vx16, const bf16 *do16, const bf16 *out, int ld_out,
                                              const float *lse, int S, int H, int D,
                                              const struct attention_doc *docs, int ndocs);

// A long row's backward in tiles (ops.h's attention_cudnn_tiles): whether
// every tile's plan builds and fits workspace_bytes and its out, lse,
// delta rows are 16-byte aligned (nothing run), and
// the tiles (i, j), i = j..n-1, of key chunk j and query heads h0 ..
// h0+hc-1.  q16, do16 (B,H,S,D); k16, v16 the row's (B,H,S,D) packs or,
// expanded, the key chunk's (B,hc,len,D); dq (T,H,D) fp32 and the per-head
// dk_acc, dv_acc (T,Hd,D) fp32 from head hd0, each element written by its
// first tile and summed into by the rest: with j ascending in the caller,
// dq over j = 0..i and dk, dv over i = j..n-1, in that order.
extern "C" bool attention_cudnn_tiles_ready(const bf16 *out, const float *lse, const float *delta, int B, int S,
                                            int H, int hc, int C, bool expanded, int D, int ld_out,
                                            size_t workspace_bytes);
extern "C" void attention_cudnn_backward_tiles(float *dq, float *dk_acc, float *dv_acc, int Hd, int hd0, bf16 *grads,
                                               float *delta, void *workspace, const bf16 *q16, const bf16 *k16,
                                               const bf16 *v16, bool expanded, const bf16 *do16, const bf16 *out,
                                               int ld_out, const float *lse, int h0, int hc, int j, int C, int B,
                                               int S, int H, int D);

// 16 bytes from global src to shared dst by cp.async, zeros when !in (the
// copy then reads no bytes; src must still be a valid address).
__device__ __forceinline__ void cp_async16(bf16 *dst, const bf16 *src, bool in)
{
	uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(in ? 16 : 0)
	             : "memory");
}

__device__ __forceinline__ void async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most n of this thread's copy groups are in flight.
template <int N>
__device__ __forceinline__ void async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Whether query row r, whose first key is f, sees key j (the causal and
// document masks); a row past S sees none.
__device__ __forceinline__ bool key_seen(int j, int r, int f, int S)
{
	return r < S && j <= r && j >= f;
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

template <int N>
__device__ __forceinline__ void zero(float c[N][4])
{
#pragma unroll
	for (int n = 0; n < N; n++)
		c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
}

// Two bf16 in a word (lo in the low half) by the convert instruction
// (cvt.rn.bf16x2.f32, round to nearest even): pack_bf16x2's bits for every
// value but NaN, whose payload it does not keep, in one instruction where
// numerics.h's integer rounding takes about eight a value.
__device__ __forceinline__ uint32_t pack_bf16x2_rn(float lo, float hi)
{
	__nv_bfloat162_raw r = __floats2bfloat162_rn(lo, hi);
	return (uint32_t)r.x | ((uint32_t)r.y << 16);
}

// An accumulator (16 rows by 8*NT columns in n-tiles of 8, C layout) as
// the A fragments of NT/2 k-steps: n-tile 2k gives registers 0, 1 of
// k-step k, n-tile 2k+1 registers 2, 3, rounded to bf16 (P and dS are
// finite, so these are the bits of ops.h's rounding).
template <int NT>
__device__ __forceinline__ void c_to_a(uint32_t a[][4], float c[NT][4])
{
#pragma unroll
	for (int n = 0; n < NT; n++) {
		a[n >> 1][(n & 1) * 2] = pack_bf16x2_rn(c[n][0], c[n][1]);
		a[n >> 1][(n & 1) * 2 + 1] = pack_bf16x2_rn(c[n][2], c[n][3]);
	}
}

// The exponentials run in base 2 on the MUFU unit (ex2.approx, relative
// error ~2^-22, a few fp32 ulps against expf's range reduction, which
// costs a dozen integer and float instructions an element): the scores
// are scaled by scale * log2(e) and the running max and lse kept as
// log2-scaled values inside the kernels; lse leaves them in natural units.
#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

__device__ __forceinline__ float ex2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

// One thread's two query rows r0 and r0 + 8 (first keys f0, f1) and their
// online softmax: running max m (log2-scaled), sum l.
struct attn_rows {
	int r0, r1, f0, f1;
	float m0, m1, l0, l1;
};

__device__ __forceinline__ struct attn_rows attn_rows_at(const int32_t *pos, int b, int S, int r0)
{
	struct attn_rows w;
	w.r0 = r0, w.r1 = r0 + 8;
	w.f0 = w.r0 < S ? poros_first_key(pos, b, S, w.r0) : 0;
	w.f1 = w.r1 < S ? poros_first_key(pos, b, S, w.r1) : 0;
	w.m0 = w.m1 = -INFINITY, w.l0 = w.l1 = 0.0f;
	return w;
}

// Whether the thread's element (n, e) of a tile at key k0 is seen: always
// unless MASKED, then under its row's causal and document masks.
template <bool MASKED>
__device__ __forceinline__ bool elem_seen(const struct attn_rows *w, int k0, int n, int e, int tq, int S)
{
	return !MASKED || key_seen(k0 + n * 8 + 2 * tq + (e & 1), e < 2 ? w->r0 : w->r1, e < 2 ? w->f0 : w->f1, S);
}

// The forward's step over the key tile at k0 (64 keys; thread's columns
// n*8 + 2 tq + 0, 1): s (the scores q k^T of the two rows) becomes
// 2^(s scale2 - m), one fused multiply-add, with the new running max m, masked keys 0 (MASKED:
// whether any key of the tile may be unseen; scale2 = scale log2(e)); l
// is rescaled to the new max and gains this tile's sum; o's factors
// 2^(m_old - m) go to c0, c1 (rescale).
template <bool MASKED>
__device__ __forceinline__ void softmax_p(float s[8][4], struct attn_rows *w, int k0, int S, float scale2, int tq,
                                          float *c0p, float *c1p)
{
	float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
	for (int n = 0; n < 8; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			bool ok = elem_seen<MASKED>(w, k0, n, e, tq, S);
			s[n][e] = ok ? s[n][e] : -INFINITY;
			if (e < 2)
				mx0 = fmaxf(mx0, s[n][e]);
			else
				mx1 = fmaxf(mx1, s[n][e]);
		}
	// the max of the raw scores, scaled once (rounding is monotonic, so
	// this is the max of the scaled scores); each p below is one fused
	// multiply-add and one 2^x
	float n0 = fmaxf(w->m0, quad_max(mx0) * scale2), n1 = fmaxf(w->m1, quad_max(mx1) * scale2);
	float base0 = n0 == -INFINITY ? 0.0f : n0, base1 = n1 == -INFINITY ? 0.0f : n1;
	float c0 = ex2(w->m0 - base0), c1 = ex2(w->m1 - base1);
	w->m0 = n0, w->m1 = n1;
	w->l0 *= c0, w->l1 *= c1;
#pragma unroll
	for (int n = 0; n < 8; n++) {
		s[n][0] = ex2(fmaf(s[n][0], scale2, -base0)), s[n][1] = ex2(fmaf(s[n][1], scale2, -base0));
		s[n][2] = ex2(fmaf(s[n][2], scale2, -base1)), s[n][3] = ex2(fmaf(s[n][3], scale2, -base1));
		w->l0 += s[n][0], w->l0 += s[n][1], w->l1 += s[n][2], w->l1 += s[n][3];
	}
	*c0p = c0, *c1p = c1;
}

// o's rows times c0 and c1 (the rescale to a new running max).
template <int NT>
__device__ __forceinline__ void rescale(float o[NT][4], float c0, float c1)
{
#pragma unroll
	for (int n = 0; n < NT; n++)
		o[n][0] *= c0, o[n][1] *= c0, o[n][2] *= c1, o[n][3] *= c1;
}

// softmax_p with the mask taken only where a key may be unseen; the
// rescale factors through c0, c1.
__device__ __forceinline__ void softmax_tile_p(float s[8][4], struct attn_rows *w, bool masked, int k0, int S,
                                               float scale2, int tq, float *c0, float *c1)
{
	if (masked)
		softmax_p<true>(s, w, k0, S, scale2, tq, c0, c1);
	else
		softmax_p<false>(s, w, k0, S, scale2, tq, c0, c1);
}

// The whole step: P in s, o and l rescaled.
template <int NT>
__device__ __forceinline__ void softmax_tile(float s[8][4], float o[NT][4], struct attn_rows *w, bool masked, int k0,
                                             int S, float scale2, int tq)
{
	float c0, c1;
	softmax_tile_p(s, w, masked, k0, S, scale2, tq, &c0, &c1);
	rescale<NT>(o, c0, c1);
}

// Columns col and col+1 of an output row (those below D): the
// accumulators a and b over the row's softmax sum l, rounded to bf16.
__device__ __forceinline__ void store_out(bf16 *dst, float a, float b, float l, int col, int D)
{
	if (col < D)
		dst[0] = f32_to_bf16(a / l);
	if (col + 1 < D)
		dst[1] = f32_to_bf16(b / l);
}

// The forward's end: the rows' out (over their sums) and lse.
template <int NT>
__device__ __forceinline__ void forward_store(bf16 *out, int ld_out, float *lse, float o[NT][4], struct attn_rows *w,
                                              int b, int S, int h, int H, int D, int tq)
{
	w->l0 = quad_sum(w->l0), w->l1 = quad_sum(w->l1);
#pragma unroll
	for (int n = 0; n < NT; n++) {
		int col = n * 8 + 2 * tq;
		if (w->r0 < S)
			store_out(out + ((size_t)b * S + w->r0) * ld_out + (size_t)h * D + col, o[n][0], o[n][1], w->l0,
			          col, D);
		if (w->r1 < S)
			store_out(out + ((size_t)b * S + w->r1) * ld_out + (size_t)h * D + col, o[n][2], o[n][3], w->l1,
			          col, D);
	}
	if (tq == 0) {
		if (w->r0 < S)
			lse[((size_t)b * H + h) * S + w->r0] = w->m0 * ATTN_LN2 + logf(w->l0);
		if (w->r1 < S)
			lse[((size_t)b * H + h) * S + w->r1] = w->m1 * ATTN_LN2 + logf(w->l1);
	}
}

// The dq pass's step over the key tile at k0: s (scores) becomes dS = P
// (dP - delta), P = 2^(s scale2 - lse2) (lse2 = lse log2(e)), masked keys
// 0 (MASKED as in softmax_p).
template <bool MASKED>
__device__ __forceinline__ void dq_step(float s[8][4], const float dp[8][4], const struct attn_rows *w, int k0, int S,
                                        float scale2, float lse0, float lse1, float delta0, float delta1, int tq)
{
#pragma unroll
	for (int n = 0; n < 8; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			bool ok = elem_seen<MASKED>(w, k0, n, e, tq, S);
			float p = ok ? ex2(fmaf(s[n][e], scale2, -(e < 2 ? lse0 : lse1))) : 0.0f;
			s[n][e] = ok ? p * (dp[n][e] - (e < 2 ? delta0 : delta1)) : 0.0f;
		}
}

__device__ __forceinline__ void dq_tile(float s[8][4], const float dp[8][4], const struct attn_rows *w, bool masked,
                                        int k0, int S, float scale2, float lse0, float lse1, float delta0,
                                        float delta1, int tq)
{
	if (masked)
		dq_step<true>(s, dp, w, k0, S, scale2, lse0, lse1, delta0, delta1, tq);
	else
		dq_step<false>(s, dp, w, k0, S, scale2, lse0, lse1, delta0, delta1, tq);
}

// dq of the rows: scale times the accumulators, columns below D.  With
// the rotary tables (and D = NT * 8, so column c and its pair c + D/2 sit
// in the same thread, n-tiles n and n + NT/2), the inverse rotation of
// each pair goes with the store: the bits rope_backward would give the
// stored dq (numerics.h's pair on the same fp32 values).
template <int NT>
__device__ __forceinline__ void dq_store(float *dq, float acc[NT][4], const struct attn_rows *w, int b, int S, int h,
                                         int H, int D, float scale, int tq, const float *cos, const float *sin,
                                         const int32_t *pos)
{
	if (cos) {
		constexpr int HALF = NT * 4;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = e < 2 ? w->r0 : w->r1;
			if (r >= S)
				continue;
			size_t at = (size_t)poros_rope_position(pos, S, (long)b * S + r) * HALF;
			float *row = dq + (((size_t)b * S + r) * H + h) * D;
#pragma unroll
			for (int n = 0; n < NT / 2; n++) {
				int c = n * 8 + 2 * tq + (e & 1);
				float y1 = scale * acc[n][e], y2 = scale * acc[n + NT / 2][e], cs = cos[at + c], sn = -sin[at + c];
				row[c] = poros_rope_first(y1, y2, cs, sn);
				row[c + HALF] = poros_rope_second(y1, y2, cs, sn);
			}
		}
		return;
	}
#pragma unroll
	for (int n = 0; n < NT; n++) {
		int col = n * 8 + 2 * tq;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = e < 2 ? w->r0 : w->r1, c = col + (e & 1);
			if (r < S && c < D)
				dq[(((size_t)b * S + r) * H + h) * D + c] = scale * acc[n][e];
		}
	}
}

// The dk/dv pass's step: keys j0, j1 (the thread's two rows of st, dpt)
// against the NQ*8 query rows from i0 (columns), their lse2 L (lse log2(e)),
// delta Dl and first keys F (a row past S has L = +inf, so P = 0): st
// (scores k q^T) becomes P^T, dpt (v dout^T) becomes dS^T = P^T (dP^T -
// delta).
template <int NQ, bool MASKED>
__device__ __forceinline__ void dkdv_step(float st[NQ][4], float dpt[NQ][4], int i0, int j0, int j1, const float *L,
                                          const float *Dl, const int *F, float scale2, int tq)
{
#pragma unroll
	for (int n = 0; n < NQ; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int ii = n * 8 + 2 * tq + (e & 1), i = i0 + ii, j = e < 2 ? j0 : j1;
			bool ok = !MASKED || (j <= i && j >= F[ii]);
			float p = ok ? ex2(fmaf(st[n][e], scale2, -L[ii])) : 0.0f;
			dpt[n][e] = ok ? p * (dpt[n][e] - Dl[ii]) : 0.0f;
			st[n][e] = p;
		}
}

template <int NQ>
__device__ __forceinline__ void dkdv_tile(float st[NQ][4], float dpt[NQ][4], bool masked, int i0, int j0, int j1,
                                          const float *L, const float *Dl, const int *F, float scale2, int tq)
{
	if (masked)
		dkdv_step<NQ, true>(st, dpt, i0, j0, j1, L, Dl, F, scale2, tq);
	else
		dkdv_step<NQ, false>(st, dpt, i0, j0, j1, L, Dl, F, scale2, tq);
}

// dk (scale times its accumulators) and dv of keys j0, j1, head h.
template <int NT>
__device__ __forceinline__ void dkdv_store(float *dk, float *dv, float adk[NT][4], float adv[NT][4], int j0, int j1,
                                           int b, int S, int h, int H, int D, float scale, int tq)
{
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
