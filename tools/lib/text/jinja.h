/* tools/lib/text/jinja.h: the subset of Jinja2 that model chat templates use,
 * rendered as transformers renders them (trim_blocks, lstrip_blocks,
 * loopcontrols; raise_exception, strftime_now, namespace, tojson with
 * ensure_ascii=False).  strftime_now formats the date the caller fixes
 * (jinja_render's today), never the clock: transformers reads the clock,
 * which would make a rerun give other ids, so without a date the call is
 * refused by name.
 *
 * Supported: text, {{ }}, {# #}, {% if/elif/else %}, {% for %} (tuple
 * targets, an inline `if` filter, else, loop.index/index0/revindex/
 * revindex0/first/last/length/previtem/nextitem, break/continue), {% set %}
 * (names, tuples, namespace attributes), {% generation %} (rendered as its
 * body), whitespace control {%- -%} {%+; expressions with literals,
 * lists, dicts, attributes, indexing and slicing (negative, steps), calls,
 * filters, tests, `in`, `~`, arithmetic, comparisons, and/or/not and
 * `a if c else b`.  Filters, tests, methods and globals are listed in
 * jinja_lib.c.  Anything else (an unknown tag, filter, test, method or
 * global) is an error naming it and its place: a template is rendered
 * exactly or not at all.
 *
 * Provenance: each output byte carries an origin, 0 for template text and
 * i+1 for a byte that came from messages[i].content (through string
 * filters, methods, slicing and concatenation).  Where such a content is
 * empty, its place in the output is kept as an anchor.
 *
 * Budgets: a template is code from a downloaded model, so parsing and
 * rendering are bounded whatever it does; past a budget the parse or the
 * render fails with "LINE:COL: ..." naming the budget.  CONTEXT is the
 * bytes of the context's JSON values (strings, and 16 a value).  Integers
 * are 64-bit and exact: an operation whose result does not fit (Python's
 * big integers) is refused by name, never wrapped. */
#ifndef POROS_JINJA_H
#define POROS_JINJA_H

#include <stddef.h>
#include <time.h>

#include <cjson/cJSON.h>

/* tags, brackets, unary operators and `not` inside each other */
#define JINJA_MAX_NESTING 256
/* lists and dicts inside each other, in the context or built by the template */
#define JINJA_MAX_VALUE_DEPTH 1000
/* evaluation steps: a node evaluated, or JINJA_SCAN_PER_STEP items scanned */
#define JINJA_MAX_STEPS(context) (20000000LL + 16LL * (long long)(context))
#define JINJA_SCAN_PER_STEP 64
/* iterations of all {% for %} loops together (and of their `if` filters) */
#define JINJA_MAX_ITERATIONS(context) (1000000LL + (long long)(context))
/* bytes of the rendered text */
#define JINJA_MAX_OUTPUT(context) (((size_t)8 << 20) + 4 * (size_t)(context))
/* bytes the render holds (values, the output with its origins) */
#define JINJA_MAX_RENDER_MEMORY(context) (((size_t)96 << 20) + 48 * (size_t)(context))
/* bytes the parse holds at its peak (its tokens with the tree), for a
 * template of len bytes */
#define JINJA_MAX_PARSE_MEMORY(len) (((size_t)16 << 20) + 128 * (size_t)(len))

struct jinja_template;

/* src[0..len) is the template; err gets "LINE:COL: what" on failure.
 * 0 or -1. */
int jinja_parse(struct jinja_template **out, const char *src, size_t len, char *err, size_t errsz);
void jinja_free(struct jinja_template *t);

struct jinja_output {
	char *text;         /* NUL-terminated */
	size_t len;
	int *origin;        /* (len) */
	size_t n_anchor;
	size_t *anchor_pos; /* (n_anchor) byte offsets, ascending */
	int *anchor_origin; /* (n_anchor) */
};

/* Renders with the members of vars (a JSON object) as the context; with
 * taint_messages, vars.messages[i].content carries origin i+1; today (or
 * NULL: strftime_now is then an error) is what strftime_now formats
 * (tm_year, tm_mon, tm_mday, tm_wday, tm_yday, tm_hour, tm_min, tm_sec).
 * 0, or -1 with err ("LINE:COL: what"; raise_exception's message as
 * "LINE:COL: template raised: MESSAGE").  out is freed with
 * jinja_output_free. */
int jinja_render(struct jinja_output *out, const struct jinja_template *t, const cJSON *vars, int taint_messages,
		 const struct tm *today, char *err, size_t errsz);

/* "YYYY-MM-DD" (a real calendar date) into *out at 00:00:00, with its
 * weekday and day of the year.  0, or -1 with err. */
int jinja_parse_date(struct tm *out, const char *ymd, char *err, size_t errsz);
void jinja_output_free(struct jinja_output *out);

#endif
