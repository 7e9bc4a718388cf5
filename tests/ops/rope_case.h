/* tests/ops/rope_case.h: a rope_forward or rope_backward case on the GPU
 * against the CPU, either direction; rope_forward.c and rope_backward.c
 * run their cases through it. */
#ifndef POROS_OPS_ROPE_CASE_H
#define POROS_OPS_ROPE_CASE_H

#include "cuda_check.h"

struct rope_args {
	float *x;
	const float *cos, *sin;
	const int32_t *pos;
	int B, S, nh, D;
};

static inline void rope_fwd_gpu(const void *p)
{
	const struct rope_args *a = p;
	gpu->ops->rope_forward(a->x, a->cos, a->sin, a->pos, a->B, a->S, a->nh, a->D);
}

static inline void rope_bwd_gpu(const void *p)
{
	const struct rope_args *a = p;
	gpu->ops->rope_backward(a->x, a->cos, a->sin, a->pos, a->B, a->S, a->nh, a->D);
}

/* One rotation per pair: x1 c - x2 s, each product rounded, then the
 * sum, on both sides (numerics.h's pair: the device spells the roundings
 * out instead of fusing a multiply-add), so the bits are the CPU's. */
static inline void test_rope(int B, int S, int nh, int D, int backward, int docs)
{
	struct gpu_case c;
	if (!case_begin(&c, "rope_%s B=%d S=%d nh=%d D=%d docs=%d", backward ? "backward" : "forward", B, S, nh, D,
	                docs))
		return;
	int32_t *pos = doc_positions(B, S, docs);
	size_t n = (size_t)B * S * nh * D, half = (size_t)D / 2;
	float *x0 = rand_f32(n, -2, 2);
	float *cs = host_alloc((size_t)S * half * 4), *sn = host_alloc((size_t)S * half * 4);
	ref_rope_tables(cs, sn, S, D, 10000.0);
	float *ref = dup_bytes(x0, n * 4);
	double t0 = now_ms();
	if (backward)
		rope_backward_cpu(ref, cs, sn, pos, B, S, nh, D);
	else
		rope_forward_cpu(ref, cs, sn, pos, B, S, nh, D);
	c.cpu_ms = now_ms() - t0;

	struct rope_args a = { NULL, dev_from(cs, (size_t)S * half * 4, 0), dev_from(sn, (size_t)S * half * 4, 0),
	                       pos ? dev_from(pos, (size_t)B * S * 4, 0) : NULL, B, S, nh, D };
	a.x = case_out(&c, "x", n * 4, x0, 0);
	case_run(&c, backward ? rope_bwd_gpu : rope_fwd_gpu, &a);
	check_exact(&c, "x", ref, n * 4, 4);
	case_end(&c);
}

#endif
