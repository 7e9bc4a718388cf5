/* tools/lib/parity.c: the parity record ("poros.parity/1") to and from JSON. */
#include "parity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "util.h"

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

cJSON *parity_to_json(const struct parity *p)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *tensors = cJSON_CreateArray();

	cJSON_AddStringToObject(o, "schema", PARITY_SCHEMA);
	cJSON_AddItemToObject(o, "run_a", str_or_null(p->run_a));
	cJSON_AddItemToObject(o, "run_b", str_or_null(p->run_b));
	cJSON_AddItemToObject(o, "arch", str_or_null(p->arch));
	cJSON_AddItemToObject(o, "precision", str_or_null(p->precision));
	cJSON_AddItemToObject(o, "steps_compared", count_or_null(p->steps_compared));
	cJSON_AddItemToObject(o, "loss_max_abs_delta", json_number_or_null(p->loss_max_abs_delta));
	cJSON_AddItemToObject(o, "loss_max_step", count_or_null(p->loss_max_step));
	cJSON_AddItemToObject(o, "adapter_max_abs_delta", json_number_or_null(p->adapter_max_abs_delta));
	cJSON_AddItemToObject(o, "adapter_max_tensor", str_or_null(p->adapter_max_tensor));
	cJSON_AddItemToObject(o, "adapter_max_index", count_or_null(p->adapter_max_index));
	cJSON_AddItemToObject(o, "nonfinite_mismatches", count_or_null(p->nonfinite_mismatches));
	for (int i = 0; i < p->n_tensors; i++) {
		const struct parity_tensor *t = &p->tensors[i];
		cJSON *to = cJSON_CreateObject();
		cJSON_AddStringToObject(to, "name", t->name);
		cJSON_AddItemToObject(to, "max_abs_delta", json_number_or_null(t->max_abs_delta));
		cJSON_AddItemToObject(to, "max_index", count_or_null(t->max_index));
		cJSON_AddItemToObject(to, "n_different", count_or_null(t->n_different));
		cJSON_AddItemToArray(tensors, to);
	}
	cJSON_AddItemToObject(o, "tensors", tensors);
	if (p->bitwise_exact < 0)
		cJSON_AddNullToObject(o, "bitwise_exact");
	else
		cJSON_AddBoolToObject(o, "bitwise_exact", p->bitwise_exact);
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

static int parity_fields(struct parity *p, const cJSON *obj, char *err, size_t errsz)
{
	static const char *const known[] = {
		"schema", "run_a", "run_b", "arch", "precision", "steps_compared", "loss_max_abs_delta",
		"loss_max_step", "adapter_max_abs_delta", "adapter_max_tensor", "adapter_max_index",
		"nonfinite_mismatches", "tensors", "bitwise_exact", NULL
	};
	const cJSON *v;
	long long n;

	if (!cJSON_IsObject(obj))
		return set_error(err, errsz, "not a JSON object");
	v = cJSON_GetObjectItemCaseSensitive(obj, "schema");
	if (!cJSON_IsString(v) || strcmp(v->valuestring, PARITY_SCHEMA) != 0)
		return set_error(err, errsz, "schema: expected \"%s\"", PARITY_SCHEMA);
	if (check_keys(obj, known, "", err, errsz) < 0)
		return -1;
	if (get_str(obj, "run_a", "", &p->run_a, err, errsz) < 0 ||
	    get_str(obj, "run_b", "", &p->run_b, err, errsz) < 0)
		return -1;
	/* The labels came later than the first records: absent is null. */
	if (cJSON_GetObjectItemCaseSensitive(obj, "arch") && get_str(obj, "arch", "", &p->arch, err, errsz) < 0)
		return -1;
	if (cJSON_GetObjectItemCaseSensitive(obj, "precision") &&
	    get_str(obj, "precision", "", &p->precision, err, errsz) < 0)
		return -1;
	if (get_count(obj, "steps_compared", "", 0, &n, err, errsz) < 0)
		return -1;
	p->steps_compared = (long)n;
	if (get_delta(obj, "loss_max_abs_delta", "", &p->loss_max_abs_delta, err, errsz) < 0)
		return -1;
	if (get_count(obj, "loss_max_step", "", 0, &n, err, errsz) < 0)
		return -1;
	p->loss_max_step = (long)n;
	if (get_delta(obj, "adapter_max_abs_delta", "", &p->adapter_max_abs_delta, err, errsz) < 0 ||
	    get_str(obj, "adapter_max_tensor", "", &p->adapter_max_tensor, err, errsz) < 0 ||
	    get_count(obj, "adapter_max_index", "", 0, &p->adapter_max_index, err, errsz) < 0)
		return -1;
	if (cJSON_GetObjectItemCaseSensitive(obj, "nonfinite_mismatches") &&
	    get_count(obj, "nonfinite_mismatches", "", 0, &p->nonfinite_mismatches, err, errsz) < 0)
		return -1;

	v = cJSON_GetObjectItemCaseSensitive(obj, "tensors");
	if (v == NULL)
		return set_error(err, errsz, "tensors: missing");
	if (!cJSON_IsNull(v)) {
		int count;
		if (!cJSON_IsArray(v))
			return set_error(err, errsz, "tensors: expected an array or null");
		count = cJSON_GetArraySize(v);
		p->tensors = xcalloc(count ? (size_t)count : 1, sizeof *p->tensors);
		for (const cJSON *t = v->child; t; t = t->next) {
			if (tensor_from_json(&p->tensors[p->n_tensors], t, p->n_tensors, err, errsz) < 0)
				return -1;
			p->n_tensors++;
		}
	}

	v = cJSON_GetObjectItemCaseSensitive(obj, "bitwise_exact");
	if (v == NULL)
		return set_error(err, errsz, "bitwise_exact: missing");
	if (cJSON_IsNull(v))
		p->bitwise_exact = -1;
	else if (cJSON_IsBool(v))
		p->bitwise_exact = cJSON_IsTrue(v);
	else
		return set_error(err, errsz, "bitwise_exact: expected true, false or null");
	return 0;
}

int parity_from_json(struct parity *p, const cJSON *obj, char *err, size_t errsz)
{
	parity_init(p);
	if (parity_fields(p, obj, err, errsz) < 0) {
		parity_free(p);
		return -1;
	}
	return 0;
}
