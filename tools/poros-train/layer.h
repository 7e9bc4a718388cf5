/* tools/poros-train/layer.h: the decoder's math (layer.c): embedding, one
 * layer forward and backward with LoRA on its projections, and the head
 * with the loss, over a small context instead of the whole engine.
 *
 * Dimension letters as in kernels/ops.h: B batch, S sequence, T = B*S
 * tokens of one micro-batch, C hidden, H/G query/kv heads, D head dim,
 * F intermediate, V vocabulary, R rank, E the LoRA extension's extra
 * columns (0 when off).  Every pointer here is device memory. */
#ifndef POROS_TRAIN_LAYER_H
#define POROS_TRAIN_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "weights.h" /* N_PROJ */

enum { PROJ_Q, PROJ_K, PROJ_V, PROJ_O, PROJ_GATE, PROJ_UP, PROJ_DOWN };

/* Logits are computed at least this many token rows at a time (or T), and
 * at most HEAD_CHUNK_MAX, so a 152k vocabulary never needs a (T, V)
 * buffer; plan.c takes more than HEAD_CHUNK where the workspace region
 * holds them anyway (each chunk reads all of lm_head twice). */
#define HEAD_CHUNK 128
#define HEAD_CHUNK_MAX 1024

/* A micro-batch of more tokens runs its MLP this many rows at a time, so
 * gate, up, their product and their gradients are (chunk,F), not (T,F):
 * at F = 18944 each fp32 (T,F) buffer is 2.5 GB at T = 32768, and
 * M = 4096 rows still fill a GEMM.  Up to it the MLP is one chunk. */
#define MLP_CHUNK_TOKENS 4096

/* A call over a group of micro-batches (blockwise, layer_ctx.mbs) takes
 * at most this many of them. */
#define GROUP_MAX 8

/* LoRA parameters in one flat fp32 buffer: layer-major, projections in
 * cell.h's order, A (R,K) then B (N,R); each tensor starts on a 64-float
 * boundary (zero padding, which clipping and AdamW leave at zero) so the
 * CUDA GEMMs see aligned pointers.  Gradients, m and v share the layout. */
struct lora_slot {
	long a, b;        /* offsets in floats; a < 0: projection not targeted */
	int n_out, n_in;
};

/* One layer's weights: projection m is w[m] (N, K) with rows ld[m] apart
 * (K, or K + E with the LoRA extension in its spare rows and columns). */
struct layer_view {
	const bf16 *w[N_PROJ];
	int ld[N_PROJ];
	const bf16 *bias[4]; /* q, k, v, o; NULL: none */
	const bf16 *in_norm, *post_norm, *q_norm, *k_norm;
};

/* What one layer's forward keeps for its backward (one micro-batch).  The
 * inputs of the base GEMMs (xn, att, xn2, h) have E spare columns per row
 * (rows K + E apart) for the LoRA extension (kernels/ops.h). */
struct layer_act {
	const float *x;      /* (T,C) the layer input (not owned) */
	bf16 *xn;            /* (T,C) input_layernorm(x) */
	float *rstd1;        /* (T) */
	float *q, *k, *v;    /* (T,H*D), (T,G*D) x2: after q/k norm, before rope (the attention ops rotate) */
	float *q_pre, *k_pre;  /* qk_norm: projections before the norm */
	float *rstd_q, *rstd_k; /* (T*H), (T*G) */
	float *lse;          /* (B,H,S) */
	bf16 *att;           /* (T,H*D) attention output */
	int att_kept;        /* what already holds this layer's values of this micro-batch, so that
	                        layer_recompute does not make them again: KEPT_NONE, KEPT_OUTPUT (att
	                        and lse) or KEPT_SUBLAYER (also q, k, v, q_pre, k_pre, rstd_q, rstd_k,
	                        x2 and the u of q, k, v and o) */
	float *x2;           /* (T,C) x + o_proj(att); in the backward, once read, dq when H*D <= C */
	bf16 *xn2;           /* (T,C) post_attention_layernorm(x2), in xn's buffer: the
	                        backward normalizes x again into xn before q, k and v's */
	float *rstd2;        /* (T) */
	/* The MLP's, rows F apart (h: F + E): (T,F) when mlp_whole (kept
	 * for the backward), else one chunk's (mlp_chunk,F), which the forward
	 * uses chunk by chunk and the backward recomputes chunk by chunk.
	 * gate and up are bf16, the projections' fp32 sums rounded once
	 * (kernels/ops.h), all that swiglu reads. */
	bf16 *gate, *up;
	bf16 *h;             /* silu(gate) * up */
	int mlp_whole;
	float *u[N_PROJ];    /* (T,R) LoRA A outputs of targeted projections */
};

/* layer_act.att_kept's values. */
enum { KEPT_NONE, KEPT_OUTPUT, KEPT_SUBLAYER };

/* Backward scratch, shared by every layer. */
struct grad_scratch {
	float *dxn;          /* (T,C) gradient of a norm output */
	bf16 *dout16;        /* (T,max(C,H*D) + E) bf16 upstream gradient of a base GEMM of N <= max(C,H*D), rows N + E apart */
	float *dh;           /* (mlp_chunk,F); also the gate and up fallback's fp32 output (layer.c) */
	bf16 *dgate, *dup;   /* (mlp_chunk,F), rows F + E apart, rounded as the gate/up backward reads them */
	float *datt;         /* (T,H*D) */
	float *dq, *dk, *dv; /* (T,H*D), (T,G*D), (T,G*D); dq only when H*D > C (layer_dq) */
	float *dq_pre, *dk_pre;
	float *du;           /* (T,R) */
	float *lora_scratch; /* the LoRA ops' split operands and sums: lora_scratch_floats (shared region) */
};

/* What the math reads: the ops, the dimensions, the adapter, the scratch. */
struct layer_ctx {
	const struct poros_ops *op;      /* embedding and layers */
	const struct poros_ops *head_op; /* the head (its own table when profiling) */
	const struct backend *be;        /* memset_zero on the compute stream */
	int B, S, T, C, F, H, G, D, HD, GD, V, R, E, qk_norm;
	int chunk;                       /* the head's rows a chunk (plan.c, head_chunk_rows) */
	int mlp_chunk;                   /* rows of one MLP chunk: T, or fewer at long T (MLP_CHUNK_TOKENS) */
	float eps;

	/* LoRA: slot[layer * N_PROJ + m]; parameters and their gradients */
	const struct lora_slot *slot;
	const float *lora;
	float *lora_grad;
	float lora_scale, dropout;
	int ext_bwd;                     /* the backward rides in the extension too (no dropout) */
	uint64_t seed;                   /* of the dropout masks */
	int mb_base;                     /* the global index of this rank's first micro-batch */
	/* A group (blockwise): one call over mbs consecutive micro-batches of
	 * T_mb rows, T = mbs * T_mb, B = mbs * (T_mb / S), its first the
	 * pass's mb.  What gives a row the same bits at any number of rows
	 * (norms, element-wise ops, attention over B sequences, the base
	 * GEMMs but down_proj's forward) runs once over T; the LoRA ops, whose
	 * weight gradients sum over rows, run a micro-batch at a time, each
	 * into its own gradient leaf grad_mb[i], as a call of one would (proj.c).
	 * mbs 1: a call of one micro-batch (T = T_mb), gradients into lora_grad. */
	int mbs, T_mb;
	int attn_whole;                  /* a group's attention is one call over its B sequences: the
	                                    backend's keeps each sequence's bits at any batch
	                                    (backend.h, attention_batch_invariant) */
	int choose_rows;                 /* the rows the GEMMs' algorithms are chosen at (backend.h) */
	float *grad_mb[GROUP_MAX];

	const float *rope_cos, *rope_sin; /* (S, D/2) */
	const int32_t *pos;              /* (k,T) each token's position in its document; NULL: t % S */
	const int *pos_plain;            /* host (k): micro-batch mb's positions are t % S, one document a row,
	                                    so attention and rope take NULL (no masks past the diagonal) */
	float *attn_scratch;             /* shares its region with lora_scratch and the logits */
	/* layer_forward's compute stream waits for it before the first write of
	 * out (NULL: none): out over x, once another stream's copy of x is done */
	struct backend_event *out_wait;
	struct grad_scratch g;

	/* embedding: the step's rows (k,T,C), gathered on the host, and 0..T-1 */
	const bf16 *embed_rows;
	const int32_t *iota;
	/* head */
	const bf16 *final_norm, *lm_head;
	const int32_t *targets;          /* (k,T) */
	bf16 *hn, *dlogits;              /* (T,C), (chunk,V) */
	float *head_rstd, *dhn, *logits, *losses; /* (T), (T,C), (chunk,V), (k,T) */
};

/* Which step and micro-batch a layer call serves (picks dropout masks). */
struct pass {
	int step, mb;
};

/* out (T,C) = the embedding of micro-batch mb. */
void embed_forward(const struct layer_ctx *c, float *out, int mb);
/* out (T,C) = the decoder layer applied to x (T,C), activations kept in a
 * (the MLP's in its chunk buffers unless a->mlp_whole); out may be x. */
void layer_forward(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                   const float *x, float *out, struct pass p);
/* layer_forward's bits again from x, for layer_backward: it stops after
 * the post-attention norm (the backward recomputes the MLP chunk by chunk,
 * without down_proj's base GEMM and the residual add), and takes what
 * a->att_kept says is kept as it is: the attention's output and lse, or
 * the whole attention sublayer's, when only the MLP's norm runs. */
void layer_recompute(const struct layer_ctx *c, const struct layer_view *w, struct layer_act *a, int layer,
                     const float *x, struct pass p);
/* dx (T,C): the gradient of the layer output in, of its input out; LoRA
 * gradients accumulate into c->lora_grad (the MLP's chunk by chunk, in
 * order). */
void layer_backward(const struct layer_ctx *c, const struct layer_view *w, const struct layer_act *a, int layer,
                    float *dx, struct pass p);
/* Final norm, lm_head and cross-entropy of micro-batch mb (per-token
 * losses into c->losses, dloss the gradient of each token's loss), and
 * their backward: dres (T,C) = gradient of the last layer's output. */
void head_forward_backward(const struct layer_ctx *c, float *dres, const float *hidden, int mb, float dloss);
/* The same head forward only (evaluation): per-token losses into
 * c->losses, bit for bit those head_forward_backward gives. */
void head_loss(const struct layer_ctx *c, const float *hidden, int mb);
/* The attention scratch, in floats of the backend's sizing (ops.h's
 * attention_scratch_floats or _cuda), that every attention call of c's
 * layers fits: one call over the group's c->B sequences or one a
 * micro-batch (layer.c, attn_calls). */
size_t layer_attn_scratch_floats(const struct layer_ctx *c, size_t (*floats)(int B, int S, int H, int G, int D));

#endif
