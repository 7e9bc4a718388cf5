/* tools/poros-train/profile.c: the profiling wrapper of the backend.
 *
 * Every op of kernels/ops.h gets a wrapper with the op's signature that
 * marks the op's category on the compute stream and calls the real op.
 * A mark records an event when the category changes, so the time from
 * one event to the next belongs to one category and the categories add
 * up to the step's compute-stream time (idle gaps go to the category they
 * interrupt).  With two compute lanes (backend.h) each lane is such a
 * timeline of its own, events taken on its stream, and leaving a lane
 * closes its segment: the time until the lane gets work again is idle
 * and counts nowhere (on the CPU, where lanes run in turn, it is the
 * other lane's), so the categories add up to both lanes' busy time.
 * Compute-stream waits and host-to-device copies count as wait_copy,
 * synchronous reads back to the host as other.  The wrapper
 * tables and declarations are generated from POROS_OPS_LIST (an op added
 * there without a category and a wrapper here does not compile); the
 * wrapper bodies name the op's arguments, which the list cannot give. */
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Op categories, in the order the profile lists them. */
enum prof_cat {
	PROF_GEMM_FWD, PROF_GEMM_BWD, PROF_LORA_FWD, PROF_LORA_BWD, PROF_ATTN_FWD, PROF_ATTN_BWD, PROF_NORM,
	PROF_ROPE, PROF_SWIGLU, PROF_ELEMENTWISE, PROF_HEAD, PROF_DEQUANT, PROF_EMBED, PROF_OPTIM, PROF_WAIT_COPY,
	PROF_OTHER, PROF_N,
	/* no segment of its own, not counted: the time goes to the segment it
	 * follows (lora_weight_ext rides with the dequantization on NF4, with
	 * whatever came before it on bf16, so the counts stay those of the
	 * ops both LoRA paths run) */
	PROF_SAME = -1
};
static const char *const prof_names[PROF_N] = {
	"gemm_fwd", "gemm_bwd_input", "lora_fwd", "lora_bwd", "attn_fwd", "attn_bwd", "norm", "rope", "swiglu",
	"elementwise", "head_ce", "dequant", "embedding", "optimizer", "wait_copy", "other",
};

/* The op -> category map (outside the head, where every op is head_ce). */
#define CAT_embedding_forward PROF_EMBED
#define CAT_rmsnorm_forward PROF_NORM
#define CAT_rmsnorm_backward PROF_NORM
#define CAT_matmul_forward PROF_GEMM_FWD
#define CAT_matmul_forward_bf16 PROF_GEMM_FWD
#define CAT_matmul_backward_input PROF_GEMM_BWD
#define CAT_lora_forward PROF_LORA_FWD
#define CAT_lora_backward PROF_LORA_BWD
#define CAT_lora_weight_ext PROF_SAME
#define CAT_rope_forward PROF_ROPE
#define CAT_rope_backward PROF_ROPE
#define CAT_attention_forward PROF_ATTN_FWD
#define CAT_attention_backward PROF_ATTN_BWD
#define CAT_swiglu_forward PROF_SWIGLU
#define CAT_swiglu_backward PROF_SWIGLU
#define CAT_crossentropy_forward_backward PROF_HEAD
#define CAT_add_inplace PROF_ELEMENTWISE
#define CAT_cast_f32_to_bf16 PROF_ELEMENTWISE
#define CAT_nf4_dequantize PROF_DEQUANT
#define CAT_sumsq PROF_OPTIM
#define CAT_adamw_update PROF_OPTIM

struct profile {
	const struct backend *real;
	struct backend be;            /* real's calls, these timed */
	struct poros_ops ops, head_ops;
	struct backend_event **ev;
	int *cat;                     /* category of the time from ev[i] to the lane's next event */
	int *lane;                    /* the lane whose stream ev[i] is on */
	int n, cap, open;
	int cur_lane;                 /* the lane the engine issues to */
	int cur[BACKEND_MAX_LANES];   /* each lane's open category; -1: none */
	long count[PROF_N];
	double ms[PROF_N];
	int done;                     /* ms holds the last step's times */
};

/* The wrappers have the ops' signatures, so they reach the profile here. */
static struct profile *active;

/* An event on the current lane's stream opening a segment of category
 * cat (-1: none, the lane idle or the step's end). */
static void prof_event(struct profile *pr, int cat)
{
	if (pr->n == pr->cap) {
		int cap = pr->cap ? 2 * pr->cap : 1024;

		pr->ev = xrealloc(pr->ev, (size_t)cap * sizeof *pr->ev);
		pr->cat = xrealloc(pr->cat, (size_t)cap * sizeof *pr->cat);
		pr->lane = xrealloc(pr->lane, (size_t)cap * sizeof *pr->lane);
		for (int i = pr->cap; i < cap; i++)
			if ((pr->ev[i] = pr->real->event_create()) == NULL)
				die(EXIT_RUNTIME, "%s backend: cannot create profiling events", pr->real->name);
		pr->cap = cap;
	}
	pr->real->event_record(pr->ev[pr->n], STREAM_COMPUTE);
	pr->lane[pr->n] = pr->cur_lane;
	pr->cat[pr->n++] = cat;
	pr->cur[pr->cur_lane] = cat;
}

/* The work queued next on the compute stream belongs to cat. */
static void mark(int cat)
{
	struct profile *pr = active;

	if (pr == NULL || !pr->open || cat == PROF_SAME)
		return;
	pr->count[cat]++;
	if (cat != pr->cur[pr->cur_lane])
		prof_event(pr, cat);
}

#define REAL (active->real->ops)
#define WRAP(name, params, ...)                                   \
	static void prof_##name params                            \
	{                                                         \
		mark(CAT_##name);                                 \
		REAL->name(__VA_ARGS__);                          \
	}                                                         \
	static void prof_head_##name params                       \
	{                                                         \
		mark(CAT_##name == PROF_SAME ? PROF_SAME : PROF_HEAD); \
		REAL->name(__VA_ARGS__);                          \
	}

/* the prototypes from the list: a wrapper whose parameters differ from
 * the op's is a compile error */
#define DECLARE(ret, name, args) static ret prof_##name args; static ret prof_head_##name args;
POROS_OPS_LIST(DECLARE)

WRAP(embedding_forward, (float *out, const int32_t *tokens, const bf16 *wte, int T, int C), out, tokens, wte, T, C)
WRAP(rmsnorm_forward, (float *out_f32, bf16 *out_bf16, int ld_out, float *rstd, const float *in, const bf16 *weight,
                       float eps, int T, int C),
     out_f32, out_bf16, ld_out, rstd, in, weight, eps, T, C)
WRAP(rmsnorm_backward, (float *din, const float *dout, const float *in, const bf16 *weight, const float *rstd, int T,
                        int C),
     din, dout, in, weight, rstd, T, C)
WRAP(matmul_forward, (float *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w, const bf16 *bias, int T,
                      int K, int N, int accumulate),
     out, in, ld_in, weight, ld_w, bias, T, K, N, accumulate)
WRAP(matmul_forward_bf16, (bf16 *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w, int T, int K, int N),
     out, in, ld_in, weight, ld_w, T, K, N)
WRAP(matmul_backward_input, (float *din, const bf16 *dout, int ld_dout, const bf16 *weight, int ld_w, int T, int K,
                             int N, int accumulate),
     din, dout, ld_dout, weight, ld_w, T, K, N, accumulate)
WRAP(lora_forward, (const struct lora_fwd_args *a), a)
WRAP(lora_backward, (const struct lora_bwd_args *a), a)
WRAP(lora_weight_ext, (bf16 *w, int ld_w, const float *A, const float *B, const bf16 *bias, float scale, int K, int N,
                       int R),
     w, ld_w, A, B, bias, scale, K, N, R)
WRAP(rope_forward, (float *x, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D),
     x, cos, sin, pos, B, S, nh, D)
WRAP(rope_backward, (float *dx, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D),
     dx, cos, sin, pos, B, S, nh, D)
WRAP(attention_forward, (bf16 *out, int ld_out, float *lse, float *scratch, const float *q, const float *k,
                         const float *v, const float *rope_cos, const float *rope_sin, const int32_t *pos, int B,
                         int S, int H, int G, int D),
     out, ld_out, lse, scratch, q, k, v, rope_cos, rope_sin, pos, B, S, H, G, D)
WRAP(attention_backward, (float *dq, float *dk, float *dv, float *scratch, const float *dout, const bf16 *out,
                          int ld_out, const float *q, const float *k, const float *v, const float *rope_cos,
                          const float *rope_sin, const float *lse, const int32_t *pos, int B, int S, int H, int G,
                          int D),
     dq, dk, dv, scratch, dout, out, ld_out, q, k, v, rope_cos, rope_sin, lse, pos, B, S, H, G, D)
WRAP(swiglu_forward, (bf16 *out, int ld_out, const bf16 *gate, const bf16 *up, int T, int F), out, ld_out, gate, up, T,
     F)
WRAP(swiglu_backward, (bf16 *dgate, bf16 *dup, int ld_d, const float *dout, const bf16 *gate, const bf16 *up, int T,
                       int F),
     dgate, dup, ld_d, dout, gate, up, T, F)
WRAP(crossentropy_forward_backward, (bf16 *dlogits, float *losses, const float *logits, const int32_t *targets,
                                     float dloss, int T, int V),
     dlogits, losses, logits, targets, dloss, T, V)
WRAP(add_inplace, (float *a, const float *b, long n), a, b, n)
WRAP(cast_f32_to_bf16, (bf16 *out, int ld_out, const float *in, long rows, int cols), out, ld_out, in, rows, cols)
WRAP(nf4_dequantize, (bf16 *out, int ld_out, const uint8_t *packed, const float *absmax, long rows, int cols), out,
     ld_out, packed, absmax, rows, cols)
WRAP(sumsq, (float *out, float *scratch, const float *x, long n), out, scratch, x, n)
WRAP(adamw_update, (float *param, const float *grad, float *m, float *v, long n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, float grad_scale, int t),
     param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t)

/* Copies to the device and waits on the compute stream hold it up for a
 * copy; a synchronous read back is the host's time. */
static void prof_copy_h2d(void *dst, const void *src, size_t bytes, int stream)
{
	if (stream == STREAM_COMPUTE)
		mark(PROF_WAIT_COPY);
	active->real->copy_h2d(dst, src, bytes, stream);
}

static void prof_stream_wait_event(int stream, struct backend_event *e)
{
	if (stream == STREAM_COMPUTE)
		mark(PROF_WAIT_COPY);
	active->real->stream_wait_event(stream, e);
}

static void prof_copy_d2h(void *dst, const void *src, size_t bytes)
{
	mark(PROF_OTHER);
	active->real->copy_d2h(dst, src, bytes);
}

/* Leaving a lane ends its open segment. */
static void prof_set_lane(int lane)
{
	struct profile *pr = active;

	if (pr && pr->open && lane != pr->cur_lane && pr->cur[pr->cur_lane] != -1)
		prof_event(pr, -1);
	if (pr)
		pr->cur_lane = lane;
	active->real->set_lane(lane);
}

struct profile *profile_create(const struct backend *real)
{
	struct profile *p = xcalloc(1, sizeof *p);

#define MEMBER(ret, name, args) p->ops.name = prof_##name; p->head_ops.name = prof_head_##name;
	POROS_OPS_LIST(MEMBER)
#undef MEMBER
	p->real = real;
	p->be = *real;
	p->be.ops = &p->ops;
	p->be.copy_h2d = prof_copy_h2d;
	p->be.stream_wait_event = prof_stream_wait_event;
	p->be.copy_d2h = prof_copy_d2h;
	p->be.set_lane = prof_set_lane;
	for (int l = 0; l < BACKEND_MAX_LANES; l++)
		p->cur[l] = -1;
	active = p;
	return p;
}

void profile_destroy(struct profile *p)
{
	if (p == NULL)
		return;
	for (int i = 0; i < p->cap; i++)
		p->real->event_destroy(p->ev[i]);
	free(p->ev);
	free(p->cat);
	free(p->lane);
	if (active == p)
		active = NULL;
	free(p);
}

const struct backend *profile_backend(const struct profile *p)
{
	return &p->be;
}

const struct poros_ops *profile_head_ops(const struct profile *p)
{
	return &p->head_ops;
}

void profile_begin(struct profile *p)
{
	active = p;
	p->n = 0;
	for (int l = 0; l < BACKEND_MAX_LANES; l++)
		p->cur[l] = -1;
	p->done = 0;
	p->open = 1;
	memset(p->count, 0, sizeof p->count);
	memset(p->ms, 0, sizeof p->ms);
	mark(PROF_OTHER);
}

/* Every lane's open segment ends here (the engine is back on lane 0). */
void profile_close(struct profile *p)
{
	if (p->open && p->n > 0)
		for (int l = 0; l < BACKEND_MAX_LANES; l++) {
			if (p->cur[l] == -1)
				continue;
			if (l != p->cur_lane)
				p->real->set_lane(l);
			p->cur_lane = l;
			prof_event(p, -1);
		}
	if (p->cur_lane != 0)
		p->real->set_lane(0);
	p->cur_lane = 0;
	p->open = 0;
}

/* Each segment runs from its event to the next on the same lane. */
void profile_finish(struct profile *p)
{
	int prev[BACKEND_MAX_LANES];

	if (p->n == 0)
		return;
	profile_close(p);
	p->real->synchronize();
	for (int l = 0; l < BACKEND_MAX_LANES; l++)
		prev[l] = -1;
	for (int i = 0; i < p->n; i++) {
		int l = p->lane[i], j = prev[l];

		if (j >= 0 && p->cat[j] >= 0)
			p->ms[p->cat[j]] += p->real->event_elapsed_ms(p->ev[j], p->ev[i]);
		prev[l] = i;
	}
	p->done = 1;
}

int profile_json(const struct profile *p, char *buf, size_t n, long long ckpt_d2h, long long ckpt_h2d)
{
	double total = 0;
	size_t off = 0;

	if (n)
		buf[0] = '\0';
	if (!p->done)
		return -1;
	bprintf(buf, n, &off, "{");
	for (int c = 0; c < PROF_N; c++) {
		bprintf(buf, n, &off, "\"%s\":{\"ms\":%.3f,\"n\":%ld},", prof_names[c], p->ms[c], p->count[c]);
		total += p->ms[c];
	}
	bprintf(buf, n, &off, "\"total_ms\":%.3f,\"events\":%d,\"ckpt_d2h_bytes\":%lld,\"ckpt_h2d_bytes\":%lld}", total,
	        p->n, ckpt_d2h, ckpt_h2d);
	return off < n ? (int)off : -1;
}
