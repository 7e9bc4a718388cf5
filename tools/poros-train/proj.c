/* tools/poros-train/proj.c: one LoRA projection of a layer, forward and
 * backward, over rows t0..t0+n-1 of a micro-batch (proj.h).  The one file
 * that knows how the LoRA extension lays A and B out in the weight's spare
 * rows and columns and u's parts in the inputs' E spare columns, and which
 * dropout mask each call draws. */
#include "proj.h"

#include "util/util.h"

/* The dropout masks of (step, micro-batch, layer, projection, first row):
 * the same in both schedules, the same in forward, recompute and
 * backward, the same for a micro-batch on any rank.  A mask element is
 * indexed by its row within the call, so an MLP chunk starting at row
 * t0 > 0 mixes t0 in to get masks of its own. */
static uint64_t dropout_seed(const struct layer_ctx *c, struct pass p, int layer, int m, int t0)
{
	uint64_t h = poros_mix64(c->seed ^ 0xd209007ull);

	h = poros_mix64(h ^ (uint64_t)p.step);
	h = poros_mix64(h ^ (uint64_t)(c->mb_base + p.mb)); /* the step's micro-batch over all ranks */
	h = poros_mix64(h ^ ((uint64_t)layer * N_PROJ + (uint64_t)m));
	return t0 > 0 ? poros_mix64(h ^ (uint64_t)t0) : h;
}

/* With the extension, A's three parts as lora_weight_ext left them in the
 * weight's rows N..N+3R-1 (the u GEMM reads them there instead of
 * splitting A again); else NULL. */
static const bf16 *ext_a3(const struct layer_ctx *c, const struct layer_view *w, const struct lora_slot *s, int m)
{
	return c->E > 0 ? w->w[m] + (size_t)s->n_out * w->ld[m] : NULL;
}

/* The LoRA calls over rows t0..t0+n-1 of a group (layer.h): with dropout
 * one a micro-batch, segment i its rows, pass (its mask) and gradient
 * leaf, as the call of that micro-batch alone would make them; without,
 * one call over all (u, du and the input gradients are per row, and the
 * backend keeps each row's bits at any row count: backend.h,
 * set_row_unit; the backward sums dA and dB a micro-batch at a time,
 * ops.h's segs).  A group's calls cover all its rows (the MLP is one chunk
 * there: plan.c). */
static int segments(const struct layer_ctx *c, int t0, int n)
{
	if (c->mbs <= 1 || c->dropout == 0.0f)
		return 1;
	if (t0 != 0 || n != c->T)
		die(EXIT_RUNTIME, "a group's LoRA call over rows %d..%d of %d", t0, t0 + n - 1, c->T);
	return c->mbs;
}

static struct pass segment_pass(struct pass p, int i)
{
	return (struct pass){ p.step, p.mb + i };
}

/* u (n,R) = dropout(in) A^T for projection m; then, with the LoRA
 * extension, u's parts into in's spare columns for the base GEMM to sum,
 * else out (n,N) = scale * u B^T for the base GEMM to add onto. */
static void proj_lora_forward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a,
                              int layer, int m, bf16 *in, float *out, int t0, int n, struct pass p)
{
	const struct lora_slot *s = &c->slot[layer * N_PROJ + m];
	int K = s->n_in, ext = c->E > 0, segs = segments(c, t0, n), rows = n / segs;

	for (int i = 0; i < segs; i++) {
		bf16 *in_i = in + (size_t)i * rows * (K + c->E);

		c->op->lora_forward(&(struct lora_fwd_args){
			.out = ext ? NULL : out + (size_t)i * rows * s->n_out,
			.u = a->u[m] + (size_t)(t0 + i * rows) * c->R, .ext = ext ? in_i + K : NULL, .in = in_i,
			.ld_in = K + c->E, .A = c->lora + s->a, .B = c->lora + s->b, .scale = c->lora_scale,
			.dropout_p = c->dropout, .dropout_seed = dropout_seed(c, segment_pass(p, i), layer, m, t0),
			.T = rows, .K = K, .N = s->n_out, .R = c->R, .scratch = c->g.lora_scratch,
			.A3 = ext_a3(c, w, s, m), .ld_a3 = w->ld[m] });
	}
}

/* u alone, as proj_lora_forward computes it: no output, no extension parts. */
void proj_lora_u(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                 int m, const bf16 *in, int t0, int n, struct pass p)
{
	const struct lora_slot *s = &c->slot[layer * N_PROJ + m];
	int segs = segments(c, t0, n), rows = n / segs;

	if (s->a < 0)
		return;
	for (int i = 0; i < segs; i++)
		c->op->lora_forward(&(struct lora_fwd_args){
			.u = a->u[m] + (size_t)(t0 + i * rows) * c->R, .in = in + (size_t)i * rows * (s->n_in + c->E),
			.ld_in = s->n_in + c->E, .A = c->lora + s->a, .B = c->lora + s->b, .scale = c->lora_scale,
			.dropout_p = c->dropout, .dropout_seed = dropout_seed(c, segment_pass(p, i), layer, m, t0),
			.T = rows, .K = s->n_in, .N = 0, .R = c->R, .scratch = c->g.lora_scratch,
			.A3 = ext_a3(c, w, s, m), .ld_a3 = w->ld[m] });
}

/* out (n,N) = (scale * B A dropout(in) + in @ W^T) (+ bias).  With the
 * LoRA extension, one GEMM over K + E
 * sums base, LoRA and bias.  Otherwise the LoRA term is written first and
 * the base GEMM adds onto it in its epilogue, so the (n,N) fp32 output is
 * written once and read once, not read-modify-written by a second pass. */
void proj_forward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                  int m, bf16 *in, float *out, int t0, int n, struct pass p)
{
	const struct lora_slot *s = &c->slot[layer * N_PROJ + m];
	const bf16 *bias = m < 4 ? w->bias[m] : NULL;
	int K = s->n_in, ldx = K + c->E, ext = s->a >= 0 && c->E > 0;

	if (s->a >= 0)
		proj_lora_forward(c, w, a, layer, m, in, out, t0, n, p);
	if (ext) /* the bias rides in the extension too */
		c->op->matmul_forward(out, in, ldx, w->w[m], w->ld[m], NULL, n, K + c->E, s->n_out, 0);
	else
		c->op->matmul_forward(out, in, ldx, w->w[m], w->ld[m], bias, n, K, s->n_out, s->a >= 0);
}

/* proj_forward for gate and up (no bias) into out (n,N) bf16, contiguous:
 * the GEMM's fp32 sum rounded once, all that swiglu reads.  With the
 * extension, or without LoRA on m, one GEMM writes bf16.  The fallback
 * (LoRA, no extension) needs an fp32 output for the base GEMM to add onto:
 * proj_forward into dh, then rounded.  dh (mlp_chunk,F) fp32 is free
 * there: it is live only in the backward, from down_proj's backward to
 * swiglu_backward within a chunk, never across a chunk's forward or
 * recomputation, and plan_shared lays it apart from the chunk's gate, up,
 * h and LoRA scratch (past them, or, with the activations kept whole, at
 * the region's `gate` offset, which only ops outside the MLP share). */
void proj_forward_bf16(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a,
                       int layer, int m, bf16 *in, bf16 *out, int t0, int n, struct pass p)
{
	const struct lora_slot *s = &c->slot[layer * N_PROJ + m];
	int K = s->n_in, N = s->n_out;

	if (s->a >= 0 && c->E == 0) {
		proj_forward(c, w, a, layer, m, in, c->g.dh, t0, n, p);
		c->op->cast_f32_to_bf16(out, N, c->g.dh, n, N);
		return;
	}
	if (s->a >= 0) /* u's parts into in's spare columns */
		proj_lora_forward(c, w, a, layer, m, in, NULL, t0, n, p);
	c->op->matmul_forward_bf16(out, in, K + c->E, w->w[m], w->ld[m], n, s->a >= 0 ? K + c->E : K, N);
}

/* din (n,K) (+)= gradient through projection m given dout (n,N), fp32 (then
 * rounded here) or already bf16 (dout16, dout NULL; rows N + E apart, as
 * swiglu_backward writes them).  Both the base GEMM and the adapter read the bf16 one.  With the
 * extension in backward, du's parts go into its spare columns and one GEMM
 * over N + E sums both input gradients; otherwise the adapter's goes first
 * and the base GEMM adds onto it.  LoRA gradients accumulate into the flat
 * gradient buffer. */
void proj_backward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                   int m, const bf16 *in, const float *dout, const bf16 *dout16, float *din, int accumulate,
                   int t0, int n, struct pass p)
{
	const struct lora_slot *s = &c->slot[layer * N_PROJ + m];
	int N = s->n_out, K = s->n_in, ld = N + c->E, ext = s->a >= 0 && c->ext_bwd;

	if (dout) {
		c->op->cast_f32_to_bf16(c->g.dout16, ld, dout, n, N);
		dout16 = c->g.dout16;
	}
	if (s->a >= 0) {
		/* without dropout one call serves a group, each micro-batch's dA
		 * and dB into its leaf (the leaves lie a region apart) */
		int whole = c->mbs > 1 && c->dropout == 0.0f, segs = whole ? 1 : segments(c, t0, n), rows = n / segs;

		/* dA (R,K) += du^T in, dB (N,R) += scale * dout^T u, din (+)= du A */
		for (int i = 0; i < segs; i++) {
			const bf16 *dout_i = dout16 + (size_t)i * rows * ld;
			float *grad = c->mbs > 1 ? c->grad_mb[i] : c->lora_grad;

			c->op->lora_backward(&(struct lora_bwd_args){
				.segs = whole ? c->mbs : 1, .seg_stride = whole ? c->grad_mb[1] - c->grad_mb[0] : 0,
				.din = ext ? NULL : din + (size_t)i * rows * K, .dA = grad + s->a, .dB = grad + s->b,
				.du = c->g.du + (size_t)i * rows * c->R, .ext = ext ? (bf16 *)dout_i + N : NULL,
				.dout = dout_i, .ld_dout = ld, .in = in + (size_t)i * rows * (K + c->E), .ld_in = K + c->E,
				.u = a->u[m] + (size_t)(t0 + i * rows) * c->R, .A = c->lora + s->a, .B = c->lora + s->b,
				.scale = c->lora_scale, .dropout_p = c->dropout,
				.dropout_seed = dropout_seed(c, segment_pass(p, i), layer, m, t0), .T = rows, .K = K, .N = N,
				.R = c->R, .accumulate = accumulate, .scratch = c->g.lora_scratch,
				.B3 = c->E > 0 ? w->w[m] + K : NULL, .ld_b3 = w->ld[m] });
		}
		if (!ext)
			accumulate = 1;
	}
	/* din (n,K) (+)= dout W */
	c->op->matmul_backward_input(din, dout16, ld, w->w[m], w->ld[m], n, K, ext ? N + c->E : N, accumulate);
}
