/* tools/poros-expand/yaml_tree.h: a YAML file as a small tree of plain
 * data that remembers where each node was written.  A spec is plain data,
 * so anchors, aliases, tags and a second document are refused. */
#ifndef POROS_EXPAND_YAML_TREE_H
#define POROS_EXPAND_YAML_TREE_H

#include <stddef.h>
#include <stdnoreturn.h>

enum ynode_kind { YN_SCALAR, YN_MAP, YN_SEQ };

struct ynode {
	enum ynode_kind kind;
	unsigned long line, col;  /* 1-based position of the node's first character */
	char *text;               /* scalar: its value, NUL-terminated (never holds a NUL) */
	int plain;                /* scalar: written without quotes, so 10 is a number and "10" a string */
	struct ynode **kids;      /* map: key, value, key, value, ...; seq: the items */
	size_t n;                 /* entries in kids (twice the pairs of a map) */
	size_t cap;
};

/* The largest spec read; anything bigger is a mistake, not a bench. */
#define YTREE_MAX_BYTES (1024 * 1024)
/* Deeper nesting than any spec needs; bounds the recursion. */
#define YTREE_MAX_DEPTH 16

/* Parses len bytes of text read from file.  Returns the root node, or NULL
 * when the file holds no document at all.  Any problem (not UTF-8, a NUL
 * byte, a YAML syntax error, an anchor, alias or tag, a second document)
 * ends the program with exit 2 and "FILE:LINE:COL: what". */
struct ynode *ytree_load(const char *file, const char *text, size_t len);
void ytree_free(struct ynode *node);

/* Ends the program (exit 2) with "progname: FILE:LINE:COL: message". */
noreturn void ytree_die(const char *file, const struct ynode *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
noreturn void ytree_die_at(const char *file, unsigned long line, unsigned long col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
