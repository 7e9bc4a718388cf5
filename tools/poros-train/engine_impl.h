/* tools/poros-train/engine_impl.h: the engine's state and the calls
 * between its files (engine.c the API and the step; layer.c the math;
 * schedule.c the two passes; plan.c device memory and upload; staging.c
 * the data prefetch thread; lora_state.c the adapter and AdamW; profile.c
 * the timed ops table).  Not for use outside tools/poros-train.
 * Pointers are device memory unless their comment says host. */
#ifndef POROS_TRAIN_ENGINE_IMPL_H
#define POROS_TRAIN_ENGINE_IMPL_H

#include <pthread.h>

#include "ckpt_disk.h"
#include "engine.h"
#include "layer.h"
#include "profile.h"

struct slab {
	unsigned char *mem;
	int block;           /* the block it holds or is receiving; -1: none */
	struct backend_event *copied, *freed;
	int freed_recorded;
};

struct span {
	struct backend_event *begin, *end;
};

/* The blockwise layer checkpoints.  One layer's record: the inputs
 * (k,T,C) fp32 of its micro-batches, then, with the attention checkpoints
 * (attn), their attention outputs (T,HD+E) bf16 at att_off and
 * log-sum-exps (H*T) fp32 at lse_off, att_mb and lse_mb bytes apart (each
 * micro-batch's aligned as a carved buffer), so that the layer's recomputation
 * in backward skips the attention forward (the same bits: the forward is
 * deterministic and its inputs are the same).  At ATTN_CKPT_SUBLAYER the
 * rest of the attention sublayer's results follow, field f's at
 * sub_off[f], sub_mb[f] bytes a micro-batch (0: not kept), so the
 * recomputation runs only the MLP's norm.  Set s of the two device sets
 * holds one record; host holds every layer's.  A group reads consecutive
 * micro-batches' fields as one: each is a multiple of LAYOUT_ALIGN there
 * (T % 128 == 0), so the alignment adds nothing between them. */
enum { SUB_X2, SUB_Q, SUB_K, SUB_V, SUB_Q_PRE, SUB_K_PRE, SUB_RSTD_Q, SUB_RSTD_K,
       SUB_U, SUB_N = SUB_U + 4 /* u of q, k, v, o */ };
#define CKPT_SETS_MAX 1024 /* poros.block_size's most: --checkpoints block keeps bs sets */
struct ckpt_sets {
	/* records n_disk.. (of L, or nb in block mode), rec_bytes apart (block:
	 * att_off), pinned host; records 0..n_disk-1 are in --checkpoint-dir's
	 * file, through disk (ckpt_disk.h; NULL: none on disk) */
	unsigned char *host;
	int n_disk;
	struct ckpt_disk *disk;
	struct ckpt_tier tier;    /* plan_ckpt_layout's: where each record lives, what each tier takes */
	unsigned char *dev[CKPT_SETS_MAX]; /* one record each, n_sets of them */
	int n_sets;               /* 2, or 1 (engine_ckpt_sets); --checkpoints block: bs (blockwise_pass_block_ckpt) */
	int block;                /* --checkpoints block at bs >= 2: the host holds each block's first input */
	int attn;                 /* 0, ATTN_CKPT_OUTPUT or ATTN_CKPT_SUBLAYER (train.h) */
	size_t att_off, lse_off, rec_bytes; /* without attn: att_off = rec_bytes, the inputs' size */
	size_t att_mb, lse_mb;
	size_t sub_off[SUB_N], sub_mb[SUB_N];
	int layer[2];             /* the layer whose record set s holds; -1: none */
	struct backend_event *ready, *saved[2], *loaded[CKPT_SETS_MAX], *freed[CKPT_SETS_MAX];
	int saved_rec[2], loaded_rec[CKPT_SETS_MAX], freed_rec[CKPT_SETS_MAX];
	long long d2h_bytes, h2d_bytes;
	long long disk_written, disk_read; /* the file's bytes in the last step */
};

/* One host staging of a step's batch (pinned host memory). */
struct staging {
	int32_t *tokens, *targets; /* (k,T) */
	int32_t *pos;              /* (k,T) each token's position in its document */
	bf16 *rows;                /* (k,T,C) the tokens' embedding rows */
	int *n_pred;               /* (k) */
	long long n_supervised;    /* of the step's micro-batches on every rank */
	struct token_cursor after; /* the token source once this batch was read */
	int step, rc;
	char err[256];
};

/* The step's gradient summation order (gradtree.c). */
#define GRADTREE_MAX_PIECES 64
struct gradtree {
	int rank, world;
	long n, first;             /* micro-batches of the global step; this rank's first */
	int depth, max_pieces;     /* this rank's deepest stack; the most pieces of any rank */
	long cap;                  /* floats of a region's buffer */
	float *scratch;            /* depth - 1 stack buffers above e->grads' region */
	float *gathered;           /* world > 1: world * max_pieces buffers */
	long off, len;             /* the current region of the flat layout */
	int top;
	long start[GRADTREE_MAX_PIECES], size[GRADTREE_MAX_PIECES];
	long *all_start, *all_size; /* world * max_pieces: every rank's pieces */
	float **all_buf;
	const float *leaf;         /* gradtree_push_leaf: the leaf being pushed, read where it is */
	int leaf_slot;             /* the slot it stands for */
};

struct comm;

struct engine {
	const struct backend *be;  /* the backend, or profile.c's timed copy of it */
	const struct train_config *cfg;
	const struct model_config *mc;
	const struct host_weights *hw;
	struct token_source *data;
	struct dev_alloc alloc;
	char err[512];             /* why the last step failed, when not a number */

	int L, k;                  /* layers, micro-batches per step */
	int cuda;                  /* the CUDA backend's plan (its library memory given): its attention scratch */
	int blockwise, bs, nb;     /* block size and count (blockwise) */
	struct layer_ctx lc;       /* what the math reads (dims, ops, adapter, scratch) */

	/* base weights: final norm and lm_head (and the embedding only when
	 * tied to lm_head); glob_start is the first byte of the host globals
	 * the device copy holds */
	unsigned char *globals;
	size_t glob_start;
	bf16 *embed_rows;          /* (k,T,C) the step's embedding rows */
	int embed_rows_shared;     /* they live in dresid (plan.c): a step repeated copies them again */
	int32_t *targets;          /* (k,T) */
	int32_t *pos;              /* (k,T) positions within documents (RoPE, document masks) */
	int32_t *iota;             /* (T) 0..T-1: row t of the gathered rows */
	unsigned char *layers;     /* resident: all layers */
	struct slab slab[2];       /* blockwise */
	/* NF4: one dequantized layer; each projection's dequantized weight is
	 * (N + E, K + E) at dequant_off[m] (E: the LoRA extension's columns,
	 * kernels/ops.h; ext_bwd: the backward rides too).  Its extension is
	 * rewritten whenever the buffer gets a layer or the adapter changed
	 * (lora_ver counts changes). */
	bf16 *dequant;
	int dequant_layer;         /* the layer it holds; -1 none */
	size_t dequant_off[N_PROJ], dequant_bytes;
	long lora_ver, dequant_ext_ver;
	/* bf16 with the extension: the adapter version layer l's stored
	 * extension holds on the device (resident copy or slab; 0: none, as
	 * a slab copy brings the host's zeros) */
	long *ext_ver;

	/* the adapter: parameters, gradients, AdamW moments (one layout) */
	struct lora_layout lora;
	float *params, *grads, *adam_m, *adam_v;
	/* --optimizer-state host: adam_m, adam_v are pinned host memory and the
	 * update streams them through opt_chunk (2 x opt_chunk_n floats on the
	 * device); NULL: the moments live on the device */
	float *opt_chunk;
	long opt_chunk_n;
	float *sumsq, *sumsq_scratch;
	struct gradtree gt;
	struct comm *comm;         /* NULL: one process */
	int comm_rank, comm_world; /* this process's rank among comm_world (1: alone) */
	float *rope_cos, *rope_sin;

	/* Two host stagings of a step's batch: while step s runs on the
	 * device from one, a worker thread reads step s+1's tokens from the
	 * token source (tokenizing, packing) and gathers their embedding rows
	 * into the other, so data preparation never stalls a step. */
	struct staging stage[2];
	int cur;                   /* the staging of the loaded step */
	pthread_t prefetch_thread;
	int prefetch_running;
	int loaded_step;           /* the step whose tokens are on the device */
	int batch_stale;           /* an evaluation overwrote them: copy again */
	struct staging eval;       /* the evaluation's batch (host_alloc'd at the first one) */
	int *n_pred;               /* host (k) predicted tokens of each micro-batch */
	int *pos_plain;            /* host (k) the loaded micro-batch's positions are t % S (lc.pos_plain) */
	long long n_supervised;    /* their sum: the step's loss is the mean over these */

	float **ckpt;              /* resident: L+1 inputs of layers */
	int n_ckpt;
	struct ckpt_sets cs;       /* blockwise */
	int host_oom;              /* the checkpoints' host memory is more than the host has */
	float **dresid;            /* blockwise: k; resident: 1 */
	struct layer_act act;      /* one layer of one micro-batch */
	/* Compute lanes (backend.h): blockwise runs micro-batch j of a layer on
	 * lane j % lanes, two at once; lane 1 has its own activations and
	 * scratch (plan.c), the rest of its context is e->lc's (lane_ctx,
	 * schedule.c).  1: every micro-batch on the compute stream. */
	int lanes;
	struct layer_act lane_act;
	struct grad_scratch lane_g;
	float *lane_attn_scratch;
	struct layer_ctx lane_lc;
	void *lane_blas;           /* lane 1's cuBLAS workspace (be->lane_workspace) */
	struct backend_event *lane_fork, *lane_join;
	/* Micro-batch groups (blockwise, layer.h): a layer runs `group`
	 * micro-batches a call (1: one), its activations and scratch planned
	 * for group * T rows; a group's gradient leaves, one a micro-batch,
	 * pushed in order after the call (gradtree_push_leaf). */
	int group;
	float *group_leaf[BACKEND_MAX_LANES][GROUP_MAX]; /* lane 1's: with two lanes, each runs a group */
	/* resident without recompute: every layer's activations of one
	 * micro-batch (L of them); NULL otherwise */
	struct layer_act *acts;
	float *h_losses;           /* host (k,T) */
	float *h_losses_all;       /* host (world,k,T): every rank's, world > 1 */

	/* timing: events recorded into spans, read back after the step */
	struct backend_event *step_begin;
	struct span *copies, *computes;
	int max_copies, max_computes, n_copies, n_computes;
	long long h2d_bytes;
	struct profile *prof;      /* NULL: profiling off */
};

/* plan.c: the LoRA extension's and the dequant buffer's layout; every
 * device buffer (one plan, before step 1); the upload of what is fixed. */
void plan_dequant_layout(struct engine *e);
/* The blockwise checkpoint record's layout (struct ckpt_sets) and its
 * tier (cfg->disk_records of them on disk), and the host memory of the
 * records the host holds with the disk's bounce slots (0 resident). */
void plan_ckpt_layout(struct engine *e);
size_t engine_host_ckpt_bytes(const struct engine *e);
int plan_device(struct engine *e, char *err, size_t errsz);
/* e->lc as a call over n consecutive micro-batches sees it (layer.h);
 * n <= e->group, whose rows the plan gave every layer buffer. */
struct layer_ctx group_ctx(const struct engine *e, int n);
int plan_upload(struct engine *e, char *err, size_t errsz);

/* schedule.c */
int schedule_events_create(struct engine *e);
void schedule_events_destroy(struct engine *e);
void resident_pass(struct engine *e, int step);
void blockwise_pass(struct engine *e, int step);
/* --checkpoints block (schedule_block.c) */
void blockwise_pass_block_ckpt(struct engine *e, int step);
void compute_open(struct engine *e);
void compute_close(struct engine *e);
void schedule_read_timing(struct engine *e, struct step_stats *st);
void eval_pass(struct engine *e, int nmb);

/* staging.c: pinned stagings, and the step's batch on the device */
int staging_alloc(struct engine *e, char *err, size_t errsz);
void staging_free(struct engine *e);
int staging_load(struct engine *e, int step);
/* The embedding rows of st's tokens (k*T of them) into st->rows. */
int staging_gather(const struct engine *e, struct staging *st);
/* e->pos_plain of the first nmb micro-batches' positions pos (host). */
void staging_mark_plain(struct engine *e, const int32_t *pos, int nmb);

/* gradtree.c: a step's micro-batch gradients summed in a fixed tree
 * order.  init after the layout; the scratch (plan.c) bound; per region
 * (the adapter, or one layer in blockwise mode): begin, then for each
 * micro-batch leaf (lc.lora_grad points at a zeroed buffer) ... push, and
 * finish (the region of e->grads holds the sum; -1: the exchange failed). */
void gradtree_init(struct engine *e, int rank, int world);
void gradtree_free(struct engine *e);
void gradtree_layer_region(const struct engine *e, int layer, long *off, long *len);
size_t gradtree_scratch_floats(const struct engine *e);
void gradtree_bind(struct engine *e, float *scratch);
void gradtree_begin(struct engine *e, long off, long len);
void gradtree_leaf(struct engine *e);
/* Two micro-batches at once (compute lanes): j's leaf for e->lc and
 * j+1's for c1, each zeroed on its own lane (the caller's current lane
 * when it calls this for that lane: ahead 0 for j, 1 for j+1); both pushed
 * in order afterwards.  pair_ok: j and j+1 can be (pushing j merges
 * nothing, so j+1's leaf is the slot above j's). */
int gradtree_pair_ok(const struct engine *e, int j);
void gradtree_leaf_ahead(struct engine *e, struct layer_ctx *c, int ahead);
void gradtree_push(struct engine *e, int j);
/* Micro-batch j's gradient computed into leaf (a group's, not a stack
 * slot), pushed as gradtree_push would push it from its slot: the same
 * additions in the same order. */
void gradtree_push_leaf(struct engine *e, int j, const float *leaf);
/* The floats of a group's leaves, a set a lane (plan.c carves them after the scratch). */
size_t gradtree_group_floats(const struct engine *e);
void gradtree_bind_group(struct engine *e, float *leaves);
int gradtree_finish(struct engine *e);

/* lora_state.c */
void lora_layout_init(struct lora_layout *lo, const struct layer_layout *lay, int L, int R, unsigned mask);
void lora_init_host(const struct lora_layout *lo, float *host, uint64_t seed);
/* The squared L2 norm of the gradients (a device-to-host read). */
float lora_grad_sumsq(struct engine *e);
void lora_adamw(struct engine *e, float lr, float grad_scale, int step);

#endif
