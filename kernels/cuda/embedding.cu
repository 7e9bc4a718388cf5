// defines: embedding_forward_cuda, embedding_forward_kernel
//
// out (T,C) fp32 = wte[tokens[t]] (V,C) bf16.  One block per token row;
// memory-bound: 16-byte loads of 8 bf16 when the rows allow it.
#include "common.cuh"

#define EMBED_THREADS 256

// out (T,C), tokens (T), wte (V,C); vec8: C % 8 == 0 and both bases 16-byte
// aligned, so every row is too.
__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const bf16 *wte, int C, bool vec8)
{
	int t = blockIdx.x;
	const bf16 *row = wte + (size_t)tokens[t] * C;
	float *dst = out + (size_t)t * C;
	if (vec8) {
		for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
			uint4 packed = *(const uint4 *)(row + c);
			uint32_t w[4] = { packed.x, packed.y, packed.z, packed.w };
			float4 lo, hi;
			lo.x = __uint_as_float(w[0] << 16); lo.y = __uint_as_float(w[0] & 0xffff0000u);
			lo.z = __uint_as_float(w[1] << 16); lo.w = __uint_as_float(w[1] & 0xffff0000u);
			hi.x = __uint_as_float(w[2] << 16); hi.y = __uint_as_float(w[2] & 0xffff0000u);
			hi.z = __uint_as_float(w[3] << 16); hi.w = __uint_as_float(w[3] & 0xffff0000u);
			*(float4 *)(dst + c) = lo;
			*(float4 *)(dst + c + 4) = hi;
		}
	} else {
		for (int c = threadIdx.x; c < C; c += blockDim.x)
			dst[c] = bf16_to_f32(row[c]);
	}
}

extern "C" void embedding_forward_cuda(float *out, const int32_t *tokens, const bf16 *wte, int T, int C)
{
	if (T <= 0 || C <= 0)
		return;
	bool vec8 = C % 8 == 0 && aligned16(out) && aligned16(wte);
	embedding_forward_kernel<<<T, EMBED_THREADS, 0, poros_cuda_compute_stream()>>>(out, tokens, wte, C, vec8);
	launchCheck();
}
