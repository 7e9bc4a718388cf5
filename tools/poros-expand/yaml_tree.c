/* tools/poros-expand/yaml_tree.c: libyaml's event stream folded into a
 * tree of mappings, sequences and scalars with their positions.  The event
 * API (not the document API) is used because it shows anchors, aliases
 * and tags, which a spec must not have, instead of resolving them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "util/util.h"
#include "yaml_tree.h"

struct ytree_ctx {
	yaml_parser_t parser;
	const char *file;
	const char *text;
	size_t len;
};

static noreturn void vdie_at(const char *file, unsigned long line, unsigned long col, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof msg, fmt, ap);
	die(EXIT_USAGE, "%s:%lu:%lu: %s", file, line, col, msg);
}

noreturn void ytree_die_at(const char *file, unsigned long line, unsigned long col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie_at(file, line, col, fmt, ap);
}

noreturn void ytree_die(const char *file, const struct ynode *at, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie_at(file, at ? at->line : 1, at ? at->col : 1, fmt, ap);
}

/* Line and column (in characters, as libyaml counts them) of a byte offset. */
static void offset_position(const char *text, size_t off, unsigned long *line, unsigned long *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off; i++) {
		if (text[i] == '\n') {
			(*line)++;
			*col = 1;
		} else if (((unsigned char)text[i] & 0xc0) != 0x80) {
			(*col)++;
		}
	}
}

static noreturn void die_mark(struct ytree_ctx *y, yaml_mark_t m, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static noreturn void die_mark(struct ytree_ctx *y, yaml_mark_t m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie_at(y->file, (unsigned long)m.line + 1, (unsigned long)m.column + 1, fmt, ap);
}

static void next_event(struct ytree_ctx *y, yaml_event_t *ev)
{
	yaml_parser_t *p = &y->parser;
	unsigned long line, col;

	if (yaml_parser_parse(p, ev))
		return;
	switch (p->error) {
	case YAML_MEMORY_ERROR:
		die(EXIT_RUNTIME, "%s: out of memory", y->file);
	case YAML_READER_ERROR:
		offset_position(y->text, p->problem_offset < y->len ? p->problem_offset : y->len, &line, &col);
		ytree_die_at(y->file, line, col, "YAML error: %s", p->problem ? p->problem : "unreadable input");
	default:
		if (p->context)
			die_mark(y, p->problem_mark, "YAML syntax error: %s (%s at %lu:%lu)",
			         p->problem ? p->problem : "unknown problem", p->context,
			         (unsigned long)p->context_mark.line + 1, (unsigned long)p->context_mark.column + 1);
		die_mark(y, p->problem_mark, "YAML syntax error: %s", p->problem ? p->problem : "unknown problem");
	}
}

/* Anchors and tags make a value mean something other than what it says;
 * a spec is read by people comparing runs, so it says only plain data. */
static void refuse_decorations(struct ytree_ctx *y, const yaml_event_t *ev, const yaml_char_t *anchor,
                               const yaml_char_t *tag)
{
	if (anchor)
		die_mark(y, ev->start_mark, "YAML anchors (&%.64s) are not supported: a spec is plain data", (const char *)anchor);
	if (tag)
		die_mark(y, ev->start_mark, "YAML tags (%.64s) are not supported: a spec is plain data", (const char *)tag);
}

static struct ynode *new_node(enum ynode_kind kind, yaml_mark_t m)
{
	struct ynode *n = xcalloc(1, sizeof *n);

	n->kind = kind;
	n->line = (unsigned long)m.line + 1;
	n->col = (unsigned long)m.column + 1;
	return n;
}

static void add_kid(struct ynode *parent, struct ynode *kid)
{
	if (parent->n == parent->cap) {
		parent->cap = parent->cap ? 2 * parent->cap : 8;
		parent->kids = xrealloc(parent->kids, parent->cap * sizeof *parent->kids);
	}
	parent->kids[parent->n++] = kid;
}

/* Builds the node that ev starts (ev is consumed). */
static struct ynode *parse_node(struct ytree_ctx *y, yaml_event_t *ev, int depth)
{
	struct ynode *node;
	yaml_event_type_t end;

	switch (ev->type) {
	case YAML_ALIAS_EVENT:
		die_mark(y, ev->start_mark, "YAML aliases (*%.64s) are not supported: a spec is plain data",
		         (const char *)ev->data.alias.anchor);
	case YAML_SCALAR_EVENT:
		refuse_decorations(y, ev, ev->data.scalar.anchor, ev->data.scalar.tag);
		/* A double-quoted "\0" is valid YAML; no spec value may hold one. */
		if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length))
			die_mark(y, ev->start_mark, "a value contains a NUL character");
		node = new_node(YN_SCALAR, ev->start_mark);
		node->text = xstrdup((const char *)ev->data.scalar.value);
		node->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		yaml_event_delete(ev);
		return node;
	case YAML_SEQUENCE_START_EVENT:
		refuse_decorations(y, ev, ev->data.sequence_start.anchor, ev->data.sequence_start.tag);
		node = new_node(YN_SEQ, ev->start_mark);
		end = YAML_SEQUENCE_END_EVENT;
		break;
	case YAML_MAPPING_START_EVENT:
		refuse_decorations(y, ev, ev->data.mapping_start.anchor, ev->data.mapping_start.tag);
		node = new_node(YN_MAP, ev->start_mark);
		end = YAML_MAPPING_END_EVENT;
		break;
	default:
		die_mark(y, ev->start_mark, "unexpected YAML structure");
	}
	if (depth >= YTREE_MAX_DEPTH)
		die_mark(y, ev->start_mark, "nested more than %d levels deep", YTREE_MAX_DEPTH);
	yaml_event_delete(ev);
	for (;;) {
		yaml_event_t kid;

		next_event(y, &kid);
		if (kid.type == end) {
			yaml_event_delete(&kid);
			return node;
		}
		add_kid(node, parse_node(y, &kid, depth + 1));
	}
}

/* Where the first invalid byte is, as a position, so the user can find it. */
static void check_bytes(const char *file, const char *text, size_t len)
{
	size_t valid = utf8_valid_prefix(text, len);
	const char *nul = memchr(text, '\0', len);
	unsigned long line, col;

	if (nul && (size_t)(nul - text) < valid) {
		offset_position(text, (size_t)(nul - text), &line, &col);
		ytree_die_at(file, line, col, "contains a NUL byte (a spec is UTF-8 text)");
	}
	if (valid != len) {
		offset_position(text, valid, &line, &col);
		ytree_die_at(file, line, col, "not valid UTF-8 (byte 0x%02x)", (unsigned char)text[valid]);
	}
}

struct ynode *ytree_load(const char *file, const char *text, size_t len)
{
	struct ytree_ctx y = { .file = file, .text = text, .len = len };
	struct ynode *root = NULL;
	yaml_event_t ev;

	check_bytes(file, text, len);
	if (!yaml_parser_initialize(&y.parser))
		die(EXIT_RUNTIME, "%s: out of memory", file);
	yaml_parser_set_input_string(&y.parser, (const unsigned char *)text, len);
	yaml_parser_set_encoding(&y.parser, YAML_UTF8_ENCODING);

	next_event(&y, &ev); /* STREAM-START */
	yaml_event_delete(&ev);
	next_event(&y, &ev);
	if (ev.type == YAML_DOCUMENT_START_EVENT) {
		yaml_event_delete(&ev);
		next_event(&y, &ev);
		root = parse_node(&y, &ev, 0);
		next_event(&y, &ev); /* DOCUMENT-END */
		yaml_event_delete(&ev);
		next_event(&y, &ev);
		if (ev.type == YAML_DOCUMENT_START_EVENT)
			die_mark(&y, ev.start_mark, "a second YAML document: a spec is exactly one document");
	}
	yaml_event_delete(&ev); /* STREAM-END */
	yaml_parser_delete(&y.parser);
	return root;
}

void ytree_free(struct ynode *node)
{
	if (!node)
		return;
	for (size_t i = 0; i < node->n; i++)
		ytree_free(node->kids[i]);
	free(node->kids);
	free(node->text);
	free(node);
}
