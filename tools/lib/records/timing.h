/* tools/lib/records/timing.h: the one timing method every arm is measured by.
 * Each arm reports the wall time of every timed step (the steps after
 * training.warmup_steps); from those lists, and nothing else, C computes
 * what an artifact says about speed:
 *
 *   a pass's median     the median of its timed steps
 *   s_per_step          the median of the passes' medians
 *   s_per_step_min/max  the fastest and slowest timed step of any pass
 *   s_per_step_spread   the slowest pass median minus the fastest
 *   s_per_step_mad      the noise: the median absolute deviation of every
 *                       timed step from its own pass's median
 *   passes_agree        false when a pass median lies more than
 *                       TIMING_DISAGREE_MADS scaled MADs from s_per_step
 *
 * The disagreement rule is hyperfine's modified z-score, deviation / MAD
 * with 1.4826 x MAD standing for one standard deviation, with a threshold
 * of 3 standard deviations (hyperfine flags single runs at 10; a pass
 * median is already an average over many steps, so 3 is enough). */
#ifndef POROS_TIMING_H
#define POROS_TIMING_H

#include <stddef.h>

#include "artifact.h"

#define TIMING_MAD_SIGMA 1.4826
#define TIMING_DISAGREE_MADS 3.0

/* The median of v[0..n) (the mean of the middle two for even n); NaN for
 * n 0.  v is not changed. */
double timing_median(const double *v, int n);
/* The median of |v[i] - center|. */
double timing_mad(const double *v, int n, double center);

/* A JSON number that reads back as exactly v (the shortest of 15, 16 or
 * 17 significant digits that does; cJSON's own printer settles for 15
 * digits within an epsilon), or null when v is not finite: a median in
 * an artifact is then bit for bit the median of the times listed. */
cJSON *timing_json_number(double v);

/* Fills m's timing fields (s_per_step, _min, _max, _spread, _mad,
 * passes_agree, each pass's median_s, steps_measured and tokens_per_s
 * from tokens_per_step) from m->passes.  With no pass, or a pass without
 * steps, every timing field is null. */
void timing_aggregate(struct artifact_metrics *m, long long tokens_per_step);

/* Runs one pass of a cell: a fresh trainer process whose summary lands
 * in a (artifact_apply_summary: one pass in a->metrics.passes). */
typedef void (*timing_pass_fn)(struct artifact *a, void *ctx);

/* training.passes passes of a's cell, one after another: stops at the
 * first that is not ok (the artifact then says which pass failed, and
 * keeps that pass's metrics); after all are ok, a's metrics hold every
 * pass and the aggregate over them, loss and memory figures from the
 * last pass (its events.jsonl is the one in the run directory) except
 * vram_peak_mb, the largest of any pass.  wall_s is the sum. */
void timing_run_passes(struct artifact *a, timing_pass_fn run, void *ctx);

#endif
