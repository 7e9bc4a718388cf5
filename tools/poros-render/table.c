/* tools/poros-render/table.c: the results table's columns, once: what a
 * column is called and what each of its cells says.  html.c and md.c
 * only wrap them in their own markup. */
#include "render.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int is_cpu_run(const struct artifact *a)
{
	return a->env.backend != NULL && strcmp(a->env.backend, "cpu") == 0;
}

const char *fmt_params(char *buf, size_t n, double billions)
{
	static const struct { double scale; const char *unit; } units[] = { { 1, "B" }, { 1e-3, "M" }, { 1e-6, "K" } };
	size_t u = 0;

	while (u + 1 < sizeof units / sizeof units[0] && fabs(billions) < units[u].scale)
		u++;
	if (isnan(billions))
		snprintf(buf, n, "--");
	else
		snprintf(buf, n, "%.3g %s", billions / units[u].scale, units[u].unit);
	return buf;
}

void mk_muted(struct sbuf *b, const struct markup *mk, const char *s)
{
	sb_puts(b, mk->muted_open);
	sb_puts(b, s);
	sb_puts(b, mk->muted_close);
}

void mk_warn(struct sbuf *b, const struct markup *mk, const char *s)
{
	sb_puts(b, mk->warn_open);
	sb_puts(b, s);
	sb_puts(b, mk->warn_close);
}

static void num(struct sbuf *b, double v)
{
	char buf[32];

	sb_puts(b, fmt_num(buf, sizeof buf, v));
}

static void col_method(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	mk->text(b, method_names[e->art.cell.method]);
}

static void col_precision(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	mk->text(b, precision_names[e->art.cell.precision]);
}

static void col_status(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	mk->status(b, e);
}

/* What computed: the device's name, "CPU" for the CPU backend. */
static void col_device(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	const struct artifact *a = &e->art;

	if (is_cpu_run(a))
		sb_puts(b, "CPU");
	else if (a->env.device || a->env.gpu_name)
		mk->text(b, a->env.device ? a->env.device : a->env.gpu_name);
	else
		sb_puts(b, "--");
}

/* The allocator's peak: device memory, or for a CPU run the host memory
 * its allocator held (the process's own peak is larger: code, stacks, the
 * C library's heap), named so; a CPU run's process peak (maximum RSS)
 * first when the artifact has it. */
static void col_memory(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	const struct artifact_metrics *m = &e->art.metrics;
	char buf[32], note[64];

	if (is_cpu_run(&e->art) && isfinite(m->process_peak_rss_mb)) {
		sb_puts(b, fmt_mib(buf, sizeof buf, m->process_peak_rss_mb));
		mk_muted(b, mk, " process RSS");
		if (!isnan(m->vram_peak_mb)) {
			snprintf(note, sizeof note, "allocator %s", fmt_mib(buf, sizeof buf, m->vram_peak_mb));
			sb_puts(b, mk->line_break);
			mk_muted(b, mk, note);
		}
		return;
	}
	sb_puts(b, fmt_mib(buf, sizeof buf, m->vram_peak_mb));
	if (is_cpu_run(&e->art) && !isnan(m->vram_peak_mb))
		mk_muted(b, mk, " host allocator");
}

/* The smallest common card the run fits on: from the trainer's plan when
 * the artifact has one (poros-train's, exact, whatever the run's status),
 * else derived from an ok run's measured peak (the Python arms). */
static void col_fits(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	const struct artifact_metrics *m = &e->art.metrics;
	int planned = !isnan(m->vram_plan_mb);
	int gb = planned ? fits_on_gb(m->vram_plan_mb) : e->art.status == STATUS_OK ? fits_on_gb(m->vram_peak_mb) : -1;

	/* a host-memory figure says nothing about a card */
	if (gb >= 0 && is_cpu_run(&e->art)) {
		mk_muted(b, mk, "CPU run");
		return;
	}
	if (gb < 0) {
		sb_puts(b, "--");
		return;
	}
	if (gb == 0)
		sb_puts(b, "&gt; 141 GB");
	else
		sb_printf(b, "%d GB", gb);
	mk_muted(b, mk, planned ? " planned" : " derived");
}

/* poros-train's pinned host memory, what the host must hold besides: the
 * base's copy and blockwise's layer checkpoints; the base's alone in an
 * artifact written before the checkpoints were recorded. */
static void col_host(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	const struct artifact_metrics *m = &e->art.metrics;
	char buf[32];

	(void)mk;
	if (isnan(m->host_weights_mb))
		sb_puts(b, "--");
	else if (isnan(m->host_checkpoints_mb))
		sb_puts(b, fmt_mib(buf, sizeof buf, m->host_weights_mb));
	else
		sb_puts(b, fmt_mib(buf, sizeof buf, m->host_weights_mb + m->host_checkpoints_mb));
}

static void col_s_per_step(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	(void)mk;
	num(b, e->art.metrics.s_per_step);
}

/* How many passes, their spread, and a flag when they disagree. */
static void col_passes(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	const struct artifact_metrics *m = &e->art.metrics;

	if (m->n_passes <= 0) {
		sb_puts(b, "--");
		return;
	}
	sb_printf(b, "%d", m->n_passes);
	if (m->n_passes > 1) {
		sb_puts(b, mk->muted_open);
		sb_puts(b, " spread ");
		num(b, m->s_per_step_spread);
		sb_puts(b, mk->muted_close);
	}
	if (m->passes_agree == 0) {
		sb_puts(b, mk->line_break);
		/* a shared CPU's timings are noise more often than news */
		if (is_cpu_run(&e->art))
			mk_muted(b, mk, "passes disagree (CPU)");
		else
			mk_warn(b, mk, "passes disagree");
	}
}

static void col_noise(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	(void)mk;
	num(b, e->art.metrics.s_per_step_mad);
}

static void col_range(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	const struct artifact_metrics *m = &e->art.metrics;

	(void)mk;
	if (isnan(m->s_per_step_min) || isnan(m->s_per_step_max)) {
		sb_puts(b, "--");
		return;
	}
	num(b, m->s_per_step_min);
	sb_puts(b, " - ");
	num(b, m->s_per_step_max);
}

static void col_tokens(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	(void)mk;
	num(b, e->art.metrics.tokens_per_s);
}

static void col_loss(struct sbuf *b, const struct result_entry *e, const struct markup *mk)
{
	(void)mk;
	num(b, e->art.metrics.loss_first);
	sb_puts(b, " -&gt; ");
	num(b, e->art.metrics.loss_last);
}

const struct column result_columns[] = {
	{ "Method", 0, 0, col_method, NULL },
	{ "Precision", 0, 0, col_precision, NULL },
	{ "Status", 0, 0, col_status, NULL },
	{ "Device", 0, 0, col_device, NULL },
	{ "Memory peak", 1, 0, col_memory, NULL },
	{ "Fits on*", 1, 1, col_fits, NULL },
	{ "Host memory", 1, 0, col_host, NULL },
	{ "s/step (median)", 1, 0, col_s_per_step, NULL },
	{ "Passes", 1, 0, col_passes, NULL },
	{ "Noise (MAD)", 1, 0, col_noise, NULL },
	{ "Step range", 1, 0, col_range, NULL },
	{ "tokens/s", 1, 0, col_tokens, NULL },
	{ "Loss first -> last", 1, 0, col_loss, NULL },
	{ NULL, 0, 0, NULL, NULL },
};

/* --- the parity table ------------------------------------------------------- */

/* A row's figures: the record's, else the artifact's own parity fields
 * (no step count or location there), else nothing measured. */
static void par_model(struct sbuf *b, const struct parity_row *row, const struct markup *mk)
{
	parity_label(b, row, mk->text);
}

static void par_precision(struct sbuf *b, const struct parity_row *row, const struct markup *mk)
{
	mk->text(b, row->precision ? row->precision : "--");
}

static void par_steps(struct sbuf *b, const struct parity_row *row, const struct markup *mk)
{
	(void)mk;
	if (row->record && row->record->steps_compared >= 0)
		sb_printf(b, "%ld", row->record->steps_compared);
	else
		sb_puts(b, "--");
}

static void par_loss(struct sbuf *b, const struct parity_row *row, const struct markup *mk)
{
	(void)mk;
	num(b, row->record ? row->record->loss_max_abs_delta
	        : row->artifact ? row->artifact->parity.loss_max_abs_delta : NAN);
}

static void par_adapter(struct sbuf *b, const struct parity_row *row, const struct markup *mk)
{
	(void)mk;
	num(b, row->record ? row->record->adapter_max_abs_delta
	        : row->artifact ? row->artifact->parity.adapter_max_abs_delta : NAN);
}

static void par_where(struct sbuf *b, const struct parity_row *row, const struct markup *mk)
{
	if (row->record)
		parity_where(b, row->record, mk);
	else
		sb_puts(b, "--");
}

static void par_bitwise(struct sbuf *b, const struct parity_row *row, const struct markup *mk)
{
	int exact = row->record ? row->record->bitwise_exact : row->artifact ? row->artifact->parity.bitwise_exact : -1;

	if (exact < 0)
		sb_puts(b, "--");
	else
		mk->verdict(b, exact);
}

const struct column parity_columns[] = {
	{ "Model", 0, 0, NULL, par_model },
	{ "Precision", 0, 0, NULL, par_precision },
	{ "bitwise", 0, 0, NULL, par_bitwise }, /* the verdict first: in view on a narrow screen */
	{ "Steps", 1, 0, NULL, par_steps },
	{ "loss max abs delta", 1, 0, NULL, par_loss },
	{ "adapter max abs delta", 1, 0, NULL, par_adapter },
	{ "where", 0, 0, NULL, par_where },
	{ NULL, 0, 0, NULL, NULL },
};

void column_cell(struct sbuf *b, const struct column *col, const struct result_entry *const *rows,
                 const struct parity_row *parity_rows, int i, const struct markup *mk)
{
	if (col->cell)
		col->cell(b, rows[i], mk);
	else
		col->parity_cell(b, &parity_rows[i], mk);
}
