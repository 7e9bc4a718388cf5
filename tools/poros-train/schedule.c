/* tools/poros-train/schedule.c: the two schedules over layer.c's math.
 *
 * Parity: both call the same layer_forward / layer_backward / head code;
 * only the loop order differs.  Every LoRA gradient receives its
 * micro-batch contributions in the order 1..k in both (resident runs the
 * micro-batches one after another; blockwise runs 1..k through each layer
 * in backward), every op is deterministic, and recomputation from a
 * checkpoint reproduces the forward bits, so losses and adapters are
 * bit-identical.
 *
 * Memory (blockwise): the input of every layer for every micro-batch is
 * a checkpoint in pinned host memory (copied out on STREAM_AUX while the
 * next layer computes, copied back a layer ahead in backward), and so is
 * its attention output and lse unless POROS_ATTN_CKPT=0 (the
 * recomputation then skips the attention forward), so the device holds
 * two sets of k checkpoints (or one: ckpt_save_in_place), the activations
 * of one layer of one micro-batch, and one dequantized layer.  --checkpoints block keeps only
 * each block's first input on the host and block-size sets on the device
 * (blockwise_pass_block_ckpt, below). */
#include "engine_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "util/util.h"

/* --- timing spans ---------------------------------------------------------- */

static void span_open(struct engine *e, struct span *list, int *n, int max, int stream)
{
	if (*n < max)
		e->be->event_record(list[*n].begin, stream);
}

static void span_close(struct engine *e, struct span *list, int *n, int max, int stream)
{
	if (*n < max)
		e->be->event_record(list[(*n)++].end, stream);
}

void compute_open(struct engine *e)
{
	span_open(e, e->computes, &e->n_computes, e->max_computes, STREAM_COMPUTE);
}

void compute_close(struct engine *e)
{
	span_close(e, e->computes, &e->n_computes, e->max_computes, STREAM_COMPUTE);
}

/* --- weight views ---------------------------------------------------------- */

/* Pointers into one layer record on the device; with NF4 the projections
 * are dequantized into the dequant buffer unless it already holds this
 * layer (the base never changes, so that copy stays valid), and the LoRA
 * extension is written into its spare rows and columns when the buffer
 * got a layer or the adapter changed; bf16 weights carry those rows and
 * columns as stored, written when the record was copied or the adapter
 * changed. */
static void make_view(struct engine *e, struct layer_view *v, unsigned char *rec, int layer)
{
	const struct layer_layout *lay = &e->hw->lay;
	const struct layer_ctx *c = &e->lc;
	const size_t norm_off[4] = { lay->in_norm, lay->post_norm, lay->q_norm, lay->k_norm };
	const bf16 **norm[4] = { &v->in_norm, &v->post_norm, &v->q_norm, &v->k_norm };
	unsigned char *dst = (unsigned char *)e->dequant;
	int fresh = e->dequant_layer != layer, ext = c->E > 0 && (fresh || e->dequant_ext_ver != e->lora_ver);

	for (int i = 0; i < 4; i++) {
		*norm[i] = norm_off[i] == LAYOUT_NONE ? NULL : (const bf16 *)(rec + norm_off[i]);
		v->bias[i] = lay->bias[i] == LAYOUT_NONE ? NULL : (const bf16 *)(rec + lay->bias[i]);
	}
	if (!lay->nf4) {
		int stale = c->E > 0 && e->ext_ver[layer] != e->lora_ver;

		for (int m = 0; m < N_PROJ; m++) {
			const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + m];
			bf16 *w = (bf16 *)(rec + lay->weight[m]);

			if (stale && s->a >= 0)
				c->op->lora_weight_ext(w, lay->ld[m], e->params + s->a, e->params + s->b,
				                       m < 4 ? v->bias[m] : NULL, c->lora_scale, s->n_in, s->n_out, c->R);
			v->w[m] = w;
			v->ld[m] = lay->ld[m];
		}
		e->ext_ver[layer] = e->lora_ver;
		return;
	}
	for (int m = 0; m < N_PROJ; m++) {
		const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + m];
		bf16 *w = (bf16 *)(dst + e->dequant_off[m]);
		int ld = lay->n_in[m] + c->E;

		if (fresh)
			c->op->nf4_dequantize(w, ld, rec + lay->weight[m], (const float *)(rec + lay->absmax[m]),
			                      lay->n_out[m], lay->n_in[m]);
		if (ext && s->a >= 0)
			c->op->lora_weight_ext(w, ld, e->params + s->a, e->params + s->b, m < 4 ? v->bias[m] : NULL,
			                       c->lora_scale, s->n_in, s->n_out, c->R);
		v->w[m] = w;
		v->ld[m] = ld;
	}
	e->dequant_layer = layer;
	e->dequant_ext_ver = e->lora_ver;
}

/* The gradient of each token's loss: the step loss is the mean over
 * every predicted token of the step's k micro-batches (targets < 0 are
 * not), the same for each micro-batch. */
static float head_dloss(const struct engine *e)
{
	return e->n_supervised ? (float)(1.0 / (double)e->n_supervised) : 0.0f;
}

/* Recomputes layer `layer` from its input checkpoint x (activations kept),
 * then backward through it: dx (T,C) goes from the gradient of the layer
 * output to that of its input. */
static void layer_recompute_backward(const struct layer_ctx *c, struct layer_act *a, const struct layer_view *w,
                                     int layer, const float *x, float *dx, struct pass p)
{
	layer_recompute(c, w, a, layer, x, p);
	layer_backward(c, w, a, layer, dx, p);
}

/* --- compute lanes ------------------------------------------------------------
 * With e->lanes == 2, the micro-batches of one layer run two at a time,
 * micro-batch j on lane j % 2 (backend.h): lane 1 first waits for all
 * that lane 0 has queued (lanes_fork), and lane 0 goes on past the layer
 * only once lane 1 is done (lanes_join), so the code around a layer sees
 * one stream as before.  A lane's ops read its own activations and
 * scratch; what both read (weights, checkpoints, the adapter) neither
 * writes.  Each micro-batch's ops are the same calls on the same data as
 * with one lane: the same bits. */

static void lanes_fork(struct engine *e)
{
	if (e->lanes < 2)
		return;
	e->be->event_record(e->lane_fork, STREAM_COMPUTE);
	e->be->set_lane(1);
	e->be->stream_wait_event(STREAM_COMPUTE, e->lane_fork);
	e->be->set_lane(0);
}

static void lanes_join(struct engine *e)
{
	if (e->lanes < 2)
		return;
	e->be->set_lane(1);
	e->be->event_record(e->lane_join, STREAM_COMPUTE);
	e->be->set_lane(0);
	e->be->stream_wait_event(STREAM_COMPUTE, e->lane_join);
}

/* Micro-batch j's lane, made current. */
static int lane_use(struct engine *e, int j)
{
	int lane = j % e->lanes;

	if (e->lanes > 1)
		e->be->set_lane(lane);
	return lane;
}

/* The context lane's ops read: e->lc, or for lane 1 e->lc with lane 1's
 * scratch (its gradient leaf set by gradtree_leaf_ahead). */
static struct layer_ctx *lane_ctx(struct engine *e, int lane)
{
	struct layer_ctx *c = &e->lane_lc;

	if (lane == 0)
		return &e->lc;
	*c = e->lc;
	c->g = e->lane_g;
	c->attn_scratch = e->lane_attn_scratch;
	c->logits = NULL, c->dlogits = NULL, c->hn = NULL; /* lane 1 runs no head */
	return c;
}

static struct layer_act *lane_act(struct engine *e, int lane)
{
	return lane ? &e->lane_act : &e->act;
}

/* The context of a call over n micro-batches (a group's, layer.h) on
 * lane: group_ctx's, with lane 1's scratch there (no head). */
static struct layer_ctx group_lane_ctx(const struct engine *e, int lane, int n)
{
	struct layer_ctx c = group_ctx(e, n);

	if (lane) {
		c.g = e->lane_g;
		c.attn_scratch = e->lane_attn_scratch;
		c.logits = NULL, c.dlogits = NULL, c.hn = NULL;
	}
	return c;
}

/* The micro-batches of the group that starts at j (of n). */
static int group_len(const struct engine *e, int j, int n)
{
	return n - j < e->group ? n - j : e->group;
}

/* The exchange of gradient pieces failed: the step reports it (e->err),
 * its gradient is not a number. */
static void pass_failed(struct engine *e)
{
	if (!e->err[0])
		snprintf(e->err, sizeof e->err, "the gradient exchange between ranks failed: %s",
		         e->comm ? comm_error(e->comm) : "no communicator");
}

/* --- resident -------------------------------------------------------------- */

static void resident_view(struct engine *e, struct layer_view *v, int layer)
{
	make_view(e, v, e->layers + (size_t)layer * e->hw->lay.stride, layer);
}

/* Micro-batch-major: each micro-batch runs its whole forward (keeping
 * every layer's input) and its whole backward.  With recompute (HF
 * gradient checkpointing) backward recomputes a layer from its input, then
 * goes back through it; without, every layer's activations were kept by
 * the forward.  The recomputation reproduces the forward bits, so the two
 * give the same adapters. */
void resident_pass(struct engine *e, int step)
{
	struct layer_view v;

	compute_open(e);
	gradtree_begin(e, 0, e->lora.total);
	for (int j = 0; j < e->k; j++) {
		struct pass p = { step, j };

		embed_forward(&e->lc, e->ckpt[0], j);
		for (int l = 0; l < e->L; l++) {
			resident_view(e, &v, l);
			layer_forward(&e->lc, &v, e->acts ? &e->acts[l] : &e->act, l, e->ckpt[l], e->ckpt[l + 1], p);
		}
		head_forward_backward(&e->lc, e->dresid[0], e->ckpt[e->L], j, head_dloss(e));
		gradtree_leaf(e);
		for (int l = e->L - 1; l >= 0; l--) {
			resident_view(e, &v, l);
			if (e->acts)
				layer_backward(&e->lc, &v, &e->acts[l], l, e->dresid[0], p);
			else
				layer_recompute_backward(&e->lc, &e->act, &v, l, e->ckpt[l], e->dresid[0], p);
		}
		gradtree_push(e, j);
	}
	if (gradtree_finish(e) < 0)
		pass_failed(e);
	compute_close(e);
}

/* --- blockwise: slabs -------------------------------------------------------- */

static int block_first(const struct engine *e, int b)
{
	return b * e->bs;
}

static int block_len(const struct engine *e, int b)
{
	int n = e->L - b * e->bs;

	return n < e->bs ? n : e->bs;
}

/* Block b always goes to slab b % 2: the forward and the backward both
 * alternate, and the two blocks at the turn of a pass are already there. */
/* One layer record to the device, returning the bytes that crossed.  A
 * bf16 layer with the LoRA extension goes without the extension's rows
 * and columns: the host holds zeros there, and make_view writes every
 * part a GEMM reads (lora_weight_ext) before the layer computes, so only
 * the N x K weights and the norms and biases before them are copied,
 * each projection as rows of K between rows of K + E.  What the slab held there before is overwritten unread. */
static size_t layer_copy(struct engine *e, unsigned char *dst, const unsigned char *src, int stream)
{
	const struct layer_layout *lay = &e->hw->lay;
	size_t bytes = lay->weight[0]; /* the norms and biases come first */

	if (lay->nf4 || lay->ext == 0) {
		e->be->copy_h2d(dst, src, lay->stride, stream);
		return lay->stride;
	}
	e->be->copy_h2d(dst, src, bytes, stream);
	for (int m = 0; m < N_PROJ; m++) {
		size_t pitch = (size_t)lay->ld[m] * sizeof(bf16), row = (size_t)lay->n_in[m] * sizeof(bf16);

		e->be->copy_h2d_2d(dst + lay->weight[m], pitch, src + lay->weight[m], pitch, row,
		                   (size_t)lay->n_out[m], stream);
		bytes += row * (size_t)lay->n_out[m];
	}
	return bytes;
}

static void slab_fetch(struct engine *e, int b, int stream)
{
	struct slab *s = &e->slab[b % 2];
	size_t stride = e->hw->lay.stride, bytes = 0;

	if (s->block == b)
		return;
	/* never overwrite a slab whose block the compute stream still reads */
	if (stream == STREAM_COPY && s->freed_recorded)
		e->be->stream_wait_event(STREAM_COPY, s->freed);
	span_open(e, e->copies, &e->n_copies, e->max_copies, stream);
	for (int i = 0; i < block_len(e, b); i++) {
		size_t layer = (size_t)(block_first(e, b) + i);

		bytes += layer_copy(e, s->mem + (size_t)i * stride, e->hw->layers + layer * stride, stream);
	}
	span_close(e, e->copies, &e->n_copies, e->max_copies, stream);
	for (int i = 0; i < block_len(e, b); i++) /* the extension is written on the device */
		e->ext_ver[block_first(e, b) + i] = 0;
	e->be->event_record(s->copied, stream);
	s->block = b;
	e->h2d_bytes += (long long)bytes;
}

static void slab_acquire(struct engine *e, int b)
{
	/* not prefetched (the first block, or prefetch disabled): without
	 * prefetch the copy runs on the compute stream, in line (the ablation) */
	slab_fetch(e, b, e->cfg->cell.poros.enable_prefetch ? STREAM_COPY : STREAM_COMPUTE);
	e->be->stream_wait_event(STREAM_COMPUTE, e->slab[b % 2].copied);
}

static void slab_prefetch(struct engine *e, int b)
{
	if (e->cfg->cell.poros.enable_prefetch && b >= 0 && b < e->nb)
		slab_fetch(e, b, STREAM_COPY);
}

static void slab_release(struct engine *e, int b)
{
	struct slab *s = &e->slab[b % 2];

	e->be->event_record(s->freed, STREAM_COMPUTE);
	s->freed_recorded = 1;
}

static void block_view(struct engine *e, struct layer_view *v, int b, int i)
{
	make_view(e, v, e->slab[b % 2].mem + (size_t)i * e->hw->lay.stride, block_first(e, b) + i);
}

/* --- checkpoint records: pinned host memory or the disk ---------------------
 * Record r (layer r's, or block r's) is on the host from cs->n_disk on;
 * records below that are in --checkpoint-dir's file, each copied through
 * a pinned slot (ckpt_disk.c).  Either way its copies run on STREAM_AUX
 * in the same order, so the events around them mean the same. */

static unsigned char *record_host(struct engine *e, int r)
{
	return e->cs.host + (size_t)(r - e->cs.n_disk) * e->cs.tier.bytes;
}

/* The file's first error fails the step (the backward read what it could). */
static void disk_failed(struct engine *e)
{
	const char *why = ckpt_disk_error(e->cs.disk);

	if (why && !e->err[0])
		snprintf(e->err, sizeof e->err, "%s", why);
}

/* Piece `piece` of record r (bytes from src on the device, at off in the
 * record) off the device on STREAM_AUX. */
static void record_out(struct engine *e, int r, int piece, size_t off, const unsigned char *src, size_t bytes)
{
	struct ckpt_sets *cs = &e->cs;

	if (r < cs->n_disk) {
		ckpt_disk_put(cs->disk, r, piece, src, STREAM_AUX);
		disk_failed(e);
	} else {
		e->be->copy_d2h_async(record_host(e, r) + off, src, bytes, STREAM_AUX);
	}
	cs->d2h_bytes += (long long)bytes;
}

/* Record r (bytes) back into dst on the device, on STREAM_AUX. */
static void record_in(struct engine *e, int r, unsigned char *dst, size_t bytes)
{
	struct ckpt_sets *cs = &e->cs;

	if (r < cs->n_disk) {
		ckpt_disk_get(cs->disk, r, dst, STREAM_AUX);
		disk_failed(e);
	} else {
		e->be->copy_h2d(dst, record_host(e, r), bytes, STREAM_AUX);
	}
	cs->h2d_bytes += (long long)bytes;
}

/* --- blockwise: layer checkpoints -------------------------------------------
 * The record of layer l (its inputs; with attn its attention outputs and
 * lse too) lives in device set l % 2.  Forward: once layer l's inputs are
 * complete, STREAM_AUX copies them to the host while layer l computes
 * (which reads, never writes, them), and with them layer l-1's attention,
 * complete at the same point; layer l+1 writes its outputs into the other
 * set and its attention into this one, so it first waits for those
 * copies.  The last layer's attention stays on the device for the
 * backward, which starts there.  Backward: layer l reads set l % 2 while
 * STREAM_AUX brings layer l-1's record into the other set, after the
 * compute stream is done with what that set held.
 *
 * One set (engine_ckpt_sets, no attention checkpoints): every layer's
 * record is set 0.  Forward: layer l's output goes in place over its
 * input once STREAM_AUX has copied that input out (ckpt_save_in_place).
 * Backward: layer l-1's record comes into set 0 only once layer l's
 * backward is done with it, so that copy no longer overlaps compute: a
 * layer's record time a layer, the price of one record of device memory,
 * which run.c pays only where two sets do not fit (choose_ckpt_sets). */

/* The device set that holds layer l's record (l = L: the head's input). */
static int layer_set(const struct engine *e, int l)
{
	return e->cs.n_sets == 1 ? 0 : l % 2;
}

/* Micro-batch mb's inputs in device set s. */
static float *set_buf(struct engine *e, int s, int mb)
{
	return (float *)e->cs.dev[s] + (size_t)mb * e->lc.T * e->lc.C;
}

static float *ckpt_buf(struct engine *e, int layer, int mb)
{
	return set_buf(e, layer_set(e, layer), mb);
}

/* With the attention checkpoints, a's attention output and lse (a lane's
 * activations), and at ATTN_CKPT_SUBLAYER the rest of the attention
 * sublayer's, are micro-batch mb's in set s's record; kept: they hold them
 * already, so a recomputation takes them instead of making them again. */
static void act_attention_set(struct engine *e, struct layer_act *a, int s, int mb, int kept)
{
	struct ckpt_sets *cs = &e->cs;
	float **field[SUB_N] = { &a->x2, &a->q, &a->k, &a->v, &a->q_pre, &a->k_pre, &a->rstd_q, &a->rstd_k,
	                          &a->u[0], &a->u[1], &a->u[2], &a->u[3] };

	if (!cs->attn)
		return;
	a->att = (bf16 *)(cs->dev[s] + cs->att_off + (size_t)mb * cs->att_mb);
	a->lse = (float *)(cs->dev[s] + cs->lse_off + (size_t)mb * cs->lse_mb);
	a->att_kept = !kept ? KEPT_NONE : cs->attn == ATTN_CKPT_SUBLAYER ? KEPT_SUBLAYER : KEPT_OUTPUT;
	for (int f = 0; f < SUB_N; f++)
		if (cs->sub_mb[f])
			*field[f] = (float *)(cs->dev[s] + cs->sub_off[f] + (size_t)mb * cs->sub_mb[f]);
}

/* Blockwise forward through `layer` (view v) of micro-batches 0..n-1 of
 * pass `step`, on the lanes: each one's input in set `in`, where its
 * attention goes too, its output into set `out` (out may be in). */
static void layer_forward_mbs(struct engine *e, const struct layer_view *v, int layer, int in, int out, int n,
                              int step)
{
	if (e->group > 1) { /* groups of micro-batches, one call each, group u on lane u % lanes */
		lanes_fork(e);
		for (int j = 0, u = 0; j < n; j += e->group, u++) {
			int lane = lane_use(e, u);
			struct layer_ctx c = group_lane_ctx(e, lane, group_len(e, j, n));
			struct layer_act *a = lane_act(e, lane);

			act_attention_set(e, a, in, j, 0);
			layer_forward(&c, v, a, layer, set_buf(e, in, j), set_buf(e, out, j), (struct pass){ step, j });
		}
		lanes_join(e);
		return;
	}
	lanes_fork(e);
	for (int j = 0; j < n; j++) {
		struct pass p = { step, j };
		int lane = lane_use(e, j);
		struct layer_act *a = lane_act(e, lane);

		act_attention_set(e, a, in, j, 0);
		layer_forward(lane_ctx(e, lane), v, a, layer, set_buf(e, in, j), set_buf(e, out, j), p);
	}
	lanes_join(e);
}

/* Forward with one set, before layer l computes: its inputs (complete on
 * the compute stream: `ready`) go to the host on STREAM_AUX, which reads
 * them while layer l's attention block does; layer l writes its output
 * over them, and layer_forward's compute stream (each lane's) waits for
 * `saved` first (e->lc.out_wait = saved[0], set by blockwise_forward).
 * The wait is enqueued after this record of saved, so it waits for this
 * copy.  Layer l+1's copy waits for `ready` recorded after layer l (and
 * lanes_join): it reads all of layer l's outputs. */
static void ckpt_save_in_place(struct engine *e, int l)
{
	struct ckpt_sets *cs = &e->cs;

	e->be->event_record(cs->ready, STREAM_COMPUTE);
	e->be->stream_wait_event(STREAM_AUX, cs->ready);
	record_out(e, l, 0, 0, cs->dev[0], cs->att_off);
	e->be->event_record(cs->saved[0], STREAM_AUX);
	cs->saved_rec[0] = 1;
	cs->layer[0] = l + 1; /* once layer l has run */
}

/* Forward, before layer l computes: its inputs (complete on the compute
 * stream) and layer l-1's attention go to the host, and what layer l
 * overwrites (set o's inputs, set s's attention) must have been saved. */
static void ckpt_save_inputs(struct engine *e, int l)
{
	struct ckpt_sets *cs = &e->cs;
	int s = l % 2, o = (l + 1) % 2;
	size_t att_bytes = cs->rec_bytes - cs->att_off;

	if (cs->n_sets == 1) {
		ckpt_save_in_place(e, l);
		return;
	}
	e->be->event_record(cs->ready, STREAM_COMPUTE);
	e->be->stream_wait_event(STREAM_AUX, cs->ready);
	record_out(e, l, 0, 0, cs->dev[s], cs->att_off);
	if (cs->attn && l > 0)
		record_out(e, l - 1, 1, cs->att_off, cs->dev[o] + cs->att_off, att_bytes);
	e->be->event_record(cs->saved[s], STREAM_AUX);
	cs->saved_rec[s] = 1;
	cs->layer[s] = l;
	if (cs->saved_rec[o])
		e->be->stream_wait_event(STREAM_COMPUTE, cs->saved[o]);
	cs->layer[o] = l + 1;
}

/* Backward: layer l's record into its set, on STREAM_AUX unless it is
 * already there, once the compute stream is done with what the set held
 * (freed, recorded after its last reader). */
static void ckpt_fetch(struct engine *e, int l)
{
	struct ckpt_sets *cs = &e->cs;
	int s = layer_set(e, l);

	if (l < 0 || cs->layer[s] == l)
		return;
	if (cs->freed_rec[s])
		e->be->stream_wait_event(STREAM_AUX, cs->freed[s]);
	record_in(e, l, cs->dev[s], cs->rec_bytes);
	e->be->event_record(cs->loaded[s], STREAM_AUX);
	cs->loaded_rec[s] = 1;
	cs->layer[s] = l;
}

/* Backward, at the top layer of a block: its record and the next layer's
 * are fetched before the next block's weights are, and the weights wait
 * for them: both become free to copy when the previous block ends, and
 * behind a whole slab on the bus the second record would be late.  One
 * set holds the top's alone (the next comes in after the top's backward). */
static void ckpt_fetch_first(struct engine *e, int top)
{
	struct ckpt_sets *cs = &e->cs;
	int last = cs->n_sets == 1 ? top : top - 1;

	ckpt_fetch(e, top);
	if (last != top)
		ckpt_fetch(e, last);
	if (last >= 0 && cs->loaded_rec[layer_set(e, last)])
		e->be->stream_wait_event(STREAM_COPY, cs->loaded[layer_set(e, last)]);
}

/* --- blockwise ---------------------------------------------------------------- */

/* The forward of both checkpoint modes: the embedding into set 0, then
 * every layer, its inputs in set l % 2 and its outputs into the other (one
 * set: in place, after ckpt_save_in_place's copy); save(e, l) runs before
 * layer l computes. */
static void blockwise_forward(struct engine *e, int step, void (*save)(struct engine *, int))
{
	struct layer_view v;
	int k = e->k;

	e->cs.layer[0] = e->cs.layer[1] = -1;
	e->lc.out_wait = e->cs.n_sets == 1 ? e->cs.saved[0] : NULL;
	compute_open(e);
	for (int j = 0; j < k; j++)
		embed_forward(&e->lc, ckpt_buf(e, 0, j), j);
	compute_close(e);
	for (int b = 0; b < e->nb; b++) {
		int first = block_first(e, b), n = block_len(e, b);

		slab_acquire(e, b);
		slab_prefetch(e, b + 1);
		compute_open(e);
		for (int i = 0; i < n; i++) {
			int l = first + i;

			save(e, l);
			block_view(e, &v, b, i);
			layer_forward_mbs(e, &v, l, layer_set(e, l), layer_set(e, l + 1), k, step);
		}
		compute_close(e);
		slab_release(e, b);
	}
	e->lc.out_wait = NULL;
}

/* Blockwise backward through layer l (view v, inputs in set s, attention
 * there already when kept) of the group at micro-batch j and, with two
 * lanes, of the next group too, on lane 1; returns how many micro-batches
 * it took.  Each group's leaves are zeroed on its lane and filled by one
 * call; all are pushed in order once both lanes are done (lane 1's next
 * zeroing waits for those pushes: lanes_fork). */
static int group_backward(struct engine *e, const struct layer_view *v, int l, int s, int kept, int j, int step)
{
	int first[BACKEND_MAX_LANES], len[BACKEND_MAX_LANES], n = 0, taken = 0;

	for (int lane = 0; lane < e->lanes && j + taken < e->k; lane++) {
		first[lane] = j + taken;
		len[lane] = group_len(e, j + taken, e->k);
		taken += len[lane];
		n++;
	}
	if (n == 2)
		lanes_fork(e);
	for (int lane = 0; lane < n; lane++) {
		struct layer_ctx c = group_lane_ctx(e, lane, len[lane]);
		struct layer_act *a = lane_act(e, lane);

		if (n == 2)
			lane_use(e, lane);
		for (int i = 0; i < c.mbs; i++) {
			e->be->memset_zero(e->group_leaf[lane][i], (size_t)e->gt.len * sizeof(float), STREAM_COMPUTE);
			c.grad_mb[i] = e->group_leaf[lane][i] - e->gt.off; /* indexed by slot offset, as lora_grad */
		}
		c.lora_grad = c.mbs > 1 ? NULL : c.grad_mb[0];
		act_attention_set(e, a, s, first[lane], kept);
		layer_recompute_backward(&c, a, v, l, set_buf(e, s, first[lane]), e->dresid[first[lane]],
		                         (struct pass){ step, first[lane] });
	}
	if (n == 2)
		lanes_join(e);
	for (int lane = 0; lane < n; lane++)
		for (int i = 0; i < len[lane]; i++)
			gradtree_push_leaf(e, first[lane] + i, e->group_leaf[lane][i]);
	return taken;
}

/* Blockwise backward through layer l (view v, inputs in set s, its
 * attention there already when kept) of micro-batch j, or of j and j+1 at
 * once on the two lanes; returns how many it took.  Their gradient leaves
 * are pushed in order once both are done, and lane 1 waits for lane 0's
 * merges before it zeroes its leaf. */
static int layer_backward_mbs(struct engine *e, const struct layer_view *v, int l, int s, int kept, int j, int step)
{
	int n = e->lanes > 1 && j + 1 < e->k && gradtree_pair_ok(e, j) ? 2 : 1;

	if (e->group > 1)
		return group_backward(e, v, l, s, kept, j, step);

	if (n == 2)
		lanes_fork(e);
	for (int i = 0; i < n; i++) {
		struct pass p = { step, j + i };
		int lane = n == 2 ? lane_use(e, j + i) : 0;
		struct layer_ctx *c = lane_ctx(e, lane);
		struct layer_act *a = lane_act(e, lane);

		act_attention_set(e, a, s, j + i, kept);
		gradtree_leaf_ahead(e, c, i);
		layer_recompute_backward(c, a, v, l, set_buf(e, s, j + i), e->dresid[j + i], p);
	}
	if (n == 2)
		lanes_join(e);
	for (int i = 0; i < n; i++)
		gradtree_push(e, j + i);
	return n;
}

/* Layer-major: the weights of a block are on the device once per pass,
 * and every micro-batch runs through each layer (each NF4 layer is
 * dequantized once per pass) while the next block is being copied. */
void blockwise_pass(struct engine *e, int step)
{
	struct ckpt_sets *cs = &e->cs;
	struct layer_view v;
	int k = e->k;

	blockwise_forward(e, step, ckpt_save_inputs);
	compute_open(e);
	for (int j = 0; j < k; j++)
		head_forward_backward(&e->lc, e->dresid[j], ckpt_buf(e, e->L, j), j, head_dloss(e));
	/* the set that held the last layer's outputs is free for layer L-2 (one set: L-1) */
	e->be->event_record(cs->freed[layer_set(e, e->L)], STREAM_COMPUTE);
	cs->freed_rec[layer_set(e, e->L)] = 1;
	compute_close(e);
	for (int b = e->nb - 1; b >= 0; b--) {
		int first = block_first(e, b), n = block_len(e, b);

		slab_acquire(e, b);
		ckpt_fetch_first(e, first + n - 1);
		slab_prefetch(e, b - 1);
		compute_open(e);
		for (int i = n - 1; i >= 0; i--) {
			int l = first + i, s = layer_set(e, l);
			long off, len;

			ckpt_fetch(e, l);
			if (cs->n_sets > 1) /* into the other set while layer l computes */
				ckpt_fetch(e, l - 1);
			if (cs->loaded_rec[s])
				e->be->stream_wait_event(STREAM_COMPUTE, cs->loaded[s]);
			block_view(e, &v, b, i);
			gradtree_layer_region(e, l, &off, &len);
			gradtree_begin(e, off, len);
			for (int j = 0; j < k; j += layer_backward_mbs(e, &v, l, s, 1, j, step))
				;
			if (gradtree_finish(e) < 0)
				pass_failed(e);
			e->be->event_record(cs->freed[s], STREAM_COMPUTE);
			cs->freed_rec[s] = 1;
			if (cs->n_sets == 1) /* behind freed: layer l is done with set 0 */
				ckpt_fetch(e, l - 1);
		}
		compute_close(e);
		slab_release(e, b);
	}
}

/* --- blockwise: block checkpoints (--checkpoints block) ----------------------
 * The host holds the input of each block's first layer only (record b,
 * att_off bytes: inputs, no attention).  Forward: as above, layers
 * alternate sets 0 and 1 (the attention output goes to the layer's set,
 * as scratch); at a block's first layer STREAM_AUX copies its inputs out.
 * Backward of block b: its first input is in set f_b (fetched on
 * STREAM_AUX); layers first..top-1 are computed again, layer first+i's
 * output kept in set (f_b + i + 1) % n and, with attn, its attention in
 * (f_b + i) % n; then backward top..first.  Once top's backward is done
 * with its set, block b-1's record is fetched into it: f_{b-1} = (f_b +
 * len_b - 1) % n.  A block's sets are distinct (len_b <= bs = n). */

/* Forward, before layer l computes: at a block's first layer its inputs
 * go to the block's host record; layer l overwrites set o's inputs. */
static void block_ckpt_save(struct engine *e, int l)
{
	struct ckpt_sets *cs = &e->cs;
	int s = l % 2, o = (l + 1) % 2;

	if (l % e->bs == 0) {
		e->be->event_record(cs->ready, STREAM_COMPUTE);
		/* the copy reads the inputs the compute stream has just written */
		e->be->stream_wait_event(STREAM_AUX, cs->ready);
		record_out(e, l / e->bs, 0, 0, cs->dev[s], cs->att_off);
		e->be->event_record(cs->saved[s], STREAM_AUX);
		cs->saved_rec[s] = 1;
	}
	/* layer l writes set o's inputs: a block's first input there must be on the host */
	if (cs->saved_rec[o])
		e->be->stream_wait_event(STREAM_COMPUTE, cs->saved[o]);
}

/* Backward: block b's record into set s on STREAM_AUX, after every
 * compute-stream use of s enqueued so far.  Behind the forward's saves on
 * the same stream, so the host record is complete. */
static void block_ckpt_fetch(struct engine *e, int b, int s)
{
	struct ckpt_sets *cs = &e->cs;

	e->be->event_record(cs->freed[s], STREAM_COMPUTE);
	/* never overwrite a set the compute stream still reads or writes */
	e->be->stream_wait_event(STREAM_AUX, cs->freed[s]);
	record_in(e, b, cs->dev[s], cs->att_off);
	e->be->event_record(cs->loaded[s], STREAM_AUX);
}

/* Block b's backward, its first input in (or coming into) set f. */
static void block_ckpt_backward(struct engine *e, int step, int b, int f)
{
	struct ckpt_sets *cs = &e->cs;
	struct layer_view v;
	int first = block_first(e, b), n = block_len(e, b), sets = cs->n_sets;

	/* the block's first input is read only once its copy is in */
	e->be->stream_wait_event(STREAM_COMPUTE, cs->loaded[f]);
	for (int i = 0; i < n - 1; i++) {
		int s = (f + i) % sets, o = (f + i + 1) % sets;

		block_view(e, &v, b, i);
		layer_forward_mbs(e, &v, first + i, s, o, e->k, step);
	}
	for (int i = n - 1; i >= 0; i--) {
		int l = first + i, s = (f + i) % sets;
		long off, len;

		block_view(e, &v, b, i);
		gradtree_layer_region(e, l, &off, &len);
		gradtree_begin(e, off, len);
		/* the top layer's attention was not computed again: its backward runs it */
		for (int j = 0; j < e->k; j += layer_backward_mbs(e, &v, l, s, i < n - 1, j, step))
			;
		if (gradtree_finish(e) < 0)
			pass_failed(e);
		if (i == n - 1 && b > 0)
			block_ckpt_fetch(e, b - 1, s);
	}
}

/* blockwise_pass with the block checkpoints: the same math in the same
 * order (each recomputation reproduces the forward's bits), one more
 * forward of a block's layers but its top per step. */
void blockwise_pass_block_ckpt(struct engine *e, int step)
{
	int f = (e->L - 1) % 2; /* the set the head does not read */

	blockwise_forward(e, step, block_ckpt_save);
	/* the last block's record comes in while the head runs */
	block_ckpt_fetch(e, e->nb - 1, f);
	compute_open(e);
	for (int j = 0; j < e->k; j++)
		head_forward_backward(&e->lc, e->dresid[j], ckpt_buf(e, e->L, j), j, head_dloss(e));
	compute_close(e);
	for (int b = e->nb - 1; b >= 0; b--) {
		slab_acquire(e, b);
		slab_prefetch(e, b - 1);
		compute_open(e);
		block_ckpt_backward(e, step, b, f);
		compute_close(e);
		slab_release(e, b);
		f = (f + block_len(e, b) - 1) % e->cs.n_sets;
	}
}

/* --- evaluation ------------------------------------------------------------- */

/* Forward only over the first nmb (<= k) micro-batches on the device, into
 * the per-token losses: each micro-batch's hidden state updated in place
 * (nothing is kept for a backward), the weights brought in as the step's
 * schedule brings them. */
void eval_pass(struct engine *e, int nmb)
{
	struct layer_view v;

	compute_open(e);
	if (!e->blockwise) {
		for (int j = 0; j < nmb; j++) {
			struct pass p = { 0, j };

			embed_forward(&e->lc, e->ckpt[0], j);
			for (int l = 0; l < e->L; l++) {
				resident_view(e, &v, l);
				layer_forward(&e->lc, &v, e->acts ? &e->acts[l] : &e->act, l, e->ckpt[0], e->ckpt[0], p);
			}
			head_loss(&e->lc, e->ckpt[0], j);
		}
		compute_close(e);
		return;
	}
	e->cs.layer[0] = e->cs.layer[1] = -1; /* set 0 is overwritten */
	for (int j = 0; j < nmb; j++)
		embed_forward(&e->lc, ckpt_buf(e, 0, j), j);
	compute_close(e);
	for (int b = 0; b < e->nb; b++) {
		slab_acquire(e, b);
		slab_prefetch(e, b + 1);
		compute_open(e);
		for (int i = 0; i < block_len(e, b); i++) {
			block_view(e, &v, b, i);
			layer_forward_mbs(e, &v, block_first(e, b) + i, 0, 0, nmb, 0);
		}
		compute_close(e);
		slab_release(e, b);
	}
	compute_open(e);
	for (int j = 0; j < nmb; j++)
		head_loss(&e->lc, ckpt_buf(e, 0, j), j);
	compute_close(e);
}

/* --- events and timing ---------------------------------------------------------- */

int schedule_events_create(struct engine *e)
{
	const struct backend *be = e->be;
	struct ckpt_sets *cs = &e->cs;

	/* at most every block copied once per pass; a compute span per block
	 * per pass plus embedding, head and optimizer */
	e->max_copies = 2 * e->nb + 2;
	e->max_computes = 2 * e->nb + 4;
	e->copies = xcalloc((size_t)e->max_copies, sizeof *e->copies);
	e->computes = xcalloc((size_t)e->max_computes, sizeof *e->computes);
	if ((e->step_begin = be->event_create()) == NULL)
		return -1;
	for (int i = 0; i < e->max_copies; i++)
		if ((e->copies[i].begin = be->event_create()) == NULL || (e->copies[i].end = be->event_create()) == NULL)
			return -1;
	for (int i = 0; i < e->max_computes; i++)
		if ((e->computes[i].begin = be->event_create()) == NULL || (e->computes[i].end = be->event_create()) == NULL)
			return -1;
	for (int s = 0; s < 2; s++) {
		e->slab[s].block = -1;
		if ((e->slab[s].copied = be->event_create()) == NULL || (e->slab[s].freed = be->event_create()) == NULL)
			return -1;
		cs->layer[s] = -1;
		if ((cs->saved[s] = be->event_create()) == NULL || (cs->loaded[s] = be->event_create()) == NULL ||
		    (cs->freed[s] = be->event_create()) == NULL)
			return -1;
	}
	for (int s = 2; s < cs->n_sets; s++) /* --checkpoints block's other sets */
		if ((cs->loaded[s] = be->event_create()) == NULL || (cs->freed[s] = be->event_create()) == NULL)
			return -1;
	if ((cs->ready = be->event_create()) == NULL)
		return -1;
	if (e->lanes > 1 && ((e->lane_fork = be->event_create()) == NULL || (e->lane_join = be->event_create()) == NULL))
		return -1;
	return 0;
}

static void event_free(const struct backend *be, struct backend_event *ev)
{
	if (ev)
		be->event_destroy(ev);
}

void schedule_events_destroy(struct engine *e)
{
	const struct backend *be = e->be;

	event_free(be, e->step_begin);
	event_free(be, e->lane_fork);
	event_free(be, e->lane_join);
	for (int i = 0; e->copies && i < e->max_copies; i++) {
		event_free(be, e->copies[i].begin);
		event_free(be, e->copies[i].end);
	}
	for (int i = 0; e->computes && i < e->max_computes; i++) {
		event_free(be, e->computes[i].begin);
		event_free(be, e->computes[i].end);
	}
	for (int s = 0; s < 2; s++) {
		event_free(be, e->slab[s].copied);
		event_free(be, e->slab[s].freed);
		event_free(be, e->cs.saved[s]);
		event_free(be, e->cs.loaded[s]);
		event_free(be, e->cs.freed[s]);
	}
	for (int s = 2; s < e->cs.n_sets; s++) {
		event_free(be, e->cs.loaded[s]);
		event_free(be, e->cs.freed[s]);
	}
	event_free(be, e->cs.ready);
	free(e->copies);
	free(e->computes);
}

/* Length of the part of [b0,b1] covered by the (ordered, disjoint) spans. */
static double covered(double b0, double b1, const double *begin, const double *end, int n)
{
	double sum = 0;

	for (int i = 0; i < n; i++) {
		double lo = b0 > begin[i] ? b0 : begin[i], hi = b1 < end[i] ? b1 : end[i];

		if (hi > lo)
			sum += hi - lo;
	}
	return sum;
}

/* h2d_s: copy time; compute_s: compute-stream busy time; hidden: the part
 * of the copy time that ran while the compute stream was busy.  On the CPU
 * backend copies never overlap (they run in line), and the numbers say so. */
void schedule_read_timing(struct engine *e, struct step_stats *st)
{
	const struct backend *be = e->be;
	int nc = e->n_computes, nk = e->n_copies;
	double *cb = xmalloc((size_t)(nc + 1) * sizeof *cb), *ce = xmalloc((size_t)(nc + 1) * sizeof *ce);
	double hidden = 0, h2d = 0, compute = 0;

	for (int i = 0; i < nc; i++) {
		cb[i] = be->event_elapsed_ms(e->step_begin, e->computes[i].begin) * 1e-3;
		ce[i] = be->event_elapsed_ms(e->step_begin, e->computes[i].end) * 1e-3;
		compute += ce[i] - cb[i];
	}
	for (int i = 0; i < nk; i++) {
		double b0 = be->event_elapsed_ms(e->step_begin, e->copies[i].begin) * 1e-3;
		double b1 = be->event_elapsed_ms(e->step_begin, e->copies[i].end) * 1e-3;

		h2d += b1 - b0;
		hidden += covered(b0, b1, cb, ce, nc);
	}
	st->h2d_bytes = e->h2d_bytes;
	st->h2d_s = h2d;
	st->compute_s = compute;
	st->copy_hidden_frac = nk > 0 && h2d > 0 ? fmin(1.0, hidden / h2d) : NAN;
	free(cb);
	free(ce);
}
