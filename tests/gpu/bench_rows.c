/* tests/gpu/bench_rows.c: whether the CUDA GEMMs give a row the same bits
 * whatever the number of rows M in the call (not a test: tests/gpu/run.sh
 * skips bench_*).  One layer's k micro-batches run as one batch only keep
 * blockwise == resident if they do (docs/perf-notes.md, "Next").  For each
 * shape, matmul_forward and matmul_backward_input run once over M = 4096
 * rows and then over each block of 512 of them; the program prints how
 * many of the 8 blocks differ from the big call's rows, bit for bit.
 *
 * usage: bench_rows   (shapes of Qwen2.5-32B and 7B, E = 160 extension
 * columns as the LoRA extension at rank 16 adds) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define ROWS_BIG 4096
#define ROWS_SMALL 512

static const struct backend *gpu;

static void *dev(size_t bytes)
{
	void *p;
	if (gpu->device_alloc(&p, bytes) != 0) {
		fprintf(stderr, "bench_rows: device out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	return p;
}

/* bf16 bits of a value in [-1, 1] from a linear congruential stream. */
static uint16_t random_bf16(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	float f = (float)((int)(*s >> 40) % 2001 - 1000) / 1000.0f;
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return (uint16_t)(u >> 16);
}

/* Blocks of 512 rows whose out (rows x cols fp32) differ from big's rows. */
static int blocks_differ(const float *big, const float *small_dev, float *host, int block, int cols)
{
	gpu->copy_d2h(host, small_dev, (size_t)ROWS_SMALL * cols * sizeof(float));
	return memcmp(host, big + (size_t)block * ROWS_SMALL * cols, (size_t)ROWS_SMALL * cols * sizeof(float)) != 0;
}

static void shape(int K, int N, int E)
{
	int ld = K + E, nb = N < K ? N : K; /* the backward's dout: the first nb columns of x */
	size_t xn = (size_t)ROWS_BIG * ld, wn = (size_t)(N + E) * ld;
	uint16_t *hx = malloc(xn * 2), *hw = malloc(wn * 2);
	float *hbig = malloc((size_t)ROWS_BIG * N * 4), *hdbig = malloc((size_t)ROWS_BIG * K * 4);
	float *hsmall = malloc((size_t)ROWS_SMALL * (N > K ? N : K) * 4);
	uint64_t s = 42;
	int fwd = 0, bwd = 0;

	for (size_t i = 0; i < xn; i++)
		hx[i] = random_bf16(&s);
	for (size_t i = 0; i < wn; i++)
		hw[i] = random_bf16(&s);
	bf16 *x = dev(xn * 2), *w = dev(wn * 2);
	float *out = dev((size_t)ROWS_BIG * N * 4), *din = dev((size_t)ROWS_BIG * K * 4);
	gpu->copy_h2d(x, hx, xn * 2, STREAM_COMPUTE);
	gpu->copy_h2d(w, hw, wn * 2, STREAM_COMPUTE);
	gpu->ops->matmul_forward(out, x, ld, w, ld, NULL, ROWS_BIG, K + E, N, 0);
	gpu->ops->matmul_backward_input(din, x, ld, w, ld, ROWS_BIG, K, nb, 0);
	gpu->copy_d2h(hbig, out, (size_t)ROWS_BIG * N * 4);
	gpu->copy_d2h(hdbig, din, (size_t)ROWS_BIG * K * 4);
	for (int j = 0; j < ROWS_BIG / ROWS_SMALL; j++) {
		const bf16 *xj = x + (size_t)j * ROWS_SMALL * ld;
		gpu->ops->matmul_forward(out, xj, ld, w, ld, NULL, ROWS_SMALL, K + E, N, 0);
		fwd += blocks_differ(hbig, out, hsmall, j, N);
		gpu->ops->matmul_backward_input(din, xj, ld, w, ld, ROWS_SMALL, K, nb, 0);
		bwd += blocks_differ(hdbig, din, hsmall, j, K);
	}
	printf("K=%d N=%d: forward %d of %d blocks of %d rows differ from the same rows at M=%d; backward input %d\n",
	       K + E, N, fwd, ROWS_BIG / ROWS_SMALL, ROWS_SMALL, ROWS_BIG, bwd);
	fflush(stdout);
	gpu->device_free(x), gpu->device_free(w), gpu->device_free(out), gpu->device_free(din);
	free(hx), free(hw), free(hbig), free(hdbig), free(hsmall);
}

int main(void)
{
	char err[256] = "";
	gpu = backend_cuda(err, sizeof err);
	if (!gpu) {
		fprintf(stderr, "bench_rows: %s\n", err);
		return 2;
	}
	shape(5120, 5120, 160);  /* 32B q, o */
	shape(5120, 1024, 160);  /* 32B k, v */
	shape(5120, 27648, 160); /* 32B gate, up */
	shape(27648, 5120, 160); /* 32B down */
	shape(3584, 18944, 160); /* 7B gate, up */
	return 0;
}
