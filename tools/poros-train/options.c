/* tools/poros-train/options.c: a run's configuration from defaults, a
 * cell and flags, in that order of precedence (flags win). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "jsonl.h"
#include "train.h"
#include "util.h"

const char *const train_mode_names[2] = { "blockwise", "resident" };

const char *const train_opt_names[OPT_COUNT] = {
#define TRAIN_OPT_NAME(id, name, has_arg) name,
	TRAIN_OPTIONS(TRAIN_OPT_NAME)
#undef TRAIN_OPT_NAME
};

void train_config_defaults(struct train_config *c)
{
	memset(c, 0, sizeof *c);
	cell_defaults(&c->cell); /* the cell table's defaults, as for a spec */
	c->mode = c->cell.method == METHOD_POROS ? MODE_BLOCKWISE : MODE_RESIDENT;
	c->backend = xstrdup("auto");
	c->lora_ext = 1;
	c->data_prefetch = 1;
	c->attn_ckpt = ATTN_CKPT_AUTO;
}

void train_config_free(struct train_config *c)
{
	cell_free(&c->cell);
	free(c->configs_dir);
	free(c->backend);
	free(c->out_dir);
	free(c->init_adapter);
	free(c->resume);
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
	cell_free(&c->cell);
	cell_copy(&c->cell, cell);
	c->mode = cell->method == METHOD_POROS ? MODE_BLOCKWISE : MODE_RESIDENT;
	free(c->out_dir);
	c->out_dir = xasprintf("%s/runs/%s", cell->output_dir, cell->cell_id);
	return 0;
}

int train_config_check(const struct train_config *c, char *err, size_t errsz)
{
	if (c->cell.model.model_id == NULL) /* an empty one is refused as --model's text */
		return snprintf(err, errsz, "no model: give --cell FILE or --model ID"), -1;
	/* each value's range is its cell field's (cell_field_parse, cell_from_json) */
	if ((long long)c->cell.training.seq_len * c->cell.training.batch_size > (1LL << 24))
		return snprintf(err, errsz, "--batch-size x --seq-len: %lld tokens per micro-batch is more than %lld",
		                (long long)c->cell.training.seq_len * c->cell.training.batch_size, 1LL << 24), -1;
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
	if (c->cell.training.eval_every > 0 && c->cell.training.eval_dataset == NULL &&
	    c->cell.training.eval_fraction == 0)
		return snprintf(err, errsz, "--eval-every: needs an evaluation dataset (--eval-dataset or "
		                "--eval-fraction)"), -1;
	if (c->cell.training.split && !name_is_safe(c->cell.training.split))
		return snprintf(err, errsz, "--split: \"%s\" is no split name (letters, digits, '.', '_', '-')",
		                c->cell.training.split), -1;
	if (c->cell.training.eval_split && !name_is_safe(c->cell.training.eval_split))
		return snprintf(err, errsz, "--eval-split: \"%s\" is no split name (letters, digits, '.', '_', '-')",
		                c->cell.training.eval_split), -1;
	if (c->cell.training.eval_split && c->cell.training.eval_dataset == NULL)
		return snprintf(err, errsz, "--eval-split: needs an evaluation dataset (--eval-dataset)"), -1;
	if (c->cell.training.eval_fraction > 0 && c->cell.training.eval_dataset)
		return snprintf(err, errsz, "--eval-fraction and --eval-dataset: the fraction holds out part of "
		                "--dataset as the evaluation set; give one of them"), -1;
	return 0;
}

/* The environment's knobs, read here and nowhere else. */
static int config_from_env(struct train_config *c, char *err, size_t errsz)
{
	const char *ext = getenv("POROS_LORA_EXT"), *noprefetch = getenv("POROS_NO_DATA_PREFETCH");
	const char *prof = getenv("POROS_PROFILE"), *chunk = getenv("POROS_MLP_CHUNK"), *why;
	const char *attn = getenv("POROS_ATTN_CKPT"), *mem = getenv("POROS_MEM_AVAILABLE");
	const char *route = getenv("POROS_ATTENTION");
	long rows = 0;

	/* the CUDA attention's route (kernels/ops.h) rounds otherwise: a typo
	 * must not silently take the other one */
	if (route && *route && strcmp(route, "mma") && strcmp(route, "cudnn"))
		return snprintf(err, errsz, "POROS_ATTENTION: unknown value \"%s\" (expected mma or cudnn)", route), -1;

	/* kernels/ops.h's LoRA extension: a typo must not silently leave it on */
	if (ext && *ext && strcmp(ext, "0") && strcmp(ext, "1"))
		return snprintf(err, errsz, "POROS_LORA_EXT: unknown value \"%s\" (expected 0 or 1)", ext), -1;
	c->lora_ext = !(ext && strcmp(ext, "0") == 0);
	/* blockwise's attention checkpoints change no bit, only memory and time */
	if (attn && *attn && strcmp(attn, "0") && strcmp(attn, "1"))
		return snprintf(err, errsz, "POROS_ATTN_CKPT: unknown value \"%s\" (expected 0 or 1)", attn), -1;
	c->attn_ckpt = attn && *attn ? strcmp(attn, "1") == 0 : ATTN_CKPT_AUTO;
	c->data_prefetch = !(noprefetch && *noprefetch && strcmp(noprefetch, "0") != 0);
	c->profile = prof && *prof && strcmp(prof, "0") != 0;
	/* the MLP's rows per chunk (the sums' order, so bits): an ablation and test knob */
	if (chunk && *chunk && parse_long(chunk, 1, 1L << 30, &rows, &why) < 0)
		return snprintf(err, errsz, "POROS_MLP_CHUNK: %s: %s", why, chunk), -1;
	c->mlp_chunk = (int)rows;
	/* what the host memory checks compare with: a test knob, never 0 (that would be no check) */
	c->mem_available = mem && *mem ? opt_bytes("POROS_MEM_AVAILABLE", mem) : 0;
	if (mem && *mem && c->mem_available == 0)
		return snprintf(err, errsz, "POROS_MEM_AVAILABLE: must be more than 0, got %s", mem), -1;
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

/* The option named flag ("--steps"), or -1. */
static int option_of(const char *flag)
{
	for (int i = 0; i < OPT_COUNT; i++)
		if (strncmp(flag, "--", 2) == 0 && strcmp(flag + 2, train_opt_names[i]) == 0)
			return i;
	return -1;
}

static void apply_flags(struct train_config *c, char *const v[OPT_COUNT])
{
	char err[512];

	/* The flags that set a cell field, by the cell's table: a flag takes
	 * what a cell's field takes, with the same range. */
	for (int i = 0; i < cell_field_count; i++) {
		const struct cell_field *f = &cell_fields[i];
		int o = f->flag ? option_of(f->flag) : -1;

		if (f->flag && o < 0)
			die(EXIT_RUNTIME, "%s: the cell table names %s, which is no option", f->path, f->flag);
		if (o >= 0 && v[o] && cell_field_parse(&c->cell, f, f->flag, v[o], err, sizeof err) < 0)
			die(EXIT_USAGE, "%s", err);
	}
	if (v[OPT_MODE]) {
		c->mode = (enum train_mode)pick("--mode", v[OPT_MODE], train_mode_names, 2);
		c->cell.method = c->mode == MODE_BLOCKWISE ? METHOD_POROS : METHOD_RESIDENT;
	}
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
	if (v[OPT_SAVE_TOTAL_LIMIT])
		c->save_total_limit = (int)opt_long("--save-total-limit", v[OPT_SAVE_TOTAL_LIMIT], 1, 1000000);
	c->dataset_named = v[OPT_DATASET] != NULL || v[OPT_CELL] != NULL;
	if (v[OPT_EPOCHS])
		c->epochs = opt_double("--epochs", v[OPT_EPOCHS], 1e-6, 100000);
	c->steps_given = v[OPT_STEPS] != NULL;
	if (v[OPT_QUIET])
		c->quiet = 1;
	if (v[OPT_PLAN])
		c->plan = 1;
	if (v[OPT_RESUME])
		replace(&c->resume, v[OPT_RESUME]);
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
	if (c->resume && checkpoint_take(c, v, err, sizeof err) < 0)
		die(EXIT_USAGE, "%s", err);
	if (c->cell.cell_id == NULL && c->cell.model.model_id) {
		char *slug = slugify(c->cell.model.model_id, 1);

		c->cell.cell_id = cell_make_id(c->cell.method, slug, c->cell.precision);
		free(slug);
	}
	c->cell.tokens_per_step = (long long)c->cell.training.batch_size * c->cell.training.seq_len *
	                          c->cell.training.gradient_accumulation_steps;
	if (c->out_dir == NULL && c->cell.cell_id)
		c->out_dir = xasprintf("out/runs/%s", c->cell.cell_id);
	configs = v[OPT_CONFIGS] ? xstrdup(v[OPT_CONFIGS]) : default_configs_dir();
	if (configs) {
		c->configs_dir = xasprintf("%s/models", configs);
		free(configs);
	}
	if (train_config_check(c, err, sizeof err) < 0 || config_from_env(c, err, sizeof err) < 0)
		die(EXIT_USAGE, "%s", err);
}
