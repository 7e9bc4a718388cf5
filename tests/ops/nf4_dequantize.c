/* tests/ops/nf4_dequantize.c: nf4_dequantize's checks: NF4 to bf16 (the code
 * book, both nibbles, absmax blocks) at any row pitch.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_nf4_values(void)
{
	enum { N = 128 };
	uint8_t packed[N / 2];
	const float absmax[N / POROS_NF4_BLOCK] = { 2.0f, 0.5f };
	bf16 out[N];
	int bad = 0;

	CHECK(poros_nf4_code[0] == -1.0f && poros_nf4_code[7] == 0.0f && poros_nf4_code[15] == 1.0f);
	for (int i = 1; i < 16; i++)
		CHECK(poros_nf4_code[i] > poros_nf4_code[i - 1]);

	/* every code in both nibble positions: byte b = (b & 15) << 4 | (15 - (b & 15)) */
	for (int b = 0; b < N / 2; b++)
		packed[b] = (uint8_t)(((b & 15) << 4) | (15 - (b & 15)));
	nf4_dequantize_cpu(out, N, packed, absmax, 1, N);
	for (int i = 0; i < N; i++) {
		int code = i % 2 == 0 ? (i / 2) & 15 : 15 - ((i / 2) & 15);
		bad += out[i] != bf16_from_f32(poros_nf4_code[code] * absmax[i / 64]);
	}
	/* bf16 bit patterns worked out by hand (sign, exponent, 7-bit mantissa) */
	CHECK(out[0] == 0xc000); /* byte 0x0f, high nibble: code 0 = -1 times 2 = -2 */
	CHECK(out[1] == 0x4000); /* low nibble: code 15 = 1 times 2 = 2 */
	CHECK(out[14] == 0x0000); /* byte 0x78, high: code 7 = +0 */
	CHECK(out[15] == 0x3e23); /* low: code 8, 0.0795803 * 2 = 0.1591606 -> 1.0100011b * 2^-3 */
	CHECK(out[66] == 0xbeb2); /* block 1 (absmax 0.5), byte 0x1e, high: code 1 * 0.5 = -0.3480964 */
	CHECK(out[90] == 0x3e90); /* byte 0xd2, high: code 13 * 0.5 = 0.2813085 -> 1.0010000b * 2^-2 */
	printf("%s nf4_dequantize: %d of %d elements wrong\n", bad ? "FAIL" : "ok  ", bad, N);
	failures += bad != 0;
}

static void test_pitched_nf4(void)
{
	/* the packed stream and absmax are the unpitched row-major order:
	 * element (row, col) of the pitched output is element row*COLS + col
	 * of a flat dequantization of the same bytes */
	enum { ROWS = 5, COLS = 128, LD = COLS + 32, N = ROWS * COLS };
	uint8_t packed[N / 2];
	float absmax[N / POROS_NF4_BLOCK];
	bf16 flat[N], out[N], outp[ROWS * LD];

	for (int i = 0; i < N / 2; i++)
		packed[i] = (uint8_t)rng_uniform(0, 256 - 1e-9);
	fill_f32(absmax, N / POROS_NF4_BLOCK, 0.01, 2.0);
	nf4_dequantize_cpu(flat, N, packed, absmax, 1, N);
	nf4_dequantize_cpu(out, COLS, packed, absmax, ROWS, COLS);
	check_same_bits("nf4_dequantize (5,128) = one flat row of 640", out, flat, sizeof flat);
	fill_bf16_bits(outp, ROWS * LD, PAD_BF16);
	nf4_dequantize_cpu(outp, LD, packed, absmax, ROWS, COLS);
	check_pitched("nf4_dequantize at ld_out 160", outp, LD, flat, ROWS, COLS, sizeof(bf16), &pad_bf16);
}

static void nf4_dequantize_values_check(void)
{
	test_nf4_values();
	test_pitched_nf4();
}
#endif

/* no gradient check here: the base weights are frozen */
#define nf4_dequantize_grad_check NULL

#ifdef OPS_TEST_CUDA
struct nf4_args {
	bf16 *out;
	const uint8_t *packed;
	const float *absmax;
	long rows;
	int cols, ld;
};

static void nf4_gpu(const void *p)
{
	const struct nf4_args *a = p;
	gpu->ops->nf4_dequantize(a->out, a->ld, a->packed, a->absmax, a->rows, a->cols);
}

/* code * absmax is one fp32 multiply on both sides, then the same rounding:
 * bitwise equal.  offset: the packed bytes 1 byte and the output 2 bytes
 * off alignment (the byte-wise kernel); ld > cols: out pitched (a weight
 * buffer with room for the LoRA extension), the pads kept; ld % 8 != 0
 * takes the byte-wise kernel too. */
static void test_nf4(long rows, int cols, int ld, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "nf4_dequantize rows=%ld cols=%d ld=%d%s", rows, cols, ld, offset ? " unaligned" : ""))
		return;
	size_t n = (size_t)rows * cols, n_out = (size_t)rows * ld;
	uint8_t *packed = host_alloc(n / 2);
	for (size_t i = 0; i < n / 2; i++)
		packed[i] = (uint8_t)(poros_mix64(rng_counter++) & 0xff);
	float *absmax = rand_f32(n / POROS_NF4_BLOCK, 0.001f, 2.0f);
	bf16 *init = pitched_out_init((size_t)rows, (size_t)cols, (size_t)ld, 2);
	bf16 *ref = dup_bytes(init, n_out * 2);
	double t0 = now_ms();
	nf4_dequantize_cpu(ref, ld, packed, absmax, rows, cols);
	c.cpu_ms = now_ms() - t0;
	struct nf4_args a = { NULL, dev_from(packed, n / 2, offset ? 1 : 0),
	                              dev_from(absmax, n / POROS_NF4_BLOCK * 4, 0), rows, cols, ld };
	a.out = case_out(&c, "out", n_out * 2, init, offset ? 2 : 0);
	case_run(&c, nf4_gpu, &a);
	check_exact_rows(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	check_pads(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	printf("    %.0f GB/s\n", (double)n * 2.5 / (c.gpu_ms * 1e-3) / 1e9);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void nf4_dequantize_cuda_check(int realistic)
{
	if (!realistic) {
		test_nf4(1, 64, 64, 0);
		test_nf4(3, 64, 64, 1);
		test_nf4(3, 128, 136, 0); /* pitched, 16-byte rows: the chunk kernel, two rows a warp */
		test_nf4(3, 64, 68, 0);   /* pitched, 8-byte rows: the byte kernel */
		test_nf4(3, 128, 136, 1); /* pitched, unaligned: the byte kernel */
	} else {
		test_nf4(4096, 4096, 4096, 0);
		test_nf4(512, 5120, 5280, 0); /* a 32B weight's rows into an extension-sized buffer */
	}
}
#endif
