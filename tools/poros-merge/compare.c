/* tools/poros-merge/compare.c: --compare A B, cell by cell: each side's
 * s/step, tokens/s and VRAM peak, the delta and the ratio B/A, whether
 * the ratio is inside the measured spread, and warnings where the two
 * sides did not measure the same thing. */
#include "merge.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "util/util.h"

#define COMPARE_SCHEMA "poros.compare/1"

struct metric_def {
	const char *key;   /* JSON key, and the metric's name in artifacts */
	const char *title; /* Markdown column */
	const char *cpu_title; /* its name when both runs ran on the CPU backend (NULL: the same) */
	size_t off;        /* in struct artifact_metrics */
	int timed;         /* its spread is s/step's (tokens/s is tokens_per_step / s/step) */
};

static const struct metric_def metrics[] = {
	{ "s_per_step", "s/step", NULL, offsetof(struct artifact_metrics, s_per_step), 1 },
	{ "tokens_per_s", "tokens/s", NULL, offsetof(struct artifact_metrics, tokens_per_s), 1 },
	/* a CPU run's allocator holds host memory */
	{ "vram_peak_mb", "VRAM peak MiB", "host alloc peak MiB", offsetof(struct artifact_metrics, vram_peak_mb), 0 },
};
#define N_METRICS (sizeof metrics / sizeof metrics[0])

/* The environment fields whose difference makes two runs hard to compare:
 * the GPU and its software, the versions of what ran, the commit and the
 * weights.  Comparing two commits is often the point: the warning says
 * so, it does not refuse.  The host name is left out. */
static const struct {
	const char *name;
	size_t off;
} env_fields[] = {
	{ "gpu_name", offsetof(struct artifact_env, gpu_name) },
	{ "driver", offsetof(struct artifact_env, driver) },
	{ "cuda_runtime", offsetof(struct artifact_env, cuda_runtime) },
	{ "cpu", offsetof(struct artifact_env, cpu) },
	{ "poros_version", offsetof(struct artifact_env, poros_version) },
	{ "python", offsetof(struct artifact_env, python) },
	{ "torch", offsetof(struct artifact_env, torch) },
	{ "transformers", offsetof(struct artifact_env, transformers) },
	{ "peft", offsetof(struct artifact_env, peft) },
	{ "git_sha", offsetof(struct artifact_env, git_sha) },
	{ "weights", offsetof(struct artifact_env, weights) },
};

static double metric_of(const struct result_entry *e, const struct metric_def *m)
{
	if (e == NULL)
		return NAN;
	return *(const double *)((const char *)&e->art.metrics + m->off);
}

static const char *env_str(const struct artifact_env *env, size_t off)
{
	return *(char *const *)((const char *)env + off);
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The distinct values of one env field over a run, sorted, "a, b"; "null"
 * when no artifact has one. */
static void env_values(struct sbuf *out, const struct result_set *s, size_t off)
{
	const char **v = xcalloc((size_t)s->n + 1, sizeof *v);
	int n = 0;

	for (int i = 0; i < s->n; i++) {
		const char *x = env_str(&s->e[i].art.env, off);
		if (x != NULL)
			v[n++] = x;
	}
	if (n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(v, (size_t)n, sizeof *v, by_str);
	if (n == 0)
		sb_puts(out, "null");
	for (int i = 0; i < n; i++) {
		if (i > 0 && strcmp(v[i], v[i - 1]) == 0)
			continue;
		if (out->len > 0)
			sb_puts(out, ", ");
		sb_printf(out, "\"%s\"", v[i]);
	}
	free(v);
}

/* True when every artifact of s ran on the CPU backend. */
static int all_cpu(const struct result_set *s)
{
	for (int i = 0; i < s->n; i++)
		if (s->e[i].art.env.backend == NULL || strcmp(s->e[i].art.env.backend, "cpu") != 0)
			return 0;
	return s->n > 0;
}

static const char *metric_title(const struct metric_def *m, int cpu)
{
	return cpu && m->cpu_title ? m->cpu_title : m->title;
}

/* "gpu_name: A "x", B "y"; ..." or an empty string when they agree.  A
 * field that one run never probed (null throughout: an arm that does not
 * report it) says nothing about a difference and is left out. */
static void env_differences(struct sbuf *why, const struct result_set *a, const struct result_set *b)
{
	for (size_t f = 0; f < sizeof env_fields / sizeof env_fields[0]; f++) {
		struct sbuf va, vb;
		sb_init(&va);
		sb_init(&vb);
		env_values(&va, a, env_fields[f].off);
		env_values(&vb, b, env_fields[f].off);
		if (strcmp(va.s, "null") != 0 && strcmp(vb.s, "null") != 0 && strcmp(va.s, vb.s) != 0)
			sb_printf(why, "%s%s: A %s, B %s", why->len ? "; " : "", env_fields[f].name, va.s, vb.s);
		sb_free(&va);
		sb_free(&vb);
	}
}

/* --- one row -------------------------------------------------------------- */

/* The verdict on a timed metric's ratio: the two sides' s/step spreads
 * (min..max over the measured passes or steps) overlap, or they do not. */
enum spread { SPREAD_NONE, SPREAD_NOISE, SPREAD_SIGNIFICANT };

static enum spread spread_of(const struct metric_def *m, const struct result_entry *ea, const struct result_entry *eb)
{
	const struct artifact_metrics *a, *b;

	if (!m->timed || ea == NULL || eb == NULL)
		return SPREAD_NONE;
	a = &ea->art.metrics;
	b = &eb->art.metrics;
	if (isnan(a->s_per_step_min) || isnan(a->s_per_step_max) || isnan(b->s_per_step_min) ||
	    isnan(b->s_per_step_max))
		return SPREAD_NONE;
	return a->s_per_step_min <= b->s_per_step_max && b->s_per_step_min <= a->s_per_step_max ? SPREAD_NOISE
	                                                                                        : SPREAD_SIGNIFICANT;
}

static const char *spread_note(const struct metric_def *m, enum spread sp)
{
	if (!m->timed)
		return "";
	return sp == SPREAD_NOISE ? " (noise)" : sp == SPREAD_NONE ? " (no spread)" : "";
}

static double ratio_of(double va, double vb)
{
	/* A ratio to zero is no ratio: null, not inf. */
	return va != 0 ? vb / va : NAN;
}

/* The fields at which the two cells' configurations differ (their
 * config_hash differs), comma separated; "" when they agree or a side is
 * missing. */
static void config_diff(char *out, size_t n, const struct result_entry *ea, const struct result_entry *eb)
{
	cJSON *ca, *cb;
	char ha[CELL_HASH_LEN + 1], hb[CELL_HASH_LEN + 1];

	out[0] = '\0';
	if (ea == NULL || eb == NULL)
		return;
	cell_config_hash(ha, &ea->art.cell);
	cell_config_hash(hb, &eb->art.cell);
	if (strcmp(ha, hb) == 0)
		return;
	ca = cell_config_json(&ea->art.cell);
	cb = cell_config_json(&eb->art.cell);
	cell_config_diff(out, n, ca, cb);
	cJSON_Delete(ca);
	cJSON_Delete(cb);
}

static cJSON *status_json(const struct result_entry *e)
{
	return e ? cJSON_CreateString(artifact_status_names[e->art.status]) : cJSON_CreateNull();
}

static cJSON *row_json(const char *cell_id, const struct result_entry *ea, const struct result_entry *eb,
                       const char *diff)
{
	cJSON *o = cJSON_CreateObject(), *fields = cJSON_CreateArray();
	char *list = xstrdup(diff), *save = NULL;

	cJSON_AddStringToObject(o, "schema", COMPARE_SCHEMA);
	cJSON_AddStringToObject(o, "cell_id", cell_id);
	cJSON_AddStringToObject(o, "in", ea && eb ? "both" : ea ? "a" : "b");
	cJSON_AddItemToObject(o, "status_a", status_json(ea));
	cJSON_AddItemToObject(o, "status_b", status_json(eb));
	for (char *f = strtok_r(list, ", ", &save); f; f = strtok_r(NULL, ", ", &save))
		cJSON_AddItemToArray(fields, cJSON_CreateString(f));
	free(list);
	cJSON_AddItemToObject(o, "config_differs", fields);
	for (size_t m = 0; m < N_METRICS; m++) {
		double va = metric_of(ea, &metrics[m]), vb = metric_of(eb, &metrics[m]);
		enum spread sp = spread_of(&metrics[m], ea, eb);
		cJSON *mo = cJSON_CreateObject();
		cJSON_AddItemToObject(mo, "a", json_number_or_null(va));
		cJSON_AddItemToObject(mo, "b", json_number_or_null(vb));
		cJSON_AddItemToObject(mo, "delta", json_number_or_null(vb - va));
		cJSON_AddItemToObject(mo, "ratio", json_number_or_null(ratio_of(va, vb)));
		/* true: inside the spread; false: outside; null: no spread measured. */
		cJSON_AddItemToObject(mo, "noise", sp == SPREAD_NONE ? cJSON_CreateNull() : cJSON_CreateBool(sp == SPREAD_NOISE));
		cJSON_AddItemToObject(o, metrics[m].key, mo);
	}
	return o;
}

/* --- tables --------------------------------------------------------------- */

static void md_header(struct sbuf *md, const char *name_a, const char *name_b, const char *env_diff,
                      const struct sbuf *cell_warnings, int cpu)
{
	sb_puts(md, "Comparing A = ");
	sb_md(md, name_a);
	sb_puts(md, " with B = ");
	sb_md(md, name_b);
	sb_puts(md, " (delta = B - A, ratio = B / A; \"noise\": inside the two runs' s/step spread).\n\n");
	if (*env_diff) {
		sb_puts(md, "> **Warning:** the environments differ: ");
		sb_md(md, env_diff);
		sb_puts(md, "\n\n");
	}
	if (cell_warnings->len > 0)
		sb_puts(md, cell_warnings->s);
	sb_puts(md, "| Cell | Status A | Status B |");
	for (size_t m = 0; m < N_METRICS; m++)
		sb_printf(md, " %s A | %s B | delta | B/A |", metric_title(&metrics[m], cpu), metric_title(&metrics[m], cpu));
	sb_puts(md, "\n|---|---|---|");
	for (size_t m = 0; m < N_METRICS; m++)
		sb_puts(md, "---:|---:|---:|---:|");
	sb_puts(md, "\n");
}

static void md_row(struct sbuf *md, const char *cell_id, const struct result_entry *ea,
                   const struct result_entry *eb)
{
	char num[32];

	sb_puts(md, "| ");
	sb_md(md, cell_id);
	sb_printf(md, " | %s | %s |", ea ? artifact_status_names[ea->art.status] : "only in B",
	          eb ? artifact_status_names[eb->art.status] : "only in A");
	for (size_t m = 0; m < N_METRICS; m++) {
		double va = metric_of(ea, &metrics[m]), vb = metric_of(eb, &metrics[m]);
		double d = vb - va, r = ratio_of(va, vb);
		sb_printf(md, " %s |", fmt_num(num, sizeof num, va));
		sb_printf(md, " %s |", fmt_num(num, sizeof num, vb));
		sb_printf(md, " %s%s |", d > 0 ? "+" : "", fmt_num(num, sizeof num, d));
		sb_printf(md, " %s%s |", fmt_num(num, sizeof num, r),
		          isnan(r) ? "" : spread_note(&metrics[m], spread_of(&metrics[m], ea, eb)));
	}
	sb_puts(md, "\n");
}

/* The plain table: every cell's text first, then the columns padded to
 * their widest entry. */
#define TABLE_COLS (3 + 3 * N_METRICS)

struct table {
	char **cell;   /* rows x TABLE_COLS */
	int rows;
};

static void table_add(struct table *t, char *const row[TABLE_COLS])
{
	t->cell = xrealloc(t->cell, (size_t)(t->rows + 1) * TABLE_COLS * sizeof *t->cell);
	for (int c = 0; c < (int)TABLE_COLS; c++)
		t->cell[t->rows * TABLE_COLS + c] = row[c];
	t->rows++;
}

static void table_header(struct table *t, int cpu)
{
	char *row[TABLE_COLS];
	int c = 0;

	row[c++] = xstrdup("cell");
	row[c++] = xstrdup("A");
	row[c++] = xstrdup("B");
	for (size_t m = 0; m < N_METRICS; m++) {
		row[c++] = xasprintf("%s A", metric_title(&metrics[m], cpu));
		row[c++] = xasprintf("%s B", metric_title(&metrics[m], cpu));
		row[c++] = xstrdup("B/A");
	}
	table_add(t, row);
}

static void table_row(struct table *t, const char *cell_id, const struct result_entry *ea,
                      const struct result_entry *eb)
{
	char *row[TABLE_COLS], num[32];
	int c = 0;

	row[c++] = xstrdup(cell_id);
	row[c++] = xstrdup(ea ? artifact_status_names[ea->art.status] : "-");
	row[c++] = xstrdup(eb ? artifact_status_names[eb->art.status] : "-");
	for (size_t m = 0; m < N_METRICS; m++) {
		double va = metric_of(ea, &metrics[m]), vb = metric_of(eb, &metrics[m]), r = ratio_of(va, vb);
		row[c++] = xstrdup(fmt_num(num, sizeof num, va));
		row[c++] = xstrdup(fmt_num(num, sizeof num, vb));
		row[c++] = xasprintf("%s%s", fmt_num(num, sizeof num, r),
		                     isnan(r) ? "" : spread_note(&metrics[m], spread_of(&metrics[m], ea, eb)));
	}
	table_add(t, row);
}

static void table_print(struct sbuf *out, struct table *t)
{
	size_t width[TABLE_COLS] = { 0 };

	for (int r = 0; r < t->rows; r++)
		for (int c = 0; c < (int)TABLE_COLS; c++) {
			size_t w = strlen(t->cell[r * TABLE_COLS + c]);
			if (w > width[c])
				width[c] = w;
		}
	for (int r = 0; r < t->rows; r++) {
		for (int c = 0; c < (int)TABLE_COLS; c++) {
			const char *s = t->cell[r * TABLE_COLS + c];
			/* The cell id and statuses left-aligned, numbers right-aligned. */
			if (c < 3)
				sb_printf(out, "%s%-*s", c ? "  " : "", c + 1 < (int)TABLE_COLS ? (int)width[c] : 0, s);
			else
				sb_printf(out, "  %*s", (int)width[c], s);
			free(t->cell[r * TABLE_COLS + c]);
		}
		sb_puts(out, "\n");
	}
	free(t->cell);
	t->cell = NULL;
	t->rows = 0;
}

/* --- the comparison ------------------------------------------------------- */

/* Warns on stderr for one cell whose configurations differ, and keeps the
 * line for the Markdown caption. */
static void warn_config(struct sbuf *md_warnings, const char *cell_id, const char *diff)
{
	warnmsg("warning: %s: the configurations differ (%s): its ratios compare different measurements", cell_id,
	        diff);
	sb_puts(md_warnings, "> **Warning:** ");
	sb_md(md_warnings, cell_id);
	sb_puts(md_warnings, ": the configurations differ: ");
	sb_md(md_warnings, diff);
	sb_puts(md_warnings, "\n\n");
}

struct pair {
	const char *cell_id;
	const struct result_entry *a, *b;
	char diff[512];
};

int compare_write(FILE *out, const struct result_set *a, const struct result_set *b, const char *name_a,
                  const char *name_b, enum compare_format format)
{
	struct sbuf env_diff, md, md_warnings;
	struct pair *pairs = xcalloc((size_t)a->n + (size_t)b->n + 1, sizeof *pairs);
	struct table table = { NULL, 0 };
	int n = 0, rc = 0, cpu = all_cpu(a) && all_cpu(b);

	sb_init(&env_diff);
	sb_init(&md);
	sb_init(&md_warnings);
	env_differences(&env_diff, a, b);
	if (env_diff.len > 0)
		warnmsg("warning: the two runs' environments differ: %s", env_diff.s);
	/* A's cells in A's order (its spec's, when it has one), then the cells only B has. */
	for (int i = 0; i < a->n; i++)
		pairs[n++] = (struct pair){ a->e[i].art.cell_id, &a->e[i], results_find(b, a->e[i].art.cell_id), "" };
	for (int i = 0; i < b->n; i++)
		if (results_find(a, b->e[i].art.cell_id) == NULL)
			pairs[n++] = (struct pair){ b->e[i].art.cell_id, NULL, &b->e[i], "" };
	for (int i = 0; i < n; i++) {
		config_diff(pairs[i].diff, sizeof pairs[i].diff, pairs[i].a, pairs[i].b);
		if (pairs[i].diff[0])
			warn_config(&md_warnings, pairs[i].cell_id, pairs[i].diff);
	}
	if (format == COMPARE_MD)
		md_header(&md, name_a, name_b, env_diff.s, &md_warnings, cpu);
	if (format == COMPARE_TABLE)
		table_header(&table, cpu);
	for (int i = 0; i < n && rc == 0; i++) {
		if (format == COMPARE_MD) {
			md_row(&md, pairs[i].cell_id, pairs[i].a, pairs[i].b);
		} else if (format == COMPARE_TABLE) {
			table_row(&table, pairs[i].cell_id, pairs[i].a, pairs[i].b);
		} else {
			cJSON *row = row_json(pairs[i].cell_id, pairs[i].a, pairs[i].b, pairs[i].diff);
			rc = jsonl_write(out, row);
			cJSON_Delete(row);
		}
	}
	if (format == COMPARE_TABLE) {
		sb_printf(&md, "A = %s, B = %s (ratio B/A; noise: inside both runs' s/step spread)\n", name_a, name_b);
		table_print(&md, &table);
	}
	if (rc == 0 && format != COMPARE_JSONL && fwrite(md.s, 1, md.len, out) != md.len)
		rc = -1;
	free(pairs);
	sb_free(&md);
	sb_free(&md_warnings);
	sb_free(&env_diff);
	return rc;
}
