/* tools/lib/artifact_read.c: a RunArtifact read back from JSON and a
 * trainer summary ("poros.summary/1") applied to one: the strict readers
 * of what other processes wrote, apart from the writer (artifact.c). */
#include "artifact.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact_int.h"
#include "timing.h"
#include "util.h"

/* --- from JSON ------------------------------------------------------------ */

/* Readers accept a missing key as null (older writers, hand-made files)
 * but never a value of the wrong type. */

static int bad(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
	return -1;
}

/* The value of k in o: NULL when missing or null, an error naming the key
 * when is_type refuses it. */
static int get_typed(const cJSON *o, const char *prefix, const char *k, cJSON_bool (*is_type)(const cJSON *),
                     const char *type_name, const cJSON **out, char *err, size_t errsz)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	*out = NULL;
	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!is_type(v))
		return bad(err, errsz, "%s%s: not %s", prefix, k, type_name);
	*out = v;
	return 0;
}

static int get_str(const cJSON *o, const char *prefix, const char *k, char **out, char *err, size_t errsz)
{
	const cJSON *v;

	*out = NULL;
	if (get_typed(o, prefix, k, cJSON_IsString, "a string", &v, err, errsz) < 0)
		return -1;
	if (v != NULL)
		*out = xstrdup(v->valuestring);
	return 0;
}

/* A number, or the raw number text timing_json_number writes (an
 * artifact_to_json object read back in memory, before any printing). */
static cJSON_bool is_number(const cJSON *j)
{
	char *end;

	if (cJSON_IsNumber(j))
		return 1;
	if (!cJSON_IsRaw(j) || j->valuestring == NULL || j->valuestring[0] == '\0')
		return 0;
	strtod(j->valuestring, &end);
	return *end == '\0';
}

static double number_value(const cJSON *j)
{
	return cJSON_IsRaw(j) ? strtod(j->valuestring, NULL) : j->valuedouble;
}

static int get_num(const cJSON *o, const char *prefix, const char *k, double *out, char *err, size_t errsz)
{
	const cJSON *v;

	*out = NAN;
	if (get_typed(o, prefix, k, is_number, "a number", &v, err, errsz) < 0)
		return -1;
	if (v == NULL)
		return 0;
	/* cJSON reads an overflowing literal (1e309) as infinity: refuse it
	 * rather than carry a number no artifact writer could have meant. */
	if (!isfinite(number_value(v)))
		return bad(err, errsz, "%s%s: number out of range", prefix, k);
	*out = number_value(v);
	return 0;
}

/* A measurement (bytes, seconds, tokens): finite and not negative. */
static int get_measure(const cJSON *o, const char *prefix, const char *k, double *out, char *err, size_t errsz)
{
	if (get_num(o, prefix, k, out, err, errsz) < 0)
		return -1;
	if (*out < 0)
		return bad(err, errsz, "%s%s: must not be negative, got %g", prefix, k, *out);
	return 0;
}

/* The schema's keys (additionalProperties false): anything else is a typo
 * or another tool's record, and is refused by name. */
static int check_keys(const cJSON *o, const char *prefix, const char *const *known, char *err, size_t errsz)
{
	const cJSON *kid;

	if (!cJSON_IsObject(o))
		return 0;
	cJSON_ArrayForEach(kid, o) {
		int found = 0;
		for (const char *const *k = known; *k != NULL && !found; k++)
			found = strcmp(kid->string, *k) == 0;
		if (!found)
			return bad(err, errsz, "%s%s: unknown field", prefix, kid->string);
	}
	return 0;
}

static const char *const artifact_keys[] = {
	"schema", "cell_id", "config_hash", "method", "model_id", "precision", "cell", "status", "error",
	"metrics", "parity", "env", "started_at", "finished_at", "wall_s", "argv", "log", "run_dir", NULL,
};
static const char *const metrics_keys[] = {
	"vram_plan_mb", "host_weights_mb", "host_checkpoints_mb", "process_peak_rss_mb", "vram_peak_mb", "vram_avg_mb", "s_per_step",
	"s_per_step_min", "s_per_step_max", "tokens_per_s", "steps_measured", "warmup_steps", "loss_first", "loss_last",
	"s_per_step_spread", "s_per_step_mad", "passes_agree", "passes", NULL,
};
static const char *const parity_keys[] = { "loss_max_abs_delta", "adapter_max_abs_delta", "bitwise_exact", NULL };
static const char *const env_keys[] = {
	"hostname", "os", "kernel", "cpu", "host_mem_gb", "gpu_name", "gpu_mem_mb", "driver", "cuda_runtime",
	"poros_version", "git_sha", "python", "torch", "transformers", "peft", "weights", "cuda_visible_devices",
	"backend", "device", "ranks", NULL,
};

static int get_count(const cJSON *o, const char *prefix, const char *k, int *out, char *err, size_t errsz)
{
	double d;

	*out = -1;
	if (get_num(o, prefix, k, &d, err, errsz) < 0)
		return -1;
	if (isnan(d))
		return 0;
	if (d < 0 || d > 1e9 || d != floor(d))
		return bad(err, errsz, "%s%s: not a count: %g", prefix, k, d);
	*out = (int)d;
	return 0;
}

/* An optional nested object: absent or null reads as all-null. */
static int get_obj(const cJSON *o, const char *k, const cJSON **out, char *err, size_t errsz)
{
	return get_typed(o, "", k, cJSON_IsObject, "an object", out, err, errsz);
}

static int get_flag(const cJSON *o, const char *prefix, const char *k, int *out, char *err, size_t errsz)
{
	const cJSON *v;

	*out = -1;
	if (get_typed(o, prefix, k, cJSON_IsBool, "a boolean", &v, err, errsz) < 0)
		return -1;
	if (v != NULL)
		*out = cJSON_IsTrue(v) ? 1 : 0;
	return 0;
}

/* A list of step times: finite, not negative.  *out is malloc'd (NULL
 * for an empty list). */
static int step_list(const cJSON *arr, const char *what, double **out, int *n, char *err, size_t errsz)
{
	const cJSON *it;
	int k = 0;

	*out = NULL;
	*n = cJSON_GetArraySize(arr);
	if (*n > 0)
		*out = xmalloc((size_t)*n * sizeof **out);
	cJSON_ArrayForEach(it, arr) {
		if (!is_number(it) || !isfinite(number_value(it)) || number_value(it) < 0) {
			free(*out);
			*out = NULL;
			return bad(err, errsz, "%s[%d]: not a time in seconds", what, k);
		}
		(*out)[k++] = number_value(it);
	}
	return 0;
}

/* metrics.passes: null, or [{"step_s":[...],"median_s":M}, ...]. */
static int passes_from_json(struct artifact_metrics *m, const cJSON *o, const char *pre, char *err, size_t errsz)
{
	static const char *const pass_keys[] = { "step_s", "median_s", NULL };
	const cJSON *arr, *it;
	char what[64];
	int i = 0;

	if (get_typed(o, pre, "passes", cJSON_IsArray, "an array", &arr, err, errsz) < 0)
		return -1;
	if (arr == NULL)
		return 0;
	m->n_passes = cJSON_GetArraySize(arr);
	m->passes = xcalloc((size_t)m->n_passes + 1, sizeof *m->passes);
	cJSON_ArrayForEach(it, arr) {
		struct artifact_pass *ps = &m->passes[i];
		const cJSON *steps;

		snprintf(what, sizeof what, "%spasses[%d].", pre, i);
		if (!cJSON_IsObject(it))
			return bad(err, errsz, "%spasses[%d]: not an object", pre, i);
		if (check_keys(it, what, pass_keys, err, errsz) < 0 ||
		    get_measure(it, what, "median_s", &ps->median_s, err, errsz) < 0 ||
		    get_typed(it, what, "step_s", cJSON_IsArray, "an array", &steps, err, errsz) < 0)
			return -1;
		snprintf(what, sizeof what, "%spasses[%d].step_s", pre, i);
		if (steps && step_list(steps, what, &ps->step_s, &ps->n, err, errsz) < 0)
			return -1;
		i++;
	}
	return 0;
}

static int metrics_from_json(struct artifact_metrics *m, const cJSON *o, const char *pre, char *err, size_t errsz)
{
	metrics_init(m);
	if (o == NULL)
		return 0;
	if (get_measure(o, pre, "vram_plan_mb", &m->vram_plan_mb, err, errsz) < 0 ||
	    get_measure(o, pre, "host_weights_mb", &m->host_weights_mb, err, errsz) < 0 ||
	    get_measure(o, pre, "host_checkpoints_mb", &m->host_checkpoints_mb, err, errsz) < 0 ||
	    get_measure(o, pre, "process_peak_rss_mb", &m->process_peak_rss_mb, err, errsz) < 0 ||
	    get_measure(o, pre, "vram_peak_mb", &m->vram_peak_mb, err, errsz) < 0 ||
	    get_measure(o, pre, "vram_avg_mb", &m->vram_avg_mb, err, errsz) < 0 ||
	    get_measure(o, pre, "s_per_step", &m->s_per_step, err, errsz) < 0 ||
	    get_measure(o, pre, "s_per_step_min", &m->s_per_step_min, err, errsz) < 0 ||
	    get_measure(o, pre, "s_per_step_max", &m->s_per_step_max, err, errsz) < 0 ||
	    get_measure(o, pre, "tokens_per_s", &m->tokens_per_s, err, errsz) < 0 ||
	    get_count(o, pre, "steps_measured", &m->steps_measured, err, errsz) < 0 ||
	    get_count(o, pre, "warmup_steps", &m->warmup_steps, err, errsz) < 0 ||
	    get_num(o, pre, "loss_first", &m->loss_first, err, errsz) < 0 ||
	    get_num(o, pre, "loss_last", &m->loss_last, err, errsz) < 0 ||
	    get_measure(o, pre, "s_per_step_spread", &m->s_per_step_spread, err, errsz) < 0 ||
	    get_measure(o, pre, "s_per_step_mad", &m->s_per_step_mad, err, errsz) < 0 ||
	    get_flag(o, pre, "passes_agree", &m->passes_agree, err, errsz) < 0 ||
	    passes_from_json(m, o, pre, err, errsz) < 0) {
		artifact_metrics_free(m);
		return -1;
	}
	return 0;
}

/* The fields a child reports about its own environment. */
static int child_env_from_json(struct artifact_env *e, const cJSON *o, const char *pre, char *err, size_t errsz)
{
	if (o == NULL)
		return 0;
	if (get_str(o, pre, "gpu_name", &e->gpu_name, err, errsz) < 0 ||
	    get_measure(o, pre, "gpu_mem_mb", &e->gpu_mem_mb, err, errsz) < 0 ||
	    get_str(o, pre, "driver", &e->driver, err, errsz) < 0 ||
	    get_str(o, pre, "cuda_runtime", &e->cuda_runtime, err, errsz) < 0 ||
	    get_str(o, pre, "python", &e->python, err, errsz) < 0 ||
	    get_str(o, pre, "torch", &e->torch, err, errsz) < 0 ||
	    get_str(o, pre, "transformers", &e->transformers, err, errsz) < 0 ||
	    get_str(o, pre, "peft", &e->peft, err, errsz) < 0)
		return -1;
	return 0;
}

static int env_from_json(struct artifact_env *e, const cJSON *o, char *err, size_t errsz)
{
	const char *pre = "env.";

	env_init(e);
	if (o == NULL)
		return 0;
	if (get_str(o, pre, "hostname", &e->hostname, err, errsz) < 0 ||
	    get_str(o, pre, "os", &e->os, err, errsz) < 0 ||
	    get_str(o, pre, "kernel", &e->kernel, err, errsz) < 0 ||
	    get_str(o, pre, "cpu", &e->cpu, err, errsz) < 0 ||
	    get_num(o, pre, "host_mem_gb", &e->host_mem_gb, err, errsz) < 0 ||
	    get_str(o, pre, "poros_version", &e->poros_version, err, errsz) < 0 ||
	    get_str(o, pre, "git_sha", &e->git_sha, err, errsz) < 0 ||
	    get_str(o, pre, "weights", &e->weights, err, errsz) < 0 ||
	    get_str(o, pre, "cuda_visible_devices", &e->cuda_visible_devices, err, errsz) < 0 ||
	    get_str(o, pre, "backend", &e->backend, err, errsz) < 0 ||
	    get_str(o, pre, "device", &e->device, err, errsz) < 0 ||
	    get_count(o, pre, "ranks", &e->ranks, err, errsz) < 0 ||
	    child_env_from_json(e, o, pre, err, errsz) < 0) {
		env_free(e);
		return -1;
	}
	return 0;
}

static int stamp_from_json(const cJSON *o, const char *k, char *buf, size_t n, char *err, size_t errsz)
{
	char *s;

	buf[0] = '\0';
	if (get_str(o, "", k, &s, err, errsz) < 0)
		return -1;
	if (s == NULL)
		return 0;
	if (strlen(s) >= n) {
		free(s);
		return bad(err, errsz, "%s: too long for a timestamp", k);
	}
	strcpy(buf, s);
	free(s);
	return 0;
}

static int argv_from_json(struct artifact *a, const cJSON *o, char *err, size_t errsz)
{
	const cJSON *v, *it;
	int n = 0, i = 0;

	if (get_typed(o, "", "argv", cJSON_IsArray, "an array", &v, err, errsz) < 0)
		return -1;
	if (v == NULL)
		return 0;
	cJSON_ArrayForEach(it, v) {
		if (!cJSON_IsString(it))
			return bad(err, errsz, "argv[%d]: not a string", n);
		n++;
	}
	a->argv = xcalloc((size_t)n + 1, sizeof *a->argv);
	cJSON_ArrayForEach(it, v)
		a->argv[i++] = xstrdup(it->valuestring);
	a->argc = n;
	return 0;
}

/* The "status" value of an artifact or a trainer summary, or -1. */
static int status_from_json(const cJSON *status, char *err, size_t errsz)
{
	int st;

	if (!cJSON_IsString(status))
		return bad(err, errsz, "status: missing or not a string");
	st = artifact_status_from_name(status->valuestring);
	if (st < 0)
		return bad(err, errsz, "status: unknown \"%s\" (expected one of: ok, oom, error, skipped)",
		           status->valuestring);
	return st;
}

static int parity_from_json(struct artifact_parity *p, const cJSON *o, char *err, size_t errsz)
{
	const cJSON *v;

	p->loss_max_abs_delta = p->adapter_max_abs_delta = NAN;
	p->bitwise_exact = -1;
	if (o == NULL)
		return 0;
	if (get_num(o, "parity.", "loss_max_abs_delta", &p->loss_max_abs_delta, err, errsz) < 0 ||
	    get_num(o, "parity.", "adapter_max_abs_delta", &p->adapter_max_abs_delta, err, errsz) < 0)
		return -1;
	if (get_typed(o, "parity.", "bitwise_exact", cJSON_IsBool, "a boolean", &v, err, errsz) < 0)
		return -1;
	if (v != NULL)
		p->bitwise_exact = cJSON_IsTrue(v) ? 1 : 0;
	return 0;
}

/* config_hash as recorded (a writer of another version may have hashed
 * differently: it is compared, never recomputed), and the top-level
 * copies of method, model_id and precision, which must agree with the
 * cell when present. */
static int top_level_copies(struct artifact *a, const cJSON *obj, char *err, size_t errsz)
{
	const char *cell_value[3] = { method_names[a->cell.method], a->cell.model.model_id,
	                              precision_names[a->cell.precision] };
	static const char *const keys[3] = { "method", "model_id", "precision" };
	char *s;

	if (get_str(obj, "", "config_hash", &s, err, errsz) < 0)
		return -1;
	if (s != NULL) {
		int ok = strlen(s) == CELL_HASH_LEN && strncmp(s, "sha256:", 7) == 0 &&
		         strspn(s + 7, "0123456789abcdef") == 64;
		if (ok)
			strcpy(a->config_hash, s);
		free(s);
		if (!ok)
			return bad(err, errsz, "config_hash: not \"sha256:\" and 64 hex digits");
	}
	for (int i = 0; i < 3; i++) {
		if (get_str(obj, "", keys[i], &s, err, errsz) < 0)
			return -1;
		if (s != NULL && strcmp(s, cell_value[i]) != 0) {
			bad(err, errsz, "%s: \"%s\" differs from cell.%s%s \"%s\"", keys[i], s,
			    i == 1 ? "model." : "", keys[i], cell_value[i]);
			free(s);
			return -1;
		}
		free(s);
	}
	return 0;
}

int artifact_from_json(struct artifact *a, const cJSON *obj, char *err, size_t errsz)
{
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	const cJSON *cell = cJSON_GetObjectItemCaseSensitive(obj, "cell");
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(obj, "status");
	const cJSON *metrics, *parity, *env;
	char cell_err[256];
	int st;

	artifact_init(a);
	if (!cJSON_IsObject(obj))
		return bad(err, errsz, "not a JSON object");
	if (!cJSON_IsString(schema))
		return bad(err, errsz, "schema: missing (expected \"%s\")", ARTIFACT_SCHEMA);
	if (strcmp(schema->valuestring, ARTIFACT_SCHEMA) != 0)
		return bad(err, errsz, "schema: \"%s\" (expected \"%s\")", schema->valuestring, ARTIFACT_SCHEMA);
	if (check_keys(obj, "", artifact_keys, err, errsz) < 0 ||
	    check_keys(cJSON_GetObjectItemCaseSensitive(obj, "metrics"), "metrics.", metrics_keys, err, errsz) < 0 ||
	    check_keys(cJSON_GetObjectItemCaseSensitive(obj, "parity"), "parity.", parity_keys, err, errsz) < 0 ||
	    check_keys(cJSON_GetObjectItemCaseSensitive(obj, "env"), "env.", env_keys, err, errsz) < 0)
		return -1;
	st = status_from_json(status, err, errsz);
	if (st < 0)
		return -1;
	a->status = (enum artifact_status)st;
	if (!cJSON_IsObject(cell))
		return bad(err, errsz, "cell: missing or not an object");
	if (cell_from_json(&a->cell, cell, cell_err, sizeof cell_err) < 0) {
		memset(&a->cell, 0, sizeof a->cell);
		return bad(err, errsz, "cell.%s", cell_err);
	}
	if (get_str(obj, "", "cell_id", &a->cell_id, err, errsz) < 0)
		goto fail;
	if (a->cell_id == NULL)
		a->cell_id = xstrdup(a->cell.cell_id);
	else if (strcmp(a->cell_id, a->cell.cell_id) != 0) {
		bad(err, errsz, "cell_id: \"%s\" differs from cell.cell_id \"%s\"", a->cell_id, a->cell.cell_id);
		goto fail;
	}
	if (top_level_copies(a, obj, err, errsz) < 0)
		goto fail;
	if (get_str(obj, "", "error", &a->error, err, errsz) < 0 ||
	    get_obj(obj, "metrics", &metrics, err, errsz) < 0 ||
	    metrics_from_json(&a->metrics, metrics, "metrics.", err, errsz) < 0 ||
	    get_obj(obj, "parity", &parity, err, errsz) < 0 ||
	    parity_from_json(&a->parity, parity, err, errsz) < 0 ||
	    get_obj(obj, "env", &env, err, errsz) < 0 ||
	    env_from_json(&a->env, env, err, errsz) < 0 ||
	    stamp_from_json(obj, "started_at", a->started_at, sizeof a->started_at, err, errsz) < 0 ||
	    stamp_from_json(obj, "finished_at", a->finished_at, sizeof a->finished_at, err, errsz) < 0 ||
	    get_num(obj, "", "wall_s", &a->wall_s, err, errsz) < 0 ||
	    argv_from_json(a, obj, err, errsz) < 0 ||
	    get_str(obj, "", "log", &a->log, err, errsz) < 0 ||
	    get_str(obj, "", "run_dir", &a->run_dir, err, errsz) < 0)
		goto fail;
	return 0;
fail:
	artifact_free(a);
	return -1;
}

/* --- the trainer summary -------------------------------------------------- */

/* share/poros/schema/summary.schema.json's keys: what poros-train and the
 * Python arms print, and nothing else. */
static const char *const summary_keys[] = {
	"schema", "status", "error", "method", "mode", "backend", "steps", "warmup_steps", "steps_measured", "step_s",
	"s_per_step", "s_per_step_min", "s_per_step_max", "tokens_per_s", "vram_plan_mb", "host_weights_mb",
	"host_checkpoints_mb", "host_plan_mb", "host_breakdown_mb", "host_rss_at_plan_mb", "host_peak_rss_mb",
	"vram_peak_mb", "vram_avg_mb", "vram_breakdown_mb", "loss_first", "loss_last", "eval_loss", "eval_tokens", "weights", "run_dir", "events", "adapter", "config", "env", "ranks", NULL,
};
static const char *const summary_env_keys[] = {
	"gpu_name", "gpu_mem_mb", "driver", "cuda_runtime", "python", "torch", "transformers", "peft", NULL,
};

/* A string field that is null or one of names (NULL-terminated). */
static int get_name(const cJSON *o, const char *k, const char *const *names, const char *expected, char **out,
                    char *err, size_t errsz)
{
	if (get_str(o, "", k, out, err, errsz) < 0)
		return -1;
	for (const char *const *n = names; *out && *n; n++)
		if (strcmp(*out, *n) == 0)
			return 0;
	if (*out == NULL)
		return 0;
	bad(err, errsz, "%s: unknown \"%s\" (expected %s)", k, *out, expected);
	free(*out);
	*out = NULL;
	return -1;
}

/* The keys poros-arm does not take into the artifact, checked all the same:
 * a summary is well-formed as a whole or it is refused. */
static int summary_check_rest(const cJSON *summary, char *err, size_t errsz)
{
	static const char *const paths[] = { "run_dir", "events", "adapter", NULL };
	const cJSON *v, *it;
	char *s;
	double d;
	int n;

	if (get_str(summary, "", "method", &s, err, errsz) < 0)
		return -1;
	if (s != NULL && method_from_name(s) < 0) {
		bad(err, errsz, "method: unknown \"%s\"", s);
		free(s);
		return -1;
	}
	free(s);
	/* poros-train's schedule, or a Python arm's method again */
	if (get_str(summary, "", "mode", &s, err, errsz) < 0)
		return -1;
	if (s != NULL && strcmp(s, "blockwise") != 0 && strcmp(s, "resident") != 0 && method_from_name(s) < 0) {
		bad(err, errsz, "mode: unknown \"%s\"", s);
		free(s);
		return -1;
	}
	free(s);
	for (const char *const *k = paths; *k; k++)
		if (get_typed(summary, "", *k, cJSON_IsString, "a string", &v, err, errsz) < 0)
			return -1;
	if (get_count(summary, "", "steps", &n, err, errsz) < 0 || get_num(summary, "", "eval_loss", &d, err, errsz) < 0 ||
	    get_count(summary, "", "eval_tokens", &n, err, errsz) < 0)
		return -1;
	/* by purpose; which purposes there are is poros-train's (the schema lists them) */
	if (get_typed(summary, "", "vram_breakdown_mb", cJSON_IsObject, "an object", &v, err, errsz) < 0)
		return -1;
	cJSON_ArrayForEach(it, v) {
		if (get_measure(v, "vram_breakdown_mb.", it->string, &d, err, errsz) < 0)
			return -1;
	}
	return 0;
}

/* The summary's "step_s", its timed steps, as the one pass of m; then
 * every timing field from it (timing.h), so no arm's own statistic
 * reaches an artifact.  A summary of a run that timed steps must list
 * them, and its own s_per_step, when it gives one, must be their median. */
static int summary_pass(struct artifact_metrics *m, const cJSON *summary, int st, long long tokens_per_step,
                        char *err, size_t errsz)
{
	const cJSON *arr;
	struct artifact_pass ps = { 0, NULL, NAN };
	double reported = m->s_per_step;

	if (get_typed(summary, "", "step_s", cJSON_IsArray, "an array", &arr, err, errsz) < 0)
		return -1;
	if (arr == NULL) {
		if (st == STATUS_OK && m->steps_measured > 0)
			return bad(err, errsz, "step_s: missing (a run that timed %d steps must list their times)",
			           m->steps_measured);
		return 0;
	}
	if (step_list(arr, "step_s", &ps.step_s, &ps.n, err, errsz) < 0)
		return -1;
	if (m->steps_measured >= 0 && ps.n != m->steps_measured) {
		free(ps.step_s);
		return bad(err, errsz, "step_s: %d times for %d measured steps", ps.n, m->steps_measured);
	}
	ps.median_s = timing_median(ps.step_s, ps.n);
	if (isfinite(reported) && reported != ps.median_s) {
		free(ps.step_s);
		return bad(err, errsz, "s_per_step: %.9g is not the median of step_s (%.9g)", reported, ps.median_s);
	}
	m->passes = xmalloc(sizeof *m->passes);
	m->passes[0] = ps;
	m->n_passes = 1;
	timing_aggregate(m, tokens_per_step);
	return 0;
}

int artifact_apply_summary(struct artifact *a, const cJSON *summary, char *err, size_t errsz)
{
	static const char *const backends[] = { "cpu", "cuda", NULL };
	static const char *const weights_names[] = { "real", "synthetic", NULL };
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(summary, "schema");
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(summary, "status");
	const cJSON *env_obj;
	struct artifact_metrics m;
	struct artifact_env child;
	char *error = NULL, *weights = NULL, *backend = NULL;
	int st, ranks;

	if (!cJSON_IsObject(summary))
		return bad(err, errsz, "not a JSON object");
	if (!cJSON_IsString(schema) || strcmp(schema->valuestring, SUMMARY_SCHEMA) != 0)
		return bad(err, errsz, "schema: %s%s%s (expected \"%s\")", cJSON_IsString(schema) ? "\"" : "",
		           cJSON_IsString(schema) ? schema->valuestring : "missing",
		           cJSON_IsString(schema) ? "\"" : "", SUMMARY_SCHEMA);
	st = status_from_json(status, err, errsz);
	if (st < 0)
		return -1;
	if (check_keys(summary, "", summary_keys, err, errsz) < 0 ||
	    check_keys(cJSON_GetObjectItemCaseSensitive(summary, "env"), "env.", summary_env_keys, err, errsz) < 0 ||
	    summary_check_rest(summary, err, errsz) < 0)
		return -1;
	/* poros-train's configuration (its train_config.json): an object, or absent */
	if (cJSON_GetObjectItemCaseSensitive(summary, "config") &&
	    !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(summary, "config")))
		return bad(err, errsz, "config: not an object");
	if (metrics_from_json(&m, summary, "", err, errsz) < 0)
		return -1;
	if (summary_pass(&m, summary, st, have_cell(a) ? a->cell.tokens_per_step : -1, err, errsz) < 0) {
		artifact_metrics_free(&m);
		return -1;
	}
	env_init(&child);
	if (get_name(summary, "backend", backends, "cpu or cuda", &backend, err, errsz) < 0 ||
	    get_obj(summary, "env", &env_obj, err, errsz) < 0 ||
	    child_env_from_json(&child, env_obj, "env.", err, errsz) < 0 ||
	    get_name(summary, "weights", weights_names, "real or synthetic", &weights, err, errsz) < 0 ||
	    get_str(summary, "", "error", &error, err, errsz) < 0 ||
	    get_count(summary, "", "ranks", &ranks, err, errsz) < 0) {
		env_free(&child);
		free(weights);
		free(backend);
		artifact_metrics_free(&m);
		return -1;
	}
	if ((st == STATUS_OOM || st == STATUS_ERROR || st == STATUS_SKIPPED) && error == NULL)
		error = xasprintf("the child reported status %s without a reason", artifact_status_names[st]);

	/* Valid throughout: commit. */
	a->status = (enum artifact_status)st;
	free(a->error);
	a->error = error;
	if (st == STATUS_OK) {
		/* an ok run has no error; a note beside it is not one */
		free(a->error);
		a->error = NULL;
	}
	artifact_metrics_free(&a->metrics);
	a->metrics = m;
#define TAKE(f) free(a->env.f); a->env.f = child.f;
	TAKE(gpu_name) TAKE(driver) TAKE(cuda_runtime) TAKE(python) TAKE(torch) TAKE(transformers) TAKE(peft)
#undef TAKE
	a->env.gpu_mem_mb = child.gpu_mem_mb;
	a->env.ranks = ranks;
	free(a->env.weights);
	a->env.weights = weights;
	free(a->env.backend);
	a->env.backend = backend;
	/* the device that computed: the GPU, or for the CPU backend the host's CPU */
	artifact_set_str(&a->env.device, backend && strcmp(backend, "cpu") == 0 ? a->env.cpu : a->env.gpu_name);
	return 0;
}
