/* tools/poros-cell/query.h: the three questions poros-cell answers. */
#ifndef POROS_CELL_QUERY_H
#define POROS_CELL_QUERY_H

#include <stdio.h>
#include <cjson/cJSON.h>

/* How get writes a record's values. */
enum get_format {
	GET_TSV,  /* one line per record, the values tab-separated */
	GET_JSON, /* one JSON array per record */
	GET_RAW,  /* one field: its value as it is (a string unescaped) */
};

struct get_options {
	enum get_format format;
	const char *null_text; /* GET_TSV and GET_RAW: what null or a missing field prints */
};

/* get FIELDS INPUT...: the values of the comma-separated dotted paths in
 * fields of each record of the inputs (n 0: stdin).  Returns the exit
 * status: 0, 1 an input could not be read, 2 a bad record (reported with
 * file:line and skipped). */
int get_fields(const char *fields, char *const *inputs, int n, const struct get_options *o);

/* One value as a TSV field: a string with \\, \t, \n and \r escaped,
 * a number in the shortest digits that read back, true/false, an
 * object or array compact. */
void put_tsv_value(FILE *out, const cJSON *v, const char *null_text);

/* state DIR: "CELL_ID\tSTATE" per cell of DIR/spec.json, in its order. */
int cell_states(const char *dir);
/* pairs DIR: one line per poros cell of DIR/spec.json with a resident
 * cell of the same model and precision. */
int cell_pairs(const char *dir);

#endif
