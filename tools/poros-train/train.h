/* tools/poros-train/train.h: what one training run is asked to do (from a
 * cell and/or flags), and the top-level call that does it. */
#ifndef POROS_TRAIN_H
#define POROS_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "records/records.h"

enum train_mode { MODE_BLOCKWISE, MODE_RESIDENT };
extern const char *const train_mode_names[2]; /* "blockwise", "resident" */

struct train_config {
	/* The cell this run is: the one --cell gave, or the table's defaults
	 * (cell_defaults); flags set its fields on top (cell_fields' flag
	 * column).  A run from flags alone has no spec_id, display_name, arch
	 * or output_dir (NULL).  training.gradient_checkpointing, for the
	 * resident mode: recompute each layer in backward (blockwise always
	 * recomputes); training.warmup_steps are left out of the timing only. */
	struct cell cell;
	char *configs_dir;       /* holds models/<slug>.json; NULL: not searched */
	enum train_mode mode;    /* from cell.method: poros is blockwise */
	char *backend;           /* "cpu", "cuda" or "auto" */
	long long vram_budget;   /* bytes; 0: none */
	int optimizer_on_host;   /* --optimizer-state host: AdamW moments in pinned host memory, updated
	                            on the device a chunk at a time (the same bits as on the device) */
	char *checkpoint_dir;    /* --checkpoint-dir: where the checkpoint records the host cannot hold go
	                            (one unlinked file, ckpt_disk.h); NULL: all on the host */
	int disk_records;        /* the records in that file, which run.c settles before the plan (0: none) */
	struct ckpt_file *ckpt_file; /* the file, opened by run.c before the base loads; NULL before or none */
	char *out_dir;           /* the run directory */
	char *init_adapter;      /* NULL: fresh LoRA init */
	int save_every;          /* 0: only the final adapter; else also adapter-stepN and checkpoint-stepN */
	int save_total_limit;    /* --save-total-limit: keep this many newest checkpoint-stepN; 0: all */
	const char *model_hash;  /* the base's content (model_hash.h), set by train_run; NULL before */
	/* what the run reads as data, by content (data.h's token_source_hash),
	 * set by train_run with model_hash; NULL: a synthetic stream, no eval
	 * set, no tokenizer */
	const char *dataset_hash, *eval_dataset_hash, *tokenizer_hash;
	double epochs;           /* --epochs: passes over the data that set the steps; 0: none */
	int steps_given;         /* --steps was given: it wins over --epochs (HF's max_steps) */
	int accum_from_checkpoint; /* --resume without --accum: the checkpoint's global accumulation, per rank later */
	char *resume;            /* a checkpoint-stepN directory to continue from; NULL: none */
	int dataset_named;       /* the dataset came from --dataset or a cell, not the default "synthetic" */
	int quiet;               /* no per-step progress on stderr */
	int plan;                /* --plan: print the device memory plan, run nothing */
	int eval_only;           /* --eval-only: evaluate the base (+ init_adapter) once; no optimizer state */
	/* from the environment (options.c reads it once; man/poros-train.1) */
	int lora_ext;            /* POROS_LORA_EXT: NF4 LoRA terms ride in the base GEMMs (1) or not */
	int data_prefetch;       /* not POROS_NO_DATA_PREFETCH: stage the next batch on a thread */
	int profile;             /* POROS_PROFILE: device time per op category */
	int lanes;               /* POROS_LANES: blockwise runs micro-batches on 1 or 2 compute lanes;
	                            0: engine.c decides (engine_lanes) */
	int ckpt_sets;           /* POROS_CKPT_SETS: blockwise layer mode keeps 1 or 2 device sets of
	                            checkpoints; 0: run.c decides (choose_ckpt_sets; engine_ckpt_sets) */
	int group;               /* POROS_GROUP: blockwise runs up to this many micro-batches a layer call;
	                            1: one; 0 (unset): GROUP_AUTO_ROWS' worth where groups apply (engine_group) */
	int group_cut;           /* run.c: the unset group is over the device budget; one
	                            micro-batch a call (the GEMM choice keeps the group's rows) */
	int gemm_choice_group;   /* not POROS_GEMM_CHOICE=micro-batch: every schedule's row GEMMs run the algorithms
	                            chosen at a blockwise group's rows (engine_gemm_choice_rows) */
	const char *attention;   /* POROS_ATTENTION as given ("mma", "cudnn"); NULL: the default route */
	long cudnn_workspace_mb; /* POROS_CUDNN_WORKSPACE as given; 0: kernels/ops.h's default cap */
	long cudnn_tile; /* POROS_CUDNN_TILE as given: tokens, -1 auto, 0 unset (no tiles) */
	int mlp_chunk;           /* POROS_MLP_CHUNK: MLP rows per chunk; 0: MLP_CHUNK_TOKENS (layer.h) */
	long opt_chunk;          /* POROS_OPT_CHUNK: parameters per AdamW chunk with --optimizer-state host;
	                            0: OPT_CHUNK_FLOATS (plan.c) */
	long long mem_available; /* POROS_MEM_AVAILABLE: bytes the host checks take as available; 0: MemAvailable */
	long disk_records_forced; /* POROS_DISK_CHECKPOINTS: that many records on disk whatever the host has; -1: unset */
	long long disk_available; /* POROS_DISK_AVAILABLE: bytes the disk check takes as free; 0: statvfs */
	int disk_direct;         /* not POROS_DISK_DIRECT=0: the file opened O_DIRECT where the filesystem takes it */
	/* data parallel (run.c opens it; comm.h): this process's rank among
	 * ranks (1: alone); only rank 0 writes the run directory and stdout */
	struct comm *comm;
	int rank, ranks;
	int comm_kind;           /* POROS_COMM: comm.h's enum comm_kind (0 auto) */
	int nproc;               /* --nproc / --gpus N: start N ranks of this host (spawn.c); 0: none;
	                            GPUS_ALL: --gpus all, one a CUDA device */
	int nproc_gpus;          /* it was --gpus: one rank a GPU, the cuda backend */
	int local_ranks;         /* the ranks of this host (run.c, or --plan's --nproc/--gpus); 0 or 1: alone */
	int shared_base;         /* not POROS_SHARED_BASE=0: the ranks of a host share one base (shared_base.h) */
	double progress_after;   /* POROS_PROGRESS_AFTER: seconds of reading a dataset before its progress lines (1) */
	int attn_ckpt;           /* POROS_ATTN_CKPT: blockwise keeps each layer's attention output for its
	                            recomputation (ATTN_CKPT_OUTPUT), the whole attention sublayer's results
	                            (ATTN_CKPT_SUBLAYER), or runs it again (0); ATTN_CKPT_AUTO (unset): the
	                            output where the host and the device have the memory, which run.c
	                            decides (the engine takes it as ATTN_CKPT_OUTPUT) */
};

/* POROS_ATTN_CKPT's levels (schedule.c): 0 the layer inputs alone; 1 with
 * each layer's attention output and lse; 2 also q, k, v (and Qwen3's
 * pre-norm q, k and their rstd), the LoRA u of q, k, v and o, and the
 * residual sum x2, so the recomputation runs only the MLP's norm. */
enum { ATTN_CKPT_AUTO = -1, ATTN_CKPT_OUTPUT = 1, ATTN_CKPT_SUBLAYER = 2 };

/* The command line, one slot per option (the last one given wins); main.c
 * fills it, options.c gives it meaning.  X(id, name, has_arg): the flags
 * that set a cell field are named in tools/lib/records/cell.c's table too. */
#define TRAIN_OPTIONS(X) \
	X(CELL, "cell", 1) X(MODEL, "model", 1) X(MODE, "mode", 1) X(PRECISION, "precision", 1) \
	X(STEPS, "steps", 1) X(SEQ_LEN, "seq-len", 1) X(BATCH_SIZE, "batch-size", 1) X(ACCUM, "accum", 1) \
	X(RANK, "rank", 1) X(ALPHA, "alpha", 1) X(DROPOUT, "dropout", 1) X(TARGETS, "targets", 1) \
	X(BLOCK_SIZE, "block-size", 1) X(NO_PREFETCH, "no-prefetch", 0) X(CHECKPOINTS, "checkpoints", 1) X(LR, "lr", 1) \
	X(LR_SCHEDULE, "lr-schedule", 1) X(TIMING_WARMUP, "timing-warmup", 1) X(LR_WARMUP, "lr-warmup", 1) \
	X(WEIGHT_DECAY, "weight-decay", 1) X(MAX_GRAD_NORM, "max-grad-norm", 1) X(SEED, "seed", 1) \
	X(DATASET, "dataset", 1) X(TOKENIZER, "tokenizer", 1) X(CHAT_DATE, "chat-date", 1) X(TRAIN_ON, "train-on", 1) \
	X(BACKEND, "backend", 1) X(VRAM_BUDGET, "vram-budget", 1) X(OPTIMIZER_STATE, "optimizer-state", 1) \
	X(CONFIGS, "configs", 1) X(OUT, "out", 1) \
	X(INIT_ADAPTER, "init-adapter", 1) X(SAVE_EVERY, "save-every", 1) X(QUIET, "quiet", 0) \
	X(GRAD_CKPT, "gradient-checkpointing", 1) X(RESUME, "resume", 1) X(EVAL_DATASET, "eval-dataset", 1) \
	X(EVAL_EVERY, "eval-every", 1) X(PLAN, "plan", 0) X(SPLIT, "split", 1) X(EVAL_SPLIT, "eval-split", 1) \
	X(EVAL_FRACTION, "eval-fraction", 1) X(EPOCHS, "epochs", 1) X(NPROC, "nproc", 1) X(GPUS, "gpus", 1) \
	X(EVAL_ONLY, "eval-only", 0) X(SAVE_TOTAL_LIMIT, "save-total-limit", 1) X(CHECKPOINT_DIR, "checkpoint-dir", 1)

/* The names HF's Trainer, TRL and PEFT users type, as aliases of the
 * options above: X(id of the option, alias).  They take the same values
 * (a message about a value names the option's own spelling). */
#define TRAIN_ALIASES(X) \
	X(LR, "learning-rate") X(EPOCHS, "num-train-epochs") X(STEPS, "max-steps") \
	X(BATCH_SIZE, "per-device-train-batch-size") X(ACCUM, "gradient-accumulation-steps") X(RANK, "lora-r") \
	X(ALPHA, "lora-alpha") X(DROPOUT, "lora-dropout") X(SEQ_LEN, "max-seq-length") X(OUT, "output-dir") \
	X(RESUME, "resume-from-checkpoint") X(LR_WARMUP, "warmup-steps") X(TARGETS, "target-modules")

enum train_opt {
#define TRAIN_OPT_ENUM(id, name, has_arg) OPT_##id,
	TRAIN_OPTIONS(TRAIN_OPT_ENUM)
#undef TRAIN_OPT_ENUM
	OPT_COUNT
};
/* "cell", "model", ...: the long names, without "--" */
extern const char *const train_opt_names[OPT_COUNT];
/* --help's line for each option: its value's name (NULL: it takes none)
 * and what it does, in one line (options.c). */
struct train_opt_help {
	const char *arg, *line;
};
extern const struct train_opt_help train_opt_help[OPT_COUNT];

#define TRAIN_SYNOPSIS \
	"usage: poros-train [--cell FILE | --model ID] [--mode blockwise|resident] [--precision nf4|bf16]\n" \
	"                   [--steps N] [--epochs E] [--seq-len N] [--batch-size N] [--accum K] [--rank R]\n" \
	"                   [--alpha A] [--dropout P] [--targets LIST] [--block-size N] [--no-prefetch] [--lr LR]\n" \
	"                   [--lr-schedule constant|linear|cosine] [--lr-warmup N] [--timing-warmup N]\n" \
	"                   [--weight-decay W] [--max-grad-norm G] [--seed S] [--dataset SPEC] [--tokenizer PATH]\n" \
	"                   [--chat-date YYYY-MM-DD] [--train-on assistant|all]\n" \
	"                   [--checkpoints layer|block] [--checkpoint-dir DIR] [--backend cpu|cuda|auto]\n" \
	"                   [--vram-budget BYTES] [--optimizer-state device|host] [--configs DIR] [--out DIR]\n" \
	"                   [--init-adapter DIR]\n" \
	"                   [--save-every N] [--save-total-limit N] [--resume DIR] [--split NAME] [--eval-dataset SPEC]\n" \
	"                   [--eval-split NAME] [--eval-fraction F] [--eval-every N]\n" \
	"                   [--gradient-checkpointing on|off] [--eval-only] [--quiet] [--plan] [--nproc N | --gpus N|all]\n"

/* Defaults, then the cell (--cell), then every other flag on top; dies
 * with EXIT_USAGE and a one-line message on a bad value. */
void train_config_from_options(struct train_config *c, char *const value[OPT_COUNT]);

/* Defaults for a run given only by flags. */
void train_config_defaults(struct train_config *c);
void train_config_free(struct train_config *c);
/* Fills c from a validated cell (the mode from its method).  -1 with err
 * when the method is not one poros-train runs. */
int train_config_from_cell(struct train_config *c, const struct cell *cell, char *err, size_t errsz);
/* spawn.c: --nproc / --gpus N: this command line without them, N times,
 * as the ranks of a torchrun-style environment on 127.0.0.1; waits for
 * them and returns rank 0's exit status (1 when another rank failed). */
#define GPUS_ALL (-1)
int spawn_ranks(const struct train_config *c, int argc, char **argv);

/* Checks values that only make sense together; -1 with err. */
int train_config_check(const struct train_config *c, char *err, size_t errsz);

/* Runs the whole training (with c->plan, prints the plan line instead): resolves the model and dataset, builds host
 * weights and the engine, trains, writes events.jsonl and the adapter
 * into c->out_dir, and prints the summary line to summary_out.  Returns
 * the exit status (EXIT_OK, EXIT_RUNTIME for oom and runtime errors with
 * the summary printed, EXIT_USAGE for bad input with a message only). */
int train_run(const struct train_config *c, FILE *summary_out);

#endif
