/* tools/poros-train/train.h: what one training run is asked to do (from a
 * cell and/or flags), and the top-level call that does it. */
#ifndef POROS_TRAIN_H
#define POROS_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "cell.h"

enum train_mode { MODE_BLOCKWISE, MODE_RESIDENT };
extern const char *const train_mode_names[2]; /* "blockwise", "resident" */

struct train_config {
	char *model_id;
	char *configs_dir;       /* holds models/<slug>.json; NULL: not searched */
	enum method method;      /* poros (blockwise) or resident, for the summary */
	enum train_mode mode;
	enum precision precision;
	int steps, seq_len, batch_size, accum, warmup_steps; /* warmup_steps: left out of the timing only */
	int lr_warmup_steps;     /* linear LR warmup from 0 (lr_at) */
	char *dataset;           /* "synthetic", "synthetic:repeat" or a path */
	char *tokenizer;         /* --tokenizer / training.tokenizer; NULL: the model's own */
	int train_on;            /* enum train_on (tools/lib/dataset.h): which tokens are targets */
	uint64_t seed;
	double lr, weight_decay, max_grad_norm;
	enum lr_schedule lr_schedule;
	int rank;
	double alpha, dropout;
	unsigned target_mask;    /* bit i: lora_module_names[i] */
	int block_size, prefetch;
	int recompute;           /* resident: recompute each layer in backward (HF gradient
	                          * checkpointing); 0 keeps every layer's activations.
	                          * Blockwise always recomputes. */
	char *backend;           /* "cpu", "cuda" or "auto" */
	long long vram_budget;   /* bytes; 0: none */
	char *out_dir;           /* the run directory */
	char *init_adapter;      /* NULL: fresh LoRA init */
	int save_every;          /* 0: only the final adapter; else also adapter-stepN and checkpoint-stepN */
	char *resume;            /* a checkpoint-stepN directory to continue from; NULL: none */
	char *eval_dataset;      /* NULL: no evaluation */
	int eval_every;          /* evaluate after every N steps (and after the last); 0: only after the last */
	char *cell_id;
	int quiet;               /* no per-step progress on stderr */
	int plan;                /* --plan: print the device memory plan, run nothing */
	/* from the environment (options.c reads it once; man/poros-train.1) */
	int lora_ext;            /* POROS_LORA_EXT: NF4 LoRA terms ride in the base GEMMs (1) or not */
	int data_prefetch;       /* not POROS_NO_DATA_PREFETCH: stage the next batch on a thread */
	int profile;             /* POROS_PROFILE: device time per op category */
	int mlp_chunk;           /* POROS_MLP_CHUNK: MLP rows per chunk; 0: MLP_CHUNK_TOKENS (layer.h) */
};

/* The command line, one slot per option (the last one given wins); main.c
 * fills it, options.c gives it meaning. */
enum train_opt {
	OPT_CELL, OPT_MODEL, OPT_MODE, OPT_PRECISION, OPT_STEPS, OPT_SEQ_LEN, OPT_BATCH_SIZE, OPT_ACCUM, OPT_RANK,
	OPT_ALPHA, OPT_DROPOUT, OPT_TARGETS, OPT_BLOCK_SIZE, OPT_NO_PREFETCH, OPT_LR, OPT_LR_SCHEDULE, OPT_WARMUP,
	OPT_WEIGHT_DECAY, OPT_MAX_GRAD_NORM, OPT_SEED, OPT_DATASET, OPT_BACKEND, OPT_VRAM_BUDGET, OPT_CONFIGS, OPT_OUT,
	OPT_INIT_ADAPTER, OPT_SAVE_EVERY, OPT_QUIET, OPT_GRAD_CKPT, OPT_RESUME, OPT_EVAL_DATASET, OPT_EVAL_EVERY,
	OPT_TOKENIZER, OPT_LR_WARMUP, OPT_TRAIN_ON, OPT_PLAN, OPT_COUNT
};

#define TRAIN_SYNOPSIS \
	"usage: poros-train [--cell FILE | --model ID] [--mode blockwise|resident] [--precision nf4|bf16]\n" \
	"                   [--steps N] [--seq-len N] [--batch-size N] [--accum K] [--rank R] [--alpha A]\n" \
	"                   [--dropout P] [--targets LIST] [--block-size N] [--no-prefetch] [--lr LR]\n" \
	"                   [--lr-schedule constant|linear|cosine] [--lr-warmup N] [--warmup N]\n" \
	"                   [--weight-decay W] [--max-grad-norm G] [--seed S] [--dataset SPEC] [--tokenizer PATH]\n" \
	"                   [--train-on assistant|all]\n" \
	"                   [--backend cpu|cuda|auto]\n" \
	"                   [--vram-budget BYTES] [--configs DIR] [--out DIR] [--init-adapter DIR]\n" \
	"                   [--save-every N] [--resume DIR] [--eval-dataset SPEC] [--eval-every N]\n" \
	"                   [--gradient-checkpointing on|off] [--quiet] [--plan]\n"

/* Defaults, then the cell (--cell), then every other flag on top; dies
 * with EXIT_USAGE and a one-line message on a bad value. */
void train_config_from_options(struct train_config *c, char *const value[OPT_COUNT]);

/* Defaults for a run given only by flags. */
void train_config_defaults(struct train_config *c);
void train_config_free(struct train_config *c);
/* Fills c from a validated cell (the mode from its method).  -1 with err
 * when the method is not one poros-train runs. */
int train_config_from_cell(struct train_config *c, const struct cell *cell, char *err, size_t errsz);
/* Checks values that only make sense together; -1 with err. */
int train_config_check(const struct train_config *c, char *err, size_t errsz);

/* Runs the whole training (with c->plan, prints the plan line instead): resolves the model and dataset, builds host
 * weights and the engine, trains, writes events.jsonl and the adapter
 * into c->out_dir, and prints the summary line to summary_out.  Returns
 * the exit status (EXIT_OK, EXIT_RUNTIME for oom and runtime errors with
 * the summary printed, EXIT_USAGE for bad input with a message only). */
int train_run(const struct train_config *c, FILE *summary_out);

#endif
