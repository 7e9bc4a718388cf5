// defines: attention_forward_cuda, attention_backward_cuda,
//          attention_softmax_kernel, attention_softmax_backward_kernel,
//          attention_out_kernel
//
// Causal grouped-query attention, softmax scale 1/sqrt(D): query head h
// reads key/value head g = h / (H/G).  Every product is a bf16 cuBLAS GEMM
// on tensor cores with fp32 accumulation, rounded as ops.h's precision
// contract says (q, k, v, dout, P and dS to bf16 before the products that
// read them; scores, softmax, dP and dS in fp32), so the CPU reference
// differs only in the order of its sums.  The softmax and its gradient are
// row kernels with fixed-order block reductions; nothing is allocated.
//
// Causal skipping: the query rows are split into blocks of qb =
// attention_query_block(B,S,H,G,D) rows (128 at training lengths; the last
// block may be shorter).  Block i, rows [i*qb, end_i) with end_i = min(S,
// (i+1)*qb), only sees keys [0, end_i): its scores, dP, P @ v and dS @ k
// cover those columns, and the key gradients sum over the query blocks
// whose range includes the key.  Inside a block's range the keys past the
// diagonal get P = dS = 0 exactly, so they add nothing.
//
// Scratch (attention_blocked_floats(B,S,H,G,D,qb) floats, ops.h; each part
// starts on 16 bytes):
//   A     block i at B*H*qb*qb*i(i+1)/2: rows (b,h,r) of end_i floats, the
//         fp32 scores; the softmax then turns each row into P16 (end_i bf16
//         in its first half), the backward into P16 | dS16 (end_i bf16
//         each), in place
//   W     B*H*max_i rows_i*max(end_i, D): one query block's dP (b,h,r,j)
//         in backward, its fp32 output (b,r,h*D) in forward
//   C     (T,H*D) bf16: q16, then (forward) v16 or (backward) dout16, then q16
//         (T,G*D) bf16: k16, then (backward) v16, then k16
// At training lengths this is about (S + qb)/2 + qb + (1 + G/H)*D/2 floats
// per query row and head, against 2*S + 4 for the fp32 attention before it
// (S = 512, qb = 128, D = 128, G/H = 1/8: 520 against 1028).
//
// Forward: q16, k16; per block scores = scale q16 k16^T into A, softmax
// (lse saved, P16 in place); v16 over q16; per block W = P16 v16 and its
// bf16 cast into out.  Backward: q16, k16; per block scores into A; dout16
// and v16 over them; per block dP = dout16 v16^T into W and the gradient
// kernel (P from lse, delta, dS; P16 | dS16 in place); dv = sum P16^T
// dout16; q16, k16 again (two cheap casts, so C holds two copies, not
// four); per block dq = scale dS16 k16; dk = scale sum dS16^T q16.
//
// Determinism: every GEMM's shape, operands and order depend on the shape
// alone; dk and dv are one GEMM per (b, query block, head index in its
// group) adding into the whole key range of the block, beta 0 only for the
// first, in a fixed order (heads of a group ascending, query blocks
// descending, so the first covers every key).  No atomics.
//
// Layouts (row-major): q (T,H,D), k, v (T,G,D), out (T,H*D), T = B*S; the
// rows of one head are H*D (or G*D) elements apart, which is the leading
// dimension cuBLAS is given.  In cuBLAS's column-major view a row-major
// (rows, cols) matrix with row stride ld is a (cols, rows) one with leading
// dimension ld.
#include <math.h>

#include "common.cuh"

#define SOFTMAX_THREADS 128
#define OUT_THREADS 256

// Query block i of a plan: rows [row0, row0 + rows), keys [0, end); its
// scores at `scores` in A.
struct qblock {
	int row0, rows, end;
	float *scores;
};

// Where the scratch's parts are for one shape.
struct attn_plan {
	int B, S, H, G, D, qb, nblocks;
	float *scores; // A
	float *block;  // W
	bf16 *rows16;  // (T,H*D): q16 / dout16 (forward: v16 after the scores)
	bf16 *cols16;  // (T,G*D): k16 / v16
};

static struct attn_plan plan_of(float *scratch, int B, int S, int H, int G, int D)
{
	struct attn_plan p;
	p.B = B, p.S = S, p.H = H, p.G = G, p.D = D;
	p.qb = attention_query_block(B, S, H, G, D);
	p.nblocks = (S + p.qb - 1) / p.qb;
	struct attention_parts parts = attention_parts_of(B, S, H, G, D, p.qb);
	p.scores = scratch;
	p.block = p.scores + parts.scores;
	p.rows16 = (bf16 *)(p.block + parts.block);
	p.cols16 = (bf16 *)(p.block + parts.block + parts.rows16);
	return p;
}

// Every block but the last is full (qb rows, end (i+1)*qb, a multiple of
// 4 floats), so block i starts after B*H*qb*qb*(1 + 2 + ... + i) floats.
static struct qblock block_of(const struct attn_plan *p, int i)
{
	struct qblock blk;
	blk.row0 = i * p->qb;
	blk.rows = p->S - blk.row0 < p->qb ? p->S - blk.row0 : p->qb;
	blk.end = blk.row0 + blk.rows;
	blk.scores = p->scores + (size_t)p->B * p->H * p->qb * p->qb * ((size_t)i * (i + 1) / 2);
	return blk;
}

// Block rows (b,h,r) of `end` floats, the scores of query row i = row0 + r:
// in place into P16 (the row's first end bf16), with p = e^(s - max) / sum
// over keys j <= i and 0 beyond; lse = max + log(sum) written.
__global__ void attention_softmax_kernel(float *scores, float *lse, int S, int rows, int end, int row0)
{
	long rr = blockIdx.x; // (b*H + h)*rows + r
	long bh = rr / rows;
	int i = row0 + (int)(rr % rows), L = i + 1;
	float *s = scores + rr * end;
	bf16 *p16 = (bf16 *)s;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < L; j += blockDim.x)
		m = fmaxf(m, s[j]);
	m = block_max(m);
	float sum = 0.0f;
	for (int j = threadIdx.x; j < L; j += blockDim.x)
		sum += expf(s[j] - m);
	sum = block_sum(sum);
	if (threadIdx.x == 0)
		lse[bh * S + i] = m + logf(sum);
	// P16[j] lands on half of s[j/2]: every thread reads its key of a chunk
	// before any writes, and a chunk's writes only reach floats of this
	// chunk or earlier ones, all read by then
	for (int c0 = 0; c0 < end; c0 += blockDim.x) {
		int j = c0 + threadIdx.x;
		float p = j < L ? expf(s[j] - m) / sum : 0.0f;
		__syncthreads();
		if (j < end)
			p16[j] = f32_to_bf16(p);
	}
}

// Block rows as above, scores and dP (same layout): P = e^(s - lse) for
// keys j <= i (0 beyond), delta = sum_j P dP, dS = P (dP - delta).  Each
// score row becomes P16 (first end bf16) | dS16 (next end bf16) in place;
// dP's row holds dS in fp32 on the way.
__global__ void attention_softmax_backward_kernel(float *scores, float *dP, const float *lse, int S, int rows,
                                                  int end, int row0)
{
	long rr = blockIdx.x;
	long bh = rr / rows;
	int i = row0 + (int)(rr % rows), L = i + 1;
	float *s = scores + rr * end, *dp = dP + rr * end;
	bf16 *p16 = (bf16 *)s, *ds16 = p16 + end;
	float l = lse[bh * S + i];
	float delta = 0.0f;
	for (int j = threadIdx.x; j < L; j += blockDim.x)
		delta += expf(s[j] - l) * dp[j];
	delta = block_sum(delta);
	// P16 in place as in the forward; each thread keeps to its own keys of
	// dP, so dS needs no barrier
	for (int c0 = 0; c0 < end; c0 += blockDim.x) {
		int j = c0 + threadIdx.x;
		float p = j < L ? expf(s[j] - l) : 0.0f;
		if (j < end)
			dp[j] = j < L ? p * (dp[j] - delta) : 0.0f;
		__syncthreads();
		if (j < end)
			p16[j] = f32_to_bf16(p);
	}
	// dS16 fills the row's second half, whose scores every thread has read
	__syncthreads();
	for (int j = threadIdx.x; j < end; j += blockDim.x)
		ds16[j] = f32_to_bf16(dp[j]);
}

// out rows [row0, row0 + rows) of every sequence = bf16 of the block's
// fp32 output (B, rows, H*D).
__global__ void attention_out_kernel(bf16 *out, const float *block_out, int S, int rows, int row0, long hd,
                                     long total)
{
	long per_b = (long)rows * hd;
	for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (long)gridDim.x * blockDim.x) {
		long b = idx / per_b, rest = idx % per_b;
		out[(b * S + row0) * hd + rest] = f32_to_bf16(block_out[idx]);
	}
}

// The softmax scale as the CPU computes it (torch's Python float).
static float softmax_scale(int D)
{
	return (float)(1.0 / sqrt((double)D));
}

// The score-shaped products run as strided batches of independent GEMMs,
// one call per (b, g) batched over the group's heads, or one per (b, head
// index i within a group) batched over the G groups, whichever batch is
// larger (Qwen2.5-32B: 5 calls of 8 products rather than 8 of 5), so one
// call fills more of the GPU.  Every product is computed whole by one GEMM
// either way, and the choice depends on the shape alone.
struct head_batch {
	int calls, batch;         // per b
	long long a_step, a_bstr; // head offset of call c, stride inside the batch, in heads
	long long c_step, c_bstr; // key/value head offset of call c, stride in the batch
};

static struct head_batch head_batch_of(int H, int G)
{
	int group = H / G;
	struct head_batch hb;
	if (G > group) { // call i: heads g*group + i, key/value heads g
		hb.calls = group, hb.batch = G;
		hb.a_step = 1, hb.a_bstr = group;
		hb.c_step = 0, hb.c_bstr = 1;
	} else { // call g: heads g*group .. g*group + group-1, key/value head g
		hb.calls = G, hb.batch = group;
		hb.a_step = group, hb.a_bstr = 1;
		hb.c_step = 1, hb.c_bstr = 0;
	}
	return hb;
}

// X (rows, end) of each head h = alpha * a_h (rows of the block, D) @
// c_g (keys 0..end, D)^T, g = h / group, with a = q16 (scores) or dout16
// (dP), c = k16 or v16; X laid out (b,h,r,j).  cuBLAS: X_cm (end, rows) =
// c_cm^T (end, D) @ a_cm (D, rows).
static void block_products_abT(float *X, const bf16 *a, const bf16 *c, float alpha, const struct attn_plan *p,
                               const struct qblock *blk)
{
	int S = p->S, H = p->H, G = p->G, D = p->D, rows = blk->rows, end = blk->end;
	struct head_batch hb = head_batch_of(H, G);
	long long re = (long long)rows * end;
	for (int b = 0; b < p->B; b++) {
		for (int call = 0; call < hb.calls; call++) {
			long long h0 = call * hb.a_step, g0 = call * hb.c_step;
			const bf16 *cg = c + ((size_t)b * S * G + g0) * D;
			const bf16 *ah = a + (((size_t)b * S + blk->row0) * H + h0) * D;
			float *xh = X + ((size_t)b * H + h0) * re;
			gemm_bf16_strided(CUBLAS_OP_T, CUBLAS_OP_N, end, rows, D, alpha, cg, G * D, hb.c_bstr * D, ah,
			                  H * D, hb.a_bstr * D, 0.0f, xh, end, hb.a_bstr * re, hb.batch);
		}
	}
}

// Y_h (rows, D) = alpha * X16_h (rows, end) @ c_g (keys 0..end, D) for each
// head h, g = h / group, with (X16, c) = (P16, v16) or (dS16, k16).  X16
// is the block's bf16 rows in A, column `col0` of rows 2*end bf16 apart.
// Y_h's rows are H*D floats apart, head h at h*D, sequence b at b*y_bstride
// (the block's fp32 output in W, or dq).  cuBLAS: Y_cm (D, rows) = c_cm
// (D, end) @ X_cm (end, rows).
static void block_products_Xc(float *Y, size_t y_bstride, const bf16 *c, int col0, float alpha,
                              const struct attn_plan *p, const struct qblock *blk)
{
	int S = p->S, H = p->H, G = p->G, D = p->D, rows = blk->rows, end = blk->end;
	struct head_batch hb = head_batch_of(H, G);
	long long re2 = 2LL * rows * end;
	const bf16 *X16 = (const bf16 *)blk->scores + col0;
	for (int b = 0; b < p->B; b++) {
		for (int call = 0; call < hb.calls; call++) {
			long long h0 = call * hb.a_step, g0 = call * hb.c_step;
			const bf16 *cg = c + ((size_t)b * S * G + g0) * D;
			const bf16 *xh = X16 + ((size_t)b * H + h0) * re2;
			float *yh = Y + (size_t)b * y_bstride + (size_t)h0 * D;
			gemm_bf16_strided(CUBLAS_OP_N, CUBLAS_OP_N, D, rows, end, alpha, cg, G * D, hb.c_bstr * D, xh,
			                  2 * end, hb.a_bstr * re2, 0.0f, yh, H * D, hb.a_bstr * D, hb.batch);
		}
	}
}

// Z_g (S,D) = alpha * sum over heads h of g and query blocks i of
// X16_h,i^T (keys 0..end_i, rows_i) @ a_h (rows of block i, D), with (X16,
// a, Z) = (P16, dout16, dv) or (dS16, q16, dk); X16 at column col(i) = 0
// for P16, end_i for dS16.  Each GEMM adds one (head index within the
// group, block) term into keys 0..end_i of all G groups at once (head g*group
// + ih, key/value head g), so a model with 40 heads in 8 groups makes 5
// calls of 8 products per block.  The order is fixed: head index
// ascending, blocks descending, beta 0 for the very first (the last block,
// which covers every key), 1 after.  cuBLAS: Z_cm (D, end) = a_cm (D,
// rows) @ X_cm^T (rows, end).
static void group_products_XTa(float *Z, const bf16 *a, int ds_half, float alpha, const struct attn_plan *p)
{
	int S = p->S, H = p->H, G = p->G, D = p->D, group = H / G;
	for (int b = 0; b < p->B; b++) {
		float *zb = Z + (size_t)b * S * G * D;
		for (int ih = 0; ih < group; ih++) {
			for (int i = p->nblocks - 1; i >= 0; i--) {
				struct qblock blk = block_of(p, i);
				long long re2 = 2LL * blk.rows * blk.end;
				const bf16 *ai = a + (((size_t)b * S + blk.row0) * H + ih) * D;
				const bf16 *xi = (const bf16 *)blk.scores + (ds_half ? blk.end : 0) +
				                 ((size_t)b * H + ih) * re2;
				float beta = ih == 0 && i == p->nblocks - 1 ? 0.0f : 1.0f;
				gemm_bf16_strided(CUBLAS_OP_N, CUBLAS_OP_T, D, blk.end, blk.rows, alpha, ai, H * D,
				                  (long long)group * D, xi, 2 * blk.end, group * re2, beta, zb, G * D, D,
				                  G);
			}
		}
	}
}

static void check_heads(const char *op, int H, int G)
{
	if (G <= 0 || H % G != 0) {
		fprintf(stderr, "%s: %s: %d query heads do not split into %d key/value groups\n", poros_cuda_progname(),
		        op, H, G);
		exit(1);
	}
}

// out (T,H*D) bf16, lse (B,H,S); q (T,H,D), k, v (T,G,D).
extern "C" void attention_forward_cuda(bf16 *out, float *lse, float *scratch, const float *q, const float *k,
                                       const float *v, int B, int S, int H, int G, int D)
{
	if (B <= 0 || S <= 0 || H <= 0 || D <= 0)
		return;
	check_heads("attention_forward_cuda", H, G);
	cudaStream_t stream = poros_cuda_compute_stream();
	struct attn_plan p = plan_of(scratch, B, S, H, G, D);
	long tokens = (long)B * S;

	cast_f32_to_bf16_cuda(p.rows16, q, tokens * H * D);
	cast_f32_to_bf16_cuda(p.cols16, k, tokens * G * D);
	for (int i = 0; i < p.nblocks; i++) {
		struct qblock blk = block_of(&p, i);
		block_products_abT(blk.scores, p.rows16, p.cols16, softmax_scale(D), &p, &blk);
		attention_softmax_kernel<<<(unsigned)((size_t)B * H * blk.rows), SOFTMAX_THREADS, 0, stream>>>(
			blk.scores, lse, S, blk.rows, blk.end, blk.row0);
		launchCheck();
	}
	bf16 *v16 = p.rows16; // q16 is done with
	cast_f32_to_bf16_cuda(v16, v, tokens * G * D);
	for (int i = 0; i < p.nblocks; i++) {
		struct qblock blk = block_of(&p, i);
		block_products_Xc(p.block, (size_t)blk.rows * H * D, v16, 0, 1.0f, &p, &blk);
		long total = (long)B * blk.rows * H * D;
		attention_out_kernel<<<grid_for(total, OUT_THREADS), OUT_THREADS, 0, stream>>>(
			out, p.block, S, blk.rows, blk.row0, (long)H * D, total);
		launchCheck();
	}
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
	check_heads("attention_backward_cuda", H, G);
	cudaStream_t stream = poros_cuda_compute_stream();
	struct attn_plan p = plan_of(scratch, B, S, H, G, D);
	float scale = softmax_scale(D);
	long tokens = (long)B * S;

	cast_f32_to_bf16_cuda(p.rows16, q, tokens * H * D);
	cast_f32_to_bf16_cuda(p.cols16, k, tokens * G * D);
	for (int i = 0; i < p.nblocks; i++) {
		struct qblock blk = block_of(&p, i);
		block_products_abT(blk.scores, p.rows16, p.cols16, scale, &p, &blk);
	}

	bf16 *dout16 = p.rows16, *v16 = p.cols16;
	cast_f32_to_bf16_cuda(dout16, dout, tokens * H * D);
	cast_f32_to_bf16_cuda(v16, v, tokens * G * D);
	for (int i = 0; i < p.nblocks; i++) {
		struct qblock blk = block_of(&p, i);
		block_products_abT(p.block, dout16, v16, 1.0f, &p, &blk);
		attention_softmax_backward_kernel<<<(unsigned)((size_t)B * H * blk.rows), SOFTMAX_THREADS, 0,
		                                    stream>>>(blk.scores, p.block, lse, S, blk.rows, blk.end,
		                                              blk.row0);
		launchCheck();
	}
	group_products_XTa(dv, dout16, 0, 1.0f, &p);

	bf16 *q16 = p.rows16, *k16 = p.cols16;
	cast_f32_to_bf16_cuda(q16, q, tokens * H * D);
	cast_f32_to_bf16_cuda(k16, k, tokens * G * D);
	for (int i = 0; i < p.nblocks; i++) {
		struct qblock blk = block_of(&p, i);
		block_products_Xc(dq + (size_t)blk.row0 * H * D, (size_t)S * H * D, k16, blk.end, scale, &p, &blk);
	}
	group_products_XTa(dk, q16, 1, scale, &p);
}
