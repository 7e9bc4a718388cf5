/* tests/gpu/bench_attention.c: times the CUDA attention ops alone (not a
 * test: tests/gpu/run.sh skips bench_*).  For each shape, the forward and
 * the backward run 3 times to warm up, then 10 times each between events;
 * the median is printed (BENCH_ITERS=N: 1 to 10 timed runs, at most N
 * warm-ups, for long rows in a short device call) with TFLOP/s over the causal FLOPs (forward
 * 4*S^2*H*D/2 per sequence, backward 2.5 times that: the five products of
 * the usual count, not the recomputations this implementation does).
 * The ops rotate q and k (RoPE tables given), as in the training step.
 * Built with -DBENCH_OLD_API against a tree from before document masks,
 * it times that tree's ops (no pos argument, no tables).
 *
 * usage: bench_attention [S...]   (default: 2048 8192; B=1 H=28 G=4 D=128)
 * With a second form, bench_attention docs S N, the rows hold N documents
 * of equal length (pos counting from 0 at each); with a third, lens S
 * L1,L2,..., documents of those lengths and a last one to the row's end.
 * Packed rows give the backend the host copy of pos (pos_mirror), as the
 * engine does, unless BENCH_NO_MIRROR is set.  TFLOP/s of packed rows
 * count each document's own causal FLOPs.  BENCH_HEADS=H/G
 * (default 28/4, Qwen2.5-7B; 64/8 is 72B's).  Each shape also says whether
 * a second forward and backward gave the same bits; with BENCH_REFERENCE=1
 * both paths are also checked against a double-precision reference on a
 * few rows (one document a row), and the exit status is 1 when either is
 * off by more than REF_TOLERANCE.  A digest of each output (out, lse, dq,
 * dk, dv) is printed, so two builds can be checked for the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const struct backend *gpu;

static void *dev(size_t bytes)
{
	void *p;
	if (gpu->device_alloc(&p, bytes) != 0) {
		fprintf(stderr, "bench_attention: device out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	return p;
}

static float *host_rand(size_t n, uint64_t seed)
{
	float *h = malloc(n * sizeof *h);
	if (!h)
		exit(1);
	for (size_t i = 0; i < n; i++)
		h[i] = (float)((poros_mix64(seed + i) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
	return h;
}

static void *dev_rand(size_t n, uint64_t seed)
{
	float *h = host_rand(n, seed);
	void *d = dev(n * sizeof *h);
	gpu->copy_h2d(d, h, n * sizeof *h, STREAM_COMPUTE);
	gpu->synchronize();
	free(h);
	return d;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

#define SEED_Q 1ull
#define SEED_K (1ull << 30)
#define SEED_V (2ull << 30)
#define SEED_DOUT (3ull << 30)
#define SEED_COS (4ull << 30)
#define SEED_SIN (5ull << 30)

struct shape {
	int B, S, H, G, D;
	bf16 *out;
	float *lse, *scratch, *q, *k, *v, *dout, *dq, *dk, *dv;
	float *cos, *sin; /* (S, D/2): the ops rotate q and k as the step has them do */
	int32_t *pos;
};

static void fwd(const struct shape *s)
{
#ifdef BENCH_OLD_API
	gpu->ops->attention_forward(s->out, s->H * s->D, s->lse, s->scratch, s->q, s->k, s->v, s->B, s->S, s->H, s->G,
	                            s->D);
#else
	gpu->ops->attention_forward(s->out, s->H * s->D, s->lse, s->scratch, s->q, s->k, s->v, s->cos, s->sin, s->pos,
	                            s->B, s->S, s->H, s->G, s->D);
#endif
}

static void bwd(const struct shape *s)
{
#ifdef BENCH_OLD_API
	gpu->ops->attention_backward(s->dq, s->dk, s->dv, s->scratch, s->dout, s->q, s->k, s->v, s->lse, s->B, s->S,
	                             s->H, s->G, s->D);
#else
	gpu->ops->attention_backward(s->dq, s->dk, s->dv, s->scratch, s->dout, s->out, s->H * s->D, s->q, s->k, s->v,
	                             s->cos, s->sin, s->lse, s->pos, s->B, s->S, s->H, s->G, s->D);
#endif
}

static float time_ms(void (*op)(const struct shape *), const struct shape *s)
{
	struct backend_event *e0 = gpu->event_create(), *e1 = gpu->event_create();
	const char *env = getenv("BENCH_ITERS");
	int n = env && *env ? atoi(env) : 10;
	float t[10];
	if (n < 1 || n > 10) {
		fprintf(stderr, "bench_attention: BENCH_ITERS: want 1 to 10, got \"%s\"\n", env);
		exit(2);
	}
	for (int i = 0; i < (n < 3 ? n : 3); i++)
		op(s);
	for (int i = 0; i < n; i++) {
		gpu->event_record(e0, STREAM_COMPUTE);
		op(s);
		gpu->event_record(e1, STREAM_COMPUTE);
		gpu->event_synchronize(e1);
		t[i] = gpu->event_elapsed_ms(e0, e1);
	}
	gpu->event_destroy(e0);
	gpu->event_destroy(e1);
	qsort(t, n, sizeof t[0], cmp_float);
	return (t[(n - 1) / 2] + t[n / 2]) / 2;
}

/* FNV-1a over 8-byte words (sizes here are multiples of 8), a digest two
 * builds' outputs can be compared by. */
static uint64_t digest(const void *p, size_t bytes)
{
	uint64_t h = 14695981039346656037ull, w;
	for (size_t i = 0; i + 8 <= bytes; i += 8) {
		memcpy(&w, (const char *)p + i, 8);
		h = (h ^ w) * 1099511628211ull;
	}
	return h;
}

/* Whether a second forward and backward give the bits of the first
 * (out, lse, dq, dk, dv); the first run's digests are printed, so two
 * builds can be checked for the same bits. */
static int same_bits_twice(const struct shape *s, size_t qn, size_t kn)
{
	size_t sizes[] = { qn * 2, (size_t)s->B * s->H * s->S * 4, qn * 4, kn * 4, kn * 4 };
	const void *bufs[] = { s->out, s->lse, s->dq, s->dk, s->dv };
	const char *names[] = { "out", "lse", "dq", "dk", "dv" };
	int same = 1;
	for (int i = 0; i < 5; i++) {
		char *a = malloc(sizes[i]), *b = malloc(sizes[i]);
		if (!a || !b)
			exit(1);
		fwd(s), bwd(s);
		gpu->synchronize();
		gpu->copy_d2h(a, bufs[i], sizes[i]);
		printf("%sdigest %s %016llx%s", i == 0 ? "  " : "", names[i], (unsigned long long)digest(a, sizes[i]),
		       i == 4 ? "\n" : ", ");
		fwd(s), bwd(s);
		gpu->synchronize();
		gpu->copy_d2h(b, bufs[i], sizes[i]);
		if (memcmp(a, b, sizes[i]) != 0) {
			size_t nd = 0;
			double worst = 0;
			for (size_t j = 0; j < sizes[i]; j++)
				nd += a[j] != b[j];
			if (i > 0)
				for (size_t j = 0; j < sizes[i] / 4; j++) {
					double d = fabs((double)((float *)a)[j] - ((float *)b)[j]);
					worst = d > worst ? d : worst;
				}
			fprintf(stderr, "bench_attention: %s differs run to run in %zu of %zu bytes (max %.3g)\n",
			        names[i], nd, sizes[i], worst);
			same = 0;
		}
		free(a), free(b);
	}
	return same;
}

/* Unless POROS_ATTENTION=mma: the route's out, dq, dk, dv against the
 * kernels' (POROS_ATTENTION=mma) on the same inputs, the largest
 * difference over the largest value, printed (the rounding differs, ops.h). */
static void against_kernels(const struct shape *s, size_t qn, size_t kn)
{
	const char *route = getenv("POROS_ATTENTION");
	if (route && strcmp(route, "mma") == 0)
		return;
	size_t sizes[] = { qn * 4, kn * 4, kn * 4, (size_t)s->B * s->H * s->S * 4 };
	float *bufs[] = { s->dq, s->dk, s->dv, s->lse };
	const char *names[] = { "dq", "dk", "dv", "lse" };
	float *mine[4], *theirs[4];
	fwd(s), bwd(s);
	gpu->synchronize();
	for (int i = 0; i < 4; i++) {
		mine[i] = malloc(sizes[i]), theirs[i] = malloc(sizes[i]);
		if (!mine[i] || !theirs[i])
			exit(1);
		gpu->copy_d2h(mine[i], bufs[i], sizes[i]);
	}
	setenv("POROS_ATTENTION", "mma", 1);
	fwd(s), bwd(s);
	gpu->synchronize();
	unsetenv("POROS_ATTENTION");
	for (int i = 0; i < 4; i++) {
		gpu->copy_d2h(theirs[i], bufs[i], sizes[i]);
		double worst = 0, big = 0;
		for (size_t j = 0; j < sizes[i] / 4; j++) {
			double d = fabs((double)mine[i][j] - theirs[i][j]);
			worst = d > worst || d != d ? d : worst;
			big = fabs(theirs[i][j]) > big ? fabs(theirs[i][j]) : big;
		}
		printf("  %s against the kernels: max |diff| %.3g, max |kernels| %.3g (%.2g of it)\n", names[i], worst, big,
		       worst / big);
		free(mine[i]), free(theirs[i]);
	}
}

/* ---- a double-precision reference on a few rows (one document a row) ----
 * Who is right where the route and the kernels disagree: for sampled query
 * rows (dq, out, lse) and the last REF_KEYS keys (dk, dv, which only the
 * last rows' queries reach), the attention is recomputed in double from the
 * same inputs (q, k rotated and rounded to bf16, v and dout rounded to bf16,
 * as the ops read them; ops.h), and the largest difference over the largest
 * reference value is printed per tensor. */
#define REF_KEYS 17
/* bf16 inputs and bf16 P, dS: about 0.5 % of the largest value (measured
 * 0.1-0.5 % on both paths); a wrong result is off by its own size. */
#define REF_TOLERANCE 0.02
static int reference_failed;

struct host_inputs {
	float *q, *k, *v, *dout, *cos, *sin;
	double **kr, **vb; /* per key/value head: rotated bf16 k, bf16 v (S, D), made when first used */
};

static double bf(double x)
{
	return f32_from_bf16(bf16_from_f32((float)x));
}

/* out = bf16(rope(x)) at position at (HF's rotate_half, tables (S, D/2)). */
static void rotated(double *out, const float *x, const struct host_inputs *in, int at, int D)
{
	int half = D / 2;
	const float *c = in->cos + (size_t)at * half, *sn = in->sin + (size_t)at * half;
	for (int d = 0; d < half; d++) {
		out[d] = bf((double)x[d] * c[d] - (double)x[d + half] * sn[d]);
		out[d + half] = bf((double)x[d + half] * c[d] + (double)x[d] * sn[d]);
	}
}

/* The gradient at the unrotated x from the one at the rotated (the
 * rotation's transpose), in place. */
static void unrotate(double *g, const struct host_inputs *in, int at, int D)
{
	int half = D / 2;
	const float *c = in->cos + (size_t)at * half, *sn = in->sin + (size_t)at * half;
	for (int d = 0; d < half; d++) {
		double a = g[d], b = g[d + half];
		g[d] = a * c[d] + b * sn[d];
		g[d + half] = b * c[d] - a * sn[d];
	}
}

static void kv_head(struct host_inputs *in, const struct shape *s, int g)
{
	if (in->kr[g])
		return;
	size_t n = (size_t)s->S * s->D;
	in->kr[g] = malloc(n * sizeof(double)), in->vb[g] = malloc(n * sizeof(double));
	if (!in->kr[g] || !in->vb[g])
		exit(1);
	for (int j = 0; j < s->S; j++) {
		const size_t at = ((size_t)j * s->G + g) * s->D;
		rotated(in->kr[g] + (size_t)j * s->D, in->k + at, in, j, s->D);
		for (int d = 0; d < s->D; d++)
			in->vb[g][(size_t)j * s->D + d] = bf(in->v[at + d]);
	}
}

/* Query row i of head h: p, ds (i + 1 keys), o (D), qr (D), dob (D); lse. */
static double ref_row(struct host_inputs *in, const struct shape *s, int i, int h, double *p, double *ds,
                      double *o, double *qr, double *dob)
{
	int D = s->D, g = h / (s->H / s->G);
	double scale = 1.0 / sqrt((double)D), mx = -INFINITY, sum = 0, delta = 0;
	kv_head(in, s, g);
	rotated(qr, in->q + ((size_t)i * s->H + h) * D, in, i, D);
	for (int j = 0; j <= i; j++) {
		const double *kj = in->kr[g] + (size_t)j * D;
		double dot = 0;
		for (int d = 0; d < D; d++)
			dot += qr[d] * kj[d];
		p[j] = scale * dot;
		mx = p[j] > mx ? p[j] : mx;
	}
	for (int j = 0; j <= i; j++)
		sum += exp(p[j] - mx);
	double lse = mx + log(sum);
	for (int d = 0; d < D; d++)
		o[d] = 0, dob[d] = bf(in->dout[((size_t)i * s->H + h) * D + d]);
	for (int j = 0; j <= i; j++) {
		p[j] = exp(p[j] - lse);
		for (int d = 0; d < D; d++)
			o[d] += p[j] * in->vb[g][(size_t)j * D + d];
	}
	for (int d = 0; d < D; d++)
		delta += dob[d] * o[d];
	for (int j = 0; j <= i; j++) {
		double dp = 0;
		for (int d = 0; d < D; d++)
			dp += dob[d] * in->vb[g][(size_t)j * D + d];
		ds[j] = p[j] * (dp - delta);
	}
	return lse;
}

struct worst {
	double diff, big;
};

static void note(struct worst *w, double got, double want)
{
	double d = fabs(got - want);
	w->diff = d > w->diff || d != d ? d : w->diff;
	w->big = fabs(want) > w->big ? fabs(want) : w->big;
}

/* The op's outputs (host copies: out bf16, lse, dq, dk, dv) against the
 * reference; prints one line. */
static void against_reference(struct host_inputs *in, const struct shape *s, const char *who, const bf16 *out,
                              const float *lse, const float *dq, const float *dk, const float *dv)
{
	int S = s->S, H = s->H, G = s->G, D = s->D, hg = H / G;
	double scale = 1.0 / sqrt((double)D);
	double *p = malloc((size_t)S * sizeof *p), *ds = malloc((size_t)S * sizeof *ds);
	double o[256], qr[256], dob[256], g[256];
	double *dkr = calloc((size_t)REF_KEYS * D, sizeof *dkr), *dvr = calloc((size_t)REF_KEYS * D, sizeof *dvr);
	if (!p || !ds || !dkr || !dvr || D > 256)
		exit(1);
	struct worst wo = { 0, 0 }, wl = { 0, 0 }, wq = { 0, 0 }, wk = { 0, 0 }, wv = { 0, 0 };
	const int rows[] = { 0, 1, 127, S / 2 + 5, S - 1 };
	const int heads[] = { 0, H / 2, H - 1 };
	for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++)
		for (size_t b = 0; b < sizeof heads / sizeof heads[0]; b++) {
			int i = rows[a], h = heads[b];
			double l = ref_row(in, s, i, h, p, ds, o, qr, dob);
			note(&wl, lse[(size_t)h * S + i], l);
			for (int d = 0; d < D; d++) {
				g[d] = 0;
				note(&wo, f32_from_bf16(out[((size_t)i * H + h) * D + d]), o[d]);
			}
			for (int j = 0; j <= i; j++)
				for (int d = 0; d < D; d++)
					g[d] += scale * ds[j] * in->kr[h / hg][(size_t)j * D + d];
			unrotate(g, in, i, D);
			for (int d = 0; d < D; d++)
				note(&wq, dq[((size_t)i * H + h) * D + d], g[d]);
		}
	const int groups[] = { 0, G - 1 };
	for (size_t c = 0; c < (G > 1 ? 2u : 1u); c++) {
		int kvh = groups[c];
		memset(dkr, 0, (size_t)REF_KEYS * D * sizeof *dkr), memset(dvr, 0, (size_t)REF_KEYS * D * sizeof *dvr);
		for (int h = kvh * hg; h < (kvh + 1) * hg; h++)
			for (int i = S - REF_KEYS; i < S; i++) {
				ref_row(in, s, i, h, p, ds, o, qr, dob);
				for (int j = S - REF_KEYS; j <= i; j++)
					for (int d = 0; d < D; d++) {
						dkr[(size_t)(j - (S - REF_KEYS)) * D + d] += scale * ds[j] * qr[d];
						dvr[(size_t)(j - (S - REF_KEYS)) * D + d] += p[j] * dob[d];
					}
			}
		for (int r = 0; r < REF_KEYS; r++) {
			int j = S - REF_KEYS + r;
			unrotate(dkr + (size_t)r * D, in, j, D);
			for (int d = 0; d < D; d++) {
				note(&wk, dk[((size_t)j * G + kvh) * D + d], dkr[(size_t)r * D + d]);
				note(&wv, dv[((size_t)j * G + kvh) * D + d], dvr[(size_t)r * D + d]);
			}
		}
	}
	double e[] = { wo.diff / wo.big, wl.diff / wl.big, wq.diff / wq.big, wk.diff / wk.big, wv.diff / wv.big };
	int bad = 0;
	for (int i = 0; i < 5; i++)
		bad |= !(e[i] <= REF_TOLERANCE);
	printf("  %s against a double reference (15 query rows, last %d keys): out %.2g, lse %.2g, dq %.2g, dk %.2g, "
	       "dv %.2g (max |diff| / max |ref|)%s\n",
	       who, REF_KEYS, e[0], e[1], e[2], e[3], e[4], bad ? ": WRONG" : "");
	fflush(stdout);
	reference_failed |= bad;
	free(p), free(ds), free(dkr), free(dvr);
}

/* Runs the op (the route as the environment chooses) and checks it. */
static void check_reference(struct host_inputs *in, const struct shape *s, const char *who)
{
	size_t qn = (size_t)s->B * s->S * s->H * s->D, kn = (size_t)s->B * s->S * s->G * s->D;
	bf16 *out = malloc(qn * 2);
	float *lse = malloc((size_t)s->H * s->S * 4), *dq = malloc(qn * 4), *dk = malloc(kn * 4), *dv = malloc(kn * 4);
	if (!out || !lse || !dq || !dk || !dv)
		exit(1);
	fwd(s), bwd(s);
	gpu->synchronize();
	gpu->copy_d2h(out, s->out, qn * 2), gpu->copy_d2h(lse, s->lse, (size_t)s->H * s->S * 4);
	gpu->copy_d2h(dq, s->dq, qn * 4), gpu->copy_d2h(dk, s->dk, kn * 4), gpu->copy_d2h(dv, s->dv, kn * 4);
	against_reference(in, s, who, out, lse, dq, dk, dv);
	free(out), free(lse), free(dq), free(dk), free(dv);
}

/* BENCH_REFERENCE=1: both paths against the reference (B = 1, one document). */
static void reference(const struct shape *s)
{
	const char *want = getenv("BENCH_REFERENCE");
	if (!want || strcmp(want, "1") != 0 || s->B != 1 || s->pos)
		return;
	size_t qn = (size_t)s->S * s->H * s->D, kn = (size_t)s->S * s->G * s->D;
	struct host_inputs in = { host_rand(qn, SEED_Q), host_rand(kn, SEED_K), host_rand(kn, SEED_V),
		                  host_rand(qn, SEED_DOUT), host_rand((size_t)s->S * s->D / 2, SEED_COS),
		                  host_rand((size_t)s->S * s->D / 2, SEED_SIN), calloc((size_t)s->G, sizeof(double *)),
		                  calloc((size_t)s->G, sizeof(double *)) };
	const char *route = getenv("POROS_ATTENTION");
	if (!(route && strcmp(route, "mma") == 0))
		check_reference(&in, s, "route");
	setenv("POROS_ATTENTION", "mma", 1);
	check_reference(&in, s, "kernels");
	if (route)
		setenv("POROS_ATTENTION", route, 1);
	else
		unsetenv("POROS_ATTENTION");
	for (int g = 0; g < s->G; g++)
		free(in.kr[g]), free(in.vb[g]);
	free(in.q), free(in.k), free(in.v), free(in.dout), free(in.cos), free(in.sin), free(in.kr), free(in.vb);
}

static int heads_q = 28, heads_kv = 4;


/* The attention scratch for the route and for the kernels
 * (against_kernels runs both on it): with POROS_CUDNN_TILE under 32768
 * tokens the tiles keep one group's per-head dk, dv, the kernels every
 * group's. */
static size_t scratch_floats_both(int B, int S, int H, int G, int D)
{
	const char *route = getenv("POROS_ATTENTION");
	char *was = route ? strdup(route) : NULL;
	size_t sf = attention_scratch_floats_cuda(B, S, H, G, D), mma;
	setenv("POROS_ATTENTION", "mma", 1);
	mma = attention_scratch_floats_cuda(B, S, H, G, D);
	if (was)
		setenv("POROS_ATTENTION", was, 1);
	else
		unsetenv("POROS_ATTENTION");
	free(was);
	return sf > mma ? sf : mma;
}

/* One row of S tokens (B = 1) holding ndocs documents of the given lengths
 * (the last one takes what is left); ndocs 1: one document. */
static void bench(int S, int ndocs, const int *lens)
{
	struct shape s;
	memset(&s, 0, sizeof s);
	s.B = 1, s.S = S, s.H = heads_q, s.G = heads_kv, s.D = 128;
	size_t T = (size_t)s.B * S, qn = T * s.H * s.D, kn = T * s.G * s.D;
	size_t sf = scratch_floats_both(s.B, S, s.H, s.G, s.D);
	s.q = dev_rand(qn, SEED_Q), s.k = dev_rand(kn, SEED_K), s.v = dev_rand(kn, SEED_V);
	s.dout = dev_rand(qn, SEED_DOUT);
	s.out = dev(qn * 2), s.lse = dev((size_t)s.B * s.H * S * 4), s.scratch = dev(sf * 4);
	s.dq = dev(qn * 4), s.dk = dev(kn * 4), s.dv = dev(kn * 4);
	s.cos = dev_rand((size_t)S * s.D / 2, SEED_COS), s.sin = dev_rand((size_t)S * s.D / 2, SEED_SIN);
	s.pos = NULL;
	int32_t *host_pos = NULL;
	double causal = 0; /* the causal FLOPs' S^2 part, summed over the documents */
	if (ndocs > 1) {
		host_pos = malloc(T * sizeof *host_pos);
		size_t t = 0;
		for (int d = 0; d < ndocs; d++) {
			size_t len = d == ndocs - 1 ? T - t : (size_t)lens[d];
			for (size_t i = 0; i < len; i++)
				host_pos[t + i] = (int32_t)i;
			t += len;
			causal += (double)len * len;
		}
		s.pos = dev(T * sizeof *host_pos);
		gpu->copy_h2d(s.pos, host_pos, T * sizeof *host_pos, STREAM_COMPUTE);
		gpu->synchronize();
		if (getenv("BENCH_NO_MIRROR") == NULL && gpu->pos_mirror)
			gpu->pos_mirror(s.pos, host_pos, T);
	} else {
		causal = (double)S * S;
	}
	struct attention_cudnn_stats st0 = attention_cudnn_stats_read();
	float f = time_ms(fwd, &s), b = time_ms(bwd, &s);
	struct attention_cudnn_stats st1 = attention_cudnn_stats_read();
	int same = same_bits_twice(&s, qn, kn);
	double flops = 4.0 * causal * s.H * s.D / 2 * s.B;
	/* which path ran: ops.h's route predicates, as the CUDA ops apply them,
	 * and for packed rows whether cuDNN's per-document calls ran */
	int route = ndocs == 1 && attention_cudnn_route(s.D, S);
	if (ndocs > 1)
		printf("path: %s (%ld document calls, %ld plans built in %.0f ms)\n",
		       st1.doc_calls > st0.doc_calls ? "cudnn per document" : "kernels", st1.doc_calls - st0.doc_calls,
		       st1.plans_built - st0.plans_built, st1.build_ms - st0.build_ms);
	else if (st1.tile_calls > st0.tile_calls)
		printf("path: forward cudnn, backward cudnn in tiles (%d heads a call, chunks of %d tokens, %ld tile "
		       "calls)\n", attention_cudnn_tiles(s.B, S, s.H, s.G, s.D).hc, attention_cudnn_tiles(s.B, S, s.H, s.G,
		       s.D).C, st1.tile_calls - st0.tile_calls);
	else
		printf("path: forward %s, backward %s\n", route ? "cudnn" : "kernels",
		       route && attention_cudnn_heads(s.B, S, s.H, s.D) > 0 ? "cudnn" : "kernels");
	printf("attention B=%d S=%d H=%d G=%d D=%d docs=%d: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms "
	       "(%.0f TFLOP/s), scratch %.1f MiB, %s\n",
	       s.B, S, s.H, s.G, s.D, ndocs, f, flops / f * 1e-9, b, 2.5 * flops / b * 1e-9, sf * 4.0 / 1048576,
	       same ? "same bits twice" : "BITS DIFFER run to run");
	fflush(stdout);
	against_kernels(&s, qn, kn);
	reference(&s);
	if (gpu->pos_mirror)
		gpu->pos_mirror(NULL, NULL, 0);
	free(host_pos);
	void *bufs[] = { s.q, s.k, s.v, s.dout, s.out, s.lse, s.scratch, s.dq, s.dk, s.dv, s.cos, s.sin, s.pos };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		if (bufs[i])
			gpu->device_free(bufs[i]);
}

int main(int argc, char **argv)
{
	char err[256] = "";
	gpu = backend_cuda(err, sizeof err);
	if (!gpu) {
		fprintf(stderr, "bench_attention: %s\n", err);
		return 2;
	}
	const char *heads = getenv("BENCH_HEADS");
	if (heads && sscanf(heads, "%d/%d", &heads_q, &heads_kv) != 2) {
		fprintf(stderr, "bench_attention: BENCH_HEADS: want H/G, e.g. 64/8\n");
		return 2;
	}
	if (argc == 4 && strcmp(argv[1], "docs") == 0) {
		int S = atoi(argv[2]), n = atoi(argv[3]), lens[256];
		if (n < 1 || n > 256 || S < n) {
			fprintf(stderr, "bench_attention: docs S N: want 1 <= N <= 256, N <= S\n");
			return 2;
		}
		for (int i = 0; i < n; i++)
			lens[i] = (S + n - 1) / n;
		bench(S, n, lens);
		return reference_failed;
	}
	if (argc == 4 && strcmp(argv[1], "lens") == 0) {
		/* lens S L1,L2,...: documents of those lengths, the last one to the row's end */
		int S = atoi(argv[2]), n = 0, lens[256], sum = 0;
		for (char *p = argv[3]; *p && n < 255; n++) {
			lens[n] = (int)strtol(p, &p, 10);
			sum += lens[n];
			if (*p == ',')
				p++;
		}
		if (n == 0 || sum >= S) {
			fprintf(stderr, "bench_attention: lens S L1,...: the lengths must leave a last document\n");
			return 2;
		}
		bench(S, n + 1, lens);
		return reference_failed;
	}
	if (argc == 1) {
		bench(2048, 1, NULL);
		bench(8192, 1, NULL);
	}
	for (int i = 1; i < argc; i++)
		bench(atoi(argv[i]), 1, NULL);
	return reference_failed;
}
