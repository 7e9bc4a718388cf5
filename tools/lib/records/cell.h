/* tools/lib/records/cell.h: the cell, one (model x method x precision) of a bench
 * spec with every shared value.  The one definition of its JSON schema
 * ("poros.cell/1", documented in man/poros-spec.5 and
 * share/poros/schema/cell.schema.json): poros-expand writes it,
 * poros-arm and poros-train read it. */
#ifndef POROS_CELL_H
#define POROS_CELL_H

#include <stddef.h>
#include <cjson/cJSON.h>

#define CELL_SCHEMA "poros.cell/1"
#define CELL_MAX_TARGETS 7

enum method { METHOD_POROS, METHOD_RESIDENT, METHOD_UNSLOTH, METHOD_PEFT, METHOD_ACCELERATE_OFFLOAD, METHOD_COUNT };
enum precision { PRECISION_NF4, PRECISION_BF16, PRECISION_COUNT };
enum lr_schedule { LR_CONSTANT, LR_LINEAR, LR_COSINE, LR_COUNT };
/* blockwise's layer checkpoints: every layer's input, or each block's first */
enum checkpoints { CKPT_LAYER, CKPT_BLOCK, CKPT_COUNT };

extern const char *const method_names[METHOD_COUNT];       /* "poros", "resident", "unsloth", "peft", "accelerate_offload" */
extern const char *const precision_names[PRECISION_COUNT]; /* "nf4", "bf16" */
extern const char *const lr_schedule_names[LR_COUNT];      /* "constant", "linear", "cosine" */
extern const char *const checkpoints_names[CKPT_COUNT];    /* "layer", "block" */
/* training.train_on: index 0 is "absent" (answers of chats, all of text),
 * then "assistant", "all"; the numbers of enum train_on (dataset.h) */
#define TRAIN_ON_COUNT 3
extern const char *const train_on_names[TRAIN_ON_COUNT];   /* "", "assistant", "all" */
/* The seven projections, in this order: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj */
extern const char *const lora_module_names[CELL_MAX_TARGETS];

struct cell {
	char *cell_id;      /* <method>_<arch>_<precision> */
	char *spec_id;
	enum method method;
	enum precision precision;
	struct {
		char *model_id;     /* "Qwen/Qwen2.5-32B" or a local path */
		char *display_name;
		double param_count_b;
		char *arch;         /* slug: "qwen2_5_32b" */
	} model;
	struct {
		char *gpu_name;
		double vram_gb;
		int pcie_gen;
		double host_ram_gb; /* 0: not specified (poros plan takes the machine's) */
		int gpus;           /* GPUs one run trains on, one rank each (poros-train --gpus); 0: one */
	} hardware;
	struct {
		int steps, seq_len, batch_size, gradient_accumulation_steps, warmup_steps;
		char *dataset;      /* "synthetic" or a path / dataset id */
		char *tokenizer;    /* tokenizer.json or a directory holding one, for text and
		                     * messages datasets; NULL: the model's own.  Optional in
		                     * cell JSON (absent: NULL) and written only when set. */
		char *chat_date;    /* "YYYY-MM-DD": the day a chat template's strftime_now
		                     * formats (Llama-3.2); NULL: none, and such a template
		                     * is refused.  Optional, written only when set. */
		unsigned long long seed;
		double learning_rate, weight_decay, max_grad_norm;
		enum lr_schedule lr_schedule;
		int timeout_s;      /* per-arm wall clock bound */
		/* 0/1: recompute activations in backward (HF gradient
		 * checkpointing; Poros resident recomputes each layer).  The
		 * blockwise method recomputes each block whatever this says.
		 * Optional in cell JSON (absent: 0), so older cells still read. */
		int gradient_checkpointing;
		/* Optional (absent: NULL and 0), written only when eval_dataset
		 * is set: poros-train's evaluation (mean loss over the eval set's
		 * supervised tokens) every eval_every steps and after the last. */
		char *eval_dataset;
		int eval_every;
		/* Optional too (absent: 0 and 1): linear LR warmup steps, apart
		 * from warmup_steps (which are only left out of the timing), and
		 * how many fresh trainer processes poros-arm times. */
		int lr_warmup_steps, passes;
		/* 0: absent (per record kind), 1: "assistant", 2: "all";
		 * optional, written only when set */
		int train_on;
		/* Optional, written only when set (poros-train): a directory
		 * dataset's split (NULL: train) and the eval set's (NULL:
		 * validation, else test); eval_fraction (0: none) holds out
		 * that share of the dataset's documents as the eval set. */
		char *split, *eval_split;
		double eval_fraction;
	} training;
	struct {
		int rank;
		double alpha, dropout;
		int n_targets;
		unsigned target_mask; /* bit i set: lora_module_names[i] is targeted */
	} lora;
	struct {
		int block_size;
		int enable_prefetch;
		/* optional, written only when block (absent: layer) */
		int checkpoints;
	} poros;
	char *output_dir;
	long long tokens_per_step; /* batch_size * seq_len * gradient_accumulation_steps */
};

/* Builds the JSON object of a cell (every field, stable key order). */
cJSON *cell_to_json(const struct cell *c);
/* Reads and validates a cell object.  Returns 0, or -1 with err set to a
 * one-line reason naming the field ("training.steps: must be >= 1"). */
int cell_from_json(struct cell *c, const cJSON *obj, char *err, size_t errsz);
void cell_free(struct cell *c);

int method_from_name(const char *s);    /* -1 if unknown */
int precision_from_name(const char *s);
int lr_schedule_from_name(const char *s);
int lora_module_from_name(const char *s);

/* Every check of one cell in memory: ranges, strings, cell_id and
 * tokens_per_step consistency, warmup_steps < steps.  cell_from_json ends
 * with it; poros-expand runs it on every cell before writing any.
 * Returns 0, or -1 with err "training.warmup_steps: must be less than
 * training.steps (20), got 20". */
int cell_validate(const struct cell *c, char *err, size_t errsz);
/* The derived values and the rules across fields, each in one place:
 * cell_validate calls them, and so do poros-expand and poros-train's
 * flags, which word the message by a spec position or a flag. */
long long cell_tokens_per_step(const struct cell *c);  /* batch_size x seq_len x accumulation (one rank) */
int cell_warmup_fits(const struct cell *c);  /* warmup_steps < steps: a step is timed after the warmup */
int cell_eval_set_given(const struct cell *c); /* eval_every > 0 needs eval_dataset or eval_fraction */
/* A deep copy (dst owns its strings; cell_free it). */
void cell_copy(struct cell *dst, const struct cell *src);
/* malloc'd "<method>_<arch>_<precision>". */
char *cell_make_id(enum method m, const char *arch, enum precision p);

/* The range of one numeric cell field, by its path in the cell JSON
 * ("training.steps").  It lives in the field's row of cell_fields, so
 * cell_from_json, poros-expand and poros-train's flags can never disagree
 * on what is valid. */
struct cell_bound {
	const char *path;
	double min, max;
	unsigned char min_open;  /* min itself is excluded */
	unsigned char max_open;  /* max itself is excluded */
	unsigned char integer;   /* must be a whole number */
};
/* NULL if path names no numeric field. */
const struct cell_bound *cell_bound_find(const char *path);

/* --- the field table ---------------------------------------------------- */

/* What a field holds in struct cell, and how it is spelled in JSON. */
enum cell_kind {
	CK_CONST,   /* "schema": the text def_str; no member */
	CK_INT,     /* int; a JSON integer */
	CK_U64,     /* unsigned long long (the seed); a JSON integer */
	CK_I64,     /* long long (tokens_per_step); a JSON integer */
	CK_NUM,     /* double; a JSON number */
	CK_BOOL,    /* int 0/1; true or false */
	CK_STR,     /* char *; a string */
	CK_ENUM,    /* an enum (int): base + i is names[i] */
	CK_MODULES, /* unsigned target mask (and n_targets); a list of lora_module_names */
};
/* When a field may be absent from a cell, and when it is written. */
enum cell_presence {
	CP_REQUIRED,  /* always there */
	CP_NULLABLE,  /* always there; null when the spec did not say (0 or NULL in struct cell) */
	CP_OPTIONAL,  /* absent reads as def (older cells); always written */
	CP_IF_SET,    /* absent reads as def; written only when not def (a string: not NULL) */
	CP_WITH_PREV, /* absent reads as def; written exactly when the row before it is */
};
/* How a spec (poros-expand) takes a field of its hardware, training, lora
 * and poros sections: each such row is a key of its section unless CS_NONE. */
enum cell_spec {
	CS_KEY,       /* an optional key */
	CS_REQUIRED,  /* a spec must give it */
	CS_POSITIVE,  /* optional; a given value must be > 0, since 0 in a cell means "not said" */
	CS_NONE,      /* never in a spec (set by poros-train's flags or derived) */
};
/* The extra rule a string keeps (the messages are cell_validate's). */
enum cell_text { CT_PLAIN, CT_SAFE_NAME, CT_SLUG, CT_OUTPUT_DIR };

/* One row per field of the cell, in the order cell_to_json writes them.
 * cell_to_json, cell_from_json, cell_validate, cell_defaults and
 * poros-train's flags go by it; share/poros/schema/cell.schema.json is
 * held against it by tests/unit/test_cell_schema.c. */
struct cell_field {
	const char *path;          /* "training.seq_len"; top-level fields have no dot */
	enum cell_kind kind;
	size_t offset;             /* of the member in struct cell */
	enum cell_presence presence;
	struct cell_bound bound;   /* CK_INT, CK_U64, CK_I64, CK_NUM (bound.path is path) */
	unsigned char derived;     /* computed from other fields (tokens_per_step); never set by itself */
	size_t max_len;            /* CK_STR: at most this many bytes */
	enum cell_text text;       /* CK_STR */
	const char *const *names;  /* CK_ENUM: its texts */
	int n_names, base;         /* CK_ENUM: names[i] is the value base + i */
	const char *what;          /* CK_ENUM: the noun in "unknown schedule \"x\"" */
	/* What a field is when nothing gives it: an optional field absent
	 * from a cell, a run of poros-train from flags alone, a spec that
	 * leaves it out (poros-expand derives warmup_steps and alpha instead,
	 * and requires steps and seq_len).  CK_STR: def_str (NULL: none). */
	double def;
	const char *def_str;
	const char *flag;          /* the poros-train flag that sets it, or NULL */
	const char *flag_arg;      /* its argument ("N"); NULL: it takes none and sets a CK_BOOL false */
	enum cell_spec spec;       /* as a spec key */
};
extern const struct cell_field cell_fields[];
extern const int cell_field_count;

/* The row of path, or NULL. */
const struct cell_field *cell_field_find(const char *path);
/* Every field of c set to its row's def (strings copied; cell_free it),
 * n_targets and tokens_per_step derived; the rest 0 / NULL. */
void cell_defaults(struct cell *c);
/* Sets field f of c from text, as given to a flag: numbers range-checked
 * as in a cell, enums by name, CK_BOOL "on"/"off" (or, with no flag_arg,
 * false), CK_MODULES "all" or a comma list.  Returns 0, or -1 with err
 * naming shown ("--seed: must be at most 4294967295, got 5000000000"). */
int cell_field_parse(struct cell *c, const struct cell_field *f, const char *shown, const char *text,
                     char *err, size_t errsz);
/* 0 when v is finite and within b; else -1 with err
 * "SHOWN: must be at least 1, got 0" (shown: the path to name, which
 * for a spec may differ from b->path, e.g. "models[1].param_count_b"). */
int cell_bound_check(const struct cell_bound *b, const char *shown, double v, char *err, size_t errsz);

/* Text limits of the cell's strings (bytes). */
#define CELL_NAME_MAX 256   /* display_name, gpu_name */
#define CELL_PATH_MAX 4096  /* model_id, dataset, output_dir */

/* Why s cannot be a cell's text, or NULL: "missing", "must not be empty",
 * "too long" (over max bytes), "not valid UTF-8", "contains a control
 * character" (these strings reach file names, logs and HTML). */
const char *cell_text_problem(const char *s, size_t max);
/* An output directory a spec may name: not empty, at most CELL_PATH_MAX
 * bytes, no control characters, no ".." component; relative or absolute.
 * Returns NULL when fine, else why not ("has a \"..\" component"). */
const char *cell_output_dir_problem(const char *dir);

#endif
