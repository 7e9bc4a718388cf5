// defines: nf4_dequantize_cuda, nf4_dequantize_kernel, nf4_dequantize_bytes_kernel
//
// QLoRA NF4 -> bf16 into rows ld_out apart (a base weight's buffer, with
// room for its LoRA extension), one pass, memory-bound: each thread loads
// 4 bytes of packed codes (8 elements) and stores 16 bytes of bf16,
// neighbouring threads neighbouring bytes, so a warp's load is 128
// contiguous bytes and its store 512 (32 elements a thread would scatter
// each store instruction over 32 lines); with a pitch too, as long as a row
// is a multiple of 256 elements
// (32 chunks: a warp's chunks share a row), which every weight of the
// models we train is.  The code book
// sits in shared memory (a warp's 32 lanes look up different codes;
// constant memory would serialize them).  value =
// code[nibble] * absmax[i/64] as one fp32 multiply, rounded to bf16 as on
// the CPU: the bits are identical.
#include "common.cuh"

#define NF4_THREADS 256

// bitsandbytes' NF4 table, numerics.h's (the CPU's poros_nf4_code is
// defined from the same initializer; this library does not reach into the
// CPU one at link time); test_ops_cuda requires the dequantized outputs of
// the two to be identical bit for bit.
__constant__ float nf4_code_dev[16] = POROS_NF4_CODE_INIT;

// The block's copy of the code book; every thread waits for it.
__device__ __forceinline__ void code_to_shared(float *code)
{
	if (threadIdx.x < 16)
		code[threadIdx.x] = nf4_code_dev[threadIdx.x];
	__syncthreads();
}

// One packed byte: element 2i in the high nibble, 2i+1 in the low one,
// returned as two bf16 in a word (first element low, as in memory).
__device__ __forceinline__ uint32_t nf4_pair(const float *code, uint32_t byte, float scale)
{
	return pack_bf16x2(code[byte >> 4] * scale, code[byte & 15u] * scale);
}

// out (rows,cols) bf16, rows ld_out apart; packed (rows*cols/2) and absmax
// (rows*cols/64) in flat element order; cols % 64 == 0, so a chunk of 8
// elements never straddles a row.  out 16-byte aligned, packed 4, and when
// pitched ld_out % 8 == 0, so every chunk's store is one aligned uint4.
// Thread i covers packed bytes [4i, 4i+4) = elements [8i, 8i+8): loads stay
// coalesced whatever the pitch; a pitch only moves where a row's run of
// stores starts.  Not pitched (ld_out == cols), chunk i lands at element 8i
// with no division at all.
//
// A warp takes NF4_UNROLL of those 32-chunk runs at once (lane l: chunks
// l, l + 32, ...), all its loads issued before its stores, so each thread
// has that many loads in flight and the grid a quarter the blocks: one
// chunk a thread left the copy bound by block turnover and load latency
// (~1.6 TB/s at 32B in a step, 2026-12-04).  Alone, on 32B's projections
// on the H200 (2026-12-05): 3.3-3.85 TB/s against 2.97-3.53, the same
// bits; 8 a thread and a grid sized to the SMs were no faster
// (docs/bench/runs/2026-12-05-0c66844/dequant_probe.txt).
#define NF4_UNROLL 4

template <bool pitched>
__device__ __forceinline__ void nf4_store_chunk(bf16 *out, long ld_out, long i, long row_chunks, long chunks,
                                                uint4 o)
{
	if (pitched) {
		long r = item_row(i, row_chunks, chunks);
		*(uint4 *)(out + r * ld_out + (i - r * row_chunks) * 8) = o;
	} else {
		((uint4 *)out)[i] = o;
	}
}

template <bool pitched>
__global__ void nf4_dequantize_kernel(bf16 *out, long ld_out, const uint8_t *packed, const float *absmax,
                                      long chunks, long row_chunks)
{
	__shared__ float code[16];
	code_to_shared(code);
	long warp = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32, warps = (long)gridDim.x * blockDim.x / 32;
	int lane = (int)(threadIdx.x & 31u);
	for (long base = warp * 32 * NF4_UNROLL; base < chunks; base += warps * 32 * NF4_UNROLL) {
		uint32_t b[NF4_UNROLL];
		float scale[NF4_UNROLL];
#pragma unroll
		for (int u = 0; u < NF4_UNROLL; u++) {
			long i = base + lane + 32 * u;
			b[u] = i < chunks ? ((const uint32_t *)packed)[i] : 0u; // bytes in memory order, low byte first
			scale[u] = i < chunks ? absmax[i / 8] : 0.0f;           // 8 elements per chunk, 64 per block
		}
#pragma unroll
		for (int u = 0; u < NF4_UNROLL; u++) {
			long i = base + lane + 32 * u;
			if (i >= chunks)
				break;
			uint4 o;
			o.x = nf4_pair(code, b[u] & 0xffu, scale[u]);
			o.y = nf4_pair(code, (b[u] >> 8) & 0xffu, scale[u]);
			o.z = nf4_pair(code, (b[u] >> 16) & 0xffu, scale[u]);
			o.w = nf4_pair(code, b[u] >> 24, scale[u]);
			nf4_store_chunk<pitched>(out, ld_out, i, row_chunks, chunks, o);
		}
	}
}

// The same one byte per thread (two elements, never straddling a row as
// cols is even), for pointers or pitches that are not aligned.
__global__ void nf4_dequantize_bytes_kernel(bf16 *out, long ld_out, const uint8_t *packed, const float *absmax,
                                            long bytes, long row_bytes)
{
	__shared__ float code[16];
	code_to_shared(code);
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += (long)gridDim.x * blockDim.x) {
		float scale = absmax[2 * i / POROS_NF4_BLOCK];
		uint32_t b = packed[i];
		long r = item_row(i, row_bytes, bytes);
		bf16 *y = out + r * ld_out + (i - r * row_bytes) * 2;
		y[0] = f32_to_bf16(code[b >> 4] * scale);
		y[1] = f32_to_bf16(code[b & 15u] * scale);
	}
}

extern "C" void nf4_dequantize_cuda(bf16 *out, int ld_out, const uint8_t *packed, const float *absmax, long rows,
                                    int cols)
{
	if (rows <= 0 || cols <= 0)
		return;
	long n = rows * cols;
	bool pitched = ld_out != cols;
	// unpitched, the rows are one flat run and only the total need be
	// whole blocks (ops.h)
	if (pitched ? cols % POROS_NF4_BLOCK != 0 : n % POROS_NF4_BLOCK != 0) {
		fprintf(stderr, "%s: nf4_dequantize_cuda: %s = %ld is not a multiple of %d\n", poros_cuda_progname(),
		        pitched ? "cols" : "rows*cols", pitched ? (long)cols : n, POROS_NF4_BLOCK);
		exit(1);
	}
	check_pitch("nf4_dequantize_cuda", "ld_out", ld_out, cols);
	cudaStream_t stream = poros_cuda_compute_stream();
	if (aligned16(out) && ((uintptr_t)packed & 3u) == 0 && ld_out % 8 == 0) {
		long chunks = n / 8, row_chunks = pitched ? cols / 8 : chunks; // whole blocks: no tail
		unsigned grid = grid_for((chunks + NF4_UNROLL - 1) / NF4_UNROLL, NF4_THREADS);
		if (pitched)
			nf4_dequantize_kernel<true><<<grid, NF4_THREADS, 0, stream>>>(out, ld_out, packed, absmax, chunks,
			                                                              row_chunks);
		else
			nf4_dequantize_kernel<false><<<grid, NF4_THREADS, 0, stream>>>(out, ld_out, packed, absmax, chunks,
			                                                               row_chunks);
	} else {
		long bytes = n / 2;
		nf4_dequantize_bytes_kernel<<<grid_for(bytes, NF4_THREADS), NF4_THREADS, 0, stream>>>(
			out, ld_out, packed, absmax, bytes, pitched ? cols / 2 : bytes);
	}
	launchCheck();
}
