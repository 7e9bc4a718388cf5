// defines: cudaCheck, cublasCheck, launchCheck, the device state accessors
// (poros_cuda_compute_stream, poros_cuda_copy_stream, poros_cuda_cublas,
// poros_cuda_cublaslt), bf16 helpers, deterministic warp/block reductions,
// and thin cuBLAS GEMM wrappers (column-major, as cuBLAS sees the world).
//
// Shared by every kernels/cuda/*.cu.  ops.h and backend.h are C headers, so
// they are included inside extern "C" and every launcher is extern "C".
#ifndef POROS_CUDA_COMMON_CUH
#define POROS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "numerics.h" // host+device: bf16 rounding, dropout hash, split, NF4, AdamW

extern "C" {
#include "ops.h"
#include "backend.h"
}

// ---------------------------------------------------------------------------
// Errors: a failed CUDA or cuBLAS call is a runtime failure of the tool (the
// ops return nothing, so there is no caller to hand the error to): one line
// on stderr naming the tool, the source position and the error, then exit 1.

// Weak, so the CUDA library does not force tools/lib/util.o into programs
// that never set a program name (the GPU tests); NULL there.
extern "C" const char *progname __attribute__((weak));

static inline const char *poros_cuda_progname(void)
{
	return (&progname != NULL && progname != NULL) ? progname : "poros";
}

static inline void poros_cuda_check(cudaError_t e, const char *what, const char *file, int line)
{
	if (e == cudaSuccess)
		return;
	fprintf(stderr, "%s: %s:%d: CUDA error: %s (%s) in %s\n", poros_cuda_progname(), file, line,
	        cudaGetErrorString(e), cudaGetErrorName(e), what);
	exit(1);
}

static inline void poros_cublas_check(cublasStatus_t s, const char *what, const char *file, int line)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return;
	fprintf(stderr, "%s: %s:%d: cuBLAS error: %s (%d) in %s\n", poros_cuda_progname(), file, line,
	        cublasGetStatusString(s), (int)s, what);
	exit(1);
}

#define cudaCheck(call) poros_cuda_check((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) poros_cublas_check((call), #call, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at once
// instead of at the next synchronizing call, far from the cause.
#define launchCheck() poros_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// ---------------------------------------------------------------------------
// Device state, owned by backend_cuda.cu and created on first use: every op
// runs on the compute stream; the copy stream carries the next block's
// weights.  One cuBLAS handle bound to the compute stream with a fixed
// workspace, so each GEMM shape always takes the same algorithm and bits.
extern "C" {
cudaStream_t poros_cuda_compute_stream(void);
cudaStream_t poros_cuda_copy_stream(void);
cublasHandle_t poros_cuda_cublas(void);
cublasLtHandle_t poros_cuda_cublaslt(void);
// gemm.cu: every GEMM of the ops, its algorithm chosen once per shape (a
// product over rows, by the row unit's shape: see there).
void poros_cuda_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
                     cudaDataType_t ab, int lda, const void *B, int ldb, float beta, void *C, cudaDataType_t c_type,
                     int ldc);
void poros_cuda_set_row_unit(int rows, int choose_rows);
void poros_cuda_gemm_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                             const void *A, cudaDataType_t ab, int lda, long long stride_a, const void *B, int ldb,
                             long long stride_b, float beta, void *C, cudaDataType_t c_type, int ldc,
                             long long stride_c, int batch);
}

// ---------------------------------------------------------------------------
// bf16: the ops traffic in uint16_t bit patterns (numerics.h's bf16);
// these are the CUDA kernels' spellings of numerics.h's conversions (round
// to nearest even, NaN kept quiet with its sign), so CPU and CUDA produce
// the same bits from the same fp32 value.

__device__ __forceinline__ float bf16_to_f32(bf16 h)
{
	return f32_from_bf16(h);
}

__device__ __forceinline__ bf16 f32_to_bf16(float f)
{
	return bf16_from_f32(f);
}

// Bit casts between our bf16 and CUDA's type, for code that wants the
// __nv_bfloat16 intrinsics.
__host__ __device__ __forceinline__ __nv_bfloat16 bf16_as_nv(bf16 h)
{
	__nv_bfloat16_raw r;
	r.x = h;
	return __nv_bfloat16(r);
}

__host__ __device__ __forceinline__ bf16 bf16_from_nv(__nv_bfloat16 h)
{
	__nv_bfloat16_raw r = h;
	return r.x;
}

// Two bf16 packed in a 32-bit word (first element in the low half, as in
// memory on a little-endian device).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi)
{
	return (uint32_t)f32_to_bf16(lo) | ((uint32_t)f32_to_bf16(hi) << 16);
}

// ---------------------------------------------------------------------------
// Deterministic reductions.  The xor butterfly leaves every lane with the
// same bits (each step adds two values that both partners hold, and fp add
// commutes), and the cross-warp step adds the warp totals in warp order, so
// the result depends only on the block size, which each kernel fixes.

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// blockDim.x must be a multiple of 32.  Every thread gets the total (the
// maximum when max, else the sum); a lane past the warps holds the
// identity.  Safe to call repeatedly in one kernel: the first barrier keeps
// a new call's writes away from a previous call's readers.  Each of
// block_sum and block_max has its own shared words.
template <bool max>
__device__ __forceinline__ float block_reduce(float v, float identity)
{
	__shared__ float warp_totals[32];
	__shared__ float total;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	v = max ? warp_max(v) : warp_sum(v);
	__syncthreads();
	if (lane == 0)
		warp_totals[warp] = v;
	__syncthreads();
	if (warp == 0) {
		float w = lane < nwarps ? warp_totals[lane] : identity;
		w = max ? warp_max(w) : warp_sum(w);
		if (lane == 0)
			total = w;
	}
	__syncthreads();
	return total;
}

__device__ __forceinline__ float block_sum(float v)
{
	return block_reduce<false>(v, 0.0f);
}

__device__ __forceinline__ float block_max(float v)
{
	return block_reduce<true>(v, -INFINITY);
}

// ---------------------------------------------------------------------------
// Launch helpers.

static inline unsigned int ceil_div_u(long a, long b)
{
	return (unsigned int)((a + b - 1) / b);
}

// Grid for a grid-stride loop over `work` items: enough blocks to fill the
// device several times over, capped so the index arithmetic stays cheap.
// The result only depends on `work` (never on the device), which keeps any
// per-thread order, and therefore the bits, the same on every GPU.
static inline unsigned int grid_for(long work, int threads)
{
	long blocks = (work + threads - 1) / threads;
	if (blocks < 1)
		blocks = 1;
	if (blocks > 65536)
		blocks = 65536;
	return (unsigned int)blocks;
}

static inline bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15u) == 0;
}


// The grid of a flat elementwise kernel over n elements: one item per
// group of four when vec4 (flat_elementwise's loops), else per element.
static inline unsigned int flat_grid(long n, bool vec4, int threads)
{
	return grid_for(vec4 ? (n + 3) / 4 : n, threads);
}

// A flat elementwise kernel's loops, grid-stride: quad(i) for each group
// i of four of the first n/4*4 elements when vec4, then one(i) for every
// element after (all n when not vec4).
template <typename Quad, typename One>
__device__ __forceinline__ void flat_elementwise(long n, bool vec4, Quad quad, One one)
{
	long stride = (long)gridDim.x * blockDim.x;
	long i0 = (long)blockIdx.x * blockDim.x + threadIdx.x;
	long done = 0;
	if (vec4) {
		long n4 = n / 4;
		for (long i = i0; i < n4; i += stride)
			quad(i);
		done = n4 * 4;
	}
	for (long i = done + i0; i < n; i += stride)
		one(i);
}

// A row pitch (ld, in elements) shorter than the row it spaces would make
// rows overlap: a caller's bug, reported like a failed launch.
static inline void check_pitch(const char *op, const char *what, long ld, long row_len)
{
	if (ld >= row_len)
		return;
	fprintf(stderr, "%s: %s: %s = %ld is less than the row length %ld\n", poros_cuda_progname(), op, what, ld,
	        row_len);
	exit(1);
}

// The row of item i of `items` laid out per_row to a row (the pitched
// elementwise kernels): a 32-bit division whenever the items fit in 32 bits
// (every tensor of the models we train), a fraction of a 64-bit one's cost.
__device__ __forceinline__ long item_row(long i, long per_row, long items)
{
	return items <= 0xffffffffL ? (long)((uint32_t)i / (uint32_t)per_row) : i / per_row;
}

// A pitched elementwise kernel's loop, grid-stride: item(r, c) for each
// group of `per` elements (rows_elementwise: four with vec4, else one) at
// row r, column c of a (rows, cols) tensor; cols is a multiple of per, so
// no group straddles a row.  The grid is grid_for(rows * (cols / per), ...).
template <typename Item>
__device__ __forceinline__ void rows_elementwise_by(long rows, long cols, int per, Item item)
{
	long groups = cols / per, items = rows * groups, stride = (long)gridDim.x * blockDim.x;
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
		long r = item_row(i, groups, items), c = (i - r * groups) * per;
		item(r, c);
	}
}

template <typename Item>
__device__ __forceinline__ void rows_elementwise(long rows, long cols, bool vec4, Item item)
{
	rows_elementwise_by(rows, cols, vec4 ? 4 : 1, item);
}

// Four consecutive elements starting at p, as one 16-byte (fp32) or 8-byte
// (bf16) load when vec, else as four scalar loads.  Kernels that reduce
// walk their data in such groups of four on both paths, so a pointer's
// alignment changes only the width of the loads, never the order of a sum:
// the same values give the same bits wherever they sit in memory.
__device__ __forceinline__ float4 load4(const float *p, bool vec)
{
	if (vec)
		return *(const float4 *)p;
	return make_float4(p[0], p[1], p[2], p[3]);
}

__device__ __forceinline__ float4 load4(const bf16 *p, bool vec)
{
	if (vec) {
		uint2 w = *(const uint2 *)p;
		return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
		                   __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u));
	}
	return make_float4(bf16_to_f32(p[0]), bf16_to_f32(p[1]), bf16_to_f32(p[2]), bf16_to_f32(p[3]));
}

// Eight consecutive bf16 at p (16-byte aligned) as fp32, one 16-byte load;
// and eight fp32 values rounded to bf16 as one 16-byte store's worth.
__device__ __forceinline__ void load8(const bf16 *p, float v[8])
{
	uint4 w = *(const uint4 *)p;
	uint32_t u[4] = { w.x, w.y, w.z, w.w };
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[2 * i] = __uint_as_float(u[i] << 16);
		v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
}

__device__ __forceinline__ uint4 pack8(const float v[8])
{
	return make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
	                  pack_bf16x2(v[6], v[7]));
}

// ---------------------------------------------------------------------------
// cuBLAS wrappers.  cuBLAS is column-major: a row-major (rows, cols) matrix
// with leading dimension ld is, to cuBLAS, a column-major (cols, rows) one.
// Each launcher states the mapping it uses.  All GEMMs accumulate in fp32
// (CUBLAS_COMPUTE_32F: bf16 inputs run on tensor cores with fp32
// accumulation; fp32 inputs run as plain fp32, never TF32, since the handle
// keeps CUBLAS_DEFAULT_MATH).

// The cuBLAS type of a GEMM operand.
template <typename T>
struct cublas_type;
template <>
struct cublas_type<bf16> {
	static constexpr cudaDataType_t value = CUDA_R_16BF;
};
template <>
struct cublas_type<float> {
	static constexpr cudaDataType_t value = CUDA_R_32F;
};

// C (m,n) = alpha * op(A) @ op(B) + beta * C; A and B both bf16 (tensor
// cores) or both fp32; C fp32, or bf16 with bf16 A and B (the fp32
// accumulator rounded to nearest even as the epilogue stores it).
template <typename T, typename TC>
static inline void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const T *A,
                        int lda, const T *B, int ldb, float beta, TC *C, int ldc)
{
	poros_cuda_gemm(ta, tb, m, n, k, alpha, A, cublas_type<T>::value, lda, B, ldb, beta, C, cublas_type<TC>::value,
	                ldc);
}

#endif
