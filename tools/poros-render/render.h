/* tools/poros-render/render.h: the report's data (results grouped by
 * model, parity by model and precision) and its two writers. */
#ifndef POROS_RENDER_H
#define POROS_RENDER_H

#include "records/records.h"

struct report_model {
	const struct cell *cell;            /* the first cell of the model: its names and size */
	int n;
	const struct result_entry **rows;   /* method order, then precision order */
};

/* A row of the parity table: one model and precision.  Either a parity
 * record, or the parity fields of an artifact, or nothing measured. */
struct parity_row {
	const char *arch;                   /* the model's arch, or the record's label */
	const char *display_name;           /* NULL when the record names no model of the results */
	const char *precision;
	const struct parity *record;        /* NULL: not from poros-parity */
	const struct artifact *artifact;    /* a cell whose own parity fields are measured, or NULL */
};

/* An artifact of the input the report does not use, and why. */
struct ignored_artifact {
	char *source;                       /* "FILE" or "FILE:LINE" */
	char *cell_id;
	char *why;                          /* "superseded by ...", "stale config_hash ...", "other spec ..." */
};

struct report {
	struct result_set results;          /* the artifacts the report uses (results.n of them) */
	cJSON *spec;                        /* the spec.json the artifacts are held against, or NULL */
	const char *spec_path;
	int n_ignored;
	struct ignored_artifact *ignored;   /* in the order found */
	int n_parity;
	struct parity *parity;              /* latest record per (arch, precision) */
	int n_models;
	struct report_model *models;        /* in order of first appearance */
	int n_parity_rows;
	struct parity_row *parity_rows;
	/* lookups that keep reading and organizing linear in the inputs */
	struct strmap model_index;          /* arch -> models[] */
	struct strmap parity_index;         /* pair_key -> parity[] */
	/* --spec: the spec's cells that have no artifact, in spec order; spec_cells
	 * is how many cells the spec has (0: no spec given) */
	int spec_cells, n_missing;
	char **missing;
};

void report_init(struct report *r);
void report_free(struct report *r);
/* A report_record_fn: artifacts into results, parity records into parity;
 * any other record is refused. */
int report_record(void *ctx, const cJSON *obj, const char *source, long line, char *err, size_t errsz);
/* Groups the results by model and builds the parity rows; call once every
 * input is read. */
void report_organize(struct report *r);
/* Loads spec (a poros-expand spec.json) before the inputs are read: then
 * report_record sets aside, in r->ignored with the reason, each artifact
 * of another spec_id, of a cell the spec does not have, or whose
 * config_hash is not the spec's for its cell (an artifact or a spec
 * without hashes is not held against them: artifact_items says so).  Returns 0, -1 with err set
 * when spec is malformed, -2 when it cannot be read. */
int report_use_spec(struct report *r, const char *spec, char *err, size_t errsz);
/* True when the spec.json held against has config_hashes (one of an older
 * poros-expand has only the cells). */
int report_spec_hashes(const struct report *r);
/* Puts the results in the spec's cell order, names each model as the
 * spec names it now (its display_name may have changed: not part of the
 * config_hash), and keeps the spec's cells without a current artifact in
 * r->missing; call once every input is read (nothing without a spec). */
void report_spec_missing(struct report *r);
/* The spec.json of the one input, when it is a directory that holds one
 * (poros-expand writes it beside the artifacts): a new string, or NULL. */
char *report_dir_spec(char *const *paths, int n);

/* The whole page / document into out. */
void render_html(struct sbuf *out, const struct report *r);
void render_md(struct sbuf *out, const struct report *r);

/* How a writer escapes every string from a spec or an artifact: sb_html
 * or sb_md. */
typedef void (*escape_fn)(struct sbuf *b, const char *s);

/* What differs between the writers where the content is the same. */
struct markup {
	escape_fn text;
	const char *item_open, *item_mid, *item_close;  /* one "term: value" line of the spec summary */
	const char *code_open, *code_close;             /* an identifier: a model id, a tensor name */
	const char *times;                              /* the multiplication sign */
	const char *line_break;                         /* between two facts in one table cell */
	const char *warn_open, *warn_close;             /* a flag a reader must not miss */
	const char *muted_open, *muted_close;           /* a note beside a value */
	void (*status)(struct sbuf *b, const struct result_entry *e); /* a cell's status */
	void (*verdict)(struct sbuf *b, int bitwise_exact);             /* parity: exact or differs */
};

/* --- the tables: one list of columns each, both writers (table.c) --- */

struct column {
	const char *head;                               /* plain text: each writer escapes it */
	int num;                                        /* a number: right-aligned */
	int derived;                                    /* computed from a measurement, not one */
	/* the cell of a row: of the results table (cell) or the parity table */
	void (*cell)(struct sbuf *b, const struct result_entry *e, const struct markup *mk);
	void (*parity_cell)(struct sbuf *b, const struct parity_row *row, const struct markup *mk);
};
extern const struct column result_columns[];        /* ends with a NULL head */
extern const struct column parity_columns[];        /* likewise */

/* Row i of a table: rows[i] of the results, else parity_rows[i]. */
void column_cell(struct sbuf *b, const struct column *col, const struct result_entry *const *rows,
                 const struct parity_row *parity_rows, int i, const struct markup *mk);

/* True when the cell ran on the CPU backend (its memory is host memory). */
int is_cpu_run(const struct artifact *a);
/* "181 K", "1.5 M", "7.62 B": a parameter count (given in billions) with
 * the unit that fits it. */
const char *fmt_params(char *buf, size_t n, double billions);
/* The banner of a report with CPU runs ("" when it has none): their timings
 * show the pipeline, not the speed of a GPU run. */
const char *cpu_banner(const struct report *r);
/* s (markup, not escaped) as a muted note, or as a warning. */
void mk_muted(struct sbuf *b, const struct markup *mk, const char *s);
void mk_warn(struct sbuf *b, const struct markup *mk, const char *s);

/* One line per precision with a finished poros cell: its s/step and
 * memory as ratios of each other method's (resident and the baselines). */
void model_headline(struct sbuf *b, const struct report_model *m, const struct markup *mk);
/* One sentence for the top of the report: the model, what measured it, and
 * the headline's ratios against each arm that ran. */
void model_sentence(struct sbuf *b, const struct report_model *m, const struct markup *mk);
/* "Run <first start> to <last finish>; commit ...; config ...". */
void report_stamp(struct sbuf *b, const struct report *r, const struct markup *mk);
/* A fingerprint of what the cells share (spec_id, hardware, training,
 * lora, poros): 16 hex digits of FNV-1a over their JSON. */
void config_hash(char out[17], const struct cell *c);

/* The losses of a cell's events.jsonl (run_dir under the directory its
 * artifact was read from, or under the --runs-from directory when one is
 * set) under key ("loss", or "eval_loss" on the steps that have one), at
 * most max points (evenly thinned); 0 when it has none to read. */
int load_losses(const struct result_entry *e, const char *key, double *step, double *loss, int max);
/* --runs-from DIR: artifacts' run_dir are under DIR (NULL: beside each input). */
void set_runs_from(const char *dir);

/* Shared by both writers (common.c). */
const char *status_name(const struct result_entry *e);
/* True when every cell ran to the end and none of the spec's is missing: the
 * notes have nothing to say. */
int all_cells_ok(const struct report *r);
/* The distinct values of an env field over every artifact, ", "-joined
 * into out; returns how many there were (0: not known anywhere). */
int env_values(struct sbuf *out, const struct report *r, const char *field, escape_fn text);
extern const char *const env_field_names[];  /* NULL-terminated, report order */
/* The distinct spec ids of the results, ", "-joined. */
void spec_ids(struct sbuf *b, const struct report *r, escape_fn text);
/* Each artifact used (cell_id, where it was read, when it finished), or
 * with ignored set each one the report left out and why, as mk's items. */
void artifact_items(struct sbuf *b, const struct report *r, const struct markup *mk, int ignored);
/* The spec summary's items, from the first cell (there must be one). */
void spec_items(struct sbuf *b, const struct report *r, const struct markup *mk);
/* A parity row's model: its display name, the record's label, or the two
 * run directories it compared. */
void parity_label(struct sbuf *b, const struct parity_row *row, escape_fn text);
/* Where a parity record's largest deltas are, or "--". */
void parity_where(struct sbuf *b, const struct parity *p, const struct markup *mk);

#endif
