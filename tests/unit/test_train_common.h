/* tests/unit/test_train_common.h: builds an engine in-process for the
 * poros-train unit tests (model from configs/models, synthetic or
 * checkpoint weights, CPU backend).  Run from the repository root, as
 * `make test-unit` does. */
#ifndef TEST_TRAIN_COMMON_H
#define TEST_TRAIN_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/poros-train/engine.h"
#include "../../tools/poros-train/rope_tables.h"
#include "../../tools/poros-train/train.h"
#include "test_common.h"
#include "util/util.h"

struct tt_run {
	struct train_config cfg;
	struct model_config mc;
	struct token_source data;
	struct host_weights hw;
	struct engine *e;
	const struct lora_layout *lo;
};

/* A small, fast configuration: CPU, no dropout, bf16, resident. */
static inline void tt_config(struct train_config *c, const char *model)
{
	train_config_defaults(c);
	c->cell.model.model_id = xstrdup(model);
	c->configs_dir = xstrdup("configs/models");
	c->cell.precision = PRECISION_BF16;
	c->mode = MODE_RESIDENT;
	c->cell.method = METHOD_RESIDENT;
	c->cell.training.steps = 3;
	c->cell.training.seq_len = 16;
	c->cell.training.batch_size = 2;
	c->cell.training.gradient_accumulation_steps = 1;
	c->cell.lora.rank = 4;
	c->cell.lora.alpha = 8;
	c->cell.lora.dropout = 0;
	c->cell.training.learning_rate = 1e-3;
	c->cell.poros.block_size = 2;
	c->quiet = 1;
	free(c->backend);
	c->backend = xstrdup("cpu");
}

/* Model, dataset, weights and engine for cfg (which tt_open takes over).
 * Returns 0, or -1 with the reason printed. */
static inline int tt_open(struct tt_run *r, const struct train_config *cfg)
{
	char err[1024];

	memset(r, 0, sizeof *r);
	r->cfg = *cfg;
	if (model_config_resolve(&r->mc, r->cfg.cell.model.model_id, r->cfg.configs_dir, err, sizeof err) < 0) {
		fprintf(stderr, "tt_open: %s\n", err);
		return -1;
	}
	if (token_source_open(&r->data, r->cfg.cell.training.dataset, &r->mc, r->cfg.cell.training.seq_len,
	                      r->cfg.cell.training.seed, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) < 0) {
		fprintf(stderr, "tt_open: %s\n", err);
		return -1;
	}
	if (host_weights_load(&r->hw, backend_cpu(), &r->mc, r->cfg.cell.precision == PRECISION_NF4,
	                      engine_host_ext_cols(&r->cfg), r->cfg.cell.training.seed, NULL, err, sizeof err) < 0) {
		fprintf(stderr, "tt_open: %s\n", err);
		return -1;
	}
	if (engine_create(&r->e, &r->cfg, &r->mc, &r->hw, &r->data, backend_cpu(), err, sizeof err) < 0) {
		fprintf(stderr, "tt_open: %s\n", err);
		return -1;
	}
	r->lo = engine_lora_layout(r->e);
	return 0;
}

static inline void tt_close(struct tt_run *r)
{
	engine_destroy(r->e);
	host_weights_free(&r->hw);
	token_source_free(&r->data);
	model_config_free(&r->mc);
	train_config_free(&r->cfg);
	memset(r, 0, sizeof *r);
}

/* What a short run gives: the loss of each of TT_STEPS steps and the LoRA
 * values after them (malloc'd; free params). */
#define TT_STEPS 3
struct tt_outcome {
	float loss[TT_STEPS];
	float *params;
	long n;
};

/* Trains cfg for TT_STEPS steps into o.  0, or -1 (reported by tt_open). */
static inline int tt_train(struct tt_outcome *o, const struct train_config *cfg)
{
	struct tt_run r;
	struct step_stats st;

	if (tt_open(&r, cfg) < 0)
		return -1;
	for (int s = 1; s <= TT_STEPS; s++) {
		if (engine_step(r.e, s, &st) < 0) {
			tt_close(&r);
			return -1;
		}
		o->loss[s - 1] = (float)st.loss;
	}
	o->n = r.lo->total;
	o->params = xmalloc((size_t)o->n * sizeof *o->params);
	engine_lora_read(r.e, o->params);
	tt_close(&r);
	return 0;
}

/* Checks that a and b are the same bits, every loss and every LoRA value
 * (memcmp: not "close"), naming the first that differs; 1 when they are. */
static inline int tt_same_bits(const char *what, const struct tt_outcome *a, const struct tt_outcome *b)
{
	long first = -1;

	CHECKF(a->n == b->n, "%s: %ld vs %ld LoRA values", what, a->n, b->n);
	if (a->n != b->n)
		return 0;
	for (int s = 0; s < TT_STEPS; s++)
		if (memcmp(&a->loss[s], &b->loss[s], sizeof(float)) != 0) {
			CHECKF(0, "%s: step %d loss %.9g vs %.9g", what, s + 1, a->loss[s], b->loss[s]);
			return 0;
		}
	for (long i = 0; i < a->n && first < 0; i++)
		if (memcmp(&a->params[i], &b->params[i], sizeof(float)) != 0)
			first = i;
	CHECKF(first < 0, "%s: LoRA value %ld differs: %.9g vs %.9g", what, first, first < 0 ? 0.0 : a->params[first],
	       first < 0 ? 0.0 : b->params[first]);
	return first < 0;
}

/* The parity tests' runs (test_train_parity, test_train_chunk): TT_STEPS
 * steps of a cosine schedule with weight decay, in mode at block_size, NF4
 * or bf16, accumulation accum, dropout. */
static inline void tt_parity_config(struct train_config *cfg, const char *model, int mode, int block_size, int nf4,
                                    int accum, double dropout)
{
	tt_config(cfg, model);
	cfg->mode = mode;
	cfg->cell.poros.block_size = block_size;
	cfg->cell.precision = nf4 ? PRECISION_NF4 : PRECISION_BF16;
	cfg->cell.training.gradient_accumulation_steps = accum;
	cfg->cell.lora.dropout = dropout;
	cfg->cell.training.steps = TT_STEPS;
	cfg->cell.training.lr_schedule = LR_COSINE;
	cfg->cell.training.weight_decay = 0.01;
	cfg->cell.training.learning_rate = 5e-3;
}

/* Trains the reference run of a parity comparison (model: cfg's, named
 * in the report); -1 when it failed (a failed check).  Its loss must have
 * moved, or the comparison would prove little. */
static inline int tt_reference_run(struct tt_outcome *ref, const struct train_config *cfg, const char *model)
{
	if (tt_train(ref, cfg) < 0) {
		CHECKF(0, "%s: resident run failed", model);
		return -1;
	}
	CHECKF(ref->loss[TT_STEPS - 1] != ref->loss[0], "%s: loss did not change", model);
	return 0;
}

/* Trains cfg and checks that it gives ref's bits (tt_same_bits, named
 * what); 1 when it ran, 0 when the run failed (a failed check). */
static inline int tt_compare_run(const char *what, const struct tt_outcome *ref, const struct train_config *cfg)
{
	struct tt_outcome got;

	if (tt_train(&got, cfg) < 0) {
		CHECKF(0, "%s: run failed", what);
		return 0;
	}
	tt_same_bits(what, ref, &got);
	free(got.params);
	return 1;
}

/* Uniform in [-1, 1) from a counter. */
static inline double tt_uniform(uint64_t seed, uint64_t i)
{
	return (double)(poros_mix64(seed ^ poros_mix64(i)) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* Fills every LoRA value (not the padding) with f(index). */
static inline void tt_fill_lora(const struct lora_layout *lo, float *p, int only_b, float scale, uint64_t seed)
{
	for (int l = 0; l < lo->n_layers; l++)
		for (int m = 0; m < N_PROJ; m++) {
			const struct lora_slot *s = &lo->slot[l * N_PROJ + m];

			if (s->a < 0)
				continue;
			if (!only_b)
				for (long i = 0; i < (long)lo->rank * s->n_in; i++)
					p[s->a + i] = scale * (float)tt_uniform(seed, (uint64_t)(s->a + i));
			for (long i = 0; i < (long)lo->rank * s->n_out; i++)
				p[s->b + i] = scale * (float)tt_uniform(seed, (uint64_t)(s->b + i));
		}
}

#endif
