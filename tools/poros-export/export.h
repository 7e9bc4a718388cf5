/* tools/poros-export/export.h: merging a PEFT LoRA adapter into its base
 * checkpoint and writing the result as a bf16 Hugging Face checkpoint.
 *
 * The parts, in the order a run uses them:
 *   export.c       the run: options, the plan (tensors in order, shards), the summary
 *   lora_config.c  adapter_config.json: what it asks for, implemented or refused by name
 *   inputs.c       the base and the adapter opened, each LoRA pair matched to its base weight
 *   outdir.c       --out and the scratch directory beside it, renamed into place at the end
 *   merge.c        the merge arithmetic and the shards, streamed and read back
 *   hf_files.c     config.json, the shard index and the tokenizer files
 *   model_card.c   README.md: the base, the adapter and the run's training record
 *   gguf_out.c     --format gguf: the tensors named, converted and written as one GGUF file
 *   gguf_meta.c    --format gguf: the model's and the tokenizer's metadata keys
 *   gguf_lora.c    --format gguf-lora: the adapter alone as llama.cpp's LoRA GGUF
 *   check_vllm.c   --check vllm: an adapter checked against what vLLM loads */
#ifndef POROS_EXPORT_H
#define POROS_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "records/records.h"
#include "model/model.h"

#define EXPORT_SYNOPSIS \
	"usage: poros-export --base DIR --adapter DIR --out DIR [--max-shard-size SIZE] [--merge-into original|dequantized]\n" \
	"                    [--force]\n" \
	"       poros-export --format gguf --outtype bf16|f16|q8_0 --base DIR --adapter DIR --out FILE\n" \
	"                    [--merge-into original|dequantized] [--force]\n" \
	"       poros-export --format gguf-lora --outtype f32|bf16|f16 --base DIR --adapter DIR --out FILE [--force]\n" \
	"       poros-export --check vllm ADAPTER_DIR\n"

enum export_format { FORMAT_HF, FORMAT_GGUF, FORMAT_GGUF_LORA };
/* --merge-into: the base weights a merge adds the adapter to: the
 * checkpoint's, or what an NF4 (QLoRA) training run computed with,
 * dequant(NF4(W)), for every projection of every layer */
enum merge_into { MERGE_ORIGINAL, MERGE_DEQUANTIZED };
/* --outtype: what a GGUF file stores its matrices as (1-D tensors are F32);
 * f32 for gguf-lora only, q8_0 for gguf only */
enum gguf_outtype { OUTTYPE_NONE, OUTTYPE_BF16, OUTTYPE_F16, OUTTYPE_Q8_0, OUTTYPE_F32 };

struct export_opts {
	const char *base;          /* checkpoint directory (or a model id in the local HF cache) */
	const char *adapter;       /* PEFT adapter directory */
	const char *out;           /* the directory to create */
	long long max_shard_size;  /* bytes of tensor data per shard */
	int force;                 /* replace a non-empty --out */
	enum export_format format;
	enum gguf_outtype outtype; /* FORMAT_GGUF and FORMAT_GGUF_LORA only; required there */
	enum merge_into merge_into;
	int merge_into_set;        /* 0: from the run's train_config.json, else original */
	const char *configs_dir;   /* configs/models, to name a synthetic shape; may be NULL */
};

/* "5GB" (10^9), "5GiB" (2^30), "500MB", "1KiB", a plain byte count; as
 * transformers' max_shard_size reads them.  0, or -1 and *why. */
int export_parse_size(const char *s, long long *out, const char **why);

/* Does the export and prints one summary line (JSON) on summary.  Returns
 * an exit code; when it is not 0, err holds the one-line message. */
int export_run(const struct export_opts *o, FILE *summary, char *err, size_t errsz);

/* --check vllm: one JSON line on out and a line per reason on stderr;
 * EXIT_OK ready, EXIT_RUNTIME not (the reasons), EXIT_USAGE with err when
 * dir is not an adapter to check. */
int check_vllm(const char *dir, FILE *out, char *err, size_t errsz);

/* --- between the parts (main.c needs none of this) ----------------------- */

#define N_MODULES CELL_MAX_TARGETS

struct lora_pair {
	const struct st_tensor *a, *b;   /* (R,K), (N,R) in the adapter file */
	const struct st_tensor *w;       /* (N,K) in the base */
	const struct st_file *wf;
};

struct out_tensor {
	const struct st_file *f;
	const struct st_tensor *t;
	enum st_dtype dtype;             /* as written */
	size_t nbytes;                   /* as written */
	const struct lora_pair *lora;    /* NULL: copied */
	int nf4;                         /* --merge-into dequantized: a projection weight, taken as dequant(NF4(W)) */
	int shard;
};

struct shard { int first, count; size_t bytes; char *name; };

struct job {
	const struct export_opts *o;
	char *err;
	size_t errsz;
	/* the base */
	struct model_config mc;
	cJSON *config;
	struct st_checkpoint ck;
	/* the adapter */
	char *acfg_path, *aweights_path;
	int rank, rslora;
	double alpha;
	float scale;
	unsigned mask;
	unsigned char *layer_on;         /* layers_to_transform, or NULL: every layer */
	char *adapter_base;              /* base_model_name_or_path, or NULL */
	struct st_file af;
	int af_open;
	struct lora_pair *pairs;         /* [layer * N_MODULES + module]; a == NULL: none */
	int npairs;
	enum merge_into merge_into;      /* --merge-into, or what the run's train_config.json says */
	char *train_config;              /* that file when it decided, or NULL */
	int ndequantized;                /* tensors with nf4 set */
	/* the output */
	char *out, *parent, *name;       /* --out without trailing '/', its directory and name */
	struct out_tensor *t;
	int n;
	struct shard *shards;
	int nshards;
	size_t total_size;
};

/* export.c */
/* Formats the job's one-line error and returns code. */
int fail(struct job *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int is_float(enum st_dtype d);
char *human_bytes(char *buf, size_t n, double b);

/* lora_config.c: j->acfg_path into rank, alpha, scale, mask, layer_on, adapter_base */
int parse_lora_config(struct job *j);

/* inputs.c */
int open_base(struct job *j);
int open_adapter(struct job *j);
int load_pairs(struct job *j);
int find_weights(struct job *j);
int same_base(const struct job *j);

/* outdir.c */
int split_out(struct job *j);
int check_out(struct job *j);
int scratch_create(struct job *j, int nfiles);
char *scratch_path(const char *name);
int scratch_write(struct job *j, const char *name, const void *data, size_t len);
int commit(struct job *j);
void scratch_remove(void);

/* merge.c */
int write_shard(struct job *j, const struct shard *s);
/* The tensor as the merged checkpoint stores it, st_numel bf16 values. */
int tensor_bf16(struct job *j, const struct out_tensor *o, uint16_t *out);

/* outdir.c, --format gguf: --out a file, replaced by a rename */
int check_out_file(struct job *j);
int commit_file(struct job *j, const char *path);

/* gguf_out.c */
/* One tensor of a GGUF file: a model tensor (o) or one side of a LoRA pair. */
struct gguf_tensor {
	const struct out_tensor *o;      /* a model tensor, or NULL */
	const struct lora_pair *pair;    /* --format gguf-lora: the pair, or NULL */
	float *values;                   /* neither: F32 values computed here (rope_freqs), owned */
	int lora_b;                      /* with pair: 1 lora_b, 0 lora_a */
	char name[80];
	enum ggml_type type;
	int ndim;
	int64_t ne[ST_MAX_DIMS];         /* ggml order */
	int permute_heads;               /* > 0: rows permuted in this many heads */
};

int write_gguf(struct job *j, size_t *file_size, int *ntensors);
/* llama.cpp's name of an HF tensor: 1, 0 for one llama.cpp does without (a
 * rotary inv_freq buffer), -1 for one it has no name for. */
int gguf_name(char *out, size_t n, const char *hf);
/* Llama's q and k: the heads whose rows are reordered for llama.cpp's RoPE, or 0. */
int heads_to_permute(const struct job *j, const char *hf);
/* Within each head of D rows: row h*D + 2i + s comes from h*D + s*D/2 + i. */
void permute_rows(void *out, const void *in, long rows, long cols, int heads, size_t elsize);
/* The file at path: header, then each g's data; its size in *file_size. */
int gguf_write_file(struct job *j, const char *path, struct gguf_writer *w, const struct gguf_tensor *g, int n,
                    size_t *file_size);

/* gguf_lora.c */
int write_gguf_lora(struct job *j, size_t *file_size, int *ntensors);
/* g's data (a side of a LoRA pair) as g->type into out */
int lora_tensor_data(struct job *j, const struct gguf_tensor *g, unsigned char *out);

/* gguf_meta.c: every metadata key into w; the job's error when the model
 * or its tokenizer has something llama.cpp would read otherwise */
int gguf_metadata(struct job *j, struct gguf_writer *w);
/* llama.cpp's LLAMA_FTYPE_MOSTLY_* of an --outtype */
uint32_t gguf_file_type(enum gguf_outtype t);

/* hf_files.c */
extern const size_t n_tokenizer_files;
int write_index(struct job *j);
int write_config(struct job *j);
int copy_tokenizer(struct job *j, int *copied);

/* model_card.c: README.md into the scratch directory */
/* The run directory an adapter directory is in (RUN of RUN/adapter), malloc'd. */
char *adapter_run_dir(const char *adapter);
int write_model_card(struct job *j, int tokenizer_files);

#endif
