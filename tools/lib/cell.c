/* tools/lib/cell.c: the cell schema "poros.cell/1": the one table of
 * valid ranges, the JSON writer, and the strict reader every tool uses
 * (unknown, missing and duplicate fields, wrong types, non-finite and
 * out-of-range numbers are all rejected, naming the field; only the
 * fields in optional_fields may be absent). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell.h"
#include "util.h"

const char *const method_names[METHOD_COUNT] = {
	"poros", "resident", "unsloth", "peft", "accelerate_offload",
};
const char *const precision_names[PRECISION_COUNT] = { "nf4", "bf16" };
const char *const lr_schedule_names[LR_COUNT] = { "constant", "linear", "cosine" };
const char *const train_on_names[TRAIN_ON_COUNT] = { "", "assistant", "all" };
const char *const lora_module_names[CELL_MAX_TARGETS] = {
	"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
};

/* 2^32 - 1: every arm must take the same seed, and numpy (under the Python
 * arms) refuses larger ones; cJSON also prints only 15 digits exactly. */
#define SEED_MAX 4294967295.0

/* Every numeric field and its range.  The maxima are sanity bounds, far
 * above any real run, so a typo (an extra few zeros) is caught early
 * rather than as an allocation failure an hour into a bench.  Zero for
 * vram_gb and pcie_gen means "not specified" (the spec left hardware out). */
static const struct cell_bound bounds[] = {
	/* path                                 min   max          mino maxo int */
	{ "model.param_count_b",                 0,    100000,      0, 0, 0 },
	{ "hardware.vram_gb",                    0,    65536,       0, 0, 0 },
	{ "hardware.pcie_gen",                   0,    7,           0, 0, 1 },
	{ "training.steps",                      1,    1000000,     0, 0, 1 },
	{ "training.seq_len",                    1,    1048576,     0, 0, 1 },
	{ "training.batch_size",                 1,    4096,        0, 0, 1 },
	{ "training.gradient_accumulation_steps", 1,   65536,       0, 0, 1 },
	{ "training.warmup_steps",               0,    999999,      0, 0, 1 },
	{ "training.seed",                       0,    SEED_MAX,    0, 0, 1 },
	{ "training.learning_rate",              0,    1,           1, 0, 0 },
	{ "training.weight_decay",               0,    1,           0, 0, 0 },
	{ "training.max_grad_norm",              0,    1e6,         0, 0, 0 },
	{ "training.timeout_s",                  1,    604800,      0, 0, 1 },
	{ "training.lr_warmup_steps",            0,    999999,      0, 0, 1 },
	{ "training.passes",                     1,    1000,        0, 0, 1 },
	{ "training.eval_every",                 0,    1000000,     0, 0, 1 },
	{ "lora.rank",                           1,    1024,        0, 0, 1 },
	{ "lora.alpha",                          0,    65536,       1, 0, 0 },
	{ "lora.dropout",                        0,    1,           0, 1, 0 },
	{ "poros.block_size",                    1,    1024,        0, 0, 1 },
	{ "tokens_per_step",                     1,    1073741824,  0, 0, 1 },
};

static int name_index(const char *const *names, int n, const char *s)
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

const struct cell_bound *cell_bound_find(const char *path)
{
	for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
		if (strcmp(bounds[i].path, path) == 0)
			return &bounds[i];
	return NULL;
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

static int is_slug(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 128)
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

char *cell_make_id(enum method m, const char *arch, enum precision p)
{
	return xasprintf("%s_%s_%s", method_names[m], arch, precision_names[p]);
}

static int check_text(const char *path, const char *s, size_t max, char *err, size_t errsz)
{
	const char *why = cell_text_problem(s, max);

	if (!why)
		return 0;
	if (strcmp(why, "too long") == 0)
		return set_error(err, errsz, "%s: too long (%zu bytes; at most %zu)", path, strlen(s), max);
	return set_error(err, errsz, "%s: %s", path, why);
}

static int check_bound(const char *path, double v, char *err, size_t errsz)
{
	return cell_bound_check(cell_bound_find(path), path, v, err, errsz);
}

int cell_validate(const struct cell *c, char *err, size_t errsz)
{
	const char *why;
	long long tokens;

	if ((unsigned)c->method >= METHOD_COUNT)
		return set_error(err, errsz, "method: out of range");
	if ((unsigned)c->precision >= PRECISION_COUNT)
		return set_error(err, errsz, "precision: out of range");
	if ((unsigned)c->training.lr_schedule >= LR_COUNT)
		return set_error(err, errsz, "training.lr_schedule: out of range");
	if (!c->spec_id || !name_is_safe(c->spec_id))
		return set_error(err, errsz, "spec_id: not a safe name (letters, digits, '.', '_', '-'; at most 128 bytes)");
	if (check_text("model.model_id", c->model.model_id, CELL_PATH_MAX, err, errsz) ||
	    check_text("model.display_name", c->model.display_name, CELL_NAME_MAX, err, errsz) ||
	    check_bound("model.param_count_b", c->model.param_count_b, err, errsz))
		return -1;
	if (!is_slug(c->model.arch))
		return set_error(err, errsz, "model.arch: must be 1 to 128 of [a-z0-9_]");
	if (!c->cell_id || !name_is_safe(c->cell_id))
		return set_error(err, errsz, "cell_id: not a safe name");
	{
		char *want = cell_make_id(c->method, c->model.arch, c->precision);
		int same = strcmp(want, c->cell_id) == 0;

		if (!same)
			set_error(err, errsz, "cell_id: \"%s\" does not match method, arch and precision (\"%s\")", c->cell_id, want);
		free(want);
		if (!same)
			return -1;
	}
	if ((c->hardware.gpu_name && check_text("hardware.gpu_name", c->hardware.gpu_name, CELL_NAME_MAX, err, errsz)) ||
	    check_bound("hardware.vram_gb", c->hardware.vram_gb, err, errsz) ||
	    check_bound("hardware.pcie_gen", c->hardware.pcie_gen, err, errsz))
		return -1;
	if (check_bound("training.steps", c->training.steps, err, errsz) ||
	    check_bound("training.seq_len", c->training.seq_len, err, errsz) ||
	    check_bound("training.batch_size", c->training.batch_size, err, errsz) ||
	    check_bound("training.gradient_accumulation_steps", c->training.gradient_accumulation_steps, err, errsz) ||
	    check_bound("training.warmup_steps", c->training.warmup_steps, err, errsz) ||
	    check_text("training.dataset", c->training.dataset, CELL_PATH_MAX, err, errsz) ||
	    (c->training.tokenizer && check_text("training.tokenizer", c->training.tokenizer, CELL_PATH_MAX, err, errsz)) ||
	    check_bound("training.learning_rate", c->training.learning_rate, err, errsz) ||
	    check_bound("training.weight_decay", c->training.weight_decay, err, errsz) ||
	    check_bound("training.max_grad_norm", c->training.max_grad_norm, err, errsz) ||
	    check_bound("training.timeout_s", c->training.timeout_s, err, errsz) ||
	    check_bound("training.lr_warmup_steps", c->training.lr_warmup_steps, err, errsz) ||
	    check_bound("training.passes", c->training.passes, err, errsz))
		return -1;
	/* Compared as an integer: a double would round seeds above 2^53. */
	if (c->training.seed > (unsigned long long)SEED_MAX)
		return set_error(err, errsz, "training.seed: must be at most %.0f, got %llu", SEED_MAX, c->training.seed);
	/* At least one step must be measured after the warmup. */
	if (c->training.warmup_steps >= c->training.steps)
		return set_error(err, errsz, "training.warmup_steps: must be less than training.steps (%d), got %d",
		                 c->training.steps, c->training.warmup_steps);
	if (check_bound("lora.rank", c->lora.rank, err, errsz) ||
	    check_bound("lora.alpha", c->lora.alpha, err, errsz) ||
	    check_bound("lora.dropout", c->lora.dropout, err, errsz))
		return -1;
	if (c->lora.target_mask == 0 || c->lora.target_mask >= 1u << CELL_MAX_TARGETS)
		return set_error(err, errsz, "lora.target_modules: must name 1 to %d of the projections", CELL_MAX_TARGETS);
	if (c->lora.n_targets != __builtin_popcount(c->lora.target_mask))
		return set_error(err, errsz, "lora.n_targets: %d does not match target_mask", c->lora.n_targets);
	if (check_bound("poros.block_size", c->poros.block_size, err, errsz))
		return -1;
	if (c->training.gradient_checkpointing != 0 && c->training.gradient_checkpointing != 1)
		return set_error(err, errsz, "training.gradient_checkpointing: must be 0 or 1");
	if ((c->training.eval_dataset &&
	     check_text("training.eval_dataset", c->training.eval_dataset, CELL_PATH_MAX, err, errsz)) ||
	    check_bound("training.eval_every", c->training.eval_every, err, errsz))
		return -1;
	if (c->training.eval_every > 0 && c->training.eval_dataset == NULL)
		return set_error(err, errsz, "training.eval_every: needs training.eval_dataset");
	if (c->training.train_on < 0 || c->training.train_on >= TRAIN_ON_COUNT)
		return set_error(err, errsz, "training.train_on: out of range");
	if (c->poros.enable_prefetch != 0 && c->poros.enable_prefetch != 1)
		return set_error(err, errsz, "poros.enable_prefetch: must be 0 or 1");
	if ((why = cell_output_dir_problem(c->output_dir)))
		return set_error(err, errsz, "output_dir: %s", why);
	tokens = (long long)c->training.batch_size * c->training.seq_len * c->training.gradient_accumulation_steps;
	if (check_bound("tokens_per_step", (double)tokens, err, errsz))
		return set_error(err, errsz, "tokens_per_step: batch_size x seq_len x gradient_accumulation_steps = %lld, more than %.0f",
		                 tokens, cell_bound_find("tokens_per_step")->max);
	if (c->tokens_per_step != tokens)
		return set_error(err, errsz, "tokens_per_step: %lld is not batch_size x seq_len x gradient_accumulation_steps (%lld)",
		                 c->tokens_per_step, tokens);
	return 0;
}

/* cJSON_Add* return NULL only when out of memory; one flag collects them. */
struct builder {
	int ok;
};

static cJSON *add_obj(struct builder *b, cJSON *parent, const char *key)
{
	cJSON *o = cJSON_AddObjectToObject(parent, key);

	b->ok &= o != NULL;
	return o ? o : parent; /* keep going; the result is discarded anyway */
}

static void add_str(struct builder *b, cJSON *o, const char *key, const char *v)
{
	b->ok &= cJSON_AddStringToObject(o, key, v) != NULL;
}

static void add_num(struct builder *b, cJSON *o, const char *key, double v)
{
	b->ok &= cJSON_AddNumberToObject(o, key, v) != NULL;
}

/* What the spec did not say is null: a gpu_name of NULL, a vram_gb,
 * pcie_gen or param_count_b of 0. */
static void add_known_str(struct builder *b, cJSON *o, const char *key, const char *v)
{
	b->ok &= (v ? cJSON_AddStringToObject(o, key, v) : cJSON_AddNullToObject(o, key)) != NULL;
}

static void add_known_num(struct builder *b, cJSON *o, const char *key, double v)
{
	b->ok &= (v > 0 ? cJSON_AddNumberToObject(o, key, v) : cJSON_AddNullToObject(o, key)) != NULL;
}

static void add_bool(struct builder *b, cJSON *o, const char *key, int v)
{
	b->ok &= cJSON_AddBoolToObject(o, key, v) != NULL;
}

cJSON *cell_to_json(const struct cell *c)
{
	struct builder b = { 1 };
	cJSON *root = cJSON_CreateObject(), *o, *targets;

	if (!root)
		return NULL;
	add_str(&b, root, "schema", CELL_SCHEMA);
	add_str(&b, root, "cell_id", c->cell_id);
	add_str(&b, root, "spec_id", c->spec_id);
	add_str(&b, root, "method", method_names[c->method]);
	add_str(&b, root, "precision", precision_names[c->precision]);

	o = add_obj(&b, root, "model");
	add_str(&b, o, "model_id", c->model.model_id);
	add_str(&b, o, "display_name", c->model.display_name);
	add_known_num(&b, o, "param_count_b", c->model.param_count_b);
	add_str(&b, o, "arch", c->model.arch);

	o = add_obj(&b, root, "hardware");
	add_known_str(&b, o, "gpu_name", c->hardware.gpu_name);
	add_known_num(&b, o, "vram_gb", c->hardware.vram_gb);
	add_known_num(&b, o, "pcie_gen", c->hardware.pcie_gen);

	o = add_obj(&b, root, "training");
	add_num(&b, o, "steps", c->training.steps);
	add_num(&b, o, "seq_len", c->training.seq_len);
	add_num(&b, o, "batch_size", c->training.batch_size);
	add_num(&b, o, "gradient_accumulation_steps", c->training.gradient_accumulation_steps);
	add_num(&b, o, "warmup_steps", c->training.warmup_steps);
	add_str(&b, o, "dataset", c->training.dataset);
	add_num(&b, o, "seed", (double)c->training.seed);
	add_num(&b, o, "learning_rate", c->training.learning_rate);
	add_str(&b, o, "lr_schedule", lr_schedule_names[c->training.lr_schedule]);
	add_num(&b, o, "weight_decay", c->training.weight_decay);
	add_num(&b, o, "max_grad_norm", c->training.max_grad_norm);
	add_num(&b, o, "timeout_s", c->training.timeout_s);
	/* Last, after the older keys, so their order stays what it was. */
	add_bool(&b, o, "gradient_checkpointing", c->training.gradient_checkpointing);
	add_num(&b, o, "lr_warmup_steps", c->training.lr_warmup_steps);
	add_num(&b, o, "passes", c->training.passes);
	if (c->training.eval_dataset) { /* optional: cells without evaluation read as before */
		add_str(&b, o, "eval_dataset", c->training.eval_dataset);
		add_num(&b, o, "eval_every", c->training.eval_every);
	}
	if (c->training.tokenizer)
		add_str(&b, o, "tokenizer", c->training.tokenizer);
	if (c->training.train_on) /* absent means the per-record default */
		add_str(&b, o, "train_on", train_on_names[c->training.train_on]);

	o = add_obj(&b, root, "lora");
	add_num(&b, o, "rank", c->lora.rank);
	add_num(&b, o, "alpha", c->lora.alpha);
	add_num(&b, o, "dropout", c->lora.dropout);
	targets = cJSON_AddArrayToObject(o, "target_modules");
	b.ok &= targets != NULL;
	for (int i = 0; targets && i < CELL_MAX_TARGETS; i++) {
		cJSON *name;

		if (!(c->lora.target_mask & 1u << i))
			continue;
		name = cJSON_CreateString(lora_module_names[i]);
		b.ok &= name != NULL && cJSON_AddItemToArray(targets, name);
	}

	o = add_obj(&b, root, "poros");
	add_num(&b, o, "block_size", c->poros.block_size);
	add_bool(&b, o, "enable_prefetch", c->poros.enable_prefetch);

	add_str(&b, root, "output_dir", c->output_dir);
	add_num(&b, root, "tokens_per_step", (double)c->tokens_per_step);
	if (!b.ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* --- reading ------------------------------------------------------------ */

struct reader {
	char *err;
	size_t errsz;
};

static const char *const top_keys[] = {
	"schema", "cell_id", "spec_id", "method", "precision", "model", "hardware",
	"training", "lora", "poros", "output_dir", "tokens_per_step",
};
static const char *const model_keys[] = { "model_id", "display_name", "param_count_b", "arch" };
static const char *const hardware_keys[] = { "gpu_name", "vram_gb", "pcie_gen" };
static const char *const training_keys[] = {
	"steps", "seq_len", "batch_size", "gradient_accumulation_steps", "warmup_steps", "dataset",
	"seed", "learning_rate", "lr_schedule", "weight_decay", "max_grad_norm", "timeout_s",
	"gradient_checkpointing", "lr_warmup_steps", "passes", "eval_dataset", "eval_every", "tokenizer", "train_on",
};
static const char *const lora_keys[] = { "rank", "alpha", "dropout", "target_modules" };
static const char *const poros_keys[] = { "block_size", "enable_prefetch" };

/* Fields a reader may find absent, by path: they were added to
 * poros.cell/1 later, and cells and artifacts written before must still
 * read.  Each reads as 0 when absent, training.passes as 1. */
static const char *const optional_fields[] = {
	"training.gradient_checkpointing", "training.lr_warmup_steps", "training.passes",
	"training.eval_dataset", "training.eval_every", "training.tokenizer", "training.train_on",
};

#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *json_type_name(const cJSON *j)
{
	if (cJSON_IsString(j))
		return "a string";
	if (cJSON_IsNumber(j))
		return "a number";
	if (cJSON_IsBool(j))
		return "a boolean";
	if (cJSON_IsNull(j))
		return "null";
	if (cJSON_IsArray(j))
		return "an array";
	if (cJSON_IsObject(j))
		return "an object";
	return "an invalid value";
}

/* "training" + "steps" -> "training.steps"; "" + "spec_id" -> "spec_id". */
static const char *join(char *buf, size_t n, const char *parent, const char *key)
{
	snprintf(buf, n, "%s%s%s", parent, *parent ? "." : "", key);
	return buf;
}

/* The object has exactly these keys, each once (cJSON keeps duplicates,
 * and a reader taking the first would silently ignore the second). */
static int check_keys(struct reader *r, const cJSON *obj, const char *path,
                      const char *const *keys, int n)
{
	unsigned seen = 0;
	char p[128];
	const cJSON *child;

	if (!cJSON_IsObject(obj))
		return set_error(r->err, r->errsz, "%s: expected an object, got %s", *path ? path : "cell", json_type_name(obj));
	cJSON_ArrayForEach(child, obj) {
		int i = name_index(keys, n, child->string);

		if (i < 0)
			return set_error(r->err, r->errsz, "%s: unknown field", join(p, sizeof p, path, child->string ? child->string : ""));
		if (seen & 1u << i)
			return set_error(r->err, r->errsz, "%s: duplicate field", join(p, sizeof p, path, keys[i]));
		seen |= 1u << i;
	}
	for (int i = 0; i < n; i++)
		if (!(seen & 1u << i) &&
		    name_index(optional_fields, NKEYS(optional_fields), join(p, sizeof p, path, keys[i])) < 0)
			return set_error(r->err, r->errsz, "%s: missing", p);
	return 0;
}

static int get_num(struct reader *r, const cJSON *obj, const char *parent, const char *key, double *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	char p[128];

	join(p, sizeof p, parent, key);
	if (!cJSON_IsNumber(j))
		return set_error(r->err, r->errsz, "%s: expected a number, got %s", p, json_type_name(j));
	if (cell_bound_check(cell_bound_find(p), p, j->valuedouble, r->err, r->errsz))
		return -1;
	*out = j->valuedouble;
	return 0;
}

/* Bounded first, so the conversion to int is always defined. */
static int get_int(struct reader *r, const cJSON *obj, const char *parent, const char *key, int *out)
{
	double v;

	if (get_num(r, obj, parent, key, &v))
		return -1;
	*out = (int)v;
	return 0;
}

static int get_str(struct reader *r, const cJSON *obj, const char *parent, const char *key, size_t max, char **out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	char p[128];

	join(p, sizeof p, parent, key);
	if (!cJSON_IsString(j))
		return set_error(r->err, r->errsz, "%s: expected a string, got %s", p, json_type_name(j));
	if (check_text(p, j->valuestring, max, r->err, r->errsz))
		return -1;
	*out = xstrdup(j->valuestring);
	return 0;
}

/* null (not known) reads as 0 or NULL, as older cells wrote 0. */
static int get_known_num(struct reader *r, const cJSON *obj, const char *parent, const char *key, double *out)
{
	if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(obj, key))) {
		*out = 0;
		return 0;
	}
	return get_num(r, obj, parent, key, out);
}

static int get_known_str(struct reader *r, const cJSON *obj, const char *parent, const char *key, size_t max,
                         char **out)
{
	if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(obj, key))) {
		*out = NULL;
		return 0;
	}
	return get_str(r, obj, parent, key, max, out);
}

static void list_names(char *buf, size_t n, const char *const *names, int count)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < count && used < n; i++)
		used += snprintf(buf + used, n - used, "%s%s", i ? ", " : "", names[i]);
}

/* A string naming one of names; *out its index. */
static int get_enum(struct reader *r, const cJSON *obj, const char *parent, const char *key,
                    const char *what, const char *const *names, int count, int *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	char p[128], list[256];

	join(p, sizeof p, parent, key);
	if (!cJSON_IsString(j))
		return set_error(r->err, r->errsz, "%s: expected a string, got %s", p, json_type_name(j));
	if ((*out = name_index(names, count, j->valuestring)) < 0) {
		list_names(list, sizeof list, names, count);
		return set_error(r->err, r->errsz, "%s: unknown %s \"%.64s\" (expected one of: %s)", p, what, j->valuestring, list);
	}
	return 0;
}

static int get_targets(struct reader *r, const cJSON *lora, struct cell *c)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(lora, "target_modules"), *j;
	char list[256];
	int k = 0;

	if (!cJSON_IsArray(arr))
		return set_error(r->err, r->errsz, "lora.target_modules: expected an array, got %s", json_type_name(arr));
	c->lora.target_mask = 0;
	cJSON_ArrayForEach(j, arr) {
		int i = cJSON_IsString(j) ? lora_module_from_name(j->valuestring) : -1;

		if (!cJSON_IsString(j))
			return set_error(r->err, r->errsz, "lora.target_modules[%d]: expected a string, got %s", k, json_type_name(j));
		if (i < 0) {
			list_names(list, sizeof list, lora_module_names, CELL_MAX_TARGETS);
			return set_error(r->err, r->errsz, "lora.target_modules[%d]: unknown module \"%.64s\" (expected one of: %s)",
			                 k, j->valuestring, list);
		}
		if (c->lora.target_mask & 1u << i)
			return set_error(r->err, r->errsz, "lora.target_modules[%d]: \"%s\" is listed twice", k, j->valuestring);
		c->lora.target_mask |= 1u << i;
		k++;
	}
	if (k == 0)
		return set_error(r->err, r->errsz, "lora.target_modules: must not be empty");
	c->lora.n_targets = k;
	return 0;
}

static int get_bool(struct reader *r, const cJSON *obj, const char *parent, const char *key, int *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	char p[128];

	if (!cJSON_IsBool(j))
		return set_error(r->err, r->errsz, "%s: expected true or false, got %s", join(p, sizeof p, parent, key), json_type_name(j));
	*out = cJSON_IsTrue(j);
	return 0;
}

static int read_cell(struct reader *r, struct cell *c, const cJSON *obj)
{
	const cJSON *model, *hw, *tr, *lora, *poros, *schema;
	double v;
	int e;

	if (check_keys(r, obj, "", top_keys, NKEYS(top_keys)))
		return -1;
	schema = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	if (!cJSON_IsString(schema) || strcmp(schema->valuestring, CELL_SCHEMA) != 0)
		return set_error(r->err, r->errsz, "schema: expected \"%s\"", CELL_SCHEMA);
	model = cJSON_GetObjectItemCaseSensitive(obj, "model");
	hw = cJSON_GetObjectItemCaseSensitive(obj, "hardware");
	tr = cJSON_GetObjectItemCaseSensitive(obj, "training");
	lora = cJSON_GetObjectItemCaseSensitive(obj, "lora");
	poros = cJSON_GetObjectItemCaseSensitive(obj, "poros");
	if (check_keys(r, model, "model", model_keys, NKEYS(model_keys)) ||
	    check_keys(r, hw, "hardware", hardware_keys, NKEYS(hardware_keys)) ||
	    check_keys(r, tr, "training", training_keys, NKEYS(training_keys)) ||
	    check_keys(r, lora, "lora", lora_keys, NKEYS(lora_keys)) ||
	    check_keys(r, poros, "poros", poros_keys, NKEYS(poros_keys)))
		return -1;

	if (get_str(r, obj, "", "cell_id", 128, &c->cell_id) ||
	    get_str(r, obj, "", "spec_id", 128, &c->spec_id))
		return -1;
	if (get_enum(r, obj, "", "method", "method", method_names, METHOD_COUNT, &e))
		return -1;
	c->method = (enum method)e;
	if (get_enum(r, obj, "", "precision", "precision", precision_names, PRECISION_COUNT, &e))
		return -1;
	c->precision = (enum precision)e;

	if (get_str(r, model, "model", "model_id", CELL_PATH_MAX, &c->model.model_id) ||
	    get_str(r, model, "model", "display_name", CELL_NAME_MAX, &c->model.display_name) ||
	    get_known_num(r, model, "model", "param_count_b", &c->model.param_count_b) ||
	    get_str(r, model, "model", "arch", 128, &c->model.arch))
		return -1;

	if (get_known_str(r, hw, "hardware", "gpu_name", CELL_NAME_MAX, &c->hardware.gpu_name) ||
	    get_known_num(r, hw, "hardware", "vram_gb", &c->hardware.vram_gb) ||
	    get_known_num(r, hw, "hardware", "pcie_gen", &v))
		return -1;
	c->hardware.pcie_gen = (int)v; /* bounded and whole: check_bound */

	if (get_int(r, tr, "training", "steps", &c->training.steps) ||
	    get_int(r, tr, "training", "seq_len", &c->training.seq_len) ||
	    get_int(r, tr, "training", "batch_size", &c->training.batch_size) ||
	    get_int(r, tr, "training", "gradient_accumulation_steps", &c->training.gradient_accumulation_steps) ||
	    get_int(r, tr, "training", "warmup_steps", &c->training.warmup_steps) ||
	    get_str(r, tr, "training", "dataset", CELL_PATH_MAX, &c->training.dataset) ||
	    get_num(r, tr, "training", "seed", &v))
		return -1;
	c->training.seed = (unsigned long long)v;
	if (get_num(r, tr, "training", "learning_rate", &c->training.learning_rate) ||
	    get_enum(r, tr, "training", "lr_schedule", "schedule", lr_schedule_names, LR_COUNT, &e))
		return -1;
	c->training.lr_schedule = (enum lr_schedule)e;
	if (get_num(r, tr, "training", "weight_decay", &c->training.weight_decay) ||
	    get_num(r, tr, "training", "max_grad_norm", &c->training.max_grad_norm) ||
	    get_int(r, tr, "training", "timeout_s", &c->training.timeout_s))
		return -1;
	if (cJSON_GetObjectItemCaseSensitive(tr, "gradient_checkpointing") &&
	    get_bool(r, tr, "training", "gradient_checkpointing", &c->training.gradient_checkpointing))
		return -1;
	c->training.passes = 1; /* absent: one pass, as before the field */
	if ((cJSON_GetObjectItemCaseSensitive(tr, "lr_warmup_steps") &&
	     get_int(r, tr, "training", "lr_warmup_steps", &c->training.lr_warmup_steps)) ||
	    (cJSON_GetObjectItemCaseSensitive(tr, "passes") &&
	     get_int(r, tr, "training", "passes", &c->training.passes)))
		return -1;
	if ((cJSON_GetObjectItemCaseSensitive(tr, "eval_dataset") &&
	     get_str(r, tr, "training", "eval_dataset", CELL_PATH_MAX, &c->training.eval_dataset)) ||
	    (cJSON_GetObjectItemCaseSensitive(tr, "eval_every") &&
	     get_int(r, tr, "training", "eval_every", &c->training.eval_every)))
		return -1;
	if (cJSON_GetObjectItemCaseSensitive(tr, "tokenizer") &&
	    get_str(r, tr, "training", "tokenizer", CELL_PATH_MAX, &c->training.tokenizer))
		return -1;
	if (cJSON_GetObjectItemCaseSensitive(tr, "train_on")) {
		if (get_enum(r, tr, "training", "train_on", "train_on", train_on_names + 1, TRAIN_ON_COUNT - 1, &e))
			return -1;
		c->training.train_on = e + 1;
	}

	if (get_int(r, lora, "lora", "rank", &c->lora.rank) ||
	    get_num(r, lora, "lora", "alpha", &c->lora.alpha) ||
	    get_num(r, lora, "lora", "dropout", &c->lora.dropout) ||
	    get_targets(r, lora, c))
		return -1;

	if (get_int(r, poros, "poros", "block_size", &c->poros.block_size) ||
	    get_bool(r, poros, "poros", "enable_prefetch", &c->poros.enable_prefetch))
		return -1;

	if (get_str(r, obj, "", "output_dir", CELL_PATH_MAX, &c->output_dir) ||
	    get_num(r, obj, "", "tokens_per_step", &v))
		return -1;
	c->tokens_per_step = (long long)v;
	return cell_validate(c, r->err, r->errsz);
}

int cell_from_json(struct cell *c, const cJSON *obj, char *err, size_t errsz)
{
	struct reader r = { err, errsz };

	memset(c, 0, sizeof *c);
	if (read_cell(&r, c, obj) == 0)
		return 0;
	cell_free(c);
	return -1;
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
	free(c->output_dir);
	memset(c, 0, sizeof *c);
}
