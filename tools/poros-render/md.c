/* tools/poros-render/md.c: report.md, the tables of report.html in GitHub
 * Markdown.  Every string from a spec or an artifact goes through sb_md. */
#include "render.h"

#include <math.h>

static void md_verdict(struct sbuf *b, int exact);

static void md_status(struct sbuf *b, const struct result_entry *e)
{
	sb_printf(b, "**%s**", status_name(e));
}

static const struct markup md_markup = {
	.text = sb_md,
	.item_open = "- **", .item_mid = ":** ", .item_close = "\n",
	.code_open = "", .code_close = "",
	.times = "x",
	.line_break = "; ",
	.warn_open = "**", .warn_close = "**",
	.muted_open = "", .muted_close = "",
	.status = md_status,
	.verdict = md_verdict,
};

static void spec_summary(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "## Spec\n\n");
	spec_items(b, r, &md_markup);
	sb_puts(b, "\n");
}

/* A table of n rows (m's results or r's parity rows, by the columns'
 * kind), a blank line after it. */
static void md_table(struct sbuf *b, const struct column *cols, const struct result_entry *const *rows,
                     const struct parity_row *parity_rows, int n)
{
	sb_puts(b, "|");
	for (const struct column *col = cols; col->head; col++) {
		sb_puts(b, " ");
		sb_md(b, col->head);
		sb_puts(b, " |");
	}
	sb_puts(b, "\n|");
	for (const struct column *col = cols; col->head; col++)
		sb_puts(b, col->num ? "---:|" : "---|");
	sb_puts(b, "\n");
	for (int i = 0; i < n; i++) {
		sb_puts(b, "|");
		for (const struct column *col = cols; col->head; col++) {
			sb_puts(b, " ");
			column_cell(b, col, rows, parity_rows, i, &md_markup);
			sb_puts(b, " |");
		}
		sb_puts(b, "\n");
	}
	sb_puts(b, "\n");
}

static void model_table(struct sbuf *b, const struct report_model *m)
{
	const struct cell *c = m->cell;
	struct markup headline = md_markup; /* its lines: "- **poros nf4** ..." */
	struct sbuf h;
	char num[32];

	sb_puts(b, "## ");
	sb_md(b, c->model.display_name);
	sb_puts(b, " (");
	sb_md(b, c->model.model_id);
	sb_printf(b, ", %s parameters)\n\n", fmt_params(num, sizeof num, c->model.param_count_b));
	sb_init(&h);
	headline.item_mid = "** ";
	model_headline(&h, m, &headline);
	if (h.len)
		sb_printf(b, "%s\n", h.s);
	sb_free(&h);
	md_table(b, result_columns, m->rows, NULL, m->n);
}

static void md_verdict(struct sbuf *b, int exact)
{
	sb_puts(b, exact ? "exact" : "**differs**");
}

static void parity_table(struct sbuf *b, const struct report *r)
{
	int measured = 0;

	for (int i = 0; i < r->n_parity_rows; i++)
		measured |= r->parity_rows[i].record != NULL || r->parity_rows[i].artifact != NULL;
	sb_puts(b, "## Parity: blockwise vs resident\n\nSame seed, same backend: every loss and every adapter "
	           "weight should be bit-identical. -- means not measured.\n\n");
	if (!measured)
		sb_puts(b, "No parity was measured for these results: `poros parity SPEC` trains each model and precision "
		           "blockwise and resident and fills this table (`make bench` runs it).\n\n");
	md_table(b, parity_columns, NULL, r->parity_rows, r->n_parity_rows);
}

static void env_table(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "## Environment\n\n| Field | Value |\n|---|---|\n");
	for (int i = 0; env_field_names[i]; i++) {
		struct sbuf v;
		sb_init(&v);
		sb_puts(b, "| ");
		sb_md(b, env_field_names[i]);
		sb_printf(b, " | %s |\n", env_values(&v, r, env_field_names[i], sb_md) ? v.s : "--");
		sb_free(&v);
	}
	sb_puts(b, "\n");
}

static void notes(struct sbuf *b, const struct report *r)
{
	if (all_cells_ok(r))
		return;
	sb_puts(b, "## Cells that did not run to the end\n\n");
	for (int i = 0; i < r->results.n; i++) {
		const struct result_entry *e = &r->results.e[i];
		if (e->art.status == STATUS_OK)
			continue;
		sb_puts(b, "- ");
		sb_md(b, e->art.cell_id);
		sb_printf(b, " **%s**: ", status_name(e));
		sb_md(b, e->art.error ? e->art.error : "no reason recorded");
		if (e->art.log) {
			sb_puts(b, " (log: ");
			sb_md(b, e->art.log);
			sb_puts(b, ")");
		}
		sb_puts(b, "\n");
	}
	for (int i = 0; i < r->n_missing; i++) {
		sb_puts(b, "- ");
		sb_md(b, r->missing[i]);
		sb_puts(b, " **not measured**: a cell of the spec with no current artifact\n");
	}
	sb_puts(b, "\n");
}

/* Which artifacts the tables are made of, and which of the input's were
 * left out and why. */
static void artifacts_section(struct sbuf *b, const struct report *r)
{
	if (r->results.n == 0 && r->n_ignored == 0)
		return;
	sb_puts(b, "## Artifacts\n\n");
	sb_printf(b, "Used: %d", r->results.n);
	if (r->spec_path) {
		sb_puts(b, ", held against ");
		sb_md(b, r->spec_path);
	}
	sb_puts(b, ".\n\n");
	artifact_items(b, r, &md_markup, 0);
	if (r->n_ignored > 0) {
		sb_printf(b, "\nIgnored: %d.\n\n", r->n_ignored);
		artifact_items(b, r, &md_markup, 1);
	}
	sb_puts(b, "\n");
}

void render_md(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "# Poros Bench report");
	if (r->results.n == 0) {
		sb_puts(b, "\n\nNo run artifacts in the input.\n\n");
	} else {
		sb_puts(b, ": ");
		spec_ids(b, r, sb_md);
		sb_puts(b, "\n\n");
		report_stamp(b, r, &md_markup);
		sb_puts(b, "\n\n");
		if (*cpu_banner(r)) {
			sb_puts(b, "> ");
			sb_md(b, cpu_banner(r));
			sb_puts(b, "\n\n");
		}
		for (int m = 0; m < r->n_models; m++) {
			model_sentence(b, &r->models[m], &md_markup);
			sb_puts(b, "\n\n");
		}
		spec_summary(b, r);
		for (int m = 0; m < r->n_models; m++)
			model_table(b, &r->models[m]);
	}
	parity_table(b, r);
	if (r->results.n > 0)
		env_table(b, r);
	notes(b, r);
	artifacts_section(b, r);
	sb_puts(b, "\\* Fits on: the smallest common card (8, 12, 16, 24, 40, 48, 80 or 141 GB) with more memory "
	           "than poros-train's plan (planned, equal to its peak) or, without a plan, the measured peak "
	           "(derived).\n\n"
	           "s/step: the median over passes (fresh trainer processes) of each pass's median step after "
	           "warmup\\_steps; spread: slowest minus fastest pass median; noise: the median absolute deviation "
	           "(MAD) of the steps from their pass's median; passes disagree when a pass median lies more than "
	           "3 x 1.4826 x MAD from s/step.  Memory peak is the allocator's host memory for a CPU run.  Host memory: the base's "
	           "host copy plus blockwise's layer checkpoints poros-train keeps (pinned on a GPU; the base's alone "
	           "in an artifact written before the checkpoints were recorded); -- for an arm that does not "
	           "report it.\n");
}
