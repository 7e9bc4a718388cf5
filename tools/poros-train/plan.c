/* tools/poros-train/plan.c: every device buffer, from one plan made before
 * step 1 (nothing is allocated in the step loop), and the upload of what
 * never changes: the final norm and lm_head, resident layers, rope tables,
 * the initial adapter.  Each purpose is one allocation (alloc.c counts
 * them, against --vram-budget, into vram_breakdown_mb) carved into
 * aligned buffers. */
#include "engine_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope_tables.h"
#include "util/util.h"

/* A plan runs twice: with base NULL it only sums sizes, then with the
 * allocation it hands out the same aligned pieces. */
struct carver {
	unsigned char *base;
	size_t off;
};

static size_t align_up(size_t bytes)
{
	return (bytes + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
}

static void *carve(struct carver *cv, size_t bytes)
{
	void *p = cv->base ? cv->base + cv->off : NULL;

	cv->off = align_up(cv->off + bytes);
	return p;
}

#define CARVE_F32(cv, n) ((float *)carve((cv), (size_t)(n) * sizeof(float)))
#define CARVE_BF16(cv, n) ((bf16 *)carve((cv), (size_t)(n) * sizeof(bf16)))

void plan_dequant_layout(struct engine *e)
{
	const struct layer_layout *lay = &e->hw->lay;
	struct layer_ctx *c = &e->lc;
	size_t off = 0;
	int rows_whole = 1; /* every row a whole number of NF4 blocks: a pitched row dequantizes alone */

	/* The LoRA extension: on with an adapter unless turned off
	 * (POROS_LORA_EXT=0: the fallback path, for comparison).  NF4: when
	 * every projection's rows are whole NF4 blocks (all real models),
	 * each projection's slot in the dequant buffer has room for E extra
	 * rows and columns; bf16: the weights carry them as stored
	 * (weights.h, engine_host_ext_cols). */
	for (int m = 0; m < N_PROJ; m++)
		rows_whole &= lay->n_in[m] % POROS_NF4_BLOCK == 0;
	if (lay->nf4)
		c->E = rows_whole && e->lora.mask && c->R > 0 && e->cfg->lora_ext ? lora_ext_cols(c->R) : 0;
	else
		c->E = lay->ext;
	c->ext_bwd = c->E > 0 && c->dropout == 0.0f;
	for (int m = 0; m < N_PROJ; m++) {
		size_t rows = (size_t)lay->n_out[m] + c->E, cols = (size_t)lay->n_in[m] + c->E;

		e->dequant_off[m] = off;
		off += align_up(rows * cols * sizeof(bf16));
	}
	e->dequant_bytes = lay->nf4 ? off : 0;
	e->lora_ver = 1;
	e->dequant_ext_ver = 0;
}

/* The bytes a micro-batch of each field the record keeps at
 * ATTN_CKPT_SUBLAYER (engine_impl.h): what layer_recompute would make
 * again, but xn2 and rstd2 (0: the layer has no such field). */
static void sublayer_fields(const struct engine *e, size_t mb[SUB_N])
{
	const struct layer_ctx *c = &e->lc;
	size_t T = (size_t)c->T, f = sizeof(float);

	memset(mb, 0, SUB_N * sizeof *mb);
	mb[SUB_X2] = T * c->C * f;
	mb[SUB_Q] = T * c->HD * f;
	mb[SUB_K] = mb[SUB_V] = T * c->GD * f;
	if (c->qk_norm) {
		mb[SUB_Q_PRE] = T * c->HD * f;
		mb[SUB_K_PRE] = T * c->GD * f;
		mb[SUB_RSTD_Q] = T * c->H * f;
		mb[SUB_RSTD_K] = T * c->G * f;
	}
	for (int m = 0; m < 4; m++)
		if ((e->lora.mask >> m) & 1u)
			mb[SUB_U + m] = T * c->R * f;
	for (int i = 0; i < SUB_N; i++)
		mb[i] = align_up(mb[i]);
}

void plan_ckpt_layout(struct engine *e)
{
	struct ckpt_sets *cs = &e->cs;
	const struct layer_ctx *c = &e->lc;
	size_t rows = (size_t)e->k * c->T;

	/* ATTN_CKPT_AUTO: run.c decides; here it is the output */
	cs->attn = !e->blockwise ? 0 : e->cfg->attn_ckpt == ATTN_CKPT_AUTO ? ATTN_CKPT_OUTPUT : e->cfg->attn_ckpt;
	cs->att_mb = align_up((size_t)c->T * (c->HD + c->E) * sizeof(bf16));
	cs->lse_mb = align_up((size_t)c->T * c->H * sizeof(float));
	cs->att_off = align_up(rows * c->C * sizeof(float));
	cs->lse_off = cs->att_off + (cs->attn ? (size_t)e->k * cs->att_mb : 0);
	cs->rec_bytes = cs->lse_off + (cs->attn ? (size_t)e->k * cs->lse_mb : 0);
	sublayer_fields(e, cs->sub_mb);
	for (int f = 0; f < SUB_N; f++) {
		if (cs->attn != ATTN_CKPT_SUBLAYER)
			cs->sub_mb[f] = 0;
		cs->sub_off[f] = cs->rec_bytes;
		cs->rec_bytes += (size_t)e->k * cs->sub_mb[f];
	}
	/* a block record is the inputs alone; a layer record's attention goes
	 * out with the next layer's inputs, a piece of its own */
	if (!e->blockwise)
		ckpt_tier_make(&cs->tier, 0, 0, 0, 0, 0);
	else if (cs->block)
		ckpt_tier_make(&cs->tier, e->nb, e->cfg->disk_records, cs->att_off, 0, e->nb - 1);
	else /* two sets keep the last layer's record on the device for the backward; one set does not */
		ckpt_tier_make(&cs->tier, e->L, e->cfg->disk_records, cs->rec_bytes, cs->attn ? cs->att_off : 0,
		               cs->n_sets == 1 ? e->L - 1 : e->L - 2);
	cs->n_disk = cs->tier.n_disk;
}

/* The rows a layer call takes: a group's (engine_group), or one micro-batch's. */
static long call_rows(const struct engine *e)
{
	return (long)e->group * e->lc.T;
}

/* e->lc as a call over n micro-batches sees it (layer.h): T, B and the
 * MLP's one chunk scaled; the rest e->lc's. */
struct layer_ctx group_ctx(const struct engine *e, int n)
{
	struct layer_ctx c = e->lc;

	if (n > 1) {
		c.mbs = n;
		c.T = n * e->lc.T;
		c.B = n * e->lc.B;
		c.mlp_chunk = c.T;
	}
	return c;
}

static void plan_act(struct engine *e, struct carver *cv, struct layer_act *a)
{
	const struct layer_ctx *c = &e->lc;
	long T = call_rows(e);

	/* with the attention checkpoints the attention's output and lse, and
	 * at ATTN_CKPT_SUBLAYER the rest of its sublayer's, live in the
	 * checkpoint records (schedule.c points a at them) */
	int sub = e->cs.attn == ATTN_CKPT_SUBLAYER;

	memset(a, 0, sizeof *a);
	a->xn = CARVE_BF16(cv, T * (c->C + c->E));
	a->rstd1 = CARVE_F32(cv, T);
	if (!sub) {
		a->q = CARVE_F32(cv, T * c->HD);
		a->k = CARVE_F32(cv, T * c->GD);
		a->v = CARVE_F32(cv, T * c->GD);
	}
	if (c->qk_norm && !sub) {
		a->q_pre = CARVE_F32(cv, T * c->HD);
		a->k_pre = CARVE_F32(cv, T * c->GD);
		a->rstd_q = CARVE_F32(cv, T * c->H);
		a->rstd_k = CARVE_F32(cv, T * c->G);
	}
	if (!e->cs.attn) {
		a->lse = CARVE_F32(cv, T * c->H);
		a->att = CARVE_BF16(cv, T * (c->HD + c->E));
	}
	if (!sub)
		a->x2 = CARVE_F32(cv, T * c->C);
	a->xn2 = a->xn; /* the backward normalizes x again for q, k and v (layer.h) */
	a->rstd2 = CARVE_F32(cv, T);
	/* the MLP's, kept for the backward: every row; else one chunk's, which
	 * live only inside the MLP and so share the workspace (plan_shared) */
	a->mlp_whole = e->acts != NULL;
	if (a->mlp_whole) {
		a->gate = CARVE_BF16(cv, T * c->F);
		a->up = CARVE_BF16(cv, T * c->F);
		a->h = CARVE_BF16(cv, T * (c->F + c->E));
	}
	for (int m = sub ? 4 : 0; m < N_PROJ; m++)
		if ((e->lora.mask >> m) & 1u)
			a->u[m] = CARVE_F32(cv, T * c->R);
}

static void plan_acts(struct engine *e, struct carver *cv)
{
	if (e->acts)
		for (int l = 0; l < e->L; l++)
			plan_act(e, cv, &e->acts[l]);
	else
		plan_act(e, cv, &e->act);
	if (e->lanes > 1)
		plan_act(e, cv, &e->lane_act);
}

/* base + off, or NULL while a plan only sums sizes. */
static void *region_at(unsigned char *base, size_t off)
{
	return base ? base + off : NULL;
}

/* The most any of projections [from, to) needs as LoRA scratch at T rows
 * (lora_scratch_floats), in bytes. */
static size_t lora_scratch_bytes(const struct engine *e, int from, int to, size_t T)
{
	const struct layer_layout *lay = &e->hw->lay;
	size_t most = 0;

	for (int m = from; m < to; m++) {
		size_t f = lora_scratch_floats((int)T, lay->n_in[m], lay->n_out[m], e->lc.R) * sizeof(float);

		if (f > most)
			most = f;
	}
	return most;
}

/* The head's bytes for chunks of n rows: the fp32 logits, then dlogits. */
static size_t head_bytes(const struct layer_ctx *c, size_t n)
{
	return align_up(n * c->V * sizeof(float)) + n * c->V * sizeof(bf16);
}

/* The head's rows a chunk: HEAD_CHUNK (or T), or more, in steps of it up
 * to HEAD_CHUNK_MAX, while they fit in room, what the region takes for
 * its other users anyway.  Each chunk reads all of lm_head forward and
 * back, so the long micro-batches that need a large region also get few
 * chunks, for no memory (docs/perf-notes.md gives the bytes). */
static int head_chunk_rows(const struct layer_ctx *c, size_t room)
{
	size_t n = HEAD_CHUNK;

	while (n + HEAD_CHUNK <= HEAD_CHUNK_MAX && n < (size_t)c->T && head_bytes(c, n + HEAD_CHUNK) <= room)
		n += HEAD_CHUNK;
	return n < (size_t)c->T ? (int)n : c->T;
}

/* Scratch that lives only inside one op call, one projection's backward,
 * one head pass or one MLP chunk, so one region serves them all: the
 * attention scratch; the LoRA ops' split operands and sums of the
 * attention projections (T rows); an MLP chunk's set: its projections'
 * LoRA scratch (mlp_chunk rows), then, unless the layer's activations are
 * kept whole, gate, up and h of the chunk (bf16), then the backward's dh
 * (fp32; the gate and up fallback's fp32 output in the forward too,
 * layer.c's proj_forward_bf16), dgate and dup; past the LoRA scratch and
 * the MLP set, a projection backward's bf16 upstream gradient (T rows, of
 * which down_proj's uses a chunk's); and the head's logits (chunk,V) fp32
 * + dlogits bf16, then its normed input hn (T,C).  No attention, head or
 * attention-projection LoRA op runs while an MLP chunk's buffers are
 * live, and the attention runs between projection backwards. */
static void plan_shared(struct engine *e, struct carver *cv, struct layer_ctx *c, struct layer_act *a, int head_too)
{
	struct grad_scratch *g = &c->g;
	size_t n = (size_t)c->mlp_chunk, F = (size_t)c->F, FE = (size_t)(c->F + c->E), T = (size_t)c->T;
	size_t attn = layer_attn_scratch_floats(c, e->cuda ? attention_scratch_floats_cuda : attention_scratch_floats) *
	              sizeof(float);
	size_t lora = lora_scratch_bytes(e, 0, 4, T);   /* q k v o */
	size_t max_n = (size_t)(c->C > c->HD ? c->C : c->HD);
	size_t logits, hn, head, dout16, bytes = attn;
	size_t gate = align_up(lora_scratch_bytes(e, 4, N_PROJ, n)), up, h, dh, dgate, dup, mlp; /* gate up down */
	unsigned char *base;

	up = gate + align_up(n * F * sizeof(bf16));
	h = up + align_up(n * F * sizeof(bf16));
	dh = e->acts ? gate : h + align_up(n * FE * sizeof(bf16));
	dgate = dh + align_up(n * F * sizeof(float));
	dup = dgate + align_up(n * FE * sizeof(bf16));
	mlp = dup + n * FE * sizeof(bf16);
	if (lora > bytes)
		bytes = lora;
	if (mlp > bytes)
		bytes = mlp;
	c->chunk = head_chunk_rows(c, bytes);
	logits = align_up((size_t)c->chunk * c->V * sizeof(float));
	hn = align_up(head_bytes(c, (size_t)c->chunk));
	head = hn + T * c->C * sizeof(bf16);
	if (head_too && head > bytes) /* lane 1 runs no head */
		bytes = head;
	dout16 = align_up(lora > mlp ? lora : mlp);
	if (dout16 + T * (max_n + c->E) * sizeof(bf16) > bytes)
		bytes = dout16 + T * (max_n + c->E) * sizeof(bf16);
	base = carve(cv, bytes);
	c->attn_scratch = (float *)base;
	g->lora_scratch = (float *)base;
	c->logits = (float *)base;
	c->dlogits = region_at(base, logits);
	c->hn = region_at(base, hn);
	g->dout16 = region_at(base, dout16);
	if (!e->acts) {
		a->gate = region_at(base, gate);
		a->up = region_at(base, up);
		a->h = region_at(base, h);
	}
	g->dh = region_at(base, dh);
	g->dgate = region_at(base, dgate);
	g->dup = region_at(base, dup);
}

static void plan_lane_scratch(struct engine *e, struct carver *cv, struct layer_ctx *c, struct layer_act *a,
                              int head_too)
{
	struct grad_scratch *g = &c->g;
	long T = c->T, max_n = c->C > c->HD ? c->C : c->HD;

	/* datt lives from o_proj's backward to the attention's, between the
	 * two uses of dxn (the MLP's input gradient up to its norm's backward,
	 * then q, k and v's), so they share one buffer */
	g->dxn = CARVE_F32(cv, T * max_n);
	g->datt = g->dxn;
	if (c->HD > c->C) /* else dq takes the activations' x2 (layer.c, layer_dq) */
		g->dq = CARVE_F32(cv, T * c->HD);
	g->dk = CARVE_F32(cv, T * c->GD);
	g->dv = CARVE_F32(cv, T * c->GD);
	if (c->qk_norm) {
		g->dq_pre = CARVE_F32(cv, T * c->HD);
		g->dk_pre = CARVE_F32(cv, T * c->GD);
	}
	g->du = CARVE_F32(cv, T * c->R);
	plan_shared(e, cv, c, a, head_too);
}

/* The backward scratch and the shared region: lane 0's into e->lc (the
 * head's buffers there too), then, with two compute lanes, lane 1's:
 * the same pieces again, each lane's ops reading only its own. */
static void plan_scratch(struct engine *e, struct carver *cv)
{
	if (e->group > 1) { /* a group's rows; the head (e->lc) takes its pieces of them */
		struct layer_ctx c = group_ctx(e, e->group), c1 = c;

		plan_lane_scratch(e, cv, &c, &e->act, 1);
		e->lc.g = c.g;
		e->lc.attn_scratch = c.attn_scratch;
		e->lc.logits = c.logits, e->lc.dlogits = c.dlogits, e->lc.hn = c.hn;
		e->lc.chunk = c.chunk < e->lc.T ? c.chunk : e->lc.T;
		if (e->lanes > 1) { /* lane 1 runs groups too */
			plan_lane_scratch(e, cv, &c1, &e->lane_act, 0);
			e->lane_g = c1.g;
			e->lane_attn_scratch = c1.attn_scratch;
		}
		return;
	}
	plan_lane_scratch(e, cv, &e->lc, &e->act, 1);
	if (e->lanes > 1) {
		struct layer_ctx c1 = e->lc;

		plan_lane_scratch(e, cv, &c1, &e->lane_act, 0);
		e->lane_g = c1.g;
		e->lane_attn_scratch = c1.attn_scratch;
	}
}

static void plan_head(struct engine *e, struct carver *cv)
{
	struct layer_ctx *c = &e->lc;
	long T = c->T;

	c->head_rstd = CARVE_F32(cv, T);
	/* the head's gradient lives only inside the head, where no layer's
	 * backward runs: it takes the layers' norm-gradient buffer (T, >= C) */
	c->dhn = c->g.dxn;
	c->losses = CARVE_F32(cv, T * e->k);
}

/* A list of n (T,C) fp32 buffers, one after another (a group's calls
 * read consecutive micro-batches' as one). */
static void plan_streams(struct engine *e, struct carver *cv, float **list, int n)
{
	size_t each = align_up((size_t)e->lc.T * e->lc.C * sizeof(float));
	unsigned char *base = carve(cv, each * (size_t)n);

	for (int i = 0; i < n; i++)
		list[i] = (float *)region_at(base, each * (size_t)i);
}

static void plan_ckpts(struct engine *e, struct carver *cv)
{
	if (e->blockwise) {
		for (int s = 0; s < e->cs.n_sets; s++) /* 1 or 2; --checkpoints block: bs */
			e->cs.dev[s] = carve(cv, e->cs.rec_bytes);
	} else {
		plan_streams(e, cv, e->ckpt, e->n_ckpt);
	}
}

static void plan_dresid(struct engine *e, struct carver *cv)
{
	plan_streams(e, cv, e->dresid, e->blockwise ? e->k : 1);
}

static void plan_embed_rows(struct engine *e, struct carver *cv)
{
	e->embed_rows = CARVE_BF16(cv, (long)e->k * e->lc.T * e->lc.C);
}

static void plan_misc(struct engine *e, struct carver *cv)
{
	struct layer_ctx *c = &e->lc;

	e->targets = carve(cv, (size_t)e->k * c->T * sizeof(int32_t));
	e->pos = carve(cv, (size_t)e->k * c->T * sizeof(int32_t));
	e->iota = carve(cv, (size_t)c->T * sizeof(int32_t));
	e->rope_cos = CARVE_F32(cv, (long)c->S * (c->D / 2));
	e->rope_sin = CARVE_F32(cv, (long)c->S * (c->D / 2));
	e->sumsq = CARVE_F32(cv, 1);
	e->sumsq_scratch = CARVE_F32(cv, sumsq_scratch_floats(e->lora.total));
}

static void plan_grad_partials(struct engine *e, struct carver *cv)
{
	size_t n = gradtree_scratch_floats(e), g = gradtree_group_floats(e);

	gradtree_bind(e, n ? CARVE_F32(cv, (long)n) : NULL);
	gradtree_bind_group(e, g ? CARVE_F32(cv, (long)g) : NULL);
}

/* One allocation for purpose, carved by plan (a dry allocator gives a
 * NULL base: the pieces stay NULL, the sizes are the same).  0 or -1. */
static int alloc_plan(struct engine *e, void (*plan)(struct engine *, struct carver *), const char *purpose,
                      const char *what)
{
	struct carver cv = { NULL, 0 };
	char sz[32];
	void *base;

	plan(e, &cv);
	dev_alloc_set_purpose(&e->alloc, purpose);
	if (dev_alloc(&e->alloc, &base, cv.off, "%s (%s)", what, format_bytes(sz, sizeof sz, (double)cv.off)) < 0)
		return -1;
	cv.base = base;
	cv.off = 0;
	plan(e, &cv);
	return 0;
}

/* The step's embedding rows (k,T,C) bf16.  Blockwise reads them all
 * before the head, which first writes the residual-stream gradients, so
 * there they take those (k (T,C) fp32 buffers in a row); the next step's
 * rows come in after this step's backward (staging.c). */
static int alloc_embed_rows(struct engine *e)
{
	if (e->blockwise) {
		e->embed_rows = (bf16 *)e->dresid[0];
		e->embed_rows_shared = 1;
		return 0;
	}
	return alloc_plan(e, plan_embed_rows, "embedding", "the step's embedding rows");
}

static int alloc_weights(struct engine *e, char *err, size_t errsz)
{
	const struct layer_layout *lay = &e->hw->lay;
	const struct global_layout *glob = &e->hw->glob;
	size_t glob_bytes;
	char sz[32];
	void *p;

	/* the embedding stays on the host unless lm_head is the same table */
	e->glob_start = glob->lm_head == glob->embed ? 0 : glob->final_norm;
	glob_bytes = glob->bytes - e->glob_start;
	dev_alloc_set_purpose(&e->alloc, "lm_head");
	if (dev_alloc(&e->alloc, &p, glob_bytes, "the final norm and lm_head (%s)",
	              format_bytes(sz, sizeof sz, (double)glob_bytes)) < 0)
		return set_error(err, errsz, "%s", e->alloc.err);
	e->globals = p;
	if (e->blockwise) {
		size_t slab = (size_t)e->bs * lay->stride;

		dev_alloc_set_purpose(&e->alloc, "slabs");
		if (dev_alloc(&e->alloc, &p, 2 * slab, "2 slabs of %s", format_bytes(sz, sizeof sz, (double)slab)) < 0)
			return set_error(err, errsz, "%s", e->alloc.err);
		e->slab[0].mem = p;
		e->slab[1].mem = p ? (unsigned char *)p + slab : NULL; /* NULL: a plan */
	} else {
		size_t all = (size_t)e->L * lay->stride;

		dev_alloc_set_purpose(&e->alloc, "layers");
		if (dev_alloc(&e->alloc, &p, all, "all %d layers' weights (%s)", e->L,
		              format_bytes(sz, sizeof sz, (double)all)) < 0)
			return set_error(err, errsz, "%s", e->alloc.err);
		e->layers = p;
	}
	e->dequant_layer = -1;
	if (lay->nf4) {
		/* one layer: both schedules use a layer's weights for every
		 * micro-batch it serves before moving to the next */
		dev_alloc_set_purpose(&e->alloc, "dequant");
		if (dev_alloc(&e->alloc, &p, e->dequant_bytes, "a dequantization buffer for one layer (%s)",
		              format_bytes(sz, sizeof sz, (double)e->dequant_bytes)) < 0)
			return set_error(err, errsz, "%s", e->alloc.err);
		e->dequant = p;
	}
	return 0;
}

/* With the moments on the host, the AdamW update runs over chunks of this
 * many parameters, each chunk's moments copied in and out. */
#define OPT_CHUNK_FLOATS (1L << 22)

static int alloc_state(struct engine *e, char *err, size_t errsz)
{
	size_t lora_bytes = (size_t)e->lora.total * sizeof(float);
	int eval_only = e->cfg->eval_only; /* an evaluation has no gradients and no AdamW moments */
	int on_host = e->cfg->optimizer_on_host && !eval_only;
	long most = e->cfg->opt_chunk ? e->cfg->opt_chunk : OPT_CHUNK_FLOATS;
	long chunk = e->lora.total < most ? e->lora.total : most;
	size_t dev_bytes = eval_only ? lora_bytes
	                   : on_host ? 2 * lora_bytes + 2 * (size_t)chunk * sizeof(float) : 4 * lora_bytes;
	char sz[32], what[96];
	void *p;
	float *state;

	dev_alloc_set_purpose(&e->alloc, "lora_state");
	if (dev_alloc(&e->alloc, &p, dev_bytes, "%s (%s)",
	              eval_only ? "LoRA parameters"
	              : on_host ? "LoRA parameters, gradients and an AdamW chunk"
	                        : "LoRA parameters, gradients and AdamW state",
	              format_bytes(sz, sizeof sz, (double)dev_bytes)) < 0)
		return set_error(err, errsz, "%s", e->alloc.err);
	state = p;
	if (state) { /* NULL: a plan */
		e->params = state;
		if (eval_only) {
			e->grads = e->adam_m = e->adam_v = NULL;
		} else if (on_host) {
			e->grads = state + e->lora.total;
			e->opt_chunk = state + 2 * e->lora.total;
			e->opt_chunk_n = chunk;
			if (e->be->host_alloc((void **)&e->adam_m, lora_bytes) != 0 ||
			    e->be->host_alloc((void **)&e->adam_v, lora_bytes) != 0)
				return set_error(err, errsz, "cannot pin %s of host memory for the AdamW state",
				                 format_bytes(sz, sizeof sz, 2.0 * (double)lora_bytes));
		} else {
			e->grads = state + e->lora.total;
			e->adam_m = state + 2 * e->lora.total;
			e->adam_v = state + 3 * e->lora.total;
		}
	}

	if (!e->blockwise && !e->cfg->cell.training.gradient_checkpointing)
		e->acts = xcalloc((size_t)e->L, sizeof *e->acts);
	snprintf(what, sizeof what, "activations of %d layer%s", e->acts ? e->L : 1, e->acts && e->L > 1 ? "s" : "");
	if (alloc_plan(e, plan_acts, "activations", what) < 0)
		return set_error(err, errsz, "%s", e->alloc.err);
	if (e->blockwise) {
		snprintf(what, sizeof what, "%d set%s of %d layer-input%s checkpoints", e->cs.n_sets,
		         e->cs.n_sets > 1 ? "s" : "", e->k, e->cs.attn == ATTN_CKPT_SUBLAYER ? " and attention-sublayer"
		         : e->cs.attn ? " and attention" : "");
	} else {
		e->n_ckpt = e->L + 1;
		e->ckpt = xcalloc((size_t)e->n_ckpt, sizeof *e->ckpt);
		snprintf(what, sizeof what, "%d activation checkpoints", e->n_ckpt);
	}
	if (alloc_plan(e, plan_ckpts, "checkpoints", what) < 0)
		return set_error(err, errsz, "%s", e->alloc.err);
	e->dresid = xcalloc((size_t)e->k, sizeof *e->dresid);
	if (alloc_plan(e, plan_dresid, "residual_grads", "residual-stream gradients") < 0 ||
	    alloc_plan(e, plan_scratch, "workspace", "backward scratch") < 0 ||
	    alloc_plan(e, plan_head, "head", "the lm_head and loss buffers") < 0 ||
	    alloc_embed_rows(e) < 0 ||
	    alloc_plan(e, plan_misc, "misc", "targets, rope tables and norm scratch") < 0)
		return set_error(err, errsz, "%s", e->alloc.err);
	gradtree_init(e, e->comm_rank, e->comm_world);
	if (gradtree_scratch_floats(e) + gradtree_group_floats(e) > 0 &&
	    alloc_plan(e, plan_grad_partials, "grad_partials", "partial sums of micro-batch gradients") < 0)
		return set_error(err, errsz, "%s", e->alloc.err);
	return 0;
}

int plan_device(struct engine *e, char *err, size_t errsz)
{
	struct layer_ctx *c = &e->lc;
	char sz[32];

	/* every layer's checkpoint record, pinned on the host (host memory:
	 * not in a plan, which allocates nothing), or those run.c put on disk
	 * in --checkpoint-dir's file; as for the base, more than the host has
	 * is refused before any of it is pinned */
	plan_ckpt_layout(e);
	if (e->blockwise && !e->alloc.dry) {
		const struct ckpt_tier *t = &e->cs.tier;
		size_t bytes = engine_host_ckpt_bytes(e), avail = host_memory_available();
		char have[32];

		if (avail && bytes > avail) {
			e->host_oom = 1;
			return set_error(err, errsz, "%d %s' checkpoints need %s of host memory, %s available (%s)%s",
			                 t->n - t->n_disk, e->cs.block ? "blocks" : "layers", format_bytes(sz, sizeof sz, (double)bytes),
			                 format_bytes(have, sizeof have, (double)avail), host_memory_source(),
			                 e->cs.block ? "" : e->cs.attn ? "; POROS_ATTN_CKPT=0 keeps only the layer inputs"
			                 : "; --checkpoints block keeps one input a block");
		}
		if (t->host > 0 && e->be->host_alloc((void **)&e->cs.host, t->host) != 0) {
			e->cs.host = NULL;
			return set_error(err, errsz, "allocating host memory for %d layers' checkpoints (%s) failed", e->L,
			                 format_bytes(sz, sizeof sz, (double)t->host));
		}
		if (t->n_disk > 0 && e->cfg->ckpt_file == NULL)
			return set_error(err, errsz, "internal error: %d checkpoint records on disk, and no file", t->n_disk);
		if (t->n_disk > 0 && (e->cs.disk = ckpt_disk_start(e->be, t, e->cfg->ckpt_file, err, errsz)) == NULL)
			return -1;
	}
	if (alloc_weights(e, err, errsz) < 0)
		return -1;
	if (alloc_state(e, err, errsz) < 0) {
		size_t len = strlen(err);

		/* what the user can trade for memory, said where it runs out */
		if (e->acts && e->alloc.oom && len < errsz)
			snprintf(err + len, errsz - len, " (resident keeps all %d layers' activations: "
			         "--gradient-checkpointing on keeps one layer's)", e->L);
		return -1;
	}
	/* what the math reads, now that it has addresses */
	c->lora = e->params;
	c->lora_grad = e->grads;
	c->rope_cos = e->rope_cos;
	c->rope_sin = e->rope_sin;
	c->embed_rows = e->embed_rows;
	c->targets = e->targets;
	c->pos = e->pos;
	c->iota = e->iota;
	return 0;
}

int plan_upload(struct engine *e, char *err, size_t errsz)
{
	const struct backend *be = e->be;
	const struct host_weights *hw = e->hw;
	struct layer_ctx *c = &e->lc;
	size_t half = (size_t)c->S * (c->D / 2);
	float *cos_t = xmalloc(half * sizeof *cos_t), *sin_t = xmalloc(half * sizeof *sin_t);
	float *init = xmalloc((size_t)e->lora.total * sizeof *init);
	int32_t *iota = xmalloc((size_t)c->T * sizeof *iota);

	if (rope_tables(cos_t, sin_t, e->mc, c->S, err, errsz) < 0) {
		free(cos_t);
		free(sin_t);
		free(init);
		free(iota);
		return -1;
	}
	for (int t = 0; t < c->T; t++)
		iota[t] = t;
	lora_init_host(&e->lora, init, e->cfg->cell.training.seed);
	be->copy_h2d(e->globals, hw->globals + e->glob_start, hw->glob.bytes - e->glob_start, STREAM_COMPUTE);
	c->final_norm = (const bf16 *)(e->globals + (hw->glob.final_norm - e->glob_start));
	c->lm_head = (const bf16 *)(e->globals + (hw->glob.lm_head - e->glob_start));
	if (!e->blockwise)
		be->copy_h2d(e->layers, hw->layers, (size_t)e->L * hw->lay.stride, STREAM_COMPUTE);
	be->copy_h2d(e->rope_cos, cos_t, half * sizeof(float), STREAM_COMPUTE);
	be->copy_h2d(e->rope_sin, sin_t, half * sizeof(float), STREAM_COMPUTE);
	be->copy_h2d(e->iota, iota, (size_t)c->T * sizeof(int32_t), STREAM_COMPUTE);
	be->copy_h2d(e->params, init, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	if (e->opt_chunk) {
		memset(e->adam_m, 0, (size_t)e->lora.total * sizeof(float));
		memset(e->adam_v, 0, (size_t)e->lora.total * sizeof(float));
	} else if (e->adam_m) { /* none in an evaluation */
		be->memset_zero(e->adam_m, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
		be->memset_zero(e->adam_v, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	}
	/* the host sources are freed below: wait for the copies */
	be->synchronize();
	free(cos_t);
	free(sin_t);
	free(init);
	free(iota);
	return 0;
}
