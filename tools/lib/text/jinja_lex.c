/* tools/lib/text/jinja_lex.c: the arena, and Jinja template source -> tokens
 * with transformers' whitespace rules (trim_blocks, lstrip_blocks, {%- -%}). */
#include "jinja_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- arena ----------------------------------------------------------- */

struct jblock {
	struct jblock *prev, *next;
	size_t size;
	size_t pad; /* keeps the payload 16-byte aligned */
};

/* A block of n bytes replacing one of old bytes, counted against the
 * arena's limit before it is allocated (malloc's own overhead included). */
static void ja_count(struct jarena *a, size_t old, size_t n)
{
	size_t cost = n + sizeof(struct jblock) + 16;

	if (a->limit && (n > SIZE_MAX / 2 || a->bytes - old + cost > a->limit))
		a->exhausted(a->owner);
	a->bytes = a->bytes - old + cost;
}

void *ja_alloc(struct jarena *a, size_t n)
{
	struct jblock *b;

	ja_count(a, 0, n);
	b = xcalloc(1, sizeof *b + (n ? n : 1));

	b->size = n;
	b->next = a->head;
	if (a->head)
		a->head->prev = b;
	a->head = b;
	return b + 1;
}

void *ja_grow(struct jarena *a, void *p, size_t n)
{
	struct jblock *b, *nb;

	if (p == NULL)
		return ja_alloc(a, n);
	b = (struct jblock *)p - 1;
	ja_count(a, b->size + sizeof *b + 16, n);
	nb = xrealloc(b, sizeof *nb + (n ? n : 1));
	if (n > nb->size)
		memset((char *)(nb + 1) + nb->size, 0, n - nb->size);
	nb->size = n;
	if (nb->prev)
		nb->prev->next = nb;
	else
		a->head = nb;
	if (nb->next)
		nb->next->prev = nb;
	return nb + 1;
}

void ja_release(struct jarena *a, void *p)
{
	struct jblock *b = (struct jblock *)p - 1;

	a->bytes -= b->size + sizeof *b + 16;
	if (b->prev)
		b->prev->next = b->next;
	else
		a->head = b->next;
	if (b->next)
		b->next->prev = b->prev;
	free(b);
}

void ja_free_all(struct jarena *a)
{
	struct jblock *b = a->head;

	while (b) {
		struct jblock *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->bytes = 0;
}

/* ---- lexer ----------------------------------------------------------- */

/* The line and column of src[off], counted on from the last offset asked
 * for (tokens come in order, so lexing stays linear). */
static void pos_of(struct parser *p, size_t off, int *line, int *col)
{
	if (p->line == 0 || off < p->line_off) {
		p->line_off = 0;
		p->line = p->col = 1;
	}
	for (size_t i = p->line_off; i < off && i < p->len; i++) {
		if (p->src[i] == '\n') {
			p->line++;
			p->col = 1;
		} else
			p->col++;
	}
	p->line_off = off;
	*line = p->line;
	*col = p->col;
}

void perr(struct parser *p, int line, int col, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(p->err, p->errsz, "%d:%d: ", line, col);

	va_start(ap, fmt);
	if (k >= 0 && (size_t)k < p->errsz)
		vsnprintf(p->err + k, p->errsz - (size_t)k, fmt, ap);
	va_end(ap);
	longjmp(p->fail, 1);
}

static _Noreturn void perr_at(struct parser *p, size_t off, const char *msg)
{
	int line, col;

	pos_of(p, off, &line, &col);
	perr(p, line, col, "%s", msg);
}

static struct tok *push(struct parser *p, enum tok_kind k, size_t off)
{
	struct tok *t;

	if (p->n == p->cap) {
		p->cap = p->cap ? p->cap * 2 : 256;
		p->t = ja_grow(p->arena, p->t, p->cap * sizeof *p->t);
	}
	t = &p->t[p->n++];
	memset(t, 0, sizeof *t);
	t->kind = k;
	pos_of(p, off, &t->line, &t->col);
	return t;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static void put_utf8(char *out, size_t *n, unsigned cp)
{
	if (cp < 0x80) {
		out[(*n)++] = (char)cp;
	} else if (cp < 0x800) {
		out[(*n)++] = (char)(0xc0 | cp >> 6);
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		out[(*n)++] = (char)(0xe0 | cp >> 12);
		out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		out[(*n)++] = (char)(0xf0 | cp >> 18);
		out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
		out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	}
}

/* A string literal at src[*i] (the quote); Python's escapes. */
static void lex_string(struct parser *p, size_t *i)
{
	char q = p->src[*i];
	size_t start = *i, k = *i + 1, n = 0, end = k;
	struct tok *t = push(p, T_STRING, start);

	while (end < p->len && p->src[end] != q) /* unescaped, it is never longer */
		end += p->src[end] == '\\' ? 2 : 1;
	char *out = ja_alloc(p->arena, end - start + 1);

	while (k < p->len && p->src[k] != q) {
		char c = p->src[k++];
		if (c != '\\') {
			out[n++] = c;
			continue;
		}
		if (k >= p->len)
			break;
		c = p->src[k++];
		switch (c) {
		case 'n': out[n++] = '\n'; break;
		case 't': out[n++] = '\t'; break;
		case 'r': out[n++] = '\r'; break;
		case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
			unsigned v = (unsigned)(c - '0');
			for (int d = 1; d < 3 && k < p->len && p->src[k] >= '0' && p->src[k] <= '7'; d++)
				v = v * 8 + (unsigned)(p->src[k++] - '0');
			put_utf8(out, &n, v);
			break;
		}
		case 'a': out[n++] = '\a'; break;
		case 'v': out[n++] = '\v'; break;
		case 'N': perr_at(p, k - 2, "\\N{...} escapes are not supported");
		case 'b': out[n++] = '\b'; break;
		case 'f': out[n++] = '\f'; break;
		case '\\': case '\'': case '"': out[n++] = c; break;
		case '\n': break;
		case 'u': case 'x': case 'U': {
			int digits = c == 'u' ? 4 : c == 'U' ? 8 : 2;
			unsigned cp = 0;
			for (int d = 0; d < digits; d++, k++) {
				char h = k < p->len ? p->src[k] : 0;
				int v = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
								  : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
				if (v < 0)
					perr_at(p, k, "bad escape in a string literal");
				cp = cp * 16 + (unsigned)v;
			}
			put_utf8(out, &n, cp);
			break;
		}
		default: out[n++] = '\\'; out[n++] = c; /* Python keeps unknown escapes */
		}
	}
	if (k >= p->len)
		perr_at(p, start, "unterminated string literal");
	t->s = out;
	t->n = n;
	*i = k + 1;
}

/* The number literal src[from..to), without its '_' separators. */
static void lex_number(struct parser *p, size_t from, size_t to, int flt)
{
	char *num = ja_alloc(p->arena, to - from + 1);
	size_t m = 0;
	struct tok *t = push(p, flt ? T_FLOAT : T_INT, from);

	for (size_t j = from; j < to; j++)
		if (p->src[j] != '_')
			num[m++] = p->src[j];
	errno = 0;
	if (flt)
		t->f = strtod(num, NULL);
	else
		t->i = strtoll(num, NULL, 10);
	if (errno == ERANGE && !flt)
		perr_at(p, from, "integer literal beyond 64 bits (big integers are not supported)");
}

static const char *const ops2[] = { "//", "**", "==", "!=", "<=", ">=", NULL };

/* Tokens of one {{ }} or {% %} up to its end; returns the offset after the
 * closing mark and whether it had '-' (*strip) or '+' (*keep). */
static size_t lex_tag(struct parser *p, size_t i, int block, int *strip, int *keep)
{
	const char *close = block ? "%}" : "}}";

	for (;;) {
		while (i < p->len && is_ws(p->src[i]))
			i++;
		if (i >= p->len)
			perr_at(p, i, block ? "unterminated {% tag" : "unterminated {{ expression");
		if ((p->src[i] == '-' || p->src[i] == '+') && i + 2 < p->len + 1 && strncmp(p->src + i + 1, close, 2) == 0) {
			*strip = p->src[i] == '-';
			*keep = p->src[i] == '+';
			push(p, block ? T_BLOCK_END : T_VAR_END, i);
			return i + 3;
		}
		if (strncmp(p->src + i, close, 2) == 0) {
			*strip = *keep = 0;
			push(p, block ? T_BLOCK_END : T_VAR_END, i);
			return i + 2;
		}
		char c = p->src[i];
		if (is_name0(c)) {
			size_t k = i;
			while (k < p->len && (is_name0(p->src[k]) || is_digit(p->src[k])))
				k++;
			struct tok *t = push(p, T_NAME, i);
			t->s = p->src + i;
			t->n = k - i;
			i = k;
		} else if (is_digit(c)) {
			size_t k = i;
			int flt = 0;
			while (k < p->len && (is_digit(p->src[k]) || p->src[k] == '_'))
				k++;
			if (k + 1 < p->len && p->src[k] == '.' && is_digit(p->src[k + 1])) {
				flt = 1;
				for (k++; k < p->len && is_digit(p->src[k]); k++)
					;
			}
			if (k < p->len && (p->src[k] == 'e' || p->src[k] == 'E')) {
				size_t e = k + 1;
				if (e < p->len && (p->src[e] == '+' || p->src[e] == '-'))
					e++;
				if (e < p->len && is_digit(p->src[e])) {
					flt = 1;
					for (k = e; k < p->len && is_digit(p->src[k]); k++)
						;
				}
			}
			lex_number(p, i, k, flt);
			i = k;
		} else if (c == '\'' || c == '"') {
			lex_string(p, &i);
		} else {
			size_t n = 0;
			for (int k = 0; ops2[k]; k++)
				if (strncmp(p->src + i, ops2[k], 2) == 0)
					n = 2;
			if (n == 0 && strchr("+-*/%~<>=()[]{}.,:|!", c) && c != '!')
				n = 1;
			if (n == 0)
				perr_at(p, i, "unexpected character in a tag");
			struct tok *t = push(p, T_OP, i);
			t->s = p->src + i;
			t->n = n;
			i += n;
		}
	}
}

void jlex(struct parser *p)
{
	size_t i = 0;
	int strip_lead = 0, trim_nl = 0;

	while (i <= p->len) {
		size_t q = i;
		while (q + 1 < p->len && !(p->src[q] == '{' && (p->src[q + 1] == '{' || p->src[q + 1] == '%' ||
							      p->src[q + 1] == '#')))
			q++;
		if (q + 1 >= p->len)
			q = p->len;
		size_t ts = i, te = q;
		if (strip_lead)
			while (ts < te && is_ws(p->src[ts]))
				ts++;
		else if (trim_nl && ts < te && p->src[ts] == '\n')
			ts++;
		else if (trim_nl && ts + 1 < te && p->src[ts] == '\r' && p->src[ts + 1] == '\n')
			ts += 2;
		if (q < p->len) {
			char kind = p->src[q + 1], mark = q + 2 < p->len ? p->src[q + 2] : 0;
			if (mark == '-') {
				while (te > ts && is_ws(p->src[te - 1]))
					te--;
			} else if ((kind == '%' || kind == '#') && mark != '+') {
				size_t k = q;
				while (k > i && (p->src[k - 1] == ' ' || p->src[k - 1] == '\t'))
					k--;
				if ((k == 0 || p->src[k - 1] == '\n') && k >= ts)
					te = k;
			}
		}
		if (te > ts) {
			struct tok *t = push(p, T_TEXT, ts);
			t->s = p->src + ts;
			t->n = te - ts;
		}
		if (q >= p->len)
			break;
		char kind = p->src[q + 1];
		size_t body = q + 2;
		if (body < p->len && (p->src[body] == '-' || p->src[body] == '+'))
			body++;
		if (kind == '#') {
			const char *end = NULL;
			for (size_t k = body; k + 1 < p->len; k++)
				if (p->src[k] == '#' && p->src[k + 1] == '}') {
					end = p->src + k;
					break;
				}
			if (end == NULL)
				perr_at(p, q, "unterminated {# comment");
			strip_lead = end > p->src + body && end[-1] == '-';
			trim_nl = !strip_lead && !(end > p->src + body && end[-1] == '+');
			i = (size_t)(end - p->src) + 2;
			continue;
		}
		int strip, keep;
		push(p, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, q);
		i = lex_tag(p, body, kind == '%', &strip, &keep);
		strip_lead = strip;
		trim_nl = kind == '%' && !strip && !keep;
	}
	push(p, T_EOF, p->len);
}
