/* tools/poros-train/layer.c: the decoder (Qwen2/Qwen3/Llama) with LoRA,
 * forward and hand-written backward, op by op.
 *
 *   x0 = embed(tokens)                                   (T,C)
 *   per layer:
 *     xn  = rmsnorm(x)                                   (T,C)
 *     q, k, v = proj(xn)  [+ per-head rmsnorm (Qwen3)]   (T,H*D) (T,G*D) (T,G*D)
 *     att = causal_gqa_attention(rope(q), rope(k), v)    (T,H*D)
 *       (the attention ops apply rope as they pack q and k, and its
 *       backward in theirs)
 *     x2  = x + o_proj(att)                              (T,C)
 *     xn2 = rmsnorm(x2)
 *     h   = silu(gate_proj(xn2)) * up_proj(xn2)          (T,F)
 *     out = x2 + down_proj(h)                            (T,C)
 *     (the MLP mlp_chunk rows at a time: (chunk,F) buffers at long T)
 *   logits = lm_head(rmsnorm(x_L)); loss = cross_entropy (T,V), chunked
 *
 * and every proj(x) = x W^T (+ bias) + scale * B A dropout(x), A (R,K),
 * B (N,R).  Nothing here knows about schedules, memory or profiling: the
 * schedule (schedule.c) hands each call a layer's weights and activation
 * buffers; a profiled run hands in a timed ops table (profile.c). */
#include "layer.h"

#include "util/util.h"

/* The dropout masks of (step, micro-batch, layer, projection, first row):
 * the same in both schedules, the same in forward, recompute and
 * backward, the same for a micro-batch on any rank.  A mask element is indexed by its row within the call, so an
 * MLP chunk starting at row t0 > 0 mixes t0 in to get masks of its own. */
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

/* u (n,R) = dropout(in) A^T for projection m over rows t0..t0+n-1 (u's
 * rows are a->u[m]'s from t0), in (n,K) with rows K + E apart; then, with
 * the LoRA extension, u's parts into in's spare columns for the base GEMM
 * to sum, else out (n,N) = scale * u B^T for the base GEMM to add onto. */
static void proj_lora_forward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a,
                              int layer, int m, bf16 *in, float *out, int t0, int n, struct pass p)
{
	const struct lora_slot *s = &c->slot[layer * N_PROJ + m];
	int K = s->n_in, ext = c->E > 0;

	c->op->lora_forward(&(struct lora_fwd_args){
		.out = ext ? NULL : out, .u = a->u[m] + (size_t)t0 * c->R, .ext = ext ? in + K : NULL, .in = in,
		.ld_in = K + c->E, .A = c->lora + s->a, .B = c->lora + s->b, .scale = c->lora_scale,
		.dropout_p = c->dropout, .dropout_seed = dropout_seed(c, p, layer, m, t0), .T = n, .K = K,
		.N = s->n_out, .R = c->R, .scratch = c->g.lora_scratch, .A3 = ext_a3(c, w, s, m),
		.ld_a3 = w->ld[m] });
}

/* out (n,N) = (scale * B A dropout(in) + in @ W^T) (+ bias) over rows
 * t0..t0+n-1 of the micro-batch (in and out point at row t0), in (n,K)
 * with rows K + E apart.  With the LoRA extension, one GEMM over K + E
 * sums base, LoRA and bias.  Otherwise the LoRA term is written first and
 * the base GEMM adds onto it in its epilogue, so the (n,N) fp32 output is
 * written once and read once, not read-modify-written by a second pass. */
static void proj_forward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
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
static void proj_forward_bf16(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a,
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
 * swiglu_backward writes them), over rows t0..t0+n-1 as in proj_forward.
 * Both the base GEMM and the adapter read the bf16 one.  With the
 * extension in backward, du's parts go into its spare columns and one GEMM
 * over N + E sums both input gradients; otherwise the adapter's goes first
 * and the base GEMM adds onto it.  LoRA gradients accumulate into the flat
 * gradient buffer. */
static void proj_backward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
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
		/* dA (R,K) += du^T in, dB (N,R) += scale * dout^T u, din (+)= du A */
		c->op->lora_backward(&(struct lora_bwd_args){
			.din = ext ? NULL : din, .dA = c->lora_grad + s->a, .dB = c->lora_grad + s->b, .du = c->g.du,
			.ext = ext ? (bf16 *)dout16 + N : NULL, .dout = dout16, .ld_dout = ld, .in = in, .ld_in = K + c->E,
			.u = a->u[m] + (size_t)t0 * c->R, .A = c->lora + s->a, .B = c->lora + s->b,
			.scale = c->lora_scale, .dropout_p = c->dropout, .dropout_seed = dropout_seed(c, p, layer, m, t0),
			.T = n, .K = K, .N = N, .R = c->R, .accumulate = accumulate, .scratch = c->g.lora_scratch,
			.B3 = c->E > 0 ? w->w[m] + K : NULL, .ld_b3 = w->ld[m] });
		if (!ext)
			accumulate = 1;
	}
	/* din (n,K) (+)= dout W */
	c->op->matmul_backward_input(din, dout16, ld, w->w[m], w->ld[m], n, K, ext ? N + c->E : N, accumulate);
}

/* u (n,R) = dropout(in) A^T for projection m over rows t0..t0+n-1, all
 * its backward reads of a recomputation (nothing when m has no LoRA). */
static void proj_lora_u(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                        int m, const bf16 *in, int t0, int n, struct pass p)
{
	const struct lora_slot *s = &c->slot[layer * N_PROJ + m];

	if (s->a < 0)
		return;
	c->op->lora_forward(&(struct lora_fwd_args){
		.u = a->u[m] + (size_t)t0 * c->R, .in = in, .ld_in = s->n_in + c->E, .A = c->lora + s->a,
		.B = c->lora + s->b, .scale = c->lora_scale, .dropout_p = c->dropout,
		.dropout_seed = dropout_seed(c, p, layer, m, t0), .T = n, .K = s->n_in, .N = 0, .R = c->R,
		.scratch = c->g.lora_scratch, .A3 = ext_a3(c, w, s, m), .ld_a3 = w->ld[m] });
}

/* One chunk of the MLP: rows t0..t0+n-1 of the micro-batch and their
 * gate, up and h, at row t0 of the (T,F) buffers when a keeps them whole,
 * else in the one chunk's buffers. */
struct mlp_chunk {
	int t0, n;
	bf16 *gate, *up;
	bf16 *h;
};

static struct mlp_chunk mlp_chunk_at(const struct layer_ctx *c, const struct layer_act *a, int t0)
{
	struct mlp_chunk k = { t0, c->T - t0 < c->mlp_chunk ? c->T - t0 : c->mlp_chunk, a->gate, a->up, a->h };

	if (a->mlp_whole) {
		k.gate += (size_t)t0 * c->F;
		k.up += (size_t)t0 * c->F;
		k.h += (size_t)t0 * (c->F + c->E);
	}
	return k;
}

/* gate, up and h = silu(gate) * up of one chunk. */
static void mlp_hidden(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                       const struct mlp_chunk *k, struct pass p)
{
	bf16 *xn2 = a->xn2 + (size_t)k->t0 * (c->C + c->E);

	proj_forward_bf16(c, w, a, layer, PROJ_GATE, xn2, k->gate, k->t0, k->n, p);
	proj_forward_bf16(c, w, a, layer, PROJ_UP, xn2, k->up, k->t0, k->n, p);
	c->op->swiglu_forward(k->h, c->F + c->E, k->gate, k->up, k->n, c->F);
}

/* The MLP forward of one chunk: out's rows (out (T,C)) = x2 + down(h). */
static void mlp_forward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                        const struct mlp_chunk *k, float *out, struct pass p)
{
	size_t row = (size_t)k->t0 * c->C;

	mlp_hidden(c, w, a, layer, k, p);
	proj_forward(c, w, a, layer, PROJ_DOWN, k->h, out + row, k->t0, k->n, p);
	c->op->add_inplace(out + row, a->x2 + row, (long)k->n * c->C);
}

/* The MLP of one chunk again for its backward: gate, up, h and down_proj's
 * u, not down_proj's output. */
static void mlp_recompute(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a,
                          int layer, const struct mlp_chunk *k, struct pass p)
{
	mlp_hidden(c, w, a, layer, k, p);
	proj_lora_u(c, w, a, layer, PROJ_DOWN, k->h, k->t0, k->n, p);
}

/* Micro-batch mb's positions for attention and rope: NULL where every row
 * is one document (positions t % S), which the ops read as the same
 * positions and mask, so the attention needs no mask below the diagonal
 * and no first-key table; the same bits either way. */
static const int32_t *layer_pos(const struct layer_ctx *c, int mb)
{
	return c->pos && !(c->pos_plain && c->pos_plain[mb]) ? c->pos + (size_t)mb * c->T : NULL;
}

void embed_forward(const struct layer_ctx *c, float *out, int mb)
{
	/* the rows were gathered on the host (staging.c): row t for token t */
	c->op->embedding_forward(out, c->iota, c->embed_rows + (size_t)mb * c->T * c->C, c->T, c->C);
}

/* The attention block and the MLP's norm: x2 = x + o(attn(q, k, v)),
 * xn2 = norm(x2); the attention op itself only when run_attention. */
static void attention_block(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                            const float *x, int run_attention, struct pass p)
{
	const struct poros_ops *op = c->op;
	int T = c->T, C = c->C, E = c->E, qk = c->qk_norm;
	const int32_t *pos = layer_pos(c, p.mb); /* (T) or NULL */

	a->x = x;
	op->rmsnorm_forward(NULL, a->xn, C + E, a->rstd1, x, w->in_norm, c->eps, T, C);
	proj_forward(c, w, a, layer, PROJ_Q, a->xn, qk ? a->q_pre : a->q, 0, T, p);
	proj_forward(c, w, a, layer, PROJ_K, a->xn, qk ? a->k_pre : a->k, 0, T, p);
	proj_forward(c, w, a, layer, PROJ_V, a->xn, a->v, 0, T, p);
	if (qk) { /* Qwen3: RMSNorm over each head's D features, before rope */
		op->rmsnorm_forward(a->q, NULL, c->D, a->rstd_q, a->q_pre, w->q_norm, c->eps, T * c->H, c->D);
		op->rmsnorm_forward(a->k, NULL, c->D, a->rstd_k, a->k_pre, w->k_norm, c->eps, T * c->G, c->D);
	}
	/* q, k stay unrotated: the attention ops rotate them as they pack them */
	if (run_attention)
		op->attention_forward(a->att, c->HD + E, a->lse, c->attn_scratch, a->q, a->k, a->v, c->rope_cos,
		                      c->rope_sin, pos, c->B, c->S, c->H, c->G, c->D);
	proj_forward(c, w, a, layer, PROJ_O, a->att, a->x2, 0, T, p);
	op->add_inplace(a->x2, x, (long)T * C);
	op->rmsnorm_forward(NULL, a->xn2, C + E, a->rstd2, a->x2, w->post_norm, c->eps, T, C);
}

void layer_forward(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                   const float *x, float *out, struct pass p)
{
	attention_block(c, w, a, layer, x, 1, p);
	/* x is dead from here on, so out may alias it */
	for (int t0 = 0; t0 < c->T; t0 += c->mlp_chunk) {
		struct mlp_chunk k = mlp_chunk_at(c, a, t0);

		mlp_forward(c, w, a, layer, &k, out, p);
	}
}

void layer_recompute(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                     const float *x, struct pass p)
{
	attention_block(c, w, a, layer, x, !a->att_kept, p);
}

/* dq's buffer: x2's, which the backward reads last in the MLP's norm, when
 * it holds (T,H*D); else its own. */
static float *layer_dq(const struct layer_ctx *c, const struct layer_act *a)
{
	return c->HD <= c->C ? a->x2 : c->g.dq;
}

void layer_backward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                    float *dx, struct pass p)
{
	const struct poros_ops *op = c->op;
	const struct grad_scratch *g = &c->g;
	int T = c->T, C = c->C, E = c->E, qk = c->qk_norm;
	float *dq = layer_dq(c, a), *dk = g->dk;
	const int32_t *pos = layer_pos(c, p.mb); /* (T) or NULL */

	/* MLP: out = x2 + down(silu(gate(xn2)) * up(xn2)), chunk by chunk (each
	 * recomputed first unless kept, its LoRA gradients added in chunk
	 * order); dx holds dout, then dx2 */
	for (int t0 = 0; t0 < T; t0 += c->mlp_chunk) {
		struct mlp_chunk k = mlp_chunk_at(c, a, t0);
		const bf16 *xn2 = a->xn2 + (size_t)t0 * (c->C + c->E);
		float *dxn = g->dxn + (size_t)t0 * c->C;

		if (!a->mlp_whole)
			mlp_recompute(c, w, a, layer, &k, p);
		proj_backward(c, w, a, layer, PROJ_DOWN, k.h, dx + (size_t)t0 * c->C, NULL, g->dh, 0, t0, k.n, p);
		op->swiglu_backward(g->dgate, g->dup, c->F + c->E, g->dh, k.gate, k.up, k.n, c->F);
		proj_backward(c, w, a, layer, PROJ_GATE, xn2, NULL, g->dgate, dxn, 0, t0, k.n, p);
		proj_backward(c, w, a, layer, PROJ_UP, xn2, NULL, g->dup, dxn, 1, t0, k.n, p);
	}
	op->rmsnorm_backward(dx, g->dxn, a->x2, w->post_norm, a->rstd2, T, c->C); /* dx2 += norm'(dxn) */

	/* attention: x2 = x + o(attn(rope(q), rope(k), v)), q/k/v of xn = norm(x) */
	proj_backward(c, w, a, layer, PROJ_O, a->att, dx, NULL, g->datt, 0, 0, T, p);
	/* dq, dk at the unrotated q, k: the op turns them back through rope */
	op->attention_backward(dq, g->dk, g->dv, c->attn_scratch, g->datt, a->att, c->HD + E, a->q, a->k, a->v,
	                       c->rope_cos, c->rope_sin, a->lse, pos, c->B, c->S, c->H, c->G, c->D);
	if (qk) { /* through the per-head norms (rmsnorm_backward accumulates) */
		c->be->memset_zero(g->dq_pre, (size_t)T * c->HD * sizeof(float), STREAM_COMPUTE);
		c->be->memset_zero(g->dk_pre, (size_t)T * c->GD * sizeof(float), STREAM_COMPUTE);
		op->rmsnorm_backward(g->dq_pre, dq, a->q_pre, w->q_norm, a->rstd_q, T * c->H, c->D);
		op->rmsnorm_backward(g->dk_pre, g->dk, a->k_pre, w->k_norm, a->rstd_k, T * c->G, c->D);
		dq = g->dq_pre;
		dk = g->dk_pre;
	}
	/* xn again (xn2 took its buffer): the forward's bits, and rstd1's */
	op->rmsnorm_forward(NULL, a->xn, C + E, a->rstd1, a->x, w->in_norm, c->eps, T, C);
	proj_backward(c, w, a, layer, PROJ_Q, a->xn, dq, NULL, g->dxn, 0, 0, T, p);
	proj_backward(c, w, a, layer, PROJ_K, a->xn, dk, NULL, g->dxn, 1, 0, T, p);
	proj_backward(c, w, a, layer, PROJ_V, a->xn, g->dv, NULL, g->dxn, 1, 0, T, p);
	op->rmsnorm_backward(dx, g->dxn, a->x, w->in_norm, a->rstd1, T, c->C); /* dx = dx2 + norm'(dxn) */
}

/* The head over T tokens in chunks of c->chunk: final norm, logits (n,V) =
 * hn lm_head^T, the loss (and dlogits, scaled by dloss); with dres, also
 * dhn (n,C) = dlogits lm_head and dres = norm'(dhn).  Without, the loss
 * op's dlogits (zeros at dloss 0) are left unread. */
static void head_pass(const struct layer_ctx *c, float *dres, const float *hidden, int mb, float dloss)
{
	const struct poros_ops *op = c->head_op;
	int T = c->T, C = c->C, V = c->V;

	op->rmsnorm_forward(NULL, c->hn, C, c->head_rstd, hidden, c->final_norm, c->eps, T, C);
	for (int off = 0; off < T; off += c->chunk) {
		int n = T - off < c->chunk ? T - off : c->chunk;

		op->matmul_forward(c->logits, c->hn + (size_t)off * C, C, c->lm_head, C, NULL, n, C, V, 0);
		op->crossentropy_forward_backward(c->dlogits, c->losses + (size_t)mb * T + off, c->logits,
		                                  c->targets + (size_t)mb * T + off, dloss, n, V);
		if (dres)
			op->matmul_backward_input(c->dhn + (size_t)off * C, c->dlogits, V, c->lm_head, C, n, C, V, 0);
	}
	if (dres) {
		c->be->memset_zero(dres, (size_t)T * C * sizeof(float), STREAM_COMPUTE);
		op->rmsnorm_backward(dres, c->dhn, hidden, c->final_norm, c->head_rstd, T, C);
	}
}

void head_forward_backward(const struct layer_ctx *c, float *dres, const float *hidden, int mb, float dloss)
{
	head_pass(c, dres, hidden, mb, dloss);
}

void head_loss(const struct layer_ctx *c, const float *hidden, int mb)
{
	head_pass(c, NULL, hidden, mb, 0.0f);
}
