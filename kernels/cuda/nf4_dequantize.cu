// defines: nf4_dequantize_cuda, nf4_dequantize_kernel, nf4_dequantize_bytes_kernel
//
// QLoRA NF4 -> bf16, one pass, memory-bound: each thread loads 4 bytes of
// packed codes (8 elements) and stores 16 bytes of bf16, neighbouring
// threads neighbouring bytes, so a warp's load is 128 contiguous bytes and
// its store 512 (an earlier layout of 32 elements per thread scattered each
// store instruction over 32 lines and reached ~1.9 TB/s).  The code book
// sits in shared memory (a warp's 32 lanes look up different codes;
// constant memory would serialize them).  value =
// code[nibble] * absmax[i/64] as one fp32 multiply, rounded to bf16 as on
// the CPU: the bits are identical.
#include "common.cuh"

#define NF4_THREADS 256

// bitsandbytes' NF4 table, the values of poros_nf4_code (kernels/cpu):
// repeated here so this library does not reach into the CPU one at link
// time; test_ops_cuda requires the dequantized outputs of the two to be
// identical bit for bit.
__constant__ float nf4_code_dev[16] = {
	-1.0f,
	-0.6961928009986877f,
	-0.5250730514526367f,
	-0.39491748809814453f,
	-0.28444138169288635f,
	-0.18477343022823334f,
	-0.09105003625154495f,
	0.0f,
	0.07958029955625534f,
	0.16093020141124725f,
	0.24611230194568634f,
	0.33791524171829224f,
	0.44070982933044434f,
	0.5626170039176941f,
	0.7229568362236023f,
	1.0f,
};

// One packed byte: element 2i in the high nibble, 2i+1 in the low one,
// returned as two bf16 in a word (first element low, as in memory).
__device__ __forceinline__ uint32_t nf4_pair(const float *code, uint32_t byte, float scale)
{
	return pack_bf16x2(code[byte >> 4] * scale, code[byte & 15u] * scale);
}

// out (n) bf16, packed (n/2), absmax (n/64); out 16-byte aligned, packed 4.
// Thread i covers packed bytes [4i, 4i+4) = elements [8i, 8i+8).
__global__ void nf4_dequantize_kernel(bf16 *out, const uint8_t *packed, const float *absmax, long chunks)
{
	__shared__ float code[16];
	if (threadIdx.x < 16)
		code[threadIdx.x] = nf4_code_dev[threadIdx.x];
	__syncthreads();
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += (long)gridDim.x * blockDim.x) {
		uint32_t b = ((const uint32_t *)packed)[i]; // bytes in memory order, low byte first
		float scale = absmax[i / 8];                 // 8 elements per chunk, 64 per block
		uint4 o;
		o.x = nf4_pair(code, b & 0xffu, scale);
		o.y = nf4_pair(code, (b >> 8) & 0xffu, scale);
		o.z = nf4_pair(code, (b >> 16) & 0xffu, scale);
		o.w = nf4_pair(code, b >> 24, scale);
		((uint4 *)out)[i] = o;
	}
}

// The same one byte per thread, for pointers that are not aligned.
__global__ void nf4_dequantize_bytes_kernel(bf16 *out, const uint8_t *packed, const float *absmax, long bytes)
{
	__shared__ float code[16];
	if (threadIdx.x < 16)
		code[threadIdx.x] = nf4_code_dev[threadIdx.x];
	__syncthreads();
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += (long)gridDim.x * blockDim.x) {
		float scale = absmax[2 * i / POROS_NF4_BLOCK];
		uint32_t b = packed[i];
		out[2 * i] = f32_to_bf16(code[b >> 4] * scale);
		out[2 * i + 1] = f32_to_bf16(code[b & 15u] * scale);
	}
}

extern "C" void nf4_dequantize_cuda(bf16 *out, const uint8_t *packed, const float *absmax, long n)
{
	if (n <= 0)
		return;
	if (n % POROS_NF4_BLOCK != 0) {
		fprintf(stderr, "%s: nf4_dequantize_cuda: n = %ld is not a multiple of %d\n", poros_cuda_progname(), n,
		        POROS_NF4_BLOCK);
		exit(1);
	}
	cudaStream_t stream = poros_cuda_compute_stream();
	if (aligned16(out) && ((uintptr_t)packed & 3u) == 0) {
		long chunks = n / 8; // n % 64 == 0, so no tail
		nf4_dequantize_kernel<<<grid_for(chunks, NF4_THREADS), NF4_THREADS, 0, stream>>>(out, packed, absmax,
		                                                                                 chunks);
	} else {
		long bytes = n / 2;
		nf4_dequantize_bytes_kernel<<<grid_for(bytes, NF4_THREADS), NF4_THREADS, 0, stream>>>(out, packed, absmax,
		                                                                                      bytes);
	}
	launchCheck();
}
