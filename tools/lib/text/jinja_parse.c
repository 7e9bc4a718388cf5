/* tools/lib/text/jinja_parse.c: Jinja tokens (jinja_lex.c) -> AST. */
#include "jinja_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- parser ---------------------------------------------------------- */

static struct tok *peek(struct parser *p) { return &p->t[p->at]; }
static struct tok *next(struct parser *p) { return &p->t[p->at < p->n - 1 ? p->at++ : p->at]; }

static int is_op(const struct tok *t, const char *op)
{
	return t->kind == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}

static int is_name(const struct tok *t, const char *name)
{
	return t->kind == T_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static _Noreturn void unexpected(struct parser *p, const struct tok *t, const char *want)
{
	const char *what = t->kind == T_EOF ? "the end of the template" : t->kind == T_BLOCK_END ? "the end of the tag"
		: t->kind == T_VAR_END ? "'}}'" : t->kind == T_STRING ? "a string" : t->kind == T_TEXT ? "text" : NULL;
	if (what)
		perr(p, t->line, t->col, "expected %s, found %s", want, what);
	perr(p, t->line, t->col, "expected %s, found \"%.*s\"", want, (int)t->n, t->s);
}

static void expect_op(struct parser *p, const char *op)
{
	char want[16];

	if (!is_op(peek(p), op)) {
		snprintf(want, sizeof want, "'%s'", op);
		unexpected(p, peek(p), want);
	}
	next(p);
}

static struct jnode *node(struct parser *p, enum jnode_kind k, const struct tok *at)
{
	struct jnode *n = ja_alloc(p->arena, sizeof *n);

	n->kind = k;
	n->line = at->line;
	n->col = at->col;
	return n;
}

static char *name_dup(struct parser *p, const struct tok *t)
{
	char *s = ja_alloc(p->arena, t->n + 1);

	memcpy(s, t->s, t->n);
	return s;
}

static void add_kid(struct parser *p, struct jnode *n, struct jnode *kid, const char *kw)
{
	if ((n->n_kids & (n->n_kids - 1)) == 0) { /* 0 or a power of two: full, double */
		size_t cap = n->n_kids ? 2 * (size_t)n->n_kids : 1;
		n->kids = ja_grow(p->arena, n->kids, cap * sizeof *n->kids);
		n->kw = ja_grow(p->arena, n->kw, cap * sizeof *n->kw);
	}
	n->kids[n->n_kids] = kid;
	n->kw[n->n_kids] = kw;
	n->n_kids++;
}

/* One level deeper into brackets, operators or tags; leave() is the way
 * out.  The parser and the evaluator recurse as deep as the template
 * nests, so this is what keeps their stacks bounded. */
static void enter(struct parser *p)
{
	if (++p->nesting > JINJA_MAX_NESTING)
		perr(p, peek(p)->line, peek(p)->col, "the template nests more than %d deep (brackets, operators, tags)",
		     JINJA_MAX_NESTING);
}

static void leave(struct parser *p) { p->nesting--; }

static struct jnode *parse_expr(struct parser *p);
static struct jnode *parse_or(struct parser *p);
static struct jnode *parse_unary(struct parser *p, int with_filter);

/* (args, kw=val) after the '(' was seen */
static void parse_args(struct parser *p, struct jnode *n)
{
	expect_op(p, "(");
	while (!is_op(peek(p), ")")) {
		const char *kw = NULL;
		if (peek(p)->kind == T_NAME && p->at + 1 < p->n && is_op(&p->t[p->at + 1], "=")) {
			kw = name_dup(p, next(p));
			next(p);
		}
		add_kid(p, n, parse_expr(p), kw);
		if (!is_op(peek(p), ","))
			break;
		next(p);
	}
	expect_op(p, ")");
}

/* Adjacent string literals after n's are one literal. */
static void concat_literals(struct parser *p, struct jnode *n)
{
	size_t len = n->slen, k;
	char *s;

	for (k = p->at; p->t[k].kind == T_STRING; k++)
		len += p->t[k].n;
	s = ja_alloc(p->arena, len + 1);
	memcpy(s, n->s, n->slen);
	n->s = s;
	while (peek(p)->kind == T_STRING) {
		struct tok *u = next(p);
		memcpy(s + n->slen, u->s, u->n);
		n->slen += u->n;
	}
}

static struct jnode *parse_primary(struct parser *p)
{
	struct tok *t = next(p);
	struct jnode *n;

	switch (t->kind) {
	case T_STRING: {
		n = node(p, N_LIT_STR, t);
		n->s = t->s;
		n->slen = t->n;
		if (peek(p)->kind == T_STRING)
			concat_literals(p, n);
		n->lit = ja_alloc(p->arena, sizeof *n->lit);
		n->lit->p = n->s;
		n->lit->n = n->slen;
		return n;
	}
	case T_INT: n = node(p, N_LIT_INT, t); n->i = t->i; return n;
	case T_FLOAT: n = node(p, N_LIT_FLOAT, t); n->f = t->f; return n;
	case T_NAME:
		if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
			n = node(p, N_LIT_BOOL, t);
			n->i = t->s[0] == 't' || t->s[0] == 'T';
			return n;
		}
		if (is_name(t, "none") || is_name(t, "None"))
			return node(p, N_LIT_NONE, t);
		n = node(p, N_NAME, t);
		n->s = name_dup(p, t);
		n->slen = t->n;
		return n;
	case T_OP:
		if (is_op(t, "(")) {
			struct jnode *e;
			if (is_op(peek(p), ")")) {
				next(p);
				return node(p, N_TUPLE, t);
			}
			e = parse_expr(p);
			if (is_op(peek(p), ",")) {
				n = node(p, N_TUPLE, t);
				add_kid(p, n, e, NULL);
				while (is_op(peek(p), ",")) {
					next(p);
					if (is_op(peek(p), ")"))
						break;
					add_kid(p, n, parse_expr(p), NULL);
				}
				e = n;
			}
			expect_op(p, ")");
			return e;
		}
		if (is_op(t, "[")) {
			n = node(p, N_LIST, t);
			while (!is_op(peek(p), "]")) {
				add_kid(p, n, parse_expr(p), NULL);
				if (!is_op(peek(p), ","))
					break;
				next(p);
			}
			expect_op(p, "]");
			return n;
		}
		if (is_op(t, "{")) {
			n = node(p, N_DICT, t);
			while (!is_op(peek(p), "}")) {
				add_kid(p, n, parse_expr(p), NULL);
				expect_op(p, ":");
				add_kid(p, n, parse_expr(p), NULL);
				if (!is_op(peek(p), ","))
					break;
				next(p);
			}
			expect_op(p, "}");
			return n;
		}
		break;
	default:
		break;
	}
	p->at--;
	unexpected(p, t, "an expression");
}

static struct jnode *parse_postfix(struct parser *p, struct jnode *n)
{
	for (;;) {
		struct tok *t = peek(p);
		if (is_op(t, ".")) {
			next(p);
			struct tok *a = next(p);
			struct jnode *m = node(p, N_ATTR, t);
			if (a->kind == T_INT) { /* x.0 is x[0] */
				m->kind = N_INDEX;
				m->a = n;
				m->b = node(p, N_LIT_INT, a);
				m->b->i = a->i;
				n = m;
				continue;
			}
			if (a->kind != T_NAME)
				unexpected(p, a, "an attribute name");
			m->a = n;
			m->s = name_dup(p, a);
			m->slen = a->n;
			n = m;
		} else if (is_op(t, "[")) {
			struct jnode *m, *parts[3] = { NULL, NULL, NULL };
			int k = 0, slice = 0;
			next(p);
			for (;;) {
				if (!is_op(peek(p), ":") && !is_op(peek(p), "]"))
					parts[k] = parse_expr(p);
				if (is_op(peek(p), ":") && k < 2) {
					next(p);
					slice = 1;
					k++;
					continue;
				}
				break;
			}
			expect_op(p, "]");
			if (slice) {
				m = node(p, N_SLICE, t);
				m->b = parts[0];
				m->c = parts[1];
				m->filter = parts[2];
			} else {
				if (parts[0] == NULL)
					unexpected(p, peek(p), "an index");
				m = node(p, N_INDEX, t);
				m->b = parts[0];
			}
			m->a = n;
			n = m;
		} else if (is_op(t, "(")) {
			struct jnode *m = node(p, N_CALL, t);
			m->a = n;
			parse_args(p, m);
			n = m;
		} else {
			return n;
		}
	}
}

static int starts_primary(const struct tok *t)
{
	if (t->kind == T_STRING || t->kind == T_INT || t->kind == T_FLOAT)
		return 1;
	if (t->kind == T_NAME)
		return !(is_name(t, "and") || is_name(t, "or") || is_name(t, "else") || is_name(t, "if") ||
			 is_name(t, "in") || is_name(t, "is") || is_name(t, "not"));
	return is_op(t, "(") || is_op(t, "[") || is_op(t, "{");
}

/* `| filter(args)` and `is [not] test args`, which bind tighter than any
 * operator */
static struct jnode *parse_filters(struct parser *p, struct jnode *n)
{
	for (;;) {
		struct tok *t = peek(p);
		if (is_op(t, "|")) {
			next(p);
			struct tok *f = next(p);
			if (f->kind != T_NAME)
				unexpected(p, f, "a filter name");
			struct jnode *m = node(p, N_FILTER, f);
			m->a = n;
			m->s = name_dup(p, f);
			if (is_op(peek(p), "("))
				parse_args(p, m);
			n = m;
		} else if (is_name(t, "is")) {
			next(p);
			struct jnode *m = node(p, N_TEST, t);
			if (is_name(peek(p), "not")) {
				next(p);
				m->negate = 1;
			}
			struct tok *f = next(p);
			if (f->kind != T_NAME)
				unexpected(p, f, "a test name");
			m->s = name_dup(p, f);
			m->line = f->line;
			m->col = f->col;
			m->a = n;
			if (is_op(peek(p), "("))
				parse_args(p, m);
			else if (starts_primary(peek(p)))
				add_kid(p, m, parse_postfix(p, parse_primary(p)), NULL);
			n = m;
		} else {
			return n;
		}
	}
}

static struct jnode *parse_unary(struct parser *p, int with_filter)
{
	struct tok *t = peek(p);
	struct jnode *n;

	if (is_op(t, "-") || is_op(t, "+")) {
		next(p);
		n = node(p, is_op(t, "-") ? N_NEG : N_POS, t);
		enter(p);
		n->a = parse_unary(p, 0);
		leave(p);
	} else {
		n = parse_postfix(p, parse_primary(p));
	}
	return with_filter ? parse_filters(p, n) : n;
}

/* A node of two operands, a and b. */
static struct jnode *node2(struct parser *p, enum jnode_kind k, const struct tok *t, struct jnode *a, struct jnode *b)
{
	struct jnode *n = node(p, k, t);

	n->a = a;
	n->b = b;
	return n;
}

static struct jnode *binop(struct parser *p, const struct tok *t, const char *op, struct jnode *a, struct jnode *b)
{
	struct jnode *n = node2(p, N_BINOP, t, a, b);

	n->s = op;
	return n;
}

static struct jnode *parse_pow(struct parser *p)
{
	struct jnode *n = parse_unary(p, 1);

	while (is_op(peek(p), "**")) {
		struct tok *t = next(p);
		n = binop(p, t, "**", n, parse_unary(p, 1));
	}
	return n;
}

static struct jnode *parse_mul(struct parser *p)
{
	struct jnode *n = parse_pow(p);

	for (;;) {
		struct tok *t = peek(p);
		const char *op = is_op(t, "*") ? "*" : is_op(t, "/") ? "/" : is_op(t, "//") ? "//" : is_op(t, "%") ? "%" : NULL;
		if (op == NULL)
			return n;
		next(p);
		n = binop(p, t, op, n, parse_pow(p));
	}
}

static struct jnode *parse_concat(struct parser *p)
{
	struct jnode *n = parse_mul(p);

	while (is_op(peek(p), "~")) {
		struct tok *t = next(p);
		n = binop(p, t, "~", n, parse_mul(p));
	}
	return n;
}

static struct jnode *parse_add(struct parser *p)
{
	struct jnode *n = parse_concat(p);

	for (;;) {
		struct tok *t = peek(p);
		const char *op = is_op(t, "+") ? "+" : is_op(t, "-") ? "-" : NULL;
		if (op == NULL)
			return n;
		next(p);
		n = binop(p, t, op, n, parse_concat(p));
	}
}

static struct jnode *parse_compare(struct parser *p)
{
	struct jnode *n = parse_add(p);
	static const char *const cmps[] = { "==", "!=", "<", "<=", ">", ">=", NULL };

	for (;;) {
		struct tok *t = peek(p);
		const char *op = NULL;
		for (int k = 0; cmps[k]; k++)
			if (is_op(t, cmps[k]))
				op = cmps[k];
		if (op) {
			next(p);
			n = node2(p, N_CMP, t, n, parse_add(p));
			n->s = op;
		} else if (is_name(t, "in")) {
			next(p);
			n = node2(p, N_IN, t, n, parse_add(p));
		} else if (is_name(t, "not") && p->at + 1 < p->n && is_name(&p->t[p->at + 1], "in")) {
			next(p);
			next(p);
			n = node2(p, N_NOT_IN, t, n, parse_add(p));
		} else {
			return n;
		}
	}
}

static struct jnode *parse_not(struct parser *p)
{
	if (is_name(peek(p), "not")) {
		struct tok *t = next(p);
		struct jnode *n = node(p, N_NOT, t);
		enter(p);
		n->a = parse_not(p);
		leave(p);
		return n;
	}
	return parse_compare(p);
}

static struct jnode *parse_and(struct parser *p)
{
	struct jnode *n = parse_not(p);

	while (is_name(peek(p), "and")) {
		struct tok *t = next(p);
		n = node2(p, N_AND, t, n, parse_not(p));
	}
	return n;
}

static struct jnode *parse_or(struct parser *p)
{
	struct jnode *n = parse_and(p);

	while (is_name(peek(p), "or")) {
		struct tok *t = next(p);
		n = node2(p, N_OR, t, n, parse_and(p));
	}
	return n;
}

/* `a if cond else b` (else optional: undefined) */
static struct jnode *parse_expr(struct parser *p)
{
	struct jnode *n;

	enter(p);
	n = parse_or(p);

	while (is_name(peek(p), "if")) {
		struct tok *t = next(p);
		struct jnode *m = node2(p, N_COND, t, n, parse_or(p));
		if (is_name(peek(p), "else")) {
			next(p);
			m->c = parse_expr(p);
		}
		n = m;
	}
	leave(p);
	return n;
}

/* ---- statements ------------------------------------------------------ */

static void expect_block_end(struct parser *p)
{
	if (peek(p)->kind != T_BLOCK_END)
		unexpected(p, peek(p), "'%}'");
	next(p);
}

/* Target names: `a` or `a, b` (optionally in parentheses). */
static void parse_targets(struct parser *p, struct jnode *n)
{
	int paren = is_op(peek(p), "(");

	if (paren)
		next(p);
	for (;;) {
		struct tok *t = next(p);
		if (t->kind != T_NAME)
			unexpected(p, t, "a name");
		n->names = ja_grow(p->arena, n->names, (size_t)(n->n_names + 1) * sizeof *n->names);
		n->names[n->n_names++] = name_dup(p, t);
		if (!is_op(peek(p), ","))
			break;
		next(p);
	}
	if (paren)
		expect_op(p, ")");
}

static struct jnode *parse_body(struct parser *p, const char *const *ends, const char **found);
static struct jnode *parse_statements(struct parser *p, const char *const *ends, const char **found);

static struct jnode *parse_if(struct parser *p, const struct tok *at)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	struct jnode *n = node(p, N_IF, at);
	const char *found;

	n->a = parse_expr(p);
	expect_block_end(p);
	n->b = parse_body(p, ends, &found);
	if (strcmp(found, "elif") == 0) { /* a chain of elif is evaluated as deep as it is long */
		enter(p);
		n->c = parse_if(p, &p->t[p->at - 1]);
		leave(p);
		return n;
	}
	if (strcmp(found, "else") == 0) {
		static const char *const end[] = { "endif", NULL };
		expect_block_end(p);
		n->c = parse_body(p, end, &found);
	}
	expect_block_end(p);
	return n;
}

static struct jnode *parse_stmt(struct parser *p)
{
	struct tok *t = next(p);
	const char *found;

	if (t->kind != T_NAME)
		unexpected(p, t, "a tag name");
	if (is_name(t, "if"))
		return parse_if(p, t);
	if (is_name(t, "for")) {
		static const char *const ends[] = { "else", "endfor", NULL };
		struct jnode *n = node(p, N_FOR, t);
		parse_targets(p, n);
		if (!is_name(peek(p), "in"))
			unexpected(p, peek(p), "'in'");
		next(p);
		n->a = parse_or(p); /* the inline `if` is the loop's filter, not a conditional */
		if (is_name(peek(p), "if")) {
			next(p);
			n->filter = parse_or(p);
		}
		if (is_name(peek(p), "recursive"))
			perr(p, peek(p)->line, peek(p)->col, "recursive loops are not supported");
		expect_block_end(p);
		n->b = parse_body(p, ends, &found);
		if (strcmp(found, "else") == 0) {
			static const char *const end[] = { "endfor", NULL };
			expect_block_end(p);
			n->c = parse_body(p, end, &found);
		}
		expect_block_end(p);
		return n;
	}
	if (is_name(t, "set")) {
		struct jnode *n = node(p, N_SET, t);
		if (peek(p)->kind == T_NAME && p->at + 2 < p->n && is_op(&p->t[p->at + 1], ".")) {
			n->kind = N_SET_ATTR;
			n->s = name_dup(p, next(p));
			next(p);
			if (peek(p)->kind != T_NAME)
				unexpected(p, peek(p), "an attribute name");
			n->names = ja_alloc(p->arena, sizeof *n->names);
			n->names[0] = name_dup(p, next(p));
			n->n_names = 1;
		} else {
			parse_targets(p, n);
		}
		if (peek(p)->kind == T_BLOCK_END)
			perr(p, t->line, t->col, "block assignments ({%% set x %%}...{%% endset %%}) are not supported");
		expect_op(p, "=");
		n->a = parse_expr(p);
		if (is_op(peek(p), ",")) { /* set a, b = x, y */
			struct jnode *tu = node(p, N_TUPLE, peek(p));
			add_kid(p, tu, n->a, NULL);
			while (is_op(peek(p), ",")) {
				next(p);
				add_kid(p, tu, parse_expr(p), NULL);
			}
			n->a = tu;
		}
		expect_block_end(p);
		return n;
	}
	if (is_name(t, "break") || is_name(t, "continue")) {
		struct jnode *n = node(p, is_name(t, "break") ? N_BREAK : N_CONTINUE, t);
		expect_block_end(p);
		return n;
	}
	if (is_name(t, "generation")) { /* transformers' assistant-mask marker: its body */
		static const char *const ends[] = { "endgeneration", NULL };
		struct jnode *n;
		expect_block_end(p);
		n = parse_body(p, ends, &found);
		expect_block_end(p);
		return n;
	}
	perr(p, t->line, t->col, "unsupported tag \"%.*s\"", (int)t->n, t->s);
}

/* Statements up to one of the tags in ends (NULL: the end of the
 * template); *found is that tag, and the parser stands after its name. */
static struct jnode *parse_body(struct parser *p, const char *const *ends, const char **found)
{
	struct jnode *body;

	enter(p);
	body = parse_statements(p, ends, found);
	leave(p);
	return body;
}

static struct jnode *parse_statements(struct parser *p, const char *const *ends, const char **found)
{
	struct jnode *body = node(p, N_BODY, peek(p));

	for (;;) {
		struct tok *t = peek(p);
		if (t->kind == T_EOF) {
			if (ends == NULL) {
				*found = "";
				return body;
			}
			int last = 0;
			while (ends[last + 1])
				last++;
			perr(p, t->line, t->col, "missing {%% %s %%}", ends[last]);
		}
		next(p);
		if (t->kind == T_TEXT) {
			struct jnode *n = node(p, N_TEXT, t);
			n->s = t->s;
			n->slen = t->n;
			add_kid(p, body, n, NULL);
		} else if (t->kind == T_VAR_BEGIN) {
			struct jnode *n = node(p, N_OUTPUT, t);
			n->a = parse_expr(p);
			if (peek(p)->kind != T_VAR_END)
				unexpected(p, peek(p), "'}}'");
			next(p);
			add_kid(p, body, n, NULL);
		} else if (t->kind == T_BLOCK_BEGIN) {
			struct tok *name = peek(p);
			for (int k = 0; ends && ends[k]; k++)
				if (is_name(name, ends[k])) {
					next(p);
					*found = ends[k];
					return body;
				}
			if (name->kind == T_NAME && (is_name(name, "endif") || is_name(name, "endfor") ||
						     is_name(name, "else") || is_name(name, "elif") ||
						     is_name(name, "endgeneration")))
				perr(p, name->line, name->col, "unexpected {%% %.*s %%}", (int)name->n, name->s);
			add_kid(p, body, parse_stmt(p), NULL);
		} else {
			unexpected(p, t, "text or a tag");
		}
	}
}

static _Noreturn void parse_exhausted(void *owner)
{
	struct parser *p = owner;
	const struct tok *at = p->n ? &p->t[p->at ? p->at : p->n - 1] : NULL; /* parsing, or lexing */

	perr(p, at ? at->line : 1, at ? at->col : 1, "parsing the template needs more than %zu MiB",
	     p->arena->limit >> 20);
}

int jinja_parse(struct jinja_template **out, const char *src, size_t len, char *err, size_t errsz)
{
	struct jinja_template *t = xcalloc(1, sizeof *t);
	struct parser p = { 0 };
	const char *found;

	*out = NULL;
	p.arena = &t->arena;
	p.src = src;
	p.len = len;
	p.err = err;
	p.errsz = errsz;
	t->arena.limit = JINJA_MAX_PARSE_MEMORY(len);
	t->arena.exhausted = parse_exhausted;
	t->arena.owner = &p;
	if (setjmp(p.fail)) {
		ja_free_all(&t->arena);
		free(t);
		return -1;
	}
	/* the tokens point into the source: a copy in the arena, with Jinja's
	 * newlines (\r\n and \r read as \n) and one trailing newline dropped
	 * (keep_trailing_newline is false) */
	char *copy = ja_alloc(&t->arena, len + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			copy[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else
			copy[n++] = src[i];
	}
	if (n > 0 && copy[n - 1] == '\n')
		n--;
	copy[n] = '\0';
	p.src = copy;
	p.len = n;
	jlex(&p);
	t->root = parse_body(&p, NULL, &found);
	ja_release(&t->arena, p.t); /* the tree holds no token */
	t->arena.limit = 0; /* the template is read only from here on */
	*out = t;
	return 0;
}

void jinja_free(struct jinja_template *t)
{
	if (t == NULL)
		return;
	ja_free_all(&t->arena);
	free(t);
}
