/* tools/lib/records/report.h: what poros-merge and poros-render share: reading
 * result files and artifact directories into one row per cell (the
 * latest finished artifact wins), a string builder, HTML and Markdown
 * escaping, and number formats. */
#ifndef POROS_REPORT_H
#define POROS_REPORT_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "artifact.h"

/* --- reading ------------------------------------------------------------- */

/* Called for each JSON object of an input; the reader owns obj.  Returns 0,
 * or -1 with err set: the record is then reported as "source:line: err",
 * counted as bad and skipped. */
typedef int (*report_record_fn)(void *ctx, const cJSON *obj, const char *source, long line, char *err,
                                size_t errsz);

/* Reads path: "-" is stdin (JSONL), a directory is every "*.json" file in
 * it (sorted by name, each one JSON object; a file with neither an artifact
 * schema nor a cell_id, like spec.json, is not an artifact and is passed
 * over), anything else a JSONL file.  Malformed lines and records are
 * reported on stderr with file:line and counted in *bad.  Returns 0, or -1
 * when the path cannot be opened or read (reported). */
int report_read_path(const char *path, report_record_fn fn, void *ctx, long *bad);

/* True when obj claims to be an artifact (its schema, or a cell_id). */
int report_is_artifact(const cJSON *obj);

struct result_entry {
	struct artifact art;     /* validated */
	cJSON *json;             /* the artifact as read (poros-merge --spec: its model named as the spec's now) */
	double finished;         /* finished_at as seconds since the epoch */
	char *source;            /* where it was read, for messages */
	long line;
};

/* One row per cell_id, in order of first appearance; an open-addressing
 * table of cell_id -> row keeps adding linear in the number of rows. */
struct result_set {
	int n, cap;
	struct result_entry *e;
	int *slot;               /* (nslots) row index + 1; 0: empty */
	int nslots;              /* a power of two, more than 2 n */
};

/* FNV-1a, 64 bits: the hash of the tables here and of the report's
 * config fingerprint. */
unsigned long long report_hash(const char *s, unsigned long long h);
#define REPORT_HASH_INIT 0xcbf29ce484222325ull

/* A string -> int map (keys copied), for lookups that must not be linear. */
struct strmap {
	char **key;
	int *val;
	int n, nslots;
};
void strmap_init(struct strmap *m);
void strmap_free(struct strmap *m);
/* The value of key, or -1. */
int strmap_get(const struct strmap *m, const char *key);
/* Sets (or replaces) key's value. */
void strmap_put(struct strmap *m, const char *key, int val);

void results_init(struct result_set *s);
void results_free(struct result_set *s);
/* Validates obj as an artifact (a complete one: finished_at set) and keeps
 * it unless its cell already has a later one; at equal finished_at the one
 * read last wins.  Returns 0, or -1 with err set. */
int results_add(struct result_set *s, const cJSON *obj, const char *source, long line, char *err,
                size_t errsz);
/* Rebuilds the cell_id index after the rows were reordered in place. */
void results_reindex(struct result_set *s);
/* The row of cell_id, or NULL. */
const struct result_entry *results_find(const struct result_set *s, const char *cell_id);
/* A report_record_fn that adds artifacts to the result_set ctx and
 * refuses every other record. */
int results_record(void *ctx, const cJSON *obj, const char *source, long line, char *err, size_t errsz);

/* "2026-11-29T15:21:41Z" (optionally with fractional seconds) to seconds
 * since the epoch; -1 when it is not that form. */
int iso_utc_parse(const char *s, double *out);

/* --- text ---------------------------------------------------------------- */

struct sbuf {
	char *s;
	size_t len, cap;
};

void sb_init(struct sbuf *b);
void sb_free(struct sbuf *b);
void sb_putn(struct sbuf *b, const char *s, size_t n);
void sb_puts(struct sbuf *b, const char *s);
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s escaped for HTML text and attribute values: & < > " ' and also /, so
 * no string from a spec can spell a URL ("//") into the page.  NULL is "". */
void sb_html(struct sbuf *b, const char *s);
/* s escaped for a GitHub Markdown table cell: | and the characters that
 * start emphasis, code, links or HTML are backslash-escaped or entities;
 * newlines become spaces.  NULL is "". */
void sb_md(struct sbuf *b, const char *s);

/* Human numbers: about 3 significant digits, never exponent notation for
 * the ranges a bench produces (1e-4 and up: "0.000902"); "--" for NaN
 * (not measured). */
const char *fmt_num(char *buf, size_t n, double v);
/* A MiB amount as "812 MiB" below 1 GiB, else "6.85 GiB"; "--" for NaN. */
const char *fmt_mib(char *buf, size_t n, double mib);

/* The smallest common card (8, 12, 16, 24, 40, 48, 80, 141 GB, taken as
 * GiB) whose memory is above peak_mib; 0 when none is, -1 for NaN. */
int fits_on_gb(double peak_mib);

#endif
