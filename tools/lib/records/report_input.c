/* tools/lib/records/report_input.c: result files and artifact directories in, one
 * row per cell out (the latest finished artifact wins). */
#include "report.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util/util.h"

int iso_utc_parse(const char *s, double *out)
{
	struct tm tm;
	int y, mo, d, h, mi, sec, used = 0;
	double frac = 0.0;
	const char *p;
	time_t t;

	if (s == NULL || strlen(s) < 20 || !isdigit((unsigned char)s[0]))
		return -1;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 || used != 19)
		return -1;
	p = s + used;
	if (*p == '.') {
		double scale = 0.1;
		if (!isdigit((unsigned char)p[1]))
			return -1;
		for (p++; isdigit((unsigned char)*p); p++, scale /= 10)
			frac += (*p - '0') * scale;
	}
	if (strcmp(p, "Z") != 0)
		return -1;
	if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970)
		return -1;
	memset(&tm, 0, sizeof tm);
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*out = (double)t + frac;
	return 0;
}

/* --- the result set ------------------------------------------------------- */

void results_init(struct result_set *s)
{
	memset(s, 0, sizeof *s);
}

static void entry_free(struct result_entry *e)
{
	artifact_free(&e->art);
	cJSON_Delete(e->json);
	free(e->source);
	memset(e, 0, sizeof *e);
}

void results_free(struct result_set *s)
{
	for (int i = 0; i < s->n; i++)
		entry_free(&s->e[i]);
	free(s->e);
	free(s->slot);
	results_init(s);
}

unsigned long long report_hash(const char *s, unsigned long long h)
{
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The slot of cell_id: its row's, or the empty one where it would go. */
static int *slot_of(const struct result_set *s, const char *cell_id)
{
	size_t mask = (size_t)s->nslots - 1, i = (size_t)report_hash(cell_id, REPORT_HASH_INIT) & mask;

	while (s->slot[i] != 0 && strcmp(s->e[s->slot[i] - 1].art.cell_id, cell_id) != 0)
		i = (i + 1) & mask;
	return &s->slot[i];
}

static int find_index(const struct result_set *s, const char *cell_id)
{
	return s->nslots == 0 ? -1 : *slot_of(s, cell_id) - 1;
}

/* Room for one more row in the table (rehashed when it is half full). */
static void slots_reserve(struct result_set *s)
{
	if (2 * (s->n + 1) < s->nslots)
		return;
	free(s->slot);
	s->nslots = s->nslots ? 2 * s->nslots : 64;
	s->slot = xcalloc((size_t)s->nslots, sizeof *s->slot);
	for (int i = 0; i < s->n; i++)
		*slot_of(s, s->e[i].art.cell_id) = i + 1;
}

void results_reindex(struct result_set *s)
{
	if (s->nslots == 0)
		return;
	memset(s->slot, 0, (size_t)s->nslots * sizeof *s->slot);
	for (int i = 0; i < s->n; i++)
		*slot_of(s, s->e[i].art.cell_id) = i + 1;
}

const struct result_entry *results_find(const struct result_set *s, const char *cell_id)
{
	int i = find_index(s, cell_id);
	return i < 0 ? NULL : &s->e[i];
}

void strmap_init(struct strmap *m)
{
	memset(m, 0, sizeof *m);
}

void strmap_free(struct strmap *m)
{
	for (int i = 0; i < m->nslots; i++)
		free(m->key[i]);
	free(m->key);
	free(m->val);
	strmap_init(m);
}

static int strmap_slot(const struct strmap *m, const char *key)
{
	size_t mask = (size_t)m->nslots - 1, i = (size_t)report_hash(key, REPORT_HASH_INIT) & mask;

	while (m->key[i] != NULL && strcmp(m->key[i], key) != 0)
		i = (i + 1) & mask;
	return (int)i;
}

int strmap_get(const struct strmap *m, const char *key)
{
	int i;

	if (m->nslots == 0)
		return -1;
	i = strmap_slot(m, key);
	return m->key[i] ? m->val[i] : -1;
}

void strmap_put(struct strmap *m, const char *key, int val)
{
	int i;

	if (2 * (m->n + 1) >= m->nslots) {
		struct strmap old = *m;

		m->nslots = old.nslots ? 2 * old.nslots : 64;
		m->key = xcalloc((size_t)m->nslots, sizeof *m->key);
		m->val = xcalloc((size_t)m->nslots, sizeof *m->val);
		for (int k = 0; k < old.nslots; k++)
			if (old.key[k]) {
				int j = strmap_slot(m, old.key[k]);

				m->key[j] = old.key[k];
				m->val[j] = old.val[k];
			}
		free(old.key);
		free(old.val);
	}
	i = strmap_slot(m, key);
	if (m->key[i] == NULL) {
		m->key[i] = xstrdup(key);
		m->n++;
	}
	m->val[i] = val;
}

int results_add(struct result_set *s, const cJSON *obj, const char *source, long line, char *err, size_t errsz)
{
	struct result_entry e;
	struct result_entry *old;
	int i;

	memset(&e, 0, sizeof e);
	artifact_init(&e.art);
	if (artifact_from_json(&e.art, obj, err, errsz) < 0)
		return -1;
	if (e.art.finished_at[0] == '\0') {
		artifact_free(&e.art);
		return set_error(err, errsz, "finished_at: null (not a complete artifact)");
	}
	if (iso_utc_parse(e.art.finished_at, &e.finished) < 0) {
		set_error(err, errsz, "finished_at: not an ISO-8601 UTC time: \"%.40s\"", e.art.finished_at);
		artifact_free(&e.art);
		return -1;
	}
	i = find_index(s, e.art.cell_id);
	old = i < 0 ? NULL : &s->e[i];
	if (old != NULL && old->finished > e.finished) {
		artifact_free(&e.art);
		return 0; /* an older run of a cell we already have */
	}
	e.json = cJSON_Duplicate(obj, 1);
	if (e.json == NULL)
		die(EXIT_RUNTIME, "out of memory");
	e.source = xstrdup(source);
	e.line = line;
	if (old != NULL) {
		/* Keeps the row where the cell first appeared, so reruns do not reorder a report. */
		entry_free(old);
		*old = e;
		return 0;
	}
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->e = xrealloc(s->e, (size_t)s->cap * sizeof *s->e);
	}
	slots_reserve(s);
	s->e[s->n] = e;
	*slot_of(s, e.art.cell_id) = s->n + 1;
	s->n++;
	return 0;
}

int report_is_artifact(const cJSON *obj)
{
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	if (cJSON_IsString(schema))
		return strcmp(schema->valuestring, ARTIFACT_SCHEMA) == 0;
	return cJSON_GetObjectItemCaseSensitive(obj, "cell_id") != NULL;
}

int results_record(void *ctx, const cJSON *obj, const char *source, long line, char *err, size_t errsz)
{
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	if (!report_is_artifact(obj)) {
		if (cJSON_IsString(schema))
			return set_error(err, errsz, "not a run artifact (schema \"%.60s\")", schema->valuestring);
		return set_error(err, errsz, "not a run artifact (no schema)");
	}
	return results_add(ctx, obj, source, line, err, errsz);
}

/* --- inputs --------------------------------------------------------------- */

static void report_bad(const char *source, long line, const char *why, long *bad)
{
	if (line > 0)
		warnmsg("%s:%ld: skipped: %s", source, line, why);
	else
		warnmsg("%s: skipped: %s", source, why);
	(*bad)++;
}

static int read_jsonl(FILE *f, const char *name, report_record_fn fn, void *ctx, long *bad)
{
	struct jsonl_reader r;
	char err[512];
	cJSON *obj;
	int got, rc = 0;

	jsonl_init(&r, f, name);
	while ((got = jsonl_next(&r, &obj)) != 0) {
		if (got < 0) {
			if (ferror(f)) {
				warnmsg("%s: %s", name, r.err);
				rc = -1;
				break;
			}
			report_bad(name, r.line, r.err, bad);
			continue;
		}
		if (fn(ctx, obj, name, r.line, err, sizeof err) < 0)
			report_bad(name, r.line, err, bad);
		cJSON_Delete(obj);
	}
	jsonl_free(&r);
	return rc;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_json_name(const char *name)
{
	size_t n = strlen(name);
	/* Dot files are atomic_write's temporaries, never finished artifacts. */
	return name[0] != '.' && n > 5 && strcmp(name + n - 5, ".json") == 0;
}

static int read_dir(const char *dir, report_record_fn fn, void *ctx, long *bad)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char **names = NULL;
	size_t n = 0;
	int rc = 0;

	if (d == NULL) {
		warnsys("%s", dir);
		return -1;
	}
	while ((errno = 0, de = readdir(d)) != NULL) {
		if (!is_json_name(de->d_name))
			continue;
		names = xrealloc(names, (n + 1) * sizeof *names);
		names[n++] = xasprintf("%s/%s", dir, de->d_name);
	}
	if (errno != 0) {
		warnsys("%s", dir);
		rc = -1;
	}
	closedir(d);
	if (n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(names, n, sizeof *names, by_name);
	for (size_t i = 0; i < n && rc == 0; i++) {
		char err[512];
		struct stat st;
		cJSON *obj;

		if (stat(names[i], &st) == 0 && !S_ISREG(st.st_mode))
			continue;
		obj = json_read_file(names[i], err, sizeof err);
		if (obj == NULL) {
			/* err already names the file (and line:column for bad JSON). */
			warnmsg("%s (skipped)", err);
			(*bad)++;
			continue;
		}
		if (!cJSON_IsObject(obj))
			report_bad(names[i], 0, "not a JSON object", bad);
		else if (report_is_artifact(obj) && fn(ctx, obj, names[i], 0, err, sizeof err) < 0)
			report_bad(names[i], 0, err, bad);
		cJSON_Delete(obj);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

int report_read_path(const char *path, report_record_fn fn, void *ctx, long *bad)
{
	struct stat st;
	FILE *f;
	int rc;

	if (strcmp(path, "-") == 0)
		return read_jsonl(stdin, "<stdin>", fn, ctx, bad);
	if (stat(path, &st) < 0) {
		warnsys("%s", path);
		return -1;
	}
	if (S_ISDIR(st.st_mode))
		return read_dir(path, fn, ctx, bad);
	f = fopen(path, "r");
	if (f == NULL) {
		warnsys("%s", path);
		return -1;
	}
	rc = read_jsonl(f, path, fn, ctx, bad);
	fclose(f);
	return rc;
}
