/* tests/ops/rmsnorm_forward.c: rmsnorm_forward's checks: RMSNorm forward:
 * out_f32 / out_bf16 at any row pitch, rstd.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_rmsnorm_values(void)
{
	/* by hand: mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5, rstd = 1/sqrt(7.5 + 1e-5) */
	const float x[8] = { 1, 2, 3, 4, -0.5f, 0, 0, 0.5f };
	bf16 w[4] = { bf16_from_f32(1.0f), bf16_from_f32(0.5f), bf16_from_f32(2.0f), bf16_from_f32(-1.0f) };
	float out[8], rstd[2], rstd_only[2];
	bf16 outb[8];
	const double r0 = 1.0 / sqrt(7.5 + 1e-5), r1 = 1.0 / sqrt(0.125 + 1e-5);
	const double want[8] = { 1 * r0, 0.5 * 2 * r0, 2 * 3 * r0, -1 * 4 * r0,
				 -0.5 * r1, 0, 0, -0.5 * r1 };
	const double want_rstd[2] = { r0, r1 };

	rmsnorm_forward_cpu(out, outb, 4, rstd, x, w, 1e-5f, 2, 4);
	/* three correctly rounded fp32 steps: within 2e-7 relative */
	check_close("rmsnorm_forward out (hand computed)", out, want, 8, 0.0, 2e-7);
	check_close("rmsnorm_forward rstd (hand computed)", rstd, want_rstd, 2, 0.0, 2e-7);
	int same = 1;
	for (int i = 0; i < 8; i++)
		same &= outb[i] == bf16_from_f32(out[i]);
	CHECK(same); /* the bf16 output is the fp32 one rounded once */
	rmsnorm_forward_cpu(NULL, NULL, 4, rstd_only, x, w, 1e-5f, 2, 4);
	CHECK(memcmp(rstd_only, rstd, sizeof rstd) == 0);
}

static void test_pitched_rmsnorm(void)
{
	enum { T = 4, C = 40, LD = C + 8 };
	float x[T * C], out[T * C], outp[T * LD], rstd[T], rstdp[T];
	bf16 w[C], outb[T * C], outbp[T * LD];
	const uint32_t pad_f32 = PAD_F32_BITS;

	fill_f32(x, T * C, -2.0, 2.0);
	fill_bf16(w, C, 0.5, 1.5);
	rmsnorm_forward_cpu(out, outb, C, rstd, x, w, 1e-6f, T, C);
	fill_f32_bits(outp, T * LD, PAD_F32_BITS);
	fill_bf16_bits(outbp, T * LD, PAD_BF16);
	rmsnorm_forward_cpu(outp, outbp, LD, rstdp, x, w, 1e-6f, T, C);
	check_pitched("rmsnorm_forward out_f32 at ld_out 48", outp, LD, out, T, C, sizeof(float), &pad_f32);
	check_pitched("rmsnorm_forward out_bf16 at ld_out 48", outbp, LD, outb, T, C, sizeof(bf16), &pad_bf16);
	check_same_bits("rmsnorm_forward rstd with ld_out 48", rstdp, rstd, sizeof rstd);
	/* the bf16 output alone, as the engine asks for it */
	fill_bf16_bits(outbp, T * LD, PAD_BF16);
	rmsnorm_forward_cpu(NULL, outbp, LD, rstdp, x, w, 1e-6f, T, C);
	check_pitched("rmsnorm_forward out_bf16 alone at ld_out 48", outbp, LD, outb, T, C, sizeof(bf16), &pad_bf16);
}

static void rmsnorm_forward_values_check(void)
{
	test_rmsnorm_values();
	test_pitched_rmsnorm();
}
#endif

/* no gradient check here: its gradient is rmsnorm_backward's check
 * (rmsnorm_backward.c) */
#define rmsnorm_forward_grad_check NULL

#ifdef OPS_TEST_CUDA
struct rmsnorm_args {
	float *out_f32, *rstd;
	bf16 *out_bf16;
	const float *in;
	const bf16 *weight;
	float eps;
	int T, C, ld_out;
};

static void rmsnorm_fwd_gpu(const void *p)
{
	const struct rmsnorm_args *a = p;
	gpu->ops->rmsnorm_forward(a->out_f32, a->out_bf16, a->ld_out, a->rstd, a->in, a->weight, a->eps, a->T, a->C);
}

/* The CPU sums x^2 in double, the GPU in fp32 (16 terms a thread, then a
 * tree): relative error of the sum ~24 * 2^-24 at worst, halved in rstd,
 * plus two roundings in y: 1e-5 relative is a 5x margin.  The bf16 output
 * adds one bf16 ulp.  ld_out > C: both outputs pitched, the pads kept. */
static void test_rmsnorm_forward(int T, int C, int ld_out, int want_f32, int want_bf16)
{
	struct gpu_case c;
	if (!case_begin(&c, "rmsnorm_forward T=%d C=%d ld_out=%d%s%s", T, C, ld_out, want_f32 ? " out_f32" : "",
	                want_bf16 ? " out_bf16" : ""))
		return;
	size_t n = (size_t)T * C, n_out = (size_t)T * ld_out;
	float *in = rand_f32(n, -2, 2);
	bf16 *w = rand_bf16((size_t)C, 0.5f, 1.5f);
	float *init_f32 = pitched_out_init((size_t)T, (size_t)C, (size_t)ld_out, 4);
	bf16 *init_bf = pitched_out_init((size_t)T, (size_t)C, (size_t)ld_out, 2);
	float *ref = dup_bytes(init_f32, n_out * 4), *ref_rstd = host_alloc((size_t)T * 4);
	bf16 *ref_bf = dup_bytes(init_bf, n_out * 2);
	double t0 = now_ms();
	rmsnorm_forward_cpu(want_f32 ? ref : NULL, want_bf16 ? ref_bf : NULL, ld_out, ref_rstd, in, w, 1e-6f, T, C);
	c.cpu_ms = now_ms() - t0;

	struct rmsnorm_args a = { 0 };
	a.in = dev_from(in, n * 4, 0);
	a.weight = dev_from(w, (size_t)C * 2, 0);
	a.eps = 1e-6f;
	a.T = T;
	a.C = C;
	a.ld_out = ld_out;
	if (want_f32)
		a.out_f32 = case_out(&c, "out_f32", n_out * 4, init_f32, 0);
	if (want_bf16)
		a.out_bf16 = case_out(&c, "out_bf16", n_out * 2, init_bf, 0);
	a.rstd = case_out(&c, "rstd", (size_t)T * 4, NULL, 0);
	case_run(&c, rmsnorm_fwd_gpu, &a);
	if (want_f32) {
		check_rows(&c, "out_f32", ref, (size_t)T, (size_t)C, (size_t)ld_out, 0, 1e-6, 1e-5);
		check_pads(&c, "out_f32", ref, (size_t)T, (size_t)C, (size_t)ld_out, 4);
	}
	if (want_bf16) {
		check_rows(&c, "out_bf16", ref_bf, (size_t)T, (size_t)C, (size_t)ld_out, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "out_bf16", ref_bf, (size_t)T, (size_t)C, (size_t)ld_out, 2);
	}
	check(&c, "rstd", ref_rstd, (size_t)T, 0, 0, 1e-5);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void rmsnorm_forward_cuda_check(int realistic)
{
	if (!realistic) {
		test_rmsnorm_forward(3, 33, 33, 0, 1);
		/* pitched: odd ld (scalar rows), ld % 4 == 0 (vector rows), C % 4 == 0
		 * but ld % 4 != 0 (scalar) */
		test_rmsnorm_forward(3, 33, 37, 1, 1);
		test_rmsnorm_forward(4, 64, 72, 1, 1);
		test_rmsnorm_forward(4, 64, 66, 1, 1);
		test_rmsnorm_forward(4, 64, 72, 0, 1);
	} else {
		test_rmsnorm_forward(512, 4096, 4096, 1, 1);
		test_rmsnorm_forward(512 * 8, 128, 128, 1, 0); /* qwen3's per-head q/k norm */
		/* Qwen2.5-32B's C = 5120 into a buffer with room for a rank-16 LoRA
		 * extension: ld = 5120 + lora_ext_cols(16) = 5280 */
		test_rmsnorm_forward(512, 5120, 5280, 1, 1);
	}
}
#endif
