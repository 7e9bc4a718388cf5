/* tools/lib/util/jsonl.h: JSON Lines in and out. */
#ifndef POROS_JSONL_H
#define POROS_JSONL_H

#include <stdio.h>
#include <cjson/cJSON.h>

struct jsonl_reader {
	FILE *f;
	const char *name; /* "<stdin>" or a path, for messages */
	long line;        /* number of the line last read, 1-based */
	char *buf;
	size_t cap;
	char err[256];    /* why the last jsonl_next returned -1 */
};

void jsonl_init(struct jsonl_reader *r, FILE *f, const char *name);
void jsonl_free(struct jsonl_reader *r);

/* Next non-blank line parsed as a JSON object, lines of any length.
 * Returns 1 and *out (caller cJSON_Delete's), 0 at end of input, -1 on a
 * bad line (r->err: "not valid JSON at column 7", "not an object", "line
 * does not end in a newline", "contains a NUL byte"; r->line its number)
 * or a read error (errno set, r->err "read error"). */
int jsonl_next(struct jsonl_reader *r, cJSON **out);

/* One compact object and '\n'.  Returns 0 or -1. */
int jsonl_write(FILE *out, const cJSON *obj);
/* The same into a malloc'd string (with the trailing newline). */
char *jsonl_format(const cJSON *obj);

/* Call first in main: at exit, flushes and closes stdout and exits 2 with
 * "writing output failed" if that fails (EPIPE included). */
void stdout_check_at_exit(void);

/* Parses a whole file holding one JSON value; on failure NULL and err set
 * ("file:line:col: not valid JSON"). */
cJSON *json_read_file(const char *path, char *err, size_t errsz);

/* Number that is finite; NULL otherwise. */
const cJSON *json_finite(const cJSON *obj, const char *key);

/* cJSON_CreateNumber, or null for NaN/inf (JSON has no non-finite numbers). */
cJSON *json_number_or_null(double v);

#endif
