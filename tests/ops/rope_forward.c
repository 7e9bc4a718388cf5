/* tests/ops/rope_forward.c: rope_forward's checks: rotary embedding, HF
 * rotate_half layout, with document positions.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_rope_values(void)
{
	enum { B = 2, S = 3, NH = 2, D = 8, HALF = D / 2, N = B * S * NH * D };
	float cos_t[S * HALF], sin_t[S * HALF], x[N], y[N], back[N];
	double want[N], orig[N];

	ref_rope_tables(cos_t, sin_t, S, D, 10000.0);
	fill_f32(x, N, -1.0, 1.0);
	memcpy(y, x, sizeof y);
	rope_forward_cpu(y, cos_t, sin_t, NULL, B, S, NH, D);

	/* position 0 (the first token of each sequence) is the identity, bit for bit */
	int same = 1;
	for (int b = 0; b < B; b++)
		same &= memcmp(y + (size_t)b * S * NH * D, x + (size_t)b * S * NH * D, NH * D * sizeof(float)) == 0;
	printf("%s rope_forward at position 0 is the identity\n", same ? "ok  " : "FAIL");
	failures += !same;

	/* elsewhere: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) per pair */
	ref_rope(want, x, cos_t, sin_t, B * S, S, NH, D);
	check_close("rope_forward rotate_half pairs", y, want, N, 1e-7, 1e-6);

	/* the backward is the inverse rotation: it maps the output back to x */
	memcpy(back, y, sizeof back);
	rope_backward_cpu(back, cos_t, sin_t, NULL, B, S, NH, D);
	widen_f32(orig, x, N);
	check_close("rope_backward inverts rope_forward", back, orig, N, 1e-6, 1e-6);
}

/* RoPE with document positions: each document rotates as if alone, and
 * pos[t] = t % S is NULL's rotation, bit for bit. */
static void test_rope_documents(void)
{
	enum { B = 2, S = 12, NH = 3, D = 8, HALF = D / 2, N = B * S * NH * D };
	static const int len[3] = { 5, 3, 4 };
	float cos_t[S * HALF], sin_t[S * HALF], x[N], y[N], z[N];
	int32_t pos[B * S];
	int same_alone = 1;

	ref_rope_tables(cos_t, sin_t, S, D, 10000.0);
	fill_f32(x, N, -1.0, 1.0);
	doc_positions(pos, B, S, len, 3);
	for (int back = 0; back < 2; back++) {
		memcpy(y, x, sizeof y);
		(back ? rope_backward_cpu : rope_forward_cpu)(y, cos_t, sin_t, pos, B, S, NH, D);
		for (int b = 0, t0 = 0; b < B; b++, t0 = 0)
			for (int d = 0; d < 3; t0 += len[d++]) {
				size_t off = ((size_t)b * S + t0) * NH * D, n = (size_t)len[d] * NH * D;
				memcpy(z, x + off, n * sizeof(float));
				(back ? rope_backward_cpu : rope_forward_cpu)(z, cos_t, sin_t, NULL, 1, len[d], NH, D);
				same_alone &= memcmp(z, y + off, n * sizeof(float)) == 0;
			}
	}
	printf("%s rope with document positions rotates each document as alone\n", same_alone ? "ok  " : "FAIL");
	failures += !same_alone;
	for (int t = 0; t < B * S; t++)
		pos[t] = t % S;
	memcpy(y, x, sizeof y);
	memcpy(z, x, sizeof z);
	rope_forward_cpu(y, cos_t, sin_t, pos, B, S, NH, D);
	rope_forward_cpu(z, cos_t, sin_t, NULL, B, S, NH, D);
	check_same_bits("rope_forward with pos = t % S against NULL", y, z, sizeof y);
}

static void rope_forward_values_check(void)
{
	test_rope_values();
	test_rope_documents();
}
#endif

/* no gradient check here: its gradient is rope_backward's check */
#define rope_forward_grad_check NULL

#ifdef OPS_TEST_CUDA
#include "rope_case.h"

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void rope_forward_cuda_check(int realistic)
{
	if (!realistic) {
		test_rope(2, 3, 3, 6, 0, 0);
		test_rope(2, 40, 3, 8, 0, 3); /* document positions */
	} else {
		test_rope(1, 512, 32, 128, 0, 0);
		test_rope(2, 512, 28, 128, 0, 4);
	}
}
#endif
