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
 * B (N,R), in proj.c with the LoRA extension and the dropout masks.
 * Nothing here knows about schedules, memory or profiling: the schedule
 * (schedule.c) hands each call a layer's weights and activation buffers;
 * a profiled run hands in a timed ops table (profile.c). */
#include "layer.h"

#include "proj.h"

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
static const int32_t *mb_pos(const struct layer_ctx *c, int mb)
{
	return c->pos && !(c->pos_plain && c->pos_plain[mb]) ? c->pos + (size_t)mb * c->T_mb : NULL;
}

void embed_forward(const struct layer_ctx *c, float *out, int mb)
{
	/* the rows were gathered on the host (staging.c): row t for token t */
	c->op->embedding_forward(out, c->iota, c->embed_rows + (size_t)mb * c->T * c->C, c->T, c->C);
}

/* Call i's rows of the attention's operands in a group (layer.h): one
 * call over all of them where the backend's attention keeps a sequence's
 * bits at any batch (c->attn_whole), else a call a micro-batch, as a call
 * of one does, since cuDNN plans by the batch and its backward splits its
 * sums by it (a batch of 8 changed 40-head rows' bits on the H200:
 * docs/perf-notes.md). */
struct attn_rows {
	bf16 *att;
	float *lse, *q, *k, *v;
	const int32_t *pos;
	int B;
	size_t t; /* the first row */
};

static int attn_calls(const struct layer_ctx *c)
{
	return c->attn_whole ? 1 : c->mbs;
}

/* The backend decides attn_whole after the plan (engine_plan sizes with
 * none), and neither call bounds the other: a micro-batch's call may take
 * the cuDNN route's backward and its parts (ops.h) where the group's is
 * over the route's bounds, so the scratch fits the larger. */
size_t layer_attn_scratch_floats(const struct layer_ctx *c, size_t (*floats)(int B, int S, int H, int G, int D))
{
	size_t whole = floats(c->B, c->S, c->H, c->G, c->D), one = floats(c->B / c->mbs, c->S, c->H, c->G, c->D);

	return whole > one ? whole : one;
}

/* The positions of micro-batches mb..mb+n-1: NULL only where all are one
 * document a row (mb_pos; the same bits either way). */
static const int32_t *group_pos(const struct layer_ctx *c, int mb, int n)
{
	for (int i = 0; i < n; i++)
		if (mb_pos(c, mb + i))
			return c->pos + (size_t)mb * c->T_mb;
	return NULL;
}

static struct attn_rows attn_rows_of(const struct layer_ctx *c, const struct layer_act *a, int mb, int i)
{
	int n = c->mbs / attn_calls(c), B = c->B / attn_calls(c);
	size_t t = (size_t)i * n * c->T_mb;

	return (struct attn_rows){ a->att + t * (c->HD + c->E), a->lse + (size_t)i * B * c->H * c->S, a->q + t * c->HD,
	                           a->k + t * c->GD, a->v + t * c->GD, group_pos(c, mb + i * n, n), B, t };
}

/* The attention block and the MLP's norm: x2 = x + o(attn(q, k, v)),
 * xn2 = norm(x2); the attention op itself only when run_attention. */
static void attention_block(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                            const float *x, int run_attention, struct pass p)
{
	const struct poros_ops *op = c->op;
	int T = c->T, C = c->C, E = c->E, qk = c->qk_norm;

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
		for (int i = 0; i < attn_calls(c); i++) {
			struct attn_rows r = attn_rows_of(c, a, p.mb, i);

			op->attention_forward(r.att, c->HD + E, r.lse, c->attn_scratch, r.q, r.k, r.v, c->rope_cos,
			                      c->rope_sin, r.pos, r.B, c->S, c->H, c->G, c->D);
		}
	proj_forward(c, w, a, layer, PROJ_O, a->att, a->x2, 0, T, p);
	op->add_inplace(a->x2, x, (long)T * C);
	op->rmsnorm_forward(NULL, a->xn2, C + E, a->rstd2, a->x2, w->post_norm, c->eps, T, C);
}

void layer_forward(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                   const float *x, float *out, struct pass p)
{
	attention_block(c, w, a, layer, x, 1, p);
	/* x is dead from here on, so out may alias it (once out_wait's copy of x is done) */
	if (c->out_wait)
		c->be->stream_wait_event(STREAM_COMPUTE, c->out_wait);
	for (int t0 = 0; t0 < c->T; t0 += c->mlp_chunk) {
		struct mlp_chunk k = mlp_chunk_at(c, a, t0);

		mlp_forward(c, w, a, layer, &k, out, p);
	}
}

void layer_recompute(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                     const float *x, struct pass p)
{
	if (a->att_kept == KEPT_SUBLAYER) { /* x2 and all before it kept: its norm, xn2's buffer is xn's */
		a->x = x;
		c->op->rmsnorm_forward(NULL, a->xn2, c->C + c->E, a->rstd2, a->x2, w->post_norm, c->eps, c->T, c->C);
		return;
	}
	attention_block(c, w, a, layer, x, a->att_kept == KEPT_NONE, p);
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
	for (int i = 0; i < attn_calls(c); i++) {
		struct attn_rows r = attn_rows_of(c, a, p.mb, i);
		size_t t = r.t;

		op->attention_backward(dq + t * c->HD, g->dk + t * c->GD, g->dv + t * c->GD, c->attn_scratch,
		                       g->datt + t * c->HD, r.att, c->HD + E, r.q, r.k, r.v, c->rope_cos, c->rope_sin,
		                       r.lse, r.pos, r.B, c->S, c->H, c->G, c->D);
	}
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
	int T = c->T, C = c->C, V = c->V, n;

	op->rmsnorm_forward(NULL, c->hn, C, c->head_rstd, hidden, c->final_norm, c->eps, T, C);
	/* The chunk is what the plan's region holds, which differs between
	 * schedules and groups; its products give every row the bits of
	 * HEAD_CHUNK-row calls (backend.h's row unit, here HEAD_CHUNK), and a
	 * part of fewer rows is always the last T % HEAD_CHUNK, its own call:
	 * the same bits at any chunk. */
	c->be->set_row_unit(HEAD_CHUNK, HEAD_CHUNK);
	for (int off = 0; off < T; off += n) {
		n = T - off < c->chunk ? T - off : c->chunk;
		if (n > HEAD_CHUNK && n % HEAD_CHUNK)
			n -= n % HEAD_CHUNK;

		op->matmul_forward(c->logits, c->hn + (size_t)off * C, C, c->lm_head, C, NULL, n, C, V, 0);
		op->crossentropy_forward_backward(c->dlogits, c->losses + (size_t)mb * T + off, c->logits,
		                                  c->targets + (size_t)mb * T + off, dloss, n, V);
		if (dres)
			op->matmul_backward_input(c->dhn + (size_t)off * C, c->dlogits, V, c->lm_head, C, n, C, V, 0);
	}
	c->be->set_row_unit(c->T_mb, c->choose_rows);
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
