// defines: attention_forward_cuda, attention_backward_cuda,
//          attention_softmax_kernel, attention_softmax_backward_kernel,
//          attention_pv_kernel
//
// Causal grouped-query attention, softmax scale 1/sqrt(D): query head h
// reads key/value head g = h / (H/G).  The products run as fp32 cuBLAS
// GEMMs batched with strides (no TF32), the softmax and its gradient as
// row kernels with fixed-order block reductions; nothing is allocated.
//
// Scratch (attention_scratch_floats(B,S,H,G,D) = 2*BHSS + 4*BHS floats):
//   [0, BHSS)        scores, then probabilities P (b,h,i,j), zero for j > i
//   [BHSS, 2*BHSS)   forward: fp32 output (T,H*D) before the bf16 cast
//                    (when it fits: S + 4 >= D); backward: dP, then dS
// The masked half of each S x S product is computed and multiplied by
// zeros: wasteful, but every GEMM is a plain cuBLAS call.
//
// Layouts (row-major): q (T,H,D), k, v (T,G,D), out (T,H*D), T = B*S; the
// rows of one head are H*D (or G*D) floats apart, which is the leading
// dimension cuBLAS is given.  In cuBLAS's column-major view a row-major
// (S,D) head with row stride ld is a (D,S) matrix with leading dimension ld.
#include <math.h>

#include "common.cuh"

#define SOFTMAX_THREADS 128
#define PV_THREADS 256

// P (B*H*S rows of S) in place: scores -> probabilities over j <= i, zero
// beyond.  Forward (lse_out): p = e^(s - max) / sum and lse = max + log(sum)
// are written.  Backward (lse_in): p = e^(s - lse), the forward's
// probabilities rebuilt from the saved log-sum-exp.
__global__ void attention_softmax_kernel(float *P, float *lse_out, const float *lse_in, int S)
{
	long row = blockIdx.x; // (b*H + h)*S + i
	int L = (int)(row % S) + 1;
	float *p = P + row * S;
	if (lse_out) {
		float m = -INFINITY;
		for (int j = threadIdx.x; j < L; j += blockDim.x)
			m = fmaxf(m, p[j]);
		m = block_max(m);
		float sum = 0.0f;
		for (int j = threadIdx.x; j < L; j += blockDim.x)
			sum += expf(p[j] - m);
		sum = block_sum(sum);
		if (threadIdx.x == 0)
			lse_out[row] = m + logf(sum);
		for (int j = threadIdx.x; j < S; j += blockDim.x)
			p[j] = j < L ? expf(p[j] - m) / sum : 0.0f;
	} else {
		float l = lse_in[row];
		for (int j = threadIdx.x; j < S; j += blockDim.x)
			p[j] = j < L ? expf(p[j] - l) : 0.0f;
	}
}

// dS (B*H*S rows of S) in place from dP: dS_ij = P_ij (dP_ij - delta_i),
// delta_i = sum_j P_ij dP_ij, zero for j > i.
__global__ void attention_softmax_backward_kernel(float *dS, const float *P, int S)
{
	long row = blockIdx.x;
	int L = (int)(row % S) + 1;
	float *ds = dS + row * S;
	const float *p = P + row * S;
	float delta = 0.0f;
	for (int j = threadIdx.x; j < L; j += blockDim.x)
		delta += p[j] * ds[j];
	delta = block_sum(delta);
	for (int j = threadIdx.x; j < S; j += blockDim.x)
		ds[j] = j < L ? p[j] * (ds[j] - delta) : 0.0f;
}

// out (T,H*D) bf16 = P @ v directly, one thread per output element, j
// ascending: the path for short sequences whose fp32 output does not fit
// the scratch (S + 4 < D); such shapes are small.
__global__ void attention_pv_kernel(bf16 *out, const float *P, const float *v, int B, int S, int H, int G, int D)
{
	long total = (long)B * S * H * D;
	int group = H / G;
	for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (long)gridDim.x * blockDim.x) {
		int d = (int)(idx % D);
		int h = (int)((idx / D) % H);
		long t = idx / ((long)H * D);
		int b = (int)(t / S), i = (int)(t % S);
		const float *p = P + (((size_t)b * H + h) * S + i) * S;
		const float *vj = v + ((size_t)b * S * G + h / group) * D + d;
		float acc = 0.0f;
		for (int j = 0; j <= i; j++)
			acc += p[j] * vj[(size_t)j * G * D];
		out[idx] = f32_to_bf16(acc);
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
	int calls, batch;        // per b
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

// X (S,S) of each head h = alpha * a_h (S,D) @ c_g (S,D)^T, g = h / group,
// with a = q (scores) or dout (dP), c = k or v.  cuBLAS: X_cm (S_j, S_i) =
// c_cm^T (S,D) @ a_cm (D,S).
static void head_products_abT(float *X, const float *a, const float *c, float alpha, int B, int S, int H, int G,
                              int D)
{
	struct head_batch hb = head_batch_of(H, G);
	long long ss = (long long)S * S;
	for (int b = 0; b < B; b++) {
		for (int call = 0; call < hb.calls; call++) {
			long long h0 = call * hb.a_step, g0 = call * hb.c_step;
			const float *cg = c + ((size_t)b * S * G + g0) * D;
			const float *ah = a + ((size_t)b * S * H + h0) * D;
			float *xh = X + ((size_t)b * H + h0) * ss;
			gemm_f32_strided(CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, alpha, cg, G * D, hb.c_bstr * D, ah, H * D,
			                 hb.a_bstr * D, 0.0f, xh, S, hb.a_bstr * ss, hb.batch);
		}
	}
}

// Y_h (S,D) = alpha * X_h (S,S) @ c_g (S,D) for each head h, g = h / group,
// with (X, c, Y) = (P, v, out) or (dS, k, dq).  cuBLAS: Y_cm (D,S) =
// c_cm (D,S) @ X_cm (S_j, S_i).
static void head_products_Xc(float *Y, const float *X, const float *c, float alpha, int B, int S, int H, int G,
                             int D)
{
	struct head_batch hb = head_batch_of(H, G);
	long long ss = (long long)S * S;
	for (int b = 0; b < B; b++) {
		for (int call = 0; call < hb.calls; call++) {
			long long h0 = call * hb.a_step, g0 = call * hb.c_step;
			const float *cg = c + ((size_t)b * S * G + g0) * D;
			const float *xh = X + ((size_t)b * H + h0) * ss;
			float *yh = Y + ((size_t)b * S * H + h0) * D;
			gemm_f32_strided(CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, alpha, cg, G * D, hb.c_bstr * D, xh, S,
			                 hb.a_bstr * ss, 0.0f, yh, H * D, hb.a_bstr * D, hb.batch);
		}
	}
}

// Z_g (S,D) = alpha * sum over heads h of g, in order, of X_h^T (S,S) @
// a_h (S,D), with (X, a, Z) = (P, dout, dv) or (dS, q, dk): the group's
// heads add into one key/value gradient one after another (beta 0 for the
// first, 1 after).  One call per (b, head index i within its group),
// batched over the G groups (head g*group + i, key/value head g), so a
// model with 40 heads in 8 groups makes 5 calls of 8 products instead of
// 40 single ones that each occupy a handful of SMs.  cuBLAS: Z_cm (D, S_j)
// = a_cm (D, S_i) @ X_cm^T (S_i, S_j).
static void group_products_XTa(float *Z, const float *X, const float *a, float alpha, int B, int S, int H, int G,
                               int D)
{
	int group = H / G;
	long long ss = (long long)S * S;
	for (int b = 0; b < B; b++) {
		for (int i = 0; i < group; i++) {
			const float *ai = a + ((size_t)b * S * H + i) * D;
			const float *xi = X + ((size_t)b * H + i) * ss;
			float *zb = Z + (size_t)b * S * G * D;
			gemm_f32_strided(CUBLAS_OP_N, CUBLAS_OP_T, D, S, S, alpha, ai, H * D, (long long)group * D, xi, S,
			                 (long long)group * ss, i == 0 ? 0.0f : 1.0f, zb, G * D, D, G);
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
	size_t bhss = (size_t)B * H * S * S;
	float *P = scratch;
	head_products_abT(P, q, k, softmax_scale(D), B, S, H, G, D);
	unsigned rows = (unsigned)((size_t)B * H * S);
	attention_softmax_kernel<<<rows, SOFTMAX_THREADS, 0, stream>>>(P, lse, NULL, S);
	launchCheck();
	long total = (long)B * S * H * D;
	if (S + 4 >= D) {
		float *out_f32 = scratch + bhss; // (T,H*D) fits in BHSS + 4*BHS floats
		head_products_Xc(out_f32, P, v, 1.0f, B, S, H, G, D);
		cast_f32_to_bf16_cuda(out, out_f32, total);
	} else {
		attention_pv_kernel<<<grid_for(total, PV_THREADS), PV_THREADS, 0, stream>>>(out, P, v, B, S, H, G, D);
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
	size_t bhss = (size_t)B * H * S * S;
	float *P = scratch, *dS = scratch + bhss;
	float scale = softmax_scale(D);
	unsigned rows = (unsigned)((size_t)B * H * S);

	head_products_abT(P, q, k, scale, B, S, H, G, D);
	attention_softmax_kernel<<<rows, SOFTMAX_THREADS, 0, stream>>>(P, NULL, lse, S);
	launchCheck();
	group_products_XTa(dv, P, dout, 1.0f, B, S, H, G, D);

	head_products_abT(dS, dout, v, 1.0f, B, S, H, G, D);
	attention_softmax_backward_kernel<<<rows, SOFTMAX_THREADS, 0, stream>>>(dS, P, S);
	launchCheck();
	head_products_Xc(dq, dS, k, scale, B, S, H, G, D);
	group_products_XTa(dk, dS, q, scale, B, S, H, G, D);
}
