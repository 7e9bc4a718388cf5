/* tests/gpu/test_ops_cuda.c: every CUDA op against the CPU reference.
 *
 * For each op and shape: random inputs from a fixed seed; the CPU op
 * (kernels/cpu) gives the reference; the CUDA op runs twice on the same
 * inputs, every output poisoned with NaN (or reset to its initial values,
 * for outputs the op adds into) before each run.  An output passes when
 * every element is within atol + rtol*|ref| of the CPU's, and the op is
 * deterministic when the two runs agree bit for bit.  Scratch buffers are
 * poisoned too, so an op that reads scratch it did not write shows NaN.
 *
 * Tolerances: atol is stated relative to the largest |ref| of the output
 * (a_rel * max|ref|), because the rounding error of a sum scales with the
 * size of its partial sums, which the output's largest values measure.
 * Each op says why its numbers are what they are.  A bf16 output may differ
 * by one bf16 ulp where the two fp32 values straddle a rounding boundary:
 * one ulp is at most 2^-7 of the value, hence BF16_RTOL.
 *
 * Shapes: odd small ones that take the kernels' scalar, unaligned and
 * fallback paths, then realistic ones (T=512, C=4096, H=32, G=8, D=128,
 * V=32000, F=11008, and Qwen2.5-32B's C=5120, F=27648).
 *
 * Row pitches: the ops whose operands may sit in a wider buffer (room for
 * the LoRA extension, ops.h) run with ld > row length too.  A pitched
 * output starts NaN where the op writes and a sentinel in the pad, which
 * both the GPU's result and the CPU's reference must keep; a pitched
 * input (the GEMMs') holds NaN in its pad, which must not reach a result.
 *
 * usage: test_ops_cuda [--small] [SUBSTRING...]
 *   --small     only the small shapes (quick enough for compute-sanitizer)
 *   SUBSTRING   only the cases whose title contains one, e.g. lora_backward
 * Prints one block per case and a summary line; exits 0 when every case
 * passed, 1 when any failed, 2 when there is no CUDA device or no case
 * matched. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

#define BF16_ULP_REL (1.0 / 128.0)
#define BF16_RTOL (BF16_ULP_REL + 1e-5)

static const struct backend *gpu;
static struct backend_event *ev_start, *ev_end;
static int cases_passed, cases_failed;

static _Noreturn void die(const char *msg)
{
	fprintf(stderr, "test_ops_cuda: %s\n", msg);
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of host memory");
	return p;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* --- random inputs: a counter through poros_mix64, fixed seed -------------- */

static uint64_t rng_counter = 0x9055;

static double rand_unit(void) /* [0, 1) */
{
	return (double)(poros_mix64(rng_counter++) >> 11) * (1.0 / 9007199254740992.0);
}

static float rand_range(float lo, float hi)
{
	return lo + (hi - lo) * (float)rand_unit();
}

static float *rand_f32(size_t n, float lo, float hi)
{
	float *x = xmalloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = rand_range(lo, hi);
	return x;
}

static bf16 *rand_bf16(size_t n, float lo, float hi)
{
	bf16 *x = xmalloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = bf16_from_f32(rand_range(lo, hi));
	return x;
}

static void *dup_bytes(const void *src, size_t bytes)
{
	void *p = xmalloc(bytes);
	memcpy(p, src, bytes);
	return p;
}

/* --- device memory: everything a case allocates is freed at its end ------- */

#define MAX_DEV 64
static void *dev_live[MAX_DEV];
static int n_dev_live;

/* bytes of device memory, `offset` bytes into a fresh allocation: an offset
 * that is not a multiple of 16 sends the op down its unaligned path */
static void *dev_alloc(size_t bytes, size_t offset)
{
	void *p;
	if (n_dev_live == MAX_DEV)
		die("too many device buffers in one case");
	if (gpu->device_alloc(&p, bytes + offset + 16) != 0)
		die("device out of memory");
	dev_live[n_dev_live++] = p;
	return (char *)p + offset;
}

static void *dev_from(const void *host, size_t bytes, size_t offset)
{
	void *d = dev_alloc(bytes, offset);
	gpu->copy_h2d(d, host, bytes, STREAM_COMPUTE);
	return d;
}

static void dev_free_all(void)
{
	for (int i = 0; i < n_dev_live; i++)
		gpu->device_free(dev_live[i]);
	n_dev_live = 0;
}

/* 0xff bytes: NaN as fp32 and as bf16, so an element the op never writes
 * cannot pass for a result */
static void dev_poison(void *d, size_t bytes)
{
	unsigned char *p = xmalloc(bytes);
	memset(p, 0xff, bytes);
	gpu->copy_h2d(d, p, bytes, STREAM_COMPUTE);
	gpu->synchronize(); /* the copy has read p before it is freed */
	free(p);
}

/* --- a case: outputs run twice on the GPU ----------------------------------- */

#define MAX_OUTS 8
struct out_buf {
	const char *name;
	void *dev;
	size_t bytes;
	const void *init;      /* uploaded before each run; NULL: poisoned */
	int scratch;           /* poisoned, never compared */
	unsigned char *got[2]; /* what each run left */
};

struct gpu_case {
	char title[160];
	int n;
	struct out_buf out[MAX_OUTS];
	double cpu_ms, gpu_ms;
	int bad;
};

/* Substrings from the command line; a case runs when its title contains
 * one of them (every case when there are none). */
static char **filters;
static int n_filters;

static int case_begin(struct gpu_case *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Names the case; returns 0 when the filters leave it out. */
static int case_begin(struct gpu_case *c, const char *fmt, ...)
{
	va_list ap;
	memset(c, 0, sizeof *c);
	va_start(ap, fmt);
	vsnprintf(c->title, sizeof c->title, fmt, ap);
	va_end(ap);
	int selected = n_filters == 0;
	for (int i = 0; i < n_filters && !selected; i++)
		selected = strstr(c->title, filters[i]) != NULL;
	if (!selected)
		return 0;
	printf("%s\n", c->title);
	fflush(stdout);
	return 1;
}

static void *case_out(struct gpu_case *c, const char *name, size_t bytes, const void *init, size_t offset)
{
	if (c->n == MAX_OUTS)
		die("too many outputs in one case");
	struct out_buf *o = &c->out[c->n++];
	o->name = name;
	o->bytes = bytes;
	o->init = init;
	o->dev = dev_alloc(bytes, offset);
	return o->dev;
}

static void *case_scratch(struct gpu_case *c, size_t bytes)
{
	void *d = case_out(c, "scratch", bytes, NULL, 0);
	c->out[c->n - 1].scratch = 1;
	return d;
}

typedef void (*gpu_op)(const void *args);

static void case_run(struct gpu_case *c, gpu_op op, const void *args)
{
	for (int run = 0; run < 2; run++) {
		for (int i = 0; i < c->n; i++) {
			struct out_buf *o = &c->out[i];
			if (o->init)
				gpu->copy_h2d(o->dev, o->init, o->bytes, STREAM_COMPUTE);
			else
				dev_poison(o->dev, o->bytes);
		}
		gpu->event_record(ev_start, STREAM_COMPUTE);
		op(args);
		gpu->event_record(ev_end, STREAM_COMPUTE);
		gpu->event_synchronize(ev_end);
		if (run == 1) /* the second run: cuBLAS set up, caches warm */
			c->gpu_ms = gpu->event_elapsed_ms(ev_start, ev_end);
		for (int i = 0; i < c->n; i++) {
			struct out_buf *o = &c->out[i];
			if (o->scratch)
				continue;
			o->got[run] = xmalloc(o->bytes);
			gpu->copy_d2h(o->got[run], o->dev, o->bytes);
		}
	}
}

static struct out_buf *case_find(struct gpu_case *c, const char *name)
{
	for (int i = 0; i < c->n; i++)
		if (strcmp(c->out[i].name, name) == 0)
			return &c->out[i];
	die("no such output");
}

/* The GPU's first-run result of an output. */
static const void *got(struct gpu_case *c, const char *name)
{
	return case_find(c, name)->got[0];
}

/* --- pitched buffers -------------------------------------------------------
 * A (rows, cols) matrix whose rows are ld >= cols elements apart: columns
 * cols..ld-1 of each row belong to another op (the LoRA extension), so an
 * op must not write them in an output nor read them in an input.  Outputs
 * start NaN where the op writes and PAD_BYTE in every pad byte, which
 * must survive; inputs carry NaN in their pads, which must not reach any
 * result.  ld == cols is the contiguous layout. */

/* 0x5a5a5a5a as fp32 and 0x5a5a as bf16: 1.5e16, a value none of these ops
 * produces from the inputs here */
#define PAD_BYTE 0x5a

static double value_at(const void *x, size_t i, int is_bf16)
{
	return is_bf16 ? f32_from_bf16(((const bf16 *)x)[i]) : ((const float *)x)[i];
}

/* rows*ld elements of elem bytes: each row's first cols elements all `fill`
 * bytes, the rest `pad` bytes */
static void *pitched_fill(size_t rows, size_t cols, size_t ld, size_t elem, int fill, int pad)
{
	unsigned char *p = xmalloc(rows * ld * elem);
	for (size_t r = 0; r < rows; r++) {
		memset(p + r * ld * elem, fill, cols * elem);
		memset(p + (r * ld + cols) * elem, pad, (ld - cols) * elem);
	}
	return p;
}

/* An output's initial contents, on both sides: NaN (0xff bytes) where the
 * op writes, so an element it skips cannot pass for a result, and
 * PAD_BYTE in the pad. */
static void *pitched_out_init(size_t rows, size_t cols, size_t ld, size_t elem)
{
	return pitched_fill(rows, cols, ld, elem, 0xff, PAD_BYTE);
}

/* src (rows, cols) contiguous spread to rows ld apart, NaN in the pad. */
static void *pitched_copy(const void *src, size_t rows, size_t cols, size_t ld, size_t elem)
{
	unsigned char *p = pitched_fill(rows, cols, ld, elem, 0xff, 0xff);
	for (size_t r = 0; r < rows; r++)
		memcpy(p + r * ld * elem, (const unsigned char *)src + r * cols * elem, cols * elem);
	return p;
}

/* Fails the case when any pad element of buf (rows, cols, ld) lost its
 * PAD_BYTE bytes.  who: "gpu" for the op under test, "cpu" for the
 * reference (a reference that writes its pad is no reference). */
static void check_pad(struct gpu_case *c, const char *name, const char *who, const void *buf, size_t rows,
                      size_t cols, size_t ld, size_t elem)
{
	if (ld == cols)
		return;
	const unsigned char *p = buf;
	size_t clobbered = 0, first_r = 0, first_c = 0;
	for (size_t r = 0; r < rows; r++) {
		for (size_t k = cols; k < ld; k++) {
			const unsigned char *e = p + (r * ld + k) * elem;
			size_t b = 0;
			while (b < elem && e[b] == PAD_BYTE)
				b++;
			if (b == elem)
				continue;
			if (!clobbered)
				first_r = r, first_c = k;
			clobbered++;
		}
	}
	if (!clobbered) {
		printf("    %-9s %s left the pad (columns %zu..%zu) alone  ok\n", name, who, cols, ld - 1);
		return;
	}
	printf("    %-9s %s wrote %zu pad elements, first [%zu,%zu]  MISMATCH\n", name, who, clobbered, first_r,
	       first_c);
	c->bad++;
}

/* The GPU output's pad, and the CPU reference's. */
static void check_pads(struct gpu_case *c, const char *name, const void *ref, size_t rows, size_t cols, size_t ld,
                       size_t elem)
{
	check_pad(c, name, "cpu", ref, rows, cols, ld, elem);
	check_pad(c, name, "gpu", got(c, name), rows, cols, ld, elem);
}

/* The inputs' values are finite, their pads NaN: a NaN in the reference
 * means the CPU read a pad, and check() would take the GPU's NaN from the
 * same mistake for agreement. */
static void check_ref_finite(struct gpu_case *c, const char *name, const float *ref, size_t n)
{
	size_t nan = 0;
	for (size_t i = 0; i < n; i++)
		nan += isnan(ref[i]) != 0;
	if (!nan) {
		printf("    %-9s no NaN in the cpu reference  ok\n", name);
		return;
	}
	printf("    %-9s %zu NaN in the cpu reference: it read an input's pad  MISMATCH\n", name, nan);
	c->bad++;
}

/* Largest |x| over the rows' first cols elements (NaN ignored). */
static double absmax_rows(const void *x, size_t rows, size_t cols, size_t ld, int is_bf16)
{
	double m = 0.0;
	for (size_t r = 0; r < rows; r++) {
		for (size_t k = 0; k < cols; k++) {
			double v = fabs(value_at(x, r * ld + k, is_bf16));
			if (v > m) /* false for NaN */
				m = v;
		}
	}
	return m;
}

/* Compares the GPU output `name` with the CPU's ref, both (rows, cols)
 * with rows ld apart, fp32 or bf16 (is_bf16), over each row's first cols
 * elements: passes when |got - ref| <= a_rel * max|ref| + rtol * |ref|
 * everywhere (both NaN counts as agreement: the ops' documented NaN
 * results).  Prints the largest errors, the worst element as a fraction
 * of its tolerance, and the first mismatches (index e = r*cols + k). */
static void check_rows(struct gpu_case *c, const char *name, const void *ref, size_t rows, size_t cols, size_t ld,
                       int is_bf16, double a_rel, double rtol)
{
	const void *g = got(c, name);
	double atol = a_rel * absmax_rows(ref, rows, cols, ld, is_bf16);
	double max_abs = 0.0, max_rel = 0.0, worst = 0.0;
	size_t bad = 0, first[5], n = rows * cols;
	for (size_t e = 0; e < n; e++) {
		size_t i = e / cols * ld + e % cols;
		double gv = value_at(g, i, is_bf16), rv = value_at(ref, i, is_bf16);
		if (isnan(gv) && isnan(rv))
			continue;
		double err = fabs(gv - rv), lim = atol + rtol * fabs(rv);
		if (!(err <= lim)) { /* NaN fails too */
			if (bad < 5)
				first[bad] = e;
			bad++;
		}
		if (isnan(err)) {
			worst = INFINITY;
			continue;
		}
		if (err > max_abs)
			max_abs = err;
		if (rv != 0.0 && err / fabs(rv) > max_rel)
			max_rel = err / fabs(rv);
		double frac = lim > 0.0 ? err / lim : (err > 0.0 ? INFINITY : 0.0);
		if (frac > worst)
			worst = frac;
	}
	printf("    %-9s max_abs %.3e  max_rel %.3e  tol %.2e+%.1e*|ref|  worst %.3f of tol  %s\n", name, max_abs,
	       max_rel, atol, rtol, worst, bad ? "MISMATCH" : "ok");
	for (size_t k = 0; k < bad && k < 5; k++) {
		size_t e = first[k], i = e / cols * ld + e % cols;
		double gv = value_at(g, i, is_bf16), rv = value_at(ref, i, is_bf16);
		printf("      [%zu] gpu % .9g  cpu % .9g  |diff| %.3g\n", e, gv, rv, fabs(gv - rv));
	}
	if (bad) {
		printf("      %zu of %zu elements outside tolerance\n", bad, n);
		c->bad++;
	}
}

/* check_rows for n contiguous values. */
static void check(struct gpu_case *c, const char *name, const void *ref, size_t n, int is_bf16, double a_rel,
                  double rtol)
{
	check_rows(c, name, ref, 1, n, n, is_bf16, a_rel, rtol);
}

/* Bit-for-bit equality with the CPU over columns col0..col0+cols-1 of
 * each row (elements of elem bytes, rows ld apart; ref holds the whole
 * rows too), for ops whose arithmetic is the same single rounding on both
 * sides. */
static void check_exact_cols(struct gpu_case *c, const char *name, const void *ref, size_t rows, size_t col0,
                             size_t cols, size_t ld, size_t elem)
{
	const unsigned char *g = got(c, name), *r = ref;
	size_t diff = 0, first = 0, n = rows * cols;
	for (size_t e = 0; e < n; e++) {
		size_t at = (e / cols * ld + col0 + e % cols) * elem;
		if (memcmp(g + at, r + at, elem) != 0) {
			if (!diff)
				first = e;
			diff++;
		}
	}
	if (!diff) {
		printf("    %-9s bitwise equal to the CPU  ok\n", name);
		return;
	}
	printf("    %-9s %zu elements differ from the CPU, first [%zu]  MISMATCH\n", name, diff, first);
	c->bad++;
}

/* check_exact_cols over each row's first cols elements. */
static void check_exact_rows(struct gpu_case *c, const char *name, const void *ref, size_t rows, size_t cols,
                             size_t ld, size_t elem)
{
	check_exact_cols(c, name, ref, rows, 0, cols, ld, elem);
}

/* check_exact_rows for `bytes` contiguous bytes. */
static void check_exact(struct gpu_case *c, const char *name, const void *ref, size_t bytes, size_t elem)
{
	check_exact_rows(c, name, ref, 1, bytes / elem, bytes / elem, elem);
}

/* Both GPU runs must leave the same bits in every output. */
static void check_deterministic(struct gpu_case *c)
{
	int same = 1;
	for (int i = 0; i < c->n; i++) {
		struct out_buf *o = &c->out[i];
		if (o->scratch || memcmp(o->got[0], o->got[1], o->bytes) == 0)
			continue;
		size_t k = 0;
		while (o->got[0][k] == o->got[1][k])
			k++;
		printf("    %-9s NOT deterministic: runs differ first at byte %zu\n", o->name, k);
		same = 0;
	}
	if (same)
		printf("    deterministic: two runs bitwise equal\n");
	else
		c->bad++;
}

static void case_end(struct gpu_case *c)
{
	check_deterministic(c);
	printf("  %s  (cpu %.1f ms, gpu %.3f ms)\n\n", c->bad ? "FAIL" : "PASS", c->cpu_ms, c->gpu_ms);
	fflush(stdout);
	if (c->bad)
		cases_failed++;
	else
		cases_passed++;
	for (int i = 0; i < c->n; i++) {
		free(c->out[i].got[0]);
		free(c->out[i].got[1]);
	}
	dev_free_all();
}

/* --- embedding ----------------------------------------------------------- */

struct embedding_args {
	float *out;
	const int32_t *tokens;
	const bf16 *wte;
	int T, C;
};

static void embedding_gpu(const void *p)
{
	const struct embedding_args *a = p;
	gpu->ops->embedding_forward(a->out, a->tokens, a->wte, a->T, a->C);
}

/* Widening bf16 to fp32 is exact: the outputs must be identical. */
static void test_embedding(int T, int C, int V)
{
	struct gpu_case c;
	if (!case_begin(&c, "embedding_forward T=%d C=%d V=%d", T, C, V))
		return;
	int32_t *tokens = xmalloc((size_t)T * sizeof *tokens);
	for (int t = 0; t < T; t++)
		tokens[t] = (int32_t)(rand_unit() * V);
	tokens[0] = V - 1; /* the last row too */
	bf16 *wte = rand_bf16((size_t)V * C, -1, 1);
	float *ref = xmalloc((size_t)T * C * sizeof *ref);
	double t0 = now_ms();
	embedding_forward_cpu(ref, tokens, wte, T, C);
	c.cpu_ms = now_ms() - t0;

	struct embedding_args a = { NULL, dev_from(tokens, (size_t)T * 4, 0), dev_from(wte, (size_t)V * C * 2, 0),
	                            T, C };
	a.out = case_out(&c, "out", (size_t)T * C * 4, NULL, 0);
	case_run(&c, embedding_gpu, &a);
	check_exact(&c, "out", ref, (size_t)T * C * 4, 4);
	case_end(&c);
	free(tokens);
	free(wte);
	free(ref);
}

/* --- rmsnorm ------------------------------------------------------------- */

struct rmsnorm_args {
	float *out_f32, *rstd, *din;
	bf16 *out_bf16;
	const float *in, *dout, *rstd_in;
	const bf16 *weight;
	float eps;
	int T, C, ld_out;
};

static void rmsnorm_fwd_gpu(const void *p)
{
	const struct rmsnorm_args *a = p;
	gpu->ops->rmsnorm_forward(a->out_f32, a->out_bf16, a->ld_out, a->rstd, a->in, a->weight, a->eps, a->T, a->C);
}

static void rmsnorm_bwd_gpu(const void *p)
{
	const struct rmsnorm_args *a = p;
	gpu->ops->rmsnorm_backward(a->din, a->dout, a->in, a->weight, a->rstd_in, a->T, a->C);
}

/* The CPU sums x^2 in double, the GPU in fp32 (16 terms a thread, then a
 * tree): relative error of the sum ~24 * 2^-24 at worst, halved in rstd,
 * plus two roundings in y: 1e-5 relative is a 5x margin.  The bf16 output
 * adds one bf16 ulp.  ld_out > C: both outputs pitched, the pads kept. */
static void test_rmsnorm_forward(int T, int C, int ld_out, int want_f32, int want_bf16)
{
	struct gpu_case c;
	if (!case_begin(&c, "rmsnorm_forward T=%d C=%d ld_out=%d%s%s", T, C, ld_out, want_f32 ? " out_f32" : "",
	                want_bf16 ? " out_bf16" : ""))
		return;
	size_t n = (size_t)T * C, n_out = (size_t)T * ld_out;
	float *in = rand_f32(n, -2, 2);
	bf16 *w = rand_bf16((size_t)C, 0.5f, 1.5f);
	float *init_f32 = pitched_out_init((size_t)T, (size_t)C, (size_t)ld_out, 4);
	bf16 *init_bf = pitched_out_init((size_t)T, (size_t)C, (size_t)ld_out, 2);
	float *ref = dup_bytes(init_f32, n_out * 4), *ref_rstd = xmalloc((size_t)T * 4);
	bf16 *ref_bf = dup_bytes(init_bf, n_out * 2);
	double t0 = now_ms();
	rmsnorm_forward_cpu(want_f32 ? ref : NULL, want_bf16 ? ref_bf : NULL, ld_out, ref_rstd, in, w, 1e-6f, T, C);
	c.cpu_ms = now_ms() - t0;

	struct rmsnorm_args a = { 0 };
	a.in = dev_from(in, n * 4, 0);
	a.weight = dev_from(w, (size_t)C * 2, 0);
	a.eps = 1e-6f;
	a.T = T;
	a.C = C;
	a.ld_out = ld_out;
	if (want_f32)
		a.out_f32 = case_out(&c, "out_f32", n_out * 4, init_f32, 0);
	if (want_bf16)
		a.out_bf16 = case_out(&c, "out_bf16", n_out * 2, init_bf, 0);
	a.rstd = case_out(&c, "rstd", (size_t)T * 4, NULL, 0);
	case_run(&c, rmsnorm_fwd_gpu, &a);
	if (want_f32) {
		check_rows(&c, "out_f32", ref, (size_t)T, (size_t)C, (size_t)ld_out, 0, 1e-6, 1e-5);
		check_pads(&c, "out_f32", ref, (size_t)T, (size_t)C, (size_t)ld_out, 4);
	}
	if (want_bf16) {
		check_rows(&c, "out_bf16", ref_bf, (size_t)T, (size_t)C, (size_t)ld_out, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "out_bf16", ref_bf, (size_t)T, (size_t)C, (size_t)ld_out, 2);
	}
	check(&c, "rstd", ref_rstd, (size_t)T, 0, 0, 1e-5);
	case_end(&c);
	free(in);
	free(w);
	free(init_f32);
	free(init_bf);
	free(ref);
	free(ref_rstd);
	free(ref_bf);
}

/* The row dot sum(dy w x) runs in double on the CPU and in fp32 on the GPU;
 * it enters din scaled by r^3/C, so its error is tiny next to din's own
 * roundings: 1e-5 of the largest |din| plus 1e-5 relative. */
static void test_rmsnorm_backward(int T, int C)
{
	struct gpu_case c;
	if (!case_begin(&c, "rmsnorm_backward T=%d C=%d", T, C))
		return;
	size_t n = (size_t)T * C;
	float *in = rand_f32(n, -2, 2), *dout = rand_f32(n, -1, 1), *din0 = rand_f32(n, -1, 1);
	bf16 *w = rand_bf16((size_t)C, 0.5f, 1.5f);
	float *rstd = xmalloc((size_t)T * 4);
	rmsnorm_forward_cpu(NULL, NULL, C, rstd, in, w, 1e-6f, T, C);
	float *ref = dup_bytes(din0, n * 4);
	double t0 = now_ms();
	rmsnorm_backward_cpu(ref, dout, in, w, rstd, T, C);
	c.cpu_ms = now_ms() - t0;

	struct rmsnorm_args a = { 0 };
	a.in = dev_from(in, n * 4, 0);
	a.dout = dev_from(dout, n * 4, 0);
	a.weight = dev_from(w, (size_t)C * 2, 0);
	a.rstd_in = dev_from(rstd, (size_t)T * 4, 0);
	a.T = T;
	a.C = C;
	a.din = case_out(&c, "din", n * 4, din0, 0);
	case_run(&c, rmsnorm_bwd_gpu, &a);
	check(&c, "din", ref, n, 0, 1e-5, 1e-5);
	case_end(&c);
	free(in);
	free(dout);
	free(din0);
	free(w);
	free(rstd);
	free(ref);
}

/* --- matmul -------------------------------------------------------------- */

struct matmul_args {
	float *out;
	const bf16 *in, *weight, *bias;
	int ld_in, ld_w; /* ld_in: rows of in (forward) or dout (backward) */
	int T, K, N, accumulate;
};

static void matmul_fwd_gpu(const void *p)
{
	const struct matmul_args *a = p;
	gpu->ops->matmul_forward(a->out, a->in, a->ld_in, a->weight, a->ld_w, a->bias, a->T, a->K, a->N,
	                         a->accumulate);
}

static void matmul_bwd_gpu(const void *p)
{
	const struct matmul_args *a = p;
	gpu->ops->matmul_backward_input(a->out, a->in, a->ld_in, a->weight, a->ld_w, a->T, a->K, a->N, a->accumulate);
}

/* bf16 x bf16 products are exact in fp32, so CPU and GPU differ only in
 * the order of the fp32 sums (CPU: k = 0..K-1 sequentially; cuBLAS: tensor
 * core tiles, maybe split-K).  With inputs uniform in [-1,1] the CPU's
 * sequential error has a standard deviation of about 2^-24 * K / 7.3 (3.3e-5
 * for K = 4096) while the largest |out| is about 5.5 * sqrt(K) / 3 (117):
 * the largest errors are ~2e-6 of max|out|, so a_rel = 2e-5 leaves a ~10x
 * margin at K = 4096 and more for small K (the error grows like K, max|out|
 * like sqrt(K): at K = 11008 the margin is ~6x). */
#define GEMM_A_REL 2e-5
#define GEMM_RTOL 1e-5

/* ld_in, ld_w > K: in and weight sit in wider buffers whose pad columns
 * hold NaN; one read of them makes NaN of a whole output row or column. */
static void test_matmul_forward(int T, int K, int N, int ld_in, int ld_w, int with_bias, int accumulate)
{
	struct gpu_case c;
	if (!case_begin(&c, "matmul_forward T=%d K=%d N=%d ld_in=%d ld_w=%d%s%s", T, K, N, ld_in, ld_w,
	                with_bias ? " bias" : "", accumulate ? " accumulate" : ""))
		return;
	bf16 *in0 = rand_bf16((size_t)T * K, -1, 1), *w0 = rand_bf16((size_t)N * K, -1, 1);
	bf16 *in = pitched_copy(in0, (size_t)T, (size_t)K, (size_t)ld_in, 2);
	bf16 *w = pitched_copy(w0, (size_t)N, (size_t)K, (size_t)ld_w, 2);
	bf16 *bias = with_bias ? rand_bf16((size_t)N, -1, 1) : NULL;
	float *out0 = rand_f32((size_t)T * N, -1, 1);
	float *ref = dup_bytes(out0, (size_t)T * N * 4);
	double t0 = now_ms();
	matmul_forward_cpu(ref, in, ld_in, w, ld_w, bias, T, K, N, accumulate);
	c.cpu_ms = now_ms() - t0;

	struct matmul_args a = { NULL, dev_from(in, (size_t)T * ld_in * 2, 0), dev_from(w, (size_t)N * ld_w * 2, 0),
	                         bias ? dev_from(bias, (size_t)N * 2, 0) : NULL, ld_in, ld_w, T, K, N, accumulate };
	a.out = case_out(&c, "out", (size_t)T * N * 4, accumulate ? out0 : NULL, 0);
	case_run(&c, matmul_fwd_gpu, &a);
	check_ref_finite(&c, "out", ref, (size_t)T * N);
	check(&c, "out", ref, (size_t)T * N, 0, GEMM_A_REL, GEMM_RTOL);
	printf("    %.1f TFLOP/s\n", 2.0 * T * K * N / (c.gpu_ms * 1e-3) / 1e12);
	case_end(&c);
	free(in0);
	free(w0);
	free(in);
	free(w);
	free(bias);
	free(out0);
	free(ref);
}

/* din (T,K) = dout (T,N) @ W (N,K): a sum over N; see GEMM_A_REL.
 * ld_dout > N, ld_w > K: NaN pads, as in the forward. */
static void test_matmul_backward_input(int T, int K, int N, int ld_dout, int ld_w, int accumulate)
{
	struct gpu_case c;
	if (!case_begin(&c, "matmul_backward_input T=%d K=%d N=%d ld_dout=%d ld_w=%d accumulate=%d", T, K, N,
	                ld_dout, ld_w, accumulate))
		return;
	bf16 *dout0 = rand_bf16((size_t)T * N, -1, 1), *w0 = rand_bf16((size_t)N * K, -1, 1);
	bf16 *dout = pitched_copy(dout0, (size_t)T, (size_t)N, (size_t)ld_dout, 2);
	bf16 *w = pitched_copy(w0, (size_t)N, (size_t)K, (size_t)ld_w, 2);
	float *din0 = rand_f32((size_t)T * K, -1, 1);
	float *ref = dup_bytes(din0, (size_t)T * K * 4);
	double t0 = now_ms();
	matmul_backward_input_cpu(ref, dout, ld_dout, w, ld_w, T, K, N, accumulate);
	c.cpu_ms = now_ms() - t0;

	struct matmul_args a = { NULL, dev_from(dout, (size_t)T * ld_dout * 2, 0),
	                         dev_from(w, (size_t)N * ld_w * 2, 0), NULL, ld_dout, ld_w, T, K, N, accumulate };
	a.out = case_out(&c, "din", (size_t)T * K * 4, accumulate ? din0 : NULL, 0);
	case_run(&c, matmul_bwd_gpu, &a);
	check_ref_finite(&c, "din", ref, (size_t)T * K);
	check(&c, "din", ref, (size_t)T * K, 0, GEMM_A_REL, GEMM_RTOL);
	printf("    %.1f TFLOP/s\n", 2.0 * T * K * N / (c.gpu_ms * 1e-3) / 1e12);
	case_end(&c);
	free(dout0);
	free(w0);
	free(dout);
	free(w);
	free(din0);
	free(ref);
}

/* --- lora ---------------------------------------------------------------- */

struct lora_args {
	float *out, *u, *din, *dA, *dB, *du, *scratch;
	const float *u_in, *A, *B;
	const bf16 *in, *dout;
	float scale, p;
	uint64_t seed;
	int T, K, N, R, accumulate;
};

static void lora_fwd_gpu(const void *p)
{
	const struct lora_args *a = p;
	gpu->ops->lora_forward(&(struct lora_fwd_args){ .out = a->out, .u = a->u, .scratch = a->scratch, .in = a->in,
		.ld_in = a->K, .A = a->A, .B = a->B, .scale = a->scale, .dropout_p = a->p, .dropout_seed = a->seed,
		.T = a->T, .K = a->K, .N = a->N, .R = a->R });
}

static void lora_bwd_gpu(const void *p)
{
	const struct lora_args *a = p;
	gpu->ops->lora_backward(&(struct lora_bwd_args){ .din = a->din, .dA = a->dA, .dB = a->dB, .du = a->du,
		.scratch = a->scratch, .dout = a->dout, .ld_dout = a->N, .in = a->in, .ld_in = a->K, .u = a->u_in,
		.A = a->A, .B = a->B, .scale = a->scale, .dropout_p = a->p, .dropout_seed = a->seed, .T = a->T,
		.K = a->K, .N = a->N, .R = a->R, .accumulate = a->accumulate });
}

/* u is a K-term fp32 sum (the CPU in order; the GPU's CUDA-core kernel in
 * four thread groups and, with a scratch, in slices added in order, or on
 * tensor cores through the exact three-way bf16 split of A when the scratch
 * holds its parts), out is written as
 * scale * u @ B^T (cuBLAS over R): sums of the GEMM kind with inputs in
 * [-1,1] and A in +-1/sqrt(K), so GEMM_A_REL's argument applies. */
static void test_lora_forward(int T, int K, int N, int R, float p, int scratch)
{
	struct gpu_case c;
	if (!case_begin(&c, "lora_forward T=%d K=%d N=%d R=%d dropout=%g%s", T, K, N, R, p, scratch ? " scratch" : ""))
		return;
	float bound = 1.0f / sqrtf((float)K); /* PEFT's kaiming-uniform range for A */
	bf16 *in = rand_bf16((size_t)T * K, -1, 1);
	float *A = rand_f32((size_t)R * K, -bound, bound), *B = rand_f32((size_t)N * R, -0.5f, 0.5f);
	float *out0 = rand_f32((size_t)T * N, -1, 1);
	float scale = 2.0f;
	uint64_t seed = 0xd40b0u + (uint64_t)K;
	float *ref = dup_bytes(out0, (size_t)T * N * 4), *ref_u = xmalloc((size_t)T * R * 4);
	double t0 = now_ms();
	lora_forward_cpu(&(struct lora_fwd_args){ .out = ref, .u = ref_u, .in = in, .ld_in = K, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });
	c.cpu_ms = now_ms() - t0;

	struct lora_args a = { 0 };
	a.in = dev_from(in, (size_t)T * K * 2, 0);
	a.A = dev_from(A, (size_t)R * K * 4, 0);
	a.B = dev_from(B, (size_t)N * R * 4, 0);
	a.scale = scale;
	a.p = p;
	a.seed = seed;
	a.T = T, a.K = K, a.N = N, a.R = R;
	a.out = case_out(&c, "out", (size_t)T * N * 4, NULL, 0); /* written, not added to */
	a.u = case_out(&c, "u", (size_t)T * R * 4, NULL, 0);
	if (scratch)
		a.scratch = case_scratch(&c, (size_t)T * K * 4);
	case_run(&c, lora_fwd_gpu, &a);
	check(&c, "u", ref_u, (size_t)T * R, 0, GEMM_A_REL, GEMM_RTOL);
	check(&c, "out", ref, (size_t)T * N, 0, GEMM_A_REL, GEMM_RTOL);
	case_end(&c);
	free(in);
	free(A);
	free(B);
	free(out0);
	free(ref);
	free(ref_u);
}

/* du (sum over N), dB (over T), dA (over T, using du), din (over R, using
 * du): sums of up to 27648 fp32 terms in different orders, and dA, din
 * inherit du's rounding: 5e-5 of the largest value, 1e-4 relative.
 * with_din: 0 none, 1 written, 2 added to. */
static void test_lora_backward(int T, int K, int N, int R, float p, int with_din, int scratch)
{
	struct gpu_case c;
	if (!case_begin(&c, "lora_backward T=%d K=%d N=%d R=%d dropout=%g%s%s", T, K, N, R, p,
	                with_din == 2 ? " din+=" : with_din ? " din" : "", scratch ? " scratch" : ""))
		return;
	float bound = 1.0f / sqrtf((float)K);
	bf16 *in = rand_bf16((size_t)T * K, -1, 1);
	float *A = rand_f32((size_t)R * K, -bound, bound), *B = rand_f32((size_t)N * R, -0.5f, 0.5f);
	bf16 *dout = rand_bf16((size_t)T * N, -1, 1);
	float *dA0 = rand_f32((size_t)R * K, -1, 1), *dB0 = rand_f32((size_t)N * R, -1, 1);
	float *din0 = rand_f32((size_t)T * K, -1, 1);
	float scale = 2.0f;
	uint64_t seed = 0xb4c6u + (uint64_t)N;
	/* u as the CPU forward leaves it, the same input for both backwards */
	float *u = xmalloc((size_t)T * R * 4), *scratch_out = xmalloc((size_t)T * N * 4);
	memset(scratch_out, 0, (size_t)T * N * 4);
	lora_forward_cpu(&(struct lora_fwd_args){ .out = scratch_out, .u = u, .in = in, .ld_in = K, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R });
	float *ref_dA = dup_bytes(dA0, (size_t)R * K * 4), *ref_dB = dup_bytes(dB0, (size_t)N * R * 4);
	float *ref_din = dup_bytes(din0, (size_t)T * K * 4), *ref_du = xmalloc((size_t)T * R * 4);
	double t0 = now_ms();
	lora_backward_cpu(&(struct lora_bwd_args){ .din = with_din ? ref_din : NULL, .dA = ref_dA, .dB = ref_dB,
		.du = ref_du, .dout = dout, .ld_dout = N, .in = in, .ld_in = K, .u = u, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = seed, .T = T, .K = K, .N = N, .R = R,
		.accumulate = with_din == 2 });
	c.cpu_ms = now_ms() - t0;

	struct lora_args a = { 0 };
	a.in = dev_from(in, (size_t)T * K * 2, 0);
	a.A = dev_from(A, (size_t)R * K * 4, 0);
	a.B = dev_from(B, (size_t)N * R * 4, 0);
	a.u_in = dev_from(u, (size_t)T * R * 4, 0);
	a.dout = dev_from(dout, (size_t)T * N * 2, 0);
	a.accumulate = with_din == 2;
	a.scale = scale;
	a.p = p;
	a.seed = seed;
	a.T = T, a.K = K, a.N = N, a.R = R;
	a.dA = case_out(&c, "dA", (size_t)R * K * 4, dA0, 0);
	a.dB = case_out(&c, "dB", (size_t)N * R * 4, dB0, 0);
	a.du = case_out(&c, "du", (size_t)T * R * 4, NULL, 0);
	if (with_din) /* written: the device buffer starts as garbage, not din0 */
		a.din = case_out(&c, "din", (size_t)T * K * 4, with_din == 2 ? din0 : NULL, 0);
	if (scratch)
		a.scratch = case_scratch(&c, (size_t)T * K * 4);
	case_run(&c, lora_bwd_gpu, &a);
	check(&c, "du", ref_du, (size_t)T * R, 0, 5e-5, 1e-4);
	check(&c, "dB", ref_dB, (size_t)N * R, 0, 5e-5, 1e-4);
	check(&c, "dA", ref_dA, (size_t)R * K, 0, 5e-5, 1e-4);
	if (with_din)
		check(&c, "din", ref_din, (size_t)T * K, 0, 5e-5, 1e-4);
	case_end(&c);
	free(in);
	free(A);
	free(B);
	free(dout);
	free(dA0);
	free(dB0);
	free(din0);
	free(u);
	free(scratch_out);
	free(ref_dA);
	free(ref_dB);
	free(ref_din);
	free(ref_du);
}

/* --- the LoRA extension --------------------------------------------------- */


struct ext_args {
	bf16 *x, *W, *dout;
	float *u, *out, *du, *dA, *dB, *din, *scratch;
	const float *u_in, *A, *B;
	const bf16 *bias;
	float scale, p;
	int T, K, N, R, E;
};

/* The engine's forward of one projection with the extension: the weight
 * side, u's parts into x's spare columns (u's GEMM reading A's parts from
 * the weight's rows N..N+3R-1, as the engine has it), one GEMM over K + E. */
static void ext_fwd_gpu(const void *p)
{
	const struct ext_args *a = p;
	int ld = a->K + a->E;
	gpu->ops->lora_weight_ext(a->W, ld, a->A, a->B, a->bias, a->scale, a->K, a->N, a->R);
	gpu->ops->lora_forward(&(struct lora_fwd_args){ .u = a->u, .ext = a->x + a->K, .scratch = a->scratch,
		.in = a->x, .ld_in = ld, .A = a->A, .A3 = a->W + (size_t)a->N * ld, .ld_a3 = ld, .B = a->B,
		.scale = a->scale, .dropout_p = a->p, .dropout_seed = 77, .T = a->T, .K = a->K, .N = a->N,
		.R = a->R });
	gpu->ops->matmul_forward(a->out, a->x, ld, a->W, ld, NULL, a->T, ld, a->N, 0);
}

/* ... and its backward (no dropout): du's parts into dout's spare
 * columns (du's GEMM reading scale*B's parts from the weight's columns
 * K..K+3R-1), one GEMM over N + E (the weight's extension rows). */
static void ext_bwd_gpu(const void *p)
{
	const struct ext_args *a = p;
	int ldw = a->K + a->E, ldd = a->N + a->E;
	gpu->ops->lora_weight_ext(a->W, ldw, a->A, a->B, a->bias, a->scale, a->K, a->N, a->R);
	gpu->ops->lora_backward(&(struct lora_bwd_args){ .dA = a->dA, .dB = a->dB, .du = a->du, .ext = a->dout + a->N,
		.scratch = a->scratch, .dout = a->dout, .ld_dout = ldd, .in = a->x, .ld_in = ldw, .u = a->u_in,
		.A = a->A, .B = a->B, .B3 = a->W + a->K, .ld_b3 = ldw, .scale = a->scale, .dropout_p = 0.0f,
		.dropout_seed = 0, .T = a->T, .K = a->K, .N = a->N, .R = a->R });
	gpu->ops->matmul_backward_input(a->din, a->dout, ldd, a->W, ldw, a->T, a->K, ldd, 0);
}

/* The extension on the GPU against the same three ops on the CPU.  The
 * weight side is one rounding per element on both (bitwise equal, the
 * unused corner untouched); u, du, dA, dB are the lora ops' sums; out and
 * din are GEMMs over K + E (N + E) exact products: GEMM tolerances.  A
 * trained B (not PEFT's zeros), a bias, and a scale that rounds. */
static void test_lora_ext(int T, int K, int N, int R, float p, int backward, int scratch)
{
	struct gpu_case c;
	if (!case_begin(&c, "lora_ext %s T=%d K=%d N=%d R=%d dropout=%g%s", backward ? "backward" : "forward", T, K, N,
	                R, p, scratch ? " scratch" : ""))
		return;
	int E = lora_ext_cols(R), ldx = K + E, ldd = N + E;
	float bound = 1.0f / sqrtf((float)K), scale = 0.75f;
	float *A = rand_f32((size_t)R * K, -bound, bound), *B = rand_f32((size_t)N * R, -0.5f, 0.5f);
	bf16 *bias = rand_bf16((size_t)N, -1, 1);
	bf16 *x = rand_bf16((size_t)T * ldx, -1, 1);                /* spare columns: garbage the op overwrites */
	bf16 *W = rand_bf16((size_t)(N + E) * ldx, -0.05f, 0.05f);   /* the corner too, which must survive */
	bf16 *dout = rand_bf16((size_t)T * ldd, -1, 1);
	float *u = xmalloc((size_t)T * R * 4), *out = xmalloc((size_t)T * N * 4), *du = xmalloc((size_t)T * R * 4);
	float *dA = xmalloc((size_t)R * K * 4), *dB = xmalloc((size_t)N * R * 4), *din = xmalloc((size_t)T * K * 4);
	bf16 *refW = dup_bytes(W, (size_t)(N + E) * ldx * 2), *refx = dup_bytes(x, (size_t)T * ldx * 2);
	bf16 *refd = dup_bytes(dout, (size_t)T * ldd * 2);
	memset(dA, 0, (size_t)R * K * 4);
	memset(dB, 0, (size_t)N * R * 4);
	float *zA = dup_bytes(dA, (size_t)R * K * 4), *zB = dup_bytes(dB, (size_t)N * R * 4);
	double t0 = now_ms();
	lora_weight_ext_cpu(refW, ldx, A, B, bias, scale, K, N, R);
	lora_forward_cpu(&(struct lora_fwd_args){ .u = u, .ext = refx + K, .in = refx, .ld_in = ldx, .A = A, .B = B,
		.scale = scale, .dropout_p = p, .dropout_seed = 77, .T = T, .K = K, .N = N, .R = R });
	if (!backward) {
		matmul_forward_cpu(out, refx, ldx, refW, ldx, NULL, T, ldx, N, 0);
	} else {
		lora_backward_cpu(&(struct lora_bwd_args){ .dA = dA, .dB = dB, .du = du, .ext = refd + N,
			.dout = refd, .ld_dout = ldd, .in = refx, .ld_in = ldx, .u = u, .A = A, .B = B,
			.scale = scale, .dropout_p = 0.0f, .dropout_seed = 0, .T = T, .K = K, .N = N, .R = R });
		matmul_backward_input_cpu(din, refd, ldd, refW, ldx, T, K, ldd, 0);
	}
	c.cpu_ms = now_ms() - t0;

	struct ext_args a = { 0 };
	a.A = dev_from(A, (size_t)R * K * 4, 0);
	a.B = dev_from(B, (size_t)N * R * 4, 0);
	a.bias = dev_from(bias, (size_t)N * 2, 0);
	a.scale = scale;
	a.p = p;
	a.T = T, a.K = K, a.N = N, a.R = R, a.E = E;
	a.W = case_out(&c, "W", (size_t)(N + E) * ldx * 2, W, 0);
	if (scratch)
		a.scratch = case_scratch(&c, (size_t)T * K * 4);
	if (!backward) {
		a.x = case_out(&c, "x", (size_t)T * ldx * 2, x, 0);
		a.u = case_out(&c, "u", (size_t)T * R * 4, NULL, 0);
		a.out = case_out(&c, "out", (size_t)T * N * 4, NULL, 0);
		case_run(&c, ext_fwd_gpu, &a);
		check(&c, "u", u, (size_t)T * R, 0, GEMM_A_REL, GEMM_RTOL);
		check(&c, "out", out, (size_t)T * N, 0, GEMM_A_REL, GEMM_RTOL);
		check_exact_rows(&c, "x", refx, T, K, ldx, 2); /* the input itself untouched */
		check_exact_cols(&c, "x", refx, T, K + 9 * R, E - 9 * R, ldx, 2); /* the row tails: 1, zeros */
	} else {
		/* the backward reads u as the CPU forward left it, and x with the
		 * CPU's extension parts in its spare columns (never read there) */
		a.x = (bf16 *)dev_from(refx, (size_t)T * ldx * 2, 0);
		a.u_in = dev_from(u, (size_t)T * R * 4, 0);
		a.dout = case_out(&c, "dout", (size_t)T * ldd * 2, dout, 0);
		a.du = case_out(&c, "du", (size_t)T * R * 4, NULL, 0);
		a.dA = case_out(&c, "dA", (size_t)R * K * 4, zA, 0); /* accumulated from 0, as on the CPU */
		a.dB = case_out(&c, "dB", (size_t)N * R * 4, zB, 0);
		a.din = case_out(&c, "din", (size_t)T * K * 4, NULL, 0);
		case_run(&c, ext_bwd_gpu, &a);
		check(&c, "du", du, (size_t)T * R, 0, 5e-5, 1e-4);
		check(&c, "dA", dA, (size_t)R * K, 0, 5e-5, 1e-4);
		check(&c, "dB", dB, (size_t)N * R, 0, 5e-5, 1e-4);
		check(&c, "din", din, (size_t)T * K, 0, GEMM_A_REL, 1e-4);
		check_exact_rows(&c, "dout", refd, T, N, ldd, 2);
		check_exact_cols(&c, "dout", refd, T, N + 9 * R, E - 9 * R, ldd, 2); /* zeros: no ones column */
	}
	check_exact(&c, "W", refW, (size_t)(N + E) * ldx * 2, 2);
	case_end(&c);
	free(A), free(B), free(bias), free(x), free(W), free(dout), free(u), free(out), free(du), free(dA), free(dB);
	free(din), free(refW), free(refx), free(refd), free(zA), free(zB);
}

/* --- rope ---------------------------------------------------------------- */

struct rope_args {
	float *x;
	const float *cos, *sin;
	const int32_t *pos;
	int B, S, nh, D;
};

/* pos (T) for rows packed with `docs` documents (0: NULL, plain t % S):
 * document k of a row starts at k*S/docs + 3 (k > 0), so the boundaries
 * fall inside key tiles; returns NULL for docs == 0. */
static int32_t *doc_positions(int B, int S, int docs)
{
	if (docs <= 0)
		return NULL;
	int32_t *pos = xmalloc((size_t)B * S * sizeof *pos);
	for (int b = 0; b < B; b++) {
		int start = 0;
		for (int i = 0; i < S; i++) {
			for (int k = 1; k < docs; k++)
				if (i == (int)((long)k * S / docs) + 3 && i < S)
					start = i;
			pos[(size_t)b * S + i] = i - start;
		}
	}
	return pos;
}

static void rope_fwd_gpu(const void *p)
{
	const struct rope_args *a = p;
	gpu->ops->rope_forward(a->x, a->cos, a->sin, a->pos, a->B, a->S, a->nh, a->D);
}

static void rope_bwd_gpu(const void *p)
{
	const struct rope_args *a = p;
	gpu->ops->rope_backward(a->x, a->cos, a->sin, a->pos, a->B, a->S, a->nh, a->D);
}

/* One rotation per pair: x1 c - x2 s.  The GPU fuses one product into the
 * subtraction, the CPU rounds both: they differ by at most ~2 ulps of the
 * larger product, so 1e-6 of max|x| (about 16 ulps) plus 1e-6 relative. */
static void test_rope(int B, int S, int nh, int D, int backward, int docs)
{
	struct gpu_case c;
	if (!case_begin(&c, "rope_%s B=%d S=%d nh=%d D=%d docs=%d", backward ? "backward" : "forward", B, S, nh, D,
	                docs))
		return;
	int32_t *pos = doc_positions(B, S, docs);
	size_t n = (size_t)B * S * nh * D, half = (size_t)D / 2;
	float *x0 = rand_f32(n, -2, 2);
	float *cs = xmalloc((size_t)S * half * 4), *sn = xmalloc((size_t)S * half * 4);
	for (int s = 0; s < S; s++) {
		for (size_t i = 0; i < half; i++) { /* HF's table: pos * theta^(-2i/D) */
			float f = (float)s * (float)(1.0 / pow(10000.0, 2.0 * (double)i / D));
			cs[s * half + i] = cosf(f);
			sn[s * half + i] = sinf(f);
		}
	}
	float *ref = dup_bytes(x0, n * 4);
	double t0 = now_ms();
	if (backward)
		rope_backward_cpu(ref, cs, sn, pos, B, S, nh, D);
	else
		rope_forward_cpu(ref, cs, sn, pos, B, S, nh, D);
	c.cpu_ms = now_ms() - t0;

	struct rope_args a = { NULL, dev_from(cs, (size_t)S * half * 4, 0), dev_from(sn, (size_t)S * half * 4, 0),
	                       pos ? dev_from(pos, (size_t)B * S * 4, 0) : NULL, B, S, nh, D };
	a.x = case_out(&c, "x", n * 4, x0, 0);
	case_run(&c, backward ? rope_bwd_gpu : rope_fwd_gpu, &a);
	check(&c, "x", ref, n, 0, 1e-6, 1e-6);
	case_end(&c);
	free(x0);
	free(cs);
	free(sn);
	free(ref);
	free(pos);
}

/* --- attention ----------------------------------------------------------- */

struct attention_args {
	bf16 *out;
	float *lse, *scratch, *dq, *dk, *dv;
	const float *q, *k, *v, *dout, *lse_in;
	const int32_t *pos;
	int B, S, H, G, D, ld_out;
};

static void attention_fwd_gpu(const void *p)
{
	const struct attention_args *a = p;
	gpu->ops->attention_forward(a->out, a->ld_out, a->lse, a->scratch, a->q, a->k, a->v, a->pos, a->B, a->S, a->H,
	                            a->G, a->D);
}

static void attention_bwd_gpu(const void *p)
{
	const struct attention_args *a = p;
	gpu->ops->attention_backward(a->dq, a->dk, a->dv, a->scratch, a->dout, a->q, a->k, a->v, a->lse_in, a->pos,
	                             a->B, a->S, a->H, a->G, a->D);
}

/* Both sides run the same online softmax over the same key tiles of 64
 * and round q, k, v and each tile's p to bf16 at the same places (ops.h),
 * so they differ by the order of fp32 sums: the scores are D-term dots of
 * exact bf16 products (tensor cores vs sequential), the row sums and the
 * p v sums split differently over threads; all near 1e-7 of the largest
 * output.  But an fp32 p that sits near a bf16 rounding boundary can round
 * to neighbouring bf16 values on the two sides: one ulp of p_j (<= 2^-8
 * p_j) times v_j moves the row's output by up to 2^-8 P_j max|v|, and
 * max|out| ~ max|v| (row 0's out is v_0).  Such flips are rare and hit
 * large P (short rows) more rarely still; the cuBLAS path before needed at
 * most 4e-4 of max|out| in a CPU emulation, while a CPU that skipped the
 * contract's roundings needs 1.4e-3 and more: 1e-3 absolute, and bf16 out
 * adds one ulp (rtol).  lse = m + log(l) sees no bf16 rounding after the
 * products and is good to a few ulps of its terms (|lse| <= ~8 here, ulp
 * 5e-7), and can cancel to near zero: 2e-6 of max|lse| absolute, 1e-5
 * relative.  ld_out > H*D: out pitched, the pads kept.  docs > 0: rows
 * packed with documents (doc_positions), the same pos on both sides. */
static void test_attention_forward(int B, int S, int H, int G, int D, int ld_out, int docs)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_forward B=%d S=%d H=%d G=%d D=%d ld_out=%d docs=%d", B, S, H, G, D, ld_out,
	                docs))
		return;
	int32_t *pos = doc_positions(B, S, docs);
	size_t T = (size_t)B * S, HD = (size_t)H * D;
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	size_t sf = attention_scratch_floats(B, S, H, G, D);
	float *scratch = xmalloc(sf * 4), *ref_lse = xmalloc((size_t)B * H * S * 4);
	bf16 *init = pitched_out_init(T, HD, (size_t)ld_out, 2);
	bf16 *ref = dup_bytes(init, T * ld_out * 2);
	double t0 = now_ms();
	attention_forward_cpu(ref, ld_out, ref_lse, scratch, q, k, v, pos, B, S, H, G, D);
	c.cpu_ms = now_ms() - t0;

	struct attention_args a = { 0 };
	a.pos = pos ? dev_from(pos, T * 4, 0) : NULL;
	a.q = dev_from(q, T * H * D * 4, 0);
	a.k = dev_from(k, T * G * D * 4, 0);
	a.v = dev_from(v, T * G * D * 4, 0);
	a.B = B, a.S = S, a.H = H, a.G = G, a.D = D, a.ld_out = ld_out;
	a.out = case_out(&c, "out", T * ld_out * 2, init, 0);
	a.lse = case_out(&c, "lse", (size_t)B * H * S * 4, NULL, 0);
	a.scratch = case_scratch(&c, sf * 4);
	case_run(&c, attention_fwd_gpu, &a);
	check_rows(&c, "out", ref, T, HD, (size_t)ld_out, 1, 1e-3, BF16_RTOL);
	check_pads(&c, "out", ref, T, HD, (size_t)ld_out, 2);
	check(&c, "lse", ref_lse, (size_t)B * H * S, 0, 2e-6, 1e-5);
	case_end(&c);
	free(q);
	free(k);
	free(v);
	free(scratch);
	free(ref_lse);
	free(init);
	free(ref);
	free(pos);
}

/* A chain of fp32 sums in different orders: P rebuilt from lse, dP (D
 * terms), delta (S terms), dq (S terms), dk and dv (S terms times the
 * group's heads); each stage adds ~1e-6 relative of its scale.  On top,
 * the bf16 roundings of P (for dv) and dS (for dq, dk) can flip by one ulp
 * between the sides, as in the forward: one flipped dS_ij moves dq_i by up
 * to scale 2^-8 |dS_ij| |k_j|, a flipped P_ij moves dv_j by 2^-8 P_ij
 * |dout_i|.  The CPU emulation of the GPU path needed at most 3.9e-4 (dq),
 * 2.9e-4 (dk), 5.5e-5 (dv) of the largest value over 30 draws; a CPU that
 * skipped the contract's roundings needs 2.6e-3 (dq, dk), 1.4e-3 (dv) and
 * more: 1e-3, 1e-3, 5e-4 of the largest value, 1e-4 relative. */
static void test_attention_backward(int B, int S, int H, int G, int D, int docs)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_backward B=%d S=%d H=%d G=%d D=%d docs=%d", B, S, H, G, D, docs))
		return;
	int32_t *pos = doc_positions(B, S, docs);
	size_t T = (size_t)B * S;
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1);
	size_t sf = attention_scratch_floats(B, S, H, G, D);
	float *scratch = xmalloc(sf * 4), *lse = xmalloc((size_t)B * H * S * 4);
	bf16 *out = xmalloc(T * H * D * 2);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, pos, B, S, H, G, D);
	float *ref_dq = xmalloc(T * H * D * 4), *ref_dk = xmalloc(T * G * D * 4), *ref_dv = xmalloc(T * G * D * 4);
	double t0 = now_ms();
	attention_backward_cpu(ref_dq, ref_dk, ref_dv, scratch, dout, q, k, v, lse, pos, B, S, H, G, D);
	c.cpu_ms = now_ms() - t0;

	struct attention_args a = { 0 };
	a.pos = pos ? dev_from(pos, T * 4, 0) : NULL;
	a.q = dev_from(q, T * H * D * 4, 0);
	a.k = dev_from(k, T * G * D * 4, 0);
	a.v = dev_from(v, T * G * D * 4, 0);
	a.dout = dev_from(dout, T * H * D * 4, 0);
	a.lse_in = dev_from(lse, (size_t)B * H * S * 4, 0);
	a.B = B, a.S = S, a.H = H, a.G = G, a.D = D;
	a.dq = case_out(&c, "dq", T * H * D * 4, NULL, 0);
	a.dk = case_out(&c, "dk", T * G * D * 4, NULL, 0);
	a.dv = case_out(&c, "dv", T * G * D * 4, NULL, 0);
	a.scratch = case_scratch(&c, sf * 4);
	case_run(&c, attention_bwd_gpu, &a);
	check(&c, "dq", ref_dq, T * H * D, 0, 1e-3, 1e-4);
	check(&c, "dk", ref_dk, T * G * D, 0, 1e-3, 1e-4);
	check(&c, "dv", ref_dv, T * G * D, 0, 5e-4, 1e-4);
	case_end(&c);
	free(q);
	free(k);
	free(v);
	free(dout);
	free(scratch);
	free(lse);
	free(out);
	free(ref_dq);
	free(ref_dk);
	free(ref_dv);
	free(pos);
}

/* --- swiglu -------------------------------------------------------------- */

struct swiglu_args {
	bf16 *out, *dgate, *dup;
	const float *gate, *up, *dout;
	int T, F, ld; /* ld: rows of out, or of dgate and dup */
};

static void swiglu_fwd_gpu(const void *p)
{
	const struct swiglu_args *a = p;
	gpu->ops->swiglu_forward(a->out, a->ld, a->gate, a->up, a->T, a->F);
}

static void swiglu_bwd_gpu(const void *p)
{
	const struct swiglu_args *a = p;
	gpu->ops->swiglu_backward(a->dgate, a->dup, a->ld, a->dout, a->gate, a->up, a->T, a->F);
}

/* The same formula on both sides; CUDA's expf is within 2 ulps, glibc's
 * within 1, so values differ by a few fp32 ulps (1e-6 of max plus 1e-5
 * relative covers the cancellation in 1 + g(1 - sig)), and bf16 outputs by
 * one bf16 ulp.  `offset` shifts every pointer by 4 bytes (the unaligned
 * path); ld > F: the bf16 outputs pitched, the pads kept. */
static void test_swiglu(int T, int F, int ld, int offset, int backward)
{
	struct gpu_case c;
	if (!case_begin(&c, "swiglu_%s T=%d F=%d ld=%d%s", backward ? "backward" : "forward", T, F, ld,
	                offset ? " unaligned" : ""))
		return;
	size_t off = offset ? 4 : 0, n = (size_t)T * F, n_out = (size_t)T * ld;
	float *gate = rand_f32(n, -6, 6), *up = rand_f32(n, -2, 2), *dout = rand_f32(n, -1, 1);
	bf16 *init = pitched_out_init((size_t)T, (size_t)F, (size_t)ld, 2);
	bf16 *ref = dup_bytes(init, n_out * 2), *ref_dg = dup_bytes(init, n_out * 2);
	bf16 *ref_du = dup_bytes(init, n_out * 2);
	double t0 = now_ms();
	if (backward)
		swiglu_backward_cpu(ref_dg, ref_du, ld, dout, gate, up, T, F);
	else
		swiglu_forward_cpu(ref, ld, gate, up, T, F);
	c.cpu_ms = now_ms() - t0;

	struct swiglu_args a = { 0 };
	a.gate = dev_from(gate, n * 4, off);
	a.up = dev_from(up, n * 4, off);
	a.dout = dev_from(dout, n * 4, off);
	a.T = T, a.F = F, a.ld = ld;
	if (backward) {
		a.dgate = case_out(&c, "dgate", n_out * 2, init, off / 2);
		a.dup = case_out(&c, "dup", n_out * 2, init, off / 2);
	} else {
		a.out = case_out(&c, "out", n_out * 2, init, off / 2);
	}
	case_run(&c, backward ? swiglu_bwd_gpu : swiglu_fwd_gpu, &a);
	if (backward) {
		check_rows(&c, "dgate", ref_dg, (size_t)T, (size_t)F, (size_t)ld, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "dgate", ref_dg, (size_t)T, (size_t)F, (size_t)ld, 2);
		check_rows(&c, "dup", ref_du, (size_t)T, (size_t)F, (size_t)ld, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "dup", ref_du, (size_t)T, (size_t)F, (size_t)ld, 2);
	} else {
		check_rows(&c, "out", ref, (size_t)T, (size_t)F, (size_t)ld, 1, 1e-6, BF16_RTOL);
		check_pads(&c, "out", ref, (size_t)T, (size_t)F, (size_t)ld, 2);
	}
	case_end(&c);
	free(gate);
	free(up);
	free(dout);
	free(init);
	free(ref);
	free(ref_dg);
	free(ref_du);
}

/* --- cross-entropy ------------------------------------------------------- */

struct ce_args {
	bf16 *dlogits;
	float *losses;
	const float *logits;
	const int32_t *targets;
	float dloss;
	int T, V;
};

static void ce_gpu(const void *p)
{
	const struct ce_args *a = p;
	gpu->ops->crossentropy_forward_backward(a->dlogits, a->losses, a->logits, a->targets, a->dloss, a->T, a->V);
}

/* The CPU sums the row's exponentials in double, the GPU in fp32 (online,
 * then a tree): the sum agrees to ~1e-6 relative, so the loss (a log of
 * it, plus max - x[y]) to ~1e-6 absolute, whatever its size: a row whose
 * target holds nearly all the mass has a loss near 0 made of two terms
 * of order 10 that cancel, so the bound is 1e-6 of the largest loss
 * plus 1e-5 relative (a loss of 6.6e-4 came out 8.9e-8 apart, 1.4e-4
 * relative).  dlogits are
 * (p - onehot) * dloss in bf16: one bf16 ulp relative, and an absolute
 * floor far below the smallest probabilities (~1e-7 * dloss here), so a
 * wrong small p cannot hide under it.  Every ignore_every-th row is
 * ignored (target -1); target_past_end puts one target at V (NaN loss). */
static void test_crossentropy(int T, int V, int ignore_every, int target_past_end)
{
	struct gpu_case c;
	if (!case_begin(&c, "crossentropy_forward_backward T=%d V=%d", T, V))
		return;
	size_t n = (size_t)T * V;
	float *logits = rand_f32(n, -8, 8);
	int32_t *targets = xmalloc((size_t)T * 4);
	for (int t = 0; t < T; t++)
		targets[t] = ignore_every && t % ignore_every == 1 ? -1 : (int32_t)(rand_unit() * V);
	if (target_past_end)
		targets[T - 1] = V;
	float dloss = 1.0f / (float)T;
	bf16 *ref = xmalloc(n * 2);
	float *ref_loss = xmalloc((size_t)T * 4);
	double t0 = now_ms();
	crossentropy_forward_backward_cpu(ref, ref_loss, logits, targets, dloss, T, V);
	c.cpu_ms = now_ms() - t0;

	struct ce_args a = { NULL, NULL, dev_from(logits, n * 4, 0), dev_from(targets, (size_t)T * 4, 0), dloss, T, V };
	a.dlogits = case_out(&c, "dlogits", n * 2, NULL, 0);
	a.losses = case_out(&c, "losses", (size_t)T * 4, NULL, 0);
	case_run(&c, ce_gpu, &a);
	check(&c, "losses", ref_loss, (size_t)T, 0, 1e-6, 1e-5);
	check(&c, "dlogits", ref, n, 1, 1e-9, BF16_RTOL);
	case_end(&c);
	free(logits);
	free(targets);
	free(ref);
	free(ref_loss);
}

/* --- add_inplace, cast, nf4: exact ops ----------------------------------- */

struct elementwise_args {
	void *out;
	const void *in, *aux;
	long n;            /* add_inplace */
	long rows;         /* cast, nf4: out (rows,cols), rows ld apart */
	int cols, ld;
};

static void add_gpu(const void *p)
{
	const struct elementwise_args *a = p;
	gpu->ops->add_inplace(a->out, a->in, a->n);
}

static void cast_gpu(const void *p)
{
	const struct elementwise_args *a = p;
	gpu->ops->cast_f32_to_bf16(a->out, a->ld, a->in, a->rows, a->cols);
}

static void nf4_gpu(const void *p)
{
	const struct elementwise_args *a = p;
	gpu->ops->nf4_dequantize(a->out, a->ld, a->in, a->aux, a->rows, a->cols);
}

/* One fp32 add per element on both sides: bitwise equal. */
static void test_add_inplace(long n, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "add_inplace n=%ld%s", n, offset ? " unaligned" : ""))
		return;
	size_t off = offset ? 4 : 0;
	float *a0 = rand_f32((size_t)n, -1, 1), *b = rand_f32((size_t)n, -1, 1);
	float *ref = dup_bytes(a0, (size_t)n * 4);
	double t0 = now_ms();
	add_inplace_cpu(ref, b, n);
	c.cpu_ms = now_ms() - t0;
	struct elementwise_args a = { NULL, dev_from(b, (size_t)n * 4, off), NULL, n, 0, 0, 0 };
	a.out = case_out(&c, "a", (size_t)n * 4, a0, off);
	case_run(&c, add_gpu, &a);
	check_exact(&c, "a", ref, (size_t)n * 4, 4);
	case_end(&c);
	free(a0);
	free(b);
	free(ref);
}

/* The same rounding recipe on both sides: bitwise equal, including NaN,
 * infinities, signed zeros, ties, subnormals and overflow to infinity.
 * ld > cols: out pitched, the pads kept. */
static void test_cast(long rows, int cols, int ld, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "cast_f32_to_bf16 rows=%ld cols=%d ld=%d%s", rows, cols, ld, offset ? " unaligned" : ""))
		return;
	size_t off = offset ? 4 : 0, n = (size_t)rows * cols, n_out = (size_t)rows * ld;
	float *in = rand_f32(n, -1000, 1000);
	static const uint32_t special[] = {
		0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,
		0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f807fffu, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
		0xff7fffffu, 0x7f7f8000u,
	};
	size_t ns = sizeof special / sizeof special[0];
	for (size_t i = 0; i < ns && i < n; i++)
		memcpy(&in[i], &special[i], 4);
	bf16 *init = pitched_out_init((size_t)rows, (size_t)cols, (size_t)ld, 2);
	bf16 *ref = dup_bytes(init, n_out * 2);
	double t0 = now_ms();
	cast_f32_to_bf16_cpu(ref, ld, in, rows, cols);
	c.cpu_ms = now_ms() - t0;
	struct elementwise_args a = { NULL, dev_from(in, n * 4, off), NULL, 0, rows, cols, ld };
	a.out = case_out(&c, "out", n_out * 2, init, off / 2);
	case_run(&c, cast_gpu, &a);
	check_exact_rows(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	check_pads(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	case_end(&c);
	free(in);
	free(init);
	free(ref);
}

/* code * absmax is one fp32 multiply on both sides, then the same rounding:
 * bitwise equal.  offset: the packed bytes 1 byte and the output 2 bytes
 * off alignment (the byte-wise kernel); ld > cols: out pitched (a weight
 * buffer with room for the LoRA extension), the pads kept; ld % 8 != 0
 * takes the byte-wise kernel too. */
static void test_nf4(long rows, int cols, int ld, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "nf4_dequantize rows=%ld cols=%d ld=%d%s", rows, cols, ld, offset ? " unaligned" : ""))
		return;
	size_t n = (size_t)rows * cols, n_out = (size_t)rows * ld;
	uint8_t *packed = xmalloc(n / 2);
	for (size_t i = 0; i < n / 2; i++)
		packed[i] = (uint8_t)(poros_mix64(rng_counter++) & 0xff);
	float *absmax = rand_f32(n / POROS_NF4_BLOCK, 0.001f, 2.0f);
	bf16 *init = pitched_out_init((size_t)rows, (size_t)cols, (size_t)ld, 2);
	bf16 *ref = dup_bytes(init, n_out * 2);
	double t0 = now_ms();
	nf4_dequantize_cpu(ref, ld, packed, absmax, rows, cols);
	c.cpu_ms = now_ms() - t0;
	struct elementwise_args a = { NULL, dev_from(packed, n / 2, offset ? 1 : 0),
	                              dev_from(absmax, n / POROS_NF4_BLOCK * 4, 0), 0, rows, cols, ld };
	a.out = case_out(&c, "out", n_out * 2, init, offset ? 2 : 0);
	case_run(&c, nf4_gpu, &a);
	check_exact_rows(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	check_pads(&c, "out", ref, (size_t)rows, (size_t)cols, (size_t)ld, 2);
	printf("    %.0f GB/s\n", (double)n * 2.5 / (c.gpu_ms * 1e-3) / 1e9);
	case_end(&c);
	free(packed);
	free(absmax);
	free(init);
	free(ref);
}

/* --- sumsq --------------------------------------------------------------- */

struct sumsq_args {
	float *out, *scratch;
	const float *x;
	long n;
};

static void sumsq_gpu(const void *p)
{
	const struct sumsq_args *a = p;
	gpu->ops->sumsq(a->out, a->scratch, a->x, a->n);
}

/* The CPU sums in double; the GPU in fp32, at most ~8 terms per thread
 * plus two trees of 8 and 10 levels: relative error well under 1e-5. */
static void test_sumsq(long n, int offset)
{
	struct gpu_case c;
	if (!case_begin(&c, "sumsq n=%ld%s", n, offset ? " unaligned" : ""))
		return;
	float *x = rand_f32((size_t)n, -1, 1);
	float ref;
	double t0 = now_ms();
	sumsq_cpu(&ref, NULL, x, n);
	c.cpu_ms = now_ms() - t0;
	struct sumsq_args a = { NULL, NULL, dev_from(x, (size_t)n * 4, offset ? 4 : 0), n };
	a.out = case_out(&c, "out", 4, NULL, 0);
	a.scratch = case_scratch(&c, sumsq_scratch_floats(n) * 4);
	case_run(&c, sumsq_gpu, &a);
	check(&c, "out", &ref, 1, 0, 0, 1e-5);
	case_end(&c);
	free(x);
}

/* --- adamw --------------------------------------------------------------- */

struct adamw_args {
	float *param, *m, *v;
	const float *grad;
	long n;
	float lr, wd, grad_scale;
	int t;
};

static void adamw_gpu(const void *p)
{
	const struct adamw_args *a = p;
	gpu->ops->adamw_update(a->param, a->grad, a->m, a->v, a->n, a->lr, 0.9f, 0.999f, 1e-8f, a->wd, a->grad_scale,
	                       a->t);
}

/* The same operation order and host-side constants; the GPU may fuse a
 * multiply-add the CPU rounds twice, so m, v and param differ by a few
 * ulps: 1e-6 of the largest value plus 1e-5 relative. */
static void test_adamw(long n, int t, float wd, float grad_scale)
{
	struct gpu_case c;
	if (!case_begin(&c, "adamw_update n=%ld t=%d wd=%g grad_scale=%g", n, t, wd, grad_scale))
		return;
	float *param0 = rand_f32((size_t)n, -1, 1), *grad = rand_f32((size_t)n, -1, 1);
	float *m0 = rand_f32((size_t)n, -0.1f, 0.1f), *v0 = rand_f32((size_t)n, 0, 0.01f);
	if (t == 1) { /* the first step starts from zero moments */
		memset(m0, 0, (size_t)n * 4);
		memset(v0, 0, (size_t)n * 4);
	}
	float *ref_p = dup_bytes(param0, (size_t)n * 4), *ref_m = dup_bytes(m0, (size_t)n * 4);
	float *ref_v = dup_bytes(v0, (size_t)n * 4);
	float lr = 2e-4f;
	double t0 = now_ms();
	adamw_update_cpu(ref_p, grad, ref_m, ref_v, n, lr, 0.9f, 0.999f, 1e-8f, wd, grad_scale, t);
	c.cpu_ms = now_ms() - t0;
	struct adamw_args a = { NULL, NULL, NULL, dev_from(grad, (size_t)n * 4, 0), n, lr, wd, grad_scale, t };
	a.param = case_out(&c, "param", (size_t)n * 4, param0, 0);
	a.m = case_out(&c, "m", (size_t)n * 4, m0, 0);
	a.v = case_out(&c, "v", (size_t)n * 4, v0, 0);
	case_run(&c, adamw_gpu, &a);
	check(&c, "param", ref_p, (size_t)n, 0, 1e-6, 1e-5);
	check(&c, "m", ref_m, (size_t)n, 0, 1e-6, 1e-5);
	check(&c, "v", ref_v, (size_t)n, 0, 1e-6, 1e-5);
	case_end(&c);
	free(param0);
	free(grad);
	free(m0);
	free(v0);
	free(ref_p);
	free(ref_m);
	free(ref_v);
}

/* --- main ---------------------------------------------------------------- */

/* Odd small shapes: scalar, unaligned and fallback paths; quick enough for
 * compute-sanitizer. */
static void run_small(void)
{
	test_embedding(7, 67, 11);
	test_rmsnorm_forward(3, 33, 33, 0, 1);
	/* pitched: odd ld (scalar rows), ld % 4 == 0 (vector rows), C % 4 == 0
	 * but ld % 4 != 0 (scalar) */
	test_rmsnorm_forward(3, 33, 37, 1, 1);
	test_rmsnorm_forward(4, 64, 72, 1, 1);
	test_rmsnorm_forward(4, 64, 66, 1, 1);
	test_rmsnorm_forward(4, 64, 72, 0, 1);
	test_rmsnorm_backward(3, 33);
	test_matmul_forward(5, 19, 7, 19, 19, 1, 0);
	test_matmul_forward(5, 19, 7, 19, 19, 1, 1);
	test_matmul_backward_input(5, 19, 7, 7, 19, 1);
	/* pitched operands with NaN pads: odd pitches, then 16-byte ones */
	test_matmul_forward(5, 19, 7, 23, 21, 1, 1);
	test_matmul_forward(6, 40, 9, 48, 56, 0, 0);
	test_matmul_backward_input(5, 19, 7, 9, 23, 1);
	test_matmul_backward_input(6, 40, 24, 32, 48, 0);
	for (int scratch = 0; scratch <= 1; scratch++) {
		test_lora_forward(5, 33, 7, 3, 0.5f, scratch);
		test_lora_backward(5, 33, 7, 3, 0.5f, 1, scratch);
		test_lora_backward(19, 300, 5, 20, 0.25f, 2, scratch); /* two rank tiles, partial K passes */
		/* small enough for the sanitizer, large enough that the scratch holds
		 * the tensor-core path's parts (with the dropout mask) */
		test_lora_forward(40, 64, 24, 4, 0.3f, scratch);
		test_lora_backward(40, 64, 24, 4, 0.3f, 2, scratch);
		/* N >> K: dB's tensor-core parts do not fit the T*K scratch, so dB
		 * takes the CUDA-core sums in three token slices */
		test_lora_backward(512, 16, 600, 4, 0.1f, 1, scratch);
		test_lora_forward(64, 300, 70, 40, 0.1f, scratch); /* rank 40: three rank tiles of u */
		/* the extension: CUDA-core u/du (small) and tensor-core ones whose
		 * join writes the parts */
		test_lora_ext(5, 64, 7, 3, 0.5f, 0, scratch);
		test_lora_ext(5, 64, 7, 3, 0.0f, 1, scratch);
		test_lora_ext(40, 128, 24, 4, 0.3f, 0, scratch);
		test_lora_ext(40, 128, 24, 4, 0.0f, 1, scratch);
	}
	test_rope(2, 3, 3, 6, 0, 0);
	test_rope(2, 3, 3, 6, 1, 0);
	test_rope(2, 40, 3, 8, 0, 3); /* document positions */
	test_rope(2, 40, 3, 8, 1, 3);
	/* attention: D < 64 takes the 64-wide kernels with zero columns, S not
	 * a multiple of the tiles leaves partial tiles of rows and keys */
	test_attention_forward(3, 5, 6, 3, 8, 48, 0);
	test_attention_forward(2, 7, 4, 2, 16, 64, 0);
	test_attention_forward(1, 33, 2, 2, 64, 128, 0); /* MHA: dk, dv straight from the kernel */
	test_attention_forward(3, 5, 6, 3, 8, 53, 0);    /* pitched out, odd ld */
	test_attention_forward(2, 7, 4, 2, 16, 72, 0);   /* pitched out */
	test_attention_forward(1, 150, 4, 2, 128, 512, 0); /* 128-wide kernels, three key tiles */
	test_attention_forward(2, 150, 4, 2, 16, 64, 3);   /* documents, boundaries inside tiles */
	test_attention_backward(3, 5, 6, 3, 8, 0);
	test_attention_backward(1, 33, 2, 2, 64, 0);
	test_attention_backward(1, 150, 4, 2, 128, 0);
	test_attention_backward(2, 150, 4, 2, 16, 3);
	test_attention_forward(1, 601, 2, 1, 16, 32, 0);
	test_attention_backward(1, 601, 2, 1, 16, 0);
	for (int backward = 0; backward <= 1; backward++) {
		test_swiglu(7, 143, 143, 1, backward);
		test_swiglu(7, 143, 150, 0, backward); /* pitched, odd F: scalar rows */
		test_swiglu(5, 64, 72, 0, backward);   /* pitched, vector rows */
		test_swiglu(5, 64, 72, 1, backward);   /* pitched, unaligned: scalar rows */
	}
	test_crossentropy(3, 5, 2, 0);
	test_crossentropy(4, 7, 0, 1); /* a target past the vocabulary: NaN loss */
	test_add_inplace(1001, 1);
	test_cast(7, 143, 143, 1);
	test_cast(7, 143, 150, 0); /* pitched, odd cols: scalar rows */
	test_cast(9, 64, 68, 0);   /* pitched, vector rows */
	test_cast(9, 64, 68, 1);   /* pitched, unaligned: scalar rows */
	test_nf4(1, 64, 64, 0);
	test_nf4(3, 64, 64, 1);
	test_nf4(3, 128, 136, 0); /* pitched, 16-byte rows: the chunk kernel, two rows a warp */
	test_nf4(3, 64, 68, 0);   /* pitched, 8-byte rows: the byte kernel */
	test_nf4(3, 128, 136, 1); /* pitched, unaligned: the byte kernel */
	test_sumsq(1, 0);
	test_sumsq(1000, 1);
	test_adamw(37, 10, 0.0f, 0.5f);
}

/* The shapes of a 7B-class model: T=512, C=4096, H=32, G=8, D=128,
 * V=32000, F=11008. */
static void run_realistic(void)
{
	test_embedding(512, 4096, 32000);
	test_rmsnorm_forward(512, 4096, 4096, 1, 1);
	test_rmsnorm_forward(512 * 8, 128, 128, 1, 0); /* qwen3's per-head q/k norm */
	/* Qwen2.5-32B's C = 5120 into a buffer with room for a rank-16 LoRA
	 * extension: ld = 5120 + lora_ext_cols(16) = 5280 */
	test_rmsnorm_forward(512, 5120, 5280, 1, 1);
	test_rmsnorm_backward(512, 4096);
	test_matmul_forward(512, 4096, 4096, 4096, 4096, 0, 0);
	test_matmul_forward(512, 4096, 4096, 4096, 4096, 0, 1);       /* onto a LoRA term */
	test_matmul_forward(512, 4096, 1024, 4096, 4096, 1, 1);       /* k/v projection with bias */
	test_matmul_backward_input(128, 4096, 11008, 11008, 4096, 1); /* through gate/up */
	test_matmul_backward_input(64, 11008, 4096, 4096, 11008, 0);  /* through down */
	/* 32B shapes in extension-sized buffers (pitch 5280): the base GEMM
	 * alone (K = 5120 of 5280), the GEMM with the extension (K = 5120 + 160
	 * of a wider pitch), and the input gradient through a weight with its
	 * extension rows (N = 5120 + 160) */
	test_matmul_forward(512, 5120, 5120, 5280, 5280, 0, 0);
	test_matmul_forward(512, 5280, 5120, 5312, 5312, 0, 0);
	test_matmul_backward_input(512, 5120, 5280, 5312, 5280, 0);
	/* both LoRA paths at model shapes, so the timings compare them (with a
	 * scratch, what the engine runs: u and dA on tensor cores; K = 27648 is
	 * Qwen2.5-32B's down_proj) */
	for (int scratch = 0; scratch <= 1; scratch++) {
		test_lora_forward(512, 4096, 4096, 16, 0.05f, scratch);
		test_lora_forward(512, 4096, 1024, 8, 0.0f, scratch);
		test_lora_forward(512, 27648, 5120, 16, 0.0f, scratch);
		test_lora_forward(512, 5120, 27648, 16, 0.0f, scratch); /* 32B gate/up */
		test_lora_backward(512, 4096, 4096, 16, 0.05f, 2, scratch);
		test_lora_backward(512, 11008, 4096, 64, 0.1f, 1, scratch);
		test_lora_backward(512, 4096, 1024, 8, 0.0f, 0, scratch);
		test_lora_backward(512, 27648, 5120, 16, 0.0f, 1, scratch);
		test_lora_backward(512, 5120, 27648, 16, 0.0f, 2, scratch); /* 32B gate/up */
		test_lora_ext(512, 5120, 5120, 16, 0.0f, 0, scratch); /* 32B q/o with the extension */
		test_lora_ext(512, 5120, 5120, 16, 0.0f, 1, scratch);
		test_lora_ext(512, 27648, 5120, 16, 0.0f, 1, scratch); /* 32B down */
	}
	test_rope(1, 512, 32, 128, 0, 0);
	test_rope(1, 512, 32, 128, 1, 0);
	test_rope(2, 512, 28, 128, 0, 4);
	test_attention_forward(1, 512, 32, 8, 128, 4096, 0);
	test_attention_forward(1, 512, 32, 8, 128, 4096 + 160, 0); /* into the o projection's extension-sized buffer */
	test_attention_forward(2, 64, 8, 2, 64, 512, 0);  /* two sequences, one tile each */
	test_attention_forward(2, 300, 8, 2, 64, 512, 0);
	test_attention_forward(1, 1100, 4, 2, 64, 256, 0);
	test_attention_forward(1, 1100, 28, 4, 128, 3584, 0); /* Qwen2.5-7B's heads */
	test_attention_forward(2, 1100, 8, 2, 128, 1024, 5);  /* five documents a row */
	test_attention_backward(1, 512, 32, 8, 128, 0);
	test_attention_backward(2, 64, 8, 2, 64, 0);
	test_attention_backward(2, 300, 8, 2, 64, 0);
	test_attention_backward(1, 1100, 4, 2, 64, 0);
	test_attention_backward(1, 1100, 28, 4, 128, 0);
	test_attention_backward(2, 1100, 8, 2, 128, 5);
	for (int backward = 0; backward <= 1; backward++) {
		test_swiglu(512, 11008, 11008, 0, backward);
		test_swiglu(512, 27648, 27648 + 160, 0, backward); /* 32B's F into the down projection's buffer */
	}
	test_crossentropy(512, 32000, 10, 0);
	test_add_inplace(512L * 4096 + 3, 0);
	test_cast(3, 699051, 699051, 0); /* 2^21 + 1 elements: the flat kernel's tail */
	test_cast(512, 4096, 4096 + 160, 0);
	test_nf4(4096, 4096, 4096, 0);
	test_nf4(512, 5120, 5280, 0); /* a 32B weight's rows into an extension-sized buffer */
	test_sumsq(16L * 1024 * 1024 + 5, 0);
	test_adamw(1L << 20, 1, 0.01f, 1.0f);
}

int main(int argc, char **argv)
{
	int small_only = argc > 1 && strcmp(argv[1], "--small") == 0;
	if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: test_ops_cuda [--small] [SUBSTRING...]\n"
		       "  runs each CUDA op against the CPU reference; --small: only the odd small\n"
		       "  shapes; SUBSTRING: only cases whose title contains one (e.g. lora attention_backward)\n");
		return 0;
	}
	filters = argv + 1 + small_only;
	n_filters = argc - 1 - small_only;

	char err[256] = "";
	gpu = backend_cuda(err, sizeof err);
	if (!gpu) {
		fprintf(stderr, "test_ops_cuda: %s\n", err);
		return 2;
	}
	printf("device: %s, %ld MiB, driver %s, CUDA runtime %s\n\n", gpu->device_name, gpu->device_mem_mb,
	       gpu->driver_version, gpu->runtime_version);
	ev_start = gpu->event_create();
	ev_end = gpu->event_create();
	double t_start = now_ms();
	run_small();
	if (!small_only)
		run_realistic();
	printf("test_ops_cuda: %d passed, %d failed (%.1f s)\n", cases_passed, cases_failed,
	       (now_ms() - t_start) / 1e3);
	gpu->event_destroy(ev_start);
	gpu->event_destroy(ev_end);
	if (cases_passed + cases_failed == 0) {
		fprintf(stderr, "test_ops_cuda: no case matches the filters\n");
		return 2;
	}
	return cases_failed ? 1 : 0;
}
