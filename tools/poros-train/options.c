/* tools/poros-train/options.c: a run's configuration from defaults, a
 * cell and flags, in that order of precedence (flags win). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "train.h"
#include "util.h"

const char *const train_mode_names[2] = { "blockwise", "resident" };

#define ALL_TARGETS ((1u << CELL_MAX_TARGETS) - 1)

void train_config_defaults(struct train_config *c)
{
	memset(c, 0, sizeof *c);
	c->method = METHOD_POROS;
	c->mode = MODE_BLOCKWISE;
	c->precision = PRECISION_NF4;
	c->steps = 10;
	c->seq_len = 128;
	c->batch_size = 1;
	c->accum = 1;
	c->warmup_steps = 0;
	c->dataset = xstrdup("synthetic");
	c->seed = 42;
	c->lr = 2e-4;
	c->weight_decay = 0.0;
	c->max_grad_norm = 1.0;
	c->lr_schedule = LR_CONSTANT;
	c->rank = 16;
	c->alpha = 32;
	c->dropout = 0.05;
	c->target_mask = ALL_TARGETS;
	c->block_size = 4;
	c->prefetch = 1;
	c->backend = xstrdup("auto");
	c->lora_ext = 1;
	c->data_prefetch = 1;
}

void train_config_free(struct train_config *c)
{
	free(c->model_id);
	free(c->configs_dir);
	free(c->dataset);
	free(c->tokenizer);
	free(c->backend);
	free(c->out_dir);
	free(c->init_adapter);
	free(c->resume);
	free(c->eval_dataset);
	free(c->cell_id);
	memset(c, 0, sizeof *c);
}

static void replace(char **field, const char *s)
{
	free(*field);
	*field = s ? xstrdup(s) : NULL;
}

int train_config_from_cell(struct train_config *c, const struct cell *cell, char *err, size_t errsz)
{
	if (cell->method != METHOD_POROS && cell->method != METHOD_RESIDENT) {
		snprintf(err, errsz, "poros-train runs methods poros and resident; use poros-arm for %s",
		         method_names[cell->method]);
		return -1;
	}
	c->method = cell->method;
	c->mode = cell->method == METHOD_POROS ? MODE_BLOCKWISE : MODE_RESIDENT;
	c->precision = cell->precision;
	replace(&c->model_id, cell->model.model_id);
	c->steps = cell->training.steps;
	c->seq_len = cell->training.seq_len;
	c->batch_size = cell->training.batch_size;
	c->accum = cell->training.gradient_accumulation_steps;
	c->warmup_steps = cell->training.warmup_steps;
	c->lr_warmup_steps = cell->training.lr_warmup_steps;
	replace(&c->dataset, cell->training.dataset);
	replace(&c->tokenizer, cell->training.tokenizer);
	c->seed = cell->training.seed;
	c->lr = cell->training.learning_rate;
	c->weight_decay = cell->training.weight_decay;
	c->max_grad_norm = cell->training.max_grad_norm;
	c->lr_schedule = cell->training.lr_schedule;
	c->rank = cell->lora.rank;
	c->alpha = cell->lora.alpha;
	c->dropout = cell->lora.dropout;
	c->target_mask = cell->lora.target_mask;
	c->block_size = cell->poros.block_size;
	c->prefetch = cell->poros.enable_prefetch;
	c->recompute = cell->training.gradient_checkpointing;
	replace(&c->eval_dataset, cell->training.eval_dataset);
	c->eval_every = cell->training.eval_every;
	c->train_on = cell->training.train_on;
	replace(&c->cell_id, cell->cell_id);
	free(c->out_dir);
	c->out_dir = xasprintf("%s/runs/%s", cell->output_dir, cell->cell_id);
	return 0;
}

int train_config_check(const struct train_config *c, char *err, size_t errsz)
{
	if (c->model_id == NULL || *c->model_id == '\0')
		return snprintf(err, errsz, "no model: give --cell FILE or --model ID"), -1;
	if (!(c->lr > 0))
		return snprintf(err, errsz, "--lr: must be > 0"), -1;
	if (!(c->alpha > 0))
		return snprintf(err, errsz, "--alpha: must be > 0"), -1;
	if (!(c->dropout >= 0 && c->dropout < 1))
		return snprintf(err, errsz, "--dropout: must be in [0, 1)"), -1;
	if ((long long)c->seq_len * c->batch_size > (1LL << 24))
		return snprintf(err, errsz, "--batch-size x --seq-len: %lld tokens per micro-batch is more than %lld",
		                (long long)c->seq_len * c->batch_size, 1LL << 24), -1;
	if (strcmp(c->backend, "cpu") && strcmp(c->backend, "cuda") && strcmp(c->backend, "auto"))
		return snprintf(err, errsz, "--backend: unknown backend \"%s\" (expected one of: cpu, cuda, auto)",
		                c->backend), -1;
	if (c->out_dir == NULL || *c->out_dir == '\0')
		return snprintf(err, errsz, "--out: empty run directory"), -1;
	/* a resumed run's adapter is the checkpoint's: a warm start on top of
	 * it would be ignored, so it is refused */
	if (c->resume && c->init_adapter)
		return snprintf(err, errsz, "--resume and --init-adapter: a resumed run continues the checkpoint's "
		                "adapter; give one of them"), -1;
	if (c->eval_every > 0 && c->eval_dataset == NULL)
		return snprintf(err, errsz, "--eval-every: needs an evaluation dataset (--eval-dataset)"), -1;
	return 0;
}

/* The environment's knobs, read here and nowhere else. */
static int config_from_env(struct train_config *c, char *err, size_t errsz)
{
	const char *ext = getenv("POROS_LORA_EXT"), *noprefetch = getenv("POROS_NO_DATA_PREFETCH");
	const char *prof = getenv("POROS_PROFILE"), *chunk = getenv("POROS_MLP_CHUNK"), *why;
	long rows = 0;

	/* kernels/ops.h's LoRA extension: a typo must not silently leave it on */
	if (ext && *ext && strcmp(ext, "0") && strcmp(ext, "1"))
		return snprintf(err, errsz, "POROS_LORA_EXT: unknown value \"%s\" (expected 0 or 1)", ext), -1;
	c->lora_ext = !(ext && strcmp(ext, "0") == 0);
	c->data_prefetch = !(noprefetch && *noprefetch && strcmp(noprefetch, "0") != 0);
	c->profile = prof && *prof && strcmp(prof, "0") != 0;
	/* the MLP's rows per chunk (the sums' order, so bits): an ablation and test knob */
	if (chunk && *chunk && parse_long(chunk, 1, 1L << 30, &rows, &why) < 0)
		return snprintf(err, errsz, "POROS_MLP_CHUNK: %s: %s", why, chunk), -1;
	c->mlp_chunk = (int)rows;
	return 0;
}

/* The whole of stdin, for --cell -. */
static char *read_stdin(void)
{
	size_t len = 0, cap = 65536, n;
	char *buf = xmalloc(cap);

	while ((n = fread(buf + len, 1, cap - len - 1, stdin)) > 0) {
		len += n;
		if (cap - len - 1 == 0)
			buf = xrealloc(buf, cap *= 2);
	}
	if (ferror(stdin))
		diesys(EXIT_RUNTIME, "<stdin>: read error");
	buf[len] = '\0';
	return buf;
}

static void load_cell(struct train_config *c, const char *path)
{
	const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
	char err[512];
	struct cell cell;
	cJSON *obj;

	if (strcmp(path, "-") == 0) {
		char *text = read_stdin();
		const char *end = NULL;

		/* a cell file or one JSONL line: one object, then only whitespace */
		obj = cJSON_ParseWithOpts(text, &end, 1);
		free(text);
		if (obj == NULL)
			die(EXIT_USAGE, "<stdin>: not one valid JSON object");
	} else if ((obj = json_read_file(path, err, sizeof err)) == NULL) {
		die(EXIT_USAGE, "%s", err);
	}
	memset(&cell, 0, sizeof cell);
	if (cell_from_json(&cell, obj, err, sizeof err) < 0) {
		cJSON_Delete(obj);
		die(EXIT_USAGE, "%s: %s", name, err);
	}
	cJSON_Delete(obj);
	if (train_config_from_cell(c, &cell, err, sizeof err) < 0) {
		cell_free(&cell);
		die(EXIT_USAGE, "%s: %s", name, err);
	}
	cell_free(&cell);
}

static int pick(const char *opt, const char *s, const char *const *names, int n)
{
	char list[256] = "";

	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	for (int i = 0; i < n; i++) {
		strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
		strncat(list, names[i], sizeof list - strlen(list) - 1);
	}
	die(EXIT_USAGE, "%s: unknown value \"%s\" (expected one of: %s)", opt, s, list);
}

/* "q_proj,v_proj" or "all" */
static unsigned parse_targets(const char *s)
{
	unsigned mask = 0;
	char *copy, *tok, *save = NULL;

	if (strcmp(s, "all") == 0)
		return ALL_TARGETS;
	copy = xstrdup(s);
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int m = lora_module_from_name(tok);

		if (m < 0)
			die(EXIT_USAGE, "--targets: unknown module \"%s\" (expected a comma list of: q_proj, k_proj, v_proj, "
			    "o_proj, gate_proj, up_proj, down_proj; or all)", tok);
		mask |= 1u << m;
	}
	free(copy);
	if (mask == 0)
		die(EXIT_USAGE, "--targets: names no module");
	return mask;
}

static void apply_flags(struct train_config *c, char *const v[OPT_COUNT])
{
	if (v[OPT_MODEL])
		replace(&c->model_id, v[OPT_MODEL]);
	if (v[OPT_MODE]) {
		c->mode = (enum train_mode)pick("--mode", v[OPT_MODE], train_mode_names, 2);
		c->method = c->mode == MODE_BLOCKWISE ? METHOD_POROS : METHOD_RESIDENT;
	}
	if (v[OPT_PRECISION])
		c->precision = (enum precision)pick("--precision", v[OPT_PRECISION], precision_names, PRECISION_COUNT);
	if (v[OPT_STEPS])
		c->steps = (int)opt_long("--steps", v[OPT_STEPS], 1, 1000000);
	if (v[OPT_SEQ_LEN])
		c->seq_len = (int)opt_long("--seq-len", v[OPT_SEQ_LEN], 1, 1048576);
	if (v[OPT_BATCH_SIZE])
		c->batch_size = (int)opt_long("--batch-size", v[OPT_BATCH_SIZE], 1, 4096);
	if (v[OPT_ACCUM])
		c->accum = (int)opt_long("--accum", v[OPT_ACCUM], 1, 65536);
	if (v[OPT_RANK])
		c->rank = (int)opt_long("--rank", v[OPT_RANK], 1, 1024);
	if (v[OPT_ALPHA])
		c->alpha = opt_double("--alpha", v[OPT_ALPHA], 0, 65536);
	if (v[OPT_DROPOUT])
		c->dropout = opt_double("--dropout", v[OPT_DROPOUT], 0, 1);
	if (v[OPT_TARGETS])
		c->target_mask = parse_targets(v[OPT_TARGETS]);
	if (v[OPT_BLOCK_SIZE])
		c->block_size = (int)opt_long("--block-size", v[OPT_BLOCK_SIZE], 1, 1024);
	if (v[OPT_NO_PREFETCH])
		c->prefetch = 0;
	if (v[OPT_LR])
		c->lr = opt_double("--lr", v[OPT_LR], 0, 1);
	if (v[OPT_LR_SCHEDULE])
		c->lr_schedule = (enum lr_schedule)pick("--lr-schedule", v[OPT_LR_SCHEDULE], lr_schedule_names, LR_COUNT);
	if (v[OPT_WARMUP])
		c->warmup_steps = (int)opt_long("--warmup", v[OPT_WARMUP], 0, 999999);
	if (v[OPT_LR_WARMUP])
		c->lr_warmup_steps = (int)opt_long("--lr-warmup", v[OPT_LR_WARMUP], 0, 999999);
	if (v[OPT_WEIGHT_DECAY])
		c->weight_decay = opt_double("--weight-decay", v[OPT_WEIGHT_DECAY], 0, 1);
	if (v[OPT_MAX_GRAD_NORM])
		c->max_grad_norm = opt_double("--max-grad-norm", v[OPT_MAX_GRAD_NORM], 0, 1e6);
	if (v[OPT_SEED])
		c->seed = (uint64_t)opt_long("--seed", v[OPT_SEED], 0, 9007199254740991L);
	if (v[OPT_DATASET])
		replace(&c->dataset, v[OPT_DATASET]);
	if (v[OPT_TOKENIZER])
		replace(&c->tokenizer, v[OPT_TOKENIZER]);
	if (v[OPT_TRAIN_ON]) /* train_on_names[0] is "absent", not a value */
		c->train_on = 1 + pick("--train-on", v[OPT_TRAIN_ON], train_on_names + 1, TRAIN_ON_COUNT - 1);
	if (v[OPT_BACKEND])
		replace(&c->backend, v[OPT_BACKEND]);
	if (v[OPT_VRAM_BUDGET])
		c->vram_budget = opt_bytes("--vram-budget", v[OPT_VRAM_BUDGET]);
	if (v[OPT_OUT])
		replace(&c->out_dir, v[OPT_OUT]);
	if (v[OPT_INIT_ADAPTER])
		replace(&c->init_adapter, v[OPT_INIT_ADAPTER]);
	if (v[OPT_SAVE_EVERY])
		c->save_every = (int)opt_long("--save-every", v[OPT_SAVE_EVERY], 0, 1000000);
	if (v[OPT_QUIET])
		c->quiet = 1;
	if (v[OPT_PLAN])
		c->plan = 1;
	if (v[OPT_RESUME])
		replace(&c->resume, v[OPT_RESUME]);
	if (v[OPT_EVAL_DATASET])
		replace(&c->eval_dataset, v[OPT_EVAL_DATASET]);
	if (v[OPT_EVAL_EVERY])
		c->eval_every = (int)opt_long("--eval-every", v[OPT_EVAL_EVERY], 0, 1000000);
	if (v[OPT_GRAD_CKPT]) {
		static const char *const on_off[2] = { "off", "on" };

		c->recompute = pick("--gradient-checkpointing", v[OPT_GRAD_CKPT], on_off, 2);
	}
}

/* configs/models lives beside the binary when run from the source tree
 * (bin/../configs) and under share/poros when installed. */
static char *default_configs_dir(void)
{
	return poros_resource("configs");
}

void train_config_from_options(struct train_config *c, char *const v[OPT_COUNT])
{
	char err[512], *configs;

	train_config_defaults(c);
	if (v[OPT_CELL])
		load_cell(c, v[OPT_CELL]);
	apply_flags(c, v);
	if (c->cell_id == NULL && c->model_id) {
		char *slug = slugify(c->model_id, 1);

		c->cell_id = xasprintf("%s_%s_%s", method_names[c->method], slug, precision_names[c->precision]);
		free(slug);
	}
	if (c->out_dir == NULL && c->cell_id)
		c->out_dir = xasprintf("out/runs/%s", c->cell_id);
	configs = v[OPT_CONFIGS] ? xstrdup(v[OPT_CONFIGS]) : default_configs_dir();
	if (configs) {
		c->configs_dir = xasprintf("%s/models", configs);
		free(configs);
	}
	if (train_config_check(c, err, sizeof err) < 0 || config_from_env(c, err, sizeof err) < 0)
		die(EXIT_USAGE, "%s", err);
}
