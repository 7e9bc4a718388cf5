/* tools/poros-merge/compare.c: --compare A B, cell by cell: each side's
 * s/step, tokens/s and VRAM peak, the delta and the ratio B/A. */
#include "merge.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "util.h"

#define COMPARE_SCHEMA "poros.compare/1"

struct metric_def {
	const char *key;   /* JSON key, and the metric's name in artifacts */
	const char *title; /* Markdown column */
	size_t off;        /* in struct artifact_metrics */
};

static const struct metric_def metrics[] = {
	{ "s_per_step", "s/step", offsetof(struct artifact_metrics, s_per_step) },
	{ "tokens_per_s", "tokens/s", offsetof(struct artifact_metrics, tokens_per_s) },
	{ "vram_peak_mb", "VRAM peak MiB", offsetof(struct artifact_metrics, vram_peak_mb) },
};
#define N_METRICS (sizeof metrics / sizeof metrics[0])

/* The environment fields whose difference makes two runs hard to compare:
 * the GPU and its software, and the versions of what ran.  The host name
 * and git_sha are left out: comparing two machines or two commits is what
 * --compare is for. */
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

/* "gpu_name: A "x", B "y"; ..." or an empty string when they agree. */
static void env_differences(struct sbuf *why, const struct result_set *a, const struct result_set *b)
{
	for (size_t f = 0; f < sizeof env_fields / sizeof env_fields[0]; f++) {
		struct sbuf va, vb;
		sb_init(&va);
		sb_init(&vb);
		env_values(&va, a, env_fields[f].off);
		env_values(&vb, b, env_fields[f].off);
		if (strcmp(va.s, vb.s) != 0)
			sb_printf(why, "%s%s: A %s, B %s", why->len ? "; " : "", env_fields[f].name, va.s, vb.s);
		sb_free(&va);
		sb_free(&vb);
	}
}

static cJSON *status_json(const struct result_entry *e)
{
	return e ? cJSON_CreateString(artifact_status_names[e->art.status]) : cJSON_CreateNull();
}

static cJSON *row_json(const char *cell_id, const struct result_entry *ea, const struct result_entry *eb)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "schema", COMPARE_SCHEMA);
	cJSON_AddStringToObject(o, "cell_id", cell_id);
	cJSON_AddStringToObject(o, "in", ea && eb ? "both" : ea ? "a" : "b");
	cJSON_AddItemToObject(o, "status_a", status_json(ea));
	cJSON_AddItemToObject(o, "status_b", status_json(eb));
	for (size_t m = 0; m < N_METRICS; m++) {
		double va = metric_of(ea, &metrics[m]), vb = metric_of(eb, &metrics[m]);
		cJSON *mo = cJSON_CreateObject();
		cJSON_AddItemToObject(mo, "a", json_number_or_null(va));
		cJSON_AddItemToObject(mo, "b", json_number_or_null(vb));
		cJSON_AddItemToObject(mo, "delta", json_number_or_null(vb - va));
		/* A ratio to zero is no ratio: null, not inf. */
		cJSON_AddItemToObject(mo, "ratio", json_number_or_null(va != 0 ? vb / va : NAN));
		cJSON_AddItemToObject(o, metrics[m].key, mo);
	}
	return o;
}

static void md_header(struct sbuf *md, const char *name_a, const char *name_b, const char *env_diff)
{
	sb_puts(md, "Comparing A = ");
	sb_md(md, name_a);
	sb_puts(md, " with B = ");
	sb_md(md, name_b);
	sb_puts(md, " (delta = B - A, ratio = B / A).\n\n");
	if (*env_diff) {
		sb_puts(md, "> **Warning:** the environments differ: ");
		sb_md(md, env_diff);
		sb_puts(md, "\n\n");
	}
	sb_puts(md, "| Cell | Status A | Status B |");
	for (size_t m = 0; m < N_METRICS; m++)
		sb_printf(md, " %s A | %s B | delta | B/A |", metrics[m].title, metrics[m].title);
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
		double d = vb - va;
		sb_printf(md, " %s |", fmt_num(num, sizeof num, va));
		sb_printf(md, " %s |", fmt_num(num, sizeof num, vb));
		sb_printf(md, " %s%s |", d > 0 ? "+" : "", fmt_num(num, sizeof num, d));
		sb_printf(md, " %s |", fmt_num(num, sizeof num, va != 0 ? vb / va : NAN));
	}
	sb_puts(md, "\n");
}

/* Emits one row: JSON on out, or Markdown into md. */
static int emit(FILE *out, struct sbuf *md, enum compare_format format, const char *cell_id,
                const struct result_entry *ea, const struct result_entry *eb)
{
	if (format == COMPARE_MD) {
		md_row(md, cell_id, ea, eb);
		return 0;
	}
	cJSON *row = row_json(cell_id, ea, eb);
	int rc = jsonl_write(out, row);
	cJSON_Delete(row);
	return rc;
}

int compare_write(FILE *out, const struct result_set *a, const struct result_set *b, const char *name_a,
                  const char *name_b, enum compare_format format)
{
	struct sbuf env_diff, md;
	int rc = 0;

	sb_init(&env_diff);
	sb_init(&md);
	env_differences(&env_diff, a, b);
	if (env_diff.len > 0)
		warnmsg("warning: the two runs' environments differ: %s", env_diff.s);
	if (format == COMPARE_MD)
		md_header(&md, name_a, name_b, env_diff.s);
	/* A's cells in A's order, then the cells only B has. */
	for (int i = 0; i < a->n && rc == 0; i++)
		rc = emit(out, &md, format, a->e[i].art.cell_id, &a->e[i], results_find(b, a->e[i].art.cell_id));
	for (int i = 0; i < b->n && rc == 0; i++)
		if (results_find(a, b->e[i].art.cell_id) == NULL)
			rc = emit(out, &md, format, b->e[i].art.cell_id, NULL, &b->e[i]);
	if (rc == 0 && format == COMPARE_MD && fwrite(md.s, 1, md.len, out) != md.len)
		rc = -1;
	sb_free(&md);
	sb_free(&env_diff);
	return rc;
}
