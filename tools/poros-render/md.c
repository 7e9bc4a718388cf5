/* tools/poros-render/md.c: report.md, the tables of report.html in GitHub
 * Markdown.  Every string from a spec or an artifact goes through sb_md. */
#include "render.h"

#include <math.h>

static void num_cell(struct sbuf *b, double v)
{
	char num[32];
	sb_printf(b, " %s |", fmt_num(num, sizeof num, v));
}

static const struct markup md_markup = {
	.text = sb_md,
	.item_open = "- **", .item_mid = ":** ", .item_close = "\n",
	.code_open = "", .code_close = "",
	.times = "x",
	.line_break = "; ",
};

static void spec_summary(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "## Spec\n\n");
	spec_items(b, r, &md_markup);
	sb_puts(b, "\n");
}

static void model_table(struct sbuf *b, const struct report_model *m)
{
	const struct cell *c = m->cell;
	char num[32], lo[32], hi[32];

	sb_puts(b, "## ");
	sb_md(b, c->model.display_name);
	sb_puts(b, " (");
	sb_md(b, c->model.model_id);
	sb_printf(b, ", %g B parameters)\n\n", c->model.param_count_b);
	sb_puts(b, "| Method | Precision | Status | VRAM peak | Fits on\\* | s/step (median) | s/step range | tokens/s "
	           "| loss first -> last |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n");
	for (int i = 0; i < m->n; i++) {
		const struct result_entry *e = m->rows[i];
		const struct artifact_metrics *mt = &e->art.metrics;
		int gb = e->art.status == STATUS_OK ? fits_on_gb(mt->vram_peak_mb) : -1;

		sb_puts(b, "| ");
		sb_md(b, method_names[e->art.cell.method]);
		sb_puts(b, " | ");
		sb_md(b, precision_names[e->art.cell.precision]);
		sb_printf(b, " | **%s** | %s |", status_name(e), fmt_mib(num, sizeof num, mt->vram_peak_mb));
		if (gb < 0)
			sb_puts(b, " -- |");
		else if (gb == 0)
			sb_puts(b, " &gt; 141 GB\\* |");
		else
			sb_printf(b, " %d GB\\* |", gb);
		num_cell(b, mt->s_per_step);
		if (isnan(mt->s_per_step_min) || isnan(mt->s_per_step_max))
			sb_puts(b, " -- |");
		else
			sb_printf(b, " %s - %s |", fmt_num(lo, sizeof lo, mt->s_per_step_min),
			          fmt_num(hi, sizeof hi, mt->s_per_step_max));
		num_cell(b, mt->tokens_per_s);
		sb_printf(b, " %s -> ", fmt_num(lo, sizeof lo, mt->loss_first));
		sb_printf(b, "%s |\n", fmt_num(hi, sizeof hi, mt->loss_last));
	}
	sb_puts(b, "\n");
}

static void bitwise_cell(struct sbuf *b, int exact)
{
	sb_printf(b, " %s |\n", exact < 0 ? "--" : exact ? "exact" : "**differs**");
}

static void parity_table(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "## Parity: blockwise vs resident\n\nSame seed, same backend: every loss and every adapter "
	           "weight should be bit-identical. -- means not measured.\n\n"
	           "| Model | Precision | Steps | loss max abs delta | adapter max abs delta | where | bitwise |\n"
	           "|---|---|---:|---:|---:|---|---|\n");
	for (int i = 0; i < r->n_parity_rows; i++) {
		const struct parity_row *row = &r->parity_rows[i];
		const struct parity *p = row->record;

		sb_puts(b, "| ");
		parity_label(b, row, sb_md);
		sb_puts(b, " | ");
		sb_md(b, row->precision ? row->precision : "--");
		sb_puts(b, " |");
		if (p != NULL) {
			if (p->steps_compared < 0)
				sb_puts(b, " -- |");
			else
				sb_printf(b, " %ld |", p->steps_compared);
			num_cell(b, p->loss_max_abs_delta);
			num_cell(b, p->adapter_max_abs_delta);
			sb_puts(b, " ");
			parity_where(b, p, &md_markup);
			sb_puts(b, " |");
			bitwise_cell(b, p->bitwise_exact);
		} else if (row->artifact != NULL) {
			sb_puts(b, " -- |");
			num_cell(b, row->artifact->parity.loss_max_abs_delta);
			num_cell(b, row->artifact->parity.adapter_max_abs_delta);
			sb_puts(b, " -- |");
			bitwise_cell(b, row->artifact->parity.bitwise_exact);
		} else {
			sb_puts(b, " -- | -- | -- | -- | -- |\n");
		}
	}
	sb_puts(b, "\n");
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
		spec_summary(b, r);
		for (int m = 0; m < r->n_models; m++)
			model_table(b, &r->models[m]);
	}
	parity_table(b, r);
	if (r->results.n > 0)
		env_table(b, r);
	notes(b, r);
	sb_puts(b, "\\* Fits on is derived, not measured: the smallest common card (8, 12, 16, 24, 40, 48, 80 or "
	           "141 GB) with more memory than the measured peak.\n");
}
