/* tools/lib/records/timing.c: medians, the noise, passes, and the pass loop
 * (timing.h says the method). */
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of v, sorted in place. */
static double median_sorted_in_place(double *v, int n)
{
	if (n <= 0)
		return NAN;
	if (n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

cJSON *timing_json_number(double v)
{
	char buf[40];

	if (!isfinite(v))
		return cJSON_CreateNull();
	for (int digits = 15; digits <= 17; digits++) {
		snprintf(buf, sizeof buf, "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	return cJSON_CreateRaw(buf);
}

double timing_median(const double *v, int n)
{
	double *t, med;

	if (n <= 0)
		return NAN;
	t = xmalloc((size_t)n * sizeof *t);
	memcpy(t, v, (size_t)n * sizeof *t);
	med = median_sorted_in_place(t, n);
	free(t);
	return med;
}

double timing_mad(const double *v, int n, double center)
{
	double *d, mad;

	if (n <= 0)
		return NAN;
	d = xmalloc((size_t)n * sizeof *d);
	for (int i = 0; i < n; i++)
		d[i] = fabs(v[i] - center);
	mad = median_sorted_in_place(d, n);
	free(d);
	return mad;
}

static void timing_clear(struct artifact_metrics *m)
{
	m->s_per_step = m->s_per_step_min = m->s_per_step_max = NAN;
	m->s_per_step_spread = m->s_per_step_mad = NAN;
	m->passes_agree = -1;
}

void timing_aggregate(struct artifact_metrics *m, long long tokens_per_step)
{
	double *medians, *dev, lo = INFINITY, hi = -INFINITY, mlo = INFINITY, mhi = -INFINITY, worst = 0, scale;
	int total = 0, k = 0;

	timing_clear(m);
	if (m->n_passes <= 0)
		return;
	for (int i = 0; i < m->n_passes; i++) {
		if (m->passes[i].n <= 0)
			return;
		total += m->passes[i].n;
	}
	medians = xmalloc((size_t)m->n_passes * sizeof *medians);
	dev = xmalloc((size_t)total * sizeof *dev);
	for (int i = 0; i < m->n_passes; i++) {
		struct artifact_pass *ps = &m->passes[i];

		ps->median_s = medians[i] = timing_median(ps->step_s, ps->n);
		for (int j = 0; j < ps->n; j++) {
			lo = fmin(lo, ps->step_s[j]);
			hi = fmax(hi, ps->step_s[j]);
			dev[k++] = fabs(ps->step_s[j] - ps->median_s);
		}
		mlo = fmin(mlo, ps->median_s);
		mhi = fmax(mhi, ps->median_s);
	}
	m->s_per_step = timing_median(medians, m->n_passes);
	m->s_per_step_min = lo;
	m->s_per_step_max = hi;
	m->s_per_step_spread = mhi - mlo;
	m->s_per_step_mad = median_sorted_in_place(dev, total);
	for (int i = 0; i < m->n_passes; i++)
		worst = fmax(worst, fabs(medians[i] - m->s_per_step));
	/* worst > 0 with no noise at all disagrees too */
	scale = TIMING_DISAGREE_MADS * TIMING_MAD_SIGMA * m->s_per_step_mad;
	m->passes_agree = worst <= scale;
	m->steps_measured = m->passes[0].n;
	if (tokens_per_step > 0)
		m->tokens_per_s = m->s_per_step > 0 ? (double)tokens_per_step / m->s_per_step : NAN;
	free(medians);
	free(dev);
}

/* Moves the one pass an applied summary left in a->metrics to the end of
 * passes[0..*n). */
static void take_pass(struct artifact_pass *passes, int *n, struct artifact_metrics *m)
{
	passes[(*n)++] = m->passes[0];
	free(m->passes);
	m->passes = NULL;
	m->n_passes = 0;
}

void timing_run_passes(struct artifact *a, timing_pass_fn run, void *ctx)
{
	int want = a->cell.training.passes > 0 ? a->cell.training.passes : 1, n = 0;
	struct artifact_pass *passes = xcalloc((size_t)want, sizeof *passes);
	double wall = 0, peak = NAN, rss = NAN;

	for (int pass = 0; pass < want; pass++) {
		if (want > 1)
			fprintf(stderr, "%s[pass %d/%d]", pass ? " " : "", pass + 1, want);
		run(a, ctx);
		if (isfinite(a->wall_s))
			wall += a->wall_s;
		if (isfinite(a->metrics.vram_peak_mb))
			peak = isfinite(peak) ? fmax(peak, a->metrics.vram_peak_mb) : a->metrics.vram_peak_mb;
		if (isfinite(a->metrics.process_peak_rss_mb))
			rss = isfinite(rss) ? fmax(rss, a->metrics.process_peak_rss_mb) : a->metrics.process_peak_rss_mb;
		if (a->status != STATUS_OK || a->metrics.n_passes != 1) {
			if (want > 1 && a->status == STATUS_OK) {
				/* ok, but no timed steps listed: nothing to aggregate */
				a->status = STATUS_ERROR;
				artifact_set_str(&a->error, "the summary lists no timed steps (step_s)");
			}
			if (want > 1 && a->error) {
				char *e = xasprintf("pass %d of %d: %s", pass + 1, want, a->error);

				free(a->error);
				a->error = e;
			}
			break;
		}
		take_pass(passes, &n, &a->metrics);
	}
	if (a->status == STATUS_OK) {
		a->metrics.passes = passes;
		a->metrics.n_passes = n;
		a->metrics.vram_peak_mb = peak;
		a->metrics.process_peak_rss_mb = rss;
		timing_aggregate(&a->metrics, a->cell.tokens_per_step);
	} else {
		for (int i = 0; i < n; i++)
			free(passes[i].step_s);
		free(passes);
	}
	a->wall_s = round(wall * 1000.0) / 1000.0;
}
