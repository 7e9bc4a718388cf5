/* tools/lib/records/cell_io.c: a struct cell by the field table (cell.c): one field
 * read and set, the defaults, the checks, the JSON writer, the strict reader
 * every tool uses (unknown, missing and duplicate fields, wrong types,
 * non-finite and out-of-range numbers are all rejected, naming the field;
 * only optional fields may be absent) and poros-train's flag parser. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell.h"
#include "cell_int.h"
#include "util/util.h"

/* --- one field of a struct cell ------------------------------------------ */

/* "steps" of "training.steps", "cell_id" of "cell_id". */
static const char *field_key(const struct cell_field *f)
{
	const char *dot = strchr(f->path, '.');

	return dot ? dot + 1 : f->path;
}

/* The length of "training" in "training.steps"; 0 at the top. */
static size_t parent_len(const struct cell_field *f)
{
	const char *dot = strchr(f->path, '.');

	return dot ? (size_t)(dot - f->path) : 0;
}

static const void *field_at(const struct cell *c, const struct cell_field *f)
{
	return (const char *)c + f->offset;
}

static void *field_slot(struct cell *c, const struct cell_field *f)
{
	return (char *)c + f->offset;
}

/* A number, bool, enum or mask as a double (seeds are at most 2^32 - 1). */
static double field_number(const struct cell *c, const struct cell_field *f)
{
	const void *p = field_at(c, f);

	switch (f->kind) {
	case CK_U64:
		return (double)*(const unsigned long long *)p;
	case CK_I64:
		return (double)*(const long long *)p;
	case CK_NUM:
		return *(const double *)p;
	case CK_MODULES:
		return *(const unsigned *)p;
	default: /* CK_INT, CK_BOOL, CK_ENUM */
		return *(const int *)p;
	}
}

/* v is bounded and whole where the field is integral: the casts are defined. */
static void field_set_number(struct cell *c, const struct cell_field *f, double v)
{
	void *p = field_slot(c, f);

	switch (f->kind) {
	case CK_U64:
		*(unsigned long long *)p = (unsigned long long)v;
		break;
	case CK_I64:
		*(long long *)p = (long long)v;
		break;
	case CK_NUM:
		*(double *)p = v;
		break;
	case CK_MODULES:
		*(unsigned *)p = (unsigned)v;
		c->lora.n_targets = __builtin_popcount((unsigned)v);
		break;
	default:
		*(int *)p = (int)v;
		break;
	}
}

static const char *field_text(const struct cell *c, const struct cell_field *f)
{
	return *(char *const *)field_at(c, f);
}

static void field_set_text(struct cell *c, const struct cell_field *f, const char *s)
{
	char **p = field_slot(c, f);

	free(*p);
	*p = s ? xstrdup(s) : NULL;
}

/* Whether a field that may be left out or null holds a value. */
static int field_is_set(const struct cell *c, const struct cell_field *f)
{
	if (f->kind == CK_STR)
		return field_text(c, f) != NULL;
	if (f->presence == CP_NULLABLE) /* 0: the spec did not say */
		return field_number(c, f) > 0;
	return field_number(c, f) != f->def;
}

void cell_defaults(struct cell *c)
{
	memset(c, 0, sizeof *c);
	for (int i = 0; i < cell_field_count; i++) {
		const struct cell_field *f = &cell_fields[i];

		if (f->kind == CK_STR)
			field_set_text(c, f, f->def_str);
		else if (f->kind != CK_CONST && !f->derived)
			field_set_number(c, f, f->def);
	}
	c->tokens_per_step = cell_tokens_per_step(c);
}

/* --- checking ------------------------------------------------------------ */

static int check_string(const struct cell *c, const struct cell_field *f, char *err, size_t errsz)
{
	const char *s = field_text(c, f), *why;

	if (s == NULL && f->presence != CP_REQUIRED)
		return 0;
	switch (f->text) {
	case CT_SAFE_NAME:
		if (!s || !name_is_safe(s))
			return set_error(err, errsz, "%s: not a safe name (letters, digits, '.', '_', '-'; at most 128 bytes)",
			                 f->path);
		return 0;
	case CT_SLUG:
		if (!is_slug(s))
			return set_error(err, errsz, "%s: must be 1 to 128 of [a-z0-9_]", f->path);
		return 0;
	case CT_OUTPUT_DIR:
		if ((why = cell_output_dir_problem(s)))
			return set_error(err, errsz, "%s: %s", f->path, why);
		return 0;
	default:
		return check_text(f->path, s, f->max_len, err, errsz);
	}
}

static int check_field(const struct cell *c, const struct cell_field *f, char *err, size_t errsz)
{
	double v;

	if (f->derived || f->kind == CK_CONST)
		return 0;
	switch (f->kind) {
	case CK_STR:
		return check_string(c, f, err, errsz);
	case CK_U64: /* compared as an integer: a double would round seeds above 2^53 */
		if (*(const unsigned long long *)field_at(c, f) > (unsigned long long)f->bound.max)
			return set_error(err, errsz, "%s: must be at most %.0f, got %llu", f->path, f->bound.max,
			                 *(const unsigned long long *)field_at(c, f));
		return 0;
	case CK_BOOL:
		v = field_number(c, f);
		if (v != 0 && v != 1)
			return set_error(err, errsz, "%s: must be 0 or 1", f->path);
		return 0;
	case CK_ENUM: /* an optional enum's default (train_on 0) names no value */
		v = field_number(c, f);
		if (!(f->presence != CP_REQUIRED && v == f->def) && !(v >= f->base && v < f->base + f->n_names))
			return set_error(err, errsz, "%s: out of range", f->path);
		return 0;
	case CK_MODULES:
		if (c->lora.target_mask == 0 || c->lora.target_mask >= 1u << CELL_MAX_TARGETS)
			return set_error(err, errsz, "%s: must name 1 to %d of the projections", f->path, CELL_MAX_TARGETS);
		if (c->lora.n_targets != __builtin_popcount(c->lora.target_mask))
			return set_error(err, errsz, "lora.n_targets: %d does not match target_mask", c->lora.n_targets);
		return 0;
	default:
		return cell_bound_check(&f->bound, f->path, field_number(c, f), err, errsz);
	}
}

/* The rules that span fields. */
static int check_across(const struct cell *c, char *err, size_t errsz)
{
	const struct cell_bound *tb = cell_bound_find("tokens_per_step");
	char *want = cell_make_id(c->method, c->model.arch, c->precision);
	int same = strcmp(want, c->cell_id) == 0;
	long long tokens;

	if (!same)
		set_error(err, errsz, "cell_id: \"%s\" does not match method, arch and precision (\"%s\")", c->cell_id, want);
	free(want);
	if (!same)
		return -1;
	/* At least one step must be measured after the warmup. */
	if (!cell_warmup_fits(c))
		return set_error(err, errsz, "training.warmup_steps: must be less than training.steps (%d), got %d",
		                 c->training.steps, c->training.warmup_steps);
	if (!cell_eval_set_given(c))
		return set_error(err, errsz, "training.eval_every: needs training.eval_dataset");
	if (c->training.eval_split && c->training.eval_dataset == NULL)
		return set_error(err, errsz, "training.eval_split: needs training.eval_dataset");
	if (c->training.eval_fraction > 0 && c->training.eval_dataset)
		return set_error(err, errsz, "training.eval_fraction: holds out part of training.dataset, and "
		                 "training.eval_dataset is given too; give one of them");
	tokens = cell_tokens_per_step(c);
	if (cell_bound_check(tb, "tokens_per_step", (double)tokens, err, errsz))
		return set_error(err, errsz, "tokens_per_step: batch_size x seq_len x gradient_accumulation_steps = %lld, more than %.0f",
		                 tokens, tb->max);
	if (c->tokens_per_step != tokens)
		return set_error(err, errsz, "tokens_per_step: %lld is not batch_size x seq_len x gradient_accumulation_steps (%lld)",
		                 c->tokens_per_step, tokens);
	return 0;
}

int cell_validate(const struct cell *c, char *err, size_t errsz)
{
	for (int i = 0; i < cell_field_count; i++)
		if (check_field(c, &cell_fields[i], err, errsz))
			return -1;
	return check_across(c, err, errsz);
}

/* --- writing ------------------------------------------------------------- */

/* cJSON_Add* return NULL only when out of memory; one flag collects them. */
struct builder {
	int ok;
};

static void add_item(struct builder *b, cJSON *o, const char *key, cJSON *item)
{
	if (!item || !cJSON_AddItemToObject(o, key, item)) {
		cJSON_Delete(item); /* not attached */
		b->ok = 0;
	}
}

static cJSON *modules_json(const struct cell *c)
{
	cJSON *targets = cJSON_CreateArray();

	for (int i = 0; targets && i < CELL_MAX_TARGETS; i++) {
		cJSON *name;

		if (!(c->lora.target_mask & 1u << i))
			continue;
		if (!(name = cJSON_CreateString(lora_module_names[i])) || !cJSON_AddItemToArray(targets, name)) {
			cJSON_Delete(name);
			cJSON_Delete(targets);
			return NULL;
		}
	}
	return targets;
}

/* The value of f as JSON (null where a nullable field is not set). */
static cJSON *field_json(const struct cell *c, const struct cell_field *f)
{
	int i;

	if (f->presence == CP_NULLABLE && !field_is_set(c, f))
		return cJSON_CreateNull();
	switch (f->kind) {
	case CK_CONST:
		return cJSON_CreateString(f->def_str);
	case CK_STR:
		return cJSON_CreateString(field_text(c, f));
	case CK_BOOL:
		return cJSON_CreateBool(*(const int *)field_at(c, f));
	case CK_ENUM: /* out of range: no JSON (cell_validate says why) */
		i = *(const int *)field_at(c, f) - f->base;
		return i >= 0 && i < f->n_names ? cJSON_CreateString(f->names[i]) : NULL;
	case CK_MODULES:
		return modules_json(c);
	default:
		return cJSON_CreateNumber(field_number(c, f));
	}
}

cJSON *cell_to_json(const struct cell *c)
{
	struct builder b = { 1 };
	cJSON *root = cJSON_CreateObject(), *o = root;
	const char *open = "";  /* the path whose parent o is */
	size_t open_len = 0;
	int written = 0;        /* the row before was written */

	if (!root)
		return NULL;
	for (int i = 0; i < cell_field_count && b.ok; i++) {
		const struct cell_field *f = &cell_fields[i];
		size_t plen = parent_len(f);

		if (plen != open_len || strncmp(f->path, open, plen) != 0) {
			char name[64];

			snprintf(name, sizeof name, "%.*s", (int)plen, f->path);
			o = plen ? cJSON_AddObjectToObject(root, name) : root;
			b.ok &= o != NULL;
			if (!o)
				break;
			open = f->path;
			open_len = plen;
		}
		if ((f->presence == CP_WITH_PREV && !written) || (f->presence == CP_IF_SET && !field_is_set(c, f))) {
			written = 0;
			continue;
		}
		add_item(&b, o, field_key(f), field_json(c, f));
		written = 1;
	}
	if (!b.ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* --- reading ------------------------------------------------------------ */

struct reader {
	char *err;
	size_t errsz;
};

static const char *json_type_name(const cJSON *j)
{
	if (cJSON_IsString(j))
		return "a string";
	if (cJSON_IsNumber(j))
		return "a number";
	if (cJSON_IsBool(j))
		return "a boolean";
	if (cJSON_IsNull(j))
		return "null";
	if (cJSON_IsArray(j))
		return "an array";
	if (cJSON_IsObject(j))
		return "an object";
	return "an invalid value";
}

/* The keys of one object of the cell (the top: parent ""), in table
 * order: its fields' keys and, at the top, the sub-objects' names. */
#define OBJECT_KEYS_MAX 32 /* bits of check_keys' seen; training has 19 */
struct object_keys {
	int n;
	const char *key[OBJECT_KEYS_MAX];
	size_t len[OBJECT_KEYS_MAX];
	unsigned char optional[OBJECT_KEYS_MAX];
};

static void object_keys(struct object_keys *k, const char *parent, size_t plen)
{
	k->n = 0;
	for (int i = 0; i < cell_field_count; i++) {
		const struct cell_field *f = &cell_fields[i];
		size_t fl = parent_len(f);
		const char *key;
		size_t len;
		int optional;

		if (plen == 0 && fl > 0) { /* a sub-object's name: required */
			key = f->path;
			len = fl;
			optional = 0;
		} else if (fl == plen && strncmp(f->path, parent, plen) == 0) {
			key = field_key(f);
			len = strlen(key);
			optional = f->presence == CP_OPTIONAL || f->presence == CP_IF_SET || f->presence == CP_WITH_PREV;
		} else {
			continue;
		}
		if (k->n > 0 && k->len[k->n - 1] == len && strncmp(k->key[k->n - 1], key, len) == 0)
			continue;
		if (k->n == OBJECT_KEYS_MAX)
			die(EXIT_RUNTIME, "cell.c: more than %d fields in one object of the cell table", OBJECT_KEYS_MAX);
		k->key[k->n] = key;
		k->len[k->n] = len;
		k->optional[k->n] = (unsigned char)optional;
		k->n++;
	}
}

static int key_index(const struct object_keys *k, const char *s)
{
	for (int i = 0; s && i < k->n; i++)
		if (strlen(s) == k->len[i] && strncmp(k->key[i], s, k->len[i]) == 0)
			return i;
	return -1;
}

/* The object has exactly its keys, each once (cJSON keeps duplicates, and
 * a reader taking the first would silently ignore the second); only
 * optional fields may be absent. */
static int check_keys(struct reader *r, const cJSON *obj, const char *parent, size_t plen)
{
	struct object_keys k;
	unsigned seen = 0;
	const cJSON *child;
	const char *dot = plen ? "." : "";

	object_keys(&k, parent, plen);
	if (!cJSON_IsObject(obj) && plen == 0)
		return set_error(r->err, r->errsz, "cell: expected an object, got %s", json_type_name(obj));
	if (!cJSON_IsObject(obj))
		return set_error(r->err, r->errsz, "%.*s: expected an object, got %s", (int)plen, parent, json_type_name(obj));
	cJSON_ArrayForEach(child, obj) {
		int i = key_index(&k, child->string);

		if (i < 0)
			return set_error(r->err, r->errsz, "%.*s%s%s: unknown field", (int)plen, parent, dot,
			                 child->string ? child->string : "");
		if (seen & 1u << i)
			return set_error(r->err, r->errsz, "%.*s%s%.*s: duplicate field", (int)plen, parent, dot,
			                 (int)k.len[i], k.key[i]);
		seen |= 1u << i;
	}
	for (int i = 0; i < k.n; i++)
		if (!(seen & 1u << i) && !k.optional[i])
			return set_error(r->err, r->errsz, "%.*s%s%.*s: missing", (int)plen, parent, dot, (int)k.len[i], k.key[i]);
	return 0;
}

static int read_modules(struct reader *r, const cJSON *arr, struct cell *c)
{
	const cJSON *j;
	char list[256];
	int k = 0;

	if (!cJSON_IsArray(arr))
		return set_error(r->err, r->errsz, "lora.target_modules: expected an array, got %s", json_type_name(arr));
	c->lora.target_mask = 0;
	cJSON_ArrayForEach(j, arr) {
		int i = cJSON_IsString(j) ? lora_module_from_name(j->valuestring) : -1;

		if (!cJSON_IsString(j))
			return set_error(r->err, r->errsz, "lora.target_modules[%d]: expected a string, got %s", k, json_type_name(j));
		if (i < 0) {
			list_names(list, sizeof list, lora_module_names, CELL_MAX_TARGETS);
			return set_error(r->err, r->errsz, "lora.target_modules[%d]: unknown module \"%.64s\" (expected one of: %s)",
			                 k, j->valuestring, list);
		}
		if (c->lora.target_mask & 1u << i)
			return set_error(r->err, r->errsz, "lora.target_modules[%d]: \"%s\" is listed twice", k, j->valuestring);
		c->lora.target_mask |= 1u << i;
		k++;
	}
	if (k == 0)
		return set_error(r->err, r->errsz, "lora.target_modules: must not be empty");
	c->lora.n_targets = k;
	return 0;
}

/* One field from obj, its object (check_keys has run on it). */
static int read_field(struct reader *r, struct cell *c, const struct cell_field *f, const cJSON *obj)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, field_key(f));
	char list[256];
	int i;

	if (f->kind == CK_CONST) {
		if (!cJSON_IsString(j) || strcmp(j->valuestring, f->def_str) != 0)
			return set_error(r->err, r->errsz, "%s: expected \"%s\"", f->path, f->def_str);
		return 0;
	}
	if (j == NULL) { /* an optional field (check_keys) */
		if (f->kind == CK_STR)
			field_set_text(c, f, f->def_str);
		else
			field_set_number(c, f, f->def);
		return 0;
	}
	if (f->presence == CP_NULLABLE && cJSON_IsNull(j)) /* not known: 0 or NULL, as older cells wrote 0 */
		return 0;
	switch (f->kind) {
	case CK_STR:
		if (!cJSON_IsString(j))
			return set_error(r->err, r->errsz, "%s: expected a string, got %s", f->path, json_type_name(j));
		if (check_text(f->path, j->valuestring, f->max_len, r->err, r->errsz))
			return -1;
		field_set_text(c, f, j->valuestring);
		return 0;
	case CK_BOOL:
		if (!cJSON_IsBool(j))
			return set_error(r->err, r->errsz, "%s: expected true or false, got %s", f->path, json_type_name(j));
		field_set_number(c, f, cJSON_IsTrue(j));
		return 0;
	case CK_ENUM:
		if (!cJSON_IsString(j))
			return set_error(r->err, r->errsz, "%s: expected a string, got %s", f->path, json_type_name(j));
		if ((i = name_index(f->names, f->n_names, j->valuestring)) < 0) {
			list_names(list, sizeof list, f->names, f->n_names);
			return set_error(r->err, r->errsz, "%s: unknown %s \"%.64s\" (expected one of: %s)", f->path, f->what,
			                 j->valuestring, list);
		}
		field_set_number(c, f, f->base + i);
		return 0;
	case CK_MODULES:
		return read_modules(r, j, c);
	default: /* bounded first, so the conversion to an integer is defined */
		if (!cJSON_IsNumber(j))
			return set_error(r->err, r->errsz, "%s: expected a number, got %s", f->path, json_type_name(j));
		if (cell_bound_check(&f->bound, f->path, j->valuedouble, r->err, r->errsz))
			return -1;
		field_set_number(c, f, j->valuedouble);
		return 0;
	}
}

/* --- from a flag's text -------------------------------------------------- */

/* "q_proj,v_proj", or "all" (PEFT's "all-linear": every linear layer but
 * the output head, which is these seven) */
static int parse_modules(struct cell *c, const char *shown, const char *text, char *err, size_t errsz)
{
	unsigned mask = 0;
	char list[256], *copy, *tok, *save = NULL;

	if (strcmp(text, "all") == 0 || strcmp(text, "all-linear") == 0) {
		mask = (1u << CELL_MAX_TARGETS) - 1;
	} else {
		copy = xstrdup(text);
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			int m = lora_module_from_name(tok);

			if (m < 0) {
				list_names(list, sizeof list, lora_module_names, CELL_MAX_TARGETS);
				set_error(err, errsz, "%s: unknown module \"%.64s\" (expected a comma list of: %s; or all, all-linear)",
				          shown, tok, list);
				free(copy);
				return -1;
			}
			mask |= 1u << m;
		}
		free(copy);
		if (mask == 0)
			return set_error(err, errsz, "%s: names no module", shown);
	}
	c->lora.target_mask = mask;
	c->lora.n_targets = __builtin_popcount(mask);
	return 0;
}

int cell_field_parse(struct cell *c, const struct cell_field *f, const char *shown, const char *text,
                     char *err, size_t errsz)
{
	char list[256], *end;
	double v;
	int i;

	switch (f->kind) {
	case CK_CONST:
		return set_error(err, errsz, "%s: %s is fixed", shown, f->path);
	case CK_STR:
		if (check_text(shown, text, f->max_len, err, errsz))
			return -1;
		field_set_text(c, f, text);
		return 0;
	case CK_BOOL:
		if (f->flag_arg == NULL) /* --no-prefetch */
			v = 0;
		else if (strcmp(text, "on") == 0 || strcmp(text, "true") == 0)
			v = 1;
		else if (strcmp(text, "off") == 0 || strcmp(text, "false") == 0)
			v = 0;
		else
			return set_error(err, errsz, "%s: unknown value \"%s\" (expected one of: off, on, false, true)", shown,
			                 text);
		field_set_number(c, f, v);
		return 0;
	case CK_ENUM:
		if ((i = name_index(f->names, f->n_names, text)) < 0) {
			list_names(list, sizeof list, f->names, f->n_names);
			return set_error(err, errsz, "%s: unknown value \"%s\" (expected one of: %s)", shown, text, list);
		}
		field_set_number(c, f, f->base + i);
		return 0;
	case CK_MODULES:
		return parse_modules(c, shown, text, err, errsz);
	default:
		break;
	}
	/* A number: integers in decimal digits only, so "1e3" is no count. */
	if (*text == '\0' || isspace((unsigned char)*text))
		return set_error(err, errsz, "%s: not a number: %s", shown, text);
	errno = 0;
	v = f->kind == CK_NUM ? strtod(text, &end) : (double)strtoll(text, &end, 10);
	if (*end != '\0' || isnan(v))
		return set_error(err, errsz, "%s: not a number: %s", shown, text);
	if (errno == ERANGE && f->kind != CK_NUM)
		return set_error(err, errsz, "%s: %s: %s", shown, v < 0 ? "too small" : "too large", text);
	if (cell_bound_check(&f->bound, shown, v, err, errsz))
		return -1;
	field_set_number(c, f, v);
	return 0;
}

/* The object holding field f: obj itself at the top. */
static const cJSON *parent_of(const cJSON *obj, const struct cell_field *f)
{
	size_t plen = parent_len(f);
	char name[64];

	if (plen == 0)
		return obj;
	snprintf(name, sizeof name, "%.*s", (int)plen, f->path);
	return cJSON_GetObjectItemCaseSensitive(obj, name);
}

static int read_cell(struct reader *r, struct cell *c, const cJSON *obj)
{
	if (check_keys(r, obj, "", 0))
		return -1;
	/* The schema first: another one's fields would only confuse. */
	for (int i = 0; i < cell_field_count; i++)
		if (cell_fields[i].kind == CK_CONST && read_field(r, c, &cell_fields[i], obj))
			return -1;
	for (int i = 0; i < cell_field_count; i++) {
		const struct cell_field *f = &cell_fields[i];
		size_t plen = parent_len(f);

		if (plen > 0 && (i == 0 || parent_len(&cell_fields[i - 1]) != plen ||
		                 strncmp(cell_fields[i - 1].path, f->path, plen) != 0) &&
		    check_keys(r, parent_of(obj, f), f->path, plen))
			return -1;
	}
	for (int i = 0; i < cell_field_count; i++)
		if (cell_fields[i].kind != CK_CONST && read_field(r, c, &cell_fields[i], parent_of(obj, &cell_fields[i])))
			return -1;
	return cell_validate(c, r->err, r->errsz);
}

int cell_from_json(struct cell *c, const cJSON *obj, char *err, size_t errsz)
{
	struct reader r = { err, errsz };

	memset(c, 0, sizeof *c);
	if (read_cell(&r, c, obj) == 0)
		return 0;
	cell_free(c);
	return -1;
}
