/* tools/poros-merge/merge.c: many result files and artifact directories
 * into one row per cell; with a spec.json, only the artifacts of its
 * current cells, in its order. */
#include "merge.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/util.h"

/* True when the artifact measured the spec's cell as it is now. */
static int is_current(const struct current_spec *cs, const cJSON *obj)
{
	struct artifact a;
	char err[256];
	int ok;

	if (artifact_from_json(&a, obj, err, sizeof err) < 0)
		return 1; /* not for us to judge: results_record reports it */
	ok = artifact_is_current(cs, &a);
	artifact_free(&a);
	return ok;
}

struct filter {
	struct result_set *s;
	const struct current_spec *cs;
	cJSON *left_out;   /* the cell ids whose artifacts were left out, once each */
};

static int current_record(void *ctx, const cJSON *obj, const char *source, long line, char *err, size_t errsz)
{
	struct filter *f = ctx;
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "cell_id"), *seen;

	if (report_is_artifact(obj) && !is_current(f->cs, obj)) {
		int known = 0;
		cJSON_ArrayForEach(seen, f->left_out)
			known |= cJSON_IsString(id) && strcmp(seen->valuestring, id->valuestring) == 0;
		if (!known)
			cJSON_AddItemToArray(f->left_out, cJSON_CreateString(cJSON_IsString(id) ? id->valuestring : "?"));
		return 0;
	}
	return results_record(f->s, obj, source, line, err, errsz);
}

/* "a, b, c and 5 more" */
static void note_left_out(const cJSON *ids)
{
	int n = cJSON_GetArraySize(ids), shown = 0;
	struct sbuf list;
	const cJSON *id;

	if (n == 0)
		return;
	sb_init(&list);
	cJSON_ArrayForEach(id, ids) {
		if (shown == 4) {
			sb_printf(&list, " and %d more", n - shown);
			break;
		}
		sb_printf(&list, "%s%s", shown ? ", " : "", id->valuestring);
		shown++;
	}
	warnmsg("note: artifacts of %d cell%s left out: they measured another configuration than the spec's now, "
	        "or the cell is no longer in it (%s)", n, n == 1 ? "" : "s", list.s);
	sb_free(&list);
}

/* The spec's display_name of the model whose arch is arch; NULL when it
 * has none (a current artifact's model is always one of the spec's). */
static const char *spec_display_name(const struct current_spec *cs, const char *arch)
{
	const cJSON *m;

	cJSON_ArrayForEach(m, cs->models) {
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(m, "arch");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "display_name");
		if (cJSON_IsString(a) && cJSON_IsString(name) && arch && strcmp(a->valuestring, arch) == 0)
			return name->valuestring;
	}
	return NULL;
}

/* Each artifact's model named as the spec names it now, in the line that
 * is written and in the record that is rendered. */
static void rename_models(struct result_set *s, const struct current_spec *cs)
{
	for (int i = 0; i < s->n; i++) {
		struct cell *c = &s->e[i].art.cell;
		const char *name = spec_display_name(cs, c->model.arch);
		cJSON *model = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->e[i].json, "cell"),
		                                                "model");

		if (name == NULL || model == NULL || (c->model.display_name && strcmp(c->model.display_name, name) == 0))
			continue;
		free(c->model.display_name);
		c->model.display_name = xstrdup(name);
		cJSON_ReplaceItemInObjectCaseSensitive(model, "display_name", cJSON_CreateString(name));
	}
}

static const struct current_spec *order_cs;

static int by_spec_order(const void *a, const void *b)
{
	int ia = current_spec_index(order_cs, ((const struct result_entry *)a)->art.cell_id);
	int ib = current_spec_index(order_cs, ((const struct result_entry *)b)->art.cell_id);
	return (ia > ib) - (ia < ib);
}

int merge_inputs(struct result_set *s, char *const *paths, int n, const struct current_spec *cs)
{
	struct filter f = { s, cs, cJSON_CreateArray() };
	long bad = 0;
	int status = EXIT_OK;

	for (int i = 0; i < n; i++)
		if (report_read_path(paths[i], cs ? current_record : results_record, cs ? (void *)&f : (void *)s, &bad) < 0)
			status = EXIT_RUNTIME;
	if (status == EXIT_OK && bad > 0) {
		warnmsg("%ld malformed line%s or file%s skipped", bad, bad == 1 ? "" : "s", bad == 1 ? "" : "s");
		status = EXIT_USAGE;
	}
	if (cs) {
		note_left_out(f.left_out);
		order_cs = cs;
		if (s->n > 1) /* qsort's base may not be NULL, even for no rows */
			qsort(s->e, (size_t)s->n, sizeof *s->e, by_spec_order);
		order_cs = NULL;
		results_reindex(s); /* the rows moved: their slots with them */
		rename_models(s, cs);
	}
	cJSON_Delete(f.left_out);
	return status;
}

int merge_write(FILE *out, const struct result_set *s)
{
	for (int i = 0; i < s->n; i++)
		if (jsonl_write(out, s->e[i].json) < 0)
			return -1;
	return 0;
}
