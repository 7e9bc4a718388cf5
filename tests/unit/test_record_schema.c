/* tests/unit/test_record_schema.c: each record's key table held to its
 * schema.  The artifact's table
 * (artifact_fields, tools/lib/records/artifact.c) held against what documents it:
 * share/poros/schema/artifact.schema.json (every row a property of the
 * same type, nullability, minimum and required-ness, every property a
 * row), man/poros-artifact.5 (every key named), the summary schema (every
 * key taken from a summary is one of its properties) and the report's
 * columns (every column a row names exists); and the summary's table
 * (summary_fields, tools/lib/records/summary_fields.c) held against
 * share/poros/schema/summary.schema.json the same way, in order; and the
 * parity record's (parity_fields, tools/lib/records/parity.c) to parity.schema.json
 * and the event row's (event_fields, tools/poros-train/events.c) to
 * event.schema.json; and those three tables to their man pages' key lists
 * (man/poros-summary.5, man/poros-parity.1, man/poros-events.5: the list
 * after a ".\" key list: TABLE" line names every key, no other, in order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/poros-train/events.h"
#include "records/records.h"
#include "util/util.h"
#include "test_common.h"

#define SCHEMA_PATH "share/poros/schema/artifact.schema.json"
#define SUMMARY_PATH "share/poros/schema/summary.schema.json"
#define MAN_PATH "man/poros-artifact.5"
#define PARITY_PATH "share/poros/schema/parity.schema.json"
#define EVENT_PATH "share/poros/schema/event.schema.json"
#define COLUMNS_PATH "tools/poros-render/table.c"
#define SUMMARY_MAN_PATH "man/poros-summary.5"
#define PARITY_MAN_PATH "man/poros-parity.1"
#define EVENT_MAN_PATH "man/poros-events.5"

/* JSON types as bits. */
enum { T_STRING = 1, T_NUMBER = 2, T_INTEGER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32, T_ARRAY = 64 };

static const cJSON *get(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* A property with its "$ref" (to the schema's $defs) followed. */
static const cJSON *resolve(const cJSON *root, const cJSON *p)
{
	const cJSON *ref = get(p, "$ref");

	if (cJSON_IsString(ref) && strncmp(ref->valuestring, "#/$defs/", 8) == 0)
		return get(get(root, "$defs"), ref->valuestring + 8);
	return p;
}

static unsigned type_bit(const char *name)
{
	static const char *const names[] = { "string", "number", "integer", "boolean", "null", "object", "array" };

	for (int i = 0; i < 7; i++)
		if (strcmp(name, names[i]) == 0)
			return 1u << i;
	return 0;
}

static unsigned value_bit(const cJSON *v)
{
	if (cJSON_IsString(v))
		return T_STRING;
	if (cJSON_IsNull(v))
		return T_NULL;
	if (cJSON_IsBool(v))
		return T_BOOLEAN;
	return cJSON_IsNumber(v) ? T_NUMBER : 0;
}

/* The JSON types a property admits: its "type", "enum", "const" or "oneOf". */
static unsigned types_of(const cJSON *root, const cJSON *p)
{
	const cJSON *t, *it;
	unsigned bits = 0;

	p = resolve(root, p);
	t = get(p, "type");
	if (cJSON_IsString(t))
		bits |= type_bit(t->valuestring);
	if (cJSON_IsArray(t))
		cJSON_ArrayForEach(it, t)
			bits |= cJSON_IsString(it) ? type_bit(it->valuestring) : 0;
	cJSON_ArrayForEach(it, get(p, "enum"))
		bits |= value_bit(it);
	if (get(p, "const"))
		bits |= value_bit(get(p, "const"));
	cJSON_ArrayForEach(it, get(p, "oneOf"))
		bits |= types_of(root, it);
	return bits;
}

static int in_list(const cJSON *arr, const char *s)
{
	const cJSON *j;

	cJSON_ArrayForEach(j, arr)
		if (cJSON_IsString(j) && strcmp(j->valuestring, s) == 0)
			return 1;
	return 0;
}

/* The schema object holding f: the top level or the object of its section. */
static const cJSON *holder(const cJSON *schema, const struct artifact_field *f)
{
	const char *dot = strchr(f->path, '.');
	char name[32];

	if (!dot)
		return schema;
	snprintf(name, sizeof name, "%.*s", (int)(dot - f->path), f->path);
	return get(get(schema, "properties"), name);
}

static const char *key_of(const struct artifact_field *f)
{
	const char *dot = strchr(f->path, '.');

	return dot ? dot + 1 : f->path;
}

/* enum, in order, is names[0..n) and then null exactly when nullable. */
static void check_enum(const struct artifact_field *f, const cJSON *e, const char *const *names, int n)
{
	int nullable = (f->flags & AF_NULLABLE) != 0;
	int ok = cJSON_IsArray(e) && cJSON_GetArraySize(e) == n + nullable;

	for (int i = 0; ok && i < n; i++) {
		const cJSON *j = cJSON_GetArrayItem(e, i);

		ok = cJSON_IsString(j) && strcmp(j->valuestring, names[i]) == 0;
	}
	if (ok && nullable)
		ok = cJSON_IsNull(cJSON_GetArrayItem(e, n));
	CHECKF(ok, "%s: the schema's enum is not the table's names%s", f->path, nullable ? " and null" : "");
}

static unsigned want_types(const struct artifact_field *f)
{
	switch (f->kind) {
	case AK_CONST: case AK_STR: case AK_STAMP: case AK_HASH: case AK_CELL_COPY: case AK_STATUS: return T_STRING;
	case AK_CELL: case AK_OBJECT: return T_OBJECT;
	case AK_NUM: case AK_TIME: return T_NUMBER;
	case AK_COUNT: return T_INTEGER;
	case AK_FLAG: return T_BOOLEAN;
	case AK_PASSES: case AK_ARGV: return T_ARRAY;
	}
	return 0;
}

static void check_row(const cJSON *schema, const struct artifact_field *f)
{
	const cJSON *obj = holder(schema, f);
	const cJSON *p = get(get(obj, "properties"), key_of(f)), *r, *min;
	unsigned want = want_types(f) | ((f->flags & AF_NULLABLE) ? T_NULL : 0);
	int required = !(f->flags & AF_LATER);

	if (!p) {
		CHECKF(0, "%s: a key of the table, not in %s", f->path, SCHEMA_PATH);
		return;
	}
	r = resolve(schema, p);
	CHECKF(types_of(schema, p) == want, "%s: the schema's types (bits %#x) are not the table's (%#x)", f->path,
	       types_of(schema, p), want);
	CHECKF(in_list(get(obj, "required"), key_of(f)) == required, "%s: %s in the table, %s in the schema", f->path,
	       required ? "required" : "added later", required ? "not required" : "required");
	if (f->kind == AK_NUM || f->kind == AK_TIME || f->kind == AK_COUNT) {
		int nonneg = f->kind == AK_COUNT || (f->flags & AF_NONNEG);

		min = get(r, "minimum");
		CHECKF(nonneg == (cJSON_IsNumber(min) && min->valuedouble == 0), "%s: %s in the table, %s in the schema",
		       f->path, nonneg ? "not negative" : "any sign", cJSON_IsNumber(min) ? "minimum 0" : "no minimum");
	}
	if (f->kind == AK_CONST)
		CHECKF(cJSON_IsString(get(r, "const")) && strcmp(get(r, "const")->valuestring, ARTIFACT_SCHEMA) == 0,
		       "%s: const is not \"%s\"", f->path, ARTIFACT_SCHEMA);
	if (f->kind == AK_STATUS || (f->kind == AK_STR && f->names))
		check_enum(f, get(r, "enum"), f->names, f->n_names);
	if (f->kind == AK_CELL_COPY) {
		const struct cell_field *cf = cell_field_find(f->cell_path);

		CHECKF(cf != NULL, "%s: copies cell.%s, no cell field", f->path, f->cell_path);
		if (cf && cf->kind == CK_ENUM)
			check_enum(f, get(r, "enum"), cf->names, cf->n_names);
	}
	if (f->kind == AK_OBJECT)
		CHECKF(cJSON_IsFalse(get(r, "additionalProperties")), "%s: additionalProperties is not false", f->path);
}

/* Every property of the schema (top level and the table's objects) is a row. */
static void check_properties(const cJSON *schema)
{
	const cJSON *p, *q;

	CHECKF(cJSON_IsFalse(get(schema, "additionalProperties")), "the artifact: additionalProperties is not false");
	cJSON_ArrayForEach(p, get(schema, "properties")) {
		const struct artifact_field *f = artifact_field_find(p->string);

		CHECKF(f != NULL, "%s: in %s, not in the artifact table", p->string, SCHEMA_PATH);
		if (!f || f->kind != AK_OBJECT)
			continue;
		cJSON_ArrayForEach(q, get(p, "properties")) {
			char *path = xasprintf("%s.%s", p->string, q->string);

			CHECKF(artifact_field_find(path) != NULL, "%s: in %s, not in the artifact table", path, SCHEMA_PATH);
			free(path);
		}
	}
}

/* The words of the man page's ".Li" and ".It Li" lines. */
static char *man_words(void)
{
	char *text = read_whole_file(MAN_PATH, NULL), *line, *save = NULL;
	char *words = xstrdup(" ");

	if (!text) {
		CHECKF(0, "%s: cannot read", MAN_PATH);
		return words;
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *w, *ws = NULL, *next;

		if (strncmp(line, ".Li ", 4) != 0 && strncmp(line, ".It Li ", 7) != 0)
			continue;
		for (w = strtok_r(line, " ,", &ws); w; w = strtok_r(NULL, " ,", &ws)) {
			next = xasprintf("%s%s ", words, w);
			free(words);
			words = next;
		}
	}
	free(text);
	return words;
}

static void check_man(void)
{
	char *words = man_words();

	for (int i = 0; i < artifact_field_count; i++) {
		char *w = xasprintf(" %s ", key_of(&artifact_fields[i]));

		CHECKF(strstr(words, w) != NULL, "%s: not named in %s (.Li %s)", artifact_fields[i].path, MAN_PATH,
		       key_of(&artifact_fields[i]));
		free(w);
	}
	free(words);
}

/* The keys a man page lists for a table: the one word of each ".It Li"
 * line (nested lists too) of the list that follows the comment line
 * ".\" key list: NAME".  *n is -1 when the page has no such list. */
static char **man_list(const char *path, const char *name, int *n)
{
	char *text = read_whole_file(path, NULL), *line, *save = NULL;
	char *marker = xasprintf(".\\\" key list: %s", name);
	char **keys = NULL;
	int state = 0, depth = 0; /* 0 before the marker, 1 before its .Bl, 2 in it, 3 after */

	*n = -1;
	for (line = text ? strtok_r(text, "\n", &save) : NULL; line && state < 3; line = strtok_r(NULL, "\n", &save)) {
		if (state == 0) {
			size_t m = strlen(marker);

			state = strncmp(line, marker, m) == 0 && (line[m] == '\0' || line[m] == ' ');
			*n = state ? 0 : -1;
		} else if (strncmp(line, ".Bl", 3) == 0) {
			state = 2, depth++;
		} else if (state == 2 && strncmp(line, ".El", 3) == 0) {
			state = --depth ? 2 : 3;
		} else if (state == 2 && strncmp(line, ".It Li ", 7) == 0) {
			const char *w = line + 7;

			CHECKF(strcspn(w, " ,") == strlen(w), "%s: \"%s\": one key an item, its description on the next "
			       "line", path, line);
			keys = xrealloc(keys, (size_t)(*n + 1) * sizeof *keys);
			keys[(*n)++] = xasprintf("%.*s", (int)strcspn(w, " ,"), w);
		}
	}
	CHECKF(state == 0 || state == 3, "%s: no list after \"%s\"", path, marker);
	free(marker);
	free(text);
	return keys;
}

static int find_word(char *const *words, int n, const char *w)
{
	for (int i = 0; i < n; i++)
		if (strcmp(words[i], w) == 0)
			return i;
	return -1;
}

/* The man page's list for a table names every key of it, no other, in its order. */
static void check_man_list(const char *path, const char *name, const char *const *keys, int n_keys)
{
	int n, agree, in_order = 1;
	char **listed = man_list(path, name, &n);

	CHECKF(n >= 0, "%s: no \".\\\" key list: %s\" line (the list of %s's keys)", path, name, name);
	agree = n == n_keys;
	for (int i = 0; n >= 0 && i < n_keys; i++) {
		int at = find_word(listed, n, keys[i]);

		CHECKF(at >= 0, "%s: a key of %s, not in the list of %s (.It Li %s)", keys[i], name, path, keys[i]);
		agree = agree && at >= 0;
		in_order = in_order && at == i;
	}
	for (int i = 0; i < n; i++) {
		int known = find_word((char *const *)keys, n_keys, listed[i]) >= 0;

		CHECKF(known, "%s: in the list of %s, not a key of %s", listed[i], path, name);
		agree = agree && known;
	}
	CHECKF(!agree || in_order, "%s: the list of %s is not in the table's order", path, name);
	for (int i = 0; i < n; i++)
		free(listed[i]);
	free(listed);
}

/* The summary's, the parity record's and the event row's man-page lists. */
static void check_man_lists(void)
{
	const char *keys[64];

	CHECK(summary_field_count <= 64 && parity_field_count <= 64 && EV_COUNT <= 64);
	for (int i = 0; i < summary_field_count && i < 64; i++)
		keys[i] = summary_fields[i].path;
	check_man_list(SUMMARY_MAN_PATH, "summary_fields", keys, summary_field_count);
	for (int i = 0; i < parity_field_count && i < 64; i++)
		keys[i] = parity_fields[i].key;
	check_man_list(PARITY_MAN_PATH, "parity_fields", keys, parity_field_count);
	for (int k = 0; k < EV_COUNT; k++)
		keys[k] = event_fields[k].key;
	check_man_list(EVENT_MAN_PATH, "event_fields", keys, EV_COUNT);
}

/* Keys from a summary are summary properties; report columns exist. */
static void check_sources(const cJSON *summary, const char *columns)
{
	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];

		CHECKF(!f->summary_key == !(f->writers & AW_SUMMARY), "%s: a summary key without AW_SUMMARY or back",
		       f->path);
		if (f->summary_key) {
			const char *k = f->summary_key;
			const cJSON *props = get(summary, "properties");

			if (strncmp(k, "env.", 4) == 0)
				props = get(get(props, "env"), "properties"), k += 4;
			CHECKF(get(props, k) != NULL, "%s: summary key %s is not in %s", f->path, f->summary_key,
			       SUMMARY_PATH);
		}
		if (f->column) {
			char *want = xasprintf("{ \"%s\",", f->column);

			CHECKF(columns && strstr(columns, want), "%s: column \"%s\" is not in %s", f->path, f->column,
			       COLUMNS_PATH);
			free(want);
		}
	}
}

/* A unit and the key's name say the same: _mb MiB, _gb GiB, _s and s_per_step s. */
static void check_units(void)
{
	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];
		const char *k = key_of(f), *u = f->unit ? f->unit : "";
		size_t n = strlen(k);
		const char *want = n > 3 && strcmp(k + n - 3, "_mb") == 0   ? "MiB"
		                   : n > 3 && strcmp(k + n - 3, "_gb") == 0 ? "GiB"
		                   : strcmp(k, "tokens_per_s") == 0        ? "tokens/s"
		                   : (n > 2 && strcmp(k + n - 2, "_s") == 0) || strncmp(k, "s_per_step", 10) == 0 ? "s"
		                                                                                                   : "";

		CHECKF(strcmp(u, want) == 0, "%s: unit \"%s\", its name says \"%s\"", f->path, u, want);
	}
}

static unsigned summary_types(const struct summary_field *f)
{
	unsigned null = (f->flags & SF_NULLABLE) ? T_NULL : 0;

	switch (f->kind) {
	case SK_CONST: case SK_NAME: case SK_STR: return T_STRING | null;
	case SK_COUNT: return T_INTEGER | null;
	case SK_NUM: case SK_MEASURE: return T_NUMBER | null;
	case SK_TIMES: return T_ARRAY | null;
	case SK_BY_PURPOSE: case SK_OBJECT: return T_OBJECT | null;
	}
	return 0;
}

/* The properties of obj are the rows of section, in the table's order. */
static void check_summary_order(const cJSON *obj, const char *section)
{
	const cJSON *p = get(obj, "properties") ? get(obj, "properties")->child : NULL;
	size_t n = strlen(section);

	for (int i = 0; i < summary_field_count; i++) {
		const struct summary_field *f = &summary_fields[i];
		const char *dot = strchr(f->path, '.');

		if (n ? !(dot && (size_t)(dot - f->path) == n && strncmp(f->path, section, n) == 0) : dot != NULL)
			continue;
		CHECKF(p && strcmp(p->string, n ? dot + 1 : f->path) == 0, "summary %s: row %s, the schema has %s here",
		       *section ? section : "top level", f->path, p ? p->string : "nothing");
		p = p ? p->next : NULL;
	}
	CHECKF(p == NULL, "summary: %s is in %s, not in the summary table", p ? p->string : "", SUMMARY_PATH);
}

static void check_summary(const cJSON *schema)
{
	const cJSON *env = get(get(schema, "properties"), "env");

	CHECK(summary_field_count > 30);
	check_summary_order(schema, "");
	check_summary_order(env, "env");
	for (int i = 0; i < summary_field_count; i++) {
		const struct summary_field *f = &summary_fields[i];
		const char *dot = strchr(f->path, '.');
		const cJSON *obj = dot ? env : schema;
		const cJSON *p = get(get(obj, "properties"), dot ? dot + 1 : f->path), *min;
		int always = (f->flags & SF_ALWAYS) != 0;

		if (!p)
			continue; /* check_summary_order said so */
		CHECKF(types_of(schema, p) == summary_types(f), "summary %s: the schema's types (bits %#x) are not the "
		       "table's (%#x)", f->path, types_of(schema, p), summary_types(f));
		CHECKF(in_list(get(obj, "required"), dot ? dot + 1 : f->path) == always, "summary %s: %s in the table",
		       f->path, always ? "written always" : "not written by every writer");
		CHECKF(always == (f->writers == (SW_TRAIN | SW_ARMS)), "summary %s: SF_ALWAYS but not every writer, or back",
		       f->path);
		if (f->kind == SK_COUNT || f->kind == SK_MEASURE) {
			min = get(resolve(schema, p), "minimum");
			CHECKF(cJSON_IsNumber(min) && min->valuedouble == 0, "summary %s: no minimum 0 in the schema", f->path);
		}
	}
	CHECKF(cJSON_IsFalse(get(schema, "additionalProperties")) && cJSON_IsFalse(get(env, "additionalProperties")),
	       "summary: additionalProperties is not false");
	/* what poros-arm takes from a summary is a key of it */
	for (int i = 0; i < artifact_field_count; i++)
		CHECKF(!artifact_fields[i].summary_key || summary_field_find(artifact_fields[i].summary_key),
		       "%s: takes summary key %s, not in the summary table", artifact_fields[i].path,
		       artifact_fields[i].summary_key);
}

static unsigned parity_types(const struct parity_field *f)
{
	switch (f->kind) {
	case PK_CONST: return T_STRING;
	case PK_STR: return T_STRING | T_NULL;
	case PK_STEP: case PK_COUNT: return T_INTEGER | T_NULL;
	case PK_DELTA: return T_NUMBER | T_NULL;
	case PK_TENSORS: return T_ARRAY | T_NULL;
	case PK_FLAG: return T_BOOLEAN | T_NULL;
	}
	return 0;
}

/* parity.schema.json's properties are the rows, in order, of the same
 * types, minimum 0 for every number, required unless added later. */
static void check_parity(const cJSON *schema)
{
	const cJSON *p = get(schema, "properties") ? get(schema, "properties")->child : NULL, *min;

	CHECKF(cJSON_IsFalse(get(schema, "additionalProperties")), "parity: additionalProperties is not false");
	for (int i = 0; i < parity_field_count; i++, p = p ? p->next : NULL) {
		const struct parity_field *f = &parity_fields[i];

		CHECKF(p && strcmp(p->string, f->key) == 0, "parity: row %s, the schema has %s here", f->key,
		       p ? p->string : "nothing");
		if (!p || strcmp(p->string, f->key) != 0)
			return;
		CHECKF(types_of(schema, p) == parity_types(f), "parity %s: the schema's types (bits %#x) are not the "
		       "table's (%#x)", f->key, types_of(schema, p), parity_types(f));
		CHECKF(in_list(get(schema, "required"), f->key) == !(f->flags & PF_LATER), "parity %s: %s in the table",
		       f->key, (f->flags & PF_LATER) ? "added later" : "required");
		if (f->kind == PK_STEP || f->kind == PK_COUNT || f->kind == PK_DELTA) {
			min = get(p, "minimum");
			CHECKF(cJSON_IsNumber(min) && min->valuedouble == 0, "parity %s: no minimum 0 in the schema", f->key);
		}
	}
	CHECKF(p == NULL, "parity: %s is in %s, not in the parity table", p ? p->string : "", PARITY_PATH);
}

/* event.schema.json's properties are the rows, in order: integer or
 * number, null where nullable, required unless only on some steps. */
static void check_events(const cJSON *schema)
{
	const cJSON *p = get(schema, "properties") ? get(schema, "properties")->child : NULL;

	CHECKF(cJSON_IsFalse(get(schema, "additionalProperties")), "event: additionalProperties is not false");
	for (int k = 0; k < EV_COUNT; k++, p = p ? p->next : NULL) {
		const struct event_field *f = &event_fields[k];
		unsigned want = f->kind == EK_RAW ? T_OBJECT : f->kind == EK_INT ? T_INTEGER : T_NUMBER;
		int some_steps = (f->flags & (EF_EVAL | EF_PROFILE)) != 0;

		CHECKF(p && f->key && strcmp(p->string, f->key) == 0, "event: row %d (%s), the schema has %s here", k,
		       f->key ? f->key : "no key", p ? p->string : "nothing");
		if (!p || !f->key || strcmp(p->string, f->key) != 0)
			return;
		want |= (f->flags & EF_NULLABLE) ? T_NULL : 0;
		CHECKF(types_of(schema, p) == want, "event %s: the schema's types (bits %#x) are not the table's (%#x)",
		       f->key, types_of(schema, p), want);
		CHECKF(in_list(get(schema, "required"), f->key) == !some_steps, "event %s: %s in the table", f->key,
		       some_steps ? "on some steps only" : "on every step");
		CHECKF(some_steps == (f->writers == EW_TRAIN), "event %s: every step's keys are every writer's, and back",
		       f->key);
	}
	CHECKF(p == NULL, "event: %s is in %s, not in the event table", p ? p->string : "", EVENT_PATH);
}

int main(void)
{
	char err[512];
	cJSON *schema = json_read_file(SCHEMA_PATH, err, sizeof err);
	cJSON *summary = json_read_file(SUMMARY_PATH, err, sizeof err);
	cJSON *parity = json_read_file(PARITY_PATH, err, sizeof err);
	cJSON *events = json_read_file(EVENT_PATH, err, sizeof err);
	char *columns = read_whole_file(COLUMNS_PATH, NULL);

	if (!schema || !summary || !parity || !events || !columns) {
		fprintf(stderr, "test_record_schema: %s\n", columns ? err : COLUMNS_PATH ": cannot read");
		return 1;
	}
	CHECK(artifact_field_count > 50);
	for (int i = 0; i < artifact_field_count; i++)
		check_row(schema, &artifact_fields[i]);
	check_properties(schema);
	check_man();
	check_sources(summary, columns);
	check_units();
	check_summary(summary);
	check_parity(parity);
	check_events(events);
	check_man_lists();
	cJSON_Delete(schema);
	cJSON_Delete(events);
	cJSON_Delete(parity);
	cJSON_Delete(summary);
	free(columns);
	return test_verdict("test_record_schema");
}
