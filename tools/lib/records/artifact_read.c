/* tools/lib/records/artifact_read.c: a RunArtifact read back from JSON and a
 * trainer summary ("poros.summary/1") applied to one: the strict readers
 * of what other processes wrote, apart from the writer (artifact.c). */
#include "artifact.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact_int.h"
#include "cell_int.h"
#include "timing.h"
#include "util/util.h"

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

/* The table's keys of section (additionalProperties false): anything else
 * is a typo or another tool's record, and is refused by name. */
static int check_section_keys(const cJSON *o, const char *section, const char *prefix, char *err, size_t errsz)
{
	const cJSON *kid;

	if (!cJSON_IsObject(o))
		return 0;
	cJSON_ArrayForEach(kid, o) {
		int found = 0;
		for (int i = 0; i < artifact_field_count && !found; i++)
			found = field_in(&artifact_fields[i], section) && strcmp(kid->string, field_key(&artifact_fields[i])) == 0;
		if (!found)
			return bad(err, errsz, "%s%s: unknown field", prefix, kid->string);
	}
	return 0;
}

/* The keys of a list (NULL-terminated): a summary's, a pass's. */
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

/* Row f of a section (a number, count, flag, string or the passes) from
 * o into the struct at base; pre names the object in messages. */
static int field_from_json(const struct artifact_field *f, const cJSON *o, const char *pre, void *base, char *err,
                           size_t errsz)
{
	char *p = (char *)base + f->offset;
	const char *k = field_key(f);

	switch (f->kind) {
	case AK_STR: return get_str(o, pre, k, (char **)p, err, errsz);
	case AK_NUM:
	case AK_TIME:
		return f->flags & AF_NONNEG ? get_measure(o, pre, k, (double *)p, err, errsz)
		                            : get_num(o, pre, k, (double *)p, err, errsz);
	case AK_COUNT: return get_count(o, pre, k, (int *)p, err, errsz);
	case AK_FLAG: return get_flag(o, pre, k, (int *)p, err, errsz);
	case AK_PASSES: return passes_from_json(base, o, pre, err, errsz);
	default: return bad(err, errsz, "%s%s: no reader for its kind", pre, k);
	}
}

/* Every row of section from o (NULL: all null) into base; on failure
 * nothing is left allocated.  summary_env: only the rows a summary's env
 * gives (summary_key "env.<key>"), into a base already null. */
static int section_from_json(void *base, const char *section, const cJSON *o, const char *pre, int summary_env,
                             char *err, size_t errsz)
{
	if (!summary_env)
		section_null(base, section);
	if (o == NULL)
		return 0;
	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];

		if (!field_in(f, section))
			continue;
		if (summary_env && !(f->summary_key && strncmp(f->summary_key, "env.", 4) == 0))
			continue;
		if (field_from_json(f, o, pre, base, err, errsz) < 0) {
			section_free(base, section);
			return -1;
		}
	}
	return 0;
}

static int metrics_from_json(struct artifact_metrics *m, const cJSON *o, const char *pre, char *err, size_t errsz)
{
	return section_from_json(m, "metrics", o, pre, 0, err, errsz);
}

/* The fields a child reports about its own environment. */
static int child_env_from_json(struct artifact_env *e, const cJSON *o, const char *pre, char *err, size_t errsz)
{
	return section_from_json(e, "env", o, pre, 1, err, errsz);
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

/* config_hash as recorded: a writer of another version may have hashed
 * differently, so it is compared, never recomputed. */
static int hash_from_json(struct artifact *a, const cJSON *obj, char *err, size_t errsz)
{
	char *s;
	int ok;

	if (get_str(obj, "", "config_hash", &s, err, errsz) < 0)
		return -1;
	if (s == NULL)
		return 0;
	ok = strlen(s) == CELL_HASH_LEN && strncmp(s, "sha256:", 7) == 0 && strspn(s + 7, "0123456789abcdef") == 64;
	if (ok)
		strcpy(a->config_hash, s);
	free(s);
	return ok ? 0 : bad(err, errsz, "config_hash: not \"sha256:\" and 64 hex digits");
}

/* A top-level copy of a cell field (method, model_id, precision): when
 * present it must agree with the cell. */
static int copy_check(const struct artifact *a, const struct artifact_field *f, const cJSON *obj, char *err,
                      size_t errsz)
{
	const char *want = cell_copy_value(&a->cell, f->cell_path);
	char *s;
	int rc = 0;

	if (get_str(obj, "", f->path, &s, err, errsz) < 0)
		return -1;
	if (s != NULL && strcmp(s, want) != 0)
		rc = bad(err, errsz, "%s: \"%s\" differs from cell.%s \"%s\"", f->path, s, f->cell_path, want);
	free(s);
	return rc;
}

/* cell_id: the cell's when absent, and equal to it when present. */
static int cell_id_from_json(struct artifact *a, const cJSON *obj, char *err, size_t errsz)
{
	if (get_str(obj, "", "cell_id", &a->cell_id, err, errsz) < 0)
		return -1;
	if (a->cell_id == NULL)
		a->cell_id = xstrdup(a->cell.cell_id);
	else if (strcmp(a->cell_id, a->cell.cell_id) != 0)
		return bad(err, errsz, "cell_id: \"%s\" differs from cell.cell_id \"%s\"", a->cell_id, a->cell.cell_id);
	return 0;
}

/* A top-level row after schema, status and cell (read first: the rest is
 * checked against them). */
static int top_from_json(struct artifact *a, const struct artifact_field *f, const cJSON *obj, char *err,
                         size_t errsz)
{
	char *p = (char *)a + f->offset;
	char pre[32];
	const cJSON *o;

	switch (f->kind) {
	case AK_CONST: case AK_STATUS: case AK_CELL: return 0;
	case AK_HASH: return hash_from_json(a, obj, err, errsz);
	case AK_CELL_COPY: return copy_check(a, f, obj, err, errsz);
	case AK_STAMP: return stamp_from_json(obj, f->path, p, sizeof a->started_at, err, errsz);
	case AK_ARGV: return argv_from_json(a, obj, err, errsz);
	case AK_OBJECT:
		snprintf(pre, sizeof pre, "%s.", f->path);
		if (get_obj(obj, f->path, &o, err, errsz) < 0)
			return -1;
		return section_from_json(p, f->path, o, pre, 0, err, errsz);
	case AK_STR:
		if (f->offset == offsetof(struct artifact, cell_id))
			return cell_id_from_json(a, obj, err, errsz);
		return field_from_json(f, obj, "", a, err, errsz);
	default: return field_from_json(f, obj, "", a, err, errsz);
	}
}

int artifact_from_json(struct artifact *a, const cJSON *obj, char *err, size_t errsz)
{
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	const cJSON *cell = cJSON_GetObjectItemCaseSensitive(obj, "cell");
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(obj, "status");
	char cell_err[256];
	int st;

	artifact_init(a);
	if (!cJSON_IsObject(obj))
		return bad(err, errsz, "not a JSON object");
	if (!cJSON_IsString(schema))
		return bad(err, errsz, "schema: missing (expected \"%s\")", ARTIFACT_SCHEMA);
	if (strcmp(schema->valuestring, ARTIFACT_SCHEMA) != 0)
		return bad(err, errsz, "schema: \"%s\" (expected \"%s\")", schema->valuestring, ARTIFACT_SCHEMA);
	if (check_section_keys(obj, "", "", err, errsz) < 0)
		return -1;
	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];
		char pre[32];

		snprintf(pre, sizeof pre, "%s.", f->path);
		if (f->kind == AK_OBJECT &&
		    check_section_keys(cJSON_GetObjectItemCaseSensitive(obj, f->path), f->path, pre, err, errsz) < 0)
			return -1;
	}
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
	for (int i = 0; i < artifact_field_count; i++)
		if (field_in(&artifact_fields[i], "") && top_from_json(a, &artifact_fields[i], obj, err, errsz) < 0) {
			artifact_free(a);
			return -1;
		}
	return 0;
}

/* --- the trainer summary -------------------------------------------------- */

/* The summary table's keys of section ("" or "env"): what poros-train and
 * the Python arms print, and nothing else. */
static int check_summary_keys(const cJSON *o, const char *section, const char *prefix, char *err, size_t errsz)
{
	const cJSON *kid;
	size_t n = strlen(section);

	if (!cJSON_IsObject(o))
		return 0;
	cJSON_ArrayForEach(kid, o) {
		char path[96];

		snprintf(path, sizeof path, "%s%s%s", section, n ? "." : "", kid->string);
		if (summary_field_find(path) == NULL || (n == 0 && strchr(kid->string, '.')))
			return bad(err, errsz, "%s%s: unknown field", prefix, kid->string);
	}
	return 0;
}

/* The summary's value of row f (weights, backend): null or one of the
 * row's names. */
static int get_name(const cJSON *o, const struct artifact_field *f, char **out, char *err, size_t errsz)
{
	const char *k = f->summary_key;

	if (get_str(o, "", k, out, err, errsz) < 0)
		return -1;
	if (*out == NULL || name_index(f->names, f->n_names, *out) >= 0)
		return 0;
	/* the tables name two values: "cpu or cuda" */
	bad(err, errsz, "%s: unknown \"%s\" (expected %s or %s)", k, *out, f->names[0], f->names[f->n_names - 1]);
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

/* The summary's env rows of child moved into e. */
static void take_child_env(struct artifact_env *e, struct artifact_env *child)
{
	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];
		char *to = (char *)e + f->offset, *from = (char *)child + f->offset;

		if (!field_in(f, "env") || !f->summary_key || strncmp(f->summary_key, "env.", 4) != 0)
			continue;
		if (f->kind == AK_STR) {
			free(*(char **)to);
			*(char **)to = *(char **)from;
			*(char **)from = NULL;
		} else {
			*(double *)to = *(double *)from;
		}
	}
}

int artifact_apply_summary(struct artifact *a, const cJSON *summary, char *err, size_t errsz)
{
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
	if (check_summary_keys(summary, "", "", err, errsz) < 0 ||
	    check_summary_keys(cJSON_GetObjectItemCaseSensitive(summary, "env"), "env", "env.", err, errsz) < 0 ||
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
	if (get_name(summary, artifact_field_find("env.backend"), &backend, err, errsz) < 0 ||
	    get_obj(summary, "env", &env_obj, err, errsz) < 0 ||
	    child_env_from_json(&child, env_obj, "env.", err, errsz) < 0 ||
	    get_name(summary, artifact_field_find("env.weights"), &weights, err, errsz) < 0 ||
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
	take_child_env(&a->env, &child);
	free(a->env.weights);
	a->env.weights = weights;
	free(a->env.backend);
	a->env.backend = backend;
	a->env.ranks = ranks; /* -1 (null): the Python arms do not say */
	/* the device that computed: the GPU, or for the CPU backend the host's CPU */
	artifact_set_str(&a->env.device, backend && strcmp(backend, "cpu") == 0 ? a->env.cpu : a->env.gpu_name);
	return 0;
}
