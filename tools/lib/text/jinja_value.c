/* tools/lib/text/jinja_value.c: the values of the Jinja subset (jinja_int.h):
 * strings with their origins and anchors, lists and dicts, conversions to
 * text and equality; what the evaluator (jinja_eval.c) and the library
 * (jinja_lib.c) build on, apart from evaluating.  Every value lives in the
 * render's arena. */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- strings with origins -------------------------------------------- */

static void jbuf_reserve(struct jctx *c, struct jbuf *b, size_t more)
{
	if (b->n + more + 1 <= b->cap)
		return;
	b->cap = (b->n + more + 1) * 2;
	b->p = ja_grow(&c->arena, b->p, b->cap);
	b->org = ja_grow(&c->arena, b->org, b->cap * sizeof *b->org);
}

static void jbuf_add_anchor(struct jctx *c, struct jbuf *b, size_t pos, int org)
{
	if (b->n_anc == b->cap_anc) {
		b->cap_anc = b->cap_anc ? b->cap_anc * 2 : 8;
		b->anc_pos = ja_grow(&c->arena, b->anc_pos, b->cap_anc * sizeof *b->anc_pos);
		b->anc_org = ja_grow(&c->arena, b->anc_org, b->cap_anc * sizeof *b->anc_org);
	}
	b->anc_pos[b->n_anc] = pos;
	b->anc_org[b->n_anc++] = org;
}

void jbuf_put(struct jctx *c, struct jbuf *b, const char *s, size_t n, int org)
{
	jbuf_reserve(c, b, n);
	memcpy(b->p + b->n, s, n);
	for (size_t i = 0; i < n; i++)
		b->org[b->n + i] = org;
	b->n += n;
	b->p[b->n] = '\0';
}

void jbuf_anchor(struct jctx *c, struct jbuf *b, int org)
{
	jbuf_add_anchor(c, b, b->n, org);
}

/* s[from..to) with its origins, and the anchors that lie in [from, to] */
void jbuf_put_str(struct jctx *c, struct jbuf *b, const struct jstr *s, size_t from, size_t to)
{
	size_t base = b->n;

	jbuf_reserve(c, b, to - from);
	memcpy(b->p + b->n, s->p + from, to - from);
	for (size_t i = from; i < to; i++)
		b->org[b->n + i - from] = s->org ? s->org[i] : 0;
	b->n += to - from;
	b->p[b->n] = '\0';
	for (size_t k = 0; k < s->n_anc; k++)
		if (s->anc_pos[k] >= from && s->anc_pos[k] <= to)
			jbuf_add_anchor(c, b, base + s->anc_pos[k] - from, s->anc_org[k]);
}

struct jv jv_from_buf(struct jctx *c, struct jbuf *b)
{
	struct jstr *s = ja_alloc(&c->arena, sizeof *s);
	int any = 0;

	jbuf_reserve(c, b, 0);
	for (size_t i = 0; i < b->n && !any; i++)
		any = b->org[i] != 0;
	s->p = b->p;
	s->org = any ? b->org : NULL;
	s->n = b->n;
	s->anc_pos = b->anc_pos;
	s->anc_org = b->anc_org;
	s->n_anc = b->n_anc;
	memset(b, 0, sizeof *b);
	return (struct jv){ .t = JV_STR, .u.s = s };
}

struct jv jv_str_lit(struct jctx *c, const char *p, size_t n)
{
	struct jstr *s = ja_alloc(&c->arena, sizeof *s);

	s->p = p;
	s->n = n;
	return (struct jv){ .t = JV_STR, .u.s = s };
}

/* s[from..to); an empty piece of a content keeps its place as an anchor */
struct jv jv_substr(struct jctx *c, const struct jstr *s, size_t from, size_t to)
{
	struct jbuf b = { 0 };

	jbuf_put_str(c, &b, s, from, to);
	if (from == to && b.n_anc == 0) {
		int org = 0;
		for (size_t i = 0; i < s->n && org == 0; i++)
			org = s->org ? s->org[i] : 0;
		for (size_t k = 0; k < s->n_anc && org == 0; k++)
			org = s->anc_org[k];
		if (org)
			jbuf_anchor(c, &b, org);
	}
	return jv_from_buf(c, &b);
}

/* ---- containers ------------------------------------------------------ */

struct jlist *jlist_new(struct jctx *c) { return ja_alloc(&c->arena, sizeof(struct jlist)); }

/* The depth of a container holding v (jinja_int.h); past the bound, refused. */
static int depth_holding(struct jctx *c, struct jv v, int depth)
{
	int inner = v.t == JV_LIST ? v.u.l->depth : v.t == JV_DICT && !v.u.d->is_ns ? v.u.d->depth : 0;

	if (inner + 1 > JINJA_MAX_VALUE_DEPTH)
		jfail(c, c->at, "values nested more than %d deep", JINJA_MAX_VALUE_DEPTH);
	return inner + 1 > depth ? inner + 1 : depth;
}

void jlist_push(struct jctx *c, struct jlist *l, struct jv v)
{
	l->depth = depth_holding(c, v, l->depth);
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 8;
		l->v = ja_grow(&c->arena, l->v, l->cap * sizeof *l->v);
	}
	l->v[l->n++] = v;
}

struct jdict *jdict_new(struct jctx *c) { return ja_alloc(&c->arena, sizeof(struct jdict)); }

struct jv *jdict_get(const struct jdict *d, const char *k, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i]->n == n && memcmp(d->k[i]->p, k, n) == 0)
			return &d->v[i];
	return NULL;
}

void jdict_set(struct jctx *c, struct jdict *d, struct jstr *k, struct jv v)
{
	struct jv *have;

	jcharge(c, 1 + (long long)(d->n / JINJA_SCAN_PER_STEP));
	have = jdict_get(d, k->p, k->n);
	if (!d->is_ns)
		d->depth = depth_holding(c, v, d->depth);
	if (have) {
		*have = v;
		return;
	}
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 8;
		d->k = ja_grow(&c->arena, d->k, d->cap * sizeof *d->k);
		d->v = ja_grow(&c->arena, d->v, d->cap * sizeof *d->v);
	}
	d->k[d->n] = k;
	d->v[d->n++] = v;
}

/* ---- conversions ----------------------------------------------------- */

const char *jv_type_name(struct jv v)
{
	static const char *const names[] = { "undefined", "none", "boolean", "integer", "float", "string", "list",
					     "mapping", "function" };
	return names[v.t];
}

int jtruthy(struct jv v)
{
	switch (v.t) {
	case JV_UNDEF: case JV_NONE: return 0;
	case JV_BOOL: return v.u.b;
	case JV_INT: return v.u.i != 0;
	case JV_FLOAT: return v.u.f != 0;
	case JV_STR: return v.u.s->n != 0;
	case JV_LIST: return v.u.l->n != 0;
	case JV_DICT: return v.u.d->n != 0;
	default: return 1;
	}
}

/* Python's repr of a float: the shortest digits that read back. */
static void put_float(struct jctx *c, struct jbuf *b, double f)
{
	char digits[40], out[64];
	int prec, e, nd;

	if (isnan(f) || isinf(f)) {
		const char *s = isnan(f) ? "nan" : f > 0 ? "inf" : "-inf";
		jbuf_put(c, b, s, strlen(s), 0);
		return;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(digits, sizeof digits, "%.*e", prec - 1, f);
		if (strtod(digits, NULL) == f)
			break;
	}
	/* digits: [-]d.ddde[+-]XX */
	char *ep = strchr(digits, 'e'), mant[32];
	e = atoi(ep + 1);
	nd = 0;
	for (char *q = digits; q < ep; q++)
		if (*q >= '0' && *q <= '9')
			mant[nd++] = *q;
	mant[nd] = '\0';
	int k = 0;
	if (f < 0)
		out[k++] = '-';
	if (e >= -5 && e < 16) {
		if (e < 0) {
			out[k++] = '0';
			out[k++] = '.';
			for (int z = 0; z < -e - 1; z++)
				out[k++] = '0';
			for (int z = 0; z < nd; z++)
				out[k++] = mant[z];
		} else {
			for (int z = 0; z <= e; z++)
				out[k++] = z < nd ? mant[z] : '0';
			out[k++] = '.';
			if (nd > e + 1)
				for (int z = e + 1; z < nd; z++)
					out[k++] = mant[z];
			else
				out[k++] = '0';
		}
		out[k] = '\0';
	} else {
		out[k++] = mant[0];
		if (nd > 1) {
			out[k++] = '.';
			for (int z = 1; z < nd; z++)
				out[k++] = mant[z];
		}
		snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
	jbuf_put(c, b, out, strlen(out), 0);
}

/* Python's repr of a string: single quotes unless it holds ' and no " */
static void put_repr_str(struct jctx *c, struct jbuf *b, const struct jstr *s)
{
	int sq = memchr(s->p, '\'', s->n) != NULL, dq = memchr(s->p, '"', s->n) != NULL;
	char q = sq && !dq ? '"' : '\'';

	jbuf_put(c, b, &q, 1, 0);
	for (size_t i = 0; i < s->n; i++) {
		unsigned char ch = (unsigned char)s->p[i];
		char esc[8];
		int org = s->org ? s->org[i] : 0;
		if (ch == '\\' || ch == (unsigned char)q) {
			esc[0] = '\\';
			esc[1] = (char)ch;
			jbuf_put(c, b, esc, 2, org);
		} else if (ch == '\n' || ch == '\t' || ch == '\r') {
			esc[0] = '\\';
			esc[1] = ch == '\n' ? 'n' : ch == '\t' ? 't' : 'r';
			jbuf_put(c, b, esc, 2, org);
		} else if (ch < 0x20 || ch == 0x7f) {
			snprintf(esc, sizeof esc, "\\x%02x", ch);
			jbuf_put(c, b, esc, 4, org);
		} else {
			jbuf_put(c, b, s->p + i, 1, org);
		}
	}
	jbuf_put(c, b, &q, 1, 0);
}

/* str(v) (repr 0) or repr(v) (repr 1, for items inside lists and dicts) */
void jv_to_buf(struct jctx *c, struct jbuf *b, struct jv v, int repr)
{
	char num[32];

	switch (v.t) {
	case JV_UNDEF: break;
	case JV_NONE: jbuf_put(c, b, "None", 4, 0); break;
	case JV_BOOL: jbuf_put(c, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5, 0); break;
	case JV_INT:
		snprintf(num, sizeof num, "%lld", v.u.i);
		jbuf_put(c, b, num, strlen(num), 0);
		break;
	case JV_FLOAT: put_float(c, b, v.u.f); break;
	case JV_STR:
		if (repr)
			put_repr_str(c, b, v.u.s);
		else
			jbuf_put_str(c, b, v.u.s, 0, v.u.s->n);
		break;
	case JV_LIST:
		jbuf_put(c, b, v.u.l->is_tuple ? "(" : "[", 1, 0);
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i)
				jbuf_put(c, b, ", ", 2, 0);
			jv_to_buf(c, b, v.u.l->v[i], 1);
		}
		if (v.u.l->is_tuple && v.u.l->n == 1)
			jbuf_put(c, b, ",", 1, 0);
		jbuf_put(c, b, v.u.l->is_tuple ? ")" : "]", 1, 0);
		break;
	case JV_DICT:
		if (v.u.d->is_ns) {
			jbuf_put(c, b, "<Namespace>", 11, 0);
			break;
		}
		jbuf_put(c, b, "{", 1, 0);
		for (size_t i = 0; i < v.u.d->n; i++) {
			if (i)
				jbuf_put(c, b, ", ", 2, 0);
			put_repr_str(c, b, v.u.d->k[i]);
			jbuf_put(c, b, ": ", 2, 0);
			jv_to_buf(c, b, v.u.d->v[i], 1);
		}
		jbuf_put(c, b, "}", 1, 0);
		break;
	case JV_FUNC: jbuf_put(c, b, v.u.fn, strlen(v.u.fn), 0); break;
	}
}

struct jv jv_to_string(struct jctx *c, struct jv v)
{
	struct jbuf b = { 0 };

	if (v.t == JV_STR)
		return v;
	jv_to_buf(c, &b, v, 0);
	return jv_from_buf(c, &b);
}


/* Python's ==; a namespace equals only itself (it has no __eq__), which
 * also keeps a namespace that holds itself from recursing. */
int jv_equal(struct jctx *c, struct jv a, struct jv b)
{
	if (a.t == JV_INT && b.t == JV_INT)
		return a.u.i == b.u.i;
	if (is_num(a) && is_num(b))
		return num_of(a) == num_of(b);
	if (a.t != b.t)
		return 0;
	jcharge(c, 1);
	switch (a.t) {
	case JV_UNDEF: case JV_NONE: return 1;
	case JV_STR:
		jcharge(c, (long long)(a.u.s->n / JINJA_SCAN_PER_STEP));
		return a.u.s->n == b.u.s->n && memcmp(a.u.s->p, b.u.s->p, a.u.s->n) == 0;
	case JV_LIST:
		if (a.u.l->n != b.u.l->n)
			return 0;
		for (size_t i = 0; i < a.u.l->n; i++)
			if (!jv_equal(c, a.u.l->v[i], b.u.l->v[i]))
				return 0;
		return 1;
	case JV_DICT:
		if (a.u.d->is_ns || b.u.d->is_ns)
			return a.u.d == b.u.d;
		if (a.u.d->n != b.u.d->n)
			return 0;
		for (size_t i = 0; i < a.u.d->n; i++) {
			struct jv *o = jdict_get(b.u.d, a.u.d->k[i]->p, a.u.d->k[i]->n);
			jcharge(c, (long long)(b.u.d->n / JINJA_SCAN_PER_STEP));
			if (o == NULL || !jv_equal(c, a.u.d->v[i], *o))
				return 0;
		}
		return 1;
	case JV_FUNC: return strcmp(a.u.fn, b.u.fn) == 0;
	default: return 0;
	}
}
