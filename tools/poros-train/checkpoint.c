/* tools/poros-train/checkpoint.c: the full training state in and out of
 * OUTDIR/checkpoint-stepN (see checkpoint.h). */
#include "checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "jsonl.h"
#include "util.h"

#define STATE_SCHEMA "poros.train_state/1"

static int little_endian(void)
{
	const uint32_t one = 1;

	return *(const unsigned char *)&one == 1;
}

/* What shapes the result, by the name a refusal gives.  Mode, block size,
 * prefetch, backend and recompute do not (blockwise and resident are
 * bit-identical), so a resume may change them; steps only moves the LR of
 * a decaying schedule. */
static cJSON *config_json(const struct train_config *c)
{
	cJSON *o = cJSON_CreateObject();
	char seed[32];

	snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->cell.training.seed);
	cJSON_AddStringToObject(o, "model", c->cell.model.model_id);
	cJSON_AddStringToObject(o, "precision", precision_names[c->cell.precision]);
	cJSON_AddStringToObject(o, "dataset", c->cell.training.dataset);
	if (c->cell.training.chat_date) /* the data a chat template renders (unset: as before it existed) */
		cJSON_AddStringToObject(o, "chat_date", c->cell.training.chat_date);
	if (c->cell.training.split) /* which files of a directory (unset: its train split) */
		cJSON_AddStringToObject(o, "split", c->cell.training.split);
	if (c->cell.training.eval_fraction > 0) /* documents held out of the training data */
		cJSON_AddNumberToObject(o, "eval_fraction", c->cell.training.eval_fraction);
	cJSON_AddStringToObject(o, "seed", seed);
	cJSON_AddNumberToObject(o, "seq_len", c->cell.training.seq_len);
	cJSON_AddNumberToObject(o, "batch_size", c->cell.training.batch_size);
	/* the step's micro-batches over every rank: a checkpoint resumes on any
	 * number of ranks that cut the same global batch */
	cJSON_AddNumberToObject(o, "accum", c->cell.training.gradient_accumulation_steps * (c->ranks > 1 ? c->ranks : 1));
	cJSON_AddNumberToObject(o, "rank", c->cell.lora.rank);
	cJSON_AddNumberToObject(o, "alpha", c->cell.lora.alpha);
	cJSON_AddNumberToObject(o, "dropout", c->cell.lora.dropout);
	cJSON_AddNumberToObject(o, "targets", c->cell.lora.target_mask);
	cJSON_AddNumberToObject(o, "lr", c->cell.training.learning_rate);
	cJSON_AddStringToObject(o, "lr_schedule", lr_schedule_names[c->cell.training.lr_schedule]);
	cJSON_AddNumberToObject(o, "warmup_steps", c->cell.training.warmup_steps);
	cJSON_AddNumberToObject(o, "lr_warmup_steps", c->cell.training.lr_warmup_steps);
	cJSON_AddNumberToObject(o, "train_on", c->cell.training.train_on);
	cJSON_AddNumberToObject(o, "weight_decay", c->cell.training.weight_decay);
	cJSON_AddNumberToObject(o, "max_grad_norm", c->cell.training.max_grad_norm);
	cJSON_AddNumberToObject(o, "lora_ext", c->lora_ext);
	if (c->mlp_chunk) /* POROS_MLP_CHUNK: the MLP gradients' order of sums (unset: as before it existed) */
		cJSON_AddNumberToObject(o, "mlp_chunk", c->mlp_chunk);
	cJSON_AddNumberToObject(o, "steps", c->cell.training.steps);
	return o;
}

static void value_text(char *buf, size_t n, const cJSON *v)
{
	if (cJSON_IsString(v))
		snprintf(buf, n, "\"%s\"", v->valuestring);
	else if (cJSON_IsNumber(v))
		snprintf(buf, n, "%.17g", v->valuedouble);
	else
		snprintf(buf, n, "nothing");
}

/* Every key of the run's configuration must be in the checkpoint with the
 * same value, and every key of the checkpoint's in the run; the first that
 * is not is named. */
static int config_check(const cJSON *saved, const struct train_config *c, char *err, size_t errsz)
{
	cJSON *now = config_json(c), *it;
	int rc = 0;

	cJSON_ArrayForEach(it, now) {
		const cJSON *was = cJSON_GetObjectItemCaseSensitive(saved, it->string);
		int same = was && cJSON_IsString(it) == cJSON_IsString(was) &&
		           (cJSON_IsString(it) ? strcmp(it->valuestring, was->valuestring) == 0
		                               : cJSON_IsNumber(was) && it->valuedouble == was->valuedouble);
		char a[256], b[256];

		if (same || (strcmp(it->string, "steps") == 0 && c->cell.training.lr_schedule == LR_CONSTANT))
			continue;
		value_text(a, sizeof a, was);
		value_text(b, sizeof b, it);
		snprintf(err, errsz, "--resume %s: %s differs: %s in the checkpoint, %s in this run (a resumed run keeps "
		         "the configuration)", c->resume, it->string, a, b);
		rc = -1;
		break;
	}
	/* and an optional key the checkpoint has (mlp_chunk, chat_date) must be set now too */
	const cJSON *rest = rc == 0 ? saved : NULL;

	cJSON_ArrayForEach(it, rest) {
		char a[256];

		if (cJSON_GetObjectItemCaseSensitive(now, it->string))
			continue;
		value_text(a, sizeof a, it);
		snprintf(err, errsz, "--resume %s: %s differs: %s in the checkpoint, not set in this run (a resumed run "
		         "keeps the configuration)", c->resume, it->string, a);
		rc = -1;
		break;
	}
	cJSON_Delete(now);
	return rc;
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
	cJSON_AddItemToObject(o, "config", config_json(c));
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
