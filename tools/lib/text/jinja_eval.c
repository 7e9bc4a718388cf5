/* tools/lib/text/jinja_eval.c: the evaluator of the Jinja subset (jinja.h):
 * expressions, statements and the render; its values are jinja_value.c's. */
#define _GNU_SOURCE /* memmem */
#include "jinja_int.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

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

void jcharge(struct jctx *c, long long n)
{
	c->steps += n;
	if (c->steps > c->max_steps)
		jfail(c, c->at, "the template ran more than %lld steps", c->max_steps);
}

static struct jv *dict_get(struct jctx *c, const struct jdict *d, const char *k, size_t n)
{
	jcharge(c, (long long)(d->n / JINJA_SCAN_PER_STEP));
	return jdict_get(d, k, n);
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
		struct jv *v = dict_get(c, s->vars, name, n);
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
		v = dict_get(c, obj.u.d, key.u.s->p, key.u.s->n);
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
	if (a.t == JV_INT && b.t == JV_INT) /* exact, beyond a double's 53 bits */
		return (a.u.i > b.u.i) - (a.u.i < b.u.i);
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
		jcharge(c, (long long)((hay.u.s->n + needle.u.s->n) / JINJA_SCAN_PER_STEP));
		return memmem(hay.u.s->p, hay.u.s->n, needle.u.s->p, needle.u.s->n) != NULL;
	}
	if (hay.t == JV_LIST) {
		for (size_t i = 0; i < hay.u.l->n; i++)
			if (jv_equal(c, hay.u.l->v[i], needle))
				return 1;
		return 0;
	}
	if (hay.t == JV_DICT)
		return needle.t == JV_STR && dict_get(c, hay.u.d, needle.u.s->p, needle.u.s->n) != NULL;
	if (hay.t == JV_UNDEF)
		jfail(c, at, "'in' on an undefined value");
	jfail(c, at, "'in' needs a string, list or mapping on the right, not %s", jv_type_name(hay));
}

static _Noreturn void int_overflow(struct jctx *c, const struct jnode *n, long long x, long long y)
{
	jfail(c, n, "integer overflow: %lld %s %lld is beyond 64 bits (big integers are not supported)", x, n->s, y);
}

/* x ** y for y >= 0, by squaring: at most 63 rounds */
static long long int_pow(struct jctx *c, const struct jnode *n, long long x, long long y)
{
	long long r = 1, base = x;

	for (long long e = y; e > 0; e >>= 1) {
		if ((e & 1) && __builtin_mul_overflow(r, base, &r))
			int_overflow(c, n, x, y);
		if (e > 1 && __builtin_mul_overflow(base, base, &base))
			int_overflow(c, n, x, y);
	}
	return r;
}

/* Python's integer x OP y (OP one of + - * ** // %): exact, or refused */
static long long int_arith(struct jctx *c, const struct jnode *n, long long x, long long y)
{
	const char *op = n->s;
	long long r;

	if (op[0] == '+' ? __builtin_add_overflow(x, y, &r) : op[0] == '-' ? __builtin_sub_overflow(x, y, &r)
	    : strcmp(op, "*") == 0 ? __builtin_mul_overflow(x, y, &r) : 0)
		int_overflow(c, n, x, y);
	if (op[0] == '+' || op[0] == '-' || strcmp(op, "*") == 0)
		return r;
	if (strcmp(op, "**") == 0)
		return int_pow(c, n, x, y);
	if (y == 0)
		jfail(c, n, "integer division or modulo by zero");
	if (y == -1) { /* x / -1 traps in C for the least x */
		if (op[0] == '%')
			return 0;
		if (x == LLONG_MIN)
			int_overflow(c, n, x, y);
		return -x;
	}
	long long q = x / y, m = x % y;
	if (m != 0 && ((m < 0) != (y < 0))) {
		q--;
		m += y;
	}
	return op[0] == '%' ? m : q;
}

/* Python's float x OP y, or an int's / and negative ** */
static double float_arith(struct jctx *c, const struct jnode *n, double x, double y)
{
	const char *op = n->s;

	switch (op[0]) {
	case '+': return x + y;
	case '-': return x - y;
	case '*':
		if (op[1] != '*')
			return x * y;
		if (x == 0 && y < 0)
			jfail(c, n, "0.0 cannot be raised to a negative power");
		if (x < 0 && y != floor(y) && isfinite(y))
			jfail(c, n, "a negative number to a fractional power is complex (not supported)");
		double r = pow(x, y);
		if (isinf(r) && isfinite(x) && isfinite(y))
			jfail(c, n, "%s: the result is out of range", op);
		return r;
	}
	if (y == 0)
		jfail(c, n, "float division by zero");
	if (strcmp(op, "/") == 0)
		return x / y;
	double fl = floor(x / y);
	return op[0] == '%' ? x - fl * y : fl;
}

static struct jv concat(struct jctx *c, struct jv a, struct jv b, int as_str)
{
	struct jbuf buf = { 0 };
	struct jv r = { .t = JV_LIST };

	if (as_str) {
		jv_to_buf(c, &buf, a, 0);
		jv_to_buf(c, &buf, b, 0);
		return jv_from_buf(c, &buf);
	}
	r.u.l = jlist_new(c);
	for (size_t i = 0; i < a.u.l->n; i++)
		jlist_push(c, r.u.l, a.u.l->v[i]);
	for (size_t i = 0; i < b.u.l->n; i++)
		jlist_push(c, r.u.l, b.u.l->v[i]);
	return r;
}

static struct jv arith(struct jctx *c, const struct jnode *n, struct jv a, struct jv b)
{
	const char *op = n->s;

	if (op[0] == '~' || (op[0] == '+' && a.t == JV_STR && b.t == JV_STR))
		return concat(c, a, b, 1);
	if (op[0] == '+' && a.t == JV_LIST && b.t == JV_LIST)
		return concat(c, a, b, 0);
	if (!is_num(a) || !is_num(b))
		jfail(c, n, "unsupported operand types for %s: %s and %s", op, jv_type_name(a), jv_type_name(b));
	long long x = a.t == JV_INT ? a.u.i : a.t == JV_BOOL ? a.u.b : 0, y = b.t == JV_INT ? b.u.i : b.t == JV_BOOL ? b.u.b : 0;
	if (a.t != JV_FLOAT && b.t != JV_FLOAT && strcmp(op, "/") != 0) {
		if (strcmp(op, "**") != 0 || y >= 0)
			return (struct jv){ .t = JV_INT, .u.i = int_arith(c, n, x, y) };
		if (x == 0)
			jfail(c, n, "0 cannot be raised to a negative power");
	}
	return (struct jv){ .t = JV_FLOAT, .u.f = float_arith(c, n, num_of(a), num_of(b)) };
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

	c->at = n;
	jcharge(c, 1);
	switch (n->kind) {
	case N_LIT_STR: return (struct jv){ .t = JV_STR, .u.s = n->lit };
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
			struct jv *f = dict_get(c, a.u.d, n->s, n->slen);
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
		if (a.t == JV_INT && a.u.i == LLONG_MIN && n->kind == N_NEG)
			jfail(c, n, "integer overflow: -(%lld) is beyond 64 bits (big integers are not supported)", a.u.i);
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
			v.u.b = jv_equal(c, a, b);
		else if (strcmp(n->s, "!=") == 0)
			v.u.b = !jv_equal(c, a, b);
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

/* n's target names, one key each (keys[i] for names[i]), bound to v */
static void assign_keys(struct jctx *c, const struct jnode *n, struct jstr **keys, struct jv v)
{
	if (n->n_names == 1) {
		jdict_set(c, c->scope->vars, keys[0], v);
		return;
	}
	if (v.t != JV_LIST || v.u.l->n != (size_t)n->n_names)
		jfail(c, n, "cannot unpack %s into %d names", jv_type_name(v), n->n_names);
	for (int i = 0; i < n->n_names; i++)
		jdict_set(c, c->scope->vars, keys[i], v.u.l->v[i]);
}

static struct jstr **name_keys(struct jctx *c, const struct jnode *n)
{
	struct jstr **keys = ja_alloc(&c->arena, (size_t)n->n_names * sizeof *keys);

	for (int i = 0; i < n->n_names; i++)
		keys[i] = key_of(c, n->names[i]);
	return keys;
}

static void assign(struct jctx *c, const struct jnode *n, struct jv v)
{
	assign_keys(c, n, name_keys(c, n), v);
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

static void count_iteration(struct jctx *c, const struct jnode *n)
{
	if (++c->iterations > c->max_iterations)
		jfail(c, n, "the template's loops ran more than %lld iterations", c->max_iterations);
}

/* What a loop reuses from one iteration to the next, so that an
 * iteration allocates nothing: its scope (emptied each time, as Jinja
 * starts each iteration afresh), the keys of its names, and its `loop`,
 * one object whose fields move on (as Jinja's LoopContext). */
struct loop_frame {
	struct jscope scope;
	struct jstr **keys;
	struct jstr *loop_key;
	struct jdict *loop;
};

enum { L_INDEX, L_INDEX0, L_REVINDEX, L_REVINDEX0, L_LENGTH, L_FIRST, L_LAST, L_PREVITEM, L_NEXTITEM, L_DEPTH,
       N_LOOP_FIELDS };
static const char *const loop_fields[N_LOOP_FIELDS] = { "index", "index0", "revindex", "revindex0", "length", "first",
							 "last", "previtem", "nextitem", "depth" };

static void frame_init(struct jctx *c, struct loop_frame *f, const struct jnode *n)
{
	f->scope.vars = jdict_new(c);
	f->keys = name_keys(c, n);
	f->loop_key = key_of(c, "loop");
	f->loop = jdict_new(c);
	for (int k = 0; k < N_LOOP_FIELDS; k++)
		jdict_set(c, f->loop, key_of(c, loop_fields[k]), (struct jv){ .t = JV_UNDEF });
}

/* A fresh iteration's scope, with item bound to the loop's names. */
static void frame_enter(struct jctx *c, struct loop_frame *f, const struct jnode *n, struct jv item)
{
	count_iteration(c, n);
	f->scope.vars->n = 0;
	f->scope.up = c->scope;
	c->scope = &f->scope;
	assign_keys(c, n, f->keys, item);
}

static void loop_field(struct jctx *c, struct loop_frame *f, int k, struct jv v)
{
	jdict_set(c, f->loop, f->loop->k[k], v);
}

static void set_loop(struct jctx *c, struct loop_frame *f, const struct jlist *items, long long i)
{
	long long len = (long long)items->n;
	struct jv undef = { .t = JV_UNDEF };

	loop_field(c, f, L_INDEX, (struct jv){ .t = JV_INT, .u.i = i + 1 });
	loop_field(c, f, L_INDEX0, (struct jv){ .t = JV_INT, .u.i = i });
	loop_field(c, f, L_REVINDEX, (struct jv){ .t = JV_INT, .u.i = len - i });
	loop_field(c, f, L_REVINDEX0, (struct jv){ .t = JV_INT, .u.i = len - i - 1 });
	loop_field(c, f, L_LENGTH, (struct jv){ .t = JV_INT, .u.i = len });
	loop_field(c, f, L_FIRST, (struct jv){ .t = JV_BOOL, .u.b = i == 0 });
	loop_field(c, f, L_LAST, (struct jv){ .t = JV_BOOL, .u.b = i == len - 1 });
	loop_field(c, f, L_PREVITEM, i > 0 ? items->v[i - 1] : undef);
	loop_field(c, f, L_NEXTITEM, i + 1 < len ? items->v[i + 1] : undef);
	loop_field(c, f, L_DEPTH, (struct jv){ .t = JV_INT, .u.i = 1 });
	jdict_set(c, c->scope->vars, f->loop_key, (struct jv){ .t = JV_DICT, .u.d = f->loop });
}

static void exec_for(struct jctx *c, const struct jnode *n)
{
	struct jlist *all = iter_items(c, n->a, jeval(c, n->a)), *items = all;
	struct loop_frame f = { 0 };

	frame_init(c, &f, n);
	if (n->filter) {
		items = jlist_new(c);
		for (size_t i = 0; i < all->n; i++) {
			frame_enter(c, &f, n, all->v[i]);
			if (jtruthy(jeval(c, n->filter)))
				jlist_push(c, items, all->v[i]);
			c->scope = c->scope->up;
		}
	}
	long long len = (long long)items->n;
	for (long long i = 0; i < len; i++) {
		frame_enter(c, &f, n, items->v[i]);
		set_loop(c, &f, items, i);
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

static void check_output(struct jctx *c, const struct jnode *n)
{
	if (c->out.n > c->max_output)
		jfail(c, n, "the output is over %zu MiB", c->max_output >> 20);
}

static void exec_stmt(struct jctx *c, const struct jnode *n)
{
	struct jv v;

	c->at = n;
	jcharge(c, 1);
	switch (n->kind) {
	case N_TEXT: jbuf_put(c, &c->out, n->s, n->slen, 0); check_output(c, n); break;
	case N_OUTPUT: jv_to_buf(c, &c->out, jeval(c, n->a), 0); check_output(c, n); break;
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

/* The bytes of a JSON value's strings and keys, and 16 a value: what the
 * render's budgets grow with. */
static size_t context_bytes(const cJSON *j)
{
	size_t n = 16 + (j->string ? strlen(j->string) : 0) + (cJSON_IsString(j) ? strlen(j->valuestring) : 0);

	for (const cJSON *e = j->child; e; e = e->next)
		n += context_bytes(e);
	return n;
}

static _Noreturn void render_exhausted(void *owner)
{
	struct jctx *c = owner;

	jfail(c, c->at, "the render needs more than %zu MiB", c->arena.limit >> 20);
}

static void set_budgets(struct jctx *c, const cJSON *vars)
{
	size_t context = context_bytes(vars);

	c->max_steps = JINJA_MAX_STEPS(context);
	c->max_iterations = JINJA_MAX_ITERATIONS(context);
	c->max_output = JINJA_MAX_OUTPUT(context);
	c->arena.limit = JINJA_MAX_RENDER_MEMORY(context);
	c->arena.exhausted = render_exhausted;
	c->arena.owner = c;
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
	set_budgets(c, vars);
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
	c->steps = 0; /* the budget is the template's: the context's own size is counted in it */
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
