/* tools/poros-train/engine.c: forward, backward and the two schedules.
 *
 * Dimension letters as in kernels/ops.h: B batch, S sequence, T = B*S
 * tokens of one micro-batch, C hidden, H/G query/kv heads, D head dim,
 * F intermediate, V vocabulary, R rank, k micro-batches per step, L layers.
 *
 * Parity: both schedules call the same layer_forward / layer_backward /
 * head code; only the loop order differs.  Every LoRA gradient receives its
 * micro-batch contributions in the order 1..k in both (resident runs the
 * micro-batches one after another; blockwise runs 1..k through each block
 * in backward), every op is deterministic, and recomputation from a
 * checkpoint reproduces the forward bits, so losses and adapters are
 * bit-identical. */
#include "engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum { PROJ_Q, PROJ_K, PROJ_V, PROJ_O, PROJ_GATE, PROJ_UP, PROJ_DOWN };

/* Logits are computed this many token rows at a time so a 152k vocabulary
 * never needs a (T, V) buffer. */
#define HEAD_CHUNK 128
#define LORA_ALIGN_FLOATS 64

struct layer_view {
	const bf16 *w[N_PROJ];
	const bf16 *bias[4];
	const bf16 *in_norm, *post_norm, *q_norm, *k_norm;
};

/* What one layer's forward keeps for its backward (one micro-batch). */
struct layer_act {
	const float *x;      /* (T,C) the layer input (not owned) */
	float *out;          /* (T,C) output when recomputing */
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
	bf16 *dout16;        /* (T,max N) bf16 upstream gradient of a base GEMM */
	float *dh, *dgate, *dup; /* (T,F) */
	float *datt;         /* (T,H*D) */
	float *dq, *dk, *dv; /* (T,H*D), (T,G*D), (T,G*D) */
	float *dq_pre, *dk_pre;
	float *du;           /* (T,R) */
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

	/* base weights on the device */
	unsigned char *d_globals;
	const bf16 *embed, *final_norm, *lm_head;
	unsigned char *d_layers; /* resident: all layers */
	struct slab slab[2];     /* blockwise */
	bf16 *d_dequant;         /* NF4: dequantized layers, n_dq slots */
	int n_dq;
	int *dq_layer;           /* which layer each slot holds; -1 none */

	struct lora_layout lora;
	float *d_lora, *d_grad, *d_m, *d_v;
	float *d_sumsq, *d_sumsq_scratch;
	float *d_cos, *d_sin;

	int32_t *d_tokens, *d_targets; /* (k,T) */
	int32_t *h_tokens, *h_targets; /* host staging, pinned */
	int loaded_step;               /* the step whose tokens are on the device */
	int *n_pred;                   /* (k) predicted tokens of each micro-batch */

	float **ckpt;   /* blockwise: (nb+1)*k inputs of blocks; resident: L+1 inputs of layers */
	int n_ckpt;
	float **resid;  /* blockwise: k residual streams inside a block */
	float **dresid; /* blockwise: k; resident: 1 */
	struct layer_act *act;
	int n_act;
	struct layer_view *views; /* one per layer of a block */
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
	a->out = CARVE_F32(cv, T * e->C);
	a->xn = CARVE_BF16(cv, T * e->C);
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
	a->att = CARVE_BF16(cv, T * e->HD);
	a->x2 = CARVE_F32(cv, T * e->C);
	a->xn2 = CARVE_BF16(cv, T * e->C);
	a->rstd2 = CARVE_F32(cv, T);
	a->gate = CARVE_F32(cv, T * e->F);
	a->up = CARVE_F32(cv, T * e->F);
	a->h = CARVE_BF16(cv, T * e->F);
	for (int m = 0; m < N_PROJ; m++)
		if (targeted(e, m))
			a->u[m] = CARVE_F32(cv, T * e->R);
}

static void plan_scratch(struct engine *e, struct carver *cv)
{
	long T = e->T, max_n = e->C;

	if (e->F > max_n)
		max_n = e->F;
	if (e->HD > max_n)
		max_n = e->HD;
	e->g.dxn = CARVE_F32(cv, T * e->C);
	e->g.dout16 = CARVE_BF16(cv, T * max_n);
	e->g.dh = CARVE_F32(cv, T * e->F);
	e->g.dgate = CARVE_F32(cv, T * e->F);
	e->g.dup = CARVE_F32(cv, T * e->F);
	e->g.datt = CARVE_F32(cv, T * e->HD);
	e->g.dq = CARVE_F32(cv, T * e->HD);
	e->g.dk = CARVE_F32(cv, T * e->GD);
	e->g.dv = CARVE_F32(cv, T * e->GD);
	if (e->mc->qk_norm) {
		e->g.dq_pre = CARVE_F32(cv, T * e->HD);
		e->g.dk_pre = CARVE_F32(cv, T * e->GD);
	}
	e->g.du = CARVE_F32(cv, T * e->R);
	e->attn_scratch = CARVE_F32(cv, attention_scratch_floats(e->B, e->S, e->H, e->G, e->D));
}

static void plan_head(struct engine *e, struct carver *cv)
{
	long T = e->T;

	e->hn = CARVE_BF16(cv, T * e->C);
	e->head_rstd = CARVE_F32(cv, T);
	e->dhn = CARVE_F32(cv, T * e->C);
	e->logits = CARVE_F32(cv, (long)e->chunk * e->V);
	e->dlogits = CARVE_BF16(cv, (long)e->chunk * e->V);
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
	e->d_tokens = carve(cv, (size_t)e->k * e->T * sizeof(int32_t));
	e->d_targets = carve(cv, (size_t)e->k * e->T * sizeof(int32_t));
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

/* --- weight views --------------------------------------------------------- */

/* Pointers into one layer record on the device; with NF4 the projections
 * are dequantized into dequant slot `slot` unless it already holds this
 * layer (the base never changes, so that copy stays valid). */
static void make_view(struct engine *e, struct layer_view *v, const unsigned char *rec, int layer, int slot)
{
	const struct layer_layout *lay = &e->hw->lay;
	const size_t norm_off[4] = { lay->in_norm, lay->post_norm, lay->q_norm, lay->k_norm };
	const bf16 **norm[4] = { &v->in_norm, &v->post_norm, &v->q_norm, &v->k_norm };

	for (int i = 0; i < 4; i++) {
		*norm[i] = norm_off[i] == LAYOUT_NONE ? NULL : (const bf16 *)(rec + norm_off[i]);
		v->bias[i] = lay->bias[i] == LAYOUT_NONE ? NULL : (const bf16 *)(rec + lay->bias[i]);
	}
	if (!lay->nf4) {
		for (int m = 0; m < N_PROJ; m++)
			v->w[m] = (const bf16 *)(rec + lay->weight[m]);
		return;
	}
	{
		unsigned char *dst = (unsigned char *)e->d_dequant + (size_t)slot * lay->dq_stride;
		int fresh = e->dq_layer[slot] != layer;

		for (int m = 0; m < N_PROJ; m++) {
			bf16 *w = (bf16 *)(dst + lay->dq[m]);

			if (fresh)
				e->op->nf4_dequantize(w, rec + lay->weight[m], (const float *)(rec + lay->absmax[m]),
				                      (long)lay->n_out[m] * lay->n_in[m]);
			v->w[m] = w;
		}
		e->dq_layer[slot] = layer;
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

/* out (T,N) = in @ W^T (+ bias) + scale * B A dropout(in) */
static void proj_forward(struct engine *e, const struct layer_view *w, struct layer_act *a, int layer, int m,
                         const bf16 *in, float *out, struct pass p)
{
	const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + m];

	e->op->matmul_forward(out, in, w->w[m], m < 4 ? w->bias[m] : NULL, e->T, s->n_in, s->n_out);
	if (s->a >= 0)
		e->op->lora_forward(out, a->u[m], in, e->d_lora + s->a, e->d_lora + s->b, e->lora_scale, e->dropout,
		                    dropout_seed(e, p.step, p.mb, layer, m), e->T, s->n_in, s->n_out, e->R);
}

/* din (T,K) (+)= gradient through projection m given dout (T,N) fp32;
 * LoRA gradients accumulate into the flat gradient buffer. */
static void proj_backward(struct engine *e, const struct layer_view *w, const struct layer_act *a, int layer, int m,
                          const bf16 *in, const float *dout, float *din, int accumulate, struct pass p)
{
	const struct lora_slot *s = &e->lora.slot[layer * N_PROJ + m];
	long T = e->T;

	e->op->cast_f32_to_bf16(e->g.dout16, dout, T * s->n_out);
	e->op->matmul_backward_input(din, e->g.dout16, w->w[m], e->T, s->n_in, s->n_out, accumulate);
	if (s->a >= 0)
		e->op->lora_backward(din, e->d_grad + s->a, e->d_grad + s->b, e->g.du, dout, in, a->u[m], e->d_lora + s->a,
		                     e->d_lora + s->b, e->lora_scale, e->dropout, dropout_seed(e, p.step, p.mb, layer, m),
		                     e->T, s->n_in, s->n_out, e->R);
}

/* out (T,C) = the decoder layer applied to x (T,C); the activations the
 * backward needs stay in a.  out may be x (forward-only use). */
static void layer_forward(struct engine *e, const struct layer_view *w, struct layer_act *a, int layer, const float *x,
                          float *out, struct pass p)
{
	const struct poros_ops *op = e->op;
	int T = e->T, qk = e->mc->qk_norm;

	a->x = x;
	op->rmsnorm_forward(NULL, a->xn, a->rstd1, x, w->in_norm, e->eps, T, e->C);
	proj_forward(e, w, a, layer, PROJ_Q, a->xn, qk ? a->q_pre : a->q, p);
	proj_forward(e, w, a, layer, PROJ_K, a->xn, qk ? a->k_pre : a->k, p);
	proj_forward(e, w, a, layer, PROJ_V, a->xn, a->v, p);
	if (qk) {
		/* Qwen3: RMSNorm over each head's D features, before rope */
		op->rmsnorm_forward(a->q, NULL, a->rstd_q, a->q_pre, w->q_norm, e->eps, T * e->H, e->D);
		op->rmsnorm_forward(a->k, NULL, a->rstd_k, a->k_pre, w->k_norm, e->eps, T * e->G, e->D);
	}
	op->rope_forward(a->q, e->d_cos, e->d_sin, e->B, e->S, e->H, e->D);
	op->rope_forward(a->k, e->d_cos, e->d_sin, e->B, e->S, e->G, e->D);
	op->attention_forward(a->att, a->lse, e->attn_scratch, a->q, a->k, a->v, e->B, e->S, e->H, e->G, e->D);
	proj_forward(e, w, a, layer, PROJ_O, a->att, a->x2, p);
	op->add_inplace(a->x2, x, (long)T * e->C);
	op->rmsnorm_forward(NULL, a->xn2, a->rstd2, a->x2, w->post_norm, e->eps, T, e->C);
	proj_forward(e, w, a, layer, PROJ_GATE, a->xn2, a->gate, p);
	proj_forward(e, w, a, layer, PROJ_UP, a->xn2, a->up, p);
	op->swiglu_forward(a->h, a->gate, a->up, (long)T * e->F);
	/* x is dead from here on, so out may alias it */
	proj_forward(e, w, a, layer, PROJ_DOWN, a->h, out, p);
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
	proj_backward(e, w, a, layer, PROJ_DOWN, a->h, dx, g->dh, 0, p);
	op->swiglu_backward(g->dgate, g->dup, g->dh, a->gate, a->up, (long)T * e->F);
	proj_backward(e, w, a, layer, PROJ_GATE, a->xn2, g->dgate, g->dxn, 0, p);
	proj_backward(e, w, a, layer, PROJ_UP, a->xn2, g->dup, g->dxn, 1, p);
	op->rmsnorm_backward(dx, g->dxn, a->x2, w->post_norm, a->rstd2, T, e->C);
	/* attention: x2 = x + o(attn(rope(q), rope(k), v)), q/k/v of n1 = norm(x) */
	proj_backward(e, w, a, layer, PROJ_O, a->att, dx, g->datt, 0, p);
	op->attention_backward(g->dq, g->dk, g->dv, e->attn_scratch, g->datt, a->q, a->k, a->v, a->lse, e->B, e->S, e->H,
	                       e->G, e->D);
	op->rope_backward(g->dq, e->d_cos, e->d_sin, e->B, e->S, e->H, e->D);
	op->rope_backward(g->dk, e->d_cos, e->d_sin, e->B, e->S, e->G, e->D);
	if (qk) {
		e->be->memset_zero(g->dq_pre, (size_t)T * e->HD * sizeof(float), STREAM_COMPUTE);
		e->be->memset_zero(g->dk_pre, (size_t)T * e->GD * sizeof(float), STREAM_COMPUTE);
		op->rmsnorm_backward(g->dq_pre, g->dq, a->q_pre, w->q_norm, a->rstd_q, T * e->H, e->D);
		op->rmsnorm_backward(g->dk_pre, g->dk, a->k_pre, w->k_norm, a->rstd_k, T * e->G, e->D);
		dq = g->dq_pre;
		dk = g->dk_pre;
	}
	proj_backward(e, w, a, layer, PROJ_Q, a->xn, dq, g->dxn, 0, p);
	proj_backward(e, w, a, layer, PROJ_K, a->xn, dk, g->dxn, 1, p);
	proj_backward(e, w, a, layer, PROJ_V, a->xn, g->dv, g->dxn, 1, p);
	op->rmsnorm_backward(dx, g->dxn, a->x, w->in_norm, a->rstd1, T, e->C);
}

/* Recomputes layers first..first+n-1 from their input checkpoint x0 (all
 * activations kept), then backward through them in reverse; dx (T,C)
 * goes from the gradient of the block output to that of its input. */
static void block_backward(struct engine *e, const struct layer_view *views, int first, int n, const float *x0,
                           float *dx, struct pass p)
{
	const float *x = x0;

	for (int i = 0; i < n; i++) {
		layer_forward(e, &views[i], &e->act[i], first + i, x, e->act[i].out, p);
		x = e->act[i].out;
	}
	for (int i = n - 1; i >= 0; i--)
		layer_backward(e, &views[i], &e->act[i], first + i, dx, p);
}

/* Final norm, lm_head and cross-entropy of micro-batch mb, and their
 * backward: dres (T,C) = gradient of the last layer's output. */
static void head(struct engine *e, const float *hidden, int mb, float *dres)
{
	const struct poros_ops *op = e->op;
	int T = e->T, C = e->C, V = e->V;
	/* dloss per token: the step loss is the mean over k micro-batches of
	 * each one's mean over its predicted tokens (targets < 0 are not) */
	float dloss = e->n_pred[mb] ? (float)(1.0 / ((double)e->n_pred[mb] * e->k)) : 0.0f;

	op->rmsnorm_forward(NULL, e->hn, e->head_rstd, hidden, e->final_norm, e->eps, T, C);
	for (int off = 0; off < T; off += e->chunk) {
		int n = T - off < e->chunk ? T - off : e->chunk;

		op->matmul_forward(e->logits, e->hn + (size_t)off * C, e->lm_head, NULL, n, C, V);
		op->crossentropy_forward_backward(e->dlogits, e->losses + (size_t)mb * T + off, e->logits,
		                                  e->d_targets + (size_t)mb * T + off, dloss, n, V);
		op->matmul_backward_input(e->dhn + (size_t)off * C, e->dlogits, e->lm_head, n, C, V, 0);
	}
	e->be->memset_zero(dres, (size_t)T * C * sizeof(float), STREAM_COMPUTE);
	op->rmsnorm_backward(dres, e->dhn, hidden, e->final_norm, e->head_rstd, T, C);
}

/* --- resident schedule ---------------------------------------------------- */

static void resident_view(struct engine *e, struct layer_view *v, int layer)
{
	make_view(e, v, e->d_layers + (size_t)layer * e->hw->lay.stride, layer, 0);
}

/* Micro-batch-major: each micro-batch runs its whole forward (keeping
 * every layer's input) and its whole backward (recompute a layer, then
 * backward through it), like HF gradient checkpointing. */
static void resident_pass(struct engine *e, int step)
{
	struct layer_view v;

	compute_open(e);
	for (int j = 0; j < e->k; j++) {
		struct pass p = { step, j };

		e->op->embedding_forward(e->ckpt[0], e->d_tokens + (size_t)j * e->T, e->embed, e->T, e->C);
		for (int l = 0; l < e->L; l++) {
			resident_view(e, &v, l);
			layer_forward(e, &v, &e->act[0], l, e->ckpt[l], e->ckpt[l + 1], p);
		}
		head(e, e->ckpt[e->L], j, e->dresid[0]);
		for (int l = e->L - 1; l >= 0; l--) {
			resident_view(e, &v, l);
			block_backward(e, &v, l, 1, e->ckpt[l], e->dresid[0], p);
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
	make_view(e, v, e->slab[b % 2].d + (size_t)i * e->hw->lay.stride, block_first(e, b) + i, i);
}

/* Layer-major: the weights of a block are on the device once per pass,
 * and every micro-batch runs through each layer (each NF4 layer is
 * dequantized once per pass) while the next block is being copied. */
static void blockwise_pass(struct engine *e, int step)
{
	int k = e->k;
	struct layer_view *views = e->views;

	compute_open(e);
	for (int j = 0; j < k; j++)
		e->op->embedding_forward(e->ckpt[j], e->d_tokens + (size_t)j * e->T, e->embed, e->T, e->C);
	compute_close(e);
	for (int b = 0; b < e->nb; b++) {
		int first = block_first(e, b), n = block_len(e, b);

		slab_acquire(e, b);
		slab_prefetch(e, b + 1);
		compute_open(e);
		for (int i = 0; i < n; i++) {
			block_view(e, &views[i], b, i);
			for (int j = 0; j < k; j++) {
				struct pass p = { step, j };
				const float *in = i == 0 ? e->ckpt[b * k + j] : e->resid[j];
				float *out = i == n - 1 ? e->ckpt[(b + 1) * k + j] : e->resid[j];

				layer_forward(e, &views[i], &e->act[0], first + i, in, out, p);
			}
		}
		compute_close(e);
		slab_release(e, b);
	}
	compute_open(e);
	for (int j = 0; j < k; j++)
		head(e, e->ckpt[e->nb * k + j], j, e->dresid[j]);
	compute_close(e);
	for (int b = e->nb - 1; b >= 0; b--) {
		int first = block_first(e, b), n = block_len(e, b);

		slab_acquire(e, b);
		slab_prefetch(e, b - 1);
		compute_open(e);
		for (int i = 0; i < n; i++)
			block_view(e, &views[i], b, i);
		for (int j = 0; j < k; j++) {
			struct pass p = { step, j };

			block_backward(e, views, first, n, e->ckpt[b * k + j], e->dresid[j], p);
		}
		compute_close(e);
		slab_release(e, b);
	}
}

/* --- steps ------------------------------------------------------------------ */

/* The step's k micro-batches, in order, from the token source. */
static int load_batch(struct engine *e, int step)
{
	size_t n = (size_t)e->k * e->T;

	if (e->loaded_step == step)
		return 0;
	for (int j = 0; j < e->k; j++) {
		int32_t *tg = e->h_targets + (size_t)j * e->T;

		if (token_source_next(e->data, e->h_tokens + (size_t)j * e->T, tg, e->B, e->err, sizeof e->err) < 0)
			return -1;
		e->n_pred[j] = 0;
		for (int t = 0; t < e->T; t++)
			e->n_pred[j] += tg[t] >= 0;
	}
	e->be->copy_h2d(e->d_tokens, e->h_tokens, n * sizeof(int32_t), STREAM_COMPUTE);
	e->be->copy_h2d(e->d_targets, e->h_targets, n * sizeof(int32_t), STREAM_COMPUTE);
	/* the staging buffers are refilled next step: let the copies finish */
	e->be->synchronize();
	e->loaded_step = step;
	return 0;
}

double engine_forward_backward(struct engine *e, int step)
{
	double loss = 0;

	e->n_copies = e->n_computes = 0;
	e->h2d_bytes = 0;
	e->err[0] = '\0';
	e->be->event_record(e->step_begin, STREAM_COMPUTE);
	if (load_batch(e, step) < 0)
		return NAN;
	e->be->memset_zero(e->d_grad, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	if (e->blockwise)
		blockwise_pass(e, step);
	else
		resident_pass(e, step);
	e->be->copy_d2h(e->h_losses, e->losses, (size_t)e->k * e->T * sizeof(float));
	/* summed on the host in one fixed order, the same for both schedules;
	 * ignored targets have loss 0 */
	for (int j = 0; j < e->k; j++) {
		double sum = 0;

		for (int t = 0; t < e->T; t++)
			sum += e->h_losses[(size_t)j * e->T + t];
		loss += e->n_pred[j] ? sum / e->n_pred[j] : 0.0;
	}
	return loss / e->k;
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

int engine_step(struct engine *e, int step, struct step_stats *st)
{
	double t0 = now_seconds();
	float sumsq, norm, scale = 1.0f;

	memset(st, 0, sizeof *st);
	st->loss = engine_forward_backward(e, step);
	compute_open(e);
	e->op->sumsq(e->d_sumsq, e->d_sumsq_scratch, e->d_grad, e->lora.total);
	e->be->copy_d2h(&sumsq, e->d_sumsq, sizeof sumsq);
	norm = sqrtf(sumsq);
	st->grad_norm = norm;
	st->lr = lr_at(e->cfg, step);
	if (!isfinite(st->loss) || !isfinite(norm)) {
		compute_close(e);
		e->be->synchronize();
		st->step_s = now_seconds() - t0;
		read_timing(e, st);
		return -1;
	}
	/* torch.nn.utils.clip_grad_norm_: coef = max / (norm + 1e-6), clamped to 1 */
	if (e->cfg->max_grad_norm > 0) {
		float coef = (float)e->cfg->max_grad_norm / (norm + 1e-6f);

		scale = coef < 1.0f ? coef : 1.0f;
	}
	e->op->adamw_update(e->d_lora, e->d_grad, e->d_m, e->d_v, e->lora.total, (float)st->lr, 0.9f, 0.999f, 1e-8f,
	                    (float)e->cfg->weight_decay, scale, step);
	compute_close(e);
	e->be->synchronize();
	st->step_s = now_seconds() - t0;
	read_timing(e, st);
	return 0;
}

/* --- setup ------------------------------------------------------------------ */

static void *dalloc_plan(struct engine *e, void (*plan)(struct engine *, struct carver *), const char *what)
{
	struct carver cv = { NULL, 0 };
	char sz[32];
	void *base;

	plan(e, &cv);
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
	for (int i = 0; i < e->n_act; i++)
		plan_act(e, cv, &e->act[i]);
}

static void plan_ckpts(struct engine *e, struct carver *cv)
{
	plan_streams(e, cv, e->ckpt, e->n_ckpt);
}

static void plan_resid(struct engine *e, struct carver *cv)
{
	int n_dresid = e->blockwise ? e->k : 1;

	plan_streams(e, cv, e->dresid, n_dresid);
	if (e->blockwise && e->bs > 1)
		plan_streams(e, cv, e->resid, e->k);
}

static void set_dims(struct engine *e)
{
	const struct model_config *mc = e->mc;
	const struct train_config *c = e->cfg;

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
}

static int create_events(struct engine *e)
{
	const struct backend *be = e->be;

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
	}
	return 0;
}

static int alloc_weights(struct engine *e, char *err, size_t errsz)
{
	const struct layer_layout *lay = &e->hw->lay;
	char sz[32];

	e->d_globals = dev_alloc(&e->alloc, e->hw->glob.bytes, "the embedding, final norm and lm_head (%s)",
	                         format_bytes(sz, sizeof sz, (double)e->hw->glob.bytes));
	if (e->d_globals == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	if (e->blockwise) {
		size_t slab = (size_t)e->bs * lay->stride;
		unsigned char *both = dev_alloc(&e->alloc, 2 * slab, "2 slabs of %s", format_bytes(sz, sizeof sz, (double)slab));

		if (both == NULL)
			return seterr(err, errsz, "%s", e->alloc.err);
		e->slab[0].d = both;
		e->slab[1].d = both + slab;
	} else {
		size_t all = (size_t)e->L * lay->stride;

		e->d_layers = dev_alloc(&e->alloc, all, "all %d layers' weights (%s)", e->L,
		                        format_bytes(sz, sizeof sz, (double)all));
		if (e->d_layers == NULL)
			return seterr(err, errsz, "%s", e->alloc.err);
	}
	if (lay->nf4) {
		size_t bytes;

		/* blockwise keeps a whole block dequantized so its backward can
		 * run all micro-batches on one dequantization; resident one layer */
		e->n_dq = e->blockwise ? e->bs : 1;
		bytes = (size_t)e->n_dq * lay->dq_stride;
		e->d_dequant = dev_alloc(&e->alloc, bytes, "a dequantization buffer for %d layer%s (%s)", e->n_dq,
		                         e->n_dq == 1 ? "" : "s", format_bytes(sz, sizeof sz, (double)bytes));
		if (e->d_dequant == NULL)
			return seterr(err, errsz, "%s", e->alloc.err);
		e->dq_layer = xmalloc((size_t)e->n_dq * sizeof *e->dq_layer);
		for (int i = 0; i < e->n_dq; i++)
			e->dq_layer[i] = -1;
	}
	return 0;
}

static int alloc_state(struct engine *e, char *err, size_t errsz)
{
	size_t lora_bytes = (size_t)e->lora.total * sizeof(float);
	char sz[32], what[96];
	float *state;

	state = dev_alloc(&e->alloc, 4 * lora_bytes, "LoRA parameters, gradients and AdamW state (%s)",
	                  format_bytes(sz, sizeof sz, 4.0 * (double)lora_bytes));
	if (state == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	e->d_lora = state;
	e->d_grad = state + e->lora.total;
	e->d_m = state + 2 * e->lora.total;
	e->d_v = state + 3 * e->lora.total;

	e->n_act = e->blockwise ? e->bs : 1;
	e->act = xcalloc((size_t)e->n_act, sizeof *e->act);
	e->views = xcalloc((size_t)e->n_act, sizeof *e->views);
	snprintf(what, sizeof what, "activations of %d layer%s", e->n_act, e->n_act == 1 ? "" : "s");
	if (dalloc_plan(e, plan_acts, what) == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	e->n_ckpt = e->blockwise ? (e->nb + 1) * e->k : e->L + 1;
	e->ckpt = xcalloc((size_t)e->n_ckpt, sizeof *e->ckpt);
	snprintf(what, sizeof what, "%d activation checkpoints", e->n_ckpt);
	if (dalloc_plan(e, plan_ckpts, what) == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	e->resid = xcalloc((size_t)e->k, sizeof *e->resid);
	e->dresid = xcalloc((size_t)e->k, sizeof *e->dresid);
	if (dalloc_plan(e, plan_resid, "residual streams and their gradients") == NULL ||
	    dalloc_plan(e, plan_scratch, "backward scratch") == NULL ||
	    dalloc_plan(e, plan_head, "the lm_head and loss buffers") == NULL ||
	    dalloc_plan(e, plan_misc, "tokens, rope tables and norm scratch") == NULL)
		return seterr(err, errsz, "%s", e->alloc.err);
	return 0;
}

static int upload(struct engine *e, char *err, size_t errsz)
{
	const struct backend *be = e->be;
	const struct host_weights *hw = e->hw;
	size_t half = (size_t)e->S * (e->D / 2);
	float *cos_t = xmalloc(half * sizeof *cos_t), *sin_t = xmalloc(half * sizeof *sin_t);
	float *init = xmalloc((size_t)e->lora.total * sizeof *init);

	if (rope_tables(cos_t, sin_t, e->mc, e->S, err, errsz) < 0) {
		free(cos_t);
		free(sin_t);
		free(init);
		return -1;
	}
	lora_init_host(&e->lora, init, e->cfg->seed);
	be->copy_h2d(e->d_globals, hw->globals, hw->glob.bytes, STREAM_COMPUTE);
	e->embed = (const bf16 *)(e->d_globals + hw->glob.embed);
	e->final_norm = (const bf16 *)(e->d_globals + hw->glob.final_norm);
	e->lm_head = (const bf16 *)(e->d_globals + hw->glob.lm_head);
	if (!e->blockwise)
		be->copy_h2d(e->d_layers, hw->layers, (size_t)e->L * hw->lay.stride, STREAM_COMPUTE);
	be->copy_h2d(e->d_cos, cos_t, half * sizeof(float), STREAM_COMPUTE);
	be->copy_h2d(e->d_sin, sin_t, half * sizeof(float), STREAM_COMPUTE);
	be->copy_h2d(e->d_lora, init, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	be->memset_zero(e->d_m, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	be->memset_zero(e->d_v, (size_t)e->lora.total * sizeof(float), STREAM_COMPUTE);
	/* the host sources are freed below: wait for the copies */
	be->synchronize();
	free(cos_t);
	free(sin_t);
	free(init);
	return 0;
}

int engine_create(struct engine **out, const struct train_config *cfg, const struct model_config *mc,
                  const struct host_weights *hw, struct token_source *data, const struct backend *be, char *err,
                  size_t errsz)
{
	struct engine *e = xcalloc(1, sizeof *e);
	size_t tok_bytes;

	*out = e;
	e->be = be;
	e->op = be->ops;
	e->cfg = cfg;
	e->mc = mc;
	e->hw = hw;
	e->data = data;
	set_dims(e);
	dev_alloc_init(&e->alloc, be, (size_t)cfg->vram_budget);
	lora_layout_init(&e->lora, &hw->lay, e->L, e->R, cfg->target_mask);
	if (create_events(e) < 0)
		return seterr(err, errsz, "%s backend: cannot create events", be->name);
	tok_bytes = (size_t)e->k * e->T * sizeof(int32_t);
	if (be->host_alloc((void **)&e->h_tokens, tok_bytes) != 0 || be->host_alloc((void **)&e->h_targets, tok_bytes) != 0)
		return seterr(err, errsz, "allocating host memory for tokens failed");
	e->n_pred = xcalloc((size_t)e->k, sizeof *e->n_pred);
	e->h_losses = xmalloc((size_t)e->k * e->T * sizeof *e->h_losses);
	if (alloc_weights(e, err, errsz) < 0 || alloc_state(e, err, errsz) < 0)
		return -1;
	dev_alloc_freeze(&e->alloc);
	return upload(e, err, errsz);
}

void engine_destroy(struct engine *e)
{
	const struct backend *be;

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
	dev_alloc_release_all(&e->alloc);
	if (e->h_tokens)
		be->host_free(e->h_tokens);
	if (e->h_targets)
		be->host_free(e->h_targets);
	free(e->copies);
	free(e->computes);
	free(e->n_pred);
	free(e->h_losses);
	free(e->lora.slot);
	free(e->dq_layer);
	free(e->act);
	free(e->views);
	free(e->ckpt);
	free(e->resid);
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
