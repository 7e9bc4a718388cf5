/* tools/poros-train/engine.h: the training engine above the backend
 * interface: device state, forward and hand-written backward of the
 * decoder with LoRA, the two schedules (resident, blockwise), clipping
 * and AdamW.  Everything device-side goes through backend->ops and the
 * backend's memory/stream/event calls, so the CUDA backend needs no
 * change here; host code never dereferences a device pointer. */
#ifndef POROS_TRAIN_ENGINE_H
#define POROS_TRAIN_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "backend.h"
#include "ckpt_disk.h"
#include "data.h"
#include "layer.h"
#include "model/model.h"
#include "train.h"
#include "weights.h"

/* LoRA parameters in one flat fp32 buffer (struct lora_slot in layer.h):
 * layer-major, projections in cell.h's order, A (R,K) then B (N,R), each
 * tensor 64-float aligned.  Gradients, m and v share the layout. */
struct lora_layout {
	int n_layers, rank;
	unsigned mask;
	long total;       /* floats, padding included */
	struct lora_slot *slot; /* n_layers * N_PROJ */
};

struct step_stats {
	double loss;      /* mean over micro-batches of each one's mean token loss */
	double grad_norm; /* global L2 norm before clipping */
	double lr;
	double step_s;
	long long h2d_bytes;
	long long tokens_supervised; /* targets of the step (all micro-batches); 0: loss NaN, no update */
	double h2d_s, compute_s;
	double copy_hidden_frac; /* NaN when nothing was copied */
};

struct engine;

/* The compute lanes a run of cfg uses (1 or 2; backend.h): two when
 * blockwise trains two or more micro-batches a step on the CUDA backend
 * (cuda: the plan is the CUDA backend's) unless POROS_LANES=1 says
 * otherwise (POROS_PROFILE times each lane on its own); POROS_LANES=2
 * asks for them on the CPU too, where they run in turn.  With micro-batch
 * groups (engine_group) there are two only with POROS_LANES=2 and two or
 * more groups a step: each lane runs a group a call. */
int engine_lanes(const struct train_config *cfg, int cuda);
/* Micro-batches a blockwise layer call runs (POROS_GROUP; layer.h): the
 * asked number (unset: as many as make GROUP_AUTO_ROWS rows, up to
 * GROUP_MAX), at most the step's, where a micro-batch's MLP is one chunk
 * and its rows keep the buffers aligned; else 1.  A group takes one
 * compute lane unless POROS_LANES=2 (engine_lanes).  Groups of 4 at 512
 * tokens x 8 micro-batches measured 1.550 s a step at Qwen2.5-32B nf4
 * against two lanes' 1.614 (H200, docs/perf-notes.md), in less memory; 8
 * (4096 rows) were 1-2 % faster again for 1.1 GiB more.  Micro-batches
 * of 2048 rows or more are large GEMMs already: unset, they run alone. */
#define GROUP_AUTO_ROWS 2048
int engine_group(const struct train_config *cfg);
/* The rows every schedule's row GEMMs choose their algorithms at
 * (backend.h set_row_unit): the group's that blockwise would take (one
 * micro-batch's where it takes none), or with POROS_GEMM_CHOICE=micro-batch
 * a micro-batch's.  The group's algorithms, which also take a micro-batch
 * (gemm.cu), measured 1.413-1.423 s against 1.475 at Qwen2.5-32B in groups
 * of 4; resident's micro-batches then run them too, which cost it 1.77 ->
 * 2.07 s there: POROS_GEMM_CHOICE=micro-batch is resident's fastest, in
 * other bits than groups (docs/perf-notes.md). */
int engine_gemm_choice_rows(const struct train_config *cfg);

/* Allocates every device buffer (nothing is allocated later), uploads the
 * final norm and lm_head (and, resident, every layer), rope tables and the initial
 * LoRA (A kaiming-uniform from the seed, B zero).  *out is set even on
 * failure so the caller can read engine_vram_peak(); always
 * engine_destroy it.  Returns 0, or -1 with err (engine_oom() tells
 * whether the device memory or the budget ran out). */
int engine_create(struct engine **out, const struct train_config *cfg, const struct model_config *mc,
                  const struct host_weights *hw, struct token_source *data, const struct backend *be, char *err,
                  size_t errsz);
void engine_destroy(struct engine *e);
/* The device memory engine_create would take for this run, from the same
 * plan (plan.c) carved by a dry allocator: no device, no weights (hw needs
 * only its layouts, lay and glob), nothing allocated.  library_bytes is
 * the backend's library_device_bytes.  *plan holds the blocks: its peak is
 * the total, dev_alloc_breakdown the purposes; dev_alloc_release_all it.
 * *tier (when not NULL) gets blockwise's checkpoint records (ckpt_disk.h;
 * n 0 resident): the pinned host memory of those the host holds and of
 * the bounce slots, which the run allocates beside the base's host copy,
 * and the file of the cfg->disk_records on disk.  0, or -1 with err.  The
 * budget is not applied: compare plan->peak. */
int engine_plan(struct dev_alloc *plan, struct ckpt_tier *tier, const struct train_config *cfg,
                const struct model_config *mc, const struct host_weights *hw, size_t library_bytes, char *err,
                size_t errsz);
/* The LoRA extension's columns the host weights of a bf16 run carry
 * (layer_layout_init's ext): lora_ext_cols(rank) with an adapter and
 * POROS_LORA_EXT on, else 0; 0 for NF4, whose extension lives in the
 * dequantization buffer. */
int engine_host_ext_cols(const struct train_config *cfg);
/* Whether a run of cfg over n_layers keeps block checkpoints (blockwise,
 * --checkpoints block, a block of 2 layers or more); else layer ones. */
int engine_block_ckpt(const struct train_config *cfg, int n_layers);
/* The device sets of checkpoint records blockwise keeps: block mode one a
 * layer of a block (bs); layer mode 2, or 1 where POROS_CKPT_SETS (or
 * run.c's choice) says 1 and there are no attention checkpoints
 * (schedule.c: each layer's output goes in place over its input). */
int engine_ckpt_sets(const struct train_config *cfg, int n_layers);
/* The bytes the last step wrote to and read from --checkpoint-dir's file. */
void engine_disk_bytes(const struct engine *e, long long *written, long long *read);
/* Out of memory: the device's (a budget or a failed allocation) or the
 * host's (the checkpoints need more than MemAvailable). */
int engine_oom(const struct engine *e);

/* Zeroes the gradients, then forward and backward over the step's k
 * micro-batches (step is 1-based; it picks the dropout masks, and a step
 * other than the last one seen takes the next k micro-batches from the
 * token source, so steps go in order; repeating a step reuses its data).
 * Gradients are left in the engine; returns the step's loss, the mean over
 * every target of its k micro-batches; NaN when the step has none, or when
 * the token source failed (engine_error says why). */
double engine_forward_backward(struct engine *e, int step);
const char *engine_error(const struct engine *e);
/* One optimizer step: forward_backward, clipping, AdamW.  Returns 0, or
 * -1 when the loss or the gradient norm is not finite (parameters are
 * then left as they were).  A step without a target (tokens_supervised 0,
 * loss NaN) is no failure: it leaves the parameters as they were. */
int engine_step(struct engine *e, int step, struct step_stats *st);

const struct lora_layout *engine_lora_layout(const struct engine *e);
/* Host copies of the flat buffers (lora_layout.total floats). */
void engine_lora_read(struct engine *e, float *host);
void engine_lora_write(struct engine *e, const float *host);
void engine_grad_read(struct engine *e, float *host);
/* The whole optimizer state (exact resume): parameters and AdamW's m and
 * v, host copies of lora_layout.total floats each. */
void engine_state_read(struct engine *e, float *params, float *adam_m, float *adam_v);
void engine_state_write(struct engine *e, const float *params, const float *adam_m, const float *adam_v);
/* Where the token source stands after the last step's batch (the prefetch
 * thread may have read further; this is the position a resumed run must
 * continue from). */
void engine_data_cursor(const struct engine *e, struct token_cursor *cur);

/* Evaluation with the adapter as it is (forward only, no dropout): reads
 * `rows` rows from src, batch_size at a time, and gives the mean of the
 * per-token losses over the targets >= 0 and their count.  The training
 * state is untouched.  0, or -1 with err (src failed, no supervised token). */
int engine_eval(struct engine *e, struct token_source *src, long rows, double *loss, long long *tokens, char *err,
                size_t errsz);

size_t engine_vram_current(const struct engine *e);
size_t engine_vram_peak(const struct engine *e);
/* Device bytes in use by purpose (slabs, layers, dequant, lora_state,
 * activations, checkpoints, residual_grads, workspace, head, embedding,
 * lm_head, misc), as a JSON object of MiB (3 decimals) in allocation order.  Returns
 * its length, or -1 when buf is too small. */
int engine_vram_breakdown_json(const struct engine *e, char *buf, size_t n);

/* With train_config.profile (POROS_PROFILE=1) when the engine was created,
 * every engine_step times the compute stream by op category (the time
 * from the first op of a category to the first op of the next one, so the
 * categories add up to the step's compute-stream time, idle gaps in the
 * category they interrupt; "wait_copy" is time spent waiting for a weight
 * or checkpoint copy, or a copy on the compute stream) and logs it on
 * stderr.  The last step's profile as one JSON object (CALLS: op calls of
 * the category): {"gemm_fwd":{"ms":M,"n":CALLS},..., "total_ms":M,
 * "events":N, "ckpt_d2h_bytes":B, "ckpt_h2d_bytes":B}.  Returns its
 * length, or -1 (buf "") when profiling is off or no step has finished.
 * Results are bit-identical with and without profiling. */
int engine_profile_json(const struct engine *e, char *buf, size_t n);

/* The learning rate of a (1-based) step: HF's schedulers with linear
 * warmup over lr_warmup_steps (step 1 of a warmup has lr 0, as in HF). */
double lr_at(const struct train_config *c, int step);

#endif
