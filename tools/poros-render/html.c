/* tools/poros-render/html.c: report.html, one self-contained page: inline
 * CSS, inline SVG, no script, no external reference of any kind.  Every
 * string from a spec or an artifact goes through sb_html. */
#include "render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg.h"
#include "util/util.h"

static const char css[] =
	":root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--head:#f6f8fa;"
	"--ok:#1a7f37;--oom:#bc4c00;--error:#cf222e;--skipped:#6e7781}\n"
	"body{font:14px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif;color:var(--fg);"
	"max-width:1600px;margin:2em auto;padding:0 1em}\n"
	"h1{font-size:1.6em;margin:0 0 .2em}\n"
	"h2{font-size:1.25em;border-bottom:1px solid var(--line);padding-bottom:.2em;margin-top:2em}\n"
	"h2 small,.muted{color:var(--muted);font-weight:normal}\n"
	".scroll{overflow-x:auto;max-width:100%;margin:.6em 0}\n"
	"table{border-collapse:collapse;font-variant-numeric:tabular-nums}\n"
	"th,td{border:1px solid var(--line);padding:.3em .6em;text-align:left;vertical-align:top}\n"
	"th{background:var(--head)}\n"
	"td.num{text-align:right;white-space:nowrap}\n"
	".badge{display:inline-block;padding:0 .55em;border-radius:1em;color:#fff;font-size:.85em;font-weight:600}\n"
	".ok{background:var(--ok)}.oom{background:var(--oom)}.error{background:var(--error)}"
	".skipped{background:var(--skipped)}.exact{background:var(--ok)}.differs{background:var(--error)}\n"
	".derived{font-style:italic}\n"
	".flag{color:var(--error);font-weight:600}\n"
	".banner{border:1px solid var(--line);border-left:4px solid var(--muted);background:var(--head);"
	"padding:.5em .8em;margin:.8em 0}\n"
	"ul.headline{margin:.4em 0 .8em;padding-left:1.2em}\n"
	"dl.spec{display:grid;grid-template-columns:max-content 1fr;gap:.25em 1.2em}\n"
	"dl.spec dt{font-weight:600}dl.spec dd{margin:0}\n"
	"figure{margin:1em 0}figcaption{font-weight:600;margin-bottom:.3em}\n"
	".swatch{display:inline-block;width:.8em;height:.8em;margin:0 .3em 0 .8em;vertical-align:-.05em}\n"
	/* at most its drawn size, scaled down to a narrow screen's width (its viewBox) */
	"svg.chart{width:100%;max-width:560px;height:auto;display:block}\n"
	"svg.chart text{font-size:12px;fill:var(--fg)}\n"
	"svg.chart text.tick{fill:var(--muted);font-size:11px}\n"
	"svg.chart text.none{fill:var(--muted);font-style:italic}\n"
	"svg.chart text.ref{fill:#cf222e;font-size:11px}\n"
	"code{font-size:.95em}\n"
	"footer{margin-top:3em;color:var(--muted);font-size:.9em}\n";

static void badge(struct sbuf *b, const struct result_entry *e);
static void verdict_badge(struct sbuf *b, int exact);

static void badge(struct sbuf *b, const struct result_entry *e)
{
	sb_printf(b, "<span class=\"badge %s\"", status_name(e));
	if (e->art.error) {
		sb_puts(b, " title=\"");
		sb_html(b, e->art.error);
		sb_puts(b, "\"");
	}
	sb_printf(b, ">%s</span>", status_name(e));
}

/* --- spec summary ----------------------------------------------------------- */

static const struct markup html_markup = {
	.text = sb_html,
	.item_open = "<dt>", .item_mid = "</dt><dd>", .item_close = "</dd>\n",
	.code_open = "<code>", .code_close = "</code>",
	.times = "&times;",
	.line_break = "<br>",
	.warn_open = "<span class=\"flag\">", .warn_close = "</span>",
	.muted_open = "<span class=\"muted\">", .muted_close = "</span>",
	.status = badge,
	.verdict = verdict_badge,
};

static void spec_summary(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "<section id=\"spec\">\n<h2>Spec</h2>\n<dl class=\"spec\">\n");
	spec_items(b, r, &html_markup);
	sb_puts(b, "</dl>\n</section>\n");
}

/* --- one model ---------------------------------------------------------------- */

/* A table's head (of class cls) up to its body's first row. */
static void table_head(struct sbuf *b, const char *cls, const struct column *cols)
{
	sb_printf(b, "<div class=\"scroll\">\n<table class=\"%s\">\n<thead><tr>", cls);
	for (const struct column *col = cols; col->head; col++) {
		sb_printf(b, "<th%s>", col->derived ? " class=\"derived\"" : "");
		sb_html(b, col->head);
		sb_puts(b, "</th>");
	}
	sb_puts(b, "</tr></thead>\n<tbody>\n");
}

/* Row i's cells (of m's results or r's parity rows, by the columns' kind). */
static void table_cells(struct sbuf *b, const struct column *cols, const struct result_entry *const *rows,
                        const struct parity_row *parity_rows, int i)
{
	for (const struct column *col = cols; col->head; col++) {
		sb_printf(b, "<td%s%s%s>", col->num || col->derived ? " class=\"" : "", col->num ? "num" : "",
		          col->derived ? (col->num ? " derived\"" : "derived\"") : (col->num ? "\"" : ""));
		column_cell(b, col, rows, parity_rows, i, &html_markup);
		sb_puts(b, "</td>");
	}
}

static void results_table(struct sbuf *b, const struct report_model *m)
{
	table_head(b, "results", result_columns);
	for (int i = 0; i < m->n; i++) {
		const struct result_entry *e = m->rows[i];

		sb_puts(b, "<tr id=\"cell-");
		sb_html(b, e->art.cell_id);
		sb_puts(b, "\">");
		table_cells(b, result_columns, m->rows, NULL, i);
		sb_puts(b, "</tr>\n");
	}
	sb_puts(b, "</tbody>\n</table>\n</div>\n");
}

static void legend(struct sbuf *b, const struct report_model *m)
{
	for (int p = 0; p < PRECISION_COUNT; p++) {
		int present = 0;
		for (int i = 0; i < m->n; i++)
			present |= (int)m->rows[i]->art.cell.precision == p;
		if (present)
			sb_printf(b, "<span class=\"swatch\" style=\"background:%s\"></span>%s",
			          precision_color(precision_names[p]), precision_names[p]);
	}
}

enum { LOSS_POINTS = 400 };

/* The cells' losses from their events.jsonl, one line each, and their
 * eval_loss (the steps that have one) as dots beside it. */
static void loss_chart(struct sbuf *b, const struct report_model *m)
{
	struct series *s = xcalloc(2 * ((size_t)m->n + 1), sizeof *s);
	double *xy = xmalloc(2 * ((size_t)m->n + 1) * 2 * LOSS_POINTS * sizeof *xy);
	char *caption;
	int n = 0, n_eval = 0;

	for (int i = 0; i < m->n; i++)
		for (int ev = 0; ev < 2; ev++) {
			double *x = xy + (size_t)n * 2 * LOSS_POINTS, *y = x + LOSS_POINTS;
			int k = load_losses(m->rows[i], ev ? "eval_loss" : "loss", x, y, LOSS_POINTS);

			if (k > 0)
				s[n++] = (struct series){ method_names[m->rows[i]->art.cell.method],
				                          precision_names[m->rows[i]->art.cell.precision], x, y, k,
				                          ev ? "eval_loss" : NULL };
			n_eval += k > 0 && ev;
		}
	sb_puts(b, "<figure>\n<figcaption>Loss by step");
	for (int i = 0; i < n; i++) {
		if (s[i].points) /* the swatch drawn as its dot */
			sb_printf(b, "<span class=\"swatch\" style=\"width:.5em;height:.5em;border-radius:50%%;"
			             "background:%s\"></span>", method_color(s[i].method));
		else /* the swatch drawn as its line: solid for nf4, dashed otherwise */
			sb_printf(b, "<span class=\"swatch\" style=\"width:1.6em;height:0;border-top:3px %s %s\"></span>",
			          strcmp(s[i].precision, "nf4") == 0 ? "solid" : "dashed", method_color(s[i].method));
		sb_html(b, s[i].method);
		sb_puts(b, " ");
		sb_html(b, s[i].precision);
		if (s[i].points) {
			sb_puts(b, " ");
			sb_html(b, s[i].points);
		}
	}
	sb_puts(b, "</figcaption>\n");
	if (n - n_eval > 1)
		sb_puts(b, "<p class=\"muted\">Bit-identical runs (poros and resident of one precision) draw one line.</p>\n");
	if (n == 0) {
		sb_puts(b, "<p class=\"muted\">No events.jsonl found beside the artifacts (runs&#47;&lt;cell_id&gt;&#47;): "
		           "no curves.</p>\n");
	} else {
		caption = xasprintf("Training loss by optimizer step, %s (solid nf4, dashed bf16%s)",
		                    m->cell->model.display_name, n_eval ? "; dots: eval_loss" : "");
		sb_puts(b, "<div class=\"scroll\">\n");
		svg_line_chart(b, caption, s, n, "step", "loss");
		sb_puts(b, "</div>\n");
		free(caption);
	}
	sb_puts(b, "</figure>\n");
	free(xy);
	free(s);
}

static void charts(struct sbuf *b, const struct report_model *m)
{
	struct bar *bars = xcalloc((size_t)m->n + 1, sizeof *bars);
	const struct cell *c = m->cell;
	double max_vram = 0, ref_mib = c->hardware.vram_gb * 1024.0, div;
	char ref_label[160], *caption;
	const char *unit, *what = "VRAM peak";
	int cpu = 0;

	for (int i = 0; i < m->n; i++) {
		if (m->rows[i]->art.metrics.vram_peak_mb > max_vram)
			max_vram = m->rows[i]->art.metrics.vram_peak_mb;
		cpu |= is_cpu_run(&m->rows[i]->art);
	}
	/* a CPU run's allocator holds host memory: the chart says so */
	if (cpu)
		what = "Allocator peak (host memory for CPU runs)";
	/* One unit per chart: GiB unless every peak is below one (the CPU test models). */
	div = max_vram >= 1024 ? 1024.0 : 1.0;
	unit = div > 1 ? "GiB" : "MiB";
	for (int i = 0; i < m->n; i++) {
		const struct artifact *a = &m->rows[i]->art;
		bars[i] = (struct bar){ method_names[a->cell.method], precision_names[a->cell.precision],
		                        artifact_status_names[a->status], a->metrics.vram_peak_mb / div, NAN, NAN };
	}
	snprintf(ref_label, sizeof ref_label, "%s: %g GB", c->hardware.gpu_name ? c->hardware.gpu_name : "GPU",
	         c->hardware.vram_gb);
	caption = xasprintf("%s by method (%s), %s", what, unit, c->model.display_name);
	sb_printf(b, "<div class=\"charts\">\n<figure>\n<figcaption>%s by method", what);
	legend(b, m);
	sb_puts(b, "</figcaption>\n<div class=\"scroll\">\n");
	/* The card's line only helps when it is on the same scale as the bars. */
	svg_bar_chart(b, caption, bars, m->n, unit, div > 1 && ref_mib > 0 ? ref_mib / div : NAN, ref_label);
	sb_puts(b, "</div>\n</figure>\n");
	free(caption);

	for (int i = 0; i < m->n; i++) {
		const struct artifact *a = &m->rows[i]->art;
		bars[i].value = a->metrics.s_per_step;
		bars[i].lo = a->metrics.s_per_step_min;
		bars[i].hi = a->metrics.s_per_step_max;
	}
	caption = xasprintf("Seconds per optimizer step by method (median, min to max), %s", c->model.display_name);
	sb_puts(b, "<figure>\n<figcaption>s/step by method (median; whiskers: min to max)");
	legend(b, m);
	sb_puts(b, "</figcaption>\n<div class=\"scroll\">\n");
	svg_bar_chart(b, caption, bars, m->n, "s/step", NAN, NULL);
	sb_puts(b, "</div>\n</figure>\n");
	free(caption);
	free(bars);
	loss_chart(b, m);
	sb_puts(b, "</div>\n");
}

static void model_section(struct sbuf *b, const struct report_model *m)
{
	const struct cell *c = m->cell;
	char num[32];

	sb_puts(b, "<section class=\"model\" id=\"model-");
	sb_html(b, c->model.arch);
	sb_puts(b, "\">\n<h2>");
	sb_html(b, c->model.display_name);
	sb_puts(b, " <small>");
	sb_html(b, c->model.model_id);
	sb_printf(b, ", %s parameters</small></h2>\n", fmt_params(num, sizeof num, c->model.param_count_b));
	{
		struct markup headline = html_markup; /* its lines: items of a list, the term in bold */
		struct sbuf h;

		headline.item_open = "<li><strong>", headline.item_mid = "</strong> ", headline.item_close = "</li>\n";
		sb_init(&h);
		model_headline(&h, m, &headline);
		if (h.len)
			sb_printf(b, "<ul class=\"headline\">\n%s</ul>\n", h.s);
		sb_free(&h);
	}
	results_table(b, m);
	charts(b, m);
	sb_puts(b, "</section>\n");
}

/* --- parity, environment, notes ---------------------------------------------- */

static void verdict_badge(struct sbuf *b, int exact)
{
	sb_printf(b, "<span class=\"badge %s\">%s</span>", exact ? "exact" : "differs", exact ? "exact" : "differs");
}

static int any_parity_measured(const struct report *r)
{
	for (int i = 0; i < r->n_parity_rows; i++)
		if (r->parity_rows[i].record || r->parity_rows[i].artifact)
			return 1;
	return 0;
}

static void parity_section(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "<section id=\"parity\">\n<h2>Parity: blockwise vs resident</h2>\n"
	           "<p class=\"muted\">Same seed, same backend: every loss and every adapter weight should be "
	           "bit-identical.  &ldquo;--&rdquo; means not measured.</p>\n");
	if (!any_parity_measured(r))
		sb_puts(b, "<p>No parity was measured for these results: <code>poros parity SPEC</code> trains each "
		           "model and precision blockwise and resident and fills this table (<code>make bench</code> "
		           "runs it).</p>\n");
	table_head(b, "parity", parity_columns);
	for (int i = 0; i < r->n_parity_rows; i++) {
		sb_puts(b, "<tr>");
		table_cells(b, parity_columns, NULL, r->parity_rows, i);
		sb_puts(b, "</tr>\n");
	}
	if (r->n_parity_rows == 0)
		sb_puts(b, "<tr><td colspan=\"7\">--</td></tr>\n");
	sb_puts(b, "</tbody>\n</table>\n</div>\n</section>\n");
}

static void env_section(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "<section id=\"env\">\n<h2>Environment</h2>\n<div class=\"scroll\">\n<table class=\"env\">\n<tbody>\n");
	for (int i = 0; env_field_names[i]; i++) {
		struct sbuf v;
		sb_init(&v);
		sb_printf(b, "<tr><th>%s</th><td>", env_field_names[i]);
		if (env_values(&v, r, env_field_names[i], sb_html) == 0)
			sb_puts(b, "<span class=\"muted\">--</span>");
		else
			sb_puts(b, v.s);
		sb_puts(b, "</td></tr>\n");
		sb_free(&v);
	}
	sb_puts(b, "</tbody>\n</table>\n</div>\n</section>\n");
}

static void notes_section(struct sbuf *b, const struct report *r)
{
	if (all_cells_ok(r))
		return;
	sb_puts(b, "<section id=\"notes\">\n<h2>Cells that did not run to the end</h2>\n<ul>\n");
	for (int i = 0; i < r->results.n; i++) {
		const struct result_entry *e = &r->results.e[i];
		if (e->art.status == STATUS_OK)
			continue;
		sb_puts(b, "<li><code>");
		sb_html(b, e->art.cell_id);
		sb_puts(b, "</code> ");
		badge(b, e);
		sb_puts(b, " ");
		sb_html(b, e->art.error ? e->art.error : "no reason recorded");
		if (e->art.log) {
			sb_puts(b, " <span class=\"muted\">(log: <code>");
			sb_html(b, e->art.log);
			sb_puts(b, "</code>)</span>");
		}
		sb_puts(b, "</li>\n");
	}
	for (int i = 0; i < r->n_missing; i++) {
		sb_puts(b, "<li><code>");
		sb_html(b, r->missing[i]);
		sb_puts(b, "</code> <strong>not measured</strong>: a cell of the spec with no current artifact</li>\n");
	}
	sb_puts(b, "</ul>\n</section>\n");
}

/* Which artifacts the tables are made of, and which of the input's were
 * left out and why. */
static void artifacts_section(struct sbuf *b, const struct report *r)
{
	if (r->results.n == 0 && r->n_ignored == 0)
		return;
	sb_printf(b, "<section id=\"artifacts\">\n<h2>Artifacts</h2>\n<p>Used: %d", r->results.n);
	if (r->spec_path) {
		sb_puts(b, ", held against <code>");
		sb_html(b, r->spec_path);
		sb_puts(b, "</code>");
	}
	sb_puts(b, ".</p>\n<dl class=\"spec\" id=\"used\">\n");
	artifact_items(b, r, &html_markup, 0);
	sb_puts(b, "</dl>\n");
	if (r->n_ignored > 0) {
		sb_printf(b, "<p class=\"flag\">Ignored: %d.</p>\n<dl class=\"spec\" id=\"ignored\">\n", r->n_ignored);
		artifact_items(b, r, &html_markup, 1);
		sb_puts(b, "</dl>\n");
	}
	sb_puts(b, "</section>\n");
}

void render_html(struct sbuf *b, const struct report *r)
{
	sb_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
	           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>Poros Bench: ");
	if (r->results.n > 0)
		spec_ids(b, r, sb_html);
	else
		sb_puts(b, "no results");
	sb_printf(b, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<header>\n<h1>Poros Bench report</h1>\n", css);
	if (r->results.n == 0) {
		sb_puts(b, "<p>No run artifacts in the input.</p>\n</header>\n");
	} else {
		sb_puts(b, "<p class=\"muted\">");
		spec_ids(b, r, sb_html);
		sb_printf(b, ": %d cell%s, %d model%s.</p>\n<p class=\"muted\" id=\"stamp\">", r->results.n,
		          r->results.n == 1 ? "" : "s", r->n_models, r->n_models == 1 ? "" : "s");
		report_stamp(b, r, &html_markup);
		sb_puts(b, "</p>\n");
		if (*cpu_banner(r)) {
			sb_puts(b, "<p class=\"banner\">");
			sb_html(b, cpu_banner(r));
			sb_puts(b, "</p>\n");
		}
		sb_puts(b, "</header>\n<section id=\"summary\">\n");
		for (int m = 0; m < r->n_models; m++) {
			sb_puts(b, "<p>");
			model_sentence(b, &r->models[m], &html_markup);
			sb_puts(b, "</p>\n");
		}
		sb_puts(b, "</section>\n");
		spec_summary(b, r);
		for (int m = 0; m < r->n_models; m++)
			model_section(b, &r->models[m]);
	}
	parity_section(b, r);
	if (r->results.n > 0)
		env_section(b, r);
	notes_section(b, r);
	artifacts_section(b, r);
	sb_puts(b, "<footer>\n<p>* Fits on: the smallest common card (8, 12, 16, 24, 40, 48, 80 or 141 GB) with "
	           "more memory than poros-train's plan, made before any work and equal to its allocator's peak "
	           "(planned), or, for an arm without a plan, than the measured peak of the training process's "
	           "allocations (derived).  A CUDA context and fragmentation need some more.</p>\n"
	           "<p>Memory peak: the largest memory the run's allocator held at once, device memory on a GPU, "
	           "host memory for a CPU run (its allocator's, not the whole process's resident peak).  Host memory: the base's host copy plus blockwise's layer checkpoints "
	           "poros-train keeps (pinned on a GPU; it refuses a run that needs more than the host's available "
	           "memory); the base's alone in an artifact written before the checkpoints were recorded; -- "
	           "for an arm that does not report it.  s/step: each pass (a fresh trainer process) times every step after "
	           "warmup_steps; a pass's figure is the median of its steps, and s/step the median of the passes'. "
	           "Spread: the slowest pass's median minus the fastest's.  Noise: the median absolute deviation "
	           "(MAD) of the steps from their pass's median.  Passes disagree when a pass's median lies more "
	           "than 3 &times; 1.4826 &times; MAD from s/step (hyperfine's modified z-score).  "
	           "&ldquo;--&rdquo;: not measured.</p>\n</footer>\n</body>\n</html>\n");
}
