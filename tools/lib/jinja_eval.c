/* tools/lib/jinja_eval.c: the evaluator of the Jinja subset (jinja.h):
 * expressions, statements and the render; its values are jinja_value.c's. */
#include "jinja_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void jfail(struct jctx *c, const struct jnode *at, const char *fmt, ...)
{
	va_list ap;
	int k = at ? snprintf(c->err, c->errsz, "%d:%d: ", at->line, at->col) : 0;

	va_start(ap, fmt);
	if (k >= 0 && (size_t)k < c->errsz)
		vsnprintf(c->err + k, c->errsz - (size_t)k, fmt, ap);
	va_end(ap);
	longjmp(c->fail, 1);
}

static struct jstr *key_of(struct jctx *c, const char *name)
{
	return jv_str_lit(c, name, strlen(name)).u.s;
}

/* ---- JSON in --------------------------------------------------------- */

static struct jv from_json(struct jctx *c, const cJSON *j, int org)
{
	struct jv v = { .t = JV_NONE };

	if (cJSON_IsBool(j)) {
		v.t = JV_BOOL;
		v.u.b = cJSON_IsTrue(j);
	} else if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		if (d == floor(d) && fabs(d) < 9e15) {
			v.t = JV_INT;
			v.u.i = (long long)d;
		} else {
			v.t = JV_FLOAT;
			v.u.f = d;
		}
	} else if (cJSON_IsString(j)) {
		struct jbuf b = { 0 };
		const char *s = j->valuestring;
		jbuf_put(c, &b, s, strlen(s), org);
		if (org && s[0] == '\0')
			jbuf_anchor(c, &b, org);
		v = jv_from_buf(c, &b);
	} else if (cJSON_IsArray(j)) {
		const cJSON *e;
		v.t = JV_LIST;
		v.u.l = jlist_new(c);
		cJSON_ArrayForEach(e, j)
			jlist_push(c, v.u.l, from_json(c, e, 0));
	} else if (cJSON_IsObject(j)) {
		const cJSON *e;
		v.t = JV_DICT;
		v.u.d = jdict_new(c);
		cJSON_ArrayForEach(e, j)
			jdict_set(c, v.u.d, key_of(c, e->string), from_json(c, e, 0));
	}
	return v;
}

/* ---- expressions ----------------------------------------------------- */

static struct jv lookup(struct jctx *c, const char *name, size_t n)
{
	for (struct jscope *s = c->scope; s; s = s->up) {
		struct jv *v = jdict_get(s->vars, name, n);
		if (v)
			return *v;
	}
	if (jglobal_exists(name, n))
		return (struct jv){ .t = JV_FUNC, .u.fn = name };
	return (struct jv){ .t = JV_UNDEF };
}

/* Code point starts of s: idx[0..*ncp] (idx[ncp] == s->n). */
static size_t *cp_index(struct jctx *c, const struct jstr *s, long long *ncp)
{
	size_t *idx = ja_alloc(&c->arena, (s->n + 1) * sizeof *idx);
	long long k = 0;

	for (size_t i = 0; i < s->n; i++)
		if (((unsigned char)s->p[i] & 0xc0) != 0x80)
			idx[k++] = i;
	idx[k] = s->n;
	*ncp = k;
	return idx;
}

static struct jv get_item(struct jctx *c, const struct jnode *at, struct jv obj, struct jv key)
{
	struct jv undef = { .t = JV_UNDEF };

	if (obj.t == JV_UNDEF)
		jfail(c, at, "cannot index an undefined value");
	if (obj.t == JV_DICT) {
		struct jv *v;
		if (key.t != JV_STR)
			return undef;
		v = jdict_get(obj.u.d, key.u.s->p, key.u.s->n);
		return v ? *v : undef;
	}
	if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
		long long i = key.t == JV_INT ? key.u.i : key.u.b, n;
		size_t *idx = NULL;
		if (obj.t == JV_LIST)
			n = (long long)obj.u.l->n;
		else
			idx = cp_index(c, obj.u.s, &n);
		if (i < 0)
			i += n;
		if (i < 0 || i >= n)
			return undef;
		return obj.t == JV_LIST ? obj.u.l->v[i] : jv_substr(c, obj.u.s, idx[i], idx[i + 1]);
	}
	return undef;
}

static long long slice_bound(struct jctx *c, const struct jnode *n, long long def)
{
	struct jv v;

	if (n == NULL)
		return def;
	v = jeval(c, n);
	if (v.t == JV_NONE)
		return def;
	if (v.t != JV_INT)
		jfail(c, n, "slice indices must be integers, not %s", jv_type_name(v));
	return v.u.i;
}

/* Python's slice of a list or a string (by code points) */
static struct jv eval_slice(struct jctx *c, const struct jnode *n)
{
	struct jv obj = jeval(c, n->a);
	long long len, step = slice_bound(c, n->filter, 1), start, stop;
	size_t *idx = NULL;

	if (obj.t == JV_LIST)
		len = (long long)obj.u.l->n;
	else if (obj.t == JV_STR)
		idx = cp_index(c, obj.u.s, &len);
	else
		jfail(c, n, "cannot slice a %s", jv_type_name(obj));
	if (step == 0)
		jfail(c, n, "slice step cannot be zero");
	start = slice_bound(c, n->b, step > 0 ? 0 : len - 1);
	stop = slice_bound(c, n->c, step > 0 ? len : -len - 1);
	if (start < 0)
		start = start + len < 0 ? (step > 0 ? 0 : -1) : start + len;
	else if (start >= len)
		start = step > 0 ? len : len - 1;
	if (stop < 0)
		stop = stop + len < 0 ? (step > 0 ? 0 : -1) : stop + len;
	else if (stop >= len)
		stop = step > 0 ? len : len - 1;
	if (obj.t == JV_LIST) {
		struct jv out = { .t = JV_LIST, .u.l = jlist_new(c) };
		for (long long i = start; step > 0 ? i < stop : i > stop; i += step)
			jlist_push(c, out.u.l, obj.u.l->v[i]);
		return out;
	}
	if (step == 1)
		return jv_substr(c, obj.u.s, idx[start], idx[start < stop ? stop : start]);
	struct jbuf b = { 0 };
	for (long long i = start; step > 0 ? i < stop : i > stop; i += step)
		jbuf_put_str(c, &b, obj.u.s, idx[i], idx[i + 1]);
	return jv_from_buf(c, &b);
}

static int cmp_values(struct jctx *c, const struct jnode *at, struct jv a, struct jv b)
{
	if (is_num(a) && is_num(b))
		return (num_of(a) > num_of(b)) - (num_of(a) < num_of(b));
	if (a.t == JV_STR && b.t == JV_STR) {
		size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
		int r = memcmp(a.u.s->p, b.u.s->p, n);
		return r ? (r > 0) - (r < 0) : (a.u.s->n > b.u.s->n) - (a.u.s->n < b.u.s->n);
	}
	jfail(c, at, "cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
}

static int contains(struct jctx *c, const struct jnode *at, struct jv hay, struct jv needle)
{
	if (hay.t == JV_STR) {
		if (needle.t != JV_STR)
			jfail(c, at, "'in <string>' needs a string on the left, not %s", jv_type_name(needle));
		if (needle.u.s->n == 0)
			return 1;
		for (size_t i = 0; i + needle.u.s->n <= hay.u.s->n; i++)
			if (memcmp(hay.u.s->p + i, needle.u.s->p, needle.u.s->n) == 0)
				return 1;
		return 0;
	}
	if (hay.t == JV_LIST) {
		for (size_t i = 0; i < hay.u.l->n; i++)
			if (jv_equal(hay.u.l->v[i], needle))
				return 1;
		return 0;
	}
	if (hay.t == JV_DICT)
		return needle.t == JV_STR && jdict_get(hay.u.d, needle.u.s->p, needle.u.s->n) != NULL;
	if (hay.t == JV_UNDEF)
		jfail(c, at, "'in' on an undefined value");
	jfail(c, at, "'in' needs a string, list or mapping on the right, not %s", jv_type_name(hay));
}

static struct jv arith(struct jctx *c, const struct jnode *n, struct jv a, struct jv b)
{
	const char *op = n->s;
	struct jv r = { .t = JV_INT };

	if (op[0] == '~') {
		struct jbuf buf = { 0 };
		jv_to_buf(c, &buf, a, 0);
		jv_to_buf(c, &buf, b, 0);
		return jv_from_buf(c, &buf);
	}
	if (op[0] == '+' && a.t == JV_STR && b.t == JV_STR) {
		struct jbuf buf = { 0 };
		jbuf_put_str(c, &buf, a.u.s, 0, a.u.s->n);
		jbuf_put_str(c, &buf, b.u.s, 0, b.u.s->n);
		return jv_from_buf(c, &buf);
	}
	if (op[0] == '+' && a.t == JV_LIST && b.t == JV_LIST) {
		r.t = JV_LIST;
		r.u.l = jlist_new(c);
		for (size_t i = 0; i < a.u.l->n; i++)
			jlist_push(c, r.u.l, a.u.l->v[i]);
		for (size_t i = 0; i < b.u.l->n; i++)
			jlist_push(c, r.u.l, b.u.l->v[i]);
		return r;
	}
	if (!is_num(a) || !is_num(b))
		jfail(c, n, "unsupported operand types for %s: %s and %s", op, jv_type_name(a), jv_type_name(b));
	int ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
	long long x = a.t == JV_INT ? a.u.i : a.t == JV_BOOL ? a.u.b : 0, y = b.t == JV_INT ? b.u.i : b.t == JV_BOOL ? b.u.b : 0;
	double fx = num_of(a), fy = num_of(b);
	switch (op[0]) {
	case '+': if (ints) r.u.i = x + y; else r = (struct jv){ .t = JV_FLOAT, .u.f = fx + fy }; return r;
	case '-': if (ints) r.u.i = x - y; else r = (struct jv){ .t = JV_FLOAT, .u.f = fx - fy }; return r;
	case '*':
		if (op[1] == '*') {
			if (ints && y >= 0) {
				r.u.i = 1;
				for (long long k = 0; k < y; k++)
					r.u.i *= x;
				return r;
			}
			return (struct jv){ .t = JV_FLOAT, .u.f = pow(fx, fy) };
		}
		if (ints) r.u.i = x * y; else r = (struct jv){ .t = JV_FLOAT, .u.f = fx * fy };
		return r;
	case '/':
	case '%':
		if (fy == 0)
			jfail(c, n, "division by zero");
		if (op[0] == '/' && op[1] != '/')
			return (struct jv){ .t = JV_FLOAT, .u.f = fx / fy };
		if (ints) {
			long long q = x / y, m = x % y;
			if (m != 0 && ((m < 0) != (y < 0))) {
				q--;
				m += y;
			}
			r.u.i = op[0] == '%' ? m : q;
			return r;
		}
		double fl = floor(fx / fy);
		return (struct jv){ .t = JV_FLOAT, .u.f = op[0] == '%' ? fx - fl * fy : fl };
	}
	jfail(c, n, "unknown operator %s", op);
}

static struct jv eval_call(struct jctx *c, const struct jnode *n)
{
	struct jv args[16];
	int nargs = n->n_kids;

	if (nargs > 16)
		jfail(c, n, "too many arguments");
	for (int i = 0; i < nargs; i++)
		args[i] = jeval(c, n->kids[i]);
	if (n->a->kind == N_ATTR) {
		struct jv obj = jeval(c, n->a->a);
		if (obj.t == JV_DICT) {
			struct jv *f = jdict_get(obj.u.d, n->a->s, n->a->slen);
			if (f && f->t == JV_FUNC)
				return jglobal_call(c, n, f->u.fn, args, nargs);
		}
		return jmethod(c, n, obj, n->a->s, args, nargs);
	}
	struct jv f = jeval(c, n->a);
	if (f.t != JV_FUNC)
		jfail(c, n, "%s is not callable", n->a->kind == N_NAME ? n->a->s : jv_type_name(f));
	return jglobal_call(c, n, f.u.fn, args, nargs);
}

struct jv jeval(struct jctx *c, const struct jnode *n)
{
	struct jv v = { .t = JV_NONE }, a, b;

	switch (n->kind) {
	case N_LIT_STR: return jv_str_lit(c, n->s, n->slen);
	case N_LIT_INT: v.t = JV_INT; v.u.i = n->i; return v;
	case N_LIT_FLOAT: v.t = JV_FLOAT; v.u.f = n->f; return v;
	case N_LIT_BOOL: v.t = JV_BOOL; v.u.b = (int)n->i; return v;
	case N_LIT_NONE: return v;
	case N_LIST:
	case N_TUPLE:
		v.t = JV_LIST;
		v.u.l = jlist_new(c);
		v.u.l->is_tuple = n->kind == N_TUPLE;
		for (int i = 0; i < n->n_kids; i++)
			jlist_push(c, v.u.l, jeval(c, n->kids[i]));
		return v;
	case N_DICT:
		v.t = JV_DICT;
		v.u.d = jdict_new(c);
		for (int i = 0; i + 1 < n->n_kids; i += 2) {
			struct jv k = jeval(c, n->kids[i]);
			if (k.t != JV_STR)
				jfail(c, n->kids[i], "dict keys must be strings here, not %s", jv_type_name(k));
			jdict_set(c, v.u.d, k.u.s, jeval(c, n->kids[i + 1]));
		}
		return v;
	case N_NAME: return lookup(c, n->s, n->slen);
	case N_ATTR:
		a = jeval(c, n->a);
		if (a.t == JV_UNDEF)
			jfail(c, n, "undefined value has no attribute \"%s\"", n->s);
		if (a.t == JV_DICT) {
			struct jv *f = jdict_get(a.u.d, n->s, n->slen);
			if (f)
				return *f;
		}
		return (struct jv){ .t = JV_UNDEF };
	case N_INDEX:
		a = jeval(c, n->a);
		return get_item(c, n, a, jeval(c, n->b));
	case N_SLICE: return eval_slice(c, n);
	case N_CALL: return eval_call(c, n);
	case N_FILTER:
	case N_TEST: {
		struct jv args[16];
		if (n->n_kids > 16)
			jfail(c, n, "too many arguments");
		a = jeval(c, n->a);
		for (int i = 0; i < n->n_kids; i++)
			args[i] = jeval(c, n->kids[i]);
		if (n->kind == N_FILTER)
			return jfilter(c, n, a, args, n->n_kids);
		v.t = JV_BOOL;
		v.u.b = jtest(c, n, a, args, n->n_kids) != n->negate;
		return v;
	}
	case N_NOT: v.t = JV_BOOL; v.u.b = !jtruthy(jeval(c, n->a)); return v;
	case N_NEG:
	case N_POS:
		a = jeval(c, n->a);
		if (a.t == JV_INT || a.t == JV_BOOL)
			return (struct jv){ .t = JV_INT, .u.i = (a.t == JV_INT ? a.u.i : a.u.b) * (n->kind == N_NEG ? -1 : 1) };
		if (a.t == JV_FLOAT)
			return (struct jv){ .t = JV_FLOAT, .u.f = n->kind == N_NEG ? -a.u.f : a.u.f };
		jfail(c, n, "bad operand type for unary minus: %s", jv_type_name(a));
	case N_AND:
		a = jeval(c, n->a);
		return jtruthy(a) ? jeval(c, n->b) : a;
	case N_OR:
		a = jeval(c, n->a);
		return jtruthy(a) ? a : jeval(c, n->b);
	case N_BINOP:
		a = jeval(c, n->a);
		b = jeval(c, n->b);
		return arith(c, n, a, b);
	case N_CMP:
		a = jeval(c, n->a);
		b = jeval(c, n->b);
		v.t = JV_BOOL;
		if (strcmp(n->s, "==") == 0)
			v.u.b = jv_equal(a, b);
		else if (strcmp(n->s, "!=") == 0)
			v.u.b = !jv_equal(a, b);
		else {
			int r = cmp_values(c, n, a, b);
			v.u.b = n->s[0] == '<' ? (n->s[1] ? r <= 0 : r < 0) : (n->s[1] ? r >= 0 : r > 0);
		}
		return v;
	case N_IN:
	case N_NOT_IN:
		a = jeval(c, n->a);
		b = jeval(c, n->b);
		v.t = JV_BOOL;
		v.u.b = contains(c, n, b, a) != (n->kind == N_NOT_IN);
		return v;
	case N_COND:
		if (jtruthy(jeval(c, n->b)))
			return jeval(c, n->a);
		return n->c ? jeval(c, n->c) : (struct jv){ .t = JV_UNDEF };
	default:
		jfail(c, n, "not an expression");
	}
}

/* ---- statements ------------------------------------------------------ */

static void exec_body(struct jctx *c, const struct jnode *body);

static void push_scope(struct jctx *c)
{
	struct jscope *s = ja_alloc(&c->arena, sizeof *s);

	s->vars = jdict_new(c);
	s->up = c->scope;
	c->scope = s;
}

static void assign(struct jctx *c, const struct jnode *n, struct jv v)
{
	if (n->n_names == 1) {
		jdict_set(c, c->scope->vars, key_of(c, n->names[0]), v);
		return;
	}
	if (v.t != JV_LIST || v.u.l->n != (size_t)n->n_names)
		jfail(c, n, "cannot unpack %s into %d names", jv_type_name(v), n->n_names);
	for (int i = 0; i < n->n_names; i++)
		jdict_set(c, c->scope->vars, key_of(c, n->names[i]), v.u.l->v[i]);
}

static struct jlist *iter_items(struct jctx *c, const struct jnode *at, struct jv seq)
{
	struct jlist *l = jlist_new(c);

	if (seq.t == JV_LIST)
		return seq.u.l;
	if (seq.t == JV_UNDEF)
		return l;
	if (seq.t == JV_DICT) {
		for (size_t i = 0; i < seq.u.d->n; i++)
			jlist_push(c, l, (struct jv){ .t = JV_STR, .u.s = seq.u.d->k[i] });
		return l;
	}
	if (seq.t == JV_STR) {
		long long n;
		size_t *idx = cp_index(c, seq.u.s, &n);
		for (long long i = 0; i < n; i++)
			jlist_push(c, l, jv_substr(c, seq.u.s, idx[i], idx[i + 1]));
		return l;
	}
	jfail(c, at, "cannot loop over %s", jv_type_name(seq));
}

static void set_int(struct jctx *c, struct jdict *d, const char *k, long long i)
{
	jdict_set(c, d, key_of(c, k), (struct jv){ .t = JV_INT, .u.i = i });
}

static void exec_for(struct jctx *c, const struct jnode *n)
{
	struct jlist *all = iter_items(c, n->a, jeval(c, n->a)), *items = all;
	struct jv undef = { .t = JV_UNDEF };

	if (n->filter) {
		items = jlist_new(c);
		for (size_t i = 0; i < all->n; i++) {
			push_scope(c);
			assign(c, n, all->v[i]);
			if (jtruthy(jeval(c, n->filter)))
				jlist_push(c, items, all->v[i]);
			c->scope = c->scope->up;
		}
	}
	long long len = (long long)items->n;
	for (long long i = 0; i < len; i++) {
		struct jdict *loop = jdict_new(c);
		push_scope(c);
		set_int(c, loop, "index", i + 1);
		set_int(c, loop, "index0", i);
		set_int(c, loop, "revindex", len - i);
		set_int(c, loop, "revindex0", len - i - 1);
		set_int(c, loop, "length", len);
		jdict_set(c, loop, key_of(c, "first"), (struct jv){ .t = JV_BOOL, .u.b = i == 0 });
		jdict_set(c, loop, key_of(c, "last"), (struct jv){ .t = JV_BOOL, .u.b = i == len - 1 });
		jdict_set(c, loop, key_of(c, "previtem"), i > 0 ? items->v[i - 1] : undef);
		jdict_set(c, loop, key_of(c, "nextitem"), i + 1 < len ? items->v[i + 1] : undef);
		jdict_set(c, loop, key_of(c, "depth"), (struct jv){ .t = JV_INT, .u.i = 1 });
		jdict_set(c, c->scope->vars, key_of(c, "loop"), (struct jv){ .t = JV_DICT, .u.d = loop });
		assign(c, n, items->v[i]);
		exec_body(c, n->b);
		c->scope = c->scope->up;
		if (c->loop_ctl == 1) {
			c->loop_ctl = 0;
			break;
		}
		c->loop_ctl = 0;
	}
	if (len == 0 && n->c)
		exec_body(c, n->c);
}

static void exec_stmt(struct jctx *c, const struct jnode *n)
{
	struct jv v;

	switch (n->kind) {
	case N_TEXT: jbuf_put(c, &c->out, n->s, n->slen, 0); break;
	case N_OUTPUT: jv_to_buf(c, &c->out, jeval(c, n->a), 0); break;
	case N_IF:
		if (jtruthy(jeval(c, n->a)))
			exec_body(c, n->b);
		else if (n->c)
			n->c->kind == N_IF ? exec_stmt(c, n->c) : exec_body(c, n->c);
		break;
	case N_FOR:
		if (++c->depth > 64)
			jfail(c, n, "loops nested too deep");
		exec_for(c, n);
		c->depth--;
		break;
	case N_SET: assign(c, n, jeval(c, n->a)); break;
	case N_SET_ATTR: {
		struct jv ns = lookup(c, n->s, strlen(n->s));
		if (ns.t != JV_DICT || !ns.u.d->is_ns)
			jfail(c, n, "cannot set an attribute of %s \"%s\" (only of a namespace())", jv_type_name(ns), n->s);
		v = jeval(c, n->a);
		jdict_set(c, ns.u.d, key_of(c, n->names[0]), v);
		break;
	}
	case N_BREAK: c->loop_ctl = 1; break;
	case N_CONTINUE: c->loop_ctl = 2; break;
	case N_BODY: exec_body(c, n); break;
	default: jfail(c, n, "not a statement");
	}
}

static void exec_body(struct jctx *c, const struct jnode *body)
{
	for (int i = 0; i < body->n_kids && c->loop_ctl == 0; i++)
		exec_stmt(c, body->kids[i]);
}

int jinja_render(struct jinja_output *out, const struct jinja_template *t, const cJSON *vars, int taint_messages,
		 const struct tm *today, char *err, size_t errsz)
{
	struct jctx *c = xcalloc(1, sizeof *c);
	const cJSON *e;
	int i = 0;

	memset(out, 0, sizeof *out);
	c->err = err;
	c->errsz = errsz;
	c->today = today;
	if (setjmp(c->fail)) {
		ja_free_all(&c->arena);
		free(c);
		return -1;
	}
	push_scope(c);
	cJSON_ArrayForEach(e, vars) {
		struct jv v = from_json(c, e, 0);
		if (taint_messages && strcmp(e->string, "messages") == 0 && cJSON_IsArray(e)) {
			const cJSON *m;
			i = 0;
			cJSON_ArrayForEach(m, e) {
				const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
				if (cJSON_IsString(content) && v.u.l->v[i].t == JV_DICT)
					jdict_set(c, v.u.l->v[i].u.d, key_of(c, "content"), from_json(c, content, i + 1));
				i++;
			}
		}
		jdict_set(c, c->scope->vars, key_of(c, e->string), v);
	}
	push_scope(c); /* the template's own {% set %} at top level */
	exec_body(c, t->root);
	jbuf_put(c, &c->out, "", 0, 0);
	out->len = c->out.n;
	out->text = xmalloc(out->len + 1);
	memcpy(out->text, c->out.p, out->len + 1);
	out->origin = xmalloc((out->len ? out->len : 1) * sizeof *out->origin);
	memcpy(out->origin, c->out.org, out->len * sizeof *out->origin);
	out->n_anchor = c->out.n_anc;
	out->anchor_pos = xmalloc((out->n_anchor ? out->n_anchor : 1) * sizeof *out->anchor_pos);
	out->anchor_origin = xmalloc((out->n_anchor ? out->n_anchor : 1) * sizeof *out->anchor_origin);
	if (out->n_anchor) {
		memcpy(out->anchor_pos, c->out.anc_pos, out->n_anchor * sizeof *out->anchor_pos);
		memcpy(out->anchor_origin, c->out.anc_org, out->n_anchor * sizeof *out->anchor_origin);
	}
	ja_free_all(&c->arena);
	free(c);
	return 0;
}

void jinja_output_free(struct jinja_output *out)
{
	free(out->text);
	free(out->origin);
	free(out->anchor_pos);
	free(out->anchor_origin);
	memset(out, 0, sizeof *out);
}
