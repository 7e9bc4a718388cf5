/* tools/poros-render/render.h: the report's data (results grouped by
 * model, parity by model and precision) and its two writers. */
#ifndef POROS_RENDER_H
#define POROS_RENDER_H

#include "parity.h"
#include "report.h"

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

struct report {
	struct result_set results;
	int n_parity;
	struct parity *parity;              /* latest record per (arch, precision) */
	int n_models;
	struct report_model *models;        /* in order of first appearance */
	int n_parity_rows;
	struct parity_row *parity_rows;
};

void report_init(struct report *r);
void report_free(struct report *r);
/* A report_record_fn: artifacts into results, parity records into parity;
 * any other record is refused. */
int report_record(void *ctx, const cJSON *obj, const char *source, long line, char *err, size_t errsz);
/* Groups the results by model and builds the parity rows; call once every
 * input is read. */
void report_organize(struct report *r);

/* The whole page / document into out. */
void render_html(struct sbuf *out, const struct report *r);
void render_md(struct sbuf *out, const struct report *r);

/* Shared by both writers. */
const char *status_name(const struct result_entry *e);
/* The distinct values of an env field over every artifact, ", "-joined
 * into out; returns how many there were (0: not known anywhere). */
int env_values(struct sbuf *out, const struct report *r, const char *field, int html);
extern const char *const env_field_names[];  /* NULL-terminated, report order */
/* ", 24 GB, PCIe gen 4", leaving out what the spec did not set (0). */
void hardware_numbers(struct sbuf *b, double vram_gb, int pcie_gen);
/* Counts of rows per status. */
void status_counts(const struct report *r, int counts[STATUS_COUNT]);

#endif
