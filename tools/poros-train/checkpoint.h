/* tools/poros-train/checkpoint.h: exact resume (--save-every, --resume).
 *
 * OUTDIR/checkpoint-stepN holds everything step N+1 depends on:
 *   state.json      the step, the configuration that shapes the result,
 *                   the token source's cursor, the first loss
 *   lora_state.f32  parameters, AdamW m, AdamW v: the engine's flat
 *                   layout (engine.h), 3 * lora_floats little-endian fp32
 *   events.jsonl    the run's events of steps 1..N
 * Nothing else carries state: the LR is a function of the step, AdamW's
 * bias correction takes the step, the dropout masks and the synthetic
 * streams are counter-based on (seed, step, ...), the base weights are
 * fixed.  The directory is written under a temporary name and renamed. */
#ifndef POROS_TRAIN_CHECKPOINT_H
#define POROS_TRAIN_CHECKPOINT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "data.h"
#include "engine.h"
#include "train.h"

/* The state after `step` into c->out_dir/checkpoint-step<step>; events
 * is the run's events.jsonl so far.  0, or -1 with err. */
int checkpoint_save(struct engine *e, const struct train_config *c, int step, double loss_first, const char *events,
                    char *err, size_t errsz);

/* Restores c->resume into the engine and the token source and writes its
 * events into events (replacing the file).  *step: the checkpoint's step;
 * *loss_first: the run's first loss.  0, or -1 with err for a checkpoint
 * that is unreadable or was made with a different configuration (named). */
int checkpoint_resume(struct engine *e, struct token_source *data, const struct train_config *c, const char *events,
                      int *step, double *loss_first, char *err, size_t errsz);

/* The run's configuration in readable values: RUN_DIR/train_config.json,
 * a checkpoint's "config", the summary's keys (docs/checkpoints.md). */
cJSON *run_config_json(const struct train_config *c);

/* --resume DIR (a checkpoint, or a run directory: its newest whole
 * checkpoint): c->resume becomes the checkpoint; unless a cell was given,
 * every setting no flag in value gave is the checkpoint's; without --out
 * the run directory is the checkpoint's.  0, or -1 with err. */
int checkpoint_take(struct train_config *c, char *const value[OPT_COUNT], char *err, size_t errsz);

/* c against its checkpoint's configuration (c->model_hash known), before
 * anything is written: 0, or -1 with every difference in err. */
int checkpoint_check_config(const struct train_config *c, char *err, size_t errsz);

#endif
