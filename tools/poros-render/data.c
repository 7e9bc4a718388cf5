/* tools/poros-render/data.c: the report's inputs, sorted into models and
 * parity rows. */
#include "render.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/records.h"
#include "util/util.h"

void report_init(struct report *r)
{
	memset(r, 0, sizeof *r);
	results_init(&r->results);
}

void report_free(struct report *r)
{
	for (int i = 0; i < r->n_models; i++)
		free(r->models[i].rows);
	free(r->models);
	for (int i = 0; i < r->n_parity; i++)
		parity_free(&r->parity[i]);
	free(r->parity);
	free(r->parity_rows);
	strmap_free(&r->model_index);
	strmap_free(&r->parity_index);
	for (int i = 0; i < r->n_missing; i++)
		free(r->missing[i]);
	free(r->missing);
	for (int i = 0; i < r->n_ignored; i++) {
		free(r->ignored[i].source);
		free(r->ignored[i].cell_id);
		free(r->ignored[i].why);
	}
	free(r->ignored);
	cJSON_Delete(r->spec);
	results_free(&r->results);
	memset(r, 0, sizeof *r);
}

/* Two records are about the same pair when their labels match, or, for
 * unlabelled records, when they compared the same two directories: the
 * key says which ("\001" cannot be in a label or a path from a record). */
static char *pair_key(const char *arch, const char *precision, const char *run_a, const char *run_b)
{
	if (arch)
		return xasprintf("L\001%s\001%s%s", arch, precision ? "+" : "-", precision ? precision : "");
	return xasprintf("R\001%s\001%s", run_a ? run_a : "", run_b ? run_b : "");
}

static int parity_add(struct report *r, const cJSON *obj, char *err, size_t errsz)
{
	struct parity p;
	char *key;
	int i;

	if (parity_from_json(&p, obj, err, errsz) < 0)
		return -1;
	key = pair_key(p.arch, p.precision, p.run_a, p.run_b);
	/* parity.jsonl is appended by each `poros parity` run: the last line of a pair wins. */
	if ((i = strmap_get(&r->parity_index, key)) >= 0) {
		parity_free(&r->parity[i]);
		r->parity[i] = p;
		free(key);
		return 0;
	}
	if ((r->n_parity & (r->n_parity - 1)) == 0) /* capacity: the next power of two */
		r->parity = xrealloc(r->parity, (size_t)(r->n_parity ? 2 * r->n_parity : 1) * sizeof *r->parity);
	strmap_put(&r->parity_index, key, r->n_parity);
	r->parity[r->n_parity++] = p;
	free(key);
	return 0;
}

/* "FILE" for a file of one artifact (line 0), else "FILE:LINE". */
static char *where(const char *source, long line)
{
	return line > 0 ? xasprintf("%s:%ld", source, line) : xstrdup(source);
}

static void ignore(struct report *r, char *source, const char *cell_id, char *why)
{
	if ((r->n_ignored & (r->n_ignored - 1)) == 0)
		r->ignored = xrealloc(r->ignored, (size_t)(r->n_ignored ? 2 * r->n_ignored : 1) * sizeof *r->ignored);
	r->ignored[r->n_ignored].source = source;
	r->ignored[r->n_ignored].cell_id = xstrdup(cell_id);
	r->ignored[r->n_ignored++].why = why;
}

/* Why the artifact a does not measure the spec's cell as it is now, or
 * NULL when it does.  Its recorded config_hash is compared with the spec's
 * and with the hash of the cell it carries (as poros-merge --spec does). */
static char *not_current(const struct report *r, const struct artifact *a)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(r->spec, "spec_id");
	const cJSON *cells = cJSON_GetObjectItemCaseSensitive(r->spec, "cells"), *c;
	const cJSON *want = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->spec, "config_hashes"),
	                                                     a->cell_id);
	char hash[CELL_HASH_LEN + 1];
	int in_spec = 0;

	if (cJSON_IsString(id) && a->cell.spec_id && strcmp(id->valuestring, a->cell.spec_id) != 0)
		return xasprintf("other spec (spec_id \"%s\", not \"%s\")", a->cell.spec_id, id->valuestring);
	cJSON_ArrayForEach(c, cells)
		in_spec |= cJSON_IsString(c) && strcmp(c->valuestring, a->cell_id) == 0;
	if (!in_spec)
		return xstrdup("not a cell of the spec now");
	if (a->config_hash[0] == '\0' || !report_spec_hashes(r))
		return NULL; /* nothing to hold it against: the Artifacts list says so */
	if (!cJSON_IsString(want) || strcmp(want->valuestring, a->config_hash) != 0)
		return xasprintf("stale config_hash (%.19s..., the spec's is %.19s...): its cell's configuration changed",
		                 a->config_hash, cJSON_IsString(want) ? want->valuestring : "none");
	cell_config_hash(hash, &a->cell);
	if (strcmp(hash, a->config_hash) != 0)
		return xstrdup("its config_hash is not the hash of the cell it carries (another writer's)");
	return NULL;
}

/* True when obj is the run an artifact that finished at finished with
 * config_hash hash recorded: the same finished_at and config_hash. */
static int same_run(const cJSON *obj, const char *finished, const char *hash)
{
	const cJSON *fin = cJSON_GetObjectItemCaseSensitive(obj, "finished_at");
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "config_hash");

	return cJSON_IsString(fin) && strcmp(fin->valuestring, finished) == 0 &&
	       (cJSON_IsString(h) ? strcmp(h->valuestring, hash) == 0 : hash[0] == '\0');
}

/* An artifact into the results, unless the spec sets it aside; one that
 * replaces, or loses to, another run of its cell is named as superseded. */
static int artifact_add(struct report *r, const cJSON *obj, const char *source, long line, char *err, size_t errsz)
{
	const struct result_entry *had, *now;
	char *had_at = NULL, had_finished[40] = "", had_hash[CELL_HASH_LEN + 1] = "", *why;
	int rc;

	if (r->spec != NULL) {
		struct artifact a;

		artifact_init(&a);
		if (artifact_from_json(&a, obj, err, errsz) < 0)
			return -1;
		why = not_current(r, &a);
		if (why != NULL)
			ignore(r, where(source, line), a.cell_id, why);
		artifact_free(&a);
		if (why != NULL)
			return 0;
	}
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "cell_id");
		had = cJSON_IsString(id) ? results_find(&r->results, id->valuestring) : NULL;
	}
	if (had != NULL) {
		had_at = where(had->source, had->line);
		snprintf(had_finished, sizeof had_finished, "%s", had->art.finished_at);
		snprintf(had_hash, sizeof had_hash, "%s", had->art.config_hash);
	}
	rc = results_add(&r->results, obj, source, line, err, errsz);
	if (rc == 0 && had_at != NULL && same_run(obj, had_finished, had_hash)) {
		/* one run read twice (its results.jsonl line and its artifact file): not a second run */
		free(had_at);
		return 0;
	}
	if (rc == 0 && had_at != NULL) {
		char *at = where(source, line);

		now = results_find(&r->results, had->art.cell_id);
		if (now->line == line && strcmp(now->source, source) == 0) {
			ignore(r, had_at, now->art.cell_id,
			       xasprintf("superseded by a newer run of its cell (%s, finished %s)", at, now->art.finished_at));
			free(at);
		} else {
			const cJSON *fin = cJSON_GetObjectItemCaseSensitive(obj, "finished_at");
			ignore(r, at, now->art.cell_id,
			       xasprintf("superseded by a newer run of its cell (%s, finished %s; this one %s)", had_at,
			                 had_finished, cJSON_IsString(fin) ? fin->valuestring : "?"));
			free(had_at);
		}
		had_at = NULL;
	}
	free(had_at);
	return rc;
}

int report_record(void *ctx, const cJSON *obj, const char *source, long line, char *err, size_t errsz)
{
	struct report *r = ctx;
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(obj, "schema");

	if (cJSON_IsString(schema) && strcmp(schema->valuestring, PARITY_SCHEMA) == 0)
		return parity_add(r, obj, err, errsz);
	if (report_is_artifact(obj))
		return artifact_add(r, obj, source, line, err, errsz);
	snprintf(err, errsz, "neither a run artifact nor a parity record (schema %s%.60s%s)",
	         cJSON_IsString(schema) ? "\"" : "", cJSON_IsString(schema) ? schema->valuestring : "missing",
	         cJSON_IsString(schema) ? "\"" : "");
	return -1;
}

static int row_order(const void *pa, const void *pb)
{
	const struct result_entry *a = *(const struct result_entry *const *)pa;
	const struct result_entry *b = *(const struct result_entry *const *)pb;

	if (a->art.cell.method != b->art.cell.method)
		return (int)a->art.cell.method - (int)b->art.cell.method;
	if (a->art.cell.precision != b->art.cell.precision)
		return (int)a->art.cell.precision - (int)b->art.cell.precision;
	return strcmp(a->art.cell_id, b->art.cell_id);
}

static int model_of(struct report *r, const struct cell *c)
{
	int i = strmap_get(&r->model_index, c->model.arch);

	if (i >= 0)
		return i;
	if ((r->n_models & (r->n_models - 1)) == 0)
		r->models = xrealloc(r->models, (size_t)(r->n_models ? 2 * r->n_models : 1) * sizeof *r->models);
	memset(&r->models[r->n_models], 0, sizeof r->models[0]);
	r->models[r->n_models].cell = c;
	strmap_put(&r->model_index, c->model.arch, r->n_models);
	return r->n_models++;
}

static int artifact_parity_measured(const struct artifact *a)
{
	return a->parity.bitwise_exact >= 0 || !isnan(a->parity.loss_max_abs_delta) ||
	       !isnan(a->parity.adapter_max_abs_delta);
}

static struct parity_row *add_parity_row(struct report *r)
{
	if ((r->n_parity_rows & (r->n_parity_rows - 1)) == 0)
		r->parity_rows = xrealloc(r->parity_rows, (size_t)(r->n_parity_rows ? 2 * r->n_parity_rows : 1) *
		                                          sizeof *r->parity_rows);
	memset(&r->parity_rows[r->n_parity_rows], 0, sizeof r->parity_rows[0]);
	return &r->parity_rows[r->n_parity_rows++];
}

/* One row per model and precision of the results, whether measured or
 * not (the table shows "--" then, never 0), then the records that match
 * no such row. */
static void build_parity_rows(struct report *r)
{
	unsigned char *used = xcalloc((size_t)r->n_parity + 1, 1);

	for (int m = 0; m < r->n_models; m++) {
		const struct report_model *rm = &r->models[m];
		for (int p = 0; p < PRECISION_COUNT; p++) {
			struct parity_row *row = NULL;
			for (int i = 0; i < rm->n; i++) {
				const struct artifact *a = &rm->rows[i]->art;
				if ((int)a->cell.precision != p)
					continue;
				if (row == NULL) {
					row = add_parity_row(r);
					row->arch = rm->cell->model.arch;
					row->display_name = rm->cell->model.display_name;
					row->precision = precision_names[p];
				}
				if (row->artifact == NULL && artifact_parity_measured(a))
					row->artifact = a;
			}
			if (row == NULL)
				continue;
			{
				char *key = pair_key(row->arch, row->precision, NULL, NULL);
				int k = strmap_get(&r->parity_index, key);

				free(key);
				if (k >= 0) {
					row->record = &r->parity[k];
					used[k] = 1;
				}
			}
		}
	}
	for (int k = 0; k < r->n_parity; k++) {
		struct parity_row *row;
		if (used[k])
			continue;
		row = add_parity_row(r);
		row->arch = r->parity[k].arch;
		row->precision = r->parity[k].precision;
		row->record = &r->parity[k];
	}
	free(used);
}

void report_organize(struct report *r)
{
	int *model = xcalloc((size_t)r->results.n + 1, sizeof *model);

	/* count, then fill: each model's rows allocated once */
	for (int i = 0; i < r->results.n; i++) {
		model[i] = model_of(r, &r->results.e[i].art.cell);
		r->models[model[i]].n++;
	}
	for (int m = 0; m < r->n_models; m++) {
		r->models[m].rows = xcalloc((size_t)r->models[m].n, sizeof *r->models[m].rows);
		r->models[m].n = 0;
	}
	for (int i = 0; i < r->results.n; i++) {
		struct report_model *m = &r->models[model[i]];

		m->rows[m->n++] = &r->results.e[i];
	}
	free(model);
	for (int i = 0; i < r->n_models; i++)
		qsort(r->models[i].rows, (size_t)r->models[i].n, sizeof *r->models[i].rows, row_order);
	build_parity_rows(r);
}

/* The directory an artifact was read from: its file's, or "." for stdin. */
static char *source_dir(const char *source)
{
	const char *slash = strrchr(source, '/');

	if (source[0] == '<' || slash == NULL)
		return xstrdup(".");
	return xasprintf("%.*s", (int)(slash - source), source);
}

static const char *runs_from;

void set_runs_from(const char *dir)
{
	runs_from = dir;
}

int load_losses(const struct result_entry *e, const char *key, double *step, double *loss, int max)
{
	struct jsonl_reader rd;
	char *dir, *path;
	double *all_s = NULL, *all_l = NULL;
	long n = 0, cap = 0;
	cJSON *obj;
	FILE *f;
	int got, k = 0;

	if (e->art.run_dir == NULL || e->source == NULL || max <= 0)
		return 0;
	dir = runs_from ? xstrdup(runs_from) : source_dir(e->source);
	path = xasprintf("%s/%s/events.jsonl", dir, e->art.run_dir);
	free(dir);
	f = fopen(path, "r");
	free(path);
	if (f == NULL)
		return 0;
	jsonl_init(&rd, f, "events.jsonl");
	/* a bad line ends the curve where it is: the report is not a validator */
	while ((got = jsonl_next(&rd, &obj)) > 0) {
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(obj, "step");
		const cJSON *l = cJSON_GetObjectItemCaseSensitive(obj, key);

		if (cJSON_IsNumber(s) && cJSON_IsNumber(l) && isfinite(l->valuedouble)) {
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				all_s = xrealloc(all_s, (size_t)cap * sizeof *all_s);
				all_l = xrealloc(all_l, (size_t)cap * sizeof *all_l);
			}
			all_s[n] = s->valuedouble;
			all_l[n++] = l->valuedouble;
		}
		cJSON_Delete(obj);
	}
	jsonl_free(&rd);
	fclose(f);
	/* evenly thinned to max points, the first and the last kept */
	for (long i = 0; i < n && k < max; i++) {
		long pick = n <= max ? i : (long)((double)i * (double)(n - 1) / (double)(max - 1) + 0.5);

		if (n > max && i >= max)
			break;
		step[k] = all_s[pick];
		loss[k++] = all_l[pick];
	}
	free(all_s);
	free(all_l);
	return k;
}

int report_use_spec(struct report *r, const char *spec, char *err, size_t errsz)
{
	size_t len;
	char *text = read_whole_file(spec, &len);
	cJSON *root, *cells, *id;

	if (text == NULL) {
		set_error(err, errsz, "%s: %s", spec, strerror(errno));
		return -2;
	}
	root = cJSON_ParseWithLength(text, len);
	free(text);
	cells = root ? cJSON_GetObjectItemCaseSensitive(root, "cells") : NULL;
	if (!cJSON_IsArray(cells)) {
		cJSON_Delete(root);
		return set_error(err, errsz, "%s: not a spec.json of poros-expand (no \"cells\" list)", spec);
	}
	cJSON_ArrayForEach(id, cells) {
		if (!cJSON_IsString(id)) {
			cJSON_Delete(root);
			return set_error(err, errsz, "%s: \"cells\" holds a non-string", spec);
		}
	}
	r->spec = root;
	r->spec_path = spec;
	return 0;
}

int report_spec_hashes(const struct report *r)
{
	return cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(r->spec, "config_hashes"));
}

/* Where cell_id stands among the spec's cells (the spec's length when it
 * is not one). */
static int spec_index(const cJSON *cells, const char *cell_id)
{
	const cJSON *id;
	int i = 0;

	cJSON_ArrayForEach(id, cells) {
		if (strcmp(id->valuestring, cell_id) == 0)
			return i;
		i++;
	}
	return i;
}

static const cJSON *order_cells;

static int by_spec_order(const void *pa, const void *pb)
{
	int a = spec_index(order_cells, ((const struct result_entry *)pa)->art.cell_id);
	int b = spec_index(order_cells, ((const struct result_entry *)pb)->art.cell_id);

	return (a > b) - (a < b);
}

void report_spec_missing(struct report *r)
{
	const cJSON *cells = cJSON_GetObjectItemCaseSensitive(r->spec, "cells"), *id, *m;

	if (r->spec == NULL)
		return;
	/* the rows in spec order, each model named as the spec names it now (as poros-merge --spec) */
	order_cells = cells;
	if (r->results.n > 1)
		qsort(r->results.e, (size_t)r->results.n, sizeof *r->results.e, by_spec_order);
	order_cells = NULL;
	results_reindex(&r->results);
	cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(r->spec, "models")) {
		const cJSON *arch = cJSON_GetObjectItemCaseSensitive(m, "arch");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "display_name");

		if (!cJSON_IsString(arch) || !cJSON_IsString(name))
			continue;
		for (int i = 0; i < r->results.n; i++) {
			struct cell *c = &r->results.e[i].art.cell;

			if (c->model.arch && strcmp(c->model.arch, arch->valuestring) == 0 &&
			    (c->model.display_name == NULL || strcmp(c->model.display_name, name->valuestring) != 0)) {
				free(c->model.display_name);
				c->model.display_name = xstrdup(name->valuestring);
			}
		}
	}
	r->missing = xcalloc((size_t)cJSON_GetArraySize(cells) + 1, sizeof *r->missing);
	cJSON_ArrayForEach(id, cells) {
		r->spec_cells++;
		if (results_find(&r->results, id->valuestring) == NULL)
			r->missing[r->n_missing++] = xstrdup(id->valuestring);
	}
}

char *report_dir_spec(char *const *paths, int n)
{
	struct stat st;
	char *spec;

	if (n != 1 || stat(paths[0], &st) != 0 || !S_ISDIR(st.st_mode))
		return NULL;
	spec = xasprintf("%s/spec.json", paths[0]);
	if (stat(spec, &st) == 0 && S_ISREG(st.st_mode))
		return spec;
	free(spec);
	return NULL;
}
