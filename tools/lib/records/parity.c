/* tools/lib/records/parity.c: the parity record ("poros.parity/1") to and from JSON. */
#include "parity.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define ROW(k, kd) .key = #k, .kind = kd, .offset = offsetof(struct parity, k)

/* The record, key by key.  A new key is a row here (PF_LATER: older
 * records still read), a property in parity.schema.json and an ".It Li"
 * item in man/poros-parity.1's key list, each in this order. */
const struct parity_field parity_fields[] = {
	{ .key = "schema", .kind = PK_CONST },
	{ ROW(run_a, PK_STR) },
	{ ROW(run_b, PK_STR) },
	{ ROW(arch, PK_STR), .flags = PF_LATER },      /* the driver's labels of the pair */
	{ ROW(precision, PK_STR), .flags = PF_LATER },
	{ ROW(steps_compared, PK_STEP) },
	{ ROW(loss_max_abs_delta, PK_DELTA) },
	{ ROW(loss_max_step, PK_STEP) },
	{ ROW(adapter_max_abs_delta, PK_DELTA) },
	{ ROW(adapter_max_tensor, PK_STR) },
	{ ROW(adapter_max_index, PK_COUNT) },
	{ ROW(nonfinite_mismatches, PK_COUNT), .flags = PF_LATER },
	{ ROW(tensors, PK_TENSORS) },
	{ ROW(bitwise_exact, PK_FLAG) },
};
const int parity_field_count = (int)(sizeof parity_fields / sizeof parity_fields[0]);

void parity_init(struct parity *p)
{
	memset(p, 0, sizeof *p);
	p->steps_compared = -1;
	p->loss_max_abs_delta = NAN;
	p->loss_max_step = -1;
	p->adapter_max_abs_delta = NAN;
	p->adapter_max_index = -1;
	p->nonfinite_mismatches = -1;
	p->bitwise_exact = -1;
}

void parity_free(struct parity *p)
{
	free(p->run_a);
	free(p->run_b);
	free(p->arch);
	free(p->precision);
	free(p->adapter_max_tensor);
	for (int i = 0; i < p->n_tensors; i++)
		free(p->tensors[i].name);
	free(p->tensors);
	parity_init(p);
}

static cJSON *str_or_null(const char *s)
{
	return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* Counts and indices: -1 is "not measured". */
static cJSON *count_or_null(long long v)
{
	return v < 0 ? cJSON_CreateNull() : cJSON_CreateNumber((double)v);
}

static cJSON *tensors_json(const struct parity *p)
{
	cJSON *tensors = cJSON_CreateArray();

	for (int i = 0; i < p->n_tensors; i++) {
		const struct parity_tensor *t = &p->tensors[i];
		cJSON *to = cJSON_CreateObject();
		cJSON_AddStringToObject(to, "name", t->name);
		cJSON_AddItemToObject(to, "max_abs_delta", json_number_or_null(t->max_abs_delta));
		cJSON_AddItemToObject(to, "max_index", count_or_null(t->max_index));
		cJSON_AddItemToObject(to, "n_different", count_or_null(t->n_different));
		cJSON_AddItemToArray(tensors, to);
	}
	return tensors;
}

cJSON *parity_to_json(const struct parity *p)
{
	cJSON *o = cJSON_CreateObject();

	for (int i = 0; i < parity_field_count; i++) {
		const struct parity_field *f = &parity_fields[i];
		const char *at = (const char *)p + f->offset;
		cJSON *v = NULL;

		switch (f->kind) {
		case PK_CONST: v = cJSON_CreateString(PARITY_SCHEMA); break;
		case PK_STR: v = str_or_null(*(char *const *)at); break;
		case PK_STEP: v = count_or_null(*(const long *)at); break;
		case PK_COUNT: v = count_or_null(*(const long long *)at); break;
		case PK_DELTA: v = json_number_or_null(*(const double *)at); break;
		case PK_TENSORS: v = tensors_json(p); break;
		case PK_FLAG: v = *(const int *)at < 0 ? cJSON_CreateNull() : cJSON_CreateBool(*(const int *)at); break;
		}
		cJSON_AddItemToObject(o, f->key, v);
	}
	return o;
}

/* --- reading ---------------------------------------------------------- */

/* A field that must be present and may be null: 1 with its value in *v,
 * 0 for null, -1 (with the message) when missing. */
static int get_field(const cJSON *o, const char *key, const char *path, const cJSON **v, char *err, size_t errsz)
{
	*v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (*v == NULL)
		return set_error(err, errsz, "%s%s: missing", path, key);
	return !cJSON_IsNull(*v);
}

/* A string or null into *out (NULL for null). */
static int get_str(const cJSON *o, const char *key, const char *path, char **out, char *err, size_t errsz)
{
	const cJSON *v;
	int got = get_field(o, key, path, &v, err, errsz);

	if (got <= 0) {
		if (got == 0)
			*out = NULL;
		return got;
	}
	if (!cJSON_IsString(v))
		return set_error(err, errsz, "%s%s: expected a string or null", path, key);
	*out = xstrdup(v->valuestring);
	return 0;
}

/* A finite number >= 0, or null (NaN). */
static int get_delta(const cJSON *o, const char *key, const char *path, double *out, char *err, size_t errsz)
{
	const cJSON *v;
	int got = get_field(o, key, path, &v, err, errsz);

	if (got <= 0) {
		if (got == 0)
			*out = NAN;
		return got;
	}
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return set_error(err, errsz, "%s%s: not a number", path, key);
	if (v->valuedouble < 0)
		return set_error(err, errsz, "%s%s: must be >= 0", path, key);
	*out = v->valuedouble;
	return 0;
}

/* An integer >= min, or null (-1). */
static int get_count(const cJSON *o, const char *key, const char *path, long long min, long long *out,
                     char *err, size_t errsz)
{
	const cJSON *v;
	int got = get_field(o, key, path, &v, err, errsz);
	double d;

	if (got <= 0) {
		if (got == 0)
			*out = -1;
		return got;
	}
	if (!cJSON_IsNumber(v))
		return set_error(err, errsz, "%s%s: expected an integer or null", path, key);
	d = v->valuedouble;
	/* 2^53: beyond it a double no longer holds every integer. */
	if (!isfinite(d) || d != floor(d) || d < (double)min || d > 9007199254740992.0)
		return set_error(err, errsz, "%s%s: expected an integer >= %lld", path, key, min);
	*out = (long long)d;
	return 0;
}

static int check_keys(const cJSON *o, const char *const *known, const char *path, char *err, size_t errsz)
{
	for (const cJSON *c = o->child; c; c = c->next) {
		int found = 0;
		for (int i = 0; known[i]; i++)
			if (strcmp(c->string, known[i]) == 0)
				found = 1;
		if (!found)
			return set_error(err, errsz, "%sunknown field \"%s\"", path, c->string);
		/* cJSON keeps duplicate keys; a record with two values for one field is ambiguous. */
		for (const cJSON *d = c->next; d; d = d->next)
			if (strcmp(c->string, d->string) == 0)
				return set_error(err, errsz, "%s%s: duplicate field", path, c->string);
	}
	return 0;
}

static int tensor_from_json(struct parity_tensor *t, const cJSON *o, int i, char *err, size_t errsz)
{
	static const char *const known[] = { "name", "max_abs_delta", "max_index", "n_different", NULL };
	char path[48];
	const cJSON *name;

	snprintf(path, sizeof path, "tensors[%d].", i);
	if (!cJSON_IsObject(o))
		return set_error(err, errsz, "tensors[%d]: expected an object", i);
	if (check_keys(o, known, path, err, errsz) < 0)
		return -1;
	name = cJSON_GetObjectItemCaseSensitive(o, "name");
	if (!cJSON_IsString(name) || name->valuestring[0] == '\0')
		return set_error(err, errsz, "%sname: expected a non-empty string", path);
	if (get_delta(o, "max_abs_delta", path, &t->max_abs_delta, err, errsz) < 0)
		return -1;
	/* Older records carry only name and max_abs_delta: the rest may be absent. */
	t->max_index = -1;
	t->n_different = -1;
	if (cJSON_GetObjectItemCaseSensitive(o, "max_index") &&
	    get_count(o, "max_index", path, 0, &t->max_index, err, errsz) < 0)
		return -1;
	if (cJSON_GetObjectItemCaseSensitive(o, "n_different") &&
	    get_count(o, "n_different", path, 0, &t->n_different, err, errsz) < 0)
		return -1;
	t->name = xstrdup(name->valuestring);
	return 0;
}

/* tensors: an array of tensor objects, or null for none. */
static int tensors_from_json(struct parity *p, const cJSON *v, char *err, size_t errsz)
{
	int count;

	if (cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsArray(v))
		return set_error(err, errsz, "tensors: expected an array or null");
	count = cJSON_GetArraySize(v);
	p->tensors = xcalloc(count ? (size_t)count : 1, sizeof *p->tensors);
	for (const cJSON *t = v->child; t; t = t->next) {
		if (tensor_from_json(&p->tensors[p->n_tensors], t, p->n_tensors, err, errsz) < 0)
			return -1;
		p->n_tensors++;
	}
	return 0;
}

/* Row f from obj into p. */
static int field_from_json(struct parity *p, const struct parity_field *f, const cJSON *obj, char *err,
                           size_t errsz)
{
	char *at = (char *)p + f->offset;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, f->key);
	long long n;

	if (v == NULL && (f->flags & PF_LATER))
		return 0;
	switch (f->kind) {
	case PK_CONST: return 0; /* checked first */
	case PK_STR: return get_str(obj, f->key, "", (char **)at, err, errsz);
	case PK_STEP:
		if (get_count(obj, f->key, "", 0, &n, err, errsz) < 0)
			return -1;
		*(long *)at = (long)n;
		return 0;
	case PK_COUNT: return get_count(obj, f->key, "", 0, (long long *)at, err, errsz);
	case PK_DELTA: return get_delta(obj, f->key, "", (double *)at, err, errsz);
	case PK_TENSORS:
		if (v == NULL)
			return set_error(err, errsz, "%s: missing", f->key);
		return tensors_from_json(p, v, err, errsz);
	case PK_FLAG:
		if (v == NULL)
			return set_error(err, errsz, "%s: missing", f->key);
		if (!cJSON_IsNull(v) && !cJSON_IsBool(v))
			return set_error(err, errsz, "%s: expected true, false or null", f->key);
		*(int *)at = cJSON_IsNull(v) ? -1 : cJSON_IsTrue(v);
		return 0;
	}
	return 0;
}

/* The table's keys, each once. */
static int check_record_keys(const cJSON *obj, char *err, size_t errsz)
{
	const char *known[sizeof parity_fields / sizeof parity_fields[0] + 1];

	for (int i = 0; i < parity_field_count; i++)
		known[i] = parity_fields[i].key;
	known[parity_field_count] = NULL;
	return check_keys(obj, known, "", err, errsz);
}

static int record_from_json(struct parity *p, const cJSON *obj, char *err, size_t errsz)
{
	const cJSON *v;

	if (!cJSON_IsObject(obj))
		return set_error(err, errsz, "not a JSON object");
	v = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	if (!cJSON_IsString(v) || strcmp(v->valuestring, PARITY_SCHEMA) != 0)
		return set_error(err, errsz, "schema: expected \"%s\"", PARITY_SCHEMA);
	if (check_record_keys(obj, err, errsz) < 0)
		return -1;
	for (int i = 0; i < parity_field_count; i++)
		if (field_from_json(p, &parity_fields[i], obj, err, errsz) < 0)
			return -1;
	return 0;
}

int parity_from_json(struct parity *p, const cJSON *obj, char *err, size_t errsz)
{
	parity_init(p);
	if (record_from_json(p, obj, err, errsz) < 0) {
		parity_free(p);
		return -1;
	}
	return 0;
}
