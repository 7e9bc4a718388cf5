/* tests/gpu/bench_attention.c: times the CUDA attention ops alone (not a
 * test: tests/gpu/run.sh skips bench_*).  For each shape, the forward and
 * the backward run 3 times to warm up, then 10 times each between events;
 * the median is printed with TFLOP/s over the causal FLOPs (forward
 * 4*S^2*H*D/2 per sequence, backward 2.5 times that: the five products of
 * the usual count, not the recomputations this implementation does).
 * The ops rotate q and k (RoPE tables given), as in the training step.
 * Built with -DBENCH_OLD_API against a tree from before document masks,
 * it times that tree's ops (no pos argument, no tables).
 *
 * usage: bench_attention [S...]   (default: 2048 8192; B=1 H=28 G=4 D=128)
 * With a second form, bench_attention docs S N, the rows hold N documents
 * of equal length (pos counting from 0 at each).  BENCH_HEADS=H/G
 * (default 28/4, Qwen2.5-7B; 64/8 is 72B's).  Each shape also says whether
 * a second forward and backward gave the same bits. */
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

static void *dev_rand(size_t n, uint64_t seed)
{
	float *h = malloc(n * sizeof *h);
	if (!h)
		exit(1);
	for (size_t i = 0; i < n; i++)
		h[i] = (float)((poros_mix64(seed + i) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
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
	float t[10];
	for (int i = 0; i < 3; i++)
		op(s);
	for (int i = 0; i < 10; i++) {
		gpu->event_record(e0, STREAM_COMPUTE);
		op(s);
		gpu->event_record(e1, STREAM_COMPUTE);
		gpu->event_synchronize(e1);
		t[i] = gpu->event_elapsed_ms(e0, e1);
	}
	gpu->event_destroy(e0);
	gpu->event_destroy(e1);
	qsort(t, 10, sizeof t[0], cmp_float);
	return (t[4] + t[5]) / 2;
}

/* Whether a second forward and backward give the bits of the first
 * (out, lse, dq, dk, dv). */
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

static int heads_q = 28, heads_kv = 4;

static void bench(int S, int docs)
{
	struct shape s;
	memset(&s, 0, sizeof s);
	s.B = 1, s.S = S, s.H = heads_q, s.G = heads_kv, s.D = 128;
	size_t T = (size_t)s.B * S, qn = T * s.H * s.D, kn = T * s.G * s.D;
	size_t sf = attention_scratch_floats_cuda(s.B, S, s.H, s.G, s.D);
	s.q = dev_rand(qn, 1), s.k = dev_rand(kn, 1u << 30), s.v = dev_rand(kn, 2u << 30);
	s.dout = dev_rand(qn, 3u << 30);
	s.out = dev(qn * 2), s.lse = dev((size_t)s.B * s.H * S * 4), s.scratch = dev(sf * 4);
	s.dq = dev(qn * 4), s.dk = dev(kn * 4), s.dv = dev(kn * 4);
	s.cos = dev_rand((size_t)S * s.D / 2, 4u << 30), s.sin = dev_rand((size_t)S * s.D / 2, 5u << 30);
	s.pos = NULL;
	if (docs > 1) {
		int32_t *p = malloc(T * sizeof *p);
		int len = (S + docs - 1) / docs;
		for (size_t t = 0; t < T; t++)
			p[t] = (int32_t)((t % S) % len);
		s.pos = dev(T * sizeof *p);
		gpu->copy_h2d(s.pos, p, T * sizeof *p, STREAM_COMPUTE);
		gpu->synchronize();
		free(p);
	}
	float f = time_ms(fwd, &s), b = time_ms(bwd, &s);
	int same = same_bits_twice(&s, qn, kn);
	double flops = 4.0 * S * (double)S * s.H * s.D / 2 * s.B;
	/* which path ran: ops.h's route predicates, as the CUDA ops apply them */
	int route = docs == 1 && attention_cudnn_route(s.D);
	printf("path: forward %s, backward %s\n", route ? "cudnn" : "kernels",
	       route && attention_cudnn_heads(s.B, S, s.H, s.D) > 0 ? "cudnn" : "kernels");
	printf("attention B=%d S=%d H=%d G=%d D=%d docs=%d: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms "
	       "(%.0f TFLOP/s), scratch %.1f MiB, %s\n",
	       s.B, S, s.H, s.G, s.D, docs, f, flops / docs / f * 1e-9, b, 2.5 * flops / docs / b * 1e-9,
	       sf * 4.0 / 1048576, same ? "same bits twice" : "BITS DIFFER run to run");
	fflush(stdout);
	against_kernels(&s, qn, kn);
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
		bench(atoi(argv[2]), atoi(argv[3]));
		return 0;
	}
	if (argc == 1) {
		bench(2048, 1);
		bench(8192, 1);
	}
	for (int i = 1; i < argc; i++)
		bench(atoi(argv[i]), 1);
	return 0;
}
