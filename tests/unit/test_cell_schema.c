/* tests/unit/test_cell_schema.c: share/poros/schema/cell.schema.json
 * held against the cell's field table (tools/lib/records/cell.c): every row is a
 * property with the same type, range, length, enum, default and
 * required-ness, and every property is a row; and every flag the table
 * names is one of poros-train's options, in its synopsis. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/poros-train/train.h"
#include "records/records.h"
#include "util/util.h"
#include "test_common.h"

#define SCHEMA_PATH "share/poros/schema/cell.schema.json"

static const cJSON *get(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* The object ("model") or the whole schema (top) holding f. */
static const cJSON *holder(const cJSON *schema, const struct cell_field *f)
{
	const char *dot = strchr(f->path, '.');
	char name[64];

	if (!dot)
		return schema;
	snprintf(name, sizeof name, "%.*s", (int)(dot - f->path), f->path);
	return get(get(schema, "properties"), name);
}

static const char *key_of(const struct cell_field *f)
{
	const char *dot = strchr(f->path, '.');

	return dot ? dot + 1 : f->path;
}

static int in_list(const cJSON *arr, const char *s)
{
	const cJSON *j;

	cJSON_ArrayForEach(j, arr)
		if (cJSON_IsString(j) && strcmp(j->valuestring, s) == 0)
			return 1;
	return 0;
}

/* "type" is want, or [want, "null"] for a field that may be null. */
static void check_type(const struct cell_field *f, const cJSON *p, const char *want)
{
	const cJSON *t = get(p, "type");

	if (f->presence == CP_NULLABLE) {
		CHECKF(cJSON_IsArray(t) && cJSON_GetArraySize(t) == 2 && in_list(t, want) && in_list(t, "null"),
		       "%s: type is not [\"%s\", \"null\"]", f->path, want);
		return;
	}
	CHECKF(cJSON_IsString(t) && strcmp(t->valuestring, want) == 0, "%s: type is not \"%s\"", f->path, want);
}

/* The schema's number at key, or NAN when it has none. */
static double number_at(const cJSON *p, const char *key)
{
	const cJSON *j = get(p, key);

	return cJSON_IsNumber(j) ? j->valuedouble : NAN;
}

static void check_range(const struct cell_field *f, const cJSON *p)
{
	const char *lo = f->bound.min_open ? "exclusiveMinimum" : "minimum";
	const char *lo_not = f->bound.min_open ? "minimum" : "exclusiveMinimum";
	const char *hi = f->bound.max_open ? "exclusiveMaximum" : "maximum";
	const char *hi_not = f->bound.max_open ? "maximum" : "exclusiveMaximum";

	CHECKF(number_at(p, lo) == f->bound.min, "%s: %s is %.17g in the schema, %.17g in the table", f->path, lo,
	       number_at(p, lo), f->bound.min);
	CHECKF(number_at(p, hi) == f->bound.max, "%s: %s is %.17g in the schema, %.17g in the table", f->path, hi,
	       number_at(p, hi), f->bound.max);
	CHECKF(!get(p, lo_not) && !get(p, hi_not), "%s: the schema has %s or %s too", f->path, lo_not, hi_not);
}

/* A string's length: maxLength (with minLength 1), or a pattern {1,N}. */
static void check_length(const struct cell_field *f, const cJSON *p)
{
	const cJSON *pattern = get(p, "pattern");
	char want[32];

	if (get(p, "maxLength")) {
		CHECKF(number_at(p, "maxLength") == (double)f->max_len && number_at(p, "minLength") == 1,
		       "%s: length is %g to %g in the schema, 1 to %zu in the table", f->path, number_at(p, "minLength"),
		       number_at(p, "maxLength"), f->max_len);
		return;
	}
	snprintf(want, sizeof want, "{1,%zu}", f->max_len);
	CHECKF(cJSON_IsString(pattern) && strstr(pattern->valuestring, want),
	       "%s: neither maxLength nor a pattern with %s", f->path, want);
}

/* "enum" is names, in order. */
static void check_names(const char *path, const cJSON *e, const char *const *names, int n)
{
	int ok = cJSON_IsArray(e) && cJSON_GetArraySize(e) == n;

	for (int i = 0; ok && i < n; i++) {
		const cJSON *j = cJSON_GetArrayItem(e, i);

		ok = cJSON_IsString(j) && strcmp(j->valuestring, names[i]) == 0;
	}
	CHECKF(ok, "%s: the schema's enum is not the table's names", path);
}

/* An optional field's default is the schema's "default"; a required one has none. */
static void check_default(const struct cell_field *f, const cJSON *p)
{
	const cJSON *d = get(p, "default");
	int optional = f->presence == CP_OPTIONAL || f->presence == CP_IF_SET || f->presence == CP_WITH_PREV;
	int has_default = optional && f->kind != CK_STR &&
	                  !(f->kind == CK_ENUM && (f->def < f->base || f->def >= f->base + f->n_names));

	if (!has_default) {
		CHECKF(d == NULL, "%s: a default in the schema, none in the table (%s)", f->path,
		       optional ? "absent means no value" : "the field is required");
		return;
	}
	if (f->kind == CK_BOOL)
		CHECKF(cJSON_IsBool(d) && cJSON_IsTrue(d) == (f->def != 0), "%s: default differs (table: %s)", f->path,
		       f->def != 0 ? "true" : "false");
	else if (f->kind == CK_ENUM)
		CHECKF(cJSON_IsString(d) && strcmp(d->valuestring, f->names[(int)f->def - f->base]) == 0,
		       "%s: default differs (table: %s)", f->path, f->names[(int)f->def - f->base]);
	else
		CHECKF(cJSON_IsNumber(d) && d->valuedouble == f->def, "%s: default %g in the schema, %g in the table",
		       f->path, cJSON_IsNumber(d) ? d->valuedouble : NAN, f->def);
}

static void check_row(const cJSON *schema, const struct cell_field *f)
{
	const cJSON *obj = holder(schema, f);
	const cJSON *p = get(get(obj, "properties"), key_of(f));
	int required = f->presence == CP_REQUIRED || f->presence == CP_NULLABLE;
	const cJSON *t;

	if (!p) {
		CHECKF(0, "%s: a field of the table, not in %s", f->path, SCHEMA_PATH);
		return;
	}
	CHECKF(in_list(get(obj, "required"), key_of(f)) == required, "%s: %s in the table, %s in the schema", f->path,
	       required ? "required" : "optional", required ? "optional" : "required");
	switch (f->kind) {
	case CK_CONST:
		t = get(p, "const");
		CHECKF(cJSON_IsString(t) && strcmp(t->valuestring, f->def_str) == 0, "%s: const is not \"%s\"", f->path,
		       f->def_str);
		break;
	case CK_INT:
	case CK_U64:
	case CK_I64:
		check_type(f, p, "integer");
		check_range(f, p);
		break;
	case CK_NUM:
		check_type(f, p, "number");
		check_range(f, p);
		break;
	case CK_BOOL:
		check_type(f, p, "boolean");
		break;
	case CK_STR:
		check_type(f, p, "string");
		check_length(f, p);
		break;
	case CK_ENUM:
		t = get(p, "type");
		CHECKF(t == NULL || (cJSON_IsString(t) && strcmp(t->valuestring, "string") == 0), "%s: enum of a non-string",
		       f->path);
		check_names(f->path, get(p, "enum"), f->names, f->n_names);
		break;
	case CK_MODULES:
		check_type(f, p, "array");
		check_names(f->path, get(get(p, "items"), "enum"), lora_module_names, CELL_MAX_TARGETS);
		CHECKF(number_at(p, "minItems") == 1 && number_at(p, "maxItems") == CELL_MAX_TARGETS &&
		       cJSON_IsTrue(get(p, "uniqueItems")), "%s: not 1 to %d unique items", f->path, CELL_MAX_TARGETS);
		break;
	}
	check_default(f, p);
}

/* Every property of object obj (prefix "" at the top) is a row, or at the top an object of rows. */
static void check_properties(const cJSON *obj, const char *prefix)
{
	const cJSON *p;

	CHECKF(cJSON_IsFalse(get(obj, "additionalProperties")), "%s: additionalProperties is not false",
	       *prefix ? prefix : "the cell");
	cJSON_ArrayForEach(p, get(obj, "properties")) {
		char *path = xasprintf("%s%s%s", prefix, *prefix ? "." : "", p->string);

		if (!*prefix && cJSON_IsObject(get(p, "properties")))
			check_properties(p, p->string);
		else
			CHECKF(cell_field_find(path) != NULL, "%s: in %s, not in the cell table", path, SCHEMA_PATH);
		free(path);
	}
}

static void check_flags(void)
{
	for (int i = 0; i < cell_field_count; i++) {
		const struct cell_field *f = &cell_fields[i];
		char *usage;
		int found = 0;

		if (!f->flag)
			continue;
		for (int o = 0; o < OPT_COUNT; o++)
			found |= strncmp(f->flag, "--", 2) == 0 && strcmp(f->flag + 2, train_opt_names[o]) == 0;
		CHECKF(found, "%s: flag %s is no poros-train option", f->path, f->flag);
		usage = f->flag_arg ? xasprintf("%s %s", f->flag, f->flag_arg) : xasprintf("[%s]", f->flag);
		CHECKF(strstr(TRAIN_SYNOPSIS, usage) != NULL, "%s: \"%s\" is not in poros-train's synopsis", f->path, usage);
		free(usage);
	}
}

int main(void)
{
	char err[512];
	cJSON *schema = json_read_file(SCHEMA_PATH, err, sizeof err);

	if (!schema) {
		fprintf(stderr, "test_cell_schema: %s\n", err);
		return 1;
	}
	CHECK(cell_field_count > 30);
	for (int i = 0; i < cell_field_count; i++)
		check_row(schema, &cell_fields[i]);
	check_properties(schema, "");
	check_flags();
	cJSON_Delete(schema);
	return test_verdict("test_cell_schema");
}
