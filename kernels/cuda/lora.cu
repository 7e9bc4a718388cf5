// defines: lora_forward_cuda, lora_backward_cuda, lora_weight_ext_cuda,
//          lora_rowprod_kernel, lora_dA_kernel, lora_slice_sum_kernel, lora_din_kernel,
//          lora_split3_kernel, lora_mask_kernel, lora_join3_kernel, lora_ext_rows_kernel,
//          lora_weight_ext_cols_kernel, lora_weight_ext_rows_kernel
//
// A LoRA adapter beside a frozen linear, as PEFT computes it:
//   out (T,N) = scale * (dropout(x) @ A^T) @ B^T,  u = dropout(x) @ A^T
// (written; the base GEMM adds onto it in its epilogue).  x is the bf16
// input (T,K) of the base GEMM and dout, in backward, the bf16 upstream
// gradient; A (R,K), B (N,R) and every product are fp32.  Dropout keeps element (t,k) iff
// poros_dropout_keep(seed, t*K+k, p) and scales kept ones by 1/(1-p), the
// same hash and the same float multiply as the CPU, so the dropped input
// has the same bits on both backends.  It is applied as x is staged into
// shared memory and never written back.
//
// The products with a rank-sized side are all long thin sums:
//   u  (T,R) = xd @ A^T          sum over K   (lora_rowprod_kernel)
//   du (T,R) = scale dout @ B    sum over N   (lora_rowprod_kernel)
//   dA (R,K) += du^T @ xd        sum over T   (lora_dA_kernel)
//   dB (N,R) += scale dout^T @ u sum over T   (lora_dA_kernel, transposed)
// All four run on tensor cores when the scratch holds their operands (the
// exact three-way bf16 split of the fp32 side, below; the other side, x or
// dout, is bf16 already); the fallback when the scratch is short is our
// CUDA-core sums.  The engine reaches that fallback: its scratch is T x
// the largest K, which the op counts as T*K, and the split operands and
// sums outgrow it at small T, e.g. dB (u's parts, 1.5TR floats, and the
// (N,3R) sums) once 1.5TR + 3NR > TK: gate/up (N ~ 3.5K) below T ~ 10.5R,
// about 670 at rank 64.  Keep it while that holds.  A
// GEMM library tiles the short side (R = 16) of an fp32 product and leaves
// most of a large GPU idle or walks the long sum serially, so those are our
// own kernels:
// each block owns a tile of outputs and one slice of the long sum; with a
// scratch (T*K floats from the caller: an op may not allocate) the slices
// write partial sums that lora_slice_sum_kernel adds in slice order, which
// puts ~1000 blocks on the card; without one, each block takes the whole
// sum (one slice) and writes the result itself.  The slicing depends only
// on the shape, each thread sums its slice in ascending order, and slices
// are added in ascending order: same shape, same bits (blockwise ==
// resident), on any GPU.  out = scale u B^T is an ordinary fp32 cuBLAS
// GEMM (no TF32), written, not added (the base GEMM reads it as its C);
// din (+)= du @ A is lora_din_kernel, r ascending as on the CPU.
//
// With the LoRA extension (kernels/ops.h) neither out nor din is formed
// here: u's (or du's) parts go into the activation's extension columns
// (the join of the tensor-core path writes them beside u), and
// lora_weight_ext_{cols,rows}_kernel fill the weight's side, so the base GEMM sums
// the LoRA term with its own.  x and dout may be pitched (rows ld apart);
// the dropout mask index stays t*K + k.
#include "common.cuh"

// Row products: a block owns RP_T tokens x RP_R ranks of one slice and
// stages RP_K columns of x and of the weight per pass.  Its RP_G thread
// groups split each pass's columns; thread (g, tg, rg) sums tokens
// tg + 16 i (i < 4) for ranks 4 rg + j (j < 4): 16 accumulators, two 16-byte
// shared loads per 16 FMAs.  The groups' sums are added in group order at
// the end.  Several groups per block (not more work per thread) is what
// keeps enough warps on each scheduler to hide the load latency.
#define RP_T 64
#define RP_R 16
#define RP_K 64
#define RP_G 4
#define RP_THREADS (64 * RP_G)
#define RP_KPAD (RP_K + 4) // keeps float4 alignment; rows 4 banks apart

// dA: a block owns DA_K columns x DA_R ranks of one token slice and stages
// DA_T tokens per pass; its DA_G groups split each pass's tokens; thread
// (g, kq, rq) sums columns 4 kq + i for ranks 4 rq + j.
#define DA_K 64
#define DA_R 16
#define DA_T 64
#define DA_G 4
#define DA_THREADS (64 * DA_G)

// Splitting: about SPLIT_BLOCKS blocks per call, no slice shorter than
// SPLIT_MIN (a slice's partial sums must stay small beside its input).
#define SPLIT_BLOCKS 1024
#define SPLIT_MIN 128

// din kernel: DIN_K columns x DIN_T tokens per block.
#define DIN_K 256
#define DIN_T 8

__device__ __forceinline__ float load1(const float *p)
{
	return *p;
}

__device__ __forceinline__ float load1(const bf16 *p)
{
	return bf16_to_f32(*p);
}

__device__ __forceinline__ float dropped(float x, int t, int k, int K, float p, float keep_scale, uint64_t seed)
{
	return poros_dropped(x, seed, (uint64_t)t * K + k, p, keep_scale);
}

// Four elements of row t of X (rows ld apart) from column k, zero past
// kend; the dropout (mask index t*K + k) applies to the bf16 input only
// (p = 0 for dout and the fp32 factors).
template <typename TX>
__device__ __forceinline__ float4 row_group(const TX *X, int t, int k, int kend, int ld, int K, bool vec, float p,
                                           float keep_scale, uint64_t seed)
{
	const TX *x = X + (size_t)t * ld + k;
	float v[4];
	if (k + 3 < kend) {
		float4 w = load4(x, vec);
		v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
	} else {
		for (int i = 0; i < 4; i++)
			v[i] = k + i < kend ? load1(x + i) : 0.0f;
	}
	if (p != 0.0f)
		for (int i = 0; i < 4; i++)
			v[i] = k + i < kend ? dropped(v[i], t, k + i, K, p, keep_scale, seed) : 0.0f;
	return make_float4(v[0], v[1], v[2], v[3]);
}

// Per pass each thread loads RP_XG groups of four x values and RP_WG of
// four weights into registers; the next pass's loads are issued before the
// current pass computes, so their latency hides behind the FMAs.
#define RP_XG (RP_T * RP_K / 4 / RP_THREADS)
#define RP_WG (RP_R * RP_K / 4 / RP_THREADS)

template <typename TX>
__device__ __forceinline__ void rowprod_fetch_x(float4 (&xr)[RP_XG], const TX *X, int tid, int t0, int k0, int kend,
                                                int T, int ld, int K, bool vec, float p, float keep_scale,
                                                uint64_t seed)
{
#pragma unroll
	for (int i = 0; i < RP_XG; i++) {
		int e = tid + i * RP_THREADS, row = e / (RP_K / 4), c = (e % (RP_K / 4)) * 4, t = t0 + row;
		xr[i] = t < T ? row_group(X, t, k0 + c, kend, ld, K, vec, p, keep_scale, seed)
		              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	}
}

// Group i of a pass: for A, row r0 + e / (RP_K/4), columns 4 (e % (RP_K/4))
// on; for B, column k0 + e / (RP_R/4), ranks r0 + 4 (e % (RP_R/4)) on.
template <bool W_IS_B>
__device__ __forceinline__ void rowprod_fetch_w(float4 (&wr)[RP_WG], const float *W, int tid, int r0, int k0,
                                                int kend, int K, int R, bool vec)
{
#pragma unroll
	for (int i = 0; i < RP_WG; i++) {
		int e = tid + i * RP_THREADS;
		if (W_IS_B) {
			int c = e / (RP_R / 4), r = r0 + (e % (RP_R / 4)) * 4, k = k0 + c;
			wr[i] = k < kend ? row_group(W, k, r, R, R, R, vec, 0.0f, 1.0f, 0)
			                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		} else {
			int row = e / (RP_K / 4), c = (e % (RP_K / 4)) * 4, r = r0 + row;
			wr[i] = r < R ? row_group(W, r, k0 + c, kend, K, K, vec, 0.0f, 1.0f, 0)
			              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		}
	}
}

// P (T,R) partial sums over columns [s*slice, (s+1)*slice) of
//   X (T,K) (rows ldx apart) times W(r,k): W_IS_B ? W[k*R + r] (B (N,R)) :
//   W[r*K + k] (A (R,K)).
// One slice (gridDim.z == 1): out = scale * sum, final.  Several: slice s
// writes its raw sums to out + s*T*R for lora_slice_sum_kernel.
template <typename TX, bool W_IS_B>
__global__ void __launch_bounds__(RP_THREADS)
	lora_rowprod_kernel(float *out, const TX *X, int ldx, const float *W, float scale, float p, float keep_scale,
	                    uint64_t seed, int T, int K, int R, int slice, bool vec_x, bool vec_w)
{
	__shared__ __align__(16) float xs[RP_T][RP_KPAD];
	__shared__ __align__(16) float ws[RP_R][RP_KPAD];
	int tid = threadIdx.x, g = tid / 64, tg = tid % 16, rg = (tid % 64) / 16;
	int t0 = blockIdx.x * RP_T, r0 = blockIdx.y * RP_R, s = blockIdx.z;
	int kbeg = s * slice, kend = min(K, kbeg + slice);
	float4 xr[RP_XG], wr[RP_WG];
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;

	rowprod_fetch_x(xr, X, tid, t0, kbeg, kend, T, ldx, K, vec_x, p, keep_scale, seed);
	rowprod_fetch_w<W_IS_B>(wr, W, tid, r0, kbeg, kend, K, R, vec_w);
	for (int k0 = kbeg; k0 < kend; k0 += RP_K) {
#pragma unroll
		for (int i = 0; i < RP_XG; i++) {
			int e = tid + i * RP_THREADS;
			*(float4 *)&xs[e / (RP_K / 4)][(e % (RP_K / 4)) * 4] = xr[i];
		}
#pragma unroll
		for (int i = 0; i < RP_WG; i++) {
			int e = tid + i * RP_THREADS;
			if (W_IS_B) {
				int c = e / (RP_R / 4), rq = (e % (RP_R / 4)) * 4;
				ws[rq][c] = wr[i].x, ws[rq + 1][c] = wr[i].y, ws[rq + 2][c] = wr[i].z, ws[rq + 3][c] = wr[i].w;
			} else {
				*(float4 *)&ws[e / (RP_K / 4)][(e % (RP_K / 4)) * 4] = wr[i];
			}
		}
		__syncthreads();
		if (k0 + RP_K < kend) { // in flight while this pass computes
			rowprod_fetch_x(xr, X, tid, t0, k0 + RP_K, kend, T, ldx, K, vec_x, p, keep_scale, seed);
			rowprod_fetch_w<W_IS_B>(wr, W, tid, r0, k0 + RP_K, kend, K, R, vec_w);
		}
#pragma unroll
		for (int kk = g * (RP_K / RP_G); kk < (g + 1) * (RP_K / RP_G); kk += 4) {
			float4 w[4];
#pragma unroll
			for (int j = 0; j < 4; j++)
				w[j] = *(const float4 *)&ws[rg * 4 + j][kk];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				float4 x = *(const float4 *)&xs[tg + 16 * i][kk];
#pragma unroll
				for (int j = 0; j < 4; j++) {
					acc[i][j] = __fmaf_rn(x.x, w[j].x, acc[i][j]);
					acc[i][j] = __fmaf_rn(x.y, w[j].y, acc[i][j]);
					acc[i][j] = __fmaf_rn(x.z, w[j].z, acc[i][j]);
					acc[i][j] = __fmaf_rn(x.w, w[j].w, acc[i][j]);
				}
			}
		}
		__syncthreads();
	}
	// the groups' sums, added in group order: red[g][output o][thread]
	float *red = &xs[0][0];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			red[(g * 16 + i * 4 + j) * 64 + tid % 64] = acc[i][j];
	__syncthreads();
	if (g != 0)
		return;
	bool final = gridDim.z == 1;
	float *dst = final ? out : out + (size_t)s * T * R;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int t = t0 + tg + 16 * i;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int r = r0 + rg * 4 + j, o = i * 4 + j;
			float sum = red[o * 64 + tid];
#pragma unroll
			for (int h = 1; h < RP_G; h++)
				sum += red[(h * 16 + o) * 64 + tid];
			if (t < T && r < R)
				dst[(size_t)t * R + r] = final ? scale * sum : sum;
		}
	}
}

#define DA_XG (DA_T * DA_K / 4 / DA_THREADS)
#define DA_UG (DA_T * DA_R / 4 / DA_THREADS)

__device__ __forceinline__ void dA_fetch(float4 (&xr)[DA_XG], float4 (&ur)[DA_UG], const bf16 *in, int ldx,
                                         const float *du, int tid, int ts, int tend, int k0, int r0, int K, int R,
                                         bool vec_x, bool vec_u, float p, float keep_scale, uint64_t seed)
{
#pragma unroll
	for (int i = 0; i < DA_XG; i++) {
		int e = tid + i * DA_THREADS, row = e / (DA_K / 4), c = (e % (DA_K / 4)) * 4, t = ts + row;
		xr[i] = t < tend ? row_group(in, t, k0 + c, K, ldx, K, vec_x, p, keep_scale, seed)
		                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	}
#pragma unroll
	for (int i = 0; i < DA_UG; i++) {
		int e = tid + i * DA_THREADS, row = e / (DA_R / 4), c = (e % (DA_R / 4)) * 4, t = ts + row;
		ur[i] = t < tend ? row_group(du, t, r0 + c, R, R, R, vec_u, 0.0f, 1.0f, 0)
		                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	}
}

// dA (R,K) += scale * du^T (R,T) @ xd (T,K) over the tokens [s*slice,
// (s+1)*slice), in's rows ldx apart; transposed: the same sums stored as
// (K,R), which is dB (N,R) += scale * dout^T @ u with u in du's place and
// dout in x's (p = 0).
// One slice: added to dA here.  Several: slice s writes its raw sums to
// part + s*R*K (in the output's layout) for lora_slice_sum_kernel.
__global__ void __launch_bounds__(DA_THREADS)
	lora_dA_kernel(float *dA, float *part, const float *du, const bf16 *in, int ldx, float scale, float p,
	               float keep_scale, uint64_t seed, int T, int K, int R, int slice, bool vec_x, bool vec_u,
	               bool transposed)
{
	__shared__ __align__(16) float xs[DA_T][DA_K];
	__shared__ __align__(16) float us[DA_T][DA_R];
	int tid = threadIdx.x, g = tid / 64, kq = tid % 16, rq = (tid % 64) / 16;
	int k0 = blockIdx.x * DA_K, r0 = blockIdx.y * DA_R, s = blockIdx.z;
	int tbeg = s * slice, tend = min(T, tbeg + slice);
	float4 xr[DA_XG], ur[DA_UG];
	float acc[4][4]; // [rank j][column i]
#pragma unroll
	for (int j = 0; j < 4; j++)
#pragma unroll
		for (int i = 0; i < 4; i++)
			acc[j][i] = 0.0f;

	dA_fetch(xr, ur, in, ldx, du, tid, tbeg, tend, k0, r0, K, R, vec_x, vec_u, p, keep_scale, seed);
	for (int ts = tbeg; ts < tend; ts += DA_T) {
#pragma unroll
		for (int i = 0; i < DA_XG; i++) {
			int e = tid + i * DA_THREADS;
			*(float4 *)&xs[e / (DA_K / 4)][(e % (DA_K / 4)) * 4] = xr[i];
		}
#pragma unroll
		for (int i = 0; i < DA_UG; i++) {
			int e = tid + i * DA_THREADS;
			*(float4 *)&us[e / (DA_R / 4)][(e % (DA_R / 4)) * 4] = ur[i];
		}
		__syncthreads();
		if (ts + DA_T < tend)
			dA_fetch(xr, ur, in, ldx, du, tid, ts + DA_T, tend, k0, r0, K, R, vec_x, vec_u, p, keep_scale, seed);
#pragma unroll 4
		for (int tt = g * (DA_T / DA_G); tt < (g + 1) * (DA_T / DA_G); tt++) {
			float4 x = *(const float4 *)&xs[tt][kq * 4];
			float4 d = *(const float4 *)&us[tt][rq * 4];
			float dj[4] = { d.x, d.y, d.z, d.w };
#pragma unroll
			for (int j = 0; j < 4; j++) {
				acc[j][0] = __fmaf_rn(dj[j], x.x, acc[j][0]);
				acc[j][1] = __fmaf_rn(dj[j], x.y, acc[j][1]);
				acc[j][2] = __fmaf_rn(dj[j], x.z, acc[j][2]);
				acc[j][3] = __fmaf_rn(dj[j], x.w, acc[j][3]);
			}
		}
		__syncthreads();
	}
	// the groups' sums, added in group order: red[g][output o][thread]
	float *red = &xs[0][0];
#pragma unroll
	for (int j = 0; j < 4; j++)
#pragma unroll
		for (int i = 0; i < 4; i++)
			red[(g * 16 + j * 4 + i) * 64 + tid % 64] = acc[j][i];
	__syncthreads();
	if (g != 0)
		return;
	bool final = gridDim.z == 1;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		int r = r0 + rq * 4 + j;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int k = k0 + kq * 4 + i, o = j * 4 + i;
			float sum = red[o * 64 + tid];
#pragma unroll
			for (int h = 1; h < DA_G; h++)
				sum += red[(h * 16 + o) * 64 + tid];
			if (r >= R || k >= K)
				continue;
			size_t idx = transposed ? (size_t)k * R + r : (size_t)r * K + k;
			if (final)
				dA[idx] += scale * sum;
			else
				part[(size_t)s * R * K + idx] = sum;
		}
	}
}

// dst[i] (+)= scale * (part[i] + part[n + i] + ... ), slices in order.
// The loads of eight slices are issued together (the adds stay in slice
// order): one thread per output and up to ~100 slices, so load latency,
// not bandwidth, is what this kernel has to hide.
__global__ void lora_slice_sum_kernel(float *dst, const float *part, float scale, int nslice, long n, bool add)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float sum = part[i];
		int s = 1;
		for (; s + 8 <= nslice; s += 8) {
			float v[8];
#pragma unroll
			for (int j = 0; j < 8; j++)
				v[j] = part[(size_t)(s + j) * n + i];
#pragma unroll
			for (int j = 0; j < 8; j++)
				sum += v[j];
		}
		for (; s < nslice; s++)
			sum += part[(size_t)s * n + i];
		dst[i] = add ? dst[i] + scale * sum : scale * sum;
	}
}

// din (T,K) (+)= mask(t,k) * keep_scale * (du (T,R) @ A (R,K))[t,k]: the
// gradient flows back through the dropout the forward applied, r ascending
// as on the CPU; without accumulate the old din is not read (a dropped
// element gets 0).  Grid (ceil(K/DIN_K), ceil(T/DIN_T)), DIN_K threads;
// each A element is read once per block and used for DIN_T tokens.
__global__ void __launch_bounds__(DIN_K, 4)
	lora_din_kernel(float *din, const float *du, const float *A, float p, float keep_scale, uint64_t seed, int T,
	                int K, int R, bool accumulate)
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
// The tensor-core path for u and dA.  The bf16 input x is exact in bf16,
// and an fp32 operand w splits exactly into three bf16 parts: hi =
// bf16(w), mid = bf16(w - hi), lo = bf16(w - hi - mid) (each difference is
// exact in fp32, and 3 x 8 significant bits cover fp32's 24).  A bf16 x
// bf16 product is exact in fp32, so x @ [hi; mid; lo]^T on tensor cores
// with fp32 accumulation, the three parts then added (hi + mid) + lo, is
// the fp32 product up to the order of the sums: the LoRA contract (fp32,
// as PEFT computes it) holds and one bf16 GEMM replaces the CUDA-core sums.
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
// written along k, or 0).  A block per row was latency-bound: 160 threads
// and 320 bytes a block, 27648 blocks for a 32B gate.
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
__global__ void lora_join3_kernel(float *dst, const float *P, float scale, int rows, int cols, bool parts_in_rows,
                                  bool add, bf16 *ext, int ld_ext, int E, bool one)
{
	long n = (long)rows * cols;
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

#define SUM_THREADS 64 // T*R outputs: small blocks spread them over more SMs

// Slices of a sum of length len, for `tiles` output tiles: about
// SPLIT_BLOCKS blocks in all, slices a multiple of `step` and at least
// SPLIT_MIN long, and at most max_slices of them (what the scratch holds).
// A function of the shape alone.
static int slice_len(long len, long tiles, int step, long max_slices)
{
	long want = (SPLIT_BLOCKS + tiles - 1) / tiles;
	long slice = (len + want - 1) / want;
	if (slice < SPLIT_MIN)
		slice = SPLIT_MIN;
	slice = (slice + step - 1) / step * step;
	if (max_slices < 1)
		max_slices = 1;
	if ((len + slice - 1) / slice > max_slices) { // fewer, longer slices
		slice = (len + max_slices - 1) / max_slices;
		slice = (slice + step - 1) / step * step;
	}
	if (slice >= len)
		slice = (int)((len + step - 1) / step * step); // one slice
	return (int)slice;
}

static void slice_sum(float *dst, const float *part, float scale, int nslice, long n, bool add)
{
	lora_slice_sum_kernel<<<grid_for(n, SUM_THREADS), SUM_THREADS, 0, poros_cuda_compute_stream()>>>(
		dst, part, scale, nslice, n, add);
	launchCheck();
}

#define ELEM_THREADS 256

// Floats of scratch a part of `bytes` takes, kept 16-byte aligned.
static long floats_of(long bytes)
{
	return (bytes + 15) / 16 * 4;
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

// The extension parts of V (T,R) into ext (rows ld apart), for the paths
// whose join does not write them.
static void ext_rows(bf16 *ext, int ld, const float *V, int T, int R, bool one)
{
	lora_ext_rows_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, poros_cuda_compute_stream()>>>(
		ext, ld, V, T, R, lora_ext_cols(R), one);
	launchCheck();
}

// u (T,R) = xd @ A^T on tensor cores, when the scratch (T*K floats) holds
// A's three parts (unless given: A3_given, rows ld_a3 apart), the masked
// input (dropout only) and the (T,3R) sums; the join writes u's extension
// parts to ext (rows ld_in apart) too.
static bool lora_u_tc(float *u, bf16 *ext, float *scratch, const bf16 *in, int ld_in, const float *A,
                      const bf16 *A3_given, int ld_a3, float p, uint64_t seed, int T, int K, int R)
{
	long a3 = A3_given ? 0 : floats_of((long)3 * R * K * 2), xm = p > 0.0f ? floats_of((long)T * K * 2) : 0;
	long u3 = floats_of((long)T * 3 * R * 4);
	if (!scratch || a3 + xm + u3 > (long)T * K)
		return false;
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
	gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, 3 * R, T, K, 1.0f, A3, lda, x, ldx, 0.0f, U3, 3 * R);
	lora_join3_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(
		u, U3, poros_dropout_keep_scale(p), T, R, false, false, ext, ld_in, lora_ext_cols(R), true);
	launchCheck();
	return true;
}

// dA (R,K) += du^T @ xd on tensor cores, when the scratch holds du's three
// parts (T,3R), the masked input (dropout only) and the (3R,K) sums.
static bool lora_dA_tc(float *dA, float *scratch, const float *du, const bf16 *in, int ld_in, float p, uint64_t seed,
                       int T, int K, int R)
{
	long d3 = floats_of((long)T * 3 * R * 2), xm = p > 0.0f ? floats_of((long)T * K * 2) : 0;
	long a3 = floats_of((long)3 * R * K * 4);
	if (!scratch || d3 + xm + a3 > (long)T * K)
		return false;
	cudaStream_t stream = poros_cuda_compute_stream();
	bf16 *D3 = (bf16 *)scratch, *X = (bf16 *)(scratch + d3);
	float *P3 = scratch + d3 + xm;
	int ldx = ld_in;
	lora_split3_kernel<<<grid_for((long)T * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(D3, du, T, R, false);
	launchCheck();
	const bf16 *x = masked_input(X, in, &ldx, p, seed, T, K);
	// P3 (3R,K) row-major = column-major (K,3R) = x_cm (K,T) @ D3_cm^T, D3
	// (T,3R) row-major read as (3R,T) ld 3R.
	gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, K, 3 * R, T, 1.0f, x, ldx, D3, 3 * R, 0.0f, P3, K);
	lora_join3_kernel<<<grid_for((long)R * K, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(
		dA, P3, poros_dropout_keep_scale(p), R, K, true, true, NULL, 0, 0, false);
	launchCheck();
	return true;
}

// The two backward products of the bf16 upstream gradient dout (T,N), rows
// ld_dout apart, with an fp32 rank-sized factor W (rows, R), on tensor
// cores through W's exact three-way split (its parts side by side,
// (rows,3R) bf16):
//   du (T,R)  = scale * dout @ B        W = B, rows = N  (written; its
//                                       extension parts to ext when given)
//   dB (N,R) += scale * dout^T @ u      W = u, rows = T  (added; for_dB)
// when the scratch (scratch_floats) holds the parts and the (out,3R) sums.
// W3_given (du only): scale*B's parts, rows ld_w3 apart; scale then
// applies no more.
static bool dout_product_tc(float *dst, bf16 *ext, float *scratch, long scratch_floats, const bf16 *dout,
                            int ld_dout, const float *W, const bf16 *W3_given, int ld_w3, float scale, int T, int N,
                            int R, bool for_dB)
{
	int rows = for_dB ? T : N, out = for_dB ? N : T;
	long w3 = W3_given ? 0 : floats_of((long)rows * 3 * R * 2), p3 = floats_of((long)out * 3 * R * 4);
	if (!scratch || w3 + p3 > scratch_floats)
		return false;
	cudaStream_t stream = poros_cuda_compute_stream();
	bf16 *W3 = (bf16 *)scratch;
	float *P3 = scratch + w3;
	int ldw = 3 * R;
	if (W3_given) {
		W3 = (bf16 *)W3_given;
		ldw = ld_w3;
		scale = 1.0f;
	} else {
		lora_split3_kernel<<<grid_for((long)rows * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(W3, W, rows, R,
		                                                                                       false);
		launchCheck();
	}
	// P3 (out,3R) row-major = column-major (3R,out) = W3_cm (3R,rows) @ D,
	// W3 (rows,3R) read as (3R,rows) ld ldw and dout (T,N) as (N,T) ld
	// ld_dout: D is dout_cm for du (rows = N, out = T), its transpose for dB
	// (rows = T, out = N).
	gemm_bf16(CUBLAS_OP_N, for_dB ? CUBLAS_OP_T : CUBLAS_OP_N, 3 * R, out, rows, 1.0f, W3, ldw, dout, ld_dout, 0.0f,
	          P3, 3 * R);
	lora_join3_kernel<<<grid_for((long)out * R, ELEM_THREADS), ELEM_THREADS, 0, stream>>>(
		dst, P3, scale, out, R, false, for_dB, for_dB ? NULL : ext, ld_dout, lora_ext_cols(R), false);
	launchCheck();
	return true;
}

// dst (R,L) += scale * G^T (R,T) @ Xd (T,L) on CUDA cores, G (T,R) fp32, X
// (T,L) bf16 (rows ldx apart) with the dropout; transposed: dst is (L,R).
// dA = du^T xd, and dB = dout^T u (transposed, p = 0).  scratch: NULL or
// scratch_floats.
static void rank_outer(float *dst, float *scratch, long scratch_floats, const float *G, const bf16 *X, int ldx,
                       float scale, float p, uint64_t seed, int T, int L, int R, bool transposed)
{
	long tiles = (long)ceil_div_u(L, DA_K) * ceil_div_u(R, DA_R);
	// nslice slices' partial sums take nslice*R*L of the scratch floats
	long max_slices = scratch ? scratch_floats / ((long)R * L) : 1;
	int slice = slice_len(T, tiles, DA_T, max_slices);
	int nslice = (int)ceil_div_u(T, slice);
	bool vec_x = L % 4 == 0 && ldx % 4 == 0 && ((uintptr_t)X & 7u) == 0;
	bool vec_g = R % 4 == 0 && aligned16(G);
	dim3 grid(ceil_div_u(L, DA_K), ceil_div_u(R, DA_R), nslice);
	lora_dA_kernel<<<grid, DA_THREADS, 0, poros_cuda_compute_stream()>>>(
		dst, scratch, G, X, ldx, scale, p, poros_dropout_keep_scale(p), seed, T, L, R, slice, vec_x, vec_g,
		transposed);
	launchCheck();
	if (nslice > 1)
		slice_sum(dst, scratch, scale, nslice, (long)R * L, true);
}

// dst (T,R) = scale * X (T,L) @ W^T summed over L, X's rows ldx apart, W
// given as A (R,L) or, W_IS_B, as B (L,R).  scratch: NULL or
// T*scratch_cols floats.
template <typename TX, bool W_IS_B>
static void row_products(float *dst, float *scratch, long scratch_cols, const TX *X, int ldx, const float *W,
                         float scale, float p, uint64_t seed, int T, int L, int R)
{
	long tiles = (long)ceil_div_u(T, RP_T) * ceil_div_u(R, RP_R);
	// the partial sums of nslice slices take nslice*T*R of T*scratch_cols floats
	long max_slices = scratch ? scratch_cols / R : 1;
	int slice = slice_len(L, tiles, RP_K, max_slices);
	int nslice = (int)ceil_div_u(L, slice);
	bool vec_x = L % 4 == 0 && ldx % 4 == 0 && (sizeof(TX) == 4 ? aligned16(X) : ((uintptr_t)X & 7u) == 0);
	bool vec_w = (W_IS_B ? R % 4 == 0 : L % 4 == 0) && aligned16(W);
	dim3 grid(ceil_div_u(T, RP_T), ceil_div_u(R, RP_R), nslice);
	lora_rowprod_kernel<TX, W_IS_B><<<grid, RP_THREADS, 0, poros_cuda_compute_stream()>>>(
		nslice > 1 ? scratch : dst, X, ldx, W, scale, p, poros_dropout_keep_scale(p), seed, T, L, R, slice, vec_x,
		vec_w);
	launchCheck();
	if (nslice > 1)
		slice_sum(dst, scratch, scale, nslice, (long)T * R, false);
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
	bool joined = false;
	if (K > 0) {
		joined = lora_u_tc(u, ext, scratch, in, ld_in, A, A3, ld_a3, dropout_p, dropout_seed, T, K, R);
		if (!joined)
			row_products<bf16, false>(u, scratch, K, in, ld_in, A, 1.0f, dropout_p, dropout_seed, T, K, R);
	} else
		cudaCheck(cudaMemsetAsync(u, 0, (size_t)T * R * sizeof(float), poros_cuda_compute_stream()));
	if (ext) {
		if (!joined)
			ext_rows(ext, ld_in, u, T, R, true);
		return;
	}
	if (N <= 0 || !out)
		return;
	// Column-major: out^T (N,T) = scale * B_cm^T (N,R) @ u_cm (R,T), with
	// B read as (R,N) ld R and u as (R,T) ld R.
	gemm_f32(CUBLAS_OP_T, CUBLAS_OP_N, N, T, R, scale, B, R, u, R, 0.0f, out, N);
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
	if (T <= 0 || R <= 0)
		return;
	cudaStream_t stream = poros_cuda_compute_stream();
	long scratch_floats = scratch ? (long)T * K : 0;
	bool joined = false;
	if (ext && dropout_p != 0.0f) {
		fprintf(stderr, "%s: lora_backward_cuda: the extension path takes no dropout (p = %g)\n",
		        poros_cuda_progname(), dropout_p);
		exit(1);
	}
	if (N > 0) {
		joined = dout_product_tc(du, ext, scratch, scratch_floats, dout, ld_dout, B, B3, ld_b3, scale, T, N, R,
		                         false);
		if (!joined)
			row_products<bf16, true>(du, scratch, K, dout, ld_dout, B, scale, 0.0f, 0, T, N, R);
		if (!dout_product_tc(dB, NULL, scratch, scratch_floats, dout, ld_dout, u, NULL, 0, scale, T, N, R, true))
			rank_outer(dB, scratch, scratch_floats, u, dout, ld_dout, scale, 0.0f, 0, T, N, R, true);
	} else {
		cudaCheck(cudaMemsetAsync(du, 0, (size_t)T * R * sizeof(float), stream));
	}
	if (ext && !joined)
		ext_rows(ext, ld_dout, du, T, R, false);
	if (K <= 0)
		return;
	if (!lora_dA_tc(dA, scratch, du, in, ld_in, dropout_p, dropout_seed, T, K, R))
		rank_outer(dA, scratch, scratch_floats, du, in, ld_in, 1.0f, dropout_p, dropout_seed, T, K, R, false);
	if (!din || ext)
		return;
	dim3 grid_d(ceil_div_u(K, DIN_K), ceil_div_u(T, DIN_T));
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
