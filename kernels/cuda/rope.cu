// defines: rope_forward_cuda, rope_backward_cuda, rope_kernel
//
// Rotary position embedding in HF's rotate_half layout, in place: the pair
// (x1[i], x2[i]) = (x[i], x[i + D/2]) of each head rotates by the angle of
// (position, i); cos, sin (S, D/2) hold HF's table's first half (its rows
// are cat(freqs, freqs)).  One thread per pair; the backward is the same
// kernel with the angle negated (the transposed rotation).  The pair's
// arithmetic is numerics.h's, without fused multiply-adds: the CPU's bits.
#include "common.cuh"

#define ROPE_THREADS 256

// x (B*S, nh, D) in place; cos, sin (S, D/2); token t at position pos[t]
// clamped into [0, t % S] (pos NULL: t % S), as ops.h says.
//   forward:  x1' = x1 cos - x2 sin,  x2' = x2 cos + x1 sin
//   backward: x1' = x1 cos + x2 sin,  x2' = x2 cos - x1 sin   (inverse)
__global__ void rope_kernel(float *x, const float *cos, const float *sin, const int32_t *pos, long pairs, int S,
                            int nh, int D, bool inverse)
{
	int half = D / 2;
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += (long)gridDim.x * blockDim.x) {
		int d = (int)(i % half);
		long head = i / half; // t * nh + h
		int at = poros_rope_position(pos, S, head / nh);
		float c = cos[(size_t)at * half + d];
		float s = sin[(size_t)at * half + d];
		float *x1 = x + head * D + d, *x2 = x1 + half;
		float a = *x1, b = *x2;
		if (inverse)
			s = -s;
		*x1 = poros_rope_first(a, b, c, s);
		*x2 = poros_rope_second(a, b, c, s);
	}
}

static void rope_launch(float *x, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D,
                        bool inverse)
{
	long pairs = (long)B * S * nh * (D / 2);
	if (pairs <= 0)
		return;
	rope_kernel<<<grid_for(pairs, ROPE_THREADS), ROPE_THREADS, 0, poros_cuda_compute_stream()>>>(
		x, cos, sin, pos, pairs, S, nh, D, inverse);
	launchCheck();
}

extern "C" void rope_forward_cuda(float *x, const float *cos, const float *sin, const int32_t *pos, int B, int S,
                                  int nh, int D)
{
	rope_launch(x, cos, sin, pos, B, S, nh, D, false);
}

extern "C" void rope_backward_cuda(float *dx, const float *cos, const float *sin, const int32_t *pos, int B, int S,
                                   int nh, int D)
{
	rope_launch(dx, cos, sin, pos, B, S, nh, D, true);
}
