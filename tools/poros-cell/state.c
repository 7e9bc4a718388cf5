/* tools/poros-cell/state.c: where each cell of an output directory stands
 * (state), and which poros and resident cells pair for parity (pairs). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/records.h"
#include "util/util.h"
#include "query.h"

enum cell_state { STATE_NONE, STATE_OK, STATE_FAILED, STATE_STALE };
static const char *const state_names[] = { "none", "ok", "failed", "stale" };

static void load_spec(struct current_spec *cs, const char *dir)
{
	char *path = xasprintf("%s/spec.json", dir), err[512];

	if (current_spec_load(cs, path, err, sizeof err) < 0)
		die(EXIT_USAGE, "%s", err);
	free(path);
}

/* The i-th cell_id of the spec; exits 2 when it is none. */
static const char *spec_cell(const struct current_spec *cs, const char *dir, const cJSON *id, int i)
{
	if (!cJSON_IsString(id) || !name_is_safe(id->valuestring))
		die(EXIT_USAGE, "%s/spec.json: cells[%d]: not a cell_id", dir, i);
	if (current_spec_hash(cs, id->valuestring) == NULL)
		die(EXIT_USAGE, "%s/spec.json: no config_hash for %s", dir, id->valuestring);
	return id->valuestring;
}

/* The state of DIR/ID.json, and in *a (artifact_free it) the artifact
 * when it is ok.  An artifact that does not read as one, or measured
 * another configuration (its config_hash is not the spec's, or not the
 * hash of the cell it carries), is stale: measuring it again is right. */
static enum cell_state artifact_state(const struct current_spec *cs, const char *dir, const char *id,
                                      struct artifact *a)
{
	char *path = xasprintf("%s/%s.json", dir, id), err[512];
	struct stat st;
	cJSON *obj;
	enum cell_state state = STATE_STALE;

	artifact_init(a);
	if (stat(path, &st) != 0) {
		free(path);
		return STATE_NONE;
	}
	obj = json_read_file(path, err, sizeof err);
	free(path);
	if (obj == NULL)
		return STATE_STALE;
	if (artifact_from_json(a, obj, err, sizeof err) == 0 && strcmp(a->cell_id, id) == 0 &&
	    artifact_is_current(cs, a))
		state = a->status == STATUS_OK ? STATE_OK : STATE_FAILED;
	cJSON_Delete(obj);
	if (state != STATE_OK)
		artifact_free(a);
	return state;
}

int cell_states(const char *dir)
{
	struct current_spec cs;
	struct artifact a;
	const cJSON *id;
	int i = 0;

	load_spec(&cs, dir);
	cJSON_ArrayForEach(id, cs.cells) {
		const char *cell_id = spec_cell(&cs, dir, id, i++);
		enum cell_state s = artifact_state(&cs, dir, cell_id, &a);
		printf("%s\t%s\n", cell_id, state_names[s]);
		artifact_free(&a);
	}
	current_spec_free(&cs);
	return EXIT_OK;
}

/* --- pairs -------------------------------------------------------------- */

/* A cell of the spec as its cell file holds it. */
struct spec_cell {
	const char *id;
	cJSON *json;       /* the file, as read */
	struct cell cell;  /* validated */
};

/* Reads DIR/cells/ID.json; -1 (reported) when it is not a valid cell. */
static int read_cell(struct spec_cell *sc, const char *dir, const char *id)
{
	char *path = xasprintf("%s/cells/%s.json", dir, id), err[512];
	int rc = -1;

	sc->id = id;
	if ((sc->json = json_read_file(path, err, sizeof err)) == NULL)
		warnmsg("%s", err);
	else if (cell_from_json(&sc->cell, sc->json, err, sizeof err) < 0)
		warnmsg("%s: %s", path, err);
	else if (strcmp(sc->cell.cell_id, id) != 0) {
		warnmsg("%s: cell_id is %s, not %s", path, sc->cell.cell_id, id);
		cell_free(&sc->cell);
	} else {
		rc = 0;
	}
	if (rc < 0) {
		cJSON_Delete(sc->json);
		sc->json = NULL;
	}
	free(path);
	return rc;
}

/* True when the two cells differ in nothing but method and cell_id:
 * blockwise and resident then train the same thing. */
static int same_but_method(const cJSON *a, const cJSON *b)
{
	cJSON *x = cJSON_Duplicate(a, 1), *y = cJSON_Duplicate(b, 1);
	int same;

	cJSON_DeleteItemFromObjectCaseSensitive(x, "method");
	cJSON_DeleteItemFromObjectCaseSensitive(x, "cell_id");
	cJSON_DeleteItemFromObjectCaseSensitive(y, "method");
	cJSON_DeleteItemFromObjectCaseSensitive(y, "cell_id");
	same = cJSON_Compare(x, y, 1);
	cJSON_Delete(x);
	cJSON_Delete(y);
	return same;
}

static int has_adapter(const char *dir, const char *run_dir)
{
	char *path;
	struct stat st;
	int yes;

	if (run_dir == NULL || !path_is_confined(run_dir))
		return 0;
	path = xasprintf("%s/%s/adapter", dir, run_dir);
	yes = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
	free(path);
	return yes;
}

/* One pair's line: ARCH PRECISION POROS_ID RESIDENT_ID STATE POROS_RUN
 * RESIDENT_RUN (the runs relative to DIR; "-" unless ready). */
static void put_pair(const struct current_spec *cs, const char *dir, const struct spec_cell *p,
                     const struct spec_cell *r)
{
	struct artifact pa, ra;
	const char *state = "ready";
	int p_ok = artifact_state(cs, dir, p->id, &pa) == STATE_OK;
	int r_ok = artifact_state(cs, dir, r->id, &ra) == STATE_OK;

	if (!same_but_method(p->json, r->json))
		state = "differ";
	else if (!p_ok || !r_ok)
		state = "unmeasured";
	else if (!has_adapter(dir, pa.run_dir) || !has_adapter(dir, ra.run_dir))
		state = "no-adapter";
	printf("%s\t%s\t%s\t%s\t%s\t", p->cell.model.arch, precision_names[p->cell.precision], p->id, r->id, state);
	if (strcmp(state, "ready") == 0) {
		cJSON pv = { .type = cJSON_String, .valuestring = pa.run_dir };
		cJSON rv = { .type = cJSON_String, .valuestring = ra.run_dir };
		put_tsv_value(stdout, &pv, "-");
		putchar('\t');
		put_tsv_value(stdout, &rv, "-");
		putchar('\n');
	} else {
		fputs("-\t-\n", stdout);
	}
	artifact_free(&pa);
	artifact_free(&ra);
}

int cell_pairs(const char *dir)
{
	struct current_spec cs;
	struct spec_cell *cells;
	const cJSON *id;
	int n = 0, bad = 0;

	load_spec(&cs, dir);
	cells = xcalloc((size_t)cJSON_GetArraySize(cs.cells) + 1, sizeof *cells);
	cJSON_ArrayForEach(id, cs.cells) {
		const char *cell_id = spec_cell(&cs, dir, id, n);
		if (read_cell(&cells[n], dir, cell_id) < 0)
			bad++;
		n++;
	}
	/* in spec order of the poros cell; model and precision name a pair,
	 * read from the cells, never from their ids */
	for (int i = 0; i < n; i++) {
		const struct spec_cell *p = &cells[i];
		if (p->json == NULL || p->cell.method != METHOD_POROS)
			continue;
		for (int j = 0; j < n; j++) {
			const struct spec_cell *r = &cells[j];
			if (r->json && r->cell.method == METHOD_RESIDENT && r->cell.precision == p->cell.precision &&
			    strcmp(r->cell.model.arch, p->cell.model.arch) == 0) {
				put_pair(&cs, dir, p, r);
				break;
			}
		}
	}
	for (int i = 0; i < n; i++) {
		if (cells[i].json) {
			cell_free(&cells[i].cell);
			cJSON_Delete(cells[i].json);
		}
	}
	free(cells);
	current_spec_free(&cs);
	return bad ? EXIT_USAGE : EXIT_OK;
}
