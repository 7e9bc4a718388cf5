// defines: lora_forward_cuda, lora_backward_cuda,
//          lora_down_kernel, lora_dA_kernel, lora_din_kernel, lora_dropped_input_kernel
//
// A LoRA adapter beside a frozen linear, as PEFT computes it:
//   out (T,N) += scale * (dropout(x) @ A^T) @ B^T,  u = dropout(x) @ A^T
// x is the bf16 input (T,K) of the base GEMM; A (R,K), B (N,R) and every
// product are fp32.  Dropout keeps element (t,k) iff
// poros_dropout_keep(seed, t*K+k, p) and scales kept ones by 1/(1-p), the
// same hash and the same float multiply as the CPU, so the dropped input
// xd has the same bits on both backends.
//
// The products with xd (u = xd @ A^T and dA += du^T @ xd) take one of two
// paths.  Given an fp32 scratch (T*K floats, from the caller: cudaMalloc
// inside an op is not allowed), xd is written there once and both become
// fp32 cuBLAS GEMMs, which split the long K (or T) sum across every SM.
// Without one, small tiled kernels read bf16 x and apply the mask on the
// fly (x read once per 16 ranks, nothing written back), but their grid is
// only ceil(T/8) blocks for u, which leaves most of a large GPU idle.
// The products without xd are fp32 cuBLAS GEMMs (no TF32).  Every sum runs
// in an order fixed by the shape: u and dA split their long sums (over k,
// over t) among a block's thread groups, each ascending, and add the
// groups' partial sums in group order; din sums r ascending, as the CPU.
#include "common.cuh"

// u kernel: a block owns LD_T tokens x LD_R ranks and splits K among LD_G
// thread groups; each pass stages LD_K = LD_G * LD_KG columns of x and A in
// shared memory while the next pass's columns load into registers.
#define LD_T 8
#define LD_R 16
#define LD_G 4
#define LD_KG 64
#define LD_K (LD_G * LD_KG)
#define LD_THREADS (LD_T * LD_R * LD_G)
#define LD_X_PER (LD_T * LD_K / LD_THREADS) // x elements each thread stages
#define LD_A_PER (LD_R * LD_K / LD_THREADS) // A elements each thread stages
// Row stride of the shared tiles: keeps float4 alignment and shifts each
// row by 4 banks, so the 8 rows a quarter-warp reads hit distinct banks.
#define LD_KPAD (LD_K + 4)

// dA kernel: a block owns DA_K columns x DA_R ranks and splits each pass of
// DA_T tokens among DA_G thread groups, prefetching like the u kernel.
#define DA_K 32
#define DA_R 16
#define DA_G 4
#define DA_TG 16
#define DA_T (DA_G * DA_TG)
#define DA_THREADS (DA_K * (DA_R / 4) * DA_G) // 4 ranks per thread
#define DA_X_PER (DA_T * DA_K / DA_THREADS)
#define DA_D_PER (DA_T * DA_R / DA_THREADS)

// din kernel: DIN_K columns x DIN_T tokens per block.
#define DIN_K 256
#define DIN_T 8

// The dropped input element (t,k), as the CPU's dropped_input computes it.
__device__ __forceinline__ float dropped_input(float x, int t, int k, int K, float p, float keep_scale,
                                               uint64_t seed)
{
	if (p == 0.0f)
		return x;
	return dropout_keep_dev(seed, (uint64_t)t * K + k, p) ? x * keep_scale : 0.0f;
}

// u (T,R) = xd (T,K) @ A^T, A (R,K).  Grid (ceil(T/LD_T), ceil(R/LD_R)),
// LD_THREADS threads; thread (g, tt, r) sums u[t0+tt][r0+r] over the group's
// columns of every pass, k ascending; the groups' sums are then added in
// group order.
__global__ void __launch_bounds__(LD_THREADS) lora_down_kernel(float *u, const bf16 *in, const float *A, float p,
                                                               float keep_scale, uint64_t seed, int T, int K,
                                                               int R)
{
	__shared__ __align__(16) float xs[LD_T][LD_KPAD];
	__shared__ __align__(16) float as[LD_R][LD_KPAD];
	__shared__ float partial[LD_G][LD_T * LD_R];
	int tid = threadIdx.x;
	int r = tid % LD_R, tt = (tid / LD_R) % LD_T, g = tid / (LD_R * LD_T);
	int t0 = blockIdx.x * LD_T, r0 = blockIdx.y * LD_R;
	float x_next[LD_X_PER], a_next[LD_A_PER];

	// element e of a pass: row e / LD_K, column e % LD_K (coalesced rows)
#define LD_FETCH(k0)                                                                              \
	do {                                                                                          \
		_Pragma("unroll") for (int i = 0; i < LD_X_PER; i++) {                                    \
			int e = tid + i * LD_THREADS, t = t0 + e / LD_K, k = (k0) + e % LD_K;                 \
			x_next[i] = (t < T && k < K) ? bf16_to_f32(in[(size_t)t * K + k]) : 0.0f;            \
		}                                                                                         \
		_Pragma("unroll") for (int i = 0; i < LD_A_PER; i++) {                                    \
			int e = tid + i * LD_THREADS, rr = r0 + e / LD_K, k = (k0) + e % LD_K;                \
			a_next[i] = (rr < R && k < K) ? A[(size_t)rr * K + k] : 0.0f;                         \
		}                                                                                         \
	} while (0)

	LD_FETCH(0);
	float acc = 0.0f;
	for (int k0 = 0; k0 < K; k0 += LD_K) {
#pragma unroll
		for (int i = 0; i < LD_X_PER; i++) {
			int e = tid + i * LD_THREADS, t = t0 + e / LD_K, k = k0 + e % LD_K;
			xs[e / LD_K][e % LD_K] = (t < T && k < K) ? dropped_input(x_next[i], t, k, K, p, keep_scale, seed)
			                                          : 0.0f;
		}
#pragma unroll
		for (int i = 0; i < LD_A_PER; i++) {
			int e = tid + i * LD_THREADS;
			as[e / LD_K][e % LD_K] = a_next[i];
		}
		__syncthreads();
		if (k0 + LD_K < K)
			LD_FETCH(k0 + LD_K); // in flight while this pass computes
		const float *xr = &xs[tt][g * LD_KG], *ar = &as[r][g * LD_KG];
#pragma unroll 4
		for (int kk = 0; kk < LD_KG; kk += 4) {
			float4 x = *(const float4 *)(xr + kk);
			float4 a = *(const float4 *)(ar + kk);
			acc = __fmaf_rn(x.x, a.x, acc);
			acc = __fmaf_rn(x.y, a.y, acc);
			acc = __fmaf_rn(x.z, a.z, acc);
			acc = __fmaf_rn(x.w, a.w, acc);
		}
		__syncthreads();
	}
#undef LD_FETCH
	partial[g][tt * LD_R + r] = acc;
	__syncthreads();
	if (g != 0)
		return;
	float sum = partial[0][tt * LD_R + r];
#pragma unroll
	for (int j = 1; j < LD_G; j++)
		sum += partial[j][tt * LD_R + r];
	int t = t0 + tt, rr = r0 + r;
	if (t < T && rr < R)
		u[(size_t)t * R + rr] = sum;
}

// dA (R,K) += du^T (R,T) @ xd (T,K).  Grid (ceil(K/DA_K), ceil(R/DA_R)),
// DA_THREADS threads; thread (g, rq, kc) sums dA[r0+4rq .. +3][k0+kc] over
// the group's DA_TG tokens of every pass, t ascending; the groups' sums are
// then added in group order.
__global__ void __launch_bounds__(DA_THREADS) lora_dA_kernel(float *dA, const float *du, const bf16 *in, float p,
                                                             float keep_scale, uint64_t seed, int T, int K, int R)
{
	__shared__ float dus[DA_T][DA_R];
	__shared__ float xs[DA_T][DA_K];
	__shared__ float partial[DA_G][DA_R * DA_K];
	int tid = threadIdx.x;
	int kc = tid % DA_K, rq = (tid / DA_K) % (DA_R / 4), g = tid / (DA_K * DA_R / 4);
	int k0 = blockIdx.x * DA_K, r0 = blockIdx.y * DA_R;
	float x_next[DA_X_PER], d_next[DA_D_PER];

	// x element e of a pass: row e / DA_K, column e % DA_K; du element e:
	// row e / DA_R, rank e % DA_R
#define DA_FETCH(ts)                                                                              \
	do {                                                                                          \
		_Pragma("unroll") for (int i = 0; i < DA_X_PER; i++) {                                    \
			int e = tid + i * DA_THREADS, t = (ts) + e / DA_K, k = k0 + e % DA_K;                 \
			x_next[i] = (t < T && k < K) ? bf16_to_f32(in[(size_t)t * K + k]) : 0.0f;            \
		}                                                                                         \
		_Pragma("unroll") for (int i = 0; i < DA_D_PER; i++) {                                    \
			int e = tid + i * DA_THREADS, t = (ts) + e / DA_R, rr = r0 + e % DA_R;                \
			d_next[i] = (t < T && rr < R) ? du[(size_t)t * R + rr] : 0.0f;                        \
		}                                                                                         \
	} while (0)

	DA_FETCH(0);
	float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
	for (int ts = 0; ts < T; ts += DA_T) {
#pragma unroll
		for (int i = 0; i < DA_X_PER; i++) {
			int e = tid + i * DA_THREADS, t = ts + e / DA_K, k = k0 + e % DA_K;
			xs[e / DA_K][e % DA_K] = (t < T && k < K) ? dropped_input(x_next[i], t, k, K, p, keep_scale, seed)
			                                          : 0.0f;
		}
#pragma unroll
		for (int i = 0; i < DA_D_PER; i++) {
			int e = tid + i * DA_THREADS;
			dus[e / DA_R][e % DA_R] = d_next[i];
		}
		__syncthreads();
		if (ts + DA_T < T)
			DA_FETCH(ts + DA_T);
#pragma unroll 4
		for (int tt = g * DA_TG; tt < (g + 1) * DA_TG; tt++) {
			float x = xs[tt][kc];
#pragma unroll
			for (int j = 0; j < 4; j++)
				acc[j] = __fmaf_rn(dus[tt][rq * 4 + j], x, acc[j]);
		}
		__syncthreads();
	}
#undef DA_FETCH
#pragma unroll
	for (int j = 0; j < 4; j++)
		partial[g][(rq * 4 + j) * DA_K + kc] = acc[j];
	__syncthreads();
	if (g != 0)
		return;
	int k = k0 + kc;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		int rr = r0 + rq * 4 + j;
		float sum = partial[0][(rq * 4 + j) * DA_K + kc];
#pragma unroll
		for (int h = 1; h < DA_G; h++)
			sum += partial[h][(rq * 4 + j) * DA_K + kc];
		if (rr < R && k < K)
			dA[(size_t)rr * K + k] += sum;
	}
}

// din (T,K) += mask(t,k) * keep_scale * (du (T,R) @ A (R,K))[t,k]: the
// gradient flows back through the dropout the forward applied, r ascending
// as on the CPU.  Grid (ceil(K/DIN_K), ceil(T/DIN_T)), DIN_K threads; each
// A element is read once per block and used for DIN_T tokens.
__global__ void lora_din_kernel(float *din, const float *du, const float *A, float p, float keep_scale,
                                uint64_t seed, int T, int K, int R)
{
	extern __shared__ float du_tile[]; // (DIN_T, R)
	int t0 = blockIdx.y * DIN_T;
	int k = blockIdx.x * DIN_K + threadIdx.x;
	for (int e = threadIdx.x; e < DIN_T * R; e += blockDim.x) {
		int t = t0 + e / R;
		du_tile[e] = t < T ? du[(size_t)t * R + e % R] : 0.0f;
	}
	__syncthreads();
	if (k >= K)
		return;
	float acc[DIN_T];
#pragma unroll
	for (int i = 0; i < DIN_T; i++)
		acc[i] = 0.0f;
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
			din[idx] += acc[i];
		else if (dropout_keep_dev(seed, (uint64_t)t * K + k, p))
			din[idx] += acc[i] * keep_scale;
	}
}

// xd (T*K) = dropout(in) in fp32, exactly as dropped_input computes it.
__global__ void lora_dropped_input_kernel(float *xd, const bf16 *in, float p, float keep_scale, uint64_t seed,
                                          long total, int K)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x)
		xd[i] = dropped_input(bf16_to_f32(in[i]), (int)(i / K), (int)(i % K), K, p, keep_scale, seed);
}

#define XD_THREADS 256

static void dropped_input_to(float *xd, const bf16 *in, float p, float keep_scale, uint64_t seed, int T, int K)
{
	long total = (long)T * K;
	lora_dropped_input_kernel<<<grid_for(total, XD_THREADS), XD_THREADS, 0, poros_cuda_compute_stream()>>>(
		xd, in, p, keep_scale, seed, total, K);
	launchCheck();
}

static float keep_scale_of(float p)
{
	// the CPU's expression, so kept elements scale by the same float
	return p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
}

// out (T,N) += scale * u @ B^T; u (T,R) = xd @ A^T saved; in (T,K) bf16,
// A (R,K), B (N,R).
extern "C" void lora_forward_cuda(float *out, float *u, float *xd_scratch, const bf16 *in, const float *A,
                                  const float *B, float scale, float dropout_p, uint64_t dropout_seed, int T, int K,
                                  int N, int R)
{
	if (T <= 0 || R <= 0)
		return;
	cudaStream_t stream = poros_cuda_compute_stream();
	if (xd_scratch && K > 0) {
		dropped_input_to(xd_scratch, in, dropout_p, keep_scale_of(dropout_p), dropout_seed, T, K);
		// u^T (R,T) = A_cm^T (R,K) @ xd_cm (K,T): A read as (K,R) ld K,
		// xd as (K,T) ld K
		gemm_f32(CUBLAS_OP_T, CUBLAS_OP_N, R, T, K, 1.0f, A, K, xd_scratch, K, 0.0f, u, R);
	} else {
		dim3 grid(ceil_div_u(T, LD_T), ceil_div_u(R, LD_R));
		lora_down_kernel<<<grid, LD_THREADS, 0, stream>>>(u, in, A, dropout_p, keep_scale_of(dropout_p),
		                                                  dropout_seed, T, K, R);
		launchCheck();
	}
	if (N <= 0)
		return;
	// Column-major: out^T (N,T) += scale * B_cm^T (N,R) @ u_cm (R,T), with
	// B read as (R,N) ld R and u as (R,T) ld R.
	gemm_f32(CUBLAS_OP_T, CUBLAS_OP_N, N, T, R, scale, B, R, u, R, 1.0f, out, N);
}

// Given dout (T,N):
//   du (T,R)   = scale * dout @ B          (written)
//   dB (N,R)  += scale * dout^T @ u
//   dA (R,K)  += du^T @ xd
//   din (T,K) += (du @ A) * mask / (1-p)   (skipped when din is NULL)
extern "C" void lora_backward_cuda(float *din, float *dA, float *dB, float *du, float *xd_scratch, const float *dout,
                                   const bf16 *in, const float *u, const float *A, const float *B, float scale,
                                   float dropout_p, uint64_t dropout_seed, int T, int K, int N, int R)
{
	if (T <= 0 || R <= 0)
		return;
	cudaStream_t stream = poros_cuda_compute_stream();
	float keep_scale = keep_scale_of(dropout_p);
	// du^T (R,T) = scale * B_cm (R,N) @ dout_cm (N,T)
	gemm_f32(CUBLAS_OP_N, CUBLAS_OP_N, R, T, N, scale, B, R, dout, N, 0.0f, du, R);
	// dB^T (R,N) += scale * u_cm (R,T) @ dout_cm^T (T,N)
	gemm_f32(CUBLAS_OP_N, CUBLAS_OP_T, R, N, T, scale, u, R, dout, N, 1.0f, dB, R);
	if (K <= 0)
		return;
	if (xd_scratch) {
		dropped_input_to(xd_scratch, in, dropout_p, keep_scale, dropout_seed, T, K);
		// dA_cm (K,R) += xd_cm (K,T) @ du_cm^T (T,R): du read as (R,T) ld R
		gemm_f32(CUBLAS_OP_N, CUBLAS_OP_T, K, R, T, 1.0f, xd_scratch, K, du, R, 1.0f, dA, K);
	} else {
		dim3 grid_a(ceil_div_u(K, DA_K), ceil_div_u(R, DA_R));
		lora_dA_kernel<<<grid_a, DA_THREADS, 0, stream>>>(dA, du, in, dropout_p, keep_scale, dropout_seed, T, K,
		                                                  R);
		launchCheck();
	}
	if (!din)
		return;
	dim3 grid_d(ceil_div_u(K, DIN_K), ceil_div_u(T, DIN_T));
	size_t smem = (size_t)DIN_T * R * sizeof(float);
	if (smem > 48 * 1024) {
		fprintf(stderr, "%s: lora_backward_cuda: rank %d is too large (at most %d)\n", poros_cuda_progname(), R,
		        48 * 1024 / (int)sizeof(float) / DIN_T);
		exit(1);
	}
	lora_din_kernel<<<grid_d, DIN_K, smem, stream>>>(din, du, A, dropout_p, keep_scale, dropout_seed, T, K, R);
	launchCheck();
}
