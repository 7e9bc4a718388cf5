/* tools/poros-expand/yaml_value.h: the values of a YAML tree read as the
 * YAML 1.2 core schema reads them, each refused with FILE:LINE:COL (exit 2)
 * when it is not what its key takes.  spec.c defines them; a bench spec
 * and a fine-tune config (train_config.c) read their values through them. */
#ifndef POROS_EXPAND_YAML_VALUE_H
#define POROS_EXPAND_YAML_VALUE_H

#include <stddef.h>

#include "yaml_tree.h"

enum sclass { SC_NULL, SC_BOOL, SC_INT, SC_FLOAT, SC_NONFINITE, SC_STRING };

/* What a plain scalar is (a quoted one is always a string). */
enum sclass classify(const struct ynode *n);
/* s double-quoted, escaped and shortened, for a message. */
const char *quoted(const char *s, char *buf, size_t n);
/* "a mapping", "a list", "null", "\"ten\"", "the string \"10\"". */
const char *describe(const struct ynode *n, char *buf, size_t sz);
/* A plain number (integer: a whole one), named path in messages. */
double number_value(const char *file, const struct ynode *n, const char *path, int integer);
/* A string of at most max bytes, no control characters. */
const char *text_value(const char *file, const struct ynode *n, const char *path, size_t max);
int bool_value(const char *file, const struct ynode *n, const char *path);
/* The value of key in a mapping, or NULL. */
const struct ynode *map_get(const struct ynode *map, const char *key);
/* A list of LoRA projections or "all-linear" as a target mask. */
void set_targets(const char *file, const struct ynode *n, const char *path, unsigned *mask);

#endif
