/* tests/ops/swiglu_forward.c: swiglu_forward's checks: silu(gate) * up in
 * bf16, from bf16 gate and up, at any row pitch.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_swiglu_values(void)
{
	enum { N = 40 };
	float outf[N];
	bf16 gate[N], up[N], out[N];
	double g[N], u[N], want[N];

	fill_bf16(gate, N, -6.0, 6.0);
	fill_bf16(up, N, -2.0, 2.0);
	gate[0] = bf16_from_f32(-100.0f); /* e^100 overflows fp32: silu must be -0, not NaN */
	gate[1] = bf16_from_f32(100.0f);
	widen_bf16(g, gate, N);
	widen_bf16(u, up, N);
	ref_swiglu(want, g, u, N);
	swiglu_forward_cpu(out, N, gate, up, 1, N);
	for (int i = 0; i < N; i++)
		outf[i] = f32_from_bf16(out[i]);
	/* the reference reads the same bf16 inputs, so only the output's
	 * rounding is left: up to 2^-8 relative; the atol only admits the -0
	 * that stands for silu(-100) * up ~ 1e-42 */
	check_close("swiglu_forward silu(gate) * up", outf, want, N, 1e-30, 4e-3);
	CHECK(outf[0] == 0.0f);
}

static void test_pitched_swiglu(void)
{
	enum { T = 6, F = 50, LD = F + 14, LD_D = F + 10 };
	float dout[T * F];
	bf16 gate[T * F], up[T * F];
	bf16 out[T * F], outp[T * LD], dgate[T * F], dup[T * F], dgatep[T * LD_D], dupp[T * LD_D];

	fill_bf16(gate, T * F, -8.0, 8.0);
	fill_bf16(up, T * F, -2.0, 2.0);
	fill_f32(dout, T * F, -1.0, 1.0);
	swiglu_forward_cpu(out, F, gate, up, T, F);
	fill_bf16_bits(outp, T * LD, PAD_BF16);
	swiglu_forward_cpu(outp, LD, gate, up, T, F);
	check_pitched("swiglu_forward out at ld_out 64", outp, LD, out, T, F, sizeof(bf16), &pad_bf16);

	swiglu_backward_cpu(dgate, dup, F, dout, gate, up, T, F);
	fill_bf16_bits(dgatep, T * LD_D, PAD_BF16);
	fill_bf16_bits(dupp, T * LD_D, PAD_BF16);
	swiglu_backward_cpu(dgatep, dupp, LD_D, dout, gate, up, T, F);
	check_pitched("swiglu_backward dgate at ld_d 60", dgatep, LD_D, dgate, T, F, sizeof(bf16), &pad_bf16);
	check_pitched("swiglu_backward dup at ld_d 60", dupp, LD_D, dup, T, F, sizeof(bf16), &pad_bf16);
}

static void swiglu_forward_values_check(void)
{
	test_swiglu_values();
	test_pitched_swiglu(); /* the backward's pitch too */
}
#endif

/* no gradient check here: its gradient is swiglu_backward's check */
#define swiglu_forward_grad_check NULL

#ifdef OPS_TEST_CUDA
#include "swiglu_case.h"

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void swiglu_forward_cuda_check(int realistic)
{
	if (!realistic) {
		test_swiglu(7, 143, 143, 1, 0);
		test_swiglu(7, 143, 143, 0, 0); /* flat: groups of eight, then a tail of one */
		test_swiglu(7, 143, 150, 0, 0); /* pitched, odd F: scalar rows */
		test_swiglu(5, 64, 72, 0, 0);   /* pitched, vector rows */
		test_swiglu(5, 60, 68, 0, 0);   /* pitched, F not a multiple of 8: scalar rows */
		test_swiglu(5, 64, 72, 1, 0);   /* pitched, unaligned: scalar rows */
	} else {
		test_swiglu(512, 11008, 11008, 0, 0);
		test_swiglu(512, 27648, 27648 + 160, 0, 0); /* 32B's F into the down projection's buffer */
	}
}
#endif
