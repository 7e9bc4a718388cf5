/* tests/gpu/bench_invariance.c: whether the CUDA ops a layer runs give each
 * micro-batch's rows the same bits when g micro-batches of 512 rows run as
 * one call of 512 g rows (not a test: tests/gpu/run.sh skips bench_*).  A
 * group (POROS_GROUP, tools/poros-train/layer.h) keeps blockwise ==
 * resident only for the ops that do.  With the row unit set
 * (BENCH_ROW_UNIT=512, the default: what the engine sets) the GEMMs run
 * kernels/cuda/gemm.cu's pinned algorithms; BENCH_ROW_UNIT=0 shows
 * cuBLAS's own choice at each row count; BENCH_CHOOSE_ROWS=2048 runs
 * every call on the algorithms chosen at 2048 rows (POROS_GEMM_CHOICE=group:
 * does a 512-row call then give the bits of a larger one?).  Checked for g = 2, 4 and 8,
 * each against one call a micro-batch:
 *   - the base GEMMs (matmul_forward over K + E, matmul_forward_bf16,
 *     matmul_backward_input);
 *   - the LoRA products with the extension, as the engine calls them: u
 *     and its extension parts (lora_forward), du's extension parts
 *     (lora_backward); dA and dB sum over rows, so a group's call keeps
 *     them a micro-batch apart (ops.h segs, batched GEMMs on CUDA:
 *     "segments", each leaf against the call of its micro-batch alone);
 *   - attention forward (out, lse) and backward (dq, dk, dv) at B = g
 *     against B = 1.
 * Prints, per shape and g, how many micro-batches differ.
 *
 * usage: bench_invariance   (Qwen2.5-7B, 32B and 72B shapes, rank 16) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops.h"

#define MB_ROWS 512
#define G_MAX 8
#define RANK 16

static const struct backend *gpu;

static void *dev(size_t bytes)
{
	void *p;
	if (gpu->device_alloc(&p, bytes) != 0) {
		fprintf(stderr, "bench_invariance: device out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	return p;
}

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 40;
}

/* A value in [-amp, amp]. */
static float random_f(uint64_t *s, float amp)
{
	return amp * (float)((int)(lcg(s) % 2001) - 1000) / 1000.0f;
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return (uint16_t)(u >> 16);
}

static void *dev_bf16(size_t n, uint64_t seed, float amp)
{
	uint16_t *h = malloc(n * 2);
	for (size_t i = 0; i < n; i++)
		h[i] = to_bf16(random_f(&seed, amp));
	void *d = dev(n * 2);
	gpu->copy_h2d(d, h, n * 2, STREAM_COMPUTE);
	gpu->synchronize();
	free(h);
	return d;
}

static float *dev_f32(size_t n, uint64_t seed, float amp)
{
	float *h = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		h[i] = random_f(&seed, amp);
	float *d = dev(n * 4);
	gpu->copy_h2d(d, h, n * 4, STREAM_COMPUTE);
	gpu->synchronize();
	free(h);
	return d;
}

/* Micro-batches (of `bytes` each, `stride` apart in both buffers) whose
 * bytes differ between the device buffers a and b. */
static int differ(const void *a, const void *b, size_t bytes, size_t stride, int g)
{
	unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
	int n = 0;
	for (int j = 0; j < g; j++) {
		gpu->copy_d2h(ha, (const unsigned char *)a + j * stride, bytes);
		gpu->copy_d2h(hb, (const unsigned char *)b + j * stride, bytes);
		n += memcmp(ha, hb, bytes) != 0;
	}
	free(ha), free(hb);
	return n;
}

/* One projection (T,K) -> (T,N) with the LoRA extension, as proj.c runs it. */
static void projection(const char *name, int K, int N)
{
	int E = lora_ext_cols(RANK), ldx = K + E, ldw = K + E, T = G_MAX * MB_ROWS;
	bf16 *x = dev_bf16((size_t)T * ldx, 7 + K, 1.0f), *w = dev_bf16((size_t)(N + E) * ldw, 11 + N, 0.05f);
	bf16 *dy = dev_bf16((size_t)T * (N + E), 13, 1.0f);
	float *A = dev_f32((size_t)RANK * K, 17, 0.02f), *B = dev_f32((size_t)N * RANK, 19, 0.02f);
	size_t sf = lora_scratch_floats(T, K, N, RANK);
	float *scratch = dev(sf * 4), *u1 = dev((size_t)T * RANK * 4), *u2 = dev((size_t)T * RANK * 4);
	float *o1 = dev((size_t)T * (N > K ? N : K) * 4), *o2 = dev((size_t)T * (N > K ? N : K) * 4);
	float *dA = dev((size_t)RANK * K * 4), *dB = dev((size_t)N * RANK * 4), *du = dev((size_t)T * RANK * 4);
	bf16 *x2 = dev((size_t)T * ldx * 2), *dy2 = dev((size_t)T * (N + E) * 2);
	bf16 *b16a = dev((size_t)T * N * 2), *b16b = dev((size_t)T * N * 2);
	size_t leaf = (size_t)RANK * K + (size_t)N * RANK; /* one micro-batch's dA then dB */
	float *lv1 = dev(G_MAX * leaf * 4), *lv2 = dev(G_MAX * leaf * 4);

	gpu->ops->lora_weight_ext(w, ldw, A, B, NULL, 2.0f, K, N, RANK);
	gpu->copy_d2d(x2, x, (size_t)T * ldx * 2, STREAM_COMPUTE);
	gpu->copy_d2d(dy2, dy, (size_t)T * (N + E) * 2, STREAM_COMPUTE);
	for (int g = 2; g <= G_MAX; g *= 2) {
		int rows = g * MB_ROWS, bad[7] = { 0 };
		struct lora_fwd_args fa = { .u = u1, .ext = x + K, .in = x, .ld_in = ldx, .A = A, .B = B, .scale = 2.0f,
		                            .T = rows, .K = K, .N = N, .R = RANK, .scratch = scratch,
		                            .A3 = w + (size_t)N * ldw, .ld_a3 = ldw };
		struct lora_bwd_args ba = { .dA = dA, .dB = dB, .du = du, .ext = dy + N, .dout = dy, .ld_dout = N + E,
		                            .in = x, .ld_in = ldx, .u = u1, .A = A, .B = B, .scale = 2.0f, .T = rows,
		                            .K = K, .N = N, .R = RANK, .scratch = scratch, .B3 = w + K, .ld_b3 = ldw };
		/* one call over g micro-batches ... */
		gpu->ops->lora_forward(&fa);
		gpu->ops->matmul_forward(o1, x, ldx, w, ldw, NULL, rows, K + E, N, 0);
		gpu->ops->matmul_forward_bf16(b16a, x, ldx, w, ldw, rows, K + E, N);
		gpu->ops->lora_backward(&ba);
		/* ... against one a micro-batch, on copies of the inputs */
		for (int j = 0; j < g; j++) {
			size_t r0 = (size_t)j * MB_ROWS;
			struct lora_fwd_args f1 = fa;
			struct lora_bwd_args b1 = ba;
			f1.u = u2 + r0 * RANK, f1.in = x2 + r0 * ldx, f1.ext = x2 + r0 * ldx + K, f1.T = MB_ROWS;
			gpu->ops->lora_forward(&f1);
			gpu->ops->matmul_forward(o2 + r0 * N, x2 + r0 * ldx, ldx, w, ldw, NULL, MB_ROWS, K + E, N, 0);
			gpu->ops->matmul_forward_bf16(b16b + r0 * N, x2 + r0 * ldx, ldx, w, ldw, MB_ROWS, K + E, N);
			b1.dout = dy2 + r0 * (N + E), b1.ext = dy2 + r0 * (N + E) + N, b1.in = x2 + r0 * ldx;
			b1.u = u2 + r0 * RANK, b1.du = du + r0 * RANK, b1.T = MB_ROWS;
			gpu->ops->lora_backward(&b1);
		}
		gpu->synchronize();
		bad[0] = differ(u1, u2, (size_t)MB_ROWS * RANK * 4, (size_t)MB_ROWS * RANK * 4, g);
		bad[1] = differ(x, x2, (size_t)MB_ROWS * ldx * 2, (size_t)MB_ROWS * ldx * 2, g);
		bad[2] = differ(o1, o2, (size_t)MB_ROWS * N * 4, (size_t)MB_ROWS * N * 4, g);
		bad[3] = differ(b16a, b16b, (size_t)MB_ROWS * N * 2, (size_t)MB_ROWS * N * 2, g);
		bad[4] = differ(dy, dy2, (size_t)MB_ROWS * (N + E) * 2, (size_t)MB_ROWS * (N + E) * 2, g);
		/* the input gradient through the extension (K <- N + E) */
		gpu->ops->matmul_backward_input(o1, dy, N + E, w, ldw, rows, K, N + E, 0);
		for (int j = 0; j < g; j++) {
			size_t r0 = (size_t)j * MB_ROWS;
			gpu->ops->matmul_backward_input(o2 + r0 * K, dy2 + r0 * (N + E), N + E, w, ldw, MB_ROWS, K, N + E, 0);
		}
		gpu->synchronize();
		bad[5] = differ(o1, o2, (size_t)MB_ROWS * K * 4, (size_t)MB_ROWS * K * 4, g);
		/* a group's weight gradients: one call of g segments, each its own
		 * leaf (ops.h segs), against one call a micro-batch */
		gpu->memset_zero(lv1, g * leaf * 4, STREAM_COMPUTE);
		gpu->memset_zero(lv2, g * leaf * 4, STREAM_COMPUTE);
		struct lora_bwd_args bs = ba;
		bs.dA = lv1, bs.dB = lv1 + (size_t)RANK * K, bs.segs = g, bs.seg_stride = (long)leaf;
		gpu->ops->lora_backward(&bs);
		for (int j = 0; j < g; j++) {
			size_t r0 = (size_t)j * MB_ROWS;
			struct lora_bwd_args b1 = ba;
			b1.dout = dy2 + r0 * (N + E), b1.ext = dy2 + r0 * (N + E) + N, b1.in = x2 + r0 * ldx;
			b1.u = u2 + r0 * RANK, b1.du = du + r0 * RANK, b1.T = MB_ROWS;
			b1.dA = lv2 + j * leaf, b1.dB = lv2 + j * leaf + (size_t)RANK * K;
			gpu->ops->lora_backward(&b1);
		}
		gpu->synchronize();
		bad[6] = differ(lv1, lv2, leaf * 4, leaf * 4, g);
		printf("%-8s K=%5d N=%5d g=%d: u %d, x ext %d, fwd %d, fwd bf16 %d, dout ext (du) %d, bwd input %d, "
		       "segments (dA dB) %d of %d\n", name, K, N, g, bad[0], bad[1], bad[2], bad[3], bad[4], bad[5], bad[6], g);
		fflush(stdout);
	}
	void *bufs[] = { x, w, dy, A, B, scratch, u1, u2, o1, o2, dA, dB, du, x2, dy2, b16a, b16b, lv1, lv2 };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		gpu->device_free(bufs[i]);
}

/* Attention over g sequences of MB_ROWS at B = g against B = 1 each. */
static void attention(const char *name, int H, int G, int D)
{
	int S = MB_ROWS, Bm = G_MAX, T = Bm * S, ld = H * D;
	float *q = dev_f32((size_t)T * H * D, 23, 2.0f), *k = dev_f32((size_t)T * G * D, 29, 2.0f);
	float *v = dev_f32((size_t)T * G * D, 31, 1.0f), *dout = dev_f32((size_t)T * H * D, 37, 1.0f);
	float *cs = dev_f32((size_t)S * D / 2, 41, 1.0f), *sn = dev_f32((size_t)S * D / 2, 43, 1.0f);
	size_t sf = attention_scratch_floats_cuda(Bm, S, H, G, D);
	float *scratch = dev(sf * 4);
	bf16 *o1 = dev((size_t)T * ld * 2), *o2 = dev((size_t)T * ld * 2);
	float *l1 = dev((size_t)T * H * 4), *l2 = dev((size_t)T * H * 4);
	float *dq1 = dev((size_t)T * H * D * 4), *dq2 = dev((size_t)T * H * D * 4);
	float *dk1 = dev((size_t)T * G * D * 4), *dk2 = dev((size_t)T * G * D * 4);
	float *dv1 = dev((size_t)T * G * D * 4), *dv2 = dev((size_t)T * G * D * 4);

	for (int g = 2; g <= G_MAX; g *= 2) {
		gpu->ops->attention_forward(o1, ld, l1, scratch, q, k, v, cs, sn, NULL, g, S, H, G, D);
		gpu->ops->attention_backward(dq1, dk1, dv1, scratch, dout, o1, ld, q, k, v, cs, sn, l1, NULL, g, S, H, G, D);
		for (int j = 0; j < g; j++) {
			size_t r0 = (size_t)j * S;
			gpu->ops->attention_forward(o2 + r0 * ld, ld, l2 + r0 * H, scratch, q + r0 * H * D, k + r0 * G * D,
			                            v + r0 * G * D, cs, sn, NULL, 1, S, H, G, D);
			gpu->ops->attention_backward(dq2 + r0 * H * D, dk2 + r0 * G * D, dv2 + r0 * G * D, scratch,
			                             dout + r0 * H * D, o2 + r0 * ld, ld, q + r0 * H * D, k + r0 * G * D,
			                             v + r0 * G * D, cs, sn, l2 + r0 * H, NULL, 1, S, H, G, D);
		}
		gpu->synchronize();
		printf("%-8s attention H=%d G=%d D=%d S=%d g=%d: out %d, lse %d, dq %d, dk %d, dv %d of %d\n", name, H, G,
		       D, S, g, differ(o1, o2, (size_t)S * ld * 2, (size_t)S * ld * 2, g),
		       differ(l1, l2, (size_t)S * H * 4, (size_t)S * H * 4, g),
		       differ(dq1, dq2, (size_t)S * H * D * 4, (size_t)S * H * D * 4, g),
		       differ(dk1, dk2, (size_t)S * G * D * 4, (size_t)S * G * D * 4, g),
		       differ(dv1, dv2, (size_t)S * G * D * 4, (size_t)S * G * D * 4, g), g);
		fflush(stdout);
	}
	void *bufs[] = { q, k, v, dout, cs, sn, scratch, o1, o2, l1, l2, dq1, dq2, dk1, dk2, dv1, dv2 };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		gpu->device_free(bufs[i]);
}

int main(void)
{
	char err[256] = "";
	gpu = backend_cuda(err, sizeof err);
	if (!gpu) {
		fprintf(stderr, "bench_invariance: %s\n", err);
		return 2;
	}
	const char *unit = getenv("BENCH_ROW_UNIT"), *choose = getenv("BENCH_CHOOSE_ROWS");
	int rows = unit && *unit ? atoi(unit) : MB_ROWS;
	gpu->set_row_unit(rows, choose && *choose ? atoi(choose) : rows);
	/* 32B: hidden 5120, kv 1024, intermediate 27648; 7B: 3584, 512, 18944;
	 * 72B: 8192, 1024, 29568 */
	projection("32B q/o", 5120, 5120);
	projection("32B k/v", 5120, 1024);
	projection("32B gate", 5120, 27648);
	projection("32B down", 27648, 5120);
	projection("7B q/o", 3584, 3584);
	projection("7B k/v", 3584, 512);
	projection("7B gate", 3584, 18944);
	projection("7B down", 18944, 3584);
	projection("72B q/o", 8192, 8192);
	projection("72B k/v", 8192, 1024);
	projection("72B gate", 8192, 29568);
	projection("72B down", 29568, 8192);
	attention("32B", 40, 8, 128);
	attention("7B", 28, 4, 128);
	attention("72B", 64, 8, 128);
	return 0;
}
