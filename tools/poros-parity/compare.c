/* tools/poros-parity/compare.c: loss by loss and weight by weight, the
 * differences between two runs, and whether every bit is the same. */
#include "compare.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "records/records.h"
#include "util/util.h"

static int fail(int code, char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(int code, char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
	return code;
}

void events_free(struct run_events *ev)
{
	free(ev->path);
	free(ev->step);
	free(ev->loss);
	free(ev->loss_null);
	memset(ev, 0, sizeof *ev);
}

/* One event line: its step (an integer >= 1, above the previous one) and
 * its loss (a number, or null where the trainer saw NaN/inf). */
static int event_record(struct run_events *ev, const cJSON *o, long line, char *err, size_t errsz)
{
	const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
	const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss");
	double s;

	if (step == NULL)
		return fail(EXIT_USAGE, err, errsz, "%s:%ld: step: missing", ev->path, line);
	s = cJSON_IsNumber(step) ? step->valuedouble : NAN;
	if (!(s >= 1 && s <= 1e15 && s == floor(s)))
		return fail(EXIT_USAGE, err, errsz, "%s:%ld: step: expected an integer >= 1", ev->path, line);
	if (ev->n > 0 && (long)s <= ev->step[ev->n - 1])
		return fail(EXIT_USAGE, err, errsz, "%s:%ld: step %ld after step %ld: steps must increase",
		            ev->path, line, (long)s, ev->step[ev->n - 1]);
	if (loss == NULL)
		return fail(EXIT_USAGE, err, errsz, "%s:%ld: loss: missing", ev->path, line);
	if (!cJSON_IsNumber(loss) && !cJSON_IsNull(loss))
		return fail(EXIT_USAGE, err, errsz, "%s:%ld: loss: expected a number or null", ev->path, line);

	ev->step = xrealloc(ev->step, (size_t)(ev->n + 1) * sizeof *ev->step);
	ev->loss = xrealloc(ev->loss, (size_t)(ev->n + 1) * sizeof *ev->loss);
	ev->loss_null = xrealloc(ev->loss_null, (size_t)(ev->n + 1));
	ev->step[ev->n] = (long)s;
	ev->loss_null[ev->n] = cJSON_IsNull(loss);
	ev->loss[ev->n] = cJSON_IsNull(loss) ? NAN : loss->valuedouble;
	ev->n++;
	return 0;
}

int events_load(struct run_events *ev, const char *run_dir, char *err, size_t errsz)
{
	struct jsonl_reader r;
	FILE *f;
	cJSON *o;
	int rc = 0, got;

	memset(ev, 0, sizeof *ev);
	ev->path = xasprintf("%s/events.jsonl", run_dir);
	f = fopen(ev->path, "r");
	if (f == NULL)
		return fail(errno == ENOENT ? EXIT_USAGE : EXIT_RUNTIME, err, errsz, "%s: %s", ev->path,
		            strerror(errno));
	jsonl_init(&r, f, ev->path);
	while (rc == 0 && (got = jsonl_next(&r, &o)) != 0) {
		if (got < 0) {
			rc = fail(ferror(f) ? EXIT_RUNTIME : EXIT_USAGE, err, errsz, "%s:%ld: %s", ev->path,
			          r.line, r.err);
			break;
		}
		rc = event_record(ev, o, r.line, err, errsz);
		cJSON_Delete(o);
	}
	jsonl_free(&r);
	fclose(f);
	if (rc == 0 && ev->n == 0)
		rc = fail(EXIT_USAGE, err, errsz, "%s: no steps (did the run start?)", ev->path);
	return rc;
}

/* Same bits: the test behind bitwise_exact.  Both null counts as the same
 * (the trainer printed null for both). */
static int same_loss(const struct run_events *a, const struct run_events *b, long i)
{
	if (a->loss_null[i] || b->loss_null[i])
		return a->loss_null[i] && b->loss_null[i];
	return memcmp(&a->loss[i], &b->loss[i], sizeof a->loss[i]) == 0;
}

static int compare_losses(struct parity *p, const struct run_events *a, const struct run_events *b,
                          char *err, size_t errsz)
{
	if (a->n != b->n)
		return fail(EXIT_USAGE, err, errsz, "mismatched runs: %s has %ld steps, %s has %ld",
		            a->path, a->n, b->path, b->n);
	p->steps_compared = a->n;
	p->loss_max_abs_delta = 0.0;
	p->loss_max_step = -1;
	for (long i = 0; i < a->n; i++) {
		double d;
		if (a->step[i] != b->step[i])
			return fail(EXIT_USAGE, err, errsz, "mismatched runs: event %ld is step %ld in %s, step %ld in %s",
			            i + 1, a->step[i], a->path, b->step[i], b->path);
		if (same_loss(a, b, i))
			continue;
		p->bitwise_exact = 0;
		if (!isfinite(a->loss[i]) || !isfinite(b->loss[i])) {
			/* Not folded into the max: it would not be a number. */
			p->nonfinite_mismatches++;
			continue;
		}
		d = fabs(a->loss[i] - b->loss[i]);
		/* A zero delta with different bits (-0 vs 0) still names its step. */
		if (d > p->loss_max_abs_delta || p->loss_max_step < 0) {
			p->loss_max_abs_delta = d;
			p->loss_max_step = a->step[i];
		}
	}
	return 0;
}

static void tensor_delta(struct parity *p, struct parity_tensor *pt, const struct adapter_tensor *ta,
                         const struct adapter_tensor *tb)
{
	long long n = (long long)ta->rows * ta->cols;
	long long first_finite_diff = -1;

	pt->name = xstrdup(ta->name);
	pt->max_abs_delta = 0.0;
	pt->max_index = -1;
	pt->n_different = 0;
	for (long long i = 0; i < n; i++) {
		float fa = ta->data[i], fb = tb->data[i];
		double d;
		if (memcmp(&fa, &fb, sizeof fa) == 0)
			continue;
		pt->n_different++;
		if (!isfinite(fa) || !isfinite(fb)) {
			p->nonfinite_mismatches++;
			continue;
		}
		if (first_finite_diff < 0)
			first_finite_diff = i;
		d = fabs((double)fa - (double)fb);
		if (d > pt->max_abs_delta) {
			pt->max_abs_delta = d;
			pt->max_index = i;
		}
	}
	if (pt->n_different == 0)
		return;
	p->bitwise_exact = 0;
	if (pt->max_index < 0)
		pt->max_index = first_finite_diff; /* only -0 vs 0 differences: name the first (or none) */
	if (pt->max_abs_delta > p->adapter_max_abs_delta ||
	    (p->adapter_max_tensor == NULL && pt->max_index >= 0)) {
		p->adapter_max_abs_delta = pt->max_abs_delta;
		free(p->adapter_max_tensor);
		p->adapter_max_tensor = xstrdup(pt->name);
		p->adapter_max_index = pt->max_index;
	}
}

/* Same rank and the same set of tensors with the same shapes: anything
 * else is two different experiments, not a parity question. */
static int adapters_match(const struct adapter *a, const struct adapter *b, const char *dir_a,
                          const char *dir_b, char *err, size_t errsz)
{
	if (a->rank != b->rank)
		return fail(EXIT_USAGE, err, errsz, "mismatched runs: rank %d in %s, %d in %s", a->rank, dir_a,
		            b->rank, dir_b);
	for (int i = 0; i < a->n; i++) {
		const struct adapter_tensor *tb = adapter_find(b, a->t[i].name);
		if (tb == NULL)
			return fail(EXIT_USAGE, err, errsz, "mismatched runs: tensor %s is in %s only", a->t[i].name,
			            dir_a);
		if (tb->rows != a->t[i].rows || tb->cols != a->t[i].cols)
			return fail(EXIT_USAGE, err, errsz, "mismatched runs: tensor %s is (%d,%d) in %s, (%d,%d) in %s",
			            a->t[i].name, a->t[i].rows, a->t[i].cols, dir_a, tb->rows, tb->cols, dir_b);
	}
	for (int i = 0; i < b->n; i++)
		if (adapter_find(a, b->t[i].name) == NULL)
			return fail(EXIT_USAGE, err, errsz, "mismatched runs: tensor %s is in %s only", b->t[i].name,
			            dir_b);
	if (a->alpha != b->alpha || a->dropout != b->dropout)
		warnmsg("warning: lora_alpha/lora_dropout differ (%g/%g in %s, %g/%g in %s): comparing anyway",
		        a->alpha, a->dropout, dir_a, b->alpha, b->dropout, dir_b);
	return 0;
}

static int compare_adapters(struct parity *p, const char *run_a, const char *run_b, char *err, size_t errsz)
{
	struct adapter a, b;
	char *dir_a = xasprintf("%s/adapter", run_a), *dir_b = xasprintf("%s/adapter", run_b);
	char why[512];
	int rc = 0;

	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	if (adapter_load(dir_a, &a, why, sizeof why) < 0)
		rc = fail(EXIT_USAGE, err, errsz, "%s", why);
	else if (adapter_load(dir_b, &b, why, sizeof why) < 0)
		rc = fail(EXIT_USAGE, err, errsz, "%s", why);
	else
		rc = adapters_match(&a, &b, dir_a, dir_b, err, errsz);
	if (rc == 0) {
		p->adapter_max_abs_delta = 0.0;
		p->adapter_max_index = -1;
		p->n_tensors = a.n;
		p->tensors = xcalloc(a.n ? (size_t)a.n : 1, sizeof *p->tensors);
		for (int i = 0; i < a.n; i++)
			tensor_delta(p, &p->tensors[i], &a.t[i], adapter_find(&b, a.t[i].name));
	}
	adapter_free(&a);
	adapter_free(&b);
	free(dir_a);
	free(dir_b);
	return rc;
}

static int check_run_dir(const char *dir, char *err, size_t errsz)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return fail(errno == ENOENT ? EXIT_USAGE : EXIT_RUNTIME, err, errsz, "%s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail(EXIT_USAGE, err, errsz, "%s: not a run directory", dir);
	return 0;
}

int compare_runs(struct parity *p, const char *run_a, const char *run_b, char *err, size_t errsz)
{
	struct run_events a, b;
	int rc;

	if ((rc = check_run_dir(run_a, err, errsz)) != 0 || (rc = check_run_dir(run_b, err, errsz)) != 0)
		return rc;
	free(p->run_a);
	free(p->run_b);
	p->run_a = xstrdup(run_a);
	p->run_b = xstrdup(run_b);
	p->bitwise_exact = 1;
	p->nonfinite_mismatches = 0;
	memset(&b, 0, sizeof b);
	rc = events_load(&a, run_a, err, errsz);
	if (rc == 0)
		rc = events_load(&b, run_b, err, errsz);
	if (rc == 0)
		rc = compare_losses(p, &a, &b, err, errsz);
	events_free(&a);
	events_free(&b);
	if (rc == 0)
		rc = compare_adapters(p, run_a, run_b, err, errsz);
	return rc;
}
