/* tests/ops/attention_case.h: the device side of an attention_forward or
 * attention_backward case, and the forward's launch
 * (the backward's checks run the forward first). */
#ifndef POROS_OPS_ATTENTION_CASE_H
#define POROS_OPS_ATTENTION_CASE_H

#include "cuda_check.h"

struct attention_case {
	bf16 *out;
	float *lse, *scratch, *dq, *dk, *dv;
	const float *q, *k, *v, *dout, *lse_in;
	const float *cos, *sin; /* the rotary tables, or NULL */
	const int32_t *pos;
	int B, S, H, G, D, ld_out;
};

/* The inputs both directions read: q (T,H,D), k and v (T,G,D), pos (T)
 * or NULL on the device, and the shape. */
static inline void attention_case_inputs(struct attention_case *a, const float *q, const float *k, const float *v,
                                         const int32_t *pos, int B, int S, int H, int G, int D)
{
	size_t T = (size_t)B * S;
	a->pos = pos ? dev_from(pos, T * 4, 0) : NULL;
	a->q = dev_from(q, T * H * D * 4, 0);
	a->k = dev_from(k, T * G * D * 4, 0);
	a->v = dev_from(v, T * G * D * 4, 0);
	a->B = B, a->S = S, a->H = H, a->G = G, a->D = D;
}

static inline void attention_fwd_gpu(const void *p)
{
	const struct attention_case *a = p;
	gpu->ops->attention_forward(a->out, a->ld_out, a->lse, a->scratch, a->q, a->k, a->v, a->cos, a->sin, a->pos,
	                            a->B, a->S, a->H, a->G, a->D);
}

#endif
