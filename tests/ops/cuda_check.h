/* tests/ops/cuda_check.h: what the CPU-vs-CUDA op checks share (the
 * OPS_TEST_CUDA sections of tests/ops/<op>.c, run by tests/gpu/test_ops_cuda.c):
 * the backend, a seeded generator, host and device buffers freed at the
 * end of each case, a case whose outputs run twice on the GPU (poisoned,
 * or reset to their initial values, before each run), pitched buffers and
 * the comparisons against the CPU reference.  One translation unit includes
 * it, so everything here is static. */
#ifndef POROS_CUDA_CHECK_H
#define POROS_CUDA_CHECK_H

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

/* --- host memory: the buffers of a case, freed at its end ------------------
 * Every host buffer a case makes (its inputs, references, copies) comes
 * from host_alloc, so case_end frees them all and no case lists its own. */

#define MAX_HOST 64
static void *host_live[MAX_HOST];
static int n_host_live;

static void *host_alloc(size_t bytes)
{
	if (n_host_live == MAX_HOST)
		die("too many host buffers in one case");
	return host_live[n_host_live++] = xmalloc(bytes);
}

static void host_free_all(void)
{
	for (int i = 0; i < n_host_live; i++)
		free(host_live[i]);
	n_host_live = 0;
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
	float *x = host_alloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = rand_range(lo, hi);
	return x;
}

static bf16 *rand_bf16(size_t n, float lo, float hi)
{
	bf16 *x = host_alloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = bf16_from_f32(rand_range(lo, hi));
	return x;
}

static void *dup_bytes(const void *src, size_t bytes)
{
	void *p = host_alloc(bytes);
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

#define MAX_OUTS 12
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
/* --list: case_begin prints each selected title and runs nothing (no
 * device needed), so the cases can be counted and compared. */
static int list_only;
static int cases_listed;

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
	if (list_only) {
		printf("%s\n", c->title);
		cases_listed++;
		return 0;
	}
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

/* The LoRA ops' scratch: lora_scratch_floats(T,K,N,R) floats, what CUDA
 * requires, and with spare another T*K beyond it (as the engine's shared
 * region can be), poisoned like every scratch. */
static float *case_lora_scratch(struct gpu_case *c, int T, int K, int N, int R, int spare)
{
	size_t floats = lora_scratch_floats(T, K, N, R) + (spare ? (size_t)T * K : 0);
	return case_scratch(c, floats * sizeof(float));
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
	unsigned char *p = host_alloc(rows * ld * elem);
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
 * (n values, fp32 or bf16) means the CPU read a pad, and check() would
 * take the GPU's NaN from the same mistake for agreement. */
static void check_ref_finite(struct gpu_case *c, const char *name, const void *ref, size_t n, int is_bf16)
{
	size_t nan = 0;
	for (size_t i = 0; i < n; i++)
		nan += isnan(value_at(ref, i, is_bf16)) != 0;
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
	host_free_all();
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

/* pos (T) for rows packed with `docs` documents (0: NULL, plain t % S):
 * document k of a row starts at k*S/docs + 3 (k > 0), so the boundaries
 * fall inside key tiles; returns NULL for docs == 0. */
static int32_t *doc_positions(int B, int S, int docs)
{
	if (docs <= 0)
		return NULL;
	int32_t *pos = host_alloc((size_t)B * S * sizeof *pos);
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

#endif
