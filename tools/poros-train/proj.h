/* tools/poros-train/proj.h: projection m of one layer with its LoRA
 * adapter, out = in W^T (+ bias) + scale * B A dropout(in), forward and
 * backward over rows t0..t0+n-1 of a micro-batch (proj.c).  in and out
 * point at row t0; the inputs have rows K + E apart (layer.h); u's rows
 * are a->u[m]'s from t0.  Dimension letters as in layer.h, K and N
 * projection m's input and output features. */
#ifndef POROS_TRAIN_PROJ_H
#define POROS_TRAIN_PROJ_H

#include "layer.h"

/* out (n,N) fp32 = the projection of in (n,K). */
void proj_forward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                  int m, bf16 *in, float *out, int t0, int n, struct pass p);
/* out (n,N) bf16, contiguous: the same sum rounded once (gate and up, no
 * bias). */
void proj_forward_bf16(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                       int m, bf16 *in, bf16 *out, int t0, int n, struct pass p);
/* u (n,R) = dropout(in) A^T alone: what the backward reads of a
 * recomputation whose output is not needed (nothing without LoRA on m). */
void proj_lora_u(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                 int m, const bf16 *in, int t0, int n, struct pass p);
/* din (n,K) (+)= the gradient through the projection given dout (n,N)
 * fp32, or dout16 already bf16 (dout NULL; rows N + E apart); the LoRA
 * gradients accumulate into c->lora_grad. */
void proj_backward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                   int m, const bf16 *in, const float *dout, const bf16 *dout16, float *din, int accumulate,
                   int t0, int n, struct pass p);

#endif
