/* tools/poros-expand/train_config.c: a fine-tune config (man 5
 * poros-train-config) to poros-train's arguments.  One row per key: the
 * poros-train option it is, and what it takes.  A key whose option sets a
 * cell field is checked by that field's row (cell_field_parse), so a value
 * refused here is the value poros-train would refuse, named at its place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "train_config.h"
#include "util/util.h"
#include "yaml_tree.h"
#include "yaml_value.h"

enum ckind {
	KC_CELL, /* the option sets a cell field: that row's kind and range */
	KC_INT,  /* a whole number in [min, max] */
	KC_NUM,  /* a number in [min, max] */
	KC_TEXT, /* a path or name */
	KC_NAME, /* one of names */
};

struct config_key {
	const char *key;
	const char *option; /* poros-train's own spelling */
	enum ckind kind;
	double min, max;    /* KC_INT, KC_NUM: options.c's ranges */
	const char *const *names;
	int n_names;
	unsigned char required;
};

static const char *const mode_names[] = { "blockwise", "resident" };
static const char *const backend_names[] = { "cpu", "cuda", "auto" };

/* Named as HF's TrainingArguments, TRL and PEFT name them where they have
 * the key; the rest are poros-train's own (man 5 poros-train-config). */
static const struct config_key config_keys[] = {
	{ "model", "--model", KC_CELL, 0, 0, NULL, 0, 1 },
	{ "tokenizer", "--tokenizer", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "chat_date", "--chat-date", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "dataset", "--dataset", KC_CELL, 0, 0, NULL, 0, 1 },
	{ "split", "--split", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "train_on", "--train-on", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "eval_dataset", "--eval-dataset", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "eval_split", "--eval-split", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "eval_fraction", "--eval-fraction", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "eval_steps", "--eval-every", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "max_steps", "--steps", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "num_train_epochs", "--epochs", KC_NUM, 1e-6, 100000, NULL, 0, 0 },
	{ "max_seq_length", "--seq-len", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "per_device_train_batch_size", "--batch-size", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "gradient_accumulation_steps", "--accum", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "learning_rate", "--lr", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "lr_scheduler_type", "--lr-schedule", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "warmup_steps", "--lr-warmup", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "weight_decay", "--weight-decay", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "max_grad_norm", "--max-grad-norm", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "seed", "--seed", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "lora_r", "--rank", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "lora_alpha", "--alpha", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "lora_dropout", "--dropout", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "target_modules", "--targets", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "precision", "--precision", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "gradient_checkpointing", "--gradient-checkpointing", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "mode", "--mode", KC_NAME, 0, 0, mode_names, 2, 0 },
	{ "block_size", "--block-size", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "prefetch", "--no-prefetch", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "checkpoints", "--checkpoints", KC_CELL, 0, 0, NULL, 0, 0 },
	{ "checkpoint_dir", "--checkpoint-dir", KC_TEXT, 0, 0, NULL, 0, 0 },
	{ "backend", "--backend", KC_NAME, 0, 0, backend_names, 3, 0 },
	{ "output_dir", "--out", KC_TEXT, 0, 0, NULL, 0, 1 },
	{ "save_steps", "--save-every", KC_INT, 0, 1000000, NULL, 0, 0 },
	{ "resume_from_checkpoint", "--resume", KC_TEXT, 0, 0, NULL, 0, 0 },
	{ "init_adapter", "--init-adapter", KC_TEXT, 0, 0, NULL, 0, 0 },
};
#define NKEYS ((int)(sizeof config_keys / sizeof config_keys[0]))

/* Keys HF, TRL and Axolotl users write that poros-train has no option for,
 * or names otherwise: refused by name, with what to write instead. */
static const struct {
	const char *key, *why;
} refused_keys[] = {
	{ "bf16", "the base weights' format is precision: nf4 or bf16; matmuls are always bf16 with fp32 accumulation" },
	{ "fp16", "poros-train computes in bf16 (precision: nf4 or bf16 sets the base weights' format)" },
	{ "tf32", "poros-train computes in bf16 with fp32 accumulation" },
	{ "load_in_4bit", "write precision: nf4" },
	{ "load_in_8bit", "8-bit base weights are not supported (precision: nf4 or bf16)" },
	{ "optim", "the optimizer is AdamW with fp32 states, not a choice" },
	{ "adam_beta1", "AdamW's constants are fixed (man poros-train)" },
	{ "adam_beta2", "AdamW's constants are fixed (man poros-train)" },
	{ "adam_epsilon", "AdamW's constants are fixed (man poros-train)" },
	{ "warmup_ratio", "write warmup_steps, a number of steps" },
	{ "logging_steps", "every step is logged, in OUTPUT_DIR/events.jsonl" },
	{ "save_strategy", "write save_steps (a checkpoint every N steps)" },
	{ "save_total_limit", "every checkpoint save_steps writes is kept" },
	{ "eval_strategy", "write eval_steps (an evaluation every N steps)" },
	{ "evaluation_strategy", "write eval_steps (an evaluation every N steps)" },
	{ "per_device_eval_batch_size", "evaluation has no batch size of its own" },
	{ "report_to", "poros-train reports to no service; its events are OUTPUT_DIR/events.jsonl" },
	{ "push_to_hub", "poros-train uploads nothing" },
	{ "base_model", "write model" },
	{ "datasets", "write dataset (one file or directory)" },
	{ "sequence_len", "write max_seq_length" },
	{ "max_length", "write max_seq_length" },
	{ "micro_batch_size", "write per_device_train_batch_size" },
	{ "num_epochs", "write num_train_epochs" },
	{ "lr_scheduler", "write lr_scheduler_type" },
	{ "lora_target_modules", "write target_modules" },
	{ "adapter", "poros-train trains LoRA adapters only" },
	{ "use_peft", "poros-train trains LoRA adapters only" },
};

static const struct cell_field *row_of_option(const char *option)
{
	for (int i = 0; i < cell_field_count; i++)
		if (cell_fields[i].flag && strcmp(cell_fields[i].flag, option) == 0)
			return &cell_fields[i];
	die(EXIT_RUNTIME, "config key table: %s sets no cell field", option);
}

static void check_config_key(const char *file, const struct ynode *map, size_t i)
{
	const struct ynode *key = map->kids[i];
	const char *names[NKEYS], *hint;
	char q[160], d[200];

	if (key->kind != YN_SCALAR)
		ytree_die(file, key, "keys must be names, got %s", describe(key, d, sizeof d));
	for (size_t j = 0; j < i; j += 2)
		if (strcmp(map->kids[j]->text, key->text) == 0)
			ytree_die(file, key, "duplicate key %s (first at line %lu)", quoted(key->text, q, sizeof q),
			          map->kids[j]->line);
	for (int k = 0; k < NKEYS; k++)
		if (strcmp(config_keys[k].key, key->text) == 0)
			return;
	for (size_t k = 0; k < sizeof refused_keys / sizeof *refused_keys; k++)
		if (strcmp(refused_keys[k].key, key->text) == 0)
			ytree_die(file, key, "%s: poros-train has no such option: %s", key->text, refused_keys[k].why);
	if (strcmp(key->text, "models") == 0 || strcmp(key->text, "spec_id") == 0 || strcmp(key->text, "methods") == 0)
		ytree_die(file, key, "%s is a bench spec's key (man 5 poros-spec); a fine-tune config names one model",
		          key->text);
	for (int k = 0; k < NKEYS; k++)
		names[k] = config_keys[k].key;
	if ((hint = closest_name(key->text, names, NKEYS)) != NULL)
		ytree_die(file, key, "unknown key %s (did you mean \"%s\"?)", quoted(key->text, q, sizeof q), hint);
	ytree_die(file, key, "unknown key %s (man 5 poros-train-config lists the keys)", quoted(key->text, q, sizeof q));
}

static void put_arg(const char *s)
{
	printf("%s\n", s);
}

/* The text poros-train gets for a value of a cell-backed key, checked by
 * the cell row; NULL: the option is given alone (prefetch: false) or not
 * at all (prefetch: true), as *alone says. */
static const char *cell_value(const char *file, const struct config_key *k, const struct ynode *v, char *buf,
                              size_t n, int *alone, int *omit)
{
	const struct cell_field *row = row_of_option(k->option);
	const char *text = NULL;
	char err[512];
	struct cell scratch;
	unsigned mask = 0;

	*alone = *omit = 0;
	switch (row->kind) {
	case CK_INT:
	case CK_U64:
	case CK_NUM:
		number_value(file, v, k->key, row->kind != CK_NUM);
		text = v->text;
		break;
	case CK_STR:
	case CK_ENUM:
		text = text_value(file, v, k->key, CELL_PATH_MAX);
		break;
	case CK_BOOL:
		if (row->flag_arg) {
			text = bool_value(file, v, k->key) ? "on" : "off";
		} else { /* a flag that turns the field off */
			*alone = !bool_value(file, v, k->key);
			*omit = !*alone;
			return NULL;
		}
		break;
	case CK_MODULES: {
		size_t used = 0;

		set_targets(file, v, k->key, &mask);
		buf[0] = '\0';
		for (int m = 0; m < CELL_MAX_TARGETS; m++)
			if (mask & 1u << m)
				bprintf(buf, n, &used, "%s%s", used ? "," : "", lora_module_names[m]);
		text = buf;
		break;
	}
	default:
		die(EXIT_RUNTIME, "config key %s: a cell field kind it cannot hold", k->key);
	}
	cell_defaults(&scratch);
	if (cell_field_parse(&scratch, row, k->key, text, err, sizeof err) < 0) {
		cell_free(&scratch);
		ytree_die(file, v, "%s", err);
	}
	cell_free(&scratch);
	return text;
}

static const char *plain_value(const char *file, const struct config_key *k, const struct ynode *v)
{
	char list[256], q[160], err[256];
	const char *s;
	double x;

	switch (k->kind) {
	case KC_INT:
	case KC_NUM:
		x = number_value(file, v, k->key, k->kind == KC_INT);
		if (x < k->min || x > k->max) {
			snprintf(err, sizeof err, "%s: must be in [%g, %g], got %s", k->key, k->min, k->max, v->text);
			ytree_die(file, v, "%s", err);
		}
		return v->text;
	case KC_TEXT:
		return text_value(file, v, k->key, CELL_PATH_MAX);
	case KC_NAME:
		s = text_value(file, v, k->key, CELL_NAME_MAX);
		for (int i = 0; i < k->n_names; i++)
			if (strcmp(s, k->names[i]) == 0)
				return s;
		list_names(list, sizeof list, k->names, k->n_names);
		ytree_die(file, v, "%s: unknown value %s (expected one of: %s)", k->key, quoted(s, q, sizeof q), list);
	default:
		die(EXIT_RUNTIME, "config key %s: no plain kind", k->key);
	}
}

/* Every argument is checked before the first is printed: a bad key leaves
 * stdout empty. */
static void emit_argv(const char *file, const struct ynode *root)
{
	const char *args[2 * NKEYS];
	char bufs[NKEYS][256];
	int n = 0;

	for (size_t i = 0; i + 1 < root->n; i += 2) {
		const struct config_key *k = NULL;
		const struct ynode *v = root->kids[i + 1];
		int alone = 0, omit = 0;
		const char *text;

		check_config_key(file, root, i);
		for (int j = 0; j < NKEYS; j++)
			if (strcmp(config_keys[j].key, root->kids[i]->text) == 0)
				k = &config_keys[j];
		if (k->kind == KC_CELL)
			text = cell_value(file, k, v, bufs[k - config_keys], sizeof bufs[0], &alone, &omit);
		else
			text = plain_value(file, k, v);
		if (omit)
			continue;
		args[n++] = k->option;
		if (!alone)
			args[n++] = text;
	}
	for (int j = 0; j < NKEYS; j++)
		if (config_keys[j].required && !map_get(root, config_keys[j].key))
			ytree_die(file, root, "missing required key \"%s\"", config_keys[j].key);
	if (!map_get(root, "max_steps") && !map_get(root, "num_train_epochs"))
		ytree_die(file, root, "missing max_steps or num_train_epochs (how long to train)");
	for (int j = 0; j < n; j++)
		put_arg(args[j]);
}

static struct ynode *load_root(const char *file, char **text)
{
	struct ynode *root;
	size_t len;

	if ((*text = read_whole_file(file, &len)) == NULL)
		diesys(EXIT_USAGE, "%s", file);
	if (len > YTREE_MAX_BYTES)
		die(EXIT_USAGE, "%s: %zu bytes is too large for a config (at most %d)", file, len, YTREE_MAX_BYTES);
	root = ytree_load(file, *text, len);
	if (!root || (root->kind == YN_SCALAR && classify(root) == SC_NULL))
		ytree_die_at(file, 1, 1, "the file is empty (expected a mapping)");
	if (root->kind != YN_MAP) {
		char d[200];

		ytree_die(file, root, "expected a mapping at top level, got %s", describe(root, d, sizeof d));
	}
	return root;
}

void train_config_print_argv(const char *file)
{
	char *text;
	struct ynode *root = load_root(file, &text);

	emit_argv(file, root);
	ytree_free(root);
	free(text);
}

const char *config_kind(const char *file)
{
	char *text;
	struct ynode *root = load_root(file, &text);
	const char *kind = NULL;

	if (map_get(root, "model") && !map_get(root, "models"))
		kind = "train-config";
	else if (map_get(root, "models") || map_get(root, "spec_id"))
		kind = "bench-spec";
	if (!kind)
		ytree_die(file, root, "neither a bench spec (spec_id, models: man 5 poros-spec) nor a fine-tune config "
		          "(model: man 5 poros-train-config)");
	ytree_free(root);
	free(text);
	return kind;
}
