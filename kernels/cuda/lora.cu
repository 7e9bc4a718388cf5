// defines: lora_forward_cuda, lora_backward_cuda, lora_weight_ext_cuda,
//          lora_din_kernel, lora_split3_kernel, lora_mask_kernel, lora_join3_kernel,
//          lora_ext_rows_kernel, lora_weight_ext_cols_kernel, lora_weight_ext_rows_kernel
//
// A LoRA adapter beside a frozen linear, as PEFT computes it:
//   out (T,N) = scale * (dropout(x) @ A^T) @ B^T,  u = dropout(x) @ A^T
// (written; the base GEMM adds onto it in its epilogue).  x is the bf16
// input (T,K) of the base GEMM and dout, in backward, the bf16 upstream
// gradient; A (R,K), B (N,R) and every product are fp32.  Dropout keeps element (t,k) iff
// poros_dropout_keep(seed, t*K+k, p) and scales kept ones by 1/(1-p), the
// same hash and the same float multiply as the CPU, so the dropped input
// has the same bits on both backends.
//
// The products with a rank-sized side are all long thin sums:
//   u  (T,R) = xd @ A^T          sum over K
//   du (T,R) = scale dout @ B    sum over N
//   dA (R,K) += du^T @ xd        sum over T
//   dB (N,R) += scale dout^T @ u sum over T
// All four run on tensor cores through the exact three-way bf16 split of
// the fp32 side (below; the other side, x or dout, is bf16 already), one
// bf16 cuBLAS GEMM with fp32 accumulation each, at every shape: the
// scratch (lora_scratch_floats, kernels/ops.h; required here) holds the
// split operands, the masked input and the parts' sums whatever T is.
// cuBLAS picks its kernel from the shape alone, so the same shape gives
// the same bits (blockwise == resident).  out = scale u B^T is an ordinary
// fp32 cuBLAS GEMM (no TF32), written, not added (the base GEMM reads it
// as its C); din (+)= du @ A is lora_din_kernel, r ascending as on the CPU.
//
// With the LoRA extension (kernels/ops.h) neither out nor din is formed
// here: u's (or du's) parts go into the activation's extension columns
// (the join of the tensor-core path writes them beside u), and
// lora_weight_ext_{cols,rows}_kernel fill the weight's side, so the base GEMM sums
// the LoRA term with its own.  x and dout may be pitched (rows ld apart);
// the dropout mask index stays t*K + k.

#include "common.cuh"

// din kernel: DIN_K columns x DIN_T tokens per block.
#define DIN_K 256
#define DIN_T 8

// din (T,K) (+)= mask(t,k) * keep_scale * (du (T,R) @ A (R,K))[t,k]: the
// gradient flows back through the dropout the forward applied, r ascending
// as on the CPU; without accumulate the old din is not read (a dropped
// element gets 0).  Grid (ceil(T/DIN_T), ceil(K/DIN_K)), DIN_K threads:
// the tokens on x, whose limit is 2^31 - 1 blocks (on y, 65535 blocks of
// 8 stopped the launch at 524288 tokens); each A element is read once per
// block and used for DIN_T tokens.
__global__ void __launch_bounds__(DIN_K, 4)
	lora_din_kernel(float *din, const float *du, const float *A, float p, float keep_scale, uint64_t seed, int T,
	                int K, int R, bool accumulate)
{
	extern __shared__ float du_tile[]; // (DIN_T, R)
	int t0 = blockIdx.x * DIN_T;
	int k = blockIdx.y * DIN_K + threadIdx.x;
	for (int e = threadIdx.x; e < DIN_T * R; e += blockDim.x) {
		int t = t0 + e / R;
		du_tile[e] = t < T ? du[(size_t)t * R + e % R] : 0.0f;
	}
	__syncthreads();
	if (k >= K)
		return;
	float acc[DIN_T], prev[DIN_T];
#pragma unroll
	for (int i = 0; i < DIN_T; i++) { // in flight while the sums run
		acc[i] = 0.0f;
		prev[i] = accumulate && t0 + i < T ? din[(size_t)(t0 + i) * K + k] : 0.0f;
	}
	for (int r = 0; r < R; r++) {
		float a = A[(size_t)r * K + k];
#pragma unroll
		for (int i = 0; i < DIN_T; i++)
			acc[i] = __fmaf_rn(du_tile[i * R + r], a, acc[i]);
	}
#pragma unroll
	for (int i = 0; i < DIN_T; i++) {
		int t = t0 + i;
		if (t >= T)
			break;
		size_t idx = (size_t)t * K + k;
		if (p == 0.0f)
			din[idx] = prev[i] + acc[i];
		else if (poros_dropout_keep(seed, (uint64_t)t * K + k, p))
			din[idx] = prev[i] + acc[i] * keep_scale;
		else if (!accumulate)
			din[idx] = 0.0f;
	}
}
// ---------------------------------------------------------------------------
// The tensor-core products u, du, dA and dB.  The bf16 input x is exact in bf16,
// and an fp32 operand w splits exactly into three bf16 parts: hi =
// bf16(w), mid = bf16(w - hi), lo = bf16(w - hi - mid) (each difference is
// exact in fp32, and 3 x 8 significant bits cover fp32's 24).  A bf16 x
// bf16 product is exact in fp32, so x @ [hi; mid; lo]^T on tensor cores
// with fp32 accumulation, the three parts then added (hi + mid) + lo, is
// the fp32 product up to the order of the sums: the LoRA contract (fp32,
// as PEFT computes it) holds with one bf16 GEMM per product.
// Dropout: the masked input (x or 0) is exact in bf16 too, and the 1/(1-p)
// scale multiplies the result instead of each kept element.

// W (rows, cols) fp32 -> W3 (3 rows, cols) bf16 when parts_in_rows (A: the
// parts stacked as three row blocks), else W3 (rows, 3 cols) (du: the parts
// side by side in each row).
__global__ void lora_split3_kernel(bf16 *W3, const float *W, int rows, int cols, bool parts_in_rows)
{
	long n = (long)rows * cols;
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		bf16 part[3]; // hi, mid, lo
		lora_split3(W[i], part);
		if (parts_in_rows) {
			W3[i] = part[0], W3[n + i] = part[1], W3[2 * n + i] = part[2];
		} else {
			long r = i / cols, c = i % cols;
			bf16 *row = W3 + r * 3 * cols;
			row[c] = part[0], row[cols + c] = part[1], row[2 * cols + c] = part[2];
		}
	}
}

// xm (T,K) contiguous = dropout mask applied to x (rows ld apart),
// unscaled (exact in bf16).
__global__ void lora_mask_kernel(bf16 *xm, const bf16 *x, int ld, float p, uint64_t seed, int K, long n)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		xm[i] = poros_dropout_keep(seed, (uint64_t)i, p) ? x[(i / K) * ld + i % K] : (bf16)0;
}

// Element (t, r) of u or du into its row of the activation side of the
// extension (kernels/ops.h): part i at columns (3i + j)R + r, j < 3; the
// thread of r = 0 also writes the row's tail (1 or 0 at 9R, then zeros).
__device__ __forceinline__ void put_ext(bf16 *ext_row, float v, int r, int R, int E, bool one)
{
	lora_ext_put(ext_row, v, r, R);
	if (r == 0)
		for (int c = 9 * R; c < E; c++)
			ext_row[c] = f32_to_bf16(c == 9 * R && one ? 1.0f : 0.0f);
}

// The extension parts of V (T,R) into ext (rows ld apart).
__global__ void lora_ext_rows_kernel(bf16 *ext, int ld, const float *V, int T, int R, int E, bool one)
{
	long n = (long)T * R;
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		put_ext(ext + (i / R) * ld, V[i], (int)(i % R), R, E, one);
}

// The weight side of the extension of W (rows ld apart), in two kernels
// with 32-bit index arithmetic (the 64-bit divisions of one flat kernel
// cost more than the stores): the columns K..K+E-1 of rows 0..N-1, a
// thread per element (scale*B's part j, the bias, or 0), and rows
// N..N+E-1 of columns 0..K-1 (grid (K/256, E): A's part j, read and
// written along k, or 0); not a block per row, which is latency-bound
// (docs/perf-notes.md, "Figures behind the code").
__global__ void lora_weight_ext_cols_kernel(bf16 *w, int ld, const float *B, const bf16 *bias, float scale, int K,
                                            int N, int R, int E)
{
	int total = N * E;
	for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
		int n = e / E, c = e - n * E;
		bf16 v = f32_to_bf16(0.0f);
		if (c < 9 * R)
			v = lora_ext_weight_at(scale * B[(size_t)n * R + c % R], c, R);
		else if (c == 9 * R && bias)
			v = bias[n];
		w[(size_t)n * ld + K + c] = v;
	}
}

__global__ void lora_weight_ext_rows_kernel(bf16 *w, int ld, const float *A, int K, int N, int R)
{
	int c = blockIdx.y, k = blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= K)
		return;
	bf16 v = f32_to_bf16(0.0f);
	if (c < 9 * R)
		v = lora_ext_weight_at(A[(size_t)(c % R) * K + k], c, R);
	w[(size_t)(N + c) * ld + k] = v;
}

// Adds the three parts: u (T,R) = scale * ((P[t][r] + P[t][R+r]) + P[t][2R+r])
// for P (T,3R), or dA (R,K) += scale * ((P[r][k] + P[R+r][k]) + P[2R+r][k])
// for P (3R,K) (add).  ext (T rows ld_ext apart, parts side by side only):
// the result's extension parts go there too.
//
// blockIdx.y: a batch of such joins, the y-th from P + y p_stride into
// dst + y dst_stride (floats; a group's segments, 0 and gridDim.y 1 else).
__global__ void lora_join3_kernel(float *dst, const float *P, float scale, int rows, int cols, bool parts_in_rows,
                                  bool add, bf16 *ext, int ld_ext, int E, bool one, long dst_stride = 0,
                                  long p_stride = 0)
{
	long n = (long)rows * cols;
	dst += blockIdx.y * dst_stride;
	P += blockIdx.y * p_stride;
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float a, b, c;
		if (parts_in_rows) {
			a = P[i], b = P[n + i], c = P[2 * n + i];
		} else {
			long r = i / cols, k = i % cols;
			const float *row = P + r * 3 * cols;
			a = row[k], b = row[cols + k], c = row[2 * cols + k];
		}
		float v = scale * ((a + b) + c);
		dst[i] = add ? dst[i] + v : v;
		if (ext)
			put_ext(ext + (i / cols) * ld_ext, v, (int)(i % cols), cols, E, one);
	}
}

#define ELEM_THREADS 256

// Floats of scratch a part of `bytes` takes: ops.h's count, which
// lora_scratch_floats sums, so the parts below always fit.
static long floats_of(long bytes)
{
	return (long)lora_part_floats((size_t)bytes);
}

// The tensor-core paths' input: x itself (rows *ld apart), or with
// dropout the masked copy written to X (contiguous, *ld becomes K;
// unscaled, so still exact in bf16).
static const bf16 *masked_input(bf16 *X, const bf16 *in, int *ld, float p, uint64_t seed, int T, int K)
{
	if (p == 0.0f)
		return in;
	lora_mask_kernel<<<grid_for((long)T * K, ELEM_THREADS), ELEM_THREADS, 0, poros_cuda_compute_stream()>>>(
		X, in, *ld, p, seed, K, (long)T * K);
	launchCheck();
	*ld = K;
	return X;
}

// The extension parts of V (T,R) into ext (rows ld apart), for a zero
// V that no join wrote (K or N of 0).
static void ext_rows(bf16 *ext, int ld, const float *V, int T, int R, bool one)
{
	lora_ext_rows_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, poros_cuda_compute_stream()>>>(
		ext, ld, V, T, R, lora_ext_cols(R), one);
	launchCheck();
}

// u (T,R) = xd @ A^T on tensor cores, the scratch holding A's three parts
// (unless given: A3_given, rows ld_a3 apart), the masked input (dropout
// only) and the (T,3R) sums; the join writes u's extension parts to ext
// (rows ld_in apart) too.
static void lora_u_tc(float *u, bf16 *ext, float *scratch, const bf16 *in, int ld_in, const float *A,
                      const bf16 *A3_given, int ld_a3, float p, uint64_t seed, int T, int K, int R)
{
	long a3 = A3_given ? 0 : floats_of((long)3 * R * K * 2), xm = p > 0.0f ? floats_of((long)T * K * 2) : 0;
	cudaStream_t stream = poros_cuda_compute_stream();
	bf16 *A3 = (bf16 *)scratch, *X = (bf16 *)(scratch + a3);
	float *U3 = scratch + a3 + xm;
	int ldx = ld_in, lda = K;
	if (A3_given) {
		A3 = (bf16 *)A3_given;
		lda = ld_a3;
	} else {
		lora_split3_kernel<<<grid_for((long)R * K, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(A3, A, R, K, true);
		launchCheck();
	}
	const bf16 *x = masked_input(X, in, &ldx, p, seed, T, K);
	// U3 (T,3R) row-major = column-major (3R,T): A3 read as (K,3R) ld lda,
	// x as (K,T) ld ldx.
	gemm(CUBLAS_OP_T, CUBLAS_OP_N, 3 * R, T, K, 1.0f, A3, lda, x, ldx, 0.0f, U3, 3 * R);
	lora_join3_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(
		u, U3, poros_dropout_keep_scale(p), T, R, false, false, ext, ld_in, lora_ext_cols(R), true);
	launchCheck();
}

// How many segments' (3R,cols) sums fit in the scratch past `used`
// floats (at least one; scratch_floats: the whole scratch, ops.h).
static int segs_at_once(size_t scratch_floats, long used, long per, int segs)
{
	long fit = ((long)scratch_floats - used) / per;
	return fit < 1 ? 1 : fit < segs ? (int)fit : segs;
}

// dA (R,K) += du^T @ xd on tensor cores, the scratch holding du's three
// parts (T,3R), the masked input (dropout only) and the (3R,K) sums.  A
// group (segs > 1, no dropout): du split once, then each segment of T /
// segs rows its own sum into dA + i * stride, as a call over it alone;
// as many segments a batched call as the scratch holds sums for.
static void lora_dA_tc(float *dA, float *scratch, size_t scratch_floats, const float *du, const bf16 *in,
                       int ld_in, float p, uint64_t seed, int T, int K, int R, int segs, long stride)
{
	long d3 = floats_of((long)T * 3 * R * 2), xm = p > 0.0f ? floats_of((long)T * K * 2) : 0;
	long per = floats_of((long)3 * R * K * 4);
	cudaStream_t stream = poros_cuda_compute_stream();
	bf16 *D3 = (bf16 *)scratch, *X = (bf16 *)(scratch + d3);
	float *P3 = scratch + d3 + xm;
	int ldx = ld_in, rows = T / segs, batch = segs_at_once(scratch_floats, d3 + xm, per, segs);
	lora_split3_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(D3, du, T, R, false);
	launchCheck();
	const bf16 *x = masked_input(X, in, &ldx, p, seed, T, K);
	for (int i = 0; i < segs; i += batch) {
		int b = segs - i < batch ? segs - i : batch;
		// P3 (3R,K) row-major = column-major (K,3R) = x_cm (K,rows) @
		// D3_cm^T, D3 (rows,3R) row-major read as (3R,rows) ld 3R.
		// (a batch of one is the plain gemm call)
		poros_cuda_gemm_batched(CUBLAS_OP_N, CUBLAS_OP_T, K, 3 * R, rows, 1.0f, x + (size_t)i * rows * ldx,
		                        CUDA_R_16BF, ldx, (long long)rows * ldx, D3 + (size_t)i * rows * 3 * R, 3 * R,
		                        (long long)rows * 3 * R, 0.0f, P3, CUDA_R_32F, K, per, b);
		dim3 grid(grid_for((long)R * K, ELEM_THREADS), b);
		lora_join3_kernel<<<grid, ELEM_THREADS, 0, stream>>>(dA + i * stride, P3, poros_dropout_keep_scale(p), R, K,
		                                                     true, true, NULL, 0, 0, false, stride, per);
		launchCheck();
	}
}

// dB (N,R) += scale * dout^T @ u, a segment of T / segs rows at a time into
// dB + i * stride (one segment: the whole call), on tensor cores through
// u's split (all T rows at once) and one (N,3R) sum a segment: each the
// call a segment alone would make (the same split values, shape and join).
static void lora_dB_tc(float *dB, float *scratch, size_t scratch_floats, const bf16 *dout, int ld_dout,
                       const float *u, float scale, int T, int N, int R, int segs, long stride)
{
	long u3 = floats_of((long)T * 3 * R * 2), per = floats_of((long)N * 3 * R * 4);
	cudaStream_t stream = poros_cuda_compute_stream();
	bf16 *U3 = (bf16 *)scratch;
	float *P3 = scratch + u3;
	int rows = T / segs, batch = segs_at_once(scratch_floats, u3, per, segs);
	lora_split3_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(U3, u, T, R, false);
	launchCheck();
	for (int i = 0; i < segs; i += batch) {
		int b = segs - i < batch ? segs - i : batch;
		// P3 (N,3R) row-major = column-major (3R,N) = U3_cm (3R,rows) @
		// dout_cm^T, U3 (rows,3R) read as (3R,rows) ld 3R, dout (rows,N)
		// as (N,rows) ld ld_dout.
		poros_cuda_gemm_batched(CUBLAS_OP_N, CUBLAS_OP_T, 3 * R, N, rows, 1.0f, U3 + (size_t)i * rows * 3 * R,
		                        CUDA_R_16BF, 3 * R, (long long)rows * 3 * R, dout + (size_t)i * rows * ld_dout,
		                        ld_dout, (long long)rows * ld_dout, 0.0f, P3, CUDA_R_32F, 3 * R, per, b);
		dim3 grid(grid_for((long)N * R, ELEM_THREADS), b);
		lora_join3_kernel<<<grid, ELEM_THREADS, 0, stream>>>(dB + i * stride, P3, scale, N, R, false, true, NULL, 0,
		                                                     0, false, stride, per);
		launchCheck();
	}
}

// du (T,R) = scale * dout @ B of the bf16 upstream gradient dout (T,N),
// rows ld_dout apart, on tensor cores through B's exact three-way split
// (its parts side by side, (N,3R) bf16), the scratch holding the parts and
// the (T,3R) sums; du's extension parts to ext when given.  W3_given:
// scale*B's parts, rows ld_w3 apart; scale then applies no more.
static void dout_product_tc(float *du, bf16 *ext, float *scratch, const bf16 *dout, int ld_dout, const float *B,
                            const bf16 *W3_given, int ld_w3, float scale, int T, int N, int R)
{
	long w3 = W3_given ? 0 : floats_of((long)N * 3 * R * 2);
	cudaStream_t stream = poros_cuda_compute_stream();
	bf16 *W3 = (bf16 *)scratch;
	float *P3 = scratch + w3;
	int ldw = 3 * R;
	if (W3_given) {
		W3 = (bf16 *)W3_given;
		ldw = ld_w3;
		scale = 1.0f;
	} else {
		lora_split3_kernel<<<grid_for((long)N * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(W3, B, N, R, false);
		launchCheck();
	}
	// P3 (T,3R) row-major = column-major (3R,T) = W3_cm (3R,N) @ dout_cm
	// (N,T), W3 (N,3R) read as (3R,N) ld ldw and dout (T,N) as (N,T) ld
	// ld_dout.
	gemm(CUBLAS_OP_N, CUBLAS_OP_N, 3 * R, T, N, 1.0f, W3, ldw, dout, ld_dout, 0.0f, P3, 3 * R);
	lora_join3_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(
		du, P3, scale, T, R, false, false, ext, ld_dout, lora_ext_cols(R), false);
	launchCheck();
}

// The scratch is no hint here: every product above needs it.
static void require_scratch(const float *scratch, const char *op, int T, int K, int N, int R)
{
	if (scratch)
		return;
	fprintf(stderr, "%s: %s: no scratch (lora_scratch_floats(%d, %d, %d, %d) floats are required)\n",
	        poros_cuda_progname(), op, T, K, N, R);
	exit(1);
}

// u (T,R) = xd @ A^T saved; then out (T,N) = scale * u @ B^T (written), or
// u's extension parts into ext; in (T,K) bf16 rows ld_in apart, A (R,K),
// B (N,R).
extern "C" void lora_forward_cuda(const struct lora_fwd_args *args)
{
	float *out = args->out, *u = args->u, *scratch = args->scratch;
	bf16 *ext = args->ext;
	const bf16 *in = args->in, *A3 = args->A3;
	const float *A = args->A, *B = args->B;
	float scale = args->scale, dropout_p = args->dropout_p;
	uint64_t dropout_seed = args->dropout_seed;
	int ld_in = args->ld_in, ld_a3 = args->ld_a3, T = args->T, K = args->K, N = args->N, R = args->R;
	if (T <= 0 || R <= 0)
		return;
	if (K > 0) {
		require_scratch(scratch, "lora_forward_cuda", T, K, N, R);
		lora_u_tc(u, ext, scratch, in, ld_in, A, A3, ld_a3, dropout_p, dropout_seed, T, K, R);
	} else {
		cudaCheck(cudaMemsetAsync(u, 0, (size_t)T * R * sizeof(float), poros_cuda_compute_stream()));
		if (ext)
			ext_rows(ext, ld_in, u, T, R, true);
	}
	if (ext)
		return;
	if (N <= 0 || !out)
		return;
	// Column-major: out^T (N,T) = scale * B_cm^T (N,R) @ u_cm (R,T), with
	// B read as (R,N) ld R and u as (R,T) ld R.
	gemm(CUBLAS_OP_T, CUBLAS_OP_N, N, T, R, scale, B, R, u, R, 0.0f, out, N);
}

// Given dout (T,N) bf16 (rows ld_dout apart):
//   du (T,R)   = scale * dout @ B          (written)
//   dB (N,R)  += scale * dout^T @ u
//   dA (R,K)  += du^T @ xd
//   din (T,K)  = (du @ A) * mask / (1-p), or += when accumulate (skipped
//                when din is NULL), or du's extension parts into ext
extern "C" void lora_backward_cuda(const struct lora_bwd_args *args)
{
	float *din = args->din, *dA = args->dA, *dB = args->dB, *du = args->du, *scratch = args->scratch;
	bf16 *ext = args->ext;
	const bf16 *dout = args->dout, *in = args->in, *B3 = args->B3;
	const float *u = args->u, *A = args->A, *B = args->B;
	float scale = args->scale, dropout_p = args->dropout_p;
	uint64_t dropout_seed = args->dropout_seed;
	int ld_dout = args->ld_dout, ld_in = args->ld_in, ld_b3 = args->ld_b3;
	int T = args->T, K = args->K, N = args->N, R = args->R, accumulate = args->accumulate;
	int segs = args->segs > 1 ? args->segs : 1;
	if (T <= 0 || R <= 0)
		return;
	cudaStream_t stream = poros_cuda_compute_stream();
	if ((ext || segs > 1) && dropout_p != 0.0f) {
		fprintf(stderr, "%s: lora_backward_cuda: %s takes no dropout (p = %g)\n", poros_cuda_progname(),
		        segs > 1 ? "a group" : "the extension path", dropout_p);
		exit(1);
	}
	if (N > 0 || K > 0)
		require_scratch(scratch, "lora_backward_cuda", T, K, N, R);
	if (N > 0) {
		dout_product_tc(du, ext, scratch, dout, ld_dout, B, B3, ld_b3, scale, T, N, R);
		lora_dB_tc(dB, scratch, lora_scratch_floats(T, K, N, R), dout, ld_dout, u, scale, T, N, R, segs,
		           args->seg_stride);
	} else {
		cudaCheck(cudaMemsetAsync(du, 0, (size_t)T * R * sizeof(float), stream));
		if (ext)
			ext_rows(ext, ld_dout, du, T, R, false);
	}
	if (K <= 0)
		return;
	lora_dA_tc(dA, scratch, lora_scratch_floats(T, K, N, R), du, in, ld_in, dropout_p, dropout_seed, T, K, R, segs,
	           args->seg_stride);
	if (!din || ext)
		return;
	dim3 grid_d(ceil_div_u(T, DIN_T), ceil_div_u(K, DIN_K));
	size_t smem = (size_t)DIN_T * R * sizeof(float);
	if (smem > 48 * 1024) {
		fprintf(stderr, "%s: lora_backward_cuda: rank %d is too large (at most %d)\n", poros_cuda_progname(), R,
		        48 * 1024 / (int)sizeof(float) / DIN_T);
		exit(1);
	}
	lora_din_kernel<<<grid_d, DIN_K, smem, stream>>>(din, du, A, dropout_p, poros_dropout_keep_scale(dropout_p),
	                                                 dropout_seed, T, K, R, accumulate != 0);
	launchCheck();
}

// The weight side of the LoRA extension of W (rows ld_w apart): see
// kernels/ops.h.
extern "C" void lora_weight_ext_cuda(bf16 *w, int ld_w, const float *A, const float *B, const bf16 *bias, float scale,
                                     int K, int N, int R)
{
	int E = lora_ext_cols(R);
	if (E <= 0)
		return;
	cudaStream_t stream = poros_cuda_compute_stream();
	if (N > 0) {
		lora_weight_ext_cols_kernel<<<grid_for((long)N * E, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(
			w, ld_w, B, bias, scale, K, N, R, E);
		launchCheck();
	}
	if (K > 0) {
		dim3 grid(ceil_div_u(K, ELEM_THREADS), E);
		lora_weight_ext_rows_kernel<<<grid, ELEM_THREADS, 0, stream>>>(w, ld_w, A, K, N, R);
		launchCheck();
	}
}
