/* tests/ops/swiglu_case.h: a swiglu_forward or swiglu_backward case on the
 * GPU against the CPU, either direction; swiglu_forward.c and
 * swiglu_backward.c run their cases through it. */
#ifndef POROS_OPS_SWIGLU_CASE_H
#define POROS_OPS_SWIGLU_CASE_H

#include "cuda_check.h"

struct swiglu_args {
	bf16 *out, *dgate, *dup;
	const bf16 *gate, *up;
	const float *dout;
	int T, F, ld; /* ld: rows of out, or of dgate and dup */
};

static inline void swiglu_fwd_gpu(const void *p)
{
	const struct swiglu_args *a = p;
	gpu->ops->swiglu_forward(a->out, a->ld, a->gate, a->up, a->T, a->F);
}

static inline void swiglu_bwd_gpu(const void *p)
{
	const struct swiglu_args *a = p;
	gpu->ops->swiglu_backward(a->dgate, a->dup, a->ld, a->dout, a->gate, a->up, a->T, a->F);
}

/* The same formula on both sides from the same bf16 gate and up (drawn in
 * fp32, rounded on the host); CUDA's expf is within 2 ulps, glibc's
 * within 1, so values differ by a few fp32 ulps (1e-6 of max plus 1e-5
 * relative covers the cancellation in 1 + g(1 - sig)), and bf16 outputs by
 * one bf16 ulp.  `offset` shifts every pointer by one element, 4 bytes for
 * dout and 2 for the bf16 ones (the unaligned path); ld > F: the bf16
 * outputs pitched, the pads kept. */
static inline void test_swiglu(int T, int F, int ld, int offset, int backward)
{
	struct gpu_case c;
	if (!case_begin(&c, "swiglu_%s T=%d F=%d ld=%d%s", backward ? "backward" : "forward", T, F, ld,
	                offset ? " unaligned" : ""))
		return;
	size_t off = offset ? 4 : 0, n = (size_t)T * F, n_out = (size_t)T * ld;
	bf16 *gate = rand_bf16(n, -6, 6), *up = rand_bf16(n, -2, 2);
	float *dout = rand_f32(n, -1, 1);
	bf16 *init = pitched_out_init((size_t)T, (size_t)F, (size_t)ld, 2);
	bf16 *ref = dup_bytes(init, n_out * 2), *ref_dg = dup_bytes(init, n_out * 2);
	bf16 *ref_du = dup_bytes(init, n_out * 2);
	double t0 = now_ms();
	if (backward)
		swiglu_backward_cpu(ref_dg, ref_du, ld, dout, gate, up, T, F);
	else
		swiglu_forward_cpu(ref, ld, gate, up, T, F);
	c.cpu_ms = now_ms() - t0;

	struct swiglu_args a = { 0 };
	a.gate = dev_from(gate, n * 2, off / 2);
	a.up = dev_from(up, n * 2, off / 2);
	a.dout = dev_from(dout, n * 4, off);
	a.T = T, a.F = F, a.ld = ld;
	if (backward) {
		a.dgate = case_out(&c, "dgate", n_out * 2, init, off / 2);
		a.dup = case_out(&c, "dup", n_out * 2, init, off / 2);
	} else {
		a.out = case_out(&c, "out", n_out * 2, init, off / 2);
	}
	case_run(&c, backward ? swiglu_bwd_gpu : swiglu_fwd_gpu, &a);
	if (backward) {
		check_rows(&c, "dgate", ref_dg, (size_t)T, (size_t)F, (size_t)ld, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "dgate", ref_dg, (size_t)T, (size_t)F, (size_t)ld, 2);
		check_rows(&c, "dup", ref_du, (size_t)T, (size_t)F, (size_t)ld, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "dup", ref_du, (size_t)T, (size_t)F, (size_t)ld, 2);
	} else {
		check_rows(&c, "out", ref, (size_t)T, (size_t)F, (size_t)ld, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "out", ref, (size_t)T, (size_t)F, (size_t)ld, 2);
	}
	case_end(&c);
}

#endif
