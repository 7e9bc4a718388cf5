/* tools/poros-train/engine.c: forward, backward and the two schedules.
 *
 * Dimension letters as in kernels/ops.h: B batch, S sequence, T = B*S
 * tokens of one micro-batch, C hidden, H/G query/kv heads, D head dim,
 * F intermediate, V vocabulary, R rank, k micro-batches per step, L layers.
 *
 * Parity: both schedules call the same layer_forward / layer_backward /
 * head code; only the loop order differs.  Every LoRA gradient receives its
 * micro-batch contributions in the order 1..k in both (resident runs the
 * micro-batches one after another; blockwise runs 1..k through each layer
 * in backward), every op is deterministic, and recomputation from a
 * checkpoint reproduces the forward bits, so losses and adapters are
 * bit-identical.
 *
 * Memory (blockwise): the input of every layer for every micro-batch is
 * a checkpoint in pinned host memory (copied out on STREAM_AUX while the
 * next layer computes, copied back a layer ahead in backward), so the
 * device holds two sets of k checkpoints, the activations of one layer of
 * one micro-batch, and one dequantized layer; the embedding table stays
 * on the host (the step's rows are gathered there and copied up).
 *
 * Profiling (POROS_PROFILE=1 in the environment): an event on the compute
 * stream at every change of op category; the time between two events is
 * the category's.  Off, it costs one branch per op. */
#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum { PROJ_Q, PROJ_K, PROJ_V, PROJ_O, PROJ_GATE, PROJ_UP, PROJ_DOWN };

/* Op categories of the profile, in the order events.jsonl lists them. */
enum prof_cat {
	PROF_GEMM_FWD, PROF_GEMM_BWD, PROF_LORA_FWD, PROF_LORA_BWD, PROF_ATTN_FWD, PROF_ATTN_BWD, PROF_NORM,
	PROF_ROPE, PROF_SWIGLU, PROF_ELEMENTWISE, PROF_HEAD, PROF_DEQUANT, PROF_EMBED, PROF_OPTIM, PROF_WAIT_COPY,
	PROF_OTHER, PROF_N
};
static const char *const prof_names[PROF_N] = {
	"gemm_fwd", "gemm_bwd_input", "lora_fwd", "lora_bwd", "attn_fwd", "attn_bwd", "norm", "rope", "swiglu",
	"elementwise", "head_ce", "dequant", "embedding", "optimizer", "wait_copy", "other",
};

/* Logits are computed this many token rows at a time so a 152k vocabulary
 * never needs a (T, V) buffer. */
#define HEAD_CHUNK 128
#define LORA_ALIGN_FLOATS 64

struct layer_view {
	const bf16 *w[N_PROJ];
	int ld[N_PROJ];      /* row pitch of w[m]: its K, or K + E with the LoRA extension */
	const bf16 *bias[4];
	const bf16 *in_norm, *post_norm, *q_norm, *k_norm;
};

/* What one layer's forward keeps for its backward (one micro-batch).  The
 * inputs of the base GEMMs (xn, att, xn2, h) have E spare columns per row
 * (rows K + E apart) for the LoRA extension (kernels/ops.h). */
struct layer_act {
	const float *x;      /* (T,C) the layer input (not owned) */
	bf16 *xn;            /* (T,C) input_layernorm(x) */
	float *rstd1;        /* (T) */
	float *q, *k, *v;    /* (T,H*D), (T,G*D) x2: after q/k norm and rope */
	float *q_pre, *k_pre;  /* qk_norm: projections before the norm */
	float *rstd_q, *rstd_k; /* (T*H), (T*G) */
	float *lse;          /* (B,H,S) */
	bf16 *att;           /* (T,H*D) attention output */
	float *x2;           /* (T,C) x + o_proj(att) */
	bf16 *xn2;           /* (T,C) post_attention_layernorm(x2) */
	float *rstd2;        /* (T) */
	float *gate, *up;    /* (T,F) */
	bf16 *h;             /* (T,F) silu(gate) * up */
	float *u[N_PROJ];    /* (T,R) LoRA A outputs of targeted projections */
};

/* Backward scratch, shared by every layer. */
struct grad_scratch {
	float *dxn;          /* (T,C) gradient of a norm output */
	bf16 *dout16;        /* (T,max N + E) bf16 upstream gradient of a base GEMM, rows N + E apart */
	float *dh;           /* (T,F) */
	bf16 *dgate, *dup;   /* (T,F), rows F + E apart, rounded as the gate/up backward reads them */
	float *datt;         /* (T,H*D) */
	float *dq, *dk, *dv; /* (T,H*D), (T,G*D), (T,G*D) */
	float *dq_pre, *dk_pre;
	float *du;           /* (T,R) */
	float *lora_scratch; /* (T,max K) fp32 for the LoRA ops' partial sums (shared region) */
};

struct slab {
	unsigned char *d;
	int block;           /* the block it holds or is receiving; -1: none */
	struct backend_event *copied, *freed;
	int freed_recorded;
};

struct span {
	struct backend_event *begin, *end;
};

/* The blockwise layer checkpoints: set s of the two device sets holds the
 * inputs (k,T,C) of one layer; host holds every layer's. */
struct ckpt_sets {
	float *host;              /* (L,k,T,C) pinned */
	float *dev[2];            /* (k,T,C) each */
	int layer[2];             /* the layer whose inputs set s holds; -1: none */
	struct backend_event *ready, *saved[2], *loaded[2], *freed[2];
	int saved_rec[2], loaded_rec[2], freed_rec[2];
	long long d2h_bytes, h2d_bytes;
};

struct profile {
	int on;
	struct backend_event **ev;
	int *cat;                 /* category of the time from ev[i] to ev[i+1] */
	int n, cap, cur;
	long count[PROF_N];
	double ms[PROF_N];
	int done;                 /* ms holds the last step's times */
};

struct engine {
	const struct backend *be;
	const struct poros_ops *op;
	const struct train_config *cfg;
	const struct model_config *mc;
	const struct host_weights *hw;
	struct token_source *data;
	struct dev_alloc alloc;
	char err[512];           /* why the last step failed, when not a number */

	int L, C, F, H, G, D, V, R, B, S, T, k;
	int HD, GD;
	float eps, lora_scale, dropout;
	int blockwise, bs, nb; /* block size and count (blockwise) */

	/* base weights on the device: final norm and lm_head (and the
	 * embedding only when tied to lm_head); glob_start is the first byte
	 * of the host globals the device copy holds */
	unsigned char *d_globals;
	size_t glob_start;
	const bf16 *final_norm, *lm_head;
	bf16 *d_embed_rows;                /* (k,T,C) the step's embedding rows */
	int32_t *d_iota;                   /* (T) 0..T-1: row t of the gathered rows */
	unsigned char *d_layers; /* resident: all layers */
	struct slab slab[2];     /* blockwise */
	bf16 *d_dequant;         /* NF4: one dequantized layer */
	int dq_layer;            /* the layer it holds; -1 none */
	/* The LoRA extension (kernels/ops.h): E extra reduction columns of
	 * every base GEMM of a targeted projection, on for NF4 (the dequant
	 * buffer has room for them); 0 when off.  ext_bwd: the backward rides
	 * too (no dropout).  Each projection's dequantized weight is (N + E,
	 * K + E) at dq_off[m]; its extension is rewritten whenever the buffer
	 * gets a layer or the adapter changed (lora_ver counts changes). */
	int E, ext_bwd;
	size_t dq_off[N_PROJ], dq_bytes;
	long lora_ver, dq_ext_ver;

	struct lora_layout lora;
	float *d_lora, *d_grad, *d_m, *d_v;
	float *d_sumsq, *d_sumsq_scratch;
	float *d_cos, *d_sin;

	int32_t *d_targets;            /* (k,T) */
	/* Two host stagings of a step's batch: while step s runs on the
	 * device from one, a worker thread reads step s+1's tokens from the
	 * token source (tokenizing, packing) and gathers their embedding rows
	 * into the other, so data preparation never stalls a step. */
	struct staging {
		int32_t *tokens, *targets; /* (k,T), pinned */
		bf16 *rows;                /* (k,T,C), pinned */
		int *n_pred;               /* (k) */
		int step, rc;
		char err[256];
	} stage[2];
	int cur;                       /* the staging of the loaded step */
	pthread_t prefetch_thread;
	int prefetch_running;
	int32_t *h_tokens, *h_targets; /* the loaded step's staging */
	int loaded_step;               /* the step whose tokens are on the device */
	int *n_pred;                   /* (k) predicted tokens of each micro-batch */
	long long n_supervised;        /* their sum: the step's loss is the mean over these */

	float **ckpt;   /* resident: L+1 inputs of layers */
	int n_ckpt;
	struct ckpt_sets cs; /* blockwise */
	float **dresid; /* blockwise: k; resident: 1 */
	struct layer_act act; /* one layer of one micro-batch */
	/* resident without recompute: every layer's activations of one
	 * micro-batch (L of them); NULL otherwise */
	struct layer_act *acts;
	struct grad_scratch g;
	float *attn_scratch;

	bf16 *hn, *dlogits;
	float *head_rstd, *dhn, *logits, *losses; /* losses (k,T) */
	float *h_losses;
	int chunk;

	/* timing: events recorded into spans, read back after the step */
	struct backend_event *step_begin;
	struct span *copies, *computes;
	int max_copies, max_computes, n_copies, n_computes;
	long long h2d_bytes;
	struct profile prof;
};

static int seterr(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int seterr(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
	return -1;
}

/* --- carving one allocation into buffers ---------------------------------
 * A plan runs twice: with base NULL it only sums sizes, then with the
 * allocation it hands out the same aligned pieces. */

struct carver {
	unsigned char *base;
	size_t off;
};

static void *carve(struct carver *cv, size_t bytes)
{
	void *p = cv->base ? cv->base + cv->off : NULL;

	cv->off = (cv->off + bytes + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
	return p;
}

#define CARVE_F32(cv, n) ((float *)carve((cv), (size_t)(n) * sizeof(float)))
#define CARVE_BF16(cv, n) ((bf16 *)carve((cv), (size_t)(n) * sizeof(bf16)))

static int targeted(const struct engine *e, int m)
{
	return (e->lora.mask >> m) & 1u;
}

static void plan_act(struct engine *e, struct carver *cv, struct layer_act *a)
{
	long T = e->T;

	memset(a, 0, sizeof *a);
	a->xn = CARVE_BF16(cv, T * (e->C + e->E));
	a->rstd1 = CARVE_F32(cv, T);
	a->q = CARVE_F32(cv, T * e->HD);
	a->k = CARVE_F32(cv, T * e->GD);
	a->v = CARVE_F32(cv, T * e->GD);
	if (e->mc->qk_norm) {
		a->q_pre = CARVE_F32(cv, T * e->HD);
		a->k_pre = CARVE_F32(cv, T * e->GD);
		a->rstd_q = CARVE_F32(cv, T * e->H);
		a->rstd_k = CARVE_F32(cv, T * e->G);
	}
	a->lse = CARVE_F32(cv, T * e->H);
	a->att = CARVE_BF16(cv, T * (e->HD + e->E));
	a->x2 = CARVE_F32(cv, T * e->C);
	a->xn2 = CARVE_BF16(cv, T * (e->C + e->E));
	a->rstd2 = CARVE_F32(cv, T);
	a->gate = CARVE_F32(cv, T * e->F);
	a->up = CARVE_F32(cv, T * e->F);
	a->h = CARVE_BF16(cv, T * (e->F + e->E));
	for (int m = 0; m < N_PROJ; m++)
		if (targeted(e, m))
			a->u[m] = CARVE_F32(cv, T * e->R);
}

/* Scratch that lives only inside one op call or one head chunk, so one
 * region serves them all: the attention scratch, the LoRA ops' partial sums
 * (T, max K), and the head's logits (chunk,V) fp32 + dlogits bf16. */
static void plan_shared(struct engine *e, struct carver *cv, long max_k)
{
	size_t attn = attention_scratch_floats(e->B, e->S, e->H, e->G, e->D) * sizeof(float);
	size_t lora = (size_t)e->T * max_k * sizeof(float);
	size_t logits = ((size_t)e->chunk * e->V * sizeof(float) + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
	size_t head = logits + (size_t)e->chunk * e->V * sizeof(bf16), bytes = attn;
	unsigned char *base;

	if (lora > bytes)
		bytes = lora;
	if (head > bytes)
		bytes = head;
	base = carve(cv, bytes);
	e->attn_scratch = (float *)base;
	e->g.lora_scratch = (float *)base;
	e->logits = (float *)base;
	e->dlogits = base ? (bf16 *)(base + logits) : NULL;
}

static void plan_scratch(struct engine *e, struct carver *cv)
{
	long T = e->T, max_n = e->C;

	if (e->F > max_n)
		max_n = e->F;
	if (e->HD > max_n)
		max_n = e->HD;
	e->g.dxn = CARVE_F32(cv, T * e->C);
	e->g.dout16 = CARVE_BF16(cv, T * (max_n + e->E));
	e->g.dh = CARVE_F32(cv, T * e->F);
	e->g.dgate = CARVE_BF16(cv, T * (e->F + e->E));
	e->g.dup = CARVE_BF16(cv, T * (e->F + e->E));
	e->g.datt = CARVE_F32(cv, T * e->HD);
	e->g.dq = CARVE_F32(cv, T * e->HD);
	e->g.dk = CARVE_F32(cv, T * e->GD);
	e->g.dv = CARVE_F32(cv, T * e->GD);
	if (e->mc->qk_norm) {
		e->g.dq_pre = CARVE_F32(cv, T * e->HD);
		e->g.dk_pre = CARVE_F32(cv, T * e->GD);
	}
	e->g.du = CARVE_F32(cv, T * e->R);
	plan_shared(e, cv, max_n);
}

static void plan_head(struct engine *e, struct carver *cv)
{
	long T = e->T;

	e->hn = CARVE_BF16(cv, T * e->C);
	e->head_rstd = CARVE_F32(cv, T);
	e->dhn = CARVE_F32(cv, T * e->C);
	e->losses = CARVE_F32(cv, T * e->k);
}

/* A list of n (T,C) fp32 buffers. */
static void plan_streams(struct engine *e, struct carver *cv, float **list, int n)
{
	for (int i = 0; i < n; i++)
		list[i] = CARVE_F32(cv, (long)e->T * e->C);
}

static void plan_misc(struct engine *e, struct carver *cv)
{
	e->d_targets = carve(cv, (size_t)e->k * e->T * sizeof(int32_t));
	e->d_iota = carve(cv, (size_t)e->T * sizeof(int32_t));
	e->d_cos = CARVE_F32(cv, (long)e->S * (e->D / 2));
	e->d_sin = CARVE_F32(cv, (long)e->S * (e->D / 2));
	e->d_sumsq = CARVE_F32(cv, 1);
	e->d_sumsq_scratch = CARVE_F32(cv, sumsq_scratch_floats(e->lora.total));
}

/* --- LoRA layout and initialisation --------------------------------------- */

static void lora_layout_init(struct lora_layout *lo, const struct layer_layout *lay, int L, int R, unsigned mask)
{
	long off = 0;

	lo->n_layers = L;
	lo->rank = R;
	lo->mask = mask;
	lo->slot = xcalloc((size_t)L * N_PROJ, sizeof *lo->slot);
	for (int l = 0; l < L; l++)
		for (int m = 0; m < N_PROJ; m++) {
			struct lora_slot *s = &lo->slot[l * N_PROJ + m];

			s->n_out = lay->n_out[m];
			s->n_in = lay->n_in[m];
			s->a = s->b = -1;
			if (!((mask >> m) & 1u))
				continue;
			s->a = off;
			off += ((long)R * s->n_in + LORA_ALIGN_FLOATS - 1) / LORA_ALIGN_FLOATS * LORA_ALIGN_FLOATS;
			s->b = off;
			off += ((long)s->n_out * R + LORA_ALIGN_FLOATS - 1) / LORA_ALIGN_FLOATS * LORA_ALIGN_FLOATS;
		}
	lo->total = off;
}

/* The LoRA extension's size and the dequant buffer's layout: on for NF4
 * with an adapter, when every projection's rows are whole NF4 blocks (all
 * real models), unless POROS_LORA_EXT=0 (the fallback path, for
 * comparison); each projection's slot has room for E extra rows and
 * columns. */
static void ext_layout_init(struct engine *e)
{
	const struct layer_layout *lay = &e->hw->lay;
	const char *env = getenv("POROS_LORA_EXT");
	int off_by_env = env && strcmp(env, "0") == 0;
	size_t off = 0;
	int rows_whole = 1; /* every row a whole number of NF4 blocks: a pitched row dequantizes alone */

	for (int m = 0; m < N_PROJ; m++)
		rows_whole &= lay->n_in[m] % POROS_NF4_BLOCK == 0;
	e->E = lay->nf4 && rows_whole && e->lora.mask && e->R > 0 && !off_by_env ? lora_ext_cols(e->R) : 0;
	e->ext_bwd = e->E > 0 && e->dropout == 0.0f;
	for (int m = 0; m < N_PROJ; m++) {
		size_t rows = (size_t)lay->n_out[m] + e->E, cols = (size_t)lay->n_in[m] + e->E;

		e->dq_off[m] = off;
		off += (rows * cols * sizeof(bf16) + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
	}
	e->dq_bytes = lay->nf4 ? off : 0;
	e->lora_ver = 1;
	e->dq_ext_ver = 0;
}

/* PEFT's init: A = kaiming_uniform(a=sqrt(5)), i.e. U(-1/sqrt(K), 1/sqrt(K)),
 * drawn counter-based from the seed; B = 0 so training starts at the base. */
static void lora_init_host(const struct lora_layout *lo, float *host, uint64_t seed)
{
	memset(host, 0, (size_t)lo->total * sizeof *host);
	for (int l = 0; l < lo->n_layers; l++)
		for (int m = 0; m < N_PROJ; m++) {
			const struct lora_slot *s = &lo->slot[l * N_PROJ + m];
			uint64_t key = poros_mix64(seed ^ poros_mix64(0x10a0000ull + (uint64_t)l * N_PROJ + (uint64_t)m));
			float bound = 1.0f / sqrtf((float)s->n_in);
			long n = (long)lo->rank * s->n_in;

			if (s->a < 0)
				continue;
			for (long i = 0; i < n; i++) {
				uint32_t r = (uint32_t)(poros_mix64(key ^ (uint64_t)i) >> 40);
				float u = (float)r * (1.0f / 16777216.0f);

				host[s->a + i] = (2.0f * u - 1.0f) * bound;
			}
		}
}

/* --- RoPE ------------------------------------------------------------------ */

int rope_tables(float *cos_t, float *sin_t, const struct model_config *mc, int S, char *err, size_t errsz)
{
	int D = mc->head_dim, half = D / 2;
	const char *type = mc->rope_scaling_type;
	float *inv = xmalloc((size_t)half * sizeof *inv);

	if (*type && strcmp(type, "default") != 0 && strcmp(type, "linear") != 0 && strcmp(type, "llama3") != 0) {
		free(inv);
		return seterr(err, errsz,
		              "%s: rope_scaling type \"%s\" is not supported (poros-train implements default, linear, llama3)",
		              mc->model_id, type);
	}
	for (int i = 0; i < half; i++) {
		/* as HF: 1.0 / (base ** (arange(0, D, 2).float() / D)), all fp32 */
		float expo = (float)(2 * i) / (float)D;

		inv[i] = 1.0f / powf((float)mc->rope_theta, expo);
	}
	if (strcmp(type, "linear") == 0)
		for (int i = 0; i < half; i++)
			inv[i] = inv[i] / (float)mc->rope_scaling_factor;
	if (strcmp(type, "llama3") == 0) {
		/* transformers' _compute_llama3_parameters, elementwise in fp32 */
		float factor = (float)mc->rope_scaling_factor, lo = (float)mc->rope_low_freq_factor;
		float hi = (float)mc->rope_high_freq_factor, old = (float)mc->rope_original_max_position;
		float low_wl = old / lo, high_wl = old / hi;

		if (mc->rope_original_max_position <= 0 || hi == lo) {
			free(inv);
			return seterr(err, errsz, "%s: rope_scaling llama3 needs original_max_position_embeddings and "
			              "high_freq_factor != low_freq_factor", mc->model_id);
		}
		for (int i = 0; i < half; i++) {
			float wl = 2.0f * (float)M_PI / inv[i];
			float scaled = wl > low_wl ? inv[i] / factor : inv[i];
			float smooth = (old / wl - lo) / (hi - lo);
			float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;

			inv[i] = (!(wl < high_wl) && !(wl > low_wl)) ? smoothed : scaled;
		}
	}
	for (int s = 0; s < S; s++)
		for (int i = 0; i < half; i++) {
			float f = (float)s * inv[i];

			cos_t[(size_t)s * half + i] = cosf(f);
			sin_t[(size_t)s * half + i] = sinf(f);
		}
	free(inv);
	return 0;
}

/* --- timing spans ------------------------------------------------------- */

static void span_open(struct engine *e, struct span *list, int *n, int max, int stream)
{
	if (*n < max)
		e->be->event_record(list[*n].begin, stream);
}

static void span_close(struct engine *e, struct span *list, int *n, int max, int stream)
{
	if (*n < max)
		e->be->event_record(list[(*n)++].end, stream);
}

static void compute_open(struct engine *e)
{
	span_open(e, e->computes, &e->n_computes, e->max_computes, STREAM_COMPUTE);
}

static void compute_close(struct engine *e)
{
	span_close(e, e->computes, &e->n_computes, e->max_computes, STREAM_COMPUTE);
}

/* --- profile ---------------------------------------------------------------- */

/* An event on the compute stream opening a segment of category cat (-1:
 * the end of the step). */
static void prof_event(struct engine *e, int cat)
{
	struct profile *pr = &e->prof;

	if (pr->n == pr->cap) {
		int cap = pr->cap ? 2 * pr->cap : 1024;

		pr->ev = xrealloc(pr->ev, (size_t)cap * sizeof *pr->ev);
		pr->cat = xrealloc(pr->cat, (size_t)cap * sizeof *pr->cat);
		for (int i = pr->cap; i < cap; i++)
			if ((pr->ev[i] = e->be->event_create()) == NULL)
				die(EXIT_RUNTIME, "%s backend: cannot create profiling events", e->be->name);
		pr->cap = cap;
	}
	e->be->event_record(pr->ev[pr->n], STREAM_COMPUTE);
	pr->cat[pr->n++] = cat;
	pr->cur = cat;
}

/* The work queued next on the compute stream belongs to cat. */
static void prof_mark(struct engine *e, int cat)
{
	if (!e->prof.on)
		return;
	e->prof.count[cat]++;
	if (cat != e->prof.cur)
		prof_event(e, cat);
}

static void prof_begin(struct engine *e)
{
	if (!e->prof.on)
		return;
	e->prof.n = 0;
	e->prof.cur = -1;
	e->prof.done = 0;
	memset(e->prof.count, 0, sizeof e->prof.count);
	memset(e->prof.ms, 0, sizeof e->prof.ms);
	prof_mark(e, PROF_OTHER);
}

/* After the step's last op: the event that closes the last segment. */
static void prof_close(struct engine *e)
{
	if (e->prof.on && e->prof.n > 0 && e->prof.cur != -1)
		prof_event(e, -1);
}

/* The times of every segment, once the closing event has completed. */
static void prof_finish(struct engine *e)
{
	struct profile *pr = &e->prof;

	if (!pr->on || pr->n == 0)
		return;
	prof_close(e);
	e->be->event_synchronize(pr->ev[pr->n - 1]);
	for (int i = 0; i + 1 < pr->n; i++)
		pr->ms[pr->cat[i]] += e->be->event_elapsed_ms(pr->ev[i], pr->ev[i + 1]);
	pr->done = 1;
}

/* --- weight views --------------------------------------------------------- */

/* Pointers into one layer record on the device; with NF4 the projections
 * are dequantized into the dequant buffer unless it already holds this
 * layer (the base never changes, so that copy stays valid). */
static void make_view(struct engine *e, struct layer_view *v, const unsigned char *rec, int layer)
{
	const struct layer_layout *lay = &e->hw->lay;
	const size_t norm_off[4] = { lay->in_norm, lay->post_norm, lay->q_norm, lay->k_norm };
	const bf16 **norm[4] = { &v->in_norm, &v->post_norm, &v->q_norm, &v->k_norm };

	for (int i = 0; i < 4; i++) {
		*norm[i] = norm_off[i] == LAYOUT_NONE ? NULL : (const bf16 *)(rec + norm_off[i]);
		v->bias[i] = lay->bias[i] == LAYOUT_NONE ? NULL : (const bf16 *)(rec + lay->bias[i]);
	}
	if (!lay->nf4) {
		for (int m = 0; m < N_PROJ; m++) {
			v->w[m] = (const bf16 *)(rec + lay->weight[m]);
			v->ld[m] = lay->n_in[m];
		}
		return;
	}
	{
		unsigned char *dst = (unsigned char *)e->d_dequant;
		int fresh = e->dq_layer != layer, ext = e->E > 0 && (fresh || e->dq_ext_ver != e->lora_ver);

		for (int m = 0; m < N_PROJ; m++) {
			const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + m];
			bf16 *w = (bf16 *)(dst + e->dq_off[m]);
			int ld = lay->n_in[m] + e->E;

			if (fresh) {
				prof_mark(e, PROF_DEQUANT);
				e->op->nf4_dequantize(w, ld, rec + lay->weight[m], (const float *)(rec + lay->absmax[m]),
				                      lay->n_out[m], lay->n_in[m]);
			}
			/* profiled with the dequantization it follows (no mark of
			 * its own: the profile's per-category op counts stay those
			 * of the ops both paths run) */
			if (ext && s->a >= 0)
				e->op->lora_weight_ext(w, ld, e->d_lora + s->a, e->d_lora + s->b, m < 4 ? v->bias[m] : NULL,
				                       e->lora_scale, s->n_in, s->n_out, e->R);
			v->w[m] = w;
			v->ld[m] = ld;
		}
		e->dq_layer = layer;
		e->dq_ext_ver = e->lora_ver;
	}
}

/* --- one layer ------------------------------------------------------------ */

/* The dropout masks of (step, micro-batch, layer, projection): the same in
 * both schedules, the same in forward, recompute and backward. */
static uint64_t dropout_seed(const struct engine *e, int step, int mb, int layer, int m)
{
	uint64_t h = poros_mix64(e->cfg->seed ^ 0xd209007ull);

	h = poros_mix64(h ^ (uint64_t)step);
	h = poros_mix64(h ^ (uint64_t)mb);
	return poros_mix64(h ^ ((uint64_t)layer * N_PROJ + (uint64_t)m));
}

struct pass {
	int step, mb;
};

/* With the extension, A's three parts as lora_weight_ext left them in the
 * weight's rows N..N+3R-1 (the u GEMM reads them there instead of
 * splitting A again); else NULL. */
static const bf16 *ext_a3(const struct engine *e, const struct layer_view *w, int m)
{
	return e->E > 0 ? w->w[m] + (size_t)e->hw->lay.n_out[m] * w->ld[m] : NULL;
}

/* out (T,N) = (scale * B A dropout(in) + in @ W^T) (+ bias), in (T,K)
 * with rows K + E apart.  With the LoRA extension, u's parts go into in's
 * spare columns and one GEMM over K + E sums base, LoRA and bias.
 * Otherwise the LoRA term is written first and the base GEMM adds onto it
 * in its epilogue, so the (T,N) fp32 output is written once and read once,
 * not read-modify-written by a second pass. */
static void proj_forward(struct engine *e, const struct layer_view *w, struct layer_act *a, int layer, int m,
                         bf16 *in, float *out, struct pass p)
{
	const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + m];
	const bf16 *bias = m < 4 ? w->bias[m] : NULL;
	int K = s->n_in, ldx = K + e->E, ext = s->a >= 0 && e->E > 0;

	if (s->a >= 0) {
		prof_mark(e, PROF_LORA_FWD);
		e->op->lora_forward(ext ? NULL : out, a->u[m], ext ? in + K : NULL, e->g.lora_scratch, in, ldx,
		                    e->d_lora + s->a, ext_a3(e, w, m), w->ld[m], e->d_lora + s->b, e->lora_scale,
		                    e->dropout, dropout_seed(e, p.step, p.mb, layer, m), e->T, K, s->n_out, e->R);
	}
	prof_mark(e, PROF_GEMM_FWD);
	if (ext) /* the bias rides in the extension too */
		e->op->matmul_forward(out, in, ldx, w->w[m], w->ld[m], NULL, e->T, K + e->E, s->n_out, 0);
	else
		e->op->matmul_forward(out, in, ldx, w->w[m], w->ld[m], bias, e->T, K, s->n_out, s->a >= 0);
}

/* din (T,K) (+)= gradient through projection m given dout (T,N), fp32 (then
 * rounded here) or already bf16 (dout16, dout NULL; rows N + E apart, as
 * swiglu_backward writes them).  Both the base GEMM and the adapter read
 * the bf16 one.  With the extension in backward, du's parts go into its
 * spare columns and one GEMM over N + E sums both input gradients;
 * otherwise the adapter's goes first and the base GEMM adds onto it.  LoRA
 * gradients accumulate into the flat gradient buffer. */
static void proj_backward(struct engine *e, const struct layer_view *w, const struct layer_act *a, int layer, int m,
                          const bf16 *in, const float *dout, const bf16 *dout16, float *din, int accumulate,
                          struct pass p)
{
	const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + m];
	int N = s->n_out, K = s->n_in, ld = N + e->E, ext = s->a >= 0 && e->ext_bwd;

	if (dout) {
		prof_mark(e, PROF_ELEMENTWISE);
		e->op->cast_f32_to_bf16(e->g.dout16, ld, dout, e->T, N);
		dout16 = e->g.dout16;
	}
	if (s->a >= 0) {
		prof_mark(e, PROF_LORA_BWD);
		e->op->lora_backward(ext ? NULL : din, e->d_grad + s->a, e->d_grad + s->b, e->g.du,
		                     ext ? (bf16 *)dout16 + N : NULL, e->g.lora_scratch, dout16, ld, in, K + e->E, a->u[m],
		                     e->d_lora + s->a, e->d_lora + s->b, e->E > 0 ? w->w[m] + K : NULL, w->ld[m],
		                     e->lora_scale, e->dropout, dropout_seed(e, p.step, p.mb, layer, m), e->T, K, N, e->R,
		                     accumulate);
		if (!ext)
			accumulate = 1;
	}
	prof_mark(e, PROF_GEMM_BWD);
	e->op->matmul_backward_input(din, dout16, ld, w->w[m], w->ld[m], e->T, K, ext ? N + e->E : N, accumulate);
}

/* out (T,C) = the decoder layer applied to x (T,C); the activations the
 * backward needs stay in a.  out may be x (forward-only use), or NULL when
 * recomputing for the backward, which needs the activations but not the
 * output: then down_proj's base GEMM (a third of the MLP's FLOPs) and the
 * residual add are skipped, and only its LoRA u is formed. */
static void layer_forward(struct engine *e, const struct layer_view *w, struct layer_act *a, int layer, const float *x,
                          float *out, struct pass p)
{
	const struct poros_ops *op = e->op;
	int T = e->T, qk = e->mc->qk_norm;

	a->x = x;
	prof_mark(e, PROF_NORM);
	op->rmsnorm_forward(NULL, a->xn, e->C + e->E, a->rstd1, x, w->in_norm, e->eps, T, e->C);
	proj_forward(e, w, a, layer, PROJ_Q, a->xn, qk ? a->q_pre : a->q, p);
	proj_forward(e, w, a, layer, PROJ_K, a->xn, qk ? a->k_pre : a->k, p);
	proj_forward(e, w, a, layer, PROJ_V, a->xn, a->v, p);
	if (qk) {
		/* Qwen3: RMSNorm over each head's D features, before rope */
		prof_mark(e, PROF_NORM);
		op->rmsnorm_forward(a->q, NULL, e->D, a->rstd_q, a->q_pre, w->q_norm, e->eps, T * e->H, e->D);
		op->rmsnorm_forward(a->k, NULL, e->D, a->rstd_k, a->k_pre, w->k_norm, e->eps, T * e->G, e->D);
	}
	prof_mark(e, PROF_ROPE);
	op->rope_forward(a->q, e->d_cos, e->d_sin, e->B, e->S, e->H, e->D);
	op->rope_forward(a->k, e->d_cos, e->d_sin, e->B, e->S, e->G, e->D);
	prof_mark(e, PROF_ATTN_FWD);
	op->attention_forward(a->att, e->HD + e->E, a->lse, e->attn_scratch, a->q, a->k, a->v, e->B, e->S, e->H, e->G, e->D);
	proj_forward(e, w, a, layer, PROJ_O, a->att, a->x2, p);
	prof_mark(e, PROF_ELEMENTWISE);
	op->add_inplace(a->x2, x, (long)T * e->C);
	prof_mark(e, PROF_NORM);
	op->rmsnorm_forward(NULL, a->xn2, e->C + e->E, a->rstd2, a->x2, w->post_norm, e->eps, T, e->C);
	proj_forward(e, w, a, layer, PROJ_GATE, a->xn2, a->gate, p);
	proj_forward(e, w, a, layer, PROJ_UP, a->xn2, a->up, p);
	prof_mark(e, PROF_SWIGLU);
	op->swiglu_forward(a->h, e->F + e->E, a->gate, a->up, T, e->F);
	if (out == NULL) {
		const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + PROJ_DOWN];

		if (s->a >= 0) { /* u alone: no output columns */
			prof_mark(e, PROF_LORA_FWD);
			op->lora_forward(NULL, a->u[PROJ_DOWN], NULL, e->g.lora_scratch, a->h, e->F + e->E, e->d_lora + s->a,
			                 ext_a3(e, w, PROJ_DOWN), w->ld[PROJ_DOWN], e->d_lora + s->b,
			                 e->lora_scale, e->dropout, dropout_seed(e, p.step, p.mb, layer, PROJ_DOWN), T, s->n_in, 0,
			                 e->R);
		}
		return;
	}
	/* x is dead from here on, so out may alias it */
	proj_forward(e, w, a, layer, PROJ_DOWN, a->h, out, p);
	prof_mark(e, PROF_ELEMENTWISE);
	op->add_inplace(out, a->x2, (long)T * e->C);
}

/* dx (T,C): the gradient of the layer output in, of its input out. */
static void layer_backward(struct engine *e, const struct layer_view *w, const struct layer_act *a, int layer,
                           float *dx, struct pass p)
{
	const struct poros_ops *op = e->op;
	const struct grad_scratch *g = &e->g;
	int T = e->T, qk = e->mc->qk_norm;
	float *dq = g->dq, *dk = g->dk;

	/* MLP: x3 = x2 + down(silu(gate(n2)) * up(n2)), n2 = norm(x2) */
	proj_backward(e, w, a, layer, PROJ_DOWN, a->h, dx, NULL, g->dh, 0, p);
	prof_mark(e, PROF_SWIGLU);
	op->swiglu_backward(g->dgate, g->dup, e->F + e->E, g->dh, a->gate, a->up, T, e->F);
	proj_backward(e, w, a, layer, PROJ_GATE, a->xn2, NULL, g->dgate, g->dxn, 0, p);
	proj_backward(e, w, a, layer, PROJ_UP, a->xn2, NULL, g->dup, g->dxn, 1, p);
	prof_mark(e, PROF_NORM);
	op->rmsnorm_backward(dx, g->dxn, a->x2, w->post_norm, a->rstd2, T, e->C);
	/* attention: x2 = x + o(attn(rope(q), rope(k), v)), q/k/v of n1 = norm(x) */
	proj_backward(e, w, a, layer, PROJ_O, a->att, dx, NULL, g->datt, 0, p);
	prof_mark(e, PROF_ATTN_BWD);
	op->attention_backward(g->dq, g->dk, g->dv, e->attn_scratch, g->datt, a->q, a->k, a->v, a->lse, e->B, e->S, e->H,
	                       e->G, e->D);
	prof_mark(e, PROF_ROPE);
	op->rope_backward(g->dq, e->d_cos, e->d_sin, e->B, e->S, e->H, e->D);
	op->rope_backward(g->dk, e->d_cos, e->d_sin, e->B, e->S, e->G, e->D);
	if (qk) {
		prof_mark(e, PROF_NORM);
		e->be->memset_zero(g->dq_pre, (size_t)T * e->HD * sizeof(float), STREAM_COMPUTE);
		e->be->memset_zero(g->dk_pre, (size_t)T * e->GD * sizeof(float), STREAM_COMPUTE);
		op->rmsnorm_backward(g->dq_pre, g->dq, a->q_pre, w->q_norm, a->rstd_q, T * e->H, e->D);
		op->rmsnorm_backward(g->dk_pre, g->dk, a->k_pre, w->k_norm, a->rstd_k, T * e->G, e->D);
		dq = g->dq_pre;
		dk = g->dk_pre;
	}
	proj_backward(e, w, a, layer, PROJ_Q, a->xn, dq, NULL, g->dxn, 0, p);
	proj_backward(e, w, a, layer, PROJ_K, a->xn, dk, NULL, g->dxn, 1, p);
	proj_backward(e, w, a, layer, PROJ_V, a->xn, g->dv, NULL, g->dxn, 1, p);
	prof_mark(e, PROF_NORM);
	op->rmsnorm_backward(dx, g->dxn, a->x, w->in_norm, a->rstd1, T, e->C);
}

/* Recomputes layer `layer` from its input checkpoint x (activations kept),
 * then backward through it: dx (T,C) goes from the gradient of the layer
 * output to that of its input. */
static void layer_recompute_backward(struct engine *e, const struct layer_view *w, int layer, const float *x,
                                     float *dx, struct pass p)
{
	layer_forward(e, w, &e->act, layer, x, NULL, p);
	layer_backward(e, w, &e->act, layer, dx, p);
}

/* Final norm, lm_head and cross-entropy of micro-batch mb, and their
 * backward: dres (T,C) = gradient of the last layer's output. */
static void head(struct engine *e, const float *hidden, int mb, float *dres)
{
	const struct poros_ops *op = e->op;
	int T = e->T, C = e->C, V = e->V;
	/* dloss per token: the step loss is the mean over every predicted
	 * token of the step's k micro-batches (targets < 0 are not), so
	 * accumulation does not change it */
	float dloss = e->n_supervised ? (float)(1.0 / (double)e->n_supervised) : 0.0f;

	prof_mark(e, PROF_HEAD);
	op->rmsnorm_forward(NULL, e->hn, C, e->head_rstd, hidden, e->final_norm, e->eps, T, C);
	for (int off = 0; off < T; off += e->chunk) {
		int n = T - off < e->chunk ? T - off : e->chunk;

		op->matmul_forward(e->logits, e->hn + (size_t)off * C, C, e->lm_head, C, NULL, n, C, V, 0);
		op->crossentropy_forward_backward(e->dlogits, e->losses + (size_t)mb * T + off, e->logits,
		                                  e->d_targets + (size_t)mb * T + off, dloss, n, V);
		op->matmul_backward_input(e->dhn + (size_t)off * C, e->dlogits, V, e->lm_head, C, n, C, V, 0);
	}
	e->be->memset_zero(dres, (size_t)T * C * sizeof(float), STREAM_COMPUTE);
	op->rmsnorm_backward(dres, e->dhn, hidden, e->final_norm, e->head_rstd, T, C);
}

/* --- embedding ---------------------------------------------------------------- */

/* out (T,C) = the embedding of micro-batch mb: its rows were gathered on
 * the host (load_batch), so the device looks up row t for token t. */
static void embed(struct engine *e, float *out, int mb)
{
	prof_mark(e, PROF_EMBED);
	e->op->embedding_forward(out, e->d_iota, e->d_embed_rows + (size_t)mb * e->T * e->C, e->T, e->C);
}

/* --- resident schedule ---------------------------------------------------- */

static void resident_view(struct engine *e, struct layer_view *v, int layer)
{
	make_view(e, v, e->d_layers + (size_t)layer * e->hw->lay.stride, layer);
}

/* Micro-batch-major: each micro-batch runs its whole forward (keeping
 * every layer's input) and its whole backward.  With recompute (HF
 * gradient checkpointing) backward recomputes a layer from its input, then
 * goes back through it; without, every layer's activations were kept by
 * the forward.  The recomputation reproduces the forward bits, so the two
 * give the same adapters. */
static void resident_pass(struct engine *e, int step)
{
	struct layer_view v;

	compute_open(e);
	for (int j = 0; j < e->k; j++) {
		struct pass p = { step, j };

		embed(e, e->ckpt[0], j);
		for (int l = 0; l < e->L; l++) {
			resident_view(e, &v, l);
			layer_forward(e, &v, e->acts ? &e->acts[l] : &e->act, l, e->ckpt[l], e->ckpt[l + 1], p);
		}
		head(e, e->ckpt[e->L], j, e->dresid[0]);
		for (int l = e->L - 1; l >= 0; l--) {
			resident_view(e, &v, l);
			if (e->acts)
				layer_backward(e, &v, &e->acts[l], l, e->dresid[0], p);
			else
				layer_recompute_backward(e, &v, l, e->ckpt[l], e->dresid[0], p);
		}
	}
	compute_close(e);
}

/* --- blockwise schedule --------------------------------------------------- */

static int block_first(const struct engine *e, int b)
{
	return b * e->bs;
}

static int block_len(const struct engine *e, int b)
{
	int n = e->L - b * e->bs;

	return n < e->bs ? n : e->bs;
}

/* Block b always goes to slab b % 2: the forward and the backward both
 * alternate, and the two blocks at the turn of a pass are already there. */
static void slab_fetch(struct engine *e, int b, int stream)
{
	struct slab *s = &e->slab[b % 2];
	size_t stride = e->hw->lay.stride, bytes = (size_t)block_len(e, b) * stride;

	if (s->block == b)
		return;
	/* never overwrite a slab whose block the compute stream still reads */
	if (stream == STREAM_COPY && s->freed_recorded)
		e->be->stream_wait_event(STREAM_COPY, s->freed);
	if (stream == STREAM_COMPUTE)
		prof_mark(e, PROF_WAIT_COPY);
	span_open(e, e->copies, &e->n_copies, e->max_copies, stream);
	e->be->copy_h2d(s->d, e->hw->layers + (size_t)block_first(e, b) * stride, bytes, stream);
	span_close(e, e->copies, &e->n_copies, e->max_copies, stream);
	e->be->event_record(s->copied, stream);
	s->block = b;
	e->h2d_bytes += (long long)bytes;
}

static void slab_acquire(struct engine *e, int b)
{
	/* not prefetched (the first block, or prefetch disabled): without
	 * prefetch the copy runs on the compute stream, in line (the ablation) */
	slab_fetch(e, b, e->cfg->prefetch ? STREAM_COPY : STREAM_COMPUTE);
	prof_mark(e, PROF_WAIT_COPY);
	e->be->stream_wait_event(STREAM_COMPUTE, e->slab[b % 2].copied);
}

static void slab_prefetch(struct engine *e, int b)
{
	if (e->cfg->prefetch && b >= 0 && b < e->nb)
		slab_fetch(e, b, STREAM_COPY);
}

static void slab_release(struct engine *e, int b)
{
	struct slab *s = &e->slab[b % 2];

	e->be->event_record(s->freed, STREAM_COMPUTE);
	s->freed_recorded = 1;
}

static void block_view(struct engine *e, struct layer_view *v, int b, int i)
{
	make_view(e, v, e->slab[b % 2].d + (size_t)i * e->hw->lay.stride, block_first(e, b) + i);
}

/* --- blockwise layer checkpoints --------------------------------------------
 * The inputs of layer l live in device set l % 2.  Forward: once they are
 * complete, STREAM_AUX copies them to the host while layer l computes
 * (which reads, never writes, them); layer l+1 writes its outputs into the
 * same set, so it first waits for that copy.  Backward: layer l reads set
 * l % 2 while STREAM_AUX brings layer l-1's inputs into the other set,
 * after the compute stream is done with what that set held. */

static float *ckpt_buf(struct engine *e, int layer, int mb)
{
	return e->cs.dev[layer % 2] + (size_t)mb * e->T * e->C;
}

static size_t ckpt_set_bytes(const struct engine *e)
{
	return (size_t)e->k * e->T * e->C * sizeof(float);
}

/* Forward, before layer l computes: its inputs (complete on the compute
 * stream) go to the host, and the set its outputs go to must be saved. */
static void ckpt_save_inputs(struct engine *e, int l)
{
	struct ckpt_sets *cs = &e->cs;
	int s = l % 2, o = (l + 1) % 2;
	size_t bytes = ckpt_set_bytes(e);

	e->be->event_record(cs->ready, STREAM_COMPUTE);
	e->be->stream_wait_event(STREAM_AUX, cs->ready);
	e->be->copy_d2h_async(cs->host + (size_t)l * e->k * e->T * e->C, cs->dev[s], bytes, STREAM_AUX);
	e->be->event_record(cs->saved[s], STREAM_AUX);
	cs->saved_rec[s] = 1;
	cs->layer[s] = l;
	cs->d2h_bytes += (long long)bytes;
	if (cs->saved_rec[o]) {
		prof_mark(e, PROF_WAIT_COPY);
		e->be->stream_wait_event(STREAM_COMPUTE, cs->saved[o]);
	}
	cs->layer[o] = l + 1;
}

/* Backward: the inputs of layer l into set l % 2, on STREAM_AUX unless
 * they are already there. */
static void ckpt_fetch(struct engine *e, int l)
{
	struct ckpt_sets *cs = &e->cs;
	int s = l % 2;
	size_t bytes = ckpt_set_bytes(e);

	if (l < 0 || cs->layer[s] == l)
		return;
	if (cs->freed_rec[s])
		e->be->stream_wait_event(STREAM_AUX, cs->freed[s]);
	e->be->copy_h2d(cs->dev[s], cs->host + (size_t)l * e->k * e->T * e->C, bytes, STREAM_AUX);
	e->be->event_record(cs->loaded[s], STREAM_AUX);
	cs->loaded_rec[s] = 1;
	cs->layer[s] = l;
	cs->h2d_bytes += (long long)bytes;
}

/* Layer-major: the weights of a block are on the device once per pass,
 * and every micro-batch runs through each layer (each NF4 layer is
 * dequantized once per pass) while the next block is being copied. */
static void blockwise_pass(struct engine *e, int step)
{
	struct ckpt_sets *cs = &e->cs;
	struct layer_view v;
	int k = e->k;

	cs->layer[0] = cs->layer[1] = -1;
	compute_open(e);
	for (int j = 0; j < k; j++)
		embed(e, ckpt_buf(e, 0, j), j);
	compute_close(e);
	for (int b = 0; b < e->nb; b++) {
		int first = block_first(e, b), n = block_len(e, b);

		slab_acquire(e, b);
		slab_prefetch(e, b + 1);
		compute_open(e);
		for (int i = 0; i < n; i++) {
			int l = first + i;

			ckpt_save_inputs(e, l);
			block_view(e, &v, b, i);
			for (int j = 0; j < k; j++) {
				struct pass p = { step, j };

				layer_forward(e, &v, &e->act, l, ckpt_buf(e, l, j), ckpt_buf(e, l + 1, j), p);
			}
		}
		compute_close(e);
		slab_release(e, b);
	}
	compute_open(e);
	for (int j = 0; j < k; j++)
		head(e, ckpt_buf(e, e->L, j), j, e->dresid[j]);
	/* the set that held the last layer's outputs is free for layer L-2 */
	e->be->event_record(cs->freed[e->L % 2], STREAM_COMPUTE);
	cs->freed_rec[e->L % 2] = 1;
	compute_close(e);
	for (int b = e->nb - 1; b >= 0; b--) {
		int first = block_first(e, b), n = block_len(e, b);

		slab_acquire(e, b);
		slab_prefetch(e, b - 1);
		compute_open(e);
		for (int i = n - 1; i >= 0; i--) {
			int l = first + i, s = l % 2;

			ckpt_fetch(e, l);
			ckpt_fetch(e, l - 1);
			if (cs->loaded_rec[s]) {
				prof_mark(e, PROF_WAIT_COPY);
				e->be->stream_wait_event(STREAM_COMPUTE, cs->loaded[s]);
			}
			block_view(e, &v, b, i);
			for (int j = 0; j < k; j++) {
				struct pass p = { step, j };

				layer_recompute_backward(e, &v, l, ckpt_buf(e, l, j), e->dresid[j], p);
			}
			e->be->event_record(cs->freed[s], STREAM_COMPUTE);
			cs->freed_rec[s] = 1;
		}
		compute_close(e);
		slab_release(e, b);
	}
}

/* --- steps ------------------------------------------------------------------ */

/* The embedding rows of the step's tokens, from the host table into the
 * pinned staging buffer: k*T rows instead of a V-row table on the device. */
static int gather_embeddings(const struct engine *e, struct staging *st)
{
	const bf16 *table = (const bf16 *)(e->hw->globals + e->hw->glob.embed);
	long n = (long)e->k * e->T;

	for (long i = 0; i < n; i++) {
		int32_t tok = st->tokens[i];

		if (tok < 0 || tok >= e->V)
			return seterr(st->err, sizeof st->err, "token id %d out of the vocabulary (%d)", (int)tok, e->V);
		memcpy(st->rows + (size_t)i * e->C, table + (size_t)tok * e->C, (size_t)e->C * sizeof(bf16));
	}
	return 0;
}

/* Reads one step's k micro-batches, in order, from the token source into a
 * staging.  Runs on the caller's thread for the first step, then on the
 * prefetch thread; only one of them touches the token source at a time. */
static void stage_batch(struct engine *e, struct staging *st, int step)
{
	st->step = step;
	st->rc = 0;
	for (int j = 0; j < e->k && st->rc == 0; j++) {
		int32_t *tg = st->targets + (size_t)j * e->T;

		if (token_source_next(e->data, st->tokens + (size_t)j * e->T, tg, NULL, e->B, st->err, sizeof st->err) < 0) {
			st->rc = -1;
			break;
		}
		st->n_pred[j] = 0;
		for (int t = 0; t < e->T; t++)
			st->n_pred[j] += tg[t] >= 0;
	}
	if (st->rc == 0 && gather_embeddings(e, st) < 0)
		st->rc = -1;
}

struct prefetch_job {
	struct engine *e;
	int step;
};

static void *prefetch_main(void *arg)
{
	struct prefetch_job *job = arg;
	struct engine *e = job->e;

	stage_batch(e, &e->stage[1 - e->cur], job->step);
	free(job);
	return NULL;
}

static void prefetch_join(struct engine *e)
{
	if (e->prefetch_running) {
		pthread_join(e->prefetch_thread, NULL);
		e->prefetch_running = 0;
	}
}

/* Starts staging step+1 in the background; on failure to start a thread it
 * is simply staged in line at the next step. */
static void prefetch_start(struct engine *e, int step)
{
	struct prefetch_job *job;
	const char *off = getenv("POROS_NO_DATA_PREFETCH");

	/* the ablation: stage every batch in line, at its step */
	if (off && *off && strcmp(off, "0") != 0)
		return;
	job = xmalloc(sizeof *job);
	job->e = e;
	job->step = step;
	e->stage[1 - e->cur].step = 0;
	if (pthread_create(&e->prefetch_thread, NULL, prefetch_main, job) == 0)
		e->prefetch_running = 1;
	else
		free(job);
}

/* The step's batch on the device: staged by the prefetch thread while the
 * previous step ran (or now, for the first step), copied on the compute
 * stream, and the next step's staging started. */
static int load_batch(struct engine *e, int step)
{
	size_t n = (size_t)e->k * e->T;
	struct staging *st;

	if (e->loaded_step == step)
		return 0;
	prefetch_join(e);
	if (e->loaded_step > 0 && e->stage[1 - e->cur].step == step)
		e->cur = 1 - e->cur;
	else
		stage_batch(e, &e->stage[e->cur], step);
	st = &e->stage[e->cur];
	if (st->rc < 0)
		return seterr(e->err, sizeof e->err, "%s", st->err);
	e->h_tokens = st->tokens;
	e->h_targets = st->targets;
	memcpy(e->n_pred, st->n_pred, (size_t)e->k * sizeof *e->n_pred);
	e->n_supervised = 0;
	for (int j = 0; j < e->k; j++)
		e->n_supervised += e->n_pred[j];
	/* The other staging was last read by the previous step's copies, which
	 * that step's end (reading its losses back) has waited for. */
	e->be->copy_h2d(e->d_embed_rows, st->rows, n * e->C * sizeof(bf16), STREAM_COMPUTE);
	e->be->copy_h2d(e->d_targets, st->targets, n * sizeof(int32_t), STREAM_COMPUTE);
	e->loaded_step = step;
	prefetch_start(e, step + 1);
	return 0;
}

double engine_forward_backward(struct engine *e, int step)
{
	double loss = 0;

	e->n_copies = e->n_computes = 0;
	e->h2d_bytes = 0;
	e->cs.d2h_bytes = e->cs.h2d_bytes = 0;
	e->err[0] = '\0';
	e->be->event_record(e->step_begin, STREAM_COMPUTE);
	prof_begin(e);
	if (load_batch(e, step) < 0)
		return NAN;
	e->be->memset_zero(e->d_grad, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	if (e->blockwise)
		blockwise_pass(e, step);
	else
		resident_pass(e, step);
	prof_mark(e, PROF_OTHER);
	e->be->copy_d2h(e->h_losses, e->losses, (size_t)e->k * e->T * sizeof(float));
	/* summed on the host in one fixed order, the same for both schedules;
	 * ignored targets have loss 0 */
	for (int j = 0; j < e->k; j++)
		for (int t = 0; t < e->T; t++)
			loss += e->h_losses[(size_t)j * e->T + t];
	return e->n_supervised ? loss / (double)e->n_supervised : NAN; /* no target: no loss */
}

const char *engine_error(const struct engine *e)
{
	return e->err[0] ? e->err : NULL;
}

double lr_at(const struct train_config *c, int step)
{
	/* HF counts scheduler steps from 0: the first optimizer step uses
	 * lr_lambda(0) */
	double s = step - 1, w = c->warmup_steps, n = c->steps, progress;

	if (s < w)
		return c->lr * s / (w > 1 ? w : 1);
	progress = (s - w) / (n - w > 1 ? n - w : 1);
	switch (c->lr_schedule) {
	case LR_LINEAR:
		return c->lr * fmax(0.0, (n - s) / (n - w > 1 ? n - w : 1));
	case LR_COSINE:
		return c->lr * fmax(0.0, 0.5 * (1.0 + cos(M_PI * progress)));
	case LR_CONSTANT:
	default:
		return c->lr;
	}
}

/* Length of the part of [b0,b1] covered by the (ordered, disjoint) spans. */
static double covered(double b0, double b1, const double *begin, const double *end, int n)
{
	double sum = 0;

	for (int i = 0; i < n; i++) {
		double lo = b0 > begin[i] ? b0 : begin[i], hi = b1 < end[i] ? b1 : end[i];

		if (hi > lo)
			sum += hi - lo;
	}
	return sum;
}

/* h2d_s: copy time; compute_s: compute-stream busy time; hidden: the part
 * of the copy time that ran while the compute stream was busy.  On the CPU
 * backend copies never overlap (they run in line), and the numbers say so. */
static void read_timing(struct engine *e, struct step_stats *st)
{
	const struct backend *be = e->be;
	int nc = e->n_computes, nk = e->n_copies;
	double *cb = xmalloc((size_t)(nc + 1) * sizeof *cb), *ce = xmalloc((size_t)(nc + 1) * sizeof *ce);
	double hidden = 0, h2d = 0, compute = 0;

	for (int i = 0; i < nc; i++) {
		cb[i] = be->event_elapsed_ms(e->step_begin, e->computes[i].begin) * 1e-3;
		ce[i] = be->event_elapsed_ms(e->step_begin, e->computes[i].end) * 1e-3;
		compute += ce[i] - cb[i];
	}
	for (int i = 0; i < nk; i++) {
		double b0 = be->event_elapsed_ms(e->step_begin, e->copies[i].begin) * 1e-3;
		double b1 = be->event_elapsed_ms(e->step_begin, e->copies[i].end) * 1e-3;

		h2d += b1 - b0;
		hidden += covered(b0, b1, cb, ce, nc);
	}
	st->h2d_bytes = e->h2d_bytes;
	st->h2d_s = h2d;
	st->compute_s = compute;
	st->copy_hidden_frac = nk > 0 && h2d > 0 ? fmin(1.0, hidden / h2d) : NAN;
	free(cb);
	free(ce);
}

/* snprintf into buf at *off, never past n (the length still counts). */
static void bprintf(char *buf, size_t n, size_t *off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void bprintf(char *buf, size_t n, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int w;

	va_start(ap, fmt);
	w = vsnprintf(*off < n ? buf + *off : NULL, *off < n ? n - *off : 0, fmt, ap);
	va_end(ap);
	if (w > 0)
		*off += (size_t)w;
}

int engine_profile_json(const struct engine *e, char *buf, size_t n)
{
	const struct profile *pr = &e->prof;
	double total = 0;
	size_t off = 0;

	if (n)
		buf[0] = '\0';
	if (!pr->on || !pr->done)
		return -1;
	bprintf(buf, n, &off, "{");
	for (int c = 0; c < PROF_N; c++) {
		bprintf(buf, n, &off, "\"%s\":{\"ms\":%.3f,\"n\":%ld},", prof_names[c], pr->ms[c], pr->count[c]);
		total += pr->ms[c];
	}
	bprintf(buf, n, &off, "\"total_ms\":%.3f,\"events\":%d,\"ckpt_d2h_bytes\":%lld,\"ckpt_h2d_bytes\":%lld}", total,
	        pr->n, e->cs.d2h_bytes, e->cs.h2d_bytes);
	return off < n ? (int)off : -1;
}

int engine_vram_breakdown_json(const struct engine *e, char *buf, size_t n)
{
	const char *name[32];
	size_t bytes[32], off = 0;
	int np = dev_alloc_breakdown(&e->alloc, name, bytes, 32);

	bprintf(buf, n, &off, "{");
	for (int i = 0; i < np && i < 32; i++)
		bprintf(buf, n, &off, "%s\"%s\":%.3f", i ? "," : "", name[i], (double)bytes[i] / MIB);
	bprintf(buf, n, &off, "}");
	return off < n ? (int)off : -1;
}

/* The profile on stderr too, so a run that keeps only its log still has it. */
static void engine_profile_log(const struct engine *e, int step)
{
	char buf[4096];

	if (engine_profile_json(e, buf, sizeof buf) > 0)
		fprintf(stderr, "%s: profile step %d: %s\n", progname, step, buf);
}

int engine_step(struct engine *e, int step, struct step_stats *st)
{
	double t0 = now_seconds();
	float sumsq, norm, scale = 1.0f;

	memset(st, 0, sizeof *st);
	st->loss = engine_forward_backward(e, step);
	st->tokens_supervised = e->n_supervised;
	compute_open(e);
	prof_mark(e, PROF_OPTIM);
	e->op->sumsq(e->d_sumsq, e->d_sumsq_scratch, e->d_grad, e->lora.total);
	e->be->copy_d2h(&sumsq, e->d_sumsq, sizeof sumsq);
	norm = sqrtf(sumsq);
	st->grad_norm = norm;
	st->lr = lr_at(e->cfg, step);
	if ((!isfinite(st->loss) && (e->n_supervised > 0 || e->err[0])) || !isfinite(norm)) {
		prof_close(e);
		compute_close(e);
		e->be->synchronize();
		st->step_s = now_seconds() - t0;
		read_timing(e, st);
		prof_finish(e);
		return -1;
	}
	/* torch.nn.utils.clip_grad_norm_: coef = max / (norm + 1e-6), clamped to 1 */
	if (e->cfg->max_grad_norm > 0) {
		float coef = (float)e->cfg->max_grad_norm / (norm + 1e-6f);

		scale = coef < 1.0f ? coef : 1.0f;
	}
	prof_mark(e, PROF_OPTIM);
	if (e->n_supervised > 0) { /* a step without a target leaves the adapter as it was */
		e->op->adamw_update(e->d_lora, e->d_grad, e->d_m, e->d_v, e->lora.total, (float)st->lr, 0.9f, 0.999f,
		                    1e-8f, (float)e->cfg->weight_decay, scale, step);
		e->lora_ver++;
	}
	prof_close(e);
	compute_close(e);
	e->be->synchronize();
	st->step_s = now_seconds() - t0;
	read_timing(e, st);
	prof_finish(e);
	if (e->prof.on)
		engine_profile_log(e, step);
	return 0;
}

/* --- setup ------------------------------------------------------------------ */

static void *dalloc_plan(struct engine *e, void (*plan)(struct engine *, struct carver *), const char *purpose,
                         const char *what)
{
	struct carver cv = { NULL, 0 };
	char sz[32];
	void *base;

	plan(e, &cv);
	dev_alloc_set_purpose(&e->alloc, purpose);
	base = dev_alloc(&e->alloc, cv.off, "%s (%s)", what, format_bytes(sz, sizeof sz, (double)cv.off));
	if (base == NULL)
		return NULL;
	cv.base = base;
	cv.off = 0;
	plan(e, &cv);
	return base;
}

static void plan_acts(struct engine *e, struct carver *cv)
{
	if (e->acts)
		for (int l = 0; l < e->L; l++)
			plan_act(e, cv, &e->acts[l]);
	else
		plan_act(e, cv, &e->act);
}

static void plan_ckpts(struct engine *e, struct carver *cv)
{
	if (e->blockwise) {
		e->cs.dev[0] = CARVE_F32(cv, (long)e->k * e->T * e->C);
		e->cs.dev[1] = CARVE_F32(cv, (long)e->k * e->T * e->C);
	} else {
		plan_streams(e, cv, e->ckpt, e->n_ckpt);
	}
}

static void plan_dresid(struct engine *e, struct carver *cv)
{
	plan_streams(e, cv, e->dresid, e->blockwise ? e->k : 1);
}

static void plan_embed_rows(struct engine *e, struct carver *cv)
{
	e->d_embed_rows = CARVE_BF16(cv, (long)e->k * e->T * e->C);
}

static void set_dims(struct engine *e)
{
	const struct model_config *mc = e->mc;
	const struct train_config *c = e->cfg;
	const char *prof = getenv("POROS_PROFILE");

	e->L = mc->num_hidden_layers;
	e->C = mc->hidden_size;
	e->F = mc->intermediate_size;
	e->H = mc->num_attention_heads;
	e->G = mc->num_key_value_heads;
	e->D = mc->head_dim;
	e->V = mc->vocab_size;
	e->HD = e->H * e->D;
	e->GD = e->G * e->D;
	e->R = c->rank;
	e->B = c->batch_size;
	e->S = c->seq_len;
	e->T = e->B * e->S;
	e->k = c->accum;
	e->eps = (float)mc->rms_norm_eps;
	e->lora_scale = (float)(c->alpha / c->rank);
	e->dropout = (float)c->dropout;
	e->blockwise = c->mode == MODE_BLOCKWISE;
	e->bs = c->block_size < e->L ? c->block_size : e->L;
	e->nb = (e->L + e->bs - 1) / e->bs;
	e->chunk = e->T < HEAD_CHUNK ? e->T : HEAD_CHUNK;
	e->prof.on = prof && *prof && strcmp(prof, "0") != 0;
}

static int create_events(struct engine *e)
{
	const struct backend *be = e->be;
	struct ckpt_sets *cs = &e->cs;

	/* at most every block copied once per pass; a compute span per block
	 * per pass plus embedding, head and optimizer */
	e->max_copies = 2 * e->nb + 2;
	e->max_computes = 2 * e->nb + 4;
	e->copies = xcalloc((size_t)e->max_copies, sizeof *e->copies);
	e->computes = xcalloc((size_t)e->max_computes, sizeof *e->computes);
	if ((e->step_begin = be->event_create()) == NULL)
		return -1;
	for (int i = 0; i < e->max_copies; i++)
		if ((e->copies[i].begin = be->event_create()) == NULL || (e->copies[i].end = be->event_create()) == NULL)
			return -1;
	for (int i = 0; i < e->max_computes; i++)
		if ((e->computes[i].begin = be->event_create()) == NULL || (e->computes[i].end = be->event_create()) == NULL)
			return -1;
	for (int s = 0; s < 2; s++) {
		e->slab[s].block = -1;
		if ((e->slab[s].copied = be->event_create()) == NULL || (e->slab[s].freed = be->event_create()) == NULL)
			return -1;
		cs->layer[s] = -1;
		if ((cs->saved[s] = be->event_create()) == NULL || (cs->loaded[s] = be->event_create()) == NULL ||
		    (cs->freed[s] = be->event_create()) == NULL)
			return -1;
	}
	if ((cs->ready = be->event_create()) == NULL)
		return -1;
	return 0;
}

static int alloc_weights(struct engine *e, char *err, size_t errsz)
{
	const struct layer_layout *lay = &e->hw->lay;
	const struct global_layout *glob = &e->hw->glob;
	size_t glob_bytes;
	char sz[32];

	/* the embedding stays on the host unless lm_head is the same table */
	e->glob_start = glob->lm_head == glob->embed ? 0 : glob->final_norm;
	glob_bytes = glob->bytes - e->glob_start;
	dev_alloc_set_purpose(&e->alloc, "lm_head");
	e->d_globals = dev_alloc(&e->alloc, glob_bytes, "the final norm and lm_head (%s)",
	                         format_bytes(sz, sizeof sz, (double)glob_bytes));
	if (e->d_globals == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	if (e->blockwise) {
		size_t slab = (size_t)e->bs * lay->stride;
		unsigned char *both;

		dev_alloc_set_purpose(&e->alloc, "slabs");
		both = dev_alloc(&e->alloc, 2 * slab, "2 slabs of %s", format_bytes(sz, sizeof sz, (double)slab));
		if (both == NULL)
			return seterr(err, errsz, "%s", e->alloc.err);
		e->slab[0].d = both;
		e->slab[1].d = both + slab;
	} else {
		size_t all = (size_t)e->L * lay->stride;

		dev_alloc_set_purpose(&e->alloc, "layers");
		e->d_layers = dev_alloc(&e->alloc, all, "all %d layers' weights (%s)", e->L,
		                        format_bytes(sz, sizeof sz, (double)all));
		if (e->d_layers == NULL)
			return seterr(err, errsz, "%s", e->alloc.err);
	}
	e->dq_layer = -1;
	if (lay->nf4) {
		/* one layer: both schedules use a layer's weights for every
		 * micro-batch it serves before moving to the next */
		dev_alloc_set_purpose(&e->alloc, "dequant");
		e->d_dequant = dev_alloc(&e->alloc, e->dq_bytes, "a dequantization buffer for one layer (%s)",
		                         format_bytes(sz, sizeof sz, (double)e->dq_bytes));
		if (e->d_dequant == NULL)
			return seterr(err, errsz, "%s", e->alloc.err);
	}
	return 0;
}

static int alloc_state(struct engine *e, char *err, size_t errsz)
{
	size_t lora_bytes = (size_t)e->lora.total * sizeof(float);
	char sz[32], what[96];
	float *state;

	dev_alloc_set_purpose(&e->alloc, "lora_state");
	state = dev_alloc(&e->alloc, 4 * lora_bytes, "LoRA parameters, gradients and AdamW state (%s)",
	                  format_bytes(sz, sizeof sz, 4.0 * (double)lora_bytes));
	if (state == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	e->d_lora = state;
	e->d_grad = state + e->lora.total;
	e->d_m = state + 2 * e->lora.total;
	e->d_v = state + 3 * e->lora.total;

	if (!e->blockwise && !e->cfg->recompute)
		e->acts = xcalloc((size_t)e->L, sizeof *e->acts);
	snprintf(what, sizeof what, "activations of %d layer%s", e->acts ? e->L : 1, e->acts && e->L > 1 ? "s" : "");
	if (dalloc_plan(e, plan_acts, "activations", what) == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	if (e->blockwise) {
		snprintf(what, sizeof what, "2 sets of %d layer-input checkpoints", e->k);
	} else {
		e->n_ckpt = e->L + 1;
		e->ckpt = xcalloc((size_t)e->n_ckpt, sizeof *e->ckpt);
		snprintf(what, sizeof what, "%d activation checkpoints", e->n_ckpt);
	}
	if (dalloc_plan(e, plan_ckpts, "checkpoints", what) == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	e->dresid = xcalloc((size_t)e->k, sizeof *e->dresid);
	if (dalloc_plan(e, plan_dresid, "residual_grads", "residual-stream gradients") == NULL ||
	    dalloc_plan(e, plan_scratch, "workspace", "backward scratch") == NULL ||
	    dalloc_plan(e, plan_head, "head", "the lm_head and loss buffers") == NULL ||
	    dalloc_plan(e, plan_embed_rows, "embedding", "the step's embedding rows") == NULL ||
	    dalloc_plan(e, plan_misc, "misc", "targets, rope tables and norm scratch") == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	return 0;
}

/* Pinned host buffers: token staging, the step's embedding rows and, for
 * blockwise, every layer's input checkpoints. */
static int alloc_host(struct engine *e, char *err, size_t errsz)
{
	const struct backend *be = e->be;
	size_t tok_bytes = (size_t)e->k * e->T * sizeof(int32_t);
	size_t rows_bytes = (size_t)e->k * e->T * e->C * sizeof(bf16);
	char sz[32];

	for (int i = 0; i < 2; i++) {
		struct staging *st = &e->stage[i];

		if (be->host_alloc((void **)&st->tokens, tok_bytes) != 0 || be->host_alloc((void **)&st->targets, tok_bytes) != 0 ||
		    be->host_alloc((void **)&st->rows, rows_bytes) != 0)
			return seterr(err, errsz, "allocating host memory for tokens failed");
		st->n_pred = xcalloc((size_t)e->k, sizeof *st->n_pred);
	}
	if (e->blockwise) {
		size_t bytes = (size_t)e->L * e->k * e->T * e->C * sizeof(float);

		if (be->host_alloc((void **)&e->cs.host, bytes) != 0) {
			e->cs.host = NULL;
			return seterr(err, errsz, "allocating host memory for %d layers' activation checkpoints (%s) failed",
			              e->L, format_bytes(sz, sizeof sz, (double)bytes));
		}
	}
	return 0;
}

static int upload(struct engine *e, char *err, size_t errsz)
{
	const struct backend *be = e->be;
	const struct host_weights *hw = e->hw;
	size_t half = (size_t)e->S * (e->D / 2);
	float *cos_t = xmalloc(half * sizeof *cos_t), *sin_t = xmalloc(half * sizeof *sin_t);
	float *init = xmalloc((size_t)e->lora.total * sizeof *init);
	int32_t *iota = xmalloc((size_t)e->T * sizeof *iota);

	if (rope_tables(cos_t, sin_t, e->mc, e->S, err, errsz) < 0) {
		free(cos_t);
		free(sin_t);
		free(init);
		free(iota);
		return -1;
	}
	for (int t = 0; t < e->T; t++)
		iota[t] = t;
	lora_init_host(&e->lora, init, e->cfg->seed);
	be->copy_h2d(e->d_globals, hw->globals + e->glob_start, hw->glob.bytes - e->glob_start, STREAM_COMPUTE);
	e->final_norm = (const bf16 *)(e->d_globals + (hw->glob.final_norm - e->glob_start));
	e->lm_head = (const bf16 *)(e->d_globals + (hw->glob.lm_head - e->glob_start));
	if (!e->blockwise)
		be->copy_h2d(e->d_layers, hw->layers, (size_t)e->L * hw->lay.stride, STREAM_COMPUTE);
	be->copy_h2d(e->d_cos, cos_t, half * sizeof(float), STREAM_COMPUTE);
	be->copy_h2d(e->d_sin, sin_t, half * sizeof(float), STREAM_COMPUTE);
	be->copy_h2d(e->d_iota, iota, (size_t)e->T * sizeof(int32_t), STREAM_COMPUTE);
	be->copy_h2d(e->d_lora, init, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	be->memset_zero(e->d_m, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	be->memset_zero(e->d_v, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	/* the host sources are freed below: wait for the copies */
	be->synchronize();
	free(cos_t);
	free(sin_t);
	free(init);
	free(iota);
	return 0;
}

int engine_create(struct engine **out, const struct train_config *cfg, const struct model_config *mc,
                  const struct host_weights *hw, struct token_source *data, const struct backend *be, char *err,
                  size_t errsz)
{
	struct engine *e = xcalloc(1, sizeof *e);

	*out = e;
	e->be = be;
	e->op = be->ops;
	e->cfg = cfg;
	e->mc = mc;
	e->hw = hw;
	e->data = data;
	set_dims(e);
	dev_alloc_init(&e->alloc, be, (size_t)cfg->vram_budget);
	if (be->library_device_bytes) {
		dev_alloc_set_purpose(&e->alloc, "blas_workspace");
		if (dev_alloc_count_held(&e->alloc, be->library_device_bytes, "the cuBLAS workspace") < 0)
			return seterr(err, errsz, "%s", e->alloc.err);
	}
	lora_layout_init(&e->lora, &hw->lay, e->L, e->R, cfg->target_mask);
	ext_layout_init(e);
	if (create_events(e) < 0)
		return seterr(err, errsz, "%s backend: cannot create events", be->name);
	e->n_pred = xcalloc((size_t)e->k, sizeof *e->n_pred);
	e->h_losses = xmalloc((size_t)e->k * e->T * sizeof *e->h_losses);
	if (alloc_host(e, err, errsz) < 0 || alloc_weights(e, err, errsz) < 0)
		return -1;
	if (alloc_state(e, err, errsz) < 0) {
		size_t len = strlen(err);

		/* what the user can trade for memory, said where it runs out */
		if (e->acts && e->alloc.oom && len < errsz)
			snprintf(err + len, errsz - len, " (resident keeps all %d layers' activations: "
			         "--gradient-checkpointing on keeps one layer's)", e->L);
		return -1;
	}
	dev_alloc_freeze(&e->alloc);
	if (e->prof.on) {
		char buf[1024];

		if (engine_vram_breakdown_json(e, buf, sizeof buf) > 0)
			fprintf(stderr, "%s: vram breakdown (MiB): %s\n", progname, buf);
	}
	return upload(e, err, errsz);
}

void engine_destroy(struct engine *e)
{
	const struct backend *be;
	struct backend_event *cs_events[7];

	if (e == NULL)
		return;
	be = e->be;
	be->synchronize();
	if (e->step_begin)
		be->event_destroy(e->step_begin);
	for (int i = 0; e->copies && i < e->max_copies; i++) {
		if (e->copies[i].begin)
			be->event_destroy(e->copies[i].begin);
		if (e->copies[i].end)
			be->event_destroy(e->copies[i].end);
	}
	for (int i = 0; e->computes && i < e->max_computes; i++) {
		if (e->computes[i].begin)
			be->event_destroy(e->computes[i].begin);
		if (e->computes[i].end)
			be->event_destroy(e->computes[i].end);
	}
	for (int s = 0; s < 2; s++) {
		if (e->slab[s].copied)
			be->event_destroy(e->slab[s].copied);
		if (e->slab[s].freed)
			be->event_destroy(e->slab[s].freed);
	}
	cs_events[0] = e->cs.ready;
	for (int s = 0; s < 2; s++) {
		cs_events[1 + 3 * s] = e->cs.saved[s];
		cs_events[2 + 3 * s] = e->cs.loaded[s];
		cs_events[3 + 3 * s] = e->cs.freed[s];
	}
	for (int i = 0; i < 7; i++)
		if (cs_events[i])
			be->event_destroy(cs_events[i]);
	for (int i = 0; i < e->prof.cap; i++)
		be->event_destroy(e->prof.ev[i]);
	dev_alloc_release_all(&e->alloc);
	prefetch_join(e);
	for (int i = 0; i < 2; i++) {
		if (e->stage[i].tokens)
			be->host_free(e->stage[i].tokens);
		if (e->stage[i].targets)
			be->host_free(e->stage[i].targets);
		if (e->stage[i].rows)
			be->host_free(e->stage[i].rows);
		free(e->stage[i].n_pred);
	}
	if (e->cs.host)
		be->host_free(e->cs.host);
	free(e->prof.ev);
	free(e->prof.cat);
	free(e->copies);
	free(e->computes);
	free(e->n_pred);
	free(e->h_losses);
	free(e->lora.slot);
	free(e->ckpt);
	free(e->acts);
	free(e->dresid);
	free(e);
}

int engine_oom(const struct engine *e)
{
	return e->alloc.oom;
}

const struct lora_layout *engine_lora_layout(const struct engine *e)
{
	return &e->lora;
}

void engine_lora_read(struct engine *e, float *host)
{
	e->be->copy_d2h(host, e->d_lora, (size_t)e->lora.total * sizeof(float));
}

void engine_lora_write(struct engine *e, const float *host)
{
	e->be->copy_h2d(e->d_lora, host, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	e->be->synchronize();
	e->lora_ver++;
}

void engine_grad_read(struct engine *e, float *host)
{
	e->be->copy_d2h(host, e->d_grad, (size_t)e->lora.total * sizeof(float));
}

size_t engine_vram_current(const struct engine *e)
{
	return e->alloc.current;
}

size_t engine_vram_peak(const struct engine *e)
{
	return e->alloc.peak;
}
