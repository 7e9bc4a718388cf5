/* tools/poros-train/engine.c: the engine's API (engine.h): creation,
 * one training step (the batch, a pass of the schedule, clipping and
 * AdamW), the adapter's state in and out, and the figures a run reports.
 * Which file holds what: engine_impl.h; docs/engine.md. */
#include "engine_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util/util.h"

/* --- steps ------------------------------------------------------------------ */

double engine_forward_backward(struct engine *e, int step)
{
	double loss = 0;
	int T = e->lc.T;

	e->n_copies = e->n_computes = 0;
	e->h2d_bytes = 0;
	e->cs.d2h_bytes = e->cs.h2d_bytes = 0;
	e->err[0] = '\0';
	e->be->event_record(e->step_begin, STREAM_COMPUTE);
	if (e->prof)
		profile_begin(e->prof);
	if (staging_load(e, step) < 0)
		return NAN;
	e->be->memset_zero(e->grads, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	if (e->cs.block)
		blockwise_pass_block_ckpt(e, step);
	else if (e->blockwise)
		blockwise_pass(e, step);
	else
		resident_pass(e, step);
	if (e->cs.disk)
		ckpt_disk_take_counts(e->cs.disk, &e->cs.disk_written, &e->cs.disk_read);
	if (e->err[0])
		return NAN;
	e->be->copy_d2h(e->h_losses, e->lc.losses, (size_t)e->k * T * sizeof(float));
	/* summed on the host in one fixed order, the same for both schedules
	 * and any number of ranks (every rank's losses, in rank order: the
	 * micro-batches' global order); ignored targets have loss 0.  The mean
	 * over every target of the step, so gradient accumulation does not
	 * change it. */
	if (e->comm_world > 1) {
		size_t per_rank = (size_t)e->k * T * sizeof(float);

		memcpy((char *)e->h_losses_all + (size_t)e->comm_rank * per_rank, e->h_losses, per_rank);
		if (comm_allgather_bytes(e->comm, e->h_losses_all, per_rank) < 0) {
			snprintf(e->err, sizeof e->err, "the loss exchange between ranks failed: %s", comm_error(e->comm));
			return NAN;
		}
	}
	for (int j = 0; j < e->k * e->comm_world; j++)
		for (int t = 0; t < T; t++)
			loss += (e->comm_world > 1 ? e->h_losses_all : e->h_losses)[(size_t)j * T + t];
	return e->n_supervised ? loss / (double)e->n_supervised : NAN; /* no target: no loss */
}

const char *engine_error(const struct engine *e)
{
	return e->err[0] ? e->err : NULL;
}

double lr_at(const struct train_config *c, int step)
{
	/* HF counts scheduler steps from 0: the first optimizer step uses
	 * lr_lambda(0) */
	double s = step - 1, w = c->cell.training.lr_warmup_steps, n = c->cell.training.steps, progress;

	if (s < w)
		return c->cell.training.learning_rate * s / (w > 1 ? w : 1);
	progress = (s - w) / (n - w > 1 ? n - w : 1);
	switch (c->cell.training.lr_schedule) {
	case LR_LINEAR:
		return c->cell.training.learning_rate * fmax(0.0, (n - s) / (n - w > 1 ? n - w : 1));
	case LR_COSINE:
		return c->cell.training.learning_rate * fmax(0.0, 0.5 * (1.0 + cos(M_PI * progress)));
	case LR_CONSTANT:
	default:
		return c->cell.training.learning_rate;
	}
}

/* The end of a step: the closing events, the wait for the device, timing. */
static void step_end(struct engine *e, struct step_stats *st, double t0)
{
	if (e->prof)
		profile_close(e->prof);
	compute_close(e);
	e->be->synchronize();
	st->step_s = now_seconds() - t0;
	schedule_read_timing(e, st);
	if (e->prof)
		profile_finish(e->prof);
}

int engine_step(struct engine *e, int step, struct step_stats *st)
{
	double t0 = now_seconds();
	float norm, scale = 1.0f;

	memset(st, 0, sizeof *st);
	st->loss = engine_forward_backward(e, step);
	st->tokens_supervised = e->n_supervised;
	compute_open(e);
	norm = sqrtf(lora_grad_sumsq(e));
	st->grad_norm = norm;
	st->lr = lr_at(e->cfg, step);
	/* a step without a target has no loss (NaN) and nothing to learn */
	if ((!isfinite(st->loss) && (e->n_supervised > 0 || e->err[0])) || !isfinite(norm)) {
		step_end(e, st, t0);
		return -1;
	}
	/* torch.nn.utils.clip_grad_norm_: coef = max / (norm + 1e-6), clamped to 1 */
	if (e->cfg->cell.training.max_grad_norm > 0) {
		float coef = (float)e->cfg->cell.training.max_grad_norm / (norm + 1e-6f);

		scale = coef < 1.0f ? coef : 1.0f;
	}
	if (e->n_supervised > 0) /* a step without a target leaves the adapter as it was */
		lora_adamw(e, (float)st->lr, scale, step);
	step_end(e, st, t0);
	if (e->prof) { /* on stderr too, so a run that keeps only its log still has it */
		char buf[4096];

		if (engine_profile_json(e, buf, sizeof buf) > 0)
			fprintf(stderr, "%s: profile step %d: %s\n", progname, step, buf);
	}
	return 0;
}

int engine_profile_json(const struct engine *e, char *buf, size_t n)
{
	if (e->prof == NULL) {
		if (n)
			buf[0] = '\0';
		return -1;
	}
	return profile_json(e->prof, buf, n, e->cs.d2h_bytes, e->cs.h2d_bytes);
}

int engine_vram_breakdown_json(const struct engine *e, char *buf, size_t n)
{
	return dev_alloc_breakdown_json(&e->alloc, buf, n);
}

/* --- setup ------------------------------------------------------------------ */

static void set_dims(struct engine *e)
{
	const struct model_config *mc = e->mc;
	const struct train_config *cfg = e->cfg;
	struct layer_ctx *c = &e->lc;

	e->L = mc->num_hidden_layers;
	e->k = cfg->cell.training.gradient_accumulation_steps;
	e->blockwise = cfg->mode == MODE_BLOCKWISE;
	e->bs = cfg->cell.poros.block_size < e->L ? cfg->cell.poros.block_size : e->L;
	e->nb = (e->L + e->bs - 1) / e->bs;
	e->cs.block = engine_block_ckpt(cfg, e->L);
	e->cs.n_sets = engine_ckpt_sets(cfg, e->L);
	c->C = mc->hidden_size;
	c->F = mc->intermediate_size;
	c->H = mc->num_attention_heads;
	c->G = mc->num_key_value_heads;
	c->D = mc->head_dim;
	c->V = mc->vocab_size;
	c->HD = c->H * c->D;
	c->GD = c->G * c->D;
	c->R = cfg->cell.lora.rank;
	c->B = cfg->cell.training.batch_size;
	c->S = cfg->cell.training.seq_len;
	c->T = c->B * c->S;
	c->T_mb = c->T;
	c->mbs = 1;
	c->qk_norm = mc->qk_norm;
	c->mlp_chunk = cfg->mlp_chunk > 0 ? cfg->mlp_chunk : MLP_CHUNK_TOKENS;
	if (c->mlp_chunk > c->T)
		c->mlp_chunk = c->T;
	c->eps = (float)mc->rms_norm_eps;
	c->lora_scale = (float)(cfg->cell.lora.alpha / cfg->cell.lora.rank);
	c->dropout = (float)cfg->cell.lora.dropout;
	c->seed = cfg->cell.training.seed;
}

/* What a run and its plan do alike, in the same order: the dimensions,
 * the library's device memory, the adapter's and the dequant buffer's
 * layouts.  0, or -1 with err (over the budget already). */
static int engine_setup(struct engine *e, const struct train_config *cfg, const struct model_config *mc,
                        const struct host_weights *hw, size_t library_bytes, char *err, size_t errsz)
{
	e->cfg = cfg;
	e->mc = mc;
	e->hw = hw;
	e->comm = cfg->comm;
	e->comm_world = cfg->ranks > 1 ? cfg->ranks : 1;
	e->comm_rank = cfg->ranks > 1 ? cfg->rank : 0;
	set_dims(e);
	e->lc.mb_base = e->comm_rank * e->k;
	e->cuda = library_bytes != 0;
	e->lanes = engine_lanes(cfg, e->cuda);
	e->group = engine_group(cfg);
	if (library_bytes) {
		dev_alloc_set_purpose(&e->alloc, "blas_workspace");
		if (dev_alloc_count_held(&e->alloc, library_bytes, "the cuBLAS workspace") < 0)
			return set_error(err, errsz, "%s", e->alloc.err);
		/* lane 1's, the same size (backend.h), from the engine's allocator */
		if (e->lanes > 1 && dev_alloc(&e->alloc, &e->lane_blas, library_bytes, "lane 1's cuBLAS workspace") < 0)
			return set_error(err, errsz, "%s", e->alloc.err);
	}
	lora_layout_init(&e->lora, &hw->lay, e->L, e->lc.R, cfg->cell.lora.target_mask);
	e->ext_ver = xcalloc((size_t)e->L, sizeof *e->ext_ver);
	e->lc.slot = e->lora.slot;
	plan_dequant_layout(e);
	return 0;
}

/* The host arrays engine_setup and plan_device make. */
static void engine_free_host(struct engine *e)
{
	free(e->lora.slot);
	free(e->ext_ver);
	free(e->ckpt);
	free(e->acts);
	free(e->dresid);
	gradtree_free(e);
}

int engine_plan(struct dev_alloc *plan, struct ckpt_tier *tier, const struct train_config *cfg,
                const struct model_config *mc, const struct host_weights *hw, size_t library_bytes, char *err,
                size_t errsz)
{
	struct engine *e = xcalloc(1, sizeof *e);
	int rc;

	dev_alloc_init_dry(&e->alloc);
	rc = engine_setup(e, cfg, mc, hw, library_bytes, err, errsz);
	if (rc == 0)
		rc = plan_device(e, err, errsz);
	*plan = e->alloc; /* the blocks move to the caller */
	if (tier)
		*tier = e->cs.tier;
	engine_free_host(e);
	free(e);
	return rc;
}

int engine_create(struct engine **out, const struct train_config *cfg, const struct model_config *mc,
                  const struct host_weights *hw, struct token_source *data, const struct backend *be, char *err,
                  size_t errsz)
{
	struct engine *e = xcalloc(1, sizeof *e);

	*out = e;
	if (cfg->profile) { /* the same engine over a timed copy of the backend */
		e->prof = profile_create(be);
		be = profile_backend(e->prof);
	}
	e->be = be;
	e->data = data;
	e->lc.op = be->ops;
	e->lc.head_op = e->prof ? profile_head_ops(e->prof) : be->ops;
	e->lc.be = be;
	dev_alloc_init(&e->alloc, be, (size_t)cfg->vram_budget);
	if (engine_setup(e, cfg, mc, hw, be->library_device_bytes, err, errsz) < 0)
		return -1;
	if (e->lanes > 1 && be->lane_workspace(1, e->lane_blas, be->library_device_bytes) < 0)
		return set_error(err, errsz, "%s backend: cannot open compute lane 1", be->name);
	/* a group's products give each micro-batch's rows the bits of its own call */
	e->lc.choose_rows = engine_gemm_choice_rows(cfg);
	e->lc.attn_whole = be->attention_batch_invariant(e->lc.D, e->lc.S);
	be->set_row_unit(e->lc.T, e->lc.choose_rows);
	if (schedule_events_create(e) < 0)
		return set_error(err, errsz, "%s backend: cannot create events", be->name);
	e->n_pred = xcalloc((size_t)e->k, sizeof *e->n_pred);
	e->pos_plain = xcalloc((size_t)e->k, sizeof *e->pos_plain);
	e->lc.pos_plain = e->pos_plain;
	e->h_losses = xmalloc((size_t)e->k * e->lc.T * sizeof *e->h_losses);
	if (e->comm_world > 1)
		e->h_losses_all = xmalloc((size_t)e->comm_world * e->k * e->lc.T * sizeof *e->h_losses_all);
	if (staging_alloc(e, err, errsz) < 0 || plan_device(e, err, errsz) < 0)
		return -1;
	dev_alloc_freeze(&e->alloc);
	if (e->prof) {
		char buf[1024];

		if (engine_vram_breakdown_json(e, buf, sizeof buf) > 0)
			fprintf(stderr, "%s: vram breakdown (MiB): %s\n", progname, buf);
	}
	return plan_upload(e, err, errsz);
}

void engine_destroy(struct engine *e)
{
	if (e == NULL)
		return;
	e->be->synchronize();
	ckpt_disk_stop(e->cs.disk); /* its jobs wait on the copies just finished */
	schedule_events_destroy(e);
	dev_alloc_release_all(&e->alloc);
	staging_free(e);
	if (e->cs.host)
		e->be->host_free(e->cs.host);
	if (e->opt_chunk) { /* the moments were pinned on the host */
		if (e->adam_m)
			e->be->host_free(e->adam_m);
		if (e->adam_v)
			e->be->host_free(e->adam_v);
	}
	free(e->n_pred);
	free(e->pos_plain);
	free(e->h_losses);
	free(e->h_losses_all);
	engine_free_host(e);
	profile_destroy(e->prof); /* last: e->be may be its timed backend */
	free(e);
}

int engine_host_ext_cols(const struct train_config *cfg)
{
	const struct cell *c = &cfg->cell;

	if (c->precision == PRECISION_NF4 || c->lora.target_mask == 0 || c->lora.rank <= 0 || !cfg->lora_ext)
		return 0;
	return lora_ext_cols(c->lora.rank);
}

int engine_lanes(const struct train_config *cfg, int cuda)
{
	int k = cfg->cell.training.gradient_accumulation_steps, group = engine_group(cfg);

	if (cfg->mode != MODE_BLOCKWISE || k < 2 || cfg->eval_only || cfg->lanes == 1)
		return 1;
	/* groups take two lanes only when asked, and where a step has two */
	if (group > 1)
		return cfg->lanes == 2 && k > group ? 2 : 1;
	return cfg->lanes == 2 || cuda ? 2 : 1;
}

/* A micro-batch's rows a multiple of GROUP_ROW_ALIGN keep every per-
 * micro-batch piece (inputs, attention output, lse) a whole number of
 * LAYOUT_ALIGN bytes, so a group's pieces are contiguous, as its calls
 * read them. */
#define GROUP_ROW_ALIGN 128

int engine_group(const struct train_config *cfg)
{
	long T = (long)cfg->cell.training.batch_size * cfg->cell.training.seq_len;
	int k = cfg->cell.training.gradient_accumulation_steps;
	int chunk = cfg->mlp_chunk > 0 ? cfg->mlp_chunk : MLP_CHUNK_TOKENS;
	long want = cfg->group ? cfg->group : T > 0 ? GROUP_AUTO_ROWS / T : 1;

	if (want > GROUP_MAX)
		want = GROUP_MAX;
	if (want < 2 || cfg->group_cut || cfg->mode != MODE_BLOCKWISE || k < 2 || T > chunk || T % GROUP_ROW_ALIGN)
		return 1;
	return want < k ? (int)want : k;
}

int engine_gemm_choice_rows(const struct train_config *cfg)
{
	struct train_config blockwise = *cfg;
	int T = cfg->cell.training.batch_size * cfg->cell.training.seq_len;

	/* the group blockwise would take, whichever schedule runs: resident's
	 * calls of one micro-batch and blockwise's of a group run one
	 * algorithm a shape, so the two give the same bits */
	blockwise.mode = MODE_BLOCKWISE;
	blockwise.group_cut = 0; /* a budget's cut changes no bit */
	/* the step's micro-batches over every rank: n ranks choose as one
	 * process of the whole accumulation does, so they give its bits */
	if (cfg->ranks > 1)
		blockwise.cell.training.gradient_accumulation_steps *= cfg->ranks;
	return cfg->gemm_choice_group ? T * engine_group(&blockwise) : T;
}

int engine_block_ckpt(const struct train_config *cfg, int n_layers)
{
	int bs = cfg->cell.poros.block_size < n_layers ? cfg->cell.poros.block_size : n_layers;

	/* a block of one layer: its first input is every layer's, as --checkpoints layer */
	return cfg->mode == MODE_BLOCKWISE && cfg->cell.poros.checkpoints == CKPT_BLOCK && bs >= 2;
}

int engine_ckpt_sets(const struct train_config *cfg, int n_layers)
{
	int bs = cfg->cell.poros.block_size < n_layers ? cfg->cell.poros.block_size : n_layers;

	if (engine_block_ckpt(cfg, n_layers))
		return bs;
	return cfg->ckpt_sets == 1 && cfg->attn_ckpt == 0 ? 1 : 2;
}

int engine_oom(const struct engine *e)
{
	return e->alloc.oom || e->host_oom;
}

size_t engine_host_ckpt_bytes(const struct engine *e)
{
	return e->cs.tier.host + e->cs.tier.bounce;
}

void engine_disk_bytes(const struct engine *e, long long *written, long long *read)
{
	*written = e->cs.disk_written;
	*read = e->cs.disk_read;
}

const struct lora_layout *engine_lora_layout(const struct engine *e)
{
	return &e->lora;
}

void engine_lora_read(struct engine *e, float *host)
{
	e->be->copy_d2h(host, e->params, (size_t)e->lora.total * sizeof(float));
}

void engine_lora_write(struct engine *e, const float *host)
{
	e->be->copy_h2d(e->params, host, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	e->be->synchronize();
	e->lora_ver++;
}

void engine_grad_read(struct engine *e, float *host)
{
	e->be->copy_d2h(host, e->grads, (size_t)e->lora.total * sizeof(float));
}

size_t engine_vram_current(const struct engine *e)
{
	return e->alloc.current;
}

size_t engine_vram_peak(const struct engine *e)
{
	return e->alloc.peak;
}
