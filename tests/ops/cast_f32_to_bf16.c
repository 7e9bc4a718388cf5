/* tests/ops/cast_f32_to_bf16.c: cast_f32_to_bf16's checks: fp32 to bf16,
 * round to nearest even, at any row pitch.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static float bits_to_f32(uint32_t u)
{
	union { uint32_t u; float f; } v = { u };
	return v.f;
}

static void test_bf16_rounding(void)
{
	/* fp32 bit patterns and their bf16 under round-to-nearest-even */
	static const struct { uint32_t in; uint16_t want; const char *why; } cases[] = {
		{ 0x3f800000u, 0x3f80, "1.0 is exact" },
		{ 0x3f808000u, 0x3f80, "1 + 2^-8: a tie, down to the even 0x3f80" },
		{ 0x3f818000u, 0x3f82, "1 + 3*2^-8: a tie, up to the even 0x3f82" },
		{ 0x3f808001u, 0x3f81, "just above a tie rounds up" },
		{ 0x3f817fffu, 0x3f81, "just below a tie rounds down" },
		{ 0xbf808000u, 0xbf80, "-(1 + 2^-8): ties to even on the magnitude" },
		{ 0xbf818000u, 0xbf82, "-(1 + 3*2^-8)" },
		{ 0x7f7fffffu, 0x7f80, "FLT_MAX rounds to +inf" },
		{ 0x7f800000u, 0x7f80, "+inf stays +inf" },
		{ 0xff800000u, 0xff80, "-inf stays -inf" },
		{ 0x80000000u, 0x8000, "-0 keeps its sign" },
		{ 0x00018000u, 0x0002, "a subnormal tie rounds to even" },
	};
	enum { N = sizeof cases / sizeof cases[0] };
	float in[N + 2];
	bf16 out[N + 2];
	for (int i = 0; i < N; i++)
		in[i] = bits_to_f32(cases[i].in);
	in[N] = bits_to_f32(0x7f800001u); /* a signalling NaN must not become inf */
	in[N + 1] = bits_to_f32(0xffc00000u);
	cast_f32_to_bf16_cpu(out, N + 2, in, 1, N + 2);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		if (out[i] != cases[i].want) {
			printf("  bf16(0x%08x) = 0x%04x, want 0x%04x: %s\n", (unsigned)cases[i].in, out[i], cases[i].want,
			       cases[i].why);
			bad++;
		}
	}
	bad += !isnan(f32_from_bf16(out[N])) || !isnan(f32_from_bf16(out[N + 1]));
	printf("%s cast_f32_to_bf16: %d of %d rounding cases wrong\n", bad ? "FAIL" : "ok  ", bad, N + 2);
	failures += bad != 0;
}

static void test_pitched_cast(void)
{
	enum { ROWS = 7, COLS = 33, LD = COLS + 31 };
	float in[ROWS * COLS];
	bf16 out[ROWS * COLS], outp[ROWS * LD];

	fill_f32(in, ROWS * COLS, -5.0, 5.0);
	cast_f32_to_bf16_cpu(out, COLS, in, ROWS, COLS);
	fill_bf16_bits(outp, ROWS * LD, PAD_BF16);
	cast_f32_to_bf16_cpu(outp, LD, in, ROWS, COLS);
	check_pitched("cast_f32_to_bf16 at ld_out 64", outp, LD, out, ROWS, COLS, sizeof(bf16), &pad_bf16);
}

static void cast_f32_to_bf16_values_check(void)
{
	test_bf16_rounding();
	test_pitched_cast();
}
#endif

/* no gradient check here: a cast of values, no op of the graph */
#define cast_f32_to_bf16_grad_check NULL

#ifdef OPS_TEST_CUDA
struct cast_args {
	bf16 *out;
	const float *in;
	long rows;
	int cols, ld;
};

static void cast_gpu(const void *p)
{
	const struct cast_args *a = p;
	gpu->ops->cast_f32_to_bf16(a->out, a->ld, a->in, a->rows, a->cols);
}

/* The same rounding recipe on both sides: bitwise equal, including NaN,
 * infinities, signed zeros, ties, subnormals and overflow to infinity.
 * ld > cols: out pitched, the pads kept. */
static void test_cast(long rows, int cols, int ld, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "cast_f32_to_bf16 rows=%ld cols=%d ld=%d%s", rows, cols, ld, offset ? " unaligned" : ""))
		return;
	size_t off = offset ? 4 : 0, n = (size_t)rows * cols, n_out = (size_t)rows * ld;
	float *in = rand_f32(n, -1000, 1000);
	static const uint32_t special[] = {
		0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,
		0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f807fffu, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
		0xff7fffffu, 0x7f7f8000u,
	};
	size_t ns = sizeof special / sizeof special[0];
	for (size_t i = 0; i < ns && i < n; i++)
		memcpy(&in[i], &special[i], 4);
	bf16 *init = pitched_out_init((size_t)rows, (size_t)cols, (size_t)ld, 2);
	bf16 *ref = dup_bytes(init, n_out * 2);
	double t0 = now_ms();
	cast_f32_to_bf16_cpu(ref, ld, in, rows, cols);
	c.cpu_ms = now_ms() - t0;
	struct cast_args a = { NULL, dev_from(in, n * 4, off), rows, cols, ld };
	a.out = case_out(&c, "out", n_out * 2, init, off / 2);
	case_run(&c, cast_gpu, &a);
	check_exact_rows(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	check_pads(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void cast_f32_to_bf16_cuda_check(int realistic)
{
	if (!realistic) {
		test_cast(7, 143, 143, 1);
		test_cast(7, 143, 150, 0); /* pitched, odd cols: scalar rows */
		test_cast(9, 64, 68, 0);   /* pitched, vector rows */
		test_cast(9, 64, 68, 1);   /* pitched, unaligned: scalar rows */
	} else {
		test_cast(3, 699051, 699051, 0); /* 2^21 + 1 elements: the flat kernel's tail */
		test_cast(512, 4096, 4096 + 160, 0);
	}
}
#endif
