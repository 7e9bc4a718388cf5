/* tools/lib/records/cell.c: the cell schema "poros.cell/1": its names and the one
 * table of its fields (cell_fields: kind, range, default, flag), the bounds
 * and text rules a value must pass, cell ids, copying and freeing.  What
 * is done to a struct cell by the table (reading, writing, checking) is
 * cell_io.c's. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell.h"
#include "cell_int.h"
#include "util/util.h"

const char *const method_names[METHOD_COUNT] = {
	"poros", "resident", "unsloth", "peft", "accelerate_offload",
};
const char *const precision_names[PRECISION_COUNT] = { "nf4", "bf16" };
const char *const lr_schedule_names[LR_COUNT] = { "constant", "linear", "cosine" };
const char *const checkpoints_names[CKPT_COUNT] = { "layer", "block" };
const char *const train_on_names[TRAIN_ON_COUNT] = { "", "assistant", "all" };
const char *const lora_module_names[CELL_MAX_TARGETS] = {
	"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
};

/* 2^32 - 1: every arm must take the same seed, and numpy (under the Python
 * arms) refuses larger ones; cJSON also prints only 15 digits exactly. */
#define SEED_MAX 4294967295.0

/* Every enum member is read and written through an int. */
_Static_assert(sizeof(enum method) == sizeof(int) && sizeof(enum precision) == sizeof(int) &&
               sizeof(enum lr_schedule) == sizeof(int) && sizeof(enum checkpoints) == sizeof(int),
               "enums are int-sized");

#define ROW(p, k, member, pres) \
	.path = p, .bound.path = p, .kind = k, .offset = offsetof(struct cell, member), .presence = pres, \
	.bound.integer = (k) != CK_NUM
#define RANGE(lo, hi) .bound.min = lo, .bound.max = hi
#define TEXT(max, rule) .max_len = max, .text = rule
#define NAMES(list, n, noun) .names = list, .n_names = n, .what = noun
#define FLAG(f, arg) .flag = f, .flag_arg = arg

/* The cell, field by field, in the order it is written.  The maxima are
 * sanity bounds, far above any real run, so a typo (an extra few zeros)
 * is caught early rather than as an allocation failure an hour into a
 * bench.  Zero for vram_gb and pcie_gen means "not specified" (the spec
 * left hardware out).  A new field is a row here, a property in
 * share/poros/schema/cell.schema.json and a line in man/poros-spec.5; a
 * row of hardware, training, lora or poros is also a key of that spec
 * section (poros-expand reads the spec by these rows) unless CS_NONE. */
const struct cell_field cell_fields[] = {
	{ .path = "schema", .bound.path = "schema", .kind = CK_CONST, .def_str = CELL_SCHEMA },
	{ ROW("cell_id", CK_STR, cell_id, CP_REQUIRED), TEXT(128, CT_SAFE_NAME) },
	{ ROW("spec_id", CK_STR, spec_id, CP_REQUIRED), TEXT(128, CT_SAFE_NAME) },
	{ ROW("method", CK_ENUM, method, CP_REQUIRED), NAMES(method_names, METHOD_COUNT, "method"),
	  .def = METHOD_POROS }, /* poros-train's --mode picks poros or resident */
	{ ROW("precision", CK_ENUM, precision, CP_REQUIRED), NAMES(precision_names, PRECISION_COUNT, "precision"),
	  .def = PRECISION_NF4, FLAG("--precision", "nf4|bf16") },

	{ ROW("model.model_id", CK_STR, model.model_id, CP_REQUIRED), TEXT(CELL_PATH_MAX, CT_PLAIN),
	  FLAG("--model", "ID") },
	{ ROW("model.display_name", CK_STR, model.display_name, CP_REQUIRED), TEXT(CELL_NAME_MAX, CT_PLAIN) },
	{ ROW("model.param_count_b", CK_NUM, model.param_count_b, CP_NULLABLE), RANGE(0, 100000) },
	{ ROW("model.arch", CK_STR, model.arch, CP_REQUIRED), TEXT(128, CT_SLUG) },

	{ ROW("hardware.gpu_name", CK_STR, hardware.gpu_name, CP_NULLABLE), TEXT(CELL_NAME_MAX, CT_PLAIN) },
	{ ROW("hardware.vram_gb", CK_NUM, hardware.vram_gb, CP_NULLABLE), RANGE(0, 65536), .spec = CS_POSITIVE },
	{ ROW("hardware.pcie_gen", CK_INT, hardware.pcie_gen, CP_NULLABLE), RANGE(0, 7), .spec = CS_POSITIVE },
	/* the host poros plan checks the host plan against; never a result */
	{ ROW("hardware.host_ram_gb", CK_NUM, hardware.host_ram_gb, CP_IF_SET), RANGE(0, 1048576), .spec = CS_POSITIVE },
	/* one run data-parallel over this many GPUs (poros-arm: poros-train --gpus N) */
	{ ROW("hardware.gpus", CK_INT, hardware.gpus, CP_IF_SET), RANGE(0, 256), .spec = CS_POSITIVE },

	{ ROW("training.steps", CK_INT, training.steps, CP_REQUIRED), RANGE(1, 1000000), .def = 10,
	  FLAG("--steps", "N"), .spec = CS_REQUIRED },
	{ ROW("training.seq_len", CK_INT, training.seq_len, CP_REQUIRED), RANGE(1, 1048576), .def = 128,
	  FLAG("--seq-len", "N"), .spec = CS_REQUIRED },
	{ ROW("training.batch_size", CK_INT, training.batch_size, CP_REQUIRED), RANGE(1, 4096), .def = 1,
	  FLAG("--batch-size", "N") },
	{ ROW("training.gradient_accumulation_steps", CK_INT, training.gradient_accumulation_steps, CP_REQUIRED),
	  RANGE(1, 65536), .def = 1, FLAG("--accum", "K") },
	{ ROW("training.warmup_steps", CK_INT, training.warmup_steps, CP_REQUIRED), RANGE(0, 999999), .def = 0,
	  FLAG("--timing-warmup", "N") },
	{ ROW("training.dataset", CK_STR, training.dataset, CP_REQUIRED), TEXT(CELL_PATH_MAX, CT_PLAIN),
	  .def_str = "synthetic", FLAG("--dataset", "SPEC") },
	{ ROW("training.seed", CK_U64, training.seed, CP_REQUIRED), RANGE(0, SEED_MAX), .def = 42,
	  FLAG("--seed", "S") },
	{ ROW("training.learning_rate", CK_NUM, training.learning_rate, CP_REQUIRED), RANGE(0, 1),
	  .bound.min_open = 1, .def = 2e-4, FLAG("--lr", "LR") },
	{ ROW("training.lr_schedule", CK_ENUM, training.lr_schedule, CP_REQUIRED),
	  NAMES(lr_schedule_names, LR_COUNT, "schedule"), .def = LR_CONSTANT,
	  FLAG("--lr-schedule", "constant|linear|cosine") },
	{ ROW("training.weight_decay", CK_NUM, training.weight_decay, CP_REQUIRED), RANGE(0, 1), .def = 0,
	  FLAG("--weight-decay", "W") },
	{ ROW("training.max_grad_norm", CK_NUM, training.max_grad_norm, CP_REQUIRED), RANGE(0, 1e6), .def = 1,
	  FLAG("--max-grad-norm", "G") },
	{ ROW("training.timeout_s", CK_INT, training.timeout_s, CP_REQUIRED), RANGE(1, 604800), .def = 3600 },
	/* Added to poros.cell/1 later: older cells and artifacts still read. */
	{ ROW("training.gradient_checkpointing", CK_BOOL, training.gradient_checkpointing, CP_OPTIONAL), .def = 0,
	  FLAG("--gradient-checkpointing", "on|off") },
	{ ROW("training.lr_warmup_steps", CK_INT, training.lr_warmup_steps, CP_OPTIONAL), RANGE(0, 999999),
	  .def = 0, FLAG("--lr-warmup", "N") },
	{ ROW("training.passes", CK_INT, training.passes, CP_OPTIONAL), RANGE(1, 1000), .def = 1 },
	{ ROW("training.eval_dataset", CK_STR, training.eval_dataset, CP_IF_SET), TEXT(CELL_PATH_MAX, CT_PLAIN),
	  FLAG("--eval-dataset", "SPEC"), .spec = CS_NONE },
	{ ROW("training.eval_every", CK_INT, training.eval_every, CP_WITH_PREV), RANGE(0, 1000000), .def = 0,
	  FLAG("--eval-every", "N"), .spec = CS_NONE },
	{ ROW("training.tokenizer", CK_STR, training.tokenizer, CP_IF_SET), TEXT(CELL_PATH_MAX, CT_PLAIN),
	  FLAG("--tokenizer", "PATH") },
	/* the calendar check is the chat template's, when the dataset opens */
	{ ROW("training.chat_date", CK_STR, training.chat_date, CP_IF_SET), TEXT(10, CT_PLAIN),
	  FLAG("--chat-date", "YYYY-MM-DD") },
	/* 0 (absent): the per-record default; train_on_names[0] is no value */
	{ ROW("training.train_on", CK_ENUM, training.train_on, CP_IF_SET),
	  NAMES(train_on_names + 1, TRAIN_ON_COUNT - 1, "train_on"), .base = 1, .def = 0,
	  FLAG("--train-on", "assistant|all") },
	/* poros-train's splits: absent, a directory's train split and, for
	 * eval_dataset, its validation split else its test split */
	{ ROW("training.split", CK_STR, training.split, CP_IF_SET), TEXT(128, CT_SAFE_NAME),
	  FLAG("--split", "NAME"), .spec = CS_NONE },
	{ ROW("training.eval_split", CK_STR, training.eval_split, CP_IF_SET), TEXT(128, CT_SAFE_NAME),
	  FLAG("--eval-split", "NAME"), .spec = CS_NONE },
	{ ROW("training.eval_fraction", CK_NUM, training.eval_fraction, CP_IF_SET), RANGE(0, 1), .bound.max_open = 1,
	  .def = 0, FLAG("--eval-fraction", "F"), .spec = CS_NONE },

	{ ROW("lora.rank", CK_INT, lora.rank, CP_REQUIRED), RANGE(1, 1024), .def = 16, FLAG("--rank", "R") },
	{ ROW("lora.alpha", CK_NUM, lora.alpha, CP_REQUIRED), RANGE(0, 65536), .bound.min_open = 1, .def = 32,
	  FLAG("--alpha", "A") },
	{ ROW("lora.dropout", CK_NUM, lora.dropout, CP_REQUIRED), RANGE(0, 1), .bound.max_open = 1, .def = 0.05,
	  FLAG("--dropout", "P") },
	{ ROW("lora.target_modules", CK_MODULES, lora.target_mask, CP_REQUIRED),
	  .def = (1u << CELL_MAX_TARGETS) - 1, FLAG("--targets", "LIST") },

	{ ROW("poros.block_size", CK_INT, poros.block_size, CP_REQUIRED), RANGE(1, 1024), .def = 4,
	  FLAG("--block-size", "N") },
	{ ROW("poros.enable_prefetch", CK_BOOL, poros.enable_prefetch, CP_REQUIRED), .def = 1,
	  FLAG("--no-prefetch", NULL) },
	{ ROW("poros.checkpoints", CK_ENUM, poros.checkpoints, CP_IF_SET),
	  NAMES(checkpoints_names, CKPT_COUNT, "checkpoints"), .def = CKPT_LAYER, FLAG("--checkpoints", "layer|block") },

	{ ROW("output_dir", CK_STR, output_dir, CP_REQUIRED), TEXT(CELL_PATH_MAX, CT_OUTPUT_DIR) },
	{ ROW("tokens_per_step", CK_I64, tokens_per_step, CP_REQUIRED), RANGE(1, 1073741824), .derived = 1 },
};
const int cell_field_count = (int)(sizeof cell_fields / sizeof cell_fields[0]);

int name_index(const char *const *names, int n, const char *s)
{
	if (!s)
		return -1;
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

int method_from_name(const char *s) { return name_index(method_names, METHOD_COUNT, s); }
int precision_from_name(const char *s) { return name_index(precision_names, PRECISION_COUNT, s); }
int lr_schedule_from_name(const char *s) { return name_index(lr_schedule_names, LR_COUNT, s); }
int lora_module_from_name(const char *s) { return name_index(lora_module_names, CELL_MAX_TARGETS, s); }

/* Whole numbers print exactly ("1048576", not "1.04858e+06"). */
static const char *fmt_num(char *buf, size_t n, double v)
{
	if (v == floor(v) && fabs(v) < 9e18)
		snprintf(buf, n, "%.0f", v);
	else
		snprintf(buf, n, "%.10g", v);
	return buf;
}

const struct cell_field *cell_field_find(const char *path)
{
	for (int i = 0; i < cell_field_count; i++)
		if (strcmp(cell_fields[i].path, path) == 0)
			return &cell_fields[i];
	return NULL;
}

static int is_number_kind(enum cell_kind k)
{
	return k == CK_INT || k == CK_U64 || k == CK_I64 || k == CK_NUM;
}

const struct cell_bound *cell_bound_find(const char *path)
{
	const struct cell_field *f = cell_field_find(path);

	return f && is_number_kind(f->kind) ? &f->bound : NULL;
}

int cell_bound_check(const struct cell_bound *b, const char *shown, double v, char *err, size_t errsz)
{
	char got[40], lim[40];

	if (!isfinite(v))
		return set_error(err, errsz, "%s: must be a finite number", shown);
	fmt_num(got, sizeof got, v);
	if (b->integer && v != floor(v))
		return set_error(err, errsz, "%s: must be a whole number, got %s", shown, got);
	if (b->min_open ? v <= b->min : v < b->min)
		return set_error(err, errsz, "%s: must be %s %s, got %s", shown,
		                 b->min_open ? "greater than" : "at least", fmt_num(lim, sizeof lim, b->min), got);
	if (b->max_open ? v >= b->max : v > b->max)
		return set_error(err, errsz, "%s: must be %s %s, got %s", shown,
		                 b->max_open ? "less than" : "at most", fmt_num(lim, sizeof lim, b->max), got);
	return 0;
}

/* Why a string cannot be a cell's text, or NULL.  Control characters are
 * refused because these strings end up in file names, logs and HTML. */
const char *cell_text_problem(const char *s, size_t max)
{
	size_t n;

	if (!s)
		return "missing";
	n = strlen(s);
	if (n == 0)
		return "must not be empty";
	if (n > max)
		return "too long";
	if (utf8_valid_prefix(s, n) != n)
		return "not valid UTF-8";
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return "contains a control character";
	return NULL;
}

const char *cell_output_dir_problem(const char *dir)
{
	const char *why = cell_text_problem(dir, CELL_PATH_MAX);

	if (why)
		return why;
	for (const char *p = dir; *p;) {
		size_t len = strcspn(p, "/");

		if (len == 2 && p[0] == '.' && p[1] == '.')
			return "has a \"..\" component";
		p += len;
		p += strspn(p, "/");
	}
	return NULL;
}

int is_slug(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 128)
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

long long cell_tokens_per_step(const struct cell *c)
{
	return (long long)c->training.batch_size * c->training.seq_len * c->training.gradient_accumulation_steps;
}

int cell_warmup_fits(const struct cell *c)
{
	return c->training.warmup_steps < c->training.steps;
}

int cell_eval_set_given(const struct cell *c)
{
	return c->training.eval_every <= 0 || c->training.eval_dataset != NULL || c->training.eval_fraction != 0;
}

char *cell_make_id(enum method m, const char *arch, enum precision p)
{
	return xasprintf("%s_%s_%s", method_names[m], arch, precision_names[p]);
}

int check_text(const char *path, const char *s, size_t max, char *err, size_t errsz)
{
	const char *why = cell_text_problem(s, max);

	if (!why)
		return 0;
	if (strcmp(why, "too long") == 0)
		return set_error(err, errsz, "%s: too long (%zu bytes; at most %zu)", path, strlen(s), max);
	return set_error(err, errsz, "%s: %s", path, why);
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

void cell_copy(struct cell *dst, const struct cell *src)
{
	*dst = *src;
	dst->cell_id = dup_or_null(src->cell_id);
	dst->spec_id = dup_or_null(src->spec_id);
	dst->model.model_id = dup_or_null(src->model.model_id);
	dst->model.display_name = dup_or_null(src->model.display_name);
	dst->model.arch = dup_or_null(src->model.arch);
	dst->hardware.gpu_name = dup_or_null(src->hardware.gpu_name);
	dst->training.dataset = dup_or_null(src->training.dataset);
	dst->training.eval_dataset = dup_or_null(src->training.eval_dataset);
	dst->training.tokenizer = dup_or_null(src->training.tokenizer);
	dst->training.chat_date = dup_or_null(src->training.chat_date);
	dst->training.split = dup_or_null(src->training.split);
	dst->training.eval_split = dup_or_null(src->training.eval_split);
	dst->output_dir = dup_or_null(src->output_dir);
}

void cell_free(struct cell *c)
{
	if (!c)
		return;
	free(c->cell_id);
	free(c->spec_id);
	free(c->model.model_id);
	free(c->model.display_name);
	free(c->model.arch);
	free(c->hardware.gpu_name);
	free(c->training.dataset);
	free(c->training.eval_dataset);
	free(c->training.tokenizer);
	free(c->training.chat_date);
	free(c->training.split);
	free(c->training.eval_split);
	free(c->output_dir);
	memset(c, 0, sizeof *c);
}
