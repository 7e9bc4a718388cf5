/* tools/lib/text/jinja_lib.c: the filters, tests, methods and globals of the
 * Jinja subset (jinja.h), with Python's semantics where chat templates
 * depend on them.  Anything not listed here is refused by name.
 *
 * filters  abs capitalize count d default first float int items join last
 *          length list lower map reject rejectattr replace reverse safe
 *          select selectattr string title tojson trim upper
 * tests    boolean callable defined divisibleby eq equalto even false
 *          float ge gt in integer iterable le lower lt mapping ne none
 *          number odd sameas sequence string true undefined upper
 *          (and ==, !=, <, <=, >, >=)
 * methods  strings: capitalize count endswith find join lower lstrip
 *          replace rstrip split startswith strip title upper;
 *          mappings: get items keys values
 * globals  dict namespace raise_exception range strftime_now (of the
 *          caller's date only: format_date) */
#include "jinja_int.h"

#include <math.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The argument at position pos, or named kw; NULL when not given. */
static struct jv *arg(const struct jnode *n, struct jv *args, int nargs, int pos, const char *kw)
{
	int p = 0;

	for (int i = 0; i < nargs; i++) {
		const char *k = n->kw ? n->kw[i] : NULL;
		if (k == NULL && p++ == pos)
			return &args[i];
		if (k && kw && strcmp(k, kw) == 0)
			return &args[i];
	}
	return NULL;
}

static void check_args(struct jctx *c, const struct jnode *n, int nargs, int max, const char *what)
{
	if (nargs > max)
		jfail(c, n, "%s takes at most %d argument%s", what, max, max == 1 ? "" : "s");
	for (int i = 0; i < nargs && n->kw; i++)
		if (n->kw[i] && strcmp(n->kw[i], "indent") && strcmp(n->kw[i], "boolean") &&
		    strcmp(n->kw[i], "attribute") && strcmp(n->kw[i], "d") && strcmp(n->kw[i], "default_value") &&
		    strcmp(n->kw[i], "count") && strcmp(n->kw[i], "sort_keys") && strcmp(n->kw[i], "separators"))
			jfail(c, n, "%s: unsupported keyword argument \"%s\"", what, n->kw[i]);
}

static struct jstr *need_str(struct jctx *c, const struct jnode *n, struct jv *v, const char *what)
{
	if (v == NULL || v->t != JV_STR)
		jfail(c, n, "%s needs a string, not %s", what, v ? jv_type_name(*v) : "nothing");
	return v->u.s;
}

static struct jv mkbool(int b) { return (struct jv){ .t = JV_BOOL, .u.b = b != 0 }; }
static struct jv mkint(long long i) { return (struct jv){ .t = JV_INT, .u.i = i }; }

/* ---- UTF-8 and white space ------------------------------------------- */

/* The code point at s[i] and its length in *len. */
static unsigned decode(const char *s, size_t n, size_t i, size_t *len)
{
	unsigned char b = (unsigned char)s[i];
	size_t k = b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
	unsigned cp = k == 1 ? b : k == 2 ? b & 0x1f : k == 3 ? b & 0x0f : b & 0x07;

	if (i + k > n)
		k = n - i;
	for (size_t j = 1; j < k; j++)
		cp = cp << 6 | ((unsigned char)s[i + j] & 0x3f);
	*len = k;
	return cp;
}

/* The code point ending at s[i-1], its start in *start. */
static unsigned decode_back(const char *s, size_t n, size_t i, size_t *start)
{
	size_t k = i - 1, len;

	while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
		k--;
	*start = k;
	return decode(s, n, k, &len);
}

/* Python's str.isspace */
static int is_space_cp(unsigned cp)
{
	return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
	       cp == 0x3000;
}

static int in_set(unsigned cp, const struct jstr *chars)
{
	size_t len;

	if (chars == NULL)
		return is_space_cp(cp);
	for (size_t i = 0; i < chars->n; i += len)
		if (decode(chars->p, chars->n, i, &len) == cp)
			return 1;
	return 0;
}

/* which: 1 left, 2 right, 3 both */
static struct jv strip(struct jctx *c, const struct jstr *s, const struct jstr *chars, int which)
{
	size_t a = 0, b = s->n, len, start;

	while ((which & 1) && a < b && in_set(decode(s->p, s->n, a, &len), chars))
		a += len;
	while ((which & 2) && b > a && in_set(decode_back(s->p, s->n, b, &start), chars))
		b = start;
	return jv_substr(c, s, a, b);
}

static int all_ascii(const struct jstr *s)
{
	for (size_t i = 0; i < s->n; i++)
		if ((unsigned char)s->p[i] >= 0x80)
			return 0;
	return 1;
}

/* mode: 'l' lower, 'u' upper, 't' title, 'c' capitalize (ASCII only: the
 * Unicode tables are not here, so other text is refused) */
static struct jv change_case(struct jctx *c, const struct jnode *n, const struct jstr *s, char mode)
{
	struct jbuf b = { 0 };
	int start_word = 1;

	if (!all_ascii(s))
		jfail(c, n, "changing the case of non-ASCII text is not supported");
	for (size_t i = 0; i < s->n; i++) {
		char ch = s->p[i], lo = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch,
		     up = ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch;
		int alpha = lo >= 'a' && lo <= 'z';
		char o = mode == 'l' ? lo : mode == 'u' ? up : mode == 't' ? (start_word ? up : lo) : (i == 0 ? up : lo);
		jbuf_put(c, &b, &o, 1, s->org ? s->org[i] : 0);
		start_word = !alpha;
	}
	return jv_from_buf(c, &b);
}

static long long find(const struct jstr *hay, const struct jstr *needle, size_t from)
{
	for (size_t i = from; i + needle->n <= hay->n; i++)
		if (memcmp(hay->p + i, needle->p, needle->n) == 0)
			return (long long)i;
	return -1;
}

static struct jv replace(struct jctx *c, const struct jnode *n, const struct jstr *s, const struct jstr *old,
			 const struct jstr *new, long long count)
{
	struct jbuf b = { 0 };
	size_t at = 0;
	long long done = 0;

	if (old->n == 0)
		jfail(c, n, "replace of an empty string is not supported");
	for (;;) {
		long long k = count >= 0 && done >= count ? -1 : find(s, old, at);
		if (k < 0)
			break;
		jbuf_put_str(c, &b, s, at, (size_t)k);
		jbuf_put_str(c, &b, new, 0, new->n);
		at = (size_t)k + old->n;
		done++;
	}
	jbuf_put_str(c, &b, s, at, s->n);
	return jv_from_buf(c, &b);
}

static struct jv split(struct jctx *c, const struct jnode *n, const struct jstr *s, const struct jstr *sep,
		       long long maxsplit)
{
	struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
	size_t at = 0, len;
	long long done = 0;

	if (sep && sep->n == 0)
		jfail(c, n, "split: empty separator");
	if (sep) {
		for (;;) {
			long long k = maxsplit >= 0 && done >= maxsplit ? -1 : find(s, sep, at);
			if (k < 0)
				break;
			jlist_push(c, out.u.l, jv_substr(c, s, at, (size_t)k));
			at = (size_t)k + sep->n;
			done++;
		}
		jlist_push(c, out.u.l, jv_substr(c, s, at, s->n));
		return out;
	}
	while (at < s->n) {
		size_t w;
		while (at < s->n && is_space_cp(decode(s->p, s->n, at, &len)))
			at += len;
		if (at >= s->n)
			break;
		if (maxsplit >= 0 && done >= maxsplit) {
			size_t end = s->n, start;
			while (end > at && is_space_cp(decode_back(s->p, s->n, end, &start)))
				end = start;
			jlist_push(c, out.u.l, jv_substr(c, s, at, end));
			break;
		}
		for (w = at; w < s->n && !is_space_cp(decode(s->p, s->n, w, &len)); w += len)
			;
		jlist_push(c, out.u.l, jv_substr(c, s, at, w));
		at = w;
		done++;
	}
	return out;
}

static long long length_of(struct jctx *c, const struct jnode *n, struct jv v)
{
	long long k = 0;

	switch (v.t) {
	case JV_STR:
		for (size_t i = 0; i < v.u.s->n; i++)
			k += ((unsigned char)v.u.s->p[i] & 0xc0) != 0x80;
		return k;
	case JV_LIST: return (long long)v.u.l->n;
	case JV_DICT: return (long long)v.u.d->n;
	case JV_UNDEF: return 0;
	default: jfail(c, n, "%s has no length", jv_type_name(v));
	}
}

/* ---- tojson: json.dumps(ensure_ascii=False) ------------------------- */

static void json_str(struct jctx *c, struct jbuf *b, const struct jstr *s)
{
	jbuf_put(c, b, "\"", 1, 0);
	for (size_t i = 0; i < s->n; i++) {
		unsigned char ch = (unsigned char)s->p[i];
		int org = s->org ? s->org[i] : 0;
		char esc[8];
		const char *e = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r"
			: ch == '\t' ? "\\t" : ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : NULL;
		if (e)
			jbuf_put(c, b, e, 2, org);
		else if (ch < 0x20) {
			snprintf(esc, sizeof esc, "\\u%04x", ch);
			jbuf_put(c, b, esc, 6, org);
		} else
			jbuf_put(c, b, s->p + i, 1, org);
	}
	jbuf_put(c, b, "\"", 1, 0);
}

static void newline(struct jctx *c, struct jbuf *b, int indent, int level)
{
	jbuf_put(c, b, "\n", 1, 0);
	for (int i = 0; i < indent * level; i++)
		jbuf_put(c, b, " ", 1, 0);
}

/* What goes before item i of a list or dict at level: the separator after
 * the first, then with an indent the item's own line. */
static void item_start(struct jctx *c, struct jbuf *b, size_t i, int indent, int level)
{
	const char *item_sep = indent >= 0 ? "," : ", ";

	if (i)
		jbuf_put(c, b, item_sep, strlen(item_sep), 0);
	if (indent >= 0)
		newline(c, b, indent, level + 1);
}

/* A list's or dict's closing bracket, on its own line when indented and
 * not empty. */
static void close_bracket(struct jctx *c, struct jbuf *b, const char *bracket, size_t n, int indent, int level)
{
	if (indent >= 0 && n)
		newline(c, b, indent, level);
	jbuf_put(c, b, bracket, 1, 0);
}

void jtojson(struct jctx *c, const struct jnode *at, struct jbuf *b, struct jv v, int indent, int level)
{

	switch (v.t) {
	case JV_NONE: jbuf_put(c, b, "null", 4, 0); return;
	case JV_BOOL: jbuf_put(c, b, v.u.b ? "true" : "false", v.u.b ? 4 : 5, 0); return;
	case JV_INT: case JV_FLOAT:
		if (v.t == JV_FLOAT && (isnan(v.u.f) || isinf(v.u.f))) {
			const char *s = isnan(v.u.f) ? "NaN" : v.u.f > 0 ? "Infinity" : "-Infinity";
			jbuf_put(c, b, s, strlen(s), 0);
			return;
		}
		jv_to_buf(c, b, v, 0);
		return;
	case JV_STR: json_str(c, b, v.u.s); return;
	case JV_LIST:
		jbuf_put(c, b, "[", 1, 0);
		for (size_t i = 0; i < v.u.l->n; i++) {
			item_start(c, b, i, indent, level);
			jtojson(c, at, b, v.u.l->v[i], indent, level + 1);
		}
		close_bracket(c, b, "]", v.u.l->n, indent, level);
		return;
	case JV_DICT:
		if (v.u.d->is_ns)
			jfail(c, at, "tojson: a namespace is not JSON serializable");
		jbuf_put(c, b, "{", 1, 0);
		for (size_t i = 0; i < v.u.d->n; i++) {
			item_start(c, b, i, indent, level);
			json_str(c, b, v.u.d->k[i]);
			jbuf_put(c, b, ": ", 2, 0);
			jtojson(c, at, b, v.u.d->v[i], indent, level + 1);
		}
		close_bracket(c, b, "}", v.u.d->n, indent, level);
		return;
	default:
		jfail(c, at, "tojson: %s is not JSON serializable", jv_type_name(v));
	}
}

/* ---- filters --------------------------------------------------------- */

static int run_test(struct jctx *c, const struct jnode *n, const char *name, struct jv v, struct jv *args, int nargs);

/* select/reject(test, args...) and selectattr/rejectattr(attr, test, args...) */
static struct jv select_items(struct jctx *c, const struct jnode *n, struct jv seq, struct jv *args, int nargs,
			      int keep, int by_attr)
{
	struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
	int first = by_attr ? 1 : 0;
	const struct jstr *attr = by_attr ? need_str(c, n, arg(n, args, nargs, 0, NULL), n->s) : NULL;
	const struct jstr *test = nargs > first ? need_str(c, n, &args[first], n->s) : NULL;
	char name[64];

	if (seq.t == JV_UNDEF)
		return out;
	if (seq.t != JV_LIST)
		jfail(c, n, "%s needs a list, not %s", n->s, jv_type_name(seq));
	snprintf(name, sizeof name, "%.*s", test ? (int)test->n : 0, test ? test->p : "");
	for (size_t i = 0; i < seq.u.l->n; i++) {
		struct jv item = seq.u.l->v[i], x = item;
		int ok;
		if (attr) {
			struct jv *f = item.t == JV_DICT ? jdict_get(item.u.d, attr->p, attr->n) : NULL;
			x = f ? *f : (struct jv){ .t = JV_UNDEF };
		}
		ok = test ? run_test(c, n, name, x, args + first + 1, nargs - first - 1) : jtruthy(x);
		if (ok == keep)
			jlist_push(c, out.u.l, item);
	}
	return out;
}

struct jv jfilter(struct jctx *c, const struct jnode *n, struct jv v, struct jv *args, int nargs)
{
	const char *f = n->s;
	struct jv *a0 = arg(n, args, nargs, 0, NULL);

	if (strcmp(f, "trim") == 0) {
		check_args(c, n, nargs, 1, "trim");
		return strip(c, need_str(c, n, &v, "trim"), a0 ? need_str(c, n, a0, "trim") : NULL, 3);
	}
	if (strcmp(f, "length") == 0 || strcmp(f, "count") == 0)
		return mkint(length_of(c, n, v));
	if (strcmp(f, "tojson") == 0) {
		struct jv *ind = arg(n, args, nargs, 0, "indent");
		struct jbuf b = { 0 };
		check_args(c, n, nargs, 1, "tojson");
		if (ind && ind->t != JV_INT && ind->t != JV_NONE)
			jfail(c, n, "tojson: indent must be an integer");
		jtojson(c, n, &b, v, ind && ind->t == JV_INT ? (int)ind->u.i : -1, 0);
		return jv_from_buf(c, &b);
	}
	if (strcmp(f, "string") == 0 || strcmp(f, "safe") == 0)
		return strcmp(f, "safe") == 0 ? v : jv_to_string(c, v);
	if (strcmp(f, "first") == 0 || strcmp(f, "last") == 0) {
		if (v.t == JV_LIST)
			return v.u.l->n ? v.u.l->v[f[0] == 'f' ? 0 : v.u.l->n - 1] : (struct jv){ .t = JV_UNDEF };
		if (v.t == JV_STR) {
			struct jv out = jv_substr(c, v.u.s, 0, 0);
			size_t len, start;
			if (v.u.s->n == 0)
				return (struct jv){ .t = JV_UNDEF };
			if (f[0] == 'f') {
				decode(v.u.s->p, v.u.s->n, 0, &len);
				return jv_substr(c, v.u.s, 0, len);
			}
			decode_back(v.u.s->p, v.u.s->n, v.u.s->n, &start);
			(void)out;
			return jv_substr(c, v.u.s, start, v.u.s->n);
		}
		jfail(c, n, "%s needs a list or a string, not %s", f, jv_type_name(v));
	}
	if (strcmp(f, "default") == 0 || strcmp(f, "d") == 0) {
		struct jv *dv = arg(n, args, nargs, 0, "default_value"), *boolean = arg(n, args, nargs, 1, "boolean");
		struct jv def = dv ? *dv : jv_str_lit(c, "", 0);
		check_args(c, n, nargs, 2, "default");
		if (v.t == JV_UNDEF || (boolean && jtruthy(*boolean) && !jtruthy(v)))
			return def;
		return v;
	}
	if (strcmp(f, "items") == 0) {
		struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
		if (v.t == JV_UNDEF)
			return out;
		if (v.t != JV_DICT)
			jfail(c, n, "items needs a mapping, not %s", jv_type_name(v));
		for (size_t i = 0; i < v.u.d->n; i++) {
			struct jv pair = { .t = JV_LIST, .u.l = jlist_new(c) };
			jlist_push(c, pair.u.l, (struct jv){ .t = JV_STR, .u.s = v.u.d->k[i] });
			jlist_push(c, pair.u.l, v.u.d->v[i]);
			jlist_push(c, out.u.l, pair);
		}
		return out;
	}
	if (strcmp(f, "lower") == 0 || strcmp(f, "upper") == 0 || strcmp(f, "title") == 0 ||
	    strcmp(f, "capitalize") == 0)
		return change_case(c, n, need_str(c, n, &v, f), f[0] == 'l' ? 'l' : f[0] == 'u' ? 'u' : f[0] == 't' ? 't'
												     : 'c');
	if (strcmp(f, "replace") == 0) {
		struct jv *cnt = arg(n, args, nargs, 2, "count");
		check_args(c, n, nargs, 3, "replace");
		return replace(c, n, need_str(c, n, &v, f), need_str(c, n, a0, f), need_str(c, n, arg(n, args, nargs, 1, NULL), f),
			       cnt && cnt->t == JV_INT ? cnt->u.i : -1);
	}
	if (strcmp(f, "join") == 0) {
		struct jv *sep = arg(n, args, nargs, 0, "d"), *attr = arg(n, args, nargs, 1, "attribute");
		struct jbuf b = { 0 };
		struct jlist *l;
		check_args(c, n, nargs, 2, "join");
		if (v.t != JV_LIST)
			jfail(c, n, "join needs a list, not %s", jv_type_name(v));
		l = v.u.l;
		for (size_t i = 0; i < l->n; i++) {
			struct jv item = l->v[i];
			if (i && sep)
				jv_to_buf(c, &b, *sep, 0);
			if (attr) {
				struct jv *x = item.t == JV_DICT && attr->t == JV_STR ? jdict_get(item.u.d, attr->u.s->p, attr->u.s->n)
										   : NULL;
				item = x ? *x : (struct jv){ .t = JV_UNDEF };
			}
			jv_to_buf(c, &b, item, 0);
		}
		return jv_from_buf(c, &b);
	}
	if (strcmp(f, "list") == 0) {
		struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
		if (v.t == JV_LIST)
			return v;
		if (v.t == JV_DICT) {
			for (size_t i = 0; i < v.u.d->n; i++)
				jlist_push(c, out.u.l, (struct jv){ .t = JV_STR, .u.s = v.u.d->k[i] });
			return out;
		}
		if (v.t == JV_STR) {
			size_t len;
			for (size_t i = 0; i < v.u.s->n; i += len) {
				decode(v.u.s->p, v.u.s->n, i, &len);
				jlist_push(c, out.u.l, jv_substr(c, v.u.s, i, i + len));
			}
			return out;
		}
		jfail(c, n, "list needs a list, mapping or string, not %s", jv_type_name(v));
	}
	if (strcmp(f, "reverse") == 0) {
		if (v.t == JV_LIST) {
			struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
			for (size_t i = v.u.l->n; i > 0; i--)
				jlist_push(c, out.u.l, v.u.l->v[i - 1]);
			return out;
		}
		jfail(c, n, "reverse needs a list, not %s", jv_type_name(v));
	}
	if (strcmp(f, "select") == 0 || strcmp(f, "reject") == 0)
		return select_items(c, n, v, args, nargs, f[0] == 's', 0);
	if (strcmp(f, "selectattr") == 0 || strcmp(f, "rejectattr") == 0)
		return select_items(c, n, v, args, nargs, f[0] == 's', 1);
	if (strcmp(f, "map") == 0) {
		struct jv *attr = arg(n, args, nargs, 0, "attribute"), out = { .t = JV_LIST, .u.l = jlist_new(c) };
		if (attr == NULL || n->kw == NULL || n->kw[0] == NULL || nargs != 1)
			jfail(c, n, "map is supported only as map(attribute=NAME)");
		if (v.t != JV_LIST)
			jfail(c, n, "map needs a list, not %s", jv_type_name(v));
		need_str(c, n, attr, "map");
		for (size_t i = 0; i < v.u.l->n; i++) {
			struct jv *x = v.u.l->v[i].t == JV_DICT ? jdict_get(v.u.l->v[i].u.d, attr->u.s->p, attr->u.s->n) : NULL;
			jlist_push(c, out.u.l, x ? *x : (struct jv){ .t = JV_UNDEF });
		}
		return out;
	}
	if (strcmp(f, "int") == 0) {
		if (v.t == JV_INT)
			return v;
		if (v.t == JV_FLOAT && isnan(v.u.f)) /* int(nan) raises ValueError: the filter's default */
			return mkint(0);
		if (v.t == JV_FLOAT && !(v.u.f >= -0x1p63 && v.u.f < 0x1p63))
			jfail(c, n, "int of %g is beyond 64 bits (big integers are not supported)", v.u.f);
		if (v.t == JV_FLOAT)
			return mkint((long long)v.u.f);
		if (v.t == JV_BOOL)
			return mkint(v.u.b);
		if (v.t == JV_STR) {
			char buf[64], *end;
			snprintf(buf, sizeof buf, "%.*s", (int)v.u.s->n, v.u.s->p);
			errno = 0;
			long long i = strtoll(buf, &end, 10);
			if (errno == ERANGE)
				jfail(c, n, "int of \"%s\" is beyond 64 bits (big integers are not supported)", buf);
			return mkint(*end == '\0' && end != buf ? i : 0);
		}
		return mkint(0);
	}
	if (strcmp(f, "float") == 0) {
		if (v.t == JV_INT || v.t == JV_BOOL)
			return (struct jv){ .t = JV_FLOAT, .u.f = v.t == JV_INT ? (double)v.u.i : v.u.b };
		if (v.t == JV_FLOAT)
			return v;
		jfail(c, n, "float of %s is not supported", jv_type_name(v));
	}
	if (strcmp(f, "abs") == 0) {
		if (v.t == JV_INT && v.u.i == LLONG_MIN)
			jfail(c, n, "abs of %lld is beyond 64 bits (big integers are not supported)", v.u.i);
		if (v.t == JV_INT)
			return mkint(v.u.i < 0 ? -v.u.i : v.u.i);
		if (v.t == JV_FLOAT)
			return (struct jv){ .t = JV_FLOAT, .u.f = fabs(v.u.f) };
		jfail(c, n, "abs needs a number, not %s", jv_type_name(v));
	}
	jfail(c, n, "unsupported filter \"%s\"", f);
}

/* ---- tests ----------------------------------------------------------- */

static int run_test(struct jctx *c, const struct jnode *n, const char *t, struct jv v, struct jv *args, int nargs)
{
	struct jv *a0 = nargs > 0 ? &args[0] : NULL;

	if (strcmp(t, "defined") == 0) return v.t != JV_UNDEF;
	if (strcmp(t, "undefined") == 0) return v.t == JV_UNDEF;
	if (strcmp(t, "none") == 0) return v.t == JV_NONE;
	if (strcmp(t, "string") == 0) return v.t == JV_STR;
	if (strcmp(t, "number") == 0) return v.t == JV_INT || v.t == JV_FLOAT;
	if (strcmp(t, "integer") == 0) return v.t == JV_INT;
	if (strcmp(t, "float") == 0) return v.t == JV_FLOAT;
	if (strcmp(t, "boolean") == 0) return v.t == JV_BOOL;
	if (strcmp(t, "true") == 0) return v.t == JV_BOOL && v.u.b;
	if (strcmp(t, "false") == 0) return v.t == JV_BOOL && !v.u.b;
	if (strcmp(t, "mapping") == 0) return v.t == JV_DICT;
	if (strcmp(t, "iterable") == 0) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT;
	if (strcmp(t, "sequence") == 0) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT;
	if (strcmp(t, "callable") == 0) return v.t == JV_FUNC;
	if (strcmp(t, "lower") == 0 || strcmp(t, "upper") == 0) {
		struct jstr *s = need_str(c, n, &v, t);
		int cased = 0;
		if (!all_ascii(s))
			jfail(c, n, "the %s test on non-ASCII text is not supported", t);
		for (size_t i = 0; i < s->n; i++) {
			char ch = s->p[i];
			if ((t[0] == 'l' && ch >= 'A' && ch <= 'Z') || (t[0] == 'u' && ch >= 'a' && ch <= 'z'))
				return 0;
			cased |= (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
		}
		return cased;
	}
	if (a0 == NULL && (strcmp(t, "odd") == 0 || strcmp(t, "even") == 0)) {
		if (v.t != JV_INT)
			jfail(c, n, "%s needs an integer, not %s", t, jv_type_name(v));
		return (int)((v.u.i % 2 + 2) % 2) == (t[0] == 'o');
	}
	if (a0 == NULL)
		goto unknown;
	if (strcmp(t, "equalto") == 0 || strcmp(t, "eq") == 0 || strcmp(t, "==") == 0 || strcmp(t, "sameas") == 0)
		return jv_equal(c, v, *a0);
	if (strcmp(t, "ne") == 0 || strcmp(t, "!=") == 0)
		return !jv_equal(c, v, *a0);
	if (strcmp(t, "in") == 0) {
		struct jnode tmp = *n;
		(void)tmp;
		if (a0->t == JV_LIST) {
			for (size_t i = 0; i < a0->u.l->n; i++)
				if (jv_equal(c, a0->u.l->v[i], v))
					return 1;
			return 0;
		}
		if (a0->t == JV_DICT)
			return v.t == JV_STR && jdict_get(a0->u.d, v.u.s->p, v.u.s->n) != NULL;
		if (a0->t == JV_STR && v.t == JV_STR)
			return v.u.s->n == 0 || find(a0->u.s, v.u.s, 0) >= 0;
		jfail(c, n, "the in test needs a list, mapping or string");
	}
	if (strcmp(t, "divisibleby") == 0) {
		if (v.t != JV_INT || a0->t != JV_INT || a0->u.i == 0)
			jfail(c, n, "divisibleby needs integers");
		return v.u.i % a0->u.i == 0;
	}
	{
		static const char *const cmp[][2] = { { "lt", "<" }, { "le", "<=" }, { "gt", ">" }, { "ge", ">=" } };
		for (int k = 0; k < 4; k++)
			if (strcmp(t, cmp[k][0]) == 0 || strcmp(t, cmp[k][1]) == 0) {
				double x, y;
				if ((v.t != JV_INT && v.t != JV_FLOAT) || (a0->t != JV_INT && a0->t != JV_FLOAT))
					jfail(c, n, "the %s test needs numbers", t);
				x = v.t == JV_INT ? (double)v.u.i : v.u.f;
				y = a0->t == JV_INT ? (double)a0->u.i : a0->u.f;
				return k == 0 ? x < y : k == 1 ? x <= y : k == 2 ? x > y : x >= y;
			}
	}
unknown:
	jfail(c, n, "unsupported test \"%s\"%s", t, a0 == NULL ? "" : " with an argument");
}

int jtest(struct jctx *c, const struct jnode *n, struct jv v, struct jv *args, int nargs)
{
	return run_test(c, n, n->s, v, args, nargs);
}

/* ---- methods --------------------------------------------------------- */

static int has_affix(struct jctx *c, const struct jnode *n, const struct jstr *s, struct jv *a, int end)
{
	if (a && a->t == JV_LIST) { /* a tuple of choices */
		for (size_t i = 0; i < a->u.l->n; i++)
			if (has_affix(c, n, s, &a->u.l->v[i], end))
				return 1;
		return 0;
	}
	const struct jstr *x = need_str(c, n, a, end ? "endswith" : "startswith");
	return x->n <= s->n && memcmp(s->p + (end ? s->n - x->n : 0), x->p, x->n) == 0;
}

struct jv jmethod(struct jctx *c, const struct jnode *n, struct jv obj, const char *m, struct jv *args, int nargs)
{
	struct jv *a0 = nargs > 0 ? &args[0] : NULL, *a1 = nargs > 1 ? &args[1] : NULL;

	for (int i = 0; i < nargs && n->kw; i++)
		if (n->kw[i])
			jfail(c, n, "%s(): keyword arguments are not supported", m);
	if (obj.t == JV_STR) {
		const struct jstr *s = obj.u.s;
		if (strcmp(m, "startswith") == 0 || strcmp(m, "endswith") == 0)
			return mkbool(has_affix(c, n, s, a0, m[0] == 'e'));
		if (strcmp(m, "strip") == 0 || strcmp(m, "lstrip") == 0 || strcmp(m, "rstrip") == 0) {
			const struct jstr *chars = a0 && a0->t != JV_NONE ? need_str(c, n, a0, m) : NULL;
			return strip(c, s, chars, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
		}
		if (strcmp(m, "split") == 0) {
			const struct jstr *sep = a0 && a0->t != JV_NONE ? need_str(c, n, a0, m) : NULL;
			return split(c, n, s, sep, a1 && a1->t == JV_INT ? a1->u.i : -1);
		}
		if (strcmp(m, "replace") == 0)
			return replace(c, n, s, need_str(c, n, a0, m), need_str(c, n, a1, m),
				       nargs > 2 && args[2].t == JV_INT ? args[2].u.i : -1);
		if (strcmp(m, "upper") == 0 || strcmp(m, "lower") == 0 || strcmp(m, "title") == 0 ||
		    strcmp(m, "capitalize") == 0)
			return change_case(c, n, s, m[0] == 'l' ? 'l' : m[0] == 'u' ? 'u' : m[0] == 't' ? 't' : 'c');
		if (strcmp(m, "find") == 0) {
			long long k = find(s, need_str(c, n, a0, m), 0), cp = 0;
			if (k < 0)
				return mkint(-1);
			for (long long i = 0; i < k; i++)
				cp += ((unsigned char)s->p[i] & 0xc0) != 0x80;
			return mkint(cp);
		}
		if (strcmp(m, "count") == 0) {
			const struct jstr *x = need_str(c, n, a0, m);
			long long k = 0;
			if (x->n == 0)
				jfail(c, n, "count of an empty string is not supported");
			for (long long at = find(s, x, 0); at >= 0; at = find(s, x, (size_t)at + x->n))
				k++;
			return mkint(k);
		}
		if (strcmp(m, "join") == 0) {
			struct jbuf b = { 0 };
			if (a0 == NULL || a0->t != JV_LIST)
				jfail(c, n, "join needs a list");
			for (size_t i = 0; i < a0->u.l->n; i++) {
				if (i)
					jbuf_put_str(c, &b, s, 0, s->n);
				need_str(c, n, &a0->u.l->v[i], "join");
				jbuf_put_str(c, &b, a0->u.l->v[i].u.s, 0, a0->u.l->v[i].u.s->n);
			}
			return jv_from_buf(c, &b);
		}
	} else if (obj.t == JV_DICT && !obj.u.d->is_ns) {
		const struct jdict *d = obj.u.d;
		if (strcmp(m, "get") == 0) {
			struct jv *v = jdict_get(d, need_str(c, n, a0, m)->p, a0->u.s->n);
			return v ? *v : a1 ? *a1 : (struct jv){ .t = JV_NONE };
		}
		if (strcmp(m, "items") == 0 || strcmp(m, "keys") == 0 || strcmp(m, "values") == 0) {
			struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
			for (size_t i = 0; i < d->n; i++) {
				struct jv k = { .t = JV_STR, .u.s = d->k[i] };
				if (m[0] == 'i') {
					struct jv pair = { .t = JV_LIST, .u.l = jlist_new(c) };
					jlist_push(c, pair.u.l, k);
					jlist_push(c, pair.u.l, d->v[i]);
					jlist_push(c, out.u.l, pair);
				} else
					jlist_push(c, out.u.l, m[0] == 'k' ? k : d->v[i]);
			}
			return out;
		}
	} else if (obj.t == JV_UNDEF) {
		jfail(c, n, "undefined value has no method \"%s\"", m);
	}
	jfail(c, n, "unsupported method \"%s\" of a %s", m, jv_type_name(obj));
}

/* ---- dates ----------------------------------------------------------- */

static const char *const day_names[] = { "Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
					 "Saturday" };
static const char *const month_names[] = { "January", "February", "March", "April", "May", "June", "July",
					   "August", "September", "October", "November", "December" };

static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int jinja_parse_date(struct tm *out, const char *ymd, char *err, size_t errsz)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int y, m, d, k = 0, yday;

	memset(out, 0, sizeof *out);
	for (int i = 0; i < 10 && ymd[i]; i++)
		if (i != 4 && i != 7 && (ymd[i] < '0' || ymd[i] > '9'))
			k = -1;
	if (k < 0 || strlen(ymd) != 10 || sscanf(ymd, "%4d-%2d-%2d%n", &y, &m, &d, &k) != 3 || k != 10 || ymd[4] != '-' ||
	    ymd[7] != '-' || y < 1000 || m < 1 || m > 12 || d < 1 || d > mdays[m - 1] + (m == 2 && leap(y))) {
		snprintf(err, errsz, "not a date YYYY-MM-DD: \"%s\"", ymd);
		return -1;
	}
	yday = d - 1;
	for (int i = 0; i < m - 1; i++)
		yday += mdays[i] + (i == 1 && leap(y));
	/* days since 0001-01-01, a Monday (proleptic Gregorian, as Python's date) */
	long long days = 365LL * (y - 1) + (y - 1) / 4 - (y - 1) / 100 + (y - 1) / 400 + yday;
	out->tm_year = y - 1900;
	out->tm_mon = m - 1;
	out->tm_mday = d;
	out->tm_yday = yday;
	out->tm_wday = (int)((days + 1) % 7);
	return 0;
}

/* Python's datetime.strftime in the C locale (its LC_TIME unless a program
 * sets one): the directives below, '-' to drop the padding as glibc does;
 * any other directive is refused rather than guessed. */
static void format_date(struct jctx *c, const struct jnode *n, struct jbuf *b, const struct jstr *fmt,
			const struct tm *t)
{
	for (size_t i = 0; i < fmt->n; i++) {
		char out[64];
		int nopad = 0, v = -1, width = 2;
		const char *name = NULL;

		if (fmt->p[i] != '%') {
			jbuf_put(c, b, fmt->p + i, 1, 0);
			continue;
		}
		if (i + 1 < fmt->n && fmt->p[i + 1] == '-') {
			nopad = 1;
			i++;
		}
		if (i + 1 >= fmt->n)
			jfail(c, n, "strftime_now: the format ends inside a directive");
		switch (fmt->p[++i]) {
		case 'd': v = t->tm_mday; break;
		case 'e': v = t->tm_mday; width = -2; break;
		case 'm': v = t->tm_mon + 1; break;
		case 'y': v = (t->tm_year + 1900) % 100; break;
		case 'Y': v = t->tm_year + 1900; width = 1; break;
		case 'H': v = t->tm_hour; break;
		case 'I': v = t->tm_hour % 12 ? t->tm_hour % 12 : 12; break;
		case 'M': v = t->tm_min; break;
		case 'S': v = t->tm_sec; break;
		case 'j': v = t->tm_yday + 1; width = 3; break;
		case 'p': name = t->tm_hour < 12 ? "AM" : "PM"; break;
		case 'a': case 'A': name = day_names[t->tm_wday]; break;
		case 'b': case 'h': case 'B': name = month_names[t->tm_mon]; break;
		case '%': name = "%"; break;
		default:
			jfail(c, n, "strftime_now: unsupported directive \"%%%s%c\"", nopad ? "-" : "", fmt->p[i]);
		}
		if (name) {
			char d = fmt->p[i];
			jbuf_put(c, b, name, d == 'a' || d == 'b' || d == 'h' ? 3 : strlen(name), 0);
			continue;
		}
		if (nopad)
			snprintf(out, sizeof out, "%d", v);
		else if (width < 0)
			snprintf(out, sizeof out, "%*d", -width, v);
		else
			snprintf(out, sizeof out, "%0*d", width, v);
		jbuf_put(c, b, out, strlen(out), 0);
	}
}

/* ---- globals --------------------------------------------------------- */

static const char *const globals[] = { "raise_exception", "strftime_now", "namespace", "range", "dict", NULL };

int jglobal_exists(const char *name, size_t n)
{
	for (int i = 0; globals[i]; i++)
		if (strlen(globals[i]) == n && memcmp(globals[i], name, n) == 0)
			return 1;
	return 0;
}

struct jv jglobal_call(struct jctx *c, const struct jnode *n, const char *f, struct jv *args, int nargs)
{
	if (strcmp(f, "raise_exception") == 0) {
		struct jv msg = nargs > 0 ? jv_to_string(c, args[0]) : jv_str_lit(c, "", 0);
		jfail(c, n, "template raised: %.*s", (int)msg.u.s->n, msg.u.s->p);
	}
	if (strcmp(f, "strftime_now") == 0) {
		const struct jstr *fmt = need_str(c, n, nargs > 0 ? &args[0] : NULL, "strftime_now");
		struct jbuf b = { 0 };
		if (nargs > 1)
			jfail(c, n, "strftime_now takes 1 argument");
		if (c->today == NULL)
			jfail(c, n, "strftime_now: the template asks for today's date, and Poros renders only a date it is "
				    "given, so that a rerun gives the same ids: the record's chat_template_kwargs (e.g. "
				    "date_string) where the template reads one, or --chat-date YYYY-MM-DD (poros-train, poros-tokenize)");
		format_date(c, n, &b, fmt, c->today);
		return jv_from_buf(c, &b);
	}
	if (strcmp(f, "namespace") == 0 || strcmp(f, "dict") == 0) {
		struct jv d = { .t = JV_DICT, .u.d = jdict_new(c) };
		d.u.d->is_ns = f[0] == 'n';
		for (int i = 0; i < nargs; i++) {
			const char *k = n->kw ? n->kw[i] : NULL;
			if (k == NULL)
				jfail(c, n, "%s() takes keyword arguments only here", f);
			jdict_set(c, d.u.d, jv_str_lit(c, k, strlen(k)).u.s, args[i]);
		}
		return d;
	}
	if (strcmp(f, "range") == 0) {
		long long a = 0, b, step = 1;
		struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
		for (int i = 0; i < nargs; i++)
			if (args[i].t != JV_INT)
				jfail(c, n, "range needs integers");
		if (nargs == 1)
			b = args[0].u.i;
		else if (nargs == 2 || nargs == 3) {
			a = args[0].u.i;
			b = args[1].u.i;
			if (nargs == 3)
				step = args[2].u.i;
		} else
			jfail(c, n, "range takes 1 to 3 arguments");
		if (step == 0)
			jfail(c, n, "range step cannot be zero");
		for (long long i = a; step > 0 ? i < b : i > b;) {
			if (out.u.l->n > 100000)
				jfail(c, n, "range too long");
			jlist_push(c, out.u.l, mkint(i));
			if (__builtin_add_overflow(i, step, &i))
				break; /* past LLONG_MAX or LLONG_MIN: past b too */
		}
		return out;
	}
	jfail(c, n, "unknown function \"%s\"", f);
}
