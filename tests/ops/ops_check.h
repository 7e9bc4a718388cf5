/* tests/ops/ops_check.h: what the CPU op tests share (tests/ops/<op>.c's
 * value and gradient sections, tests/unit/test_lora_ext.c): a seeded
 * generator, random tensors whose values are exactly representable where
 * the op takes bf16, an elementwise |got - want| <= atol + rtol*|want|
 * check that prints the op, its max errors and its first mismatches, row
 * pitches, document positions, and central finite differences. */
#ifndef POROS_OPS_CHECK_H
#define POROS_OPS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "../unit/test_common.h"

/* A fixed-seed generator, so a failure reproduces. */
static uint64_t rng_counter;

static inline double rng_uniform(double lo, double hi)
{
	uint64_t r = poros_mix64(0x7e57ull * 0x100000001b3ull + rng_counter++);
	return lo + (hi - lo) * ((double)(r >> 11) * (1.0 / 9007199254740992.0));
}

static inline void fill_f32(float *x, long n, double lo, double hi)
{
	for (long i = 0; i < n; i++)
		x[i] = (float)rng_uniform(lo, hi);
}

static inline void fill_bf16(bf16 *x, long n, double lo, double hi)
{
	for (long i = 0; i < n; i++)
		x[i] = bf16_from_f32((float)rng_uniform(lo, hi));
}

static inline void widen_f32(double *out, const float *in, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = in[i];
}

static inline void widen_bf16(double *out, const bf16 *in, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = f32_from_bf16(in[i]);
}

static inline void *xcalloc_test(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return p;
}
#define NEW(type, n) ((type *)xcalloc_test((size_t)(n), sizeof(type)))

static inline void fill_nan(float *x, long n)
{
	for (long i = 0; i < n; i++)
		x[i] = NAN;
}

/* Ends a check's summary line with its mismatch count and counts a
 * failed check; 1 when it passed. */
static inline int check_verdict(long bad)
{
	if (bad)
		printf(", %ld mismatches", bad);
	printf("\n");
	if (bad)
		failures++;
	return bad == 0;
}

/* Compares got (n) with want (n).  NaN matches only NaN.  The relative error
 * reported skips references below atol, where it means nothing. */
static inline int check_close(const char *name, const float *got, const double *want, long n, double atol, double rtol)
{
	double max_abs = 0.0, max_rel = 0.0;
	long bad = 0;
	for (long i = 0; i < n; i++) {
		double g = got[i], w = want[i];
		int ok;
		double err;
		if (isnan(g) || isnan(w)) {
			ok = isnan(g) && isnan(w);
			err = ok ? 0.0 : INFINITY;
		} else {
			err = fabs(g - w);
			ok = err <= atol + rtol * fabs(w);
		}
		if (err > max_abs)
			max_abs = err;
		if (fabs(w) > atol && err / fabs(w) > max_rel)
			max_rel = err / fabs(w);
		if (!ok && bad++ < 5)
			printf("  %s[%ld]: got %.9g want %.9g (abs err %.3g)\n", name, i, g, w, err);
	}
	printf("%s %s: n %ld, max abs err %.3g, max rel err %.3g (atol %.1g, rtol %.1g)", bad ? "FAIL" : "ok  ",
	       name, n, max_abs, max_rel, atol, rtol);
	return check_verdict(bad);
}

static inline int check_closef(const float *got, const double *want, long n, double atol, double rtol,
                               const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* check_close with the check's name made from fmt and its arguments. */
static inline int check_closef(const float *got, const double *want, long n, double atol, double rtol,
                               const char *fmt, ...)
{
	char name[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	return check_close(name, got, want, n, atol, rtol);
}

/* |got - want| <= rel * bound + atol + rtol * |want| elementwise, where
 * bound (n) is each reference's own scale (e.g. the sum of |terms| that a
 * bf16 rounding inside the op can move); printed like check_close. */
static inline int check_bounded(const char *name, const float *got, const double *want, const double *bound, long n,
                                double rel, double atol, double rtol)
{
	double max_abs = 0.0, worst = 0.0;
	long bad = 0;
	for (long i = 0; i < n; i++) {
		double err = fabs(got[i] - want[i]), lim = rel * bound[i] + atol + rtol * fabs(want[i]);
		if (!(err <= lim) && bad++ < 5)
			printf("  %s[%ld]: got %.9g want %.9g (abs err %.3g, bound %.3g)\n", name, i, got[i], want[i],
			       err, lim);
		if (err > max_abs)
			max_abs = err;
		if (err / lim > worst)
			worst = err / lim;
	}
	printf("%s %s: n %ld, max abs err %.3g, worst %.3f of its bound (%.3g * sum|terms| + %.1g + %.1g*|want|)",
	       bad ? "FAIL" : "ok  ", name, n, max_abs, worst, rel, atol, rtol);
	return check_verdict(bad);
}

/* Bitwise equality of two buffers, reporting the first differing byte. */
static inline int check_same_bits(const char *name, const void *a, const void *b, size_t bytes)
{
	const unsigned char *x = a, *y = b;
	for (size_t i = 0; i < bytes; i++) {
		if (x[i] != y[i]) {
			printf("FAIL %s: bits differ first at byte %zu of %zu\n", name, i, bytes);
			failures++;
			return 0;
		}
	}
	printf("ok   %s: %zu bytes identical\n", name, bytes);
	return 1;
}

/* Row pitches.  Pad columns of a pitched buffer hold a NaN pattern that
 * no op computes from these tests' finite inputs: in an output, proof that
 * the op left them alone; in an input, a NaN that would poison any sum
 * that read it. */
#define PAD_BF16 ((bf16)0x7fc1)
#define PAD_F32_BITS 0x7fc12345u

static inline void fill_bf16_bits(bf16 *x, long n, bf16 bits)
{
	for (long i = 0; i < n; i++)
		x[i] = bits;
}

static inline void fill_f32_bits(float *x, long n, uint32_t bits)
{
	for (long i = 0; i < n; i++)
		memcpy(x + i, &bits, sizeof bits);
}

/* dst (rows, ld) = src (rows, cols) contiguous, pad columns PAD_BF16. */
static inline void pitch_bf16(bf16 *dst, int ld, const bf16 *src, long rows, int cols)
{
	fill_bf16_bits(dst, rows * ld, PAD_BF16);
	for (long r = 0; r < rows; r++)
		memcpy(dst + r * ld, src + r * cols, (size_t)cols * sizeof *src);
}

/* A pitched output got (rows, ld) of elem-byte elements against the
 * unpitched result want (rows, cols): the first cols of every row bit for
 * bit, and columns cols..ld-1 still the sentinel element pad (they belong
 * to another op).  Reports the first difference of each kind. */
static inline int check_pitched(const char *name, const void *got, int ld, const void *want, long rows, int cols,
				size_t elem, const void *pad)
{
	const unsigned char *g = got, *w = want;
	long bad_cols = 0, bad_pad = 0;
	for (long r = 0; r < rows; r++) {
		const unsigned char *row = g + (size_t)r * ld * elem;
		for (int c = 0; c < ld; c++) {
			int in_row = c < cols;
			const void *expect = in_row ? w + ((size_t)r * cols + c) * elem : pad;
			if (memcmp(row + (size_t)c * elem, expect, elem) == 0)
				continue;
			if ((in_row ? bad_cols++ : bad_pad++) == 0)
				printf("  %s: row %ld column %d: %s\n", name, r, c,
				       in_row ? "differs from the unpitched result" : "pad column overwritten");
		}
	}
	int ok = bad_cols == 0 && bad_pad == 0;
	printf("%s %s: %ld rows of %d columns at pitch %d, %ld differ from unpitched, %ld of %ld pad elements "
	       "written\n", ok ? "ok  " : "FAIL", name, rows, cols, ld, bad_cols, bad_pad, rows * (ld - cols));
	if (!ok)
		failures++;
	return ok;
}

static const bf16 pad_bf16 = PAD_BF16;

/* Values drawn as float, then rounded to bf16: the ops that round their
 * inputs before every product (attention, ops.h) then change nothing, and
 * the double reference sees the same function as the float op. */
static inline void fill_bf16_values(float *x, long n, double lo, double hi)
{
	fill_f32(x, n, lo, hi);
	for (long i = 0; i < n; i++)
		x[i] = f32_from_bf16(bf16_from_f32(x[i]));
}

/* pos (T) for rows packed with documents of the given lengths, the same
 * lengths in every row */
static inline void doc_positions(int32_t *pos, int B, int S, const int *len, int ndocs)
{
	for (int b = 0; b < B; b++) {
		int t = 0;
		for (int d = 0; d < ndocs; d++)
			for (int i = 0; i < len[d]; i++, t++)
				pos[b * S + t] = i;
	}
}

/* --- gradients: central finite differences of a double forward ----------
 * For each op, loss = sum(w .* forward(inputs)) with random w; the float
 * backward gets dout = w, and the reference gradient perturbs each input
 * in double.  Inputs are drawn as float (or bf16) and widened, so both
 * sides see the same point.  The step h = 1e-5 * max(1, |x|): the
 * truncation error (h^2/6) f''' and the rounding error eps_double * |L| / h
 * are both near 1e-10 for these O(1) losses, far below the float errors
 * the tolerances allow, so a tolerance is a statement about the float op. */
#define FD_STEP 1e-5

typedef double (*loss_fn)(const void *ctx);

/* grad (n) = dL/dx by central differences; x is restored afterwards. */
static inline void finite_diff(double *grad, double *x, long n, loss_fn loss, const void *ctx)
{
	for (long i = 0; i < n; i++) {
		double x0 = x[i], h = FD_STEP * fmax(1.0, fabs(x0));
		double xp = x0 + h, xm = x0 - h;
		x[i] = xp;
		double lp = loss(ctx);
		x[i] = xm;
		double lm = loss(ctx);
		x[i] = x0;
		grad[i] = (lp - lm) / (xp - xm);
	}
}

/* --- the drivers: a table of every op's check of one kind ----------------- */
struct op_check {
	const char *op;
	void (*run)(void); /* NULL: the op's file says where it is checked */
};

/* Runs the checks of the table, those of the ops named in argv[1..] or
 * every one when argc is 1, and says, after driver (the test's name) and
 * kind, how many ops had one and why the rest have none.  A name that is
 * no op of the table ends the test (exit 2). */
static inline void run_op_checks(const char *driver, const char *kind, const struct op_check *checks, size_t n,
                                 const char *why_not, int argc, char **argv)
{
	for (int a = 1; a < argc; a++) {
		size_t i = 0;
		while (i < n && strcmp(checks[i].op, argv[a]) != 0)
			i++;
		if (i == n) {
			fprintf(stderr, "%s: %s: no such op (usage: %s [OP...])\n", driver, argv[a], driver);
			exit(2);
		}
	}
	int ran = 0;
	size_t chosen = 0;
	for (size_t i = 0; i < n; i++) {
		int named = argc == 1;
		for (int a = 1; a < argc && !named; a++)
			named = strcmp(checks[i].op, argv[a]) == 0;
		chosen += named;
		if (named && checks[i].run) {
			checks[i].run();
			ran++;
		}
	}
	printf("%s: %s checks of %d of %zu ops (%s)\n", driver, kind, ran, chosen, why_not);
}

/* main()'s return for a driver: 1 when any check failed. */
static inline int op_checks_verdict(const char *driver)
{
	if (failures) {
		printf("%s: %d checks failed\n", driver, failures);
		return 1;
	}
	printf("%s: all checks passed\n", driver);
	return 0;
}

/* Checks that a second identical call doubled buf (n), i.e. the op added
 * its result (g + g = 2g is exact in float) rather than overwriting. */
static inline void check_accumulated(const char *name, const float *twice, const float *once, long n)
{
	long bad = 0;
	for (long i = 0; i < n; i++)
		if (twice[i] != 2.0f * once[i])
			bad++;
	printf("%s %s: += semantics, %ld of %ld elements not doubled\n", bad ? "FAIL" : "ok  ", name, bad, n);
	if (bad)
		failures++;
}

#endif
