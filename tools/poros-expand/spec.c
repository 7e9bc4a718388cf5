/* tools/poros-expand/spec.c: the bench spec (man/poros-spec.5) from a
 * YAML tree to a checked struct spec.  Each section is a table of fields;
 * ranges come from the cell's own table (cell_bound_find), so a spec that
 * passes here makes cells that cell_from_json accepts. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/records.h"
#include "model/model.h"
#include "spec.h"
#include "util/util.h"
#include "yaml_tree.h"
#include "yaml_value.h"

/* An arch slug of at most this many bytes keeps every cell_id (method,
 * arch, precision) within name_is_safe's 128. */
#define ARCH_MAX 100

enum fkind {
	FK_INT,      /* int, bounded */
	FK_SEED,     /* unsigned long long, up to 2^32 - 1 */
	FK_REAL,     /* double, bounded */
	FK_BOOL,     /* int 0/1 */
	FK_TEXT,     /* char *, up to max_len bytes */
	FK_DIR,      /* char *, an output directory */
	FK_ENUM,     /* an int: base + the index of its name in the cell row's names */
	FK_TARGETS,  /* lora target mask: a list of projections or "all-linear" */
};

struct field {
	const char *key;
	enum fkind kind;
	unsigned char required;
	/* Given values must be > 0 where a cell also takes 0, which there
	 * means "the spec did not say" (vram_gb, pcie_gen). */
	unsigned char positive;
	size_t offset; /* into struct spec, or struct spec_model for a model entry */
	size_t max_len; /* FK_TEXT, FK_DIR */
	const struct cell_field *row; /* the cell's row (FK_ENUM's names), or NULL */
};

#define MF(key, kind, req, member) { key, kind, req, 0, offsetof(struct spec_model, member), CELL_PATH_MAX, NULL }
#define NAME_MAX_LEN CELL_NAME_MAX

/* A model entry and the reporting section are the spec's own; hardware,
 * training, lora and poros are the cell's rows of those sections
 * (tools/lib/records/cell.c), built by spec_sections below. */
static const struct field reporting_fields[] = {
	{ "output_dir", FK_DIR, 0, 0, offsetof(struct spec, shared.output_dir), CELL_PATH_MAX, NULL },
	{ "html", FK_BOOL, 0, 0, offsetof(struct spec, reporting.html), 0, NULL },
	{ "markdown", FK_BOOL, 0, 0, offsetof(struct spec, reporting.markdown), 0, NULL },
	{ "emit_json", FK_BOOL, 0, 0, offsetof(struct spec, reporting.emit_json), 0, NULL },
};
static const struct field model_fields[] = {
	MF("model_id", FK_TEXT, 1, model_id),
	{ "display_name", FK_TEXT, 0, 0, offsetof(struct spec_model, display_name), NAME_MAX_LEN, NULL },
	MF("param_count_b", FK_REAL, 0, param_count_b),
};

#define NFIELDS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define SECTION_MAX 32 /* fields of one section; the cell's largest, training, has ~20 */

struct section {
	const char *name;
	const struct field *fields;
	int n;
};

static const char *const cell_sections[] = { "hardware", "training", "lora", "poros" };
#define NCELL_SECTIONS NFIELDS(cell_sections)
#define NSECTIONS (NCELL_SECTIONS + 1)

/* The cell row f as a key of its spec section. */
static struct field field_of_row(const struct cell_field *f, size_t prefix)
{
	struct field x = { .key = f->path + prefix, .row = f, .max_len = f->max_len,
	                   .required = f->spec == CS_REQUIRED, .positive = f->spec == CS_POSITIVE,
	                   .offset = offsetof(struct spec, shared) + f->offset };

	switch (f->kind) {
	case CK_INT: x.kind = FK_INT; break;
	case CK_U64: x.kind = FK_SEED; break;
	case CK_NUM: x.kind = FK_REAL; break;
	case CK_BOOL: x.kind = FK_BOOL; break;
	case CK_STR: x.kind = f->text == CT_OUTPUT_DIR ? FK_DIR : FK_TEXT; break;
	case CK_ENUM: x.kind = FK_ENUM; break;
	case CK_MODULES: x.kind = FK_TARGETS; break;
	default: die(EXIT_RUNTIME, "cell field %s: a kind a spec cannot hold", f->path);
	}
	return x;
}

/* The spec's sections, in the order of top_keys: the cell's four, then
 * reporting.  Built once from cell_fields. */
static const struct section *spec_sections(void)
{
	static struct field rows[NCELL_SECTIONS][SECTION_MAX];
	static struct section sec[NSECTIONS];

	if (sec[0].name)
		return sec;
	for (int i = 0; i < NCELL_SECTIONS; i++) {
		size_t len = strlen(cell_sections[i]);

		sec[i].name = cell_sections[i];
		sec[i].fields = rows[i];
		for (int k = 0; k < cell_field_count; k++) {
			const struct cell_field *f = &cell_fields[k];

			if (f->spec == CS_NONE || f->derived || strncmp(f->path, cell_sections[i], len) != 0 ||
			    f->path[len] != '.')
				continue;
			if (sec[i].n == SECTION_MAX)
				die(EXIT_RUNTIME, "cell section %s: more than %d fields", cell_sections[i], SECTION_MAX);
			rows[i][sec[i].n++] = field_of_row(f, len + 1);
		}
	}
	sec[NCELL_SECTIONS] = (struct section){ "reporting", reporting_fields, NFIELDS(reporting_fields) };
	return sec;
}

static const char *const top_keys[] = {
	"spec_id", "hardware", "models", "methods", "precisions", "training", "lora", "poros", "reporting",
};
#define NTOP NFIELDS(top_keys)

/* --- describing what was found ------------------------------------------- */

/* s as a double-quoted, escaped, shortened string for a message. */
const char *quoted(const char *s, char *buf, size_t n)
{
	size_t o = 0, i;

	buf[o++] = '"';
	for (i = 0; s[i] && i < 60 && o + 8 < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, n - o, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	if (s[i] && o + 5 < n)
		o += (size_t)snprintf(buf + o, n - o, "...");
	snprintf(buf + o, n - o, "\"");
	return buf;
}


static int all_digits(const char *s, const char **end)
{
	const char *p = s;

	while (*p >= '0' && *p <= '9')
		p++;
	*end = p;
	return p > s;
}

/* What a plain scalar is under the YAML 1.2 core schema (decimal numbers
 * only); a quoted scalar is always a string. */
enum sclass classify(const struct ynode *n)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	static const char *const bools[] = { "true", "True", "TRUE", "false", "False", "FALSE" };
	static const char *const nonfinite[] = { ".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN" };
	const char *s = n->text, *p;
	int mantissa = 0, dot = 0;

	if (!n->plain)
		return SC_STRING;
	for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
		if (strcmp(s, nulls[i]) == 0)
			return SC_NULL;
	for (size_t i = 0; i < sizeof bools / sizeof *bools; i++)
		if (strcmp(s, bools[i]) == 0)
			return SC_BOOL;
	p = (*s == '-' || *s == '+') ? s + 1 : s;
	for (size_t i = 0; i < sizeof nonfinite / sizeof *nonfinite; i++)
		if (strcmp(p, nonfinite[i]) == 0)
			return SC_NONFINITE;
	mantissa = all_digits(p, &p);
	if (*p == '\0')
		return mantissa ? SC_INT : SC_STRING;
	if (*p == '.') {
		const char *q;

		dot = 1;
		mantissa |= all_digits(p + 1, &q);
		p = q;
	}
	if (!mantissa)
		return SC_STRING;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '-' || *p == '+')
			p++;
		if (!all_digits(p, &p))
			return SC_STRING;
	} else if (!dot) {
		return SC_STRING;
	}
	return *p == '\0' ? SC_FLOAT : SC_STRING;
}

/* "a mapping", "a list", "null", "\"ten\"", "the string \"10\"". */
const char *describe(const struct ynode *n, char *buf, size_t sz)
{
	char q[160];

	if (n->kind == YN_MAP)
		return "a mapping";
	if (n->kind == YN_SEQ)
		return "a list";
	if (!n->plain) {
		snprintf(buf, sz, "the string %s", quoted(n->text, q, sizeof q));
		return buf;
	}
	if (classify(n) == SC_NULL)
		return "null";
	return quoted(n->text, buf, sz);
}

/* --- scalars ------------------------------------------------------------- */

/* A plain number; what = "an integer" or "a number". */
double number_value(const char *file, const struct ynode *n, const char *path, int integer)
{
	const char *what = integer ? "an integer" : "a number";
	char d[200];
	enum sclass cls;
	double v;

	if (n->kind != YN_SCALAR || !n->plain)
		ytree_die(file, n, "%s: expected %s, got %s", path, what, describe(n, d, sizeof d));
	cls = classify(n);
	if (cls == SC_NONFINITE)
		ytree_die(file, n, "%s: must be a finite number, got %s", path, n->text);
	if (cls != SC_INT && (integer || cls != SC_FLOAT))
		ytree_die(file, n, "%s: expected %s, got %s", path, what, describe(n, d, sizeof d));
	errno = 0;
	v = strtod(n->text, NULL);
	if (errno == ERANGE)
		ytree_die(file, n, "%s: number out of range: %s", path, n->text);
	return v;
}

static void check_bound(const char *file, const struct ynode *n, const char *path, const char *bound_path,
                        int positive, double v)
{
	struct cell_bound b = *cell_bound_find(bound_path);
	char err[256];

	if (positive && b.min <= 0) {
		b.min = b.integer ? 1 : 0;
		b.min_open = !b.integer;
	}
	if (cell_bound_check(&b, path, v, err, sizeof err))
		ytree_die(file, n, "%s", err);
}

/* A string value; a plain number, boolean or null is refused, since in
 * YAML those are not strings (quote them to mean the text). */
const char *text_value(const char *file, const struct ynode *n, const char *path, size_t max)
{
	char d[200];
	const char *why;

	if (n->kind != YN_SCALAR)
		ytree_die(file, n, "%s: expected a string, got %s", path, describe(n, d, sizeof d));
	switch (classify(n)) {
	case SC_STRING:
		break;
	case SC_NULL:
		ytree_die(file, n, "%s: expected a string, got null", path);
	case SC_BOOL:
		ytree_die(file, n, "%s: expected a string, got the boolean %s (quote it to mean the text)", path, n->text);
	default:
		ytree_die(file, n, "%s: expected a string, got the number %s (quote it to mean the text)", path, n->text);
	}
	if ((why = cell_text_problem(n->text, max)) != NULL) {
		if (strcmp(why, "too long") == 0)
			ytree_die(file, n, "%s: too long (%zu bytes; at most %zu)", path, strlen(n->text), max);
		ytree_die(file, n, "%s: %s", path, why);
	}
	return n->text;
}

int bool_value(const char *file, const struct ynode *n, const char *path)
{
	char d[200];

	if (n->kind != YN_SCALAR || classify(n) != SC_BOOL)
		ytree_die(file, n, "%s: expected true or false, got %s", path, describe(n, d, sizeof d));
	return n->text[0] == 't' || n->text[0] == 'T';
}

/* A name out of names; what = "method", "precision", ... */
static int name_value(const char *file, const struct ynode *n, const char *path, const char *what,
                      const char *const *names, int count)
{
	const char *s = text_value(file, n, path, CELL_NAME_MAX);
	char list[256], q[160];

	for (int i = 0; i < count; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	list_names(list, sizeof list, names, count);
	ytree_die(file, n, "unknown %s %s (expected one of: %s)", what, quoted(s, q, sizeof q), list);
}

/* --- mappings ------------------------------------------------------------ */

const struct ynode *map_get(const struct ynode *map, const char *key)
{
	for (size_t i = 0; i + 1 < map->n; i += 2)
		if (strcmp(map->kids[i]->text, key) == 0)
			return map->kids[i + 1];
	return NULL;
}

/* Key i of map: a scalar, not seen before in this map, one of keys.
 * where: "at top level", "in training". */
static void check_key(const char *file, const struct ynode *map, size_t i, const char *where,
                      const char *const *keys, int n)
{
	const struct ynode *key = map->kids[i];
	char q[160], d[200], list[1024];
	const char *hint;

	if (key->kind != YN_SCALAR)
		ytree_die(file, key, "keys must be names, got %s %s", describe(key, d, sizeof d), where);
	for (size_t j = 0; j < i; j += 2)
		if (strcmp(map->kids[j]->text, key->text) == 0)
			ytree_die(file, key, "duplicate key %s %s (first at line %lu)", quoted(key->text, q, sizeof q),
			          where, map->kids[j]->line);
	for (int k = 0; k < n; k++)
		if (strcmp(keys[k], key->text) == 0)
			return;
	/* A cell field of this section that a spec does not set: say where
	 * it is set instead ("in training" and "training.eval_dataset"). */
	for (int k = 0; k < cell_field_count; k++) {
		const struct cell_field *f = &cell_fields[k];
		const char *dot = strchr(f->path, '.');

		if (f->spec == CS_NONE && f->flag && dot && strncmp(where, "in ", 3) == 0 &&
		    strlen(where + 3) == (size_t)(dot - f->path) && strncmp(where + 3, f->path, (size_t)(dot - f->path)) == 0 &&
		    strcmp(dot + 1, key->text) == 0)
			ytree_die(file, key, "%s is not a spec key: it is set per run, by poros-train %s", f->path, f->flag);
	}
	if ((hint = closest_name(key->text, keys, n)) != NULL)
		ytree_die(file, key, "unknown key %s %s (did you mean \"%s\"?)", quoted(key->text, q, sizeof q), where, hint);
	/* A field written one level too high: "steps" at top level. */
	const struct section *sections = spec_sections();

	for (int s = 0; strcmp(where, "at top level") == 0 && s < NSECTIONS; s++)
		for (int f = 0; f < sections[s].n; f++)
			if (strcmp(sections[s].fields[f].key, key->text) == 0)
				ytree_die(file, key, "unknown key %s %s (did you mean \"%s.%s\"?)", quoted(key->text, q, sizeof q),
				          where, sections[s].name, key->text);
	ytree_die(file, key, "unknown key %s %s (expected one of: %s)", quoted(key->text, q, sizeof q), where,
	          (list_names(list, sizeof list, keys, n), list));
}

void set_targets(const char *file, const struct ynode *n, const char *path, unsigned *mask)
{
	char list[256], q[160], d[200];

	list_names(list, sizeof list, lora_module_names, CELL_MAX_TARGETS);
	if (n->kind == YN_SCALAR && classify(n) == SC_STRING && strcmp(n->text, "all-linear") == 0) {
		*mask = (1u << CELL_MAX_TARGETS) - 1;
		return;
	}
	if (n->kind != YN_SEQ)
		ytree_die(file, n, "%s: expected a list of projections or \"all-linear\", got %s", path,
		          describe(n, d, sizeof d));
	if (n->n == 0)
		ytree_die(file, n, "%s: the list is empty (expected one or more of: %s)", path, list);
	*mask = 0;
	for (size_t i = 0; i < n->n; i++) {
		const struct ynode *item = n->kids[i];
		char ipath[200];
		const char *s;
		int m;

		snprintf(ipath, sizeof ipath, "%s[%zu]", path, i);
		s = text_value(file, item, ipath, CELL_NAME_MAX);
		if ((m = lora_module_from_name(s)) < 0)
			ytree_die(file, item, "unknown module %s (expected one of: %s; or \"all-linear\")",
			          quoted(s, q, sizeof q), list);
		if (*mask & 1u << m)
			ytree_die(file, item, "%s: %s is listed twice", path, quoted(s, q, sizeof q));
		*mask |= 1u << m;
	}
}

static void replace_string(char **slot, const char *v)
{
	free(*slot);
	*slot = xstrdup(v);
}

/* Stores the value n of field f (shown as path, ranged as bound_path) into
 * the struct at base. */
static void set_field(const char *file, const struct field *f, const struct ynode *n, const char *path,
                      const char *bound_path, void *base)
{
	char *slot = (char *)base + f->offset;
	const char *s, *why;
	char q[160];
	double v;

	switch (f->kind) {
	case FK_INT:
	case FK_SEED:
	case FK_REAL:
		v = number_value(file, n, path, f->kind != FK_REAL);
		check_bound(file, n, path, bound_path, f->positive, v);
		if (f->kind == FK_INT)
			*(int *)(void *)slot = (int)v;
		else if (f->kind == FK_REAL)
			*(double *)(void *)slot = v;
		else /* read as an integer, not through the double */
			*(unsigned long long *)(void *)slot = strtoull(n->text, NULL, 10);
		break;
	case FK_BOOL:
		*(int *)(void *)slot = bool_value(file, n, path);
		break;
	case FK_TEXT:
		replace_string((char **)(void *)slot, text_value(file, n, path, f->max_len));
		break;
	case FK_DIR:
		s = text_value(file, n, path, f->max_len);
		if ((why = cell_output_dir_problem(s)) != NULL)
			ytree_die(file, n, "%s: %s %s", path, quoted(s, q, sizeof q), why);
		replace_string((char **)(void *)slot, s);
		break;
	case FK_ENUM: /* the noun is the key: "unknown lr_schedule" */
		*(int *)(void *)slot =
			f->row->base + name_value(file, n, path, f->key, f->row->names, f->row->n_names);
		break;
	case FK_TARGETS:
		set_targets(file, n, path, (unsigned *)(void *)slot);
		break;
	}
}

/* Reads mapping map into base by the field table.  shown: the path in
 * messages ("training", "models[1]"); bound: the cell path prefix whose
 * ranges apply ("training", "model"). */
static void parse_fields(const char *file, const struct ynode *map, const char *shown, const char *bound,
                         const struct field *fields, int n, void *base)
{
	const char *keys[64]; /* a section's field names; the tables above have at most ~20 */
	char where[96], path[160], bpath[160], d[200];

	if (n > (int)(sizeof keys / sizeof *keys))
		die(EXIT_RUNTIME, "%s: %d fields in section %s, more than the parser holds", file, n, shown);
	if (map->kind != YN_MAP)
		ytree_die(file, map, "%s: expected a mapping, got %s", shown, describe(map, d, sizeof d));
	for (int k = 0; k < n; k++)
		keys[k] = fields[k].key;
	snprintf(where, sizeof where, "in %s", shown);
	for (size_t i = 0; i + 1 < map->n; i += 2) {
		const struct field *f = NULL;

		check_key(file, map, i, where, keys, n);
		for (int k = 0; k < n; k++)
			if (strcmp(fields[k].key, map->kids[i]->text) == 0)
				f = &fields[k];
		snprintf(path, sizeof path, "%s.%s", shown, f->key);
		snprintf(bpath, sizeof bpath, "%s.%s", bound, f->key);
		set_field(file, f, map->kids[i + 1], path, bpath, base);
	}
	for (int k = 0; k < n; k++)
		if (fields[k].required && !map_get(map, fields[k].key))
			ytree_die(file, map, "%s: missing required key \"%s\"", shown, fields[k].key);
}

/* --- lists --------------------------------------------------------------- */

/* A non-empty list of distinct names; out[] their indices. */
static int parse_name_list(const char *file, const struct ynode *n, const char *path, const char *what,
                           const char *const *names, int count, int *out)
{
	char list[256], d[200], q[160];
	unsigned long first_line[16] = { 0 };

	list_names(list, sizeof list, names, count);
	if (n->kind != YN_SEQ)
		ytree_die(file, n, "%s: expected a list, got %s", path, describe(n, d, sizeof d));
	if (n->n == 0)
		ytree_die(file, n, "%s: the list is empty (expected one or more of: %s)", path, list);
	for (size_t i = 0; i < n->n; i++) {
		char ipath[64];
		int k;

		snprintf(ipath, sizeof ipath, "%s[%zu]", path, i);
		k = name_value(file, n->kids[i], ipath, what, names, count);
		/* Twice the same arm would run it twice and skew the report. */
		if (first_line[k])
			ytree_die(file, n->kids[i], "%s: %s is listed twice (first at line %lu)", path,
			          quoted(names[k], q, sizeof q), first_line[k]);
		first_line[k] = n->kids[i]->line;
		out[i] = k;
	}
	return (int)n->n;
}

static void parse_model(const char *file, const struct ynode *n, size_t i, struct spec_model *m)
{
	char shown[48], d[200], q[160];
	const char *name;

	snprintf(shown, sizeof shown, "models[%zu]", i);
	m->line = n->line;
	m->col = n->col;
	if (n->kind == YN_SCALAR) {
		char path[64];

		snprintf(path, sizeof path, "%s.model_id", shown);
		m->model_id = xstrdup(text_value(file, n, path, CELL_PATH_MAX));
	} else if (n->kind == YN_MAP) {
		parse_fields(file, n, shown, "model", model_fields, NFIELDS(model_fields), m);
		m->param_count_given = map_get(n, "param_count_b") != NULL;
	} else {
		ytree_die(file, n, "%s: expected a model id or a mapping, got %s", shown, describe(n, d, sizeof d));
	}
	m->arch = slugify(m->model_id, 1);
	if (m->arch[0] == '\0')
		ytree_die(file, n, "%s.model_id: %s has no letters or digits after its last \"/\" to name the arch by",
		          shown, quoted(m->model_id, q, sizeof q));
	if (strlen(m->arch) > ARCH_MAX)
		ytree_die(file, n, "%s.model_id: its arch slug is %zu characters (at most %d)", shown, strlen(m->arch),
		          ARCH_MAX);
	if (!m->display_name) {
		name = strrchr(m->model_id, '/');
		m->display_name = xstrdup(name ? name + 1 : m->model_id);
	}
}

static void parse_models(struct spec *s, const struct ynode *n)
{
	char d[200], q[160], q2[160];

	if (n->kind != YN_SEQ)
		ytree_die(s->file, n, "models: expected a list, got %s", describe(n, d, sizeof d));
	if (n->n == 0)
		ytree_die(s->file, n, "models: the list is empty (expected one or more model ids)");
	if (n->n > SPEC_MAX_MODELS)
		ytree_die(s->file, n, "models: %zu models (at most %d)", n->n, SPEC_MAX_MODELS);
	s->models = xcalloc(n->n, sizeof *s->models);
	for (size_t i = 0; i < n->n; i++) {
		struct spec_model *m = &s->models[i];

		s->n_models = i + 1;
		parse_model(s->file, n->kids[i], i, m);
		for (size_t j = 0; j < i; j++) {
			if (strcmp(s->models[j].model_id, m->model_id) == 0)
				ytree_die(s->file, n->kids[i], "models[%zu]: duplicate model %s (first at line %lu)", i,
				          quoted(m->model_id, q, sizeof q), s->models[j].line);
			if (strcmp(s->models[j].arch, m->arch) == 0)
				ytree_die(s->file, n->kids[i],
				          "models[%zu]: %s and %s (line %lu) have the same arch \"%s\", so their cell ids would collide",
				          i, quoted(m->model_id, q, sizeof q), quoted(s->models[j].model_id, q2, sizeof q2),
				          s->models[j].line, m->arch);
		}
	}
}

/* --- the whole spec ------------------------------------------------------ */

static void set_defaults(struct spec *s)
{
	struct cell *c = &s->shared;

	memset(s, 0, sizeof *s);
	/* The cell table's defaults (hardware.gpu_name stays NULL, null in
	 * JSON, unless the spec names it; steps and seq_len are required). */
	cell_defaults(c);
	c->training.warmup_steps = -1; /* derived from steps when not given */
	c->lora.alpha = NAN; /* derived from rank when not given */
	s->reporting.html = s->reporting.markdown = s->reporting.emit_json = 1;
}

/* Checks that span fields of training, reported where they were written. */
static void check_training(struct spec *s, const struct ynode *training)
{
	struct cell *c = &s->shared;
	const struct ynode *warmup = map_get(training, "warmup_steps");
	long long tokens;

	/* The first step pays one-time costs (allocation, GEMM heuristics);
	 * by default it is warmup and not timed, when there is a second. */
	if (!warmup)
		c->training.warmup_steps = c->training.steps > 1 ? 1 : 0;
	else if (!cell_warmup_fits(c))
		ytree_die(s->file, warmup, "training.warmup_steps: must be less than training.steps (%d), got %d",
		          c->training.steps, c->training.warmup_steps);
	tokens = cell_tokens_per_step(c);
	if (tokens > (long long)cell_bound_find("tokens_per_step")->max)
		ytree_die(s->file, training,
		          "training: batch_size x seq_len x gradient_accumulation_steps = %lld tokens per step (at most %.0f)",
		          tokens, cell_bound_find("tokens_per_step")->max);
	c->tokens_per_step = tokens;
}

static void parse_top_entry(struct spec *s, const struct ynode *key, const struct ynode *val)
{
	int idx[METHOD_COUNT];
	char q[160];

	if (strcmp(key->text, "spec_id") == 0) {
		const char *id = text_value(s->file, val, "spec_id", CELL_NAME_MAX);

		if (!name_is_safe(id))
			ytree_die(s->file, val, "spec_id: %s is not a safe name (letters, digits, '.', '_' and '-'; "
			          "at most 128 bytes)", quoted(id, q, sizeof q));
		replace_string(&s->shared.spec_id, id);
	} else if (strcmp(key->text, "models") == 0) {
		parse_models(s, val);
	} else if (strcmp(key->text, "methods") == 0) {
		s->n_methods = parse_name_list(s->file, val, "methods", "method", method_names, METHOD_COUNT, idx);
		for (int i = 0; i < s->n_methods; i++)
			s->methods[i] = (enum method)idx[i];
	} else if (strcmp(key->text, "precisions") == 0) {
		s->n_precisions = parse_name_list(s->file, val, "precisions", "precision", precision_names,
		                                  PRECISION_COUNT, idx);
		for (int i = 0; i < s->n_precisions; i++)
			s->precisions[i] = (enum precision)idx[i];
	} else {
		const struct section *sections = spec_sections();

		for (int i = 0; i < NSECTIONS; i++)
			if (strcmp(key->text, sections[i].name) == 0)
				parse_fields(s->file, val, sections[i].name, sections[i].name, sections[i].fields,
				             sections[i].n, s);
		if (strcmp(key->text, "training") == 0)
			check_training(s, val);
	}
}

static void parse_spec(struct spec *s, const struct ynode *root, const char *output_dir)
{
	static const char *const required[] = { "spec_id", "models", "methods", "precisions", "training" };
	char d[200], q[160];
	const char *why;

	if (!root || (root->kind == YN_SCALAR && classify(root) == SC_NULL))
		ytree_die_at(s->file, 1, 1, "the spec is empty (expected a mapping with spec_id, models, methods, "
		             "precisions and training)");
	if (root->kind != YN_MAP)
		ytree_die(s->file, root, "the spec must be a mapping at top level, got %s", describe(root, d, sizeof d));
	for (size_t i = 0; i + 1 < root->n; i += 2) {
		check_key(s->file, root, i, "at top level", top_keys, NTOP);
		parse_top_entry(s, root->kids[i], root->kids[i + 1]);
	}
	for (size_t i = 0; i < sizeof required / sizeof *required; i++)
		if (!map_get(root, required[i]))
			ytree_die(s->file, root, "missing required key \"%s\"", required[i]);
	/* block checkpoints are blockwise's: a resident cell would be refused when it runs */
	for (int i = 0; s->shared.poros.checkpoints == CKPT_BLOCK && i < s->n_methods; i++)
		if (s->methods[i] == METHOD_RESIDENT)
			ytree_die(s->file, map_get(root, "poros"), "poros.checkpoints: block is the poros method's "
			          "(blockwise), and methods lists resident (poros-train refuses it there)");

	if (isnan(s->shared.lora.alpha))
		s->shared.lora.alpha = 2.0 * s->shared.lora.rank;
	s->shared.lora.n_targets = __builtin_popcount(s->shared.lora.target_mask);
	if (output_dir) {
		if ((why = cell_output_dir_problem(output_dir)) != NULL)
			die(EXIT_USAGE, "-o: %s %s", quoted(output_dir, q, sizeof q), why);
		replace_string(&s->shared.output_dir, output_dir);
	} else if (!s->shared.output_dir) {
		s->shared.output_dir = xasprintf("out/%s", s->shared.spec_id);
	}
	/* "out/x/" and "out/x" are one directory; keep one spelling in cells. */
	for (size_t n = strlen(s->shared.output_dir); n > 1 && s->shared.output_dir[n - 1] == '/'; n--)
		s->shared.output_dir[n - 1] = '\0';
}

void spec_load(struct spec *s, const char *file, const char *output_dir)
{
	struct ynode *root;
	struct stat st;
	char *text;
	size_t len;

	set_defaults(s);
	s->file = file;
	/* Refuse a huge regular file before reading it all into memory. */
	if (stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > YTREE_MAX_BYTES)
		die(EXIT_USAGE, "%s: %lld bytes is too large for a spec (at most %d)", file, (long long)st.st_size,
		    YTREE_MAX_BYTES);
	if ((text = read_whole_file(file, &len)) == NULL)
		diesys(EXIT_USAGE, "%s", file);
	if (len > YTREE_MAX_BYTES) {
		free(text);
		die(EXIT_USAGE, "%s: %zu bytes is too large for a spec (at most %d)", file, len, YTREE_MAX_BYTES);
	}
	root = ytree_load(file, text, len);
	parse_spec(s, root, output_dir);
	ytree_free(root);
	free(text);
}

/* Four significant digits: 7615616512 parameters -> 7.616 (billions). */
static double billions(long long params)
{
	double b = (double)params / 1e9, scale;

	if (b <= 0)
		return 0;
	scale = pow(10, 4 - ceil(log10(b)));
	return round(b * scale) / scale;
}

void spec_resolve_models(struct spec *s)
{
	char *configs_dir = poros_resource("configs/models");

	for (size_t i = 0; i < s->n_models; i++) {
		struct spec_model *m = &s->models[i];
		struct model_config mc;
		char err[1024];

		if (model_config_resolve(&mc, m->model_id, configs_dir, err, sizeof err) < 0) {
			/* Not fatal: the trainer resolves real checkpoints itself. */
			warnmsg("%s:%lu:%lu: warning: %s", s->file, m->line, m->col, err);
			continue;
		}
		if (!m->param_count_given)
			m->param_count_b = billions(model_config_param_count(&mc));
		model_config_free(&mc);
	}
	free(configs_dir);
}

void spec_free(struct spec *s)
{
	for (size_t i = 0; i < s->n_models; i++) {
		free(s->models[i].model_id);
		free(s->models[i].display_name);
		free(s->models[i].arch);
	}
	free(s->models);
	cell_free(&s->shared);
}

size_t spec_cell_count(const struct spec *s)
{
	return s->n_models * (size_t)s->n_methods * (size_t)s->n_precisions;
}

void spec_cell(const struct spec *s, size_t i, struct cell *c)
{
	size_t per_model = (size_t)s->n_methods * (size_t)s->n_precisions;
	const struct spec_model *m = &s->models[i / per_model];

	cell_copy(c, &s->shared);
	c->method = s->methods[i % per_model / (size_t)s->n_precisions];
	c->precision = s->precisions[i % (size_t)s->n_precisions];
	c->model.model_id = xstrdup(m->model_id);
	c->model.display_name = xstrdup(m->display_name);
	c->model.arch = xstrdup(m->arch);
	c->model.param_count_b = m->param_count_b;
	c->cell_id = cell_make_id(c->method, m->arch, c->precision);
}

cJSON *spec_to_json(const struct spec *s)
{
	static const char *const shared_sections[] = { "hardware", "training", "lora", "poros" };
	cJSON *root = cJSON_CreateObject(), *models, *list, *rep, *ids, *hashes, *first;
	struct cell c;
	int ok = root != NULL;

	if (!ok)
		return NULL;
	/* The shared sections come from a cell's own JSON, so spec.json and
	 * the cells can never print them differently. */
	spec_cell(s, 0, &c);
	first = cell_to_json(&c);
	cell_free(&c);
	ok &= first != NULL;
	ok &= cJSON_AddStringToObject(root, "schema", "poros.spec/1") != NULL;
	ok &= cJSON_AddStringToObject(root, "spec_id", s->shared.spec_id) != NULL;
	ok &= cJSON_AddStringToObject(root, "source", s->file) != NULL;
	if (first)
		cJSON_AddItemToObject(root, "hardware", cJSON_DetachItemFromObjectCaseSensitive(first, "hardware"));
	ok &= (models = cJSON_AddArrayToObject(root, "models")) != NULL;
	for (size_t i = 0; models && i < s->n_models; i++) {
		cJSON *m = cJSON_CreateObject();

		ok &= m != NULL && cJSON_AddItemToArray(models, m);
		ok &= m && cJSON_AddStringToObject(m, "model_id", s->models[i].model_id) != NULL;
		ok &= m && cJSON_AddStringToObject(m, "display_name", s->models[i].display_name) != NULL;
		/* 0: neither given nor counted from a model config: unknown */
		ok &= m && (s->models[i].param_count_b > 0
		                ? cJSON_AddNumberToObject(m, "param_count_b", s->models[i].param_count_b)
		                : cJSON_AddNullToObject(m, "param_count_b")) != NULL;
		ok &= m && cJSON_AddStringToObject(m, "arch", s->models[i].arch) != NULL;
	}
	ok &= (list = cJSON_AddArrayToObject(root, "methods")) != NULL;
	for (int i = 0; list && i < s->n_methods; i++)
		ok &= cJSON_AddItemToArray(list, cJSON_CreateString(method_names[s->methods[i]]));
	ok &= (list = cJSON_AddArrayToObject(root, "precisions")) != NULL;
	for (int i = 0; list && i < s->n_precisions; i++)
		ok &= cJSON_AddItemToArray(list, cJSON_CreateString(precision_names[s->precisions[i]]));
	for (size_t i = 1; first && i < sizeof shared_sections / sizeof *shared_sections; i++)
		cJSON_AddItemToObject(root, shared_sections[i],
		                      cJSON_DetachItemFromObjectCaseSensitive(first, shared_sections[i]));
	ok &= (rep = cJSON_AddObjectToObject(root, "reporting")) != NULL;
	ok &= rep && cJSON_AddStringToObject(rep, "output_dir", s->shared.output_dir) != NULL;
	ok &= rep && cJSON_AddBoolToObject(rep, "html", s->reporting.html) != NULL;
	ok &= rep && cJSON_AddBoolToObject(rep, "markdown", s->reporting.markdown) != NULL;
	ok &= rep && cJSON_AddBoolToObject(rep, "emit_json", s->reporting.emit_json) != NULL;
	ok &= (ids = cJSON_AddArrayToObject(root, "cells")) != NULL;
	ok &= (hashes = cJSON_AddObjectToObject(root, "config_hashes")) != NULL;
	for (size_t i = 0; ids && hashes && i < spec_cell_count(s); i++) {
		char hash[CELL_HASH_LEN + 1];

		spec_cell(s, i, &c);
		cell_config_hash(hash, &c);
		ok &= cJSON_AddItemToArray(ids, cJSON_CreateString(c.cell_id));
		ok &= cJSON_AddStringToObject(hashes, c.cell_id, hash) != NULL;
		cell_free(&c);
	}
	cJSON_Delete(first);
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}
