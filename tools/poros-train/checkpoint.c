/* tools/poros-train/checkpoint.c: the full training state in and out of
 * OUTDIR/checkpoint-stepN (see checkpoint.h). */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "util/util.h"

#define STATE_SCHEMA "poros.train_state/1"

static int little_endian(void)
{
	const uint32_t one = 1;

	return *(const unsigned char *)&one == 1;
}

/* The run's configuration in readable values, by the names a refusal
 * gives: RUN_DIR/train_config.json, a checkpoint's "config" and the
 * summary's keys (docs/checkpoints.md lists them). */
static cJSON *opt_string(const char *s)
{
	return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

cJSON *run_config_json(const struct train_config *c)
{
	cJSON *o = cJSON_CreateObject(), *targets;
	char seed[32];

	cJSON_AddStringToObject(o, "model", c->cell.model.model_id);
	cJSON_AddItemToObject(o, "model_hash", c->model_hash ? cJSON_CreateString(c->model_hash) : cJSON_CreateNull());
	cJSON_AddStringToObject(o, "precision", precision_names[c->cell.precision]);
	cJSON_AddStringToObject(o, "dataset", c->cell.training.dataset);
	cJSON_AddItemToObject(o, "dataset_hash", opt_string(c->dataset_hash));
	if (c->cell.training.chat_date) /* the data a chat template renders (unset: as before it existed) */
		cJSON_AddStringToObject(o, "chat_date", c->cell.training.chat_date);
	if (c->cell.training.split) /* which files of a directory (unset: its train split) */
		cJSON_AddStringToObject(o, "split", c->cell.training.split);
	if (c->cell.training.eval_fraction > 0) /* documents held out of the training data */
		cJSON_AddNumberToObject(o, "eval_fraction", c->cell.training.eval_fraction);
	/* "default": a chat's answers, every token of text and input_ids */
	cJSON_AddStringToObject(o, "train_on", c->cell.training.train_on ? train_on_names[c->cell.training.train_on] : "default");
	targets = cJSON_AddArrayToObject(o, "targets");
	for (int m = 0; m < CELL_MAX_TARGETS; m++)
		if ((c->cell.lora.target_mask >> m) & 1u)
			cJSON_AddItemToArray(targets, cJSON_CreateString(lora_module_names[m]));
	/* a 64-bit seed as the exact JSON number, not a double's rounding */
	snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->cell.training.seed);
	cJSON_AddRawToObject(o, "seed", seed);
	cJSON_AddNumberToObject(o, "seq_len", c->cell.training.seq_len);
	cJSON_AddNumberToObject(o, "batch_size", c->cell.training.batch_size);
	/* the step's micro-batches over every rank: a checkpoint resumes on any
	 * number of ranks that cut the same global batch */
	cJSON_AddNumberToObject(o, "accum", c->cell.training.gradient_accumulation_steps * (c->ranks > 1 ? c->ranks : 1));
	cJSON_AddNumberToObject(o, "rank", c->cell.lora.rank);
	cJSON_AddNumberToObject(o, "alpha", c->cell.lora.alpha);
	cJSON_AddNumberToObject(o, "dropout", c->cell.lora.dropout);
	cJSON_AddNumberToObject(o, "lr", c->cell.training.learning_rate);
	cJSON_AddStringToObject(o, "lr_schedule", lr_schedule_names[c->cell.training.lr_schedule]);
	cJSON_AddNumberToObject(o, "lr_warmup_steps", c->cell.training.lr_warmup_steps);
	cJSON_AddNumberToObject(o, "warmup_steps", c->cell.training.warmup_steps);
	cJSON_AddNumberToObject(o, "weight_decay", c->cell.training.weight_decay);
	cJSON_AddNumberToObject(o, "max_grad_norm", c->cell.training.max_grad_norm);
	cJSON_AddNumberToObject(o, "steps", c->cell.training.steps);
	cJSON_AddItemToObject(o, "epochs", c->epochs > 0 ? cJSON_CreateNumber(c->epochs) : cJSON_CreateNull());
	cJSON_AddNumberToObject(o, "lora_ext", c->lora_ext);
	if (c->mlp_chunk) /* POROS_MLP_CHUNK: the MLP gradients' order of sums (unset: as before it existed) */
		cJSON_AddNumberToObject(o, "mlp_chunk", c->mlp_chunk);
	cJSON_AddItemToObject(o, "tokenizer", opt_string(c->cell.training.tokenizer));
	cJSON_AddItemToObject(o, "tokenizer_hash", opt_string(c->tokenizer_hash));
	/* what changes no bit of the result: a resume takes it unless a flag says otherwise */
	cJSON_AddStringToObject(o, "mode", train_mode_names[c->mode]);
	cJSON_AddNumberToObject(o, "block_size", c->cell.poros.block_size);
	cJSON_AddBoolToObject(o, "prefetch", c->cell.poros.enable_prefetch);
	cJSON_AddStringToObject(o, "checkpoints", checkpoints_names[c->cell.poros.checkpoints]);
	cJSON_AddStringToObject(o, "backend", c->backend);
	/* the CUDA backend's routes (kernels/ops.h): as the backend, they may
	 * round otherwise, and a resume may change them; recorded so a run
	 * says which it took */
	cJSON_AddStringToObject(o, "attention", c->attention ? c->attention : "default");
	cJSON_AddStringToObject(o, "gemm_choice", c->gemm_choice_group ? "group" : "micro-batch");
	cJSON_AddNumberToObject(o, "gemm_choice_rows", engine_gemm_choice_rows(c)); /* with POROS_GROUP */
	cJSON_AddItemToObject(o, "cudnn_workspace_mb",
	                      c->cudnn_workspace_mb ? cJSON_CreateNumber((double)c->cudnn_workspace_mb) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "cudnn_tile", c->cudnn_tile < 0 ? cJSON_CreateString("auto")
	                      : c->cudnn_tile ? cJSON_CreateNumber((double)c->cudnn_tile) : cJSON_CreateNull());
	cJSON_AddStringToObject(o, "gradient_checkpointing", c->cell.training.gradient_checkpointing ? "on" : "off");
	cJSON_AddItemToObject(o, "eval_dataset", opt_string(c->cell.training.eval_dataset));
	cJSON_AddItemToObject(o, "eval_dataset_hash", opt_string(c->eval_dataset_hash));
	cJSON_AddItemToObject(o, "eval_split", opt_string(c->cell.training.eval_split));
	cJSON_AddNumberToObject(o, "eval_every", c->cell.training.eval_every);
	cJSON_AddNumberToObject(o, "save_every", c->save_every);
	cJSON_AddNumberToObject(o, "save_total_limit", c->save_total_limit);
	return o;
}

/* The configuration's keys: the flag (or variable) that sets each, and
 * whether a resume may change it (no bit of the result depends on it). */
static const struct config_key {
	const char *key, *flag;
	int may_change;
} config_keys[] = {
	{ "model", "--model", 1 }, /* the path a model is found at; its content is model_hash */
	{ "model_hash", "--model", 0 }, { "precision", "--precision", 0 },
	{ "dataset", "--dataset", 0 }, /* a file's path may change: its content is dataset_hash (may_change) */
	{ "dataset_hash", "--dataset", 0 },
	{ "chat_date", "--chat-date", 0 }, { "split", "--split", 0 }, { "eval_fraction", "--eval-fraction", 0 },
	{ "train_on", "--train-on", 0 }, { "targets", "--targets", 0 }, { "seed", "--seed", 0 },
	{ "seq_len", "--seq-len", 0 }, { "batch_size", "--batch-size", 0 }, { "accum", "--accum", 0 },
	{ "rank", "--rank", 0 }, { "alpha", "--alpha", 0 }, { "dropout", "--dropout", 0 }, { "lr", "--lr", 0 },
	{ "lr_schedule", "--lr-schedule", 0 }, { "lr_warmup_steps", "--lr-warmup", 0 },
	{ "warmup_steps", "--timing-warmup", 1 }, /* timing only */ { "weight_decay", "--weight-decay", 0 },
	{ "max_grad_norm", "--max-grad-norm", 0 }, { "steps", "--steps", 0 },
	{ "epochs", "--epochs", 1 }, /* the steps are what count */
	{ "lora_ext", "POROS_LORA_EXT", 0 }, { "mlp_chunk", "POROS_MLP_CHUNK", 0 },
	{ "mode", "--mode", 1 }, { "block_size", "--block-size", 1 }, { "prefetch", "--no-prefetch", 1 },
	{ "checkpoints", "--checkpoints", 1 },
	{ "backend", "--backend", 1 }, { "gradient_checkpointing", "--gradient-checkpointing", 1 },
	{ "attention", "POROS_ATTENTION", 1 }, { "gemm_choice", "POROS_GEMM_CHOICE", 1 },
	{ "gemm_choice_rows", "POROS_GROUP", 1 }, { "cudnn_workspace_mb", "POROS_CUDNN_WORKSPACE", 1 },
	{ "cudnn_tile", "POROS_CUDNN_TILE", 1 },
	{ "tokenizer", "--tokenizer", 0 }, /* as dataset: its content is tokenizer_hash */
	{ "tokenizer_hash", "--tokenizer", 0 }, { "eval_dataset", "--eval-dataset", 1 },
	{ "eval_dataset_hash", "--eval-dataset", 0 }, /* another set may be named, not edited in place */
	{ "eval_split", "--eval-split", 1 },
	{ "eval_every", "--eval-every", 1 }, { "save_every", "--save-every", 1 },
	{ "save_total_limit", "--save-total-limit", 1 },
};

static const struct config_key *config_key_find(const char *key)
{
	for (size_t i = 0; i < sizeof config_keys / sizeof *config_keys; i++)
		if (strcmp(config_keys[i].key, key) == 0)
			return &config_keys[i];
	return NULL;
}

/* A digest of what the run reads (model_hash.h, data.h): computed, never
 * set by a flag or restored from a checkpoint. */
static int is_digest(const char *key)
{
	size_t n = strlen(key);

	return n > 5 && strcmp(key + n - 5, "_hash") == 0;
}

/* Steps only move the LR of a decaying schedule; a dataset or tokenizer
 * file is compared by content, so it may be found at another path (a
 * synthetic stream, with no digest, is its name); an eval set changes no
 * bit of the adapter, so another may be named, but the same name over
 * other content is refused (the eval curve would mix two sets unsaid). */
static int may_change(const char *key, const struct train_config *c, const cJSON *saved)
{
	const struct config_key *k = config_key_find(key);
	const char *eval = c->cell.training.eval_dataset;
	const cJSON *was = cJSON_GetObjectItemCaseSensitive(saved, "eval_dataset");
	const char *eval_was = cJSON_IsString(was) ? was->valuestring : NULL;

	if (k && k->may_change)
		return 1;
	if (strcmp(key, "steps") == 0)
		return c->cell.training.lr_schedule == LR_CONSTANT;
	if (strcmp(key, "dataset") == 0)
		return c->dataset_hash != NULL;
	if (strcmp(key, "tokenizer") == 0)
		return c->tokenizer_hash != NULL;
	if (strcmp(key, "eval_dataset_hash") == 0)
		return eval_was ? eval == NULL || strcmp(eval, eval_was) != 0 : eval != NULL;
	return 0;
}

static const char *flag_of(const char *key)
{
	const struct config_key *k = config_key_find(key);

	return k ? k->flag : key;
}

static void value_text(char *buf, size_t n, const cJSON *v)
{
	char *text;

	if (v == NULL || cJSON_IsNull(v)) {
		snprintf(buf, n, "not set");
		return;
	}
	text = cJSON_PrintUnformatted(v);
	snprintf(buf, n, "%s", text ? text : "?");
	free(text);
}

/* Every key of the run's configuration must be in the checkpoint with the
 * same value, and every key of the checkpoint's in the run; all that are
 * not are listed in one message. */
static int config_check(const cJSON *saved, const struct train_config *c, char *err, size_t errsz)
{
	cJSON *made = run_config_json(c), *now, *it;
	char *text = cJSON_PrintUnformatted(made);
	size_t len;

	/* as the checkpoint reads back: the raw seed becomes a number */
	now = cJSON_Parse(text);
	free(text);
	cJSON_Delete(made);
	int n = 0;

	len = (size_t)snprintf(err, errsz, "--resume %s: this run differs from the checkpoint in", c->resume);
	for (int pass = 0; pass < 2; pass++) {
		/* pass 0: the run's keys; pass 1: keys only the checkpoint has (mlp_chunk, chat_date) */
		const cJSON *from = pass == 0 ? now : saved, *other = pass == 0 ? saved : now;

		cJSON_ArrayForEach(it, from) {
			const cJSON *was = cJSON_GetObjectItemCaseSensitive(other, it->string);
			char a[256], b[256];

			if (pass == 1 && was)
				continue;
			if (pass == 0 && (may_change(it->string, c, saved) || (was && cJSON_Compare(it, was, 1))))
				continue;
			/* a checkpoint from before data digests: nothing read, nothing to tell apart */
			if (pass == 0 && was == NULL && is_digest(it->string) && cJSON_IsNull(it))
				continue;
			if (pass == 0 && was == NULL && is_digest(it->string)) {
				snprintf(err, errsz, "--resume %s: a checkpoint of an older poros-train (%s: what it read "
				         "is not identified by content, no %s): resume it with the poros-train that wrote it",
				         c->resume, flag_of(it->string), it->string);
				cJSON_Delete(now); /* it is now's */
				return -1;
			}
			value_text(a, sizeof a, pass == 0 ? was : it);
			value_text(b, sizeof b, pass == 0 ? it : NULL);
			if (len < errsz)
				len += (size_t)snprintf(err + len, errsz - len, "%s %s (%s: checkpoint %s, given %s)",
				                        n ? ";" : "", flag_of(it->string), it->string, a, b);
			n++;
		}
	}
	cJSON_Delete(now);
	if (n && len < errsz)
		snprintf(err + len, errsz - len, "; a resumed run keeps the configuration");
	return n ? -1 : 0;
}

static cJSON *cursor_json(const struct token_cursor *cur)
{
	cJSON *o = cJSON_CreateObject();
	char buf[32];

	/* 64-bit counters as strings: a JSON number is a double */
	snprintf(buf, sizeof buf, "%llu", (unsigned long long)cur->next_seq);
	cJSON_AddStringToObject(o, "next_seq", buf);
	snprintf(buf, sizeof buf, "%lld", cur->size);
	cJSON_AddStringToObject(o, "size", buf);
	snprintf(buf, sizeof buf, "%lld", cur->ds.epoch);
	cJSON_AddStringToObject(o, "epoch", buf);
	snprintf(buf, sizeof buf, "%zu", cur->ds.stream_pos);
	cJSON_AddStringToObject(o, "stream_pos", buf);
	snprintf(buf, sizeof buf, "%zu", cur->ds.doc);
	cJSON_AddStringToObject(o, "doc", buf);
	snprintf(buf, sizeof buf, "%zu", cur->ds.off);
	cJSON_AddStringToObject(o, "off", buf);
	return o;
}

static int get_ll(const cJSON *o, const char *key, long long *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	char *end;

	if (!cJSON_IsString(v) || !*v->valuestring)
		return -1;
	errno = 0;
	*out = strtoll(v->valuestring, &end, 10);
	return errno || *end ? -1 : 0;
}

static int cursor_from_json(struct token_cursor *cur, const cJSON *o)
{
	long long seq, pos, doc, off;

	memset(cur, 0, sizeof *cur);
	if (get_ll(o, "next_seq", &seq) < 0 || get_ll(o, "size", &cur->size) < 0 || get_ll(o, "epoch", &cur->ds.epoch) < 0 ||
	    get_ll(o, "stream_pos", &pos) < 0 || get_ll(o, "doc", &doc) < 0 || get_ll(o, "off", &off) < 0 || seq < 0 ||
	    pos < 0 || doc < 0 || off < 0)
		return -1;
	cur->next_seq = (uint64_t)seq;
	cur->ds.stream_pos = (size_t)pos;
	cur->ds.doc = (size_t)doc;
	cur->ds.off = (size_t)off;
	return 0;
}

static int write_file(const char *dir, const char *name, const void *data, size_t len)
{
	char *path = xasprintf("%s/%s", dir, name);
	int rc = atomic_write(path, data, len);

	free(path);
	return rc;
}

/* A checkpoint directory's files, then the directory. */
static void remove_checkpoint(const char *dir)
{
	static const char *const files[] = { "state.json", "lora_state.f32", "events.jsonl" };

	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		char *p = xasprintf("%s/%s", dir, files[i]);

		unlink(p);
		free(p);
	}
	rmdir(dir);
}

/* N of a "checkpoint-stepN" name, or -1. */
static int checkpoint_step_of(const char *name)
{
	int step, end = 0;

	if (sscanf(name, "checkpoint-step%d%n", &step, &end) != 1 || name[end] != '\0' || step < 1)
		return -1;
	return step;
}

/* The steps of dir's whole checkpoints (a checkpoint-stepN with its
 * state.json: they are renamed into place complete), newest first.
 * -1 when dir cannot be read. */
static int list_checkpoints(const char *dir, int **steps)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0, cap = 16;

	if (d == NULL)
		return -1;
	*steps = xmalloc((size_t)cap * sizeof **steps);
	while ((de = readdir(d)) != NULL) {
		int step = checkpoint_step_of(de->d_name);
		char *state;
		struct stat st;

		if (step < 0)
			continue;
		state = xasprintf("%s/%s/state.json", dir, de->d_name);
		if (stat(state, &st) == 0 && S_ISREG(st.st_mode)) {
			if (n == cap)
				*steps = xrealloc(*steps, (size_t)(cap *= 2) * sizeof **steps);
			(*steps)[n++] = step;
		}
		free(state);
	}
	closedir(d);
	for (int i = 1; i < n; i++) /* newest first: a few dozen at most */
		for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
			int t = (*steps)[j];

			(*steps)[j] = (*steps)[j - 1];
			(*steps)[j - 1] = t;
		}
	return n;
}

/* --save-total-limit: all but the newest `keep` whole checkpoints go. */
static void prune_checkpoints(const char *out_dir, int keep)
{
	int *steps = NULL, n = list_checkpoints(out_dir, &steps);

	for (int i = keep; i < n; i++) {
		char *dir = xasprintf("%s/checkpoint-step%d", out_dir, steps[i]);

		remove_checkpoint(dir);
		free(dir);
	}
	free(steps);
}

int checkpoint_save(struct engine *e, const struct train_config *c, int step, double loss_first, const char *events,
                    char *err, size_t errsz)
{
	const struct lora_layout *lo = engine_lora_layout(e);
	char *final = xasprintf("%s/checkpoint-step%d", c->out_dir, step);
	char *tmp = xasprintf("%s/.checkpoint-step%d.tmp.%ld", c->out_dir, step, (long)getpid());
	char *old = xasprintf("%s/.checkpoint-step%d.old.%ld", c->out_dir, step, (long)getpid());
	size_t n = (size_t)lo->total, ev_len = 0;
	float *state = xmalloc(3 * n * sizeof *state);
	char *ev = read_whole_file(events, &ev_len), *text;
	struct token_cursor cur;
	cJSON *o = cJSON_CreateObject();
	int rc = -1;

	engine_state_read(e, state, state + n, state + 2 * n);
	engine_data_cursor(e, &cur);
	cJSON_AddStringToObject(o, "schema", STATE_SCHEMA);
	cJSON_AddNumberToObject(o, "step", step);
	cJSON_AddItemToObject(o, "config", run_config_json(c));
	cJSON_AddItemToObject(o, "data_cursor", cursor_json(&cur));
	cJSON_AddNumberToObject(o, "lora_floats", (double)n);
	cJSON_AddItemToObject(o, "loss_first", json_number_or_null(loss_first));
	text = jsonl_format(o);
	remove_checkpoint(tmp);
	if (ev == NULL || !little_endian()) {
		snprintf(err, errsz, "%s: %s", events, ev ? "a big-endian host cannot write checkpoints" : strerror(errno));
	} else if (mkdir(tmp, 0755) < 0 || write_file(tmp, "lora_state.f32", state, 3 * n * sizeof *state) < 0 ||
	           write_file(tmp, "events.jsonl", ev, ev_len) < 0 || write_file(tmp, "state.json", text, strlen(text)) < 0) {
		snprintf(err, errsz, "%s: %s", tmp, strerror(errno));
		remove_checkpoint(tmp);
	} else {
		/* an older checkpoint of the same step (a resumed run going over
		 * it again) is replaced, never left half-written */
		int had = rename(final, old) == 0;

		if (rename(tmp, final) < 0) {
			snprintf(err, errsz, "%s: %s", final, strerror(errno));
			if (had)
				rename(old, final);
			remove_checkpoint(tmp);
		} else {
			if (had)
				remove_checkpoint(old);
			/* only now that the new one is whole */
			if (c->save_total_limit > 0)
				prune_checkpoints(c->out_dir, c->save_total_limit);
			rc = 0;
		}
	}
	cJSON_Delete(o);
	free(text);
	free(ev);
	free(state);
	free(final);
	free(tmp);
	free(old);
	return rc;
}

int checkpoint_resume(struct engine *e, struct token_source *data, const struct train_config *c, const char *events,
                      int *step, double *loss_first, char *err, size_t errsz)
{
	const struct lora_layout *lo = engine_lora_layout(e);
	char *path = xasprintf("%s/state.json", c->resume), *bin = xasprintf("%s/lora_state.f32", c->resume);
	char *evp = xasprintf("%s/events.jsonl", c->resume), *state = NULL, *ev = NULL, lerr[512];
	size_t n = (size_t)lo->total, len = 0, ev_len = 0;
	cJSON *o = json_read_file(path, lerr, sizeof lerr);
	const cJSON *schema, *jstep, *floats, *lf;
	struct token_cursor cur;
	int rc = -1;

	if (o == NULL) {
		snprintf(err, errsz, "--resume %s: %s", c->resume, lerr);
		goto out;
	}
	schema = cJSON_GetObjectItemCaseSensitive(o, "schema");
	jstep = cJSON_GetObjectItemCaseSensitive(o, "step");
	floats = cJSON_GetObjectItemCaseSensitive(o, "lora_floats");
	lf = cJSON_GetObjectItemCaseSensitive(o, "loss_first");
	if (!cJSON_IsString(schema) || strcmp(schema->valuestring, STATE_SCHEMA) != 0 || !cJSON_IsNumber(jstep) ||
	    jstep->valuedouble < 1 || jstep->valuedouble != floor(jstep->valuedouble) || !cJSON_IsNumber(floats) ||
	    cursor_from_json(&cur, cJSON_GetObjectItemCaseSensitive(o, "data_cursor")) < 0) {
		snprintf(err, errsz, "--resume %s: state.json is not a %s checkpoint", c->resume, STATE_SCHEMA);
		goto out;
	}
	if (config_check(cJSON_GetObjectItemCaseSensitive(o, "config"), c, err, errsz) < 0)
		goto out;
	*step = (int)jstep->valuedouble;
	if (*step >= c->cell.training.steps) {
		snprintf(err, errsz, "--resume %s: the checkpoint is at step %d; --steps %d (the run's total) leaves "
		         "nothing to do", c->resume, *step, c->cell.training.steps);
		goto out;
	}
	if (floats->valuedouble != (double)n) {
		snprintf(err, errsz, "--resume %s: %.0f LoRA floats, this run's layout has %zu", c->resume,
		         floats->valuedouble, n);
		goto out;
	}
	if ((state = read_whole_file(bin, &len)) == NULL || (ev = read_whole_file(evp, &ev_len)) == NULL) {
		snprintf(err, errsz, "--resume %s: %s: %s", c->resume, state ? evp : bin, strerror(errno));
		goto out;
	}
	if (len != 3 * n * sizeof(float) || !little_endian()) {
		snprintf(err, errsz, "--resume %s: lora_state.f32 has %zu bytes (expected %zu)", c->resume, len,
		         3 * n * sizeof(float));
		goto out;
	}
	if (token_source_seek(data, &cur, lerr, sizeof lerr) < 0) {
		snprintf(err, errsz, "--resume %s: %s", c->resume, lerr);
		goto out;
	}
	if (events && atomic_write(events, ev, ev_len) < 0) { /* NULL: a rank that writes nothing */
		snprintf(err, errsz, "%s: %s", events, strerror(errno));
		goto out;
	}
	{
		const float *f = (const float *)state;

		engine_state_write(e, f, f + n, f + 2 * n);
	}
	*loss_first = cJSON_IsNumber(lf) ? lf->valuedouble : NAN;
	rc = 0;
out:
	cJSON_Delete(o);
	free(state);
	free(ev);
	free(path);
	free(bin);
	free(evp);
	return rc;
}

/* A run directory's newest whole checkpoint, or the checkpoint given. */
static char *locate_checkpoint(const char *given, char *err, size_t errsz)
{
	char *state = xasprintf("%s/state.json", given);
	struct stat st;
	int *steps = NULL, n;

	if (stat(state, &st) == 0) {
		free(state);
		return xstrdup(given);
	}
	free(state);
	if ((n = list_checkpoints(given, &steps)) < 0)
		return snprintf(err, errsz, "--resume %s: %s", given, strerror(errno)), NULL;
	if (n == 0) {
		free(steps);
		return snprintf(err, errsz, "--resume %s: neither a checkpoint nor a run directory with one "
		                "(a run saves checkpoint-stepN with --save-every N)", given), NULL;
	}
	char *dir = xasprintf("%s/checkpoint-step%d", given, steps[0]);

	free(steps);
	return dir;
}

/* The directory a checkpoint is in: the run that wrote it. */
static char *run_dir_of(const char *ckpt)
{
	size_t len = strlen(ckpt);
	const char *slash;
	char *dir;

	while (len > 1 && ckpt[len - 1] == '/')
		len--;
	dir = xasprintf("%.*s", (int)len, ckpt);
	if ((slash = strrchr(dir, '/')) == NULL) {
		free(dir);
		return xstrdup(".");
	}
	dir[slash == dir ? 1 : slash - dir] = '\0';
	return dir;
}

/* A configuration value as a flag's text ("q_proj,v_proj" for targets). */
static char *flag_text(const cJSON *v)
{
	if (cJSON_IsString(v))
		return xstrdup(v->valuestring);
	if (cJSON_IsNumber(v))
		return cJSON_PrintUnformatted(v);
	if (cJSON_IsArray(v)) {
		char *text = xstrdup(""), *next;
		const cJSON *it;

		cJSON_ArrayForEach(it, v) {
			next = xasprintf("%s%s%s", text, *text ? "," : "", cJSON_IsString(it) ? it->valuestring : "?");
			free(text);
			text = next;
		}
		return text;
	}
	return NULL;
}

static int given(char *const value[OPT_COUNT], const char *flag)
{
	for (int i = 0; i < OPT_COUNT; i++)
		if (strncmp(flag, "--", 2) == 0 && strcmp(flag + 2, train_opt_names[i]) == 0)
			return value[i] != NULL;
	return 0;
}

/* One saved key into c, as its flag would set it. */
static int restore_key(struct train_config *c, const cJSON *it, char *err, size_t errsz)
{
	const char *flag = flag_of(it->string);
	char *text;
	int rc = 0;

	if (strcmp(it->string, "mode") == 0 && cJSON_IsString(it)) {
		c->mode = strcmp(it->valuestring, "resident") == 0 ? MODE_RESIDENT : MODE_BLOCKWISE;
		c->cell.method = c->mode == MODE_BLOCKWISE ? METHOD_POROS : METHOD_RESIDENT;
	} else if (strcmp(it->string, "backend") == 0 && cJSON_IsString(it)) {
		free(c->backend);
		c->backend = xstrdup(it->valuestring);
	} else if (strcmp(it->string, "prefetch") == 0) {
		c->cell.poros.enable_prefetch = cJSON_IsTrue(it);
	} else if (strcmp(it->string, "save_every") == 0 && cJSON_IsNumber(it)) {
		c->save_every = it->valueint;
	} else if (strcmp(it->string, "save_total_limit") == 0 && cJSON_IsNumber(it)) {
		c->save_total_limit = it->valueint;
	} else if (strcmp(it->string, "epochs") == 0) {
		c->epochs = cJSON_IsNumber(it) ? it->valuedouble : 0;
	} else if (strcmp(it->string, "train_on") == 0 && cJSON_IsString(it) && strcmp(it->valuestring, "default") == 0) {
		c->cell.training.train_on = 0;
	} else if ((text = flag_text(it)) != NULL) {
		for (int i = 0; i < cell_field_count; i++)
			if (cell_fields[i].flag && strcmp(cell_fields[i].flag, flag) == 0 && cell_fields[i].flag_arg) {
				char why[512];

				if (cell_field_parse(&c->cell, &cell_fields[i], flag, text, why, sizeof why) < 0) {
					snprintf(err, errsz, "--resume %s: train_config: %s", c->resume, why);
					rc = -1;
				}
				break;
			}
		free(text);
	}
	return rc;
}

int checkpoint_take(struct train_config *c, char *const value[OPT_COUNT], char *err, size_t errsz)
{
	char *ckpt = locate_checkpoint(c->resume, err, errsz), *path, lerr[512];
	const cJSON *config, *it;
	cJSON *o;
	int rc = -1;

	if (ckpt == NULL)
		return -1;
	free(c->resume);
	c->resume = ckpt;
	path = xasprintf("%s/state.json", ckpt);
	o = json_read_file(path, lerr, sizeof lerr);
	free(path);
	if (o == NULL)
		return snprintf(err, errsz, "--resume %s: %s", ckpt, lerr), -1;
	config = cJSON_GetObjectItemCaseSensitive(o, "config");
	if (!cJSON_IsObject(config) || !cJSON_GetObjectItemCaseSensitive(config, "model_hash")) {
		snprintf(err, errsz, "--resume %s: a checkpoint of an older poros-train (its base model is not "
		         "identified by content): resume it with the poros-train that wrote it", ckpt);
		goto out;
	}
	/* a cell is the whole configuration: it is checked, never completed */
	if (value[OPT_CELL] == NULL) {
		cJSON_ArrayForEach(it, config) {
			const char *flag = flag_of(it->string);

			if (strncmp(flag, "--", 2) != 0 || given(value, flag) || cJSON_IsNull(it) ||
			    is_digest(it->string))
				continue;
			/* --epochs without --steps sets the steps again */
			if (strcmp(it->string, "steps") == 0 && value[OPT_EPOCHS])
				continue;
			if (restore_key(c, it, err, errsz) < 0)
				goto out;
			if (strcmp(it->string, "steps") == 0)
				c->steps_given = 1;
			/* the checkpoint's is the global accumulation: cut over the ranks once they are known (run.c) */
			if (strcmp(it->string, "accum") == 0)
				c->accum_from_checkpoint = 1;
		}
		c->dataset_named = 1;
	}
	if (value[OPT_OUT] == NULL) {
		free(c->out_dir);
		c->out_dir = run_dir_of(ckpt);
	}
	rc = 0;
out:
	cJSON_Delete(o);
	return rc;
}

int checkpoint_check_config(const struct train_config *c, char *err, size_t errsz)
{
	char *path = xasprintf("%s/state.json", c->resume), lerr[512];
	cJSON *o = json_read_file(path, lerr, sizeof lerr);
	int rc;

	free(path);
	if (o == NULL)
		return snprintf(err, errsz, "--resume %s: %s", c->resume, lerr), -1;
	rc = config_check(cJSON_GetObjectItemCaseSensitive(o, "config"), c, err, errsz);
	cJSON_Delete(o);
	return rc;
}
