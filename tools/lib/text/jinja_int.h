/* tools/lib/text/jinja_int.h: what the Jinja lexer/parser (jinja_parse.c), the
 * values (jinja_value.c), the evaluator (jinja_eval.c) and its library
 * (jinja_lib.c) share: the arena, the AST and the values. */
#ifndef POROS_JINJA_INT_H
#define POROS_JINJA_INT_H

#include <setjmp.h>
#include <stddef.h>

#include "jinja.h"

/* ---- arena: everything of a parse or a render, freed at once ---------- */
struct jarena {
	struct jblock *head;
	size_t bytes, limit;                  /* limit 0: none */
	void (*exhausted)(void *owner); /* does not return: called instead of passing limit */
	void *owner;
};
void *ja_alloc(struct jarena *a, size_t n);          /* zeroed */
void *ja_grow(struct jarena *a, void *p, size_t n);  /* realloc inside the arena */
void ja_release(struct jarena *a, void *p);         /* one block, before the rest */
void ja_free_all(struct jarena *a);

/* ---- AST ------------------------------------------------------------- */
enum jnode_kind {
	/* statements */
	N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_ATTR, N_BREAK, N_CONTINUE, N_BODY,
	/* expressions */
	N_LIT_STR, N_LIT_INT, N_LIT_FLOAT, N_LIT_BOOL, N_LIT_NONE, N_LIST, N_DICT, N_TUPLE,
	N_NAME, N_ATTR, N_INDEX, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT, N_NEG, N_POS,
	N_AND, N_OR, N_BINOP, N_CMP, N_IN, N_NOT_IN, N_COND,
};

struct jnode {
	enum jnode_kind kind;
	int line, col;
	const char *s;          /* text, string literal, name, attribute, op, filter/test name */
	size_t slen;
	long long i;
	double f;
	struct jnode *a, *b, *c; /* operands; if: cond/then/else; for: iter/body/else; slice: start/stop/step */
	struct jnode *filter;   /* for: the inline `if`; call/filter/test: the object is a */
	struct jnode **kids;    /* body statements, list/tuple items, call args, dict k,v pairs */
	int n_kids;
	const char **kw;        /* call/filter/test: keyword of each arg, NULL when positional */
	const char **names;     /* for/set: target names */
	int n_names;
	int negate;             /* test: `is not` */
	struct jstr *lit;       /* string literal: its value, made once */
};

struct jinja_template {
	struct jarena arena;
	struct jnode *root;     /* N_BODY */
};

/* ---- values ---------------------------------------------------------- */
enum jv_type { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC };

struct jstr {
	const char *p;
	const int *org;          /* (n) origin per byte, NULL when all 0 */
	size_t n;
	const size_t *anc_pos;   /* anchors of empty contents, see jinja.h */
	const int *anc_org;
	size_t n_anc;
};

struct jv {
	enum jv_type t;
	union {
		int b;
		long long i;
		double f;
		struct jstr *s;
		struct jlist *l;
		struct jdict *d;
		const char *fn;  /* a global function's name */
	} u;
};

/* A list's or dict's depth counts the containers inside it (a namespace
 * counts as none: what walks values stops at one), so that walking a value
 * never recurses deeper than JINJA_MAX_VALUE_DEPTH. */
struct jlist {
	struct jv *v;
	size_t n, cap;
	int is_tuple; /* printed as (a, b) */
	int depth;
};

struct jdict {
	struct jstr **k;
	struct jv *v;
	size_t n, cap;
	int is_ns;   /* namespace(): attributes may be set */
	int depth;
};

/* A string being built, with origins and anchors. */
struct jbuf {
	char *p;
	int *org;
	size_t n, cap;
	size_t *anc_pos;
	int *anc_org;
	size_t n_anc, cap_anc;
};

struct jscope {
	struct jscope *up;
	struct jdict *vars;
};

struct jctx {
	struct jarena arena;
	jmp_buf fail;
	char *err;
	size_t errsz;
	struct jscope *scope;
	struct jbuf out;
	int loop_ctl;            /* 1 break, 2 continue, pending */
	const struct tm *today;  /* strftime_now's date, NULL: refused */
	int depth;
	const struct jnode *at;  /* the node being evaluated: where a budget ran out */
	long long steps, max_steps;
	long long iterations, max_iterations;
	size_t max_output;
};

/* ---- lexer and parser (jinja_lex.c, jinja_parse.c) ---------------- */
enum tok_kind { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
		T_EOF };

struct tok {
	enum tok_kind kind;
	const char *s; /* T_TEXT, T_NAME, T_OP: into the source; T_STRING: unescaped copy */
	size_t n;
	long long i;
	double f;
	int line, col;
};

struct parser {
	struct jarena *arena;
	const char *src;
	size_t len;
	struct tok *t;
	size_t n, cap, at;
	char *err;
	size_t errsz;
	jmp_buf fail;
	int nesting;
	size_t line_off;  /* pos_of's last offset and its line and column */
	int line, col;
};

void jlex(struct parser *p);
_Noreturn void perr(struct parser *p, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* jinja_eval.c */
_Noreturn void jfail(struct jctx *c, const struct jnode *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct jv jeval(struct jctx *c, const struct jnode *n);
/* n more steps of work (a node, or a scan of n/JINJA_SCAN_PER_STEP items) */
void jcharge(struct jctx *c, long long n);

/* jinja_value.c */
static inline int is_num(struct jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static inline double num_of(struct jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b; }
int jtruthy(struct jv v);
struct jv jv_str_lit(struct jctx *c, const char *s, size_t n);
struct jv jv_from_buf(struct jctx *c, struct jbuf *b);
void jbuf_put(struct jctx *c, struct jbuf *b, const char *s, size_t n, int org);
void jbuf_put_str(struct jctx *c, struct jbuf *b, const struct jstr *s, size_t from, size_t to);
void jbuf_anchor(struct jctx *c, struct jbuf *b, int org);
struct jv jv_substr(struct jctx *c, const struct jstr *s, size_t from, size_t to);
void jv_to_buf(struct jctx *c, struct jbuf *b, struct jv v, int repr);
struct jv jv_to_string(struct jctx *c, struct jv v);
struct jlist *jlist_new(struct jctx *c);
void jlist_push(struct jctx *c, struct jlist *l, struct jv v);
struct jdict *jdict_new(struct jctx *c);
void jdict_set(struct jctx *c, struct jdict *d, struct jstr *k, struct jv v);
struct jv *jdict_get(const struct jdict *d, const char *k, size_t n);
int jv_equal(struct jctx *c, struct jv a, struct jv b);
const char *jv_type_name(struct jv v);

/* jinja_lib.c */
struct jv jfilter(struct jctx *c, const struct jnode *n, struct jv v, struct jv *args, int nargs);
int jtest(struct jctx *c, const struct jnode *n, struct jv v, struct jv *args, int nargs);
struct jv jmethod(struct jctx *c, const struct jnode *n, struct jv obj, const char *name, struct jv *args, int nargs);
struct jv jglobal_call(struct jctx *c, const struct jnode *n, const char *name, struct jv *args, int nargs);
int jglobal_exists(const char *name, size_t n);
void jtojson(struct jctx *c, const struct jnode *at, struct jbuf *b, struct jv v, int indent, int level);

#endif
