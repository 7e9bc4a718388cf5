// defines: attention_forward_cuda, attention_backward_cuda,
//          attention_cast_kernel, attention_softmax_kernel,
//          attention_softmax_backward_kernel, attention_group_sum_kernel
//
// Causal grouped-query attention, softmax scale 1/sqrt(D): query head h
// reads key/value head g = h / (H/G).  Every product is a bf16 cuBLAS GEMM
// on tensor cores with fp32 accumulation, rounded as ops.h's precision
// contract says (q, k, v, dout, P and dS to bf16 before the products that
// read them; scores, softmax, dP and dS in fp32), so the CPU reference
// differs only in the order of its sums.  The softmax and its gradient are
// row kernels with fixed-order block reductions; nothing is allocated.
//
// Few, large products: each one is ONE strided-batched GEMM per sequence b
// over all H query heads and the whole S x S square.  The masked half
// (keys j > i) is computed too, but P16 and dS16 are exactly 0 there, so
// it adds nothing to out, dv, dq or dk; the tensor-core FLOPs are cheap
// next to the launches and latency of many small per-block calls.  The
// key/value heads are cast EXPANDED to (T,H,D) (query head h gets its
// group's row), so every product has constant strides over the H heads.
//
// Scratch (attention_cuda_floats(B,S,H,D) floats, ops.h's attention_parts;
// each part starts on 16 bytes when the scratch does):
//   A   (B,H,S,S) fp32: the scores; the row kernels turn each row into P16
//       (S bf16 in the row's first half), in place
//   D   (B,H,S,S) fp32, backward only: dP; then dS16 in each row's first
//       half, in place
//   C0  (T,H,D) bf16: q16
//   C1  (T,H,D) bf16: k16e, k expanded
//   C2  (T,H,D) bf16: v16e, v expanded (backward)
//   C3  (T,H,D) bf16: dout16 (backward), v16e (forward)
//   E   (T,H,D) fp32 over C1..C2 (two bf16 copies' worth): forward's
//       output before its bf16 cast; backward's per-head dv_h, then dk_h,
//       each summed over the group into dv, dk.  E only comes to life
//       after the last product that reads k16e (and v16e in backward).
// In floats: 2*B*H*S*S + 2*T*H*D (+ rounding), against 2*B*H*S*S +
// 4*B*H*S for the fp32 attention before the blocked one; Qwen2.5-72B
// (H=64, D=128) at S=512: 41943040 against 33685504 (+33.0 MB).
//
// Forward (one sequence b: 2 GEMMs; kernels: cast, softmax, out cast):
//   cast q, k, v -> C0, C1, C3
//   A = scale q16 k16e^T                        scores (b,h,i,j)
//   softmax rows: lse saved, P16 in place in A
//   E = P16 v16e                                (T,H*D) fp32
//   out = bf16(E), rows ld_out apart
// Backward (5 GEMMs per b; kernels: cast, gradient rows, 2 group sums):
//   cast q, k, v, dout -> C0, C1, C2, C3
//   A = scale q16 k16e^T;  D = dout16 v16e^T    (v16e dead)
//   gradient rows: P = e^(s - lse), delta = sum_j P dP, P16 in place in A,
//                  dS16 = bf16(P (dP - delta)) in place in D
//   dq = scale dS16 k16e                        (k16e dead: E may start)
//   E = P16^T dout16;          dv = group sum of E
//   E = scale dS16^T q16;      dk = group sum of E
//
// Determinism: every GEMM's shape and operands depend on the shape alone,
// each product is computed whole by one GEMM with beta 0, and the group
// sums add the group's heads in ascending order.  No atomics.
//
// Layouts (row-major): q (T,H,D), k, v (T,G,D), out (T,H*D), T = B*S; the
// rows of one head are H*D elements apart (in the expanded copies too),
// which is the leading dimension cuBLAS is given, and the heads D apart,
// the batch stride.  P16 and dS16 rows are 2*S bf16 apart, S*S fp32 = 2*S*S
// bf16 between heads.  In cuBLAS's column-major view a row-major (rows,
// cols) matrix with row stride ld is a (cols, rows) one with leading
// dimension ld.
#include <limits.h>
#include <math.h>

#include "common.cuh"

#define ROW_THREADS 128
#define CAST_THREADS 256
#define SUM_THREADS 256

// Where the scratch's parts are for one shape; unused parts are NULL.
struct attn_plan {
	int B, S, H, G, D;
	float *scores; // A
	float *grads;  // D (backward)
	bf16 *q16, *k16e, *v16e, *dout16;
	float *heads; // E
};

static struct attn_plan plan_of(float *scratch, int B, int S, int H, int G, int D, bool backward)
{
	struct attention_parts parts = attention_parts_of(B, S, H, D);
	struct attn_plan p;
	p.B = B, p.S = S, p.H = H, p.G = G, p.D = D;
	p.scores = scratch;
	p.grads = scratch + parts.square;
	float *copies = scratch + 2 * parts.square;
	p.q16 = (bf16 *)copies;
	p.k16e = (bf16 *)(copies + parts.copy);
	p.heads = copies + parts.copy;
	if (backward) {
		p.v16e = (bf16 *)(copies + 2 * parts.copy);
		p.dout16 = (bf16 *)(copies + 3 * parts.copy);
	} else { // E covers C1..C2, so v16e lives where dout16 would
		p.grads = NULL;
		p.v16e = (bf16 *)(copies + 3 * parts.copy);
		p.dout16 = NULL;
	}
	return p;
}

// ---------------------------------------------------------------------------
// Kernels.  The row kernels give each thread four consecutive keys of a
// chunk of 4*blockDim.x keys, walked in chunk order; vec only widens the
// loads and stores (S % 4 == 0 and 16-byte rows), so the order of every
// sum, and the bits, depend on S alone.

// q16 (T,H,D) = bf16(q); k16e, v16e (T,H,D) = bf16 of k, v (T,G,D) at the
// query head's key/value head; dout16 = bf16(dout) unless dout is NULL.
// n = T*H*D elements, four per item when vec (D % 4 == 0, aligned).
__global__ void attention_cast_kernel(bf16 *q16, bf16 *k16e, bf16 *v16e, bf16 *dout16, const float *q,
                                      const float *k, const float *v, const float *dout, long n, int H, int G,
                                      int D, bool vec)
{
	int group = H / G;
	int per = vec ? 4 : 1;
	long items = n / per, stride = (long)gridDim.x * blockDim.x;
	for (long it = (long)blockIdx.x * blockDim.x + threadIdx.x; it < items; it += stride) {
		long e = it * per;
		long t = e / ((long)H * D);
		int h = (int)(e / D % H), d = (int)(e % D);
		long kv = (t * G + h / group) * D + d;
		if (vec) {
			float4 x = *(const float4 *)(q + e);
			*(uint2 *)(q16 + e) = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
			x = *(const float4 *)(k + kv);
			*(uint2 *)(k16e + e) = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
			x = *(const float4 *)(v + kv);
			*(uint2 *)(v16e + e) = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
			if (dout) {
				x = *(const float4 *)(dout + e);
				*(uint2 *)(dout16 + e) = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
			}
		} else {
			q16[e] = f32_to_bf16(q[e]);
			k16e[e] = f32_to_bf16(k[kv]);
			v16e[e] = f32_to_bf16(v[kv]);
			if (dout)
				dout16[e] = f32_to_bf16(dout[e]);
		}
	}
}

// Keys j..j+3 of a row of S floats (j < S); those past S read as 0.
__device__ __forceinline__ void load_keys(float x[4], const float *row, int j, int S, bool vec)
{
	if (vec) { // S % 4 == 0 and j % 4 == 0, so j + 3 < S
		float4 w = *(const float4 *)(row + j);
		x[0] = w.x, x[1] = w.y, x[2] = w.z, x[3] = w.w;
		return;
	}
	for (int u = 0; u < 4; u++)
		x[u] = j + u < S ? row[j + u] : 0.0f;
}

// bf16 of keys j..j+3 into a row of S bf16 (j < S); those past S dropped.
__device__ __forceinline__ void store_keys16(bf16 *row, int j, int S, const float x[4], bool vec)
{
	if (vec) {
		*(uint2 *)(row + j) = make_uint2(pack_bf16x2(x[0], x[1]), pack_bf16x2(x[2], x[3]));
		return;
	}
	for (int u = 0; u < 4; u++)
		if (j + u < S)
			row[j + u] = f32_to_bf16(x[u]);
}

// One block per row (b,h,i) of S fp32 scores: P_ij = e^(s_ij - max) / sum
// over keys j <= i, 0 beyond; lse = max + log(sum).  P16 is written in
// place over the row's first S bf16: key j's bf16 lands on float j/2, so
// in each chunk every thread reads its keys before the barrier and writes
// after it, and a chunk's writes reach only floats of that chunk or
// earlier ones, all read by then.
__global__ void attention_softmax_kernel(float *scores, float *lse, int S, bool vec)
{
	long row = blockIdx.x; // (b*H + h)*S + i
	int L = (int)(row % S) + 1, chunk = 4 * blockDim.x, j0 = 4 * threadIdx.x;
	float *s = scores + row * S;
	float x[4];
	float m = -INFINITY;
	for (int c0 = 0; c0 < L; c0 += chunk) {
		int j = c0 + j0;
		if (j < L) {
			load_keys(x, s, j, S, vec);
			for (int u = 0; u < 4; u++)
				if (j + u < L)
					m = fmaxf(m, x[u]);
		}
	}
	m = block_max(m);
	float sum = 0.0f;
	for (int c0 = 0; c0 < L; c0 += chunk) {
		int j = c0 + j0;
		if (j < L) {
			load_keys(x, s, j, S, vec);
			for (int u = 0; u < 4; u++)
				if (j + u < L)
					sum += expf(x[u] - m);
		}
	}
	sum = block_sum(sum);
	if (threadIdx.x == 0)
		lse[row] = m + logf(sum);
	for (int c0 = 0; c0 < S; c0 += chunk) {
		int j = c0 + j0;
		float p[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
		if (j < L) {
			load_keys(x, s, j, S, vec);
			for (int u = 0; u < 4; u++)
				if (j + u < L)
					p[u] = expf(x[u] - m) / sum;
		}
		__syncthreads();
		if (j < S)
			store_keys16((bf16 *)s, j, S, p, vec);
	}
}

// One block per row (b,h,i): scores s in A, dP in D.  P = e^(s - lse) for
// keys j <= i (0 beyond), delta = sum_j P dP, dS = P (dP - delta).  P16
// goes in place over the score row's first S bf16, dS16 over the dP row's,
// with the forward's read-then-barrier-then-write order in each chunk.
__global__ void attention_softmax_backward_kernel(float *scores, float *dP, const float *lse, int S, bool vec)
{
	long row = blockIdx.x;
	int L = (int)(row % S) + 1, chunk = 4 * blockDim.x, j0 = 4 * threadIdx.x;
	float *s = scores + row * S, *dp = dP + row * S;
	float l = lse[row];
	float x[4], y[4];
	float delta = 0.0f;
	for (int c0 = 0; c0 < L; c0 += chunk) {
		int j = c0 + j0;
		if (j < L) {
			load_keys(x, s, j, S, vec);
			load_keys(y, dp, j, S, vec);
			for (int u = 0; u < 4; u++)
				if (j + u < L)
					delta += expf(x[u] - l) * y[u];
		}
	}
	delta = block_sum(delta);
	for (int c0 = 0; c0 < S; c0 += chunk) {
		int j = c0 + j0;
		float p[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, ds[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
		if (j < L) {
			load_keys(x, s, j, S, vec);
			load_keys(y, dp, j, S, vec);
			for (int u = 0; u < 4; u++)
				if (j + u < L) {
					p[u] = expf(x[u] - l);
					ds[u] = p[u] * (y[u] - delta);
				}
		}
		__syncthreads();
		if (j < S) {
			store_keys16((bf16 *)s, j, S, p, vec);
			store_keys16((bf16 *)dp, j, S, ds, vec);
		}
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
// Products, one GEMM per sequence b batched over the H heads.  Operands
// a, c are (T,H,D) bf16 copies; a square is (B,H,S,S) fp32, or its bf16
// P16/dS16 (rows 2*S bf16 apart, heads 2*S*S).

// X_h (S_i, S_j) = alpha a_h (S_i, D) @ c_h (S_j, D)^T.  cuBLAS: X_cm
// (S_j, S_i) = c_cm^T (S_j, D) @ a_cm (D, S_i).
static void heads_abT(float *X, const bf16 *a, const bf16 *c, float alpha, const struct attn_plan *p)
{
	int S = p->S, hd = p->H * p->D;
	long long ss = (long long)S * S;
	for (int b = 0; b < p->B; b++) {
		size_t first = (size_t)b * S * hd; // row 0 of sequence b
		gemm_bf16_strided(CUBLAS_OP_T, CUBLAS_OP_N, S, S, p->D, alpha, c + first, hd, p->D, a + first, hd,
		                  p->D, 0.0f, X + (size_t)b * p->H * ss, S, ss, p->H);
	}
}

// Y_h (S, D) = alpha op(X16_h) @ c_h (S, D), Y (T,H,D) fp32, X16_h the
// (S_i, S_j) bf16 square of head h: op = X (transpose false: E or dq, rows
// i) or X^T (true: E, rows j).  cuBLAS: Y_cm (D, S) = c_cm (D, S) @
// op(X_cm), X_cm being (S_j, S_i).
static void heads_X16c(float *Y, const float *square, bool transpose, const bf16 *c, float alpha,
                       const struct attn_plan *p)
{
	int S = p->S, hd = p->H * p->D;
	long long ss2 = 2LL * S * S;
	const bf16 *X16 = (const bf16 *)square;
	for (int b = 0; b < p->B; b++) {
		size_t first = (size_t)b * S * hd;
		gemm_bf16_strided(CUBLAS_OP_N, transpose ? CUBLAS_OP_T : CUBLAS_OP_N, p->D, S, S, alpha, c + first, hd,
		                  p->D, X16 + (size_t)b * p->H * ss2, 2 * S, ss2, 0.0f, Y + first, hd, p->D, p->H);
	}
}

// ---------------------------------------------------------------------------
// Launchers.

// The softmax scale as the CPU computes it (torch's Python float).
static float softmax_scale(int D)
{
	return (float)(1.0 / sqrt((double)D));
}

// Shapes the launches can express: the row kernels take one block per
// (b,h,i) row, and cuBLAS takes int dimensions and leading dimensions.
static void check_shape(const char *op, int B, int S, int H, int G, int D)
{
	if (G <= 0 || H % G != 0) {
		fprintf(stderr, "%s: %s: %d query heads do not split into %d key/value groups\n", poros_cuda_progname(),
		        op, H, G);
		exit(1);
	}
	if ((long long)B * H * S > INT_MAX || S > INT_MAX / 2 || (long long)H * D > INT_MAX) {
		fprintf(stderr, "%s: %s: B=%d S=%d H=%d D=%d is too large (B*H*S rows, 2*S and H*D must fit in %d)\n",
		        poros_cuda_progname(), op, B, S, H, D, INT_MAX);
		exit(1);
	}
}

static void cast_inputs(const struct attn_plan *p, const float *q, const float *k, const float *v,
                        const float *dout)
{
	long n = (long)p->B * p->S * p->H * p->D;
	bool vec = p->D % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && (!dout || aligned16(dout)) &&
	           ((uintptr_t)p->q16 & 7u) == 0 && ((uintptr_t)p->k16e & 7u) == 0 &&
	           ((uintptr_t)p->v16e & 7u) == 0 && (!dout || ((uintptr_t)p->dout16 & 7u) == 0);
	attention_cast_kernel<<<grid_for(vec ? n / 4 : n, CAST_THREADS), CAST_THREADS, 0,
	                        poros_cuda_compute_stream()>>>(p->q16, p->k16e, p->v16e, dout ? p->dout16 : NULL, q, k,
	                                                       v, dout, n, p->H, p->G, p->D, vec);
	launchCheck();
}

static void group_sum(float *dst, const struct attn_plan *p)
{
	long n = (long)p->B * p->S * p->G * p->D;
	bool vec = p->D % 4 == 0 && aligned16(dst) && aligned16(p->heads);
	attention_group_sum_kernel<<<grid_for(vec ? n / 4 : n, SUM_THREADS), SUM_THREADS, 0,
	                             poros_cuda_compute_stream()>>>(dst, p->heads, n, p->H, p->G, p->D, vec);
	launchCheck();
}

// out (T,H*D) bf16, rows ld_out apart (the o projection's input, with room
// for its LoRA extension); lse (B,H,S); q (T,H,D), k, v (T,G,D).
extern "C" void attention_forward_cuda(bf16 *out, int ld_out, float *lse, float *scratch, const float *q,
                                       const float *k, const float *v, int B, int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	check_shape("attention_forward_cuda", B, S, H, G, D);
	check_pitch("attention_forward_cuda", "ld_out", ld_out, (long)H * D);
	struct attn_plan p = plan_of(scratch, B, S, H, G, D, false);
	bool vec = S % 4 == 0 && aligned16(p.scores);

	cast_inputs(&p, q, k, v, NULL);
	heads_abT(p.scores, p.q16, p.k16e, softmax_scale(D), &p);
	attention_softmax_kernel<<<(unsigned)((long)B * H * S), ROW_THREADS, 0, poros_cuda_compute_stream()>>>(
		p.scores, lse, S, vec);
	launchCheck();
	heads_X16c(p.heads, p.scores, false, p.v16e, 1.0f, &p);
	cast_f32_to_bf16_cuda(out, ld_out, p.heads, (long)B * S, H * D);
}

// dq (T,H,D), dk, dv (T,G,D) written from dout (T,H*D), q, k, v, lse.
//   P = e^(scale q.k - lse),  dv = sum_h P^T dout,  dP = dout v^T,
//   dS = P (dP - rowsum(P dP)),  dq = scale dS k,  dk = scale sum_h dS^T q
extern "C" void attention_backward_cuda(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                        const float *q, const float *k, const float *v, const float *lse, int B,
                                        int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	check_shape("attention_backward_cuda", B, S, H, G, D);
	struct attn_plan p = plan_of(scratch, B, S, H, G, D, true);
	float scale = softmax_scale(D);
	bool vec = S % 4 == 0 && aligned16(p.scores) && aligned16(p.grads);

	cast_inputs(&p, q, k, v, dout);
	heads_abT(p.scores, p.q16, p.k16e, scale, &p);
	heads_abT(p.grads, p.dout16, p.v16e, 1.0f, &p);
	attention_softmax_backward_kernel<<<(unsigned)((long)B * H * S), ROW_THREADS, 0,
	                                    poros_cuda_compute_stream()>>>(p.scores, p.grads, lse, S, vec);
	launchCheck();
	heads_X16c(dq, p.grads, false, p.k16e, scale, &p);
	heads_X16c(p.heads, p.scores, true, p.dout16, 1.0f, &p); // E over k16e, v16e: both read for the last time above
	group_sum(dv, &p);
	heads_X16c(p.heads, p.grads, true, p.q16, scale, &p);
	group_sum(dk, &p);
}
