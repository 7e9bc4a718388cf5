/* tools/poros-cell/get.c: named fields of JSON records, one line each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "util/util.h"
#include "query.h"

#define MAX_FIELDS 64

/* The dotted paths asked for, each split into its keys. */
struct field_list {
	int n;
	char *text[MAX_FIELDS];  /* "model.arch", for messages */
	char *keys[MAX_FIELDS];  /* "model\0arch\0": the keys one after another */
	int depth[MAX_FIELDS];
};

static int key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* "cell_id,model.arch" -> two paths; exits 2 on a malformed one. */
static void fields_parse(struct field_list *fl, const char *spec)
{
	char *copy = xstrdup(spec), *rest = copy, *f;

	fl->n = 0;
	while ((f = strsep(&rest, ",")) != NULL) {
		int ok = *f != '\0', depth = 1;
		for (const char *p = f; *p; p++) {
			if (*p == '.')
				ok &= p != f && p[1] != '\0' && p[-1] != '.', depth++;
			else
				ok &= key_char(*p);
		}
		if (!ok)
			die(EXIT_USAGE, "get: \"%s\": not a field path (KEY[.KEY]..., keys of letters, digits and _)", f);
		if (fl->n == MAX_FIELDS)
			die(EXIT_USAGE, "get: more than %d fields", MAX_FIELDS);
		fl->text[fl->n] = xstrdup(f);
		fl->keys[fl->n] = xstrdup(f);
		for (char *p = fl->keys[fl->n]; *p; p++)
			if (*p == '.')
				*p = '\0';
		fl->depth[fl->n++] = depth;
	}
	free(copy);
}

static void fields_free(struct field_list *fl)
{
	for (int i = 0; i < fl->n; i++) {
		free(fl->text[i]);
		free(fl->keys[i]);
	}
}

/* A cell's path names one of cell_fields' rows, or a section above them. */
static int cell_path_known(const char *path)
{
	size_t len = strlen(path);

	for (int i = 0; i < cell_field_count; i++) {
		const char *row = cell_fields[i].path;
		if (strcmp(row, path) == 0 || (strncmp(row, path, len) == 0 && row[len] == '.'))
			return 1;
	}
	return 0;
}

/* The value at field i of obj; NULL when it or a key above it is missing
 * or null.  -1 with err when a key above it holds something else. */
static int lookup(const cJSON *obj, const struct field_list *fl, int i, const cJSON **out, char *err, size_t errsz)
{
	const char *key = fl->keys[i];
	const cJSON *v = obj;

	for (int d = 0; d < fl->depth[i] && v != NULL; d++, key += strlen(key) + 1) {
		if (cJSON_IsNull(v)) {
			v = NULL;
		} else if (!cJSON_IsObject(v)) {
			int above = (int)(key - fl->keys[i]) - 1;
			return set_error(err, errsz, "%s: %.*s is not an object", fl->text[i], above, fl->text[i]);
		} else {
			v = cJSON_GetObjectItemCaseSensitive(v, key);
		}
	}
	*out = cJSON_IsNull(v) ? NULL : v;
	return 0;
}

static void put_number(FILE *out, double v)
{
	char buf[40];

	for (int digits = 15; digits <= 17; digits++) {
		snprintf(buf, sizeof buf, "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	fputs(buf, out);
}

void put_tsv_value(FILE *out, const cJSON *v, const char *null_text)
{
	if (v == NULL || cJSON_IsNull(v)) {
		fputs(null_text, out);
	} else if (cJSON_IsString(v)) {
		for (const char *p = v->valuestring; *p; p++) {
			switch (*p) {
			case '\\': fputs("\\\\", out); break;
			case '\t': fputs("\\t", out); break;
			case '\n': fputs("\\n", out); break;
			case '\r': fputs("\\r", out); break;
			default: putc(*p, out);
			}
		}
	} else if (cJSON_IsNumber(v)) {
		put_number(out, v->valuedouble);
	} else if (cJSON_IsBool(v)) {
		fputs(cJSON_IsTrue(v) ? "true" : "false", out);
	} else {
		char *text = cJSON_PrintUnformatted(v);
		if (text == NULL)
			die(EXIT_RUNTIME, "out of memory");
		fputs(text, out);
		free(text);
	}
}

/* One record's line.  -1 with err (nothing written) when a field cannot
 * be read from it. */
static int put_record(const cJSON *obj, const struct field_list *fl, const struct get_options *o, char *err,
                      size_t errsz)
{
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	const cJSON *v[MAX_FIELDS];
	int is_cell = cJSON_IsString(schema) && strcmp(schema->valuestring, CELL_SCHEMA) == 0;

	if (!cJSON_IsObject(obj))
		return set_error(err, errsz, "not a JSON object");
	for (int i = 0; i < fl->n; i++) {
		/* a cell's fields are a table: a misspelt path is an error, not a null */
		if (is_cell && !cell_path_known(fl->text[i]))
			return set_error(err, errsz, "%s: not a field of %s", fl->text[i], CELL_SCHEMA);
		if (lookup(obj, fl, i, &v[i], err, errsz) < 0)
			return -1;
	}
	if (o->format == GET_JSON) {
		cJSON *row = cJSON_CreateArray();
		for (int i = 0; i < fl->n; i++)
			cJSON_AddItemToArray(row, v[i] ? cJSON_Duplicate(v[i], 1) : cJSON_CreateNull());
		if (jsonl_write(stdout, row) < 0)
			diesys(EXIT_RUNTIME, "writing output failed");
		cJSON_Delete(row);
		return 0;
	}
	for (int i = 0; i < fl->n; i++) {
		if (i > 0)
			putchar('\t');
		if (o->format == GET_RAW && cJSON_IsString(v[0]))
			fputs(v[0]->valuestring, stdout);
		else
			put_tsv_value(stdout, v[i], o->null_text);
	}
	putchar('\n');
	return 0;
}

/* FILE.json: one JSON value (a cell, an artifact, spec.json). */
static int read_json_file(const char *path, const struct field_list *fl, const struct get_options *o, long *bad)
{
	char err[512];
	FILE *f = fopen(path, "r");
	cJSON *obj;

	if (f == NULL) {
		warnsys("%s", path);
		return -1;
	}
	fclose(f);
	if ((obj = json_read_file(path, err, sizeof err)) == NULL) {
		warnmsg("%s", err); /* "FILE:LINE:COL: not valid JSON" */
		++*bad;
		return 0;
	}
	if (put_record(obj, fl, o, err, sizeof err) < 0) {
		warnmsg("%s: %s", path, err);
		++*bad;
	}
	cJSON_Delete(obj);
	return 0;
}

/* Any other file, or "-": JSON Lines. */
static int read_jsonl(const char *path, const struct field_list *fl, const struct get_options *o, long *bad)
{
	int from_stdin = strcmp(path, "-") == 0;
	FILE *f = from_stdin ? stdin : fopen(path, "r");
	struct jsonl_reader r;
	char err[512];
	cJSON *obj;
	int rc, status = 0;

	if (f == NULL) {
		warnsys("%s", path);
		return -1;
	}
	jsonl_init(&r, f, from_stdin ? "<stdin>" : path);
	while ((rc = jsonl_next(&r, &obj)) != 0) {
		if (rc < 0) {
			if (ferror(f)) {
				warnsys("%s: read error", r.name);
				status = -1;
				break;
			}
			warnmsg("%s:%ld: %s", r.name, r.line, r.err);
			++*bad;
			continue;
		}
		if (put_record(obj, fl, o, err, sizeof err) < 0) {
			warnmsg("%s:%ld: %s", r.name, r.line, err);
			++*bad;
		}
		cJSON_Delete(obj);
	}
	jsonl_free(&r);
	if (!from_stdin)
		fclose(f);
	return status;
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && strcmp(s + n - m, tail) == 0;
}

int get_fields(const char *fields, char *const *inputs, int n, const struct get_options *o)
{
	static char *const from_stdin[] = { "-" };
	struct field_list fl;
	long bad = 0;
	int status = EXIT_OK;

	fields_parse(&fl, fields);
	if (o->format == GET_RAW && fl.n != 1)
		die(EXIT_USAGE, "get: --raw takes one field (got %d)", fl.n);
	if (n == 0) {
		inputs = from_stdin;
		n = 1;
	}
	for (int i = 0; i < n; i++) {
		int rc = ends_with(inputs[i], ".json") ? read_json_file(inputs[i], &fl, o, &bad)
		                                       : read_jsonl(inputs[i], &fl, o, &bad);
		if (rc < 0)
			status = EXIT_RUNTIME;
	}
	fields_free(&fl);
	if (status == EXIT_OK && bad > 0)
		status = EXIT_USAGE;
	return status;
}
