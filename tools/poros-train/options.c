/* tools/poros-train/options.c: a run's configuration from defaults, a
 * cell and flags, in that order of precedence (flags win). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "checkpoint.h"
#include "layer.h"
#include "util/util.h"
#include "comm.h"
#include "train.h"

const char *const train_mode_names[2] = { "blockwise", "resident" };

const char *const train_opt_names[OPT_COUNT] = {
#define TRAIN_OPT_NAME(id, name, has_arg) name,
	TRAIN_OPTIONS(TRAIN_OPT_NAME)
#undef TRAIN_OPT_NAME
};

const struct train_opt_help train_opt_help[OPT_COUNT] = {
	[OPT_CELL] = { "FILE", "the cell to run (poros-expand's; - reads it from stdin); flags override its fields" },
	[OPT_MODEL] = { "ID", "a checkpoint directory, a HF cache id, or a shape in configs/models (synthetic weights)" },
	[OPT_MODE] = { "blockwise|resident", "stream blocks of layers (Poros), or keep every layer on the device" },
	[OPT_PRECISION] = { "nf4|bf16", "the frozen base's precision (nf4)" },
	[OPT_STEPS] = { "N", "optimizer steps (10); wins over --epochs" },
	[OPT_SEQ_LEN] = { "N", "tokens per row (128)" },
	[OPT_BATCH_SIZE] = { "N", "rows per micro-batch (1)" },
	[OPT_ACCUM] = { "K", "micro-batches per optimizer step (1)" },
	[OPT_RANK] = { "R", "LoRA rank (16)" },
	[OPT_ALPHA] = { "A", "LoRA alpha; the scale is alpha/rank (32)" },
	[OPT_DROPOUT] = { "P", "LoRA dropout, 0 <= P < 1 (0.05)" },
	[OPT_TARGETS] = { "LIST", "projections to adapt: q_proj,k_proj,...,down_proj, all or all-linear (all)" },
	[OPT_BLOCK_SIZE] = { "N", "blockwise: layers per streamed block (4)" },
	[OPT_NO_PREFETCH] = { NULL, "blockwise: copy each block when it is needed, not during the one before" },
	[OPT_CHECKPOINTS] = { "layer|block", "blockwise: keep every layer's input on the host, or each block's first (layer)" },
	[OPT_CHECKPOINT_DIR] = { "DIR", "blockwise: the checkpoints the host cannot hold in one unlinked file here (none)" },
	[OPT_LR] = { "LR", "peak learning rate (2e-4)" },
	[OPT_LR_SCHEDULE] = { "constant|linear|cosine", "the learning rate after its warmup (constant)" },
	[OPT_TIMING_WARMUP] = { "N", "leading steps left out of the timing, trained as any other (0)" },
	[OPT_LR_WARMUP] = { "N", "steps of linear learning-rate warmup from 0 (0; HF's --warmup-steps)" },
	[OPT_WEIGHT_DECAY] = { "W", "AdamW's decoupled weight decay (0)" },
	[OPT_MAX_GRAD_NORM] = { "G", "clip the global gradient norm to G; 0: no clipping (1)" },
	[OPT_SEED] = { "S", "seeds synthetic weights and data, the LoRA init, dropout, shuffling (42)" },
	[OPT_DATASET] = { "SPEC", "training data: synthetic, synthetic:repeat, FILE.u16|u32|bin, a file or directory" },
	[OPT_TOKENIZER] = { "PATH", "a tokenizer.json (or its directory) instead of the model's own" },
	[OPT_CHAT_DATE] = { "YYYY-MM-DD", "the day a chat template's strftime_now formats" },
	[OPT_TRAIN_ON] = { "assistant|all", "the loss's targets (unset: answers, completions, all of text)" },
	[OPT_BACKEND] = { "cpu|cuda|auto", "where the math runs (auto: CUDA when a device is there)" },
	[OPT_VRAM_BUDGET] = { "BYTES", "refuse (status oom) a run whose device plan exceeds BYTES (e.g. 20GiB)" },
	[OPT_OPTIMIZER_STATE] = { "device|host", "where the AdamW moments live (device); host: pinned, the same bits" },
	[OPT_CONFIGS] = { "DIR", "where models/<slug>.json shapes are (the tree's configs)" },
	[OPT_OUT] = { "DIR", "the run directory (out/runs/<cell_id>)" },
	[OPT_INIT_ADAPTER] = { "DIR", "start from (or, with --eval-only, evaluate) this PEFT adapter" },
	[OPT_SAVE_EVERY] = { "N", "also save adapter-stepN and checkpoint-stepN every N steps" },
	[OPT_SAVE_TOTAL_LIMIT] = { "N", "keep the N newest whole checkpoints, an older one deleted once a new one is in" },
	[OPT_QUIET] = { NULL, "no per-step progress on standard error" },
	[OPT_GRAD_CKPT] = { "on|off", "resident: recompute each layer in the backward (off)" },
	[OPT_RESUME] = { "DIR", "continue a run from its checkpoint-stepN directory, bit for bit" },
	[OPT_EVAL_DATASET] = { "SPEC", "an evaluation set: eval_loss after the last step (and every --eval-every)" },
	[OPT_EVAL_EVERY] = { "N", "evaluate after every N steps too (0: after the last only)" },
	[OPT_PLAN] = { NULL, "print the device and host memory plan as one JSON line; run nothing" },
	[OPT_SPLIT] = { "NAME", "the split of a directory dataset to train on (train)" },
	[OPT_EVAL_SPLIT] = { "NAME", "the split of a directory --eval-dataset (validation, else test)" },
	[OPT_EVAL_FRACTION] = { "F", "hold out ceil(F x documents) of --dataset as the evaluation set" },
	[OPT_EPOCHS] = { "E", "passes over the data that set the steps, without --steps" },
	[OPT_EVAL_ONLY] = { NULL, "no training: eval_loss and perplexity of the base (+ --init-adapter)" },
	[OPT_NPROC] = { "N", "start N ranks of this host, one run data-parallel (man poros-train: DATA PARALLEL)" },
	[OPT_GPUS] = { "N|all", "start N ranks, one a GPU, over NCCL (the cuda backend; all: every GPU seen)" },
};

void train_config_defaults(struct train_config *c)
{
	memset(c, 0, sizeof *c);
	cell_defaults(&c->cell); /* the cell table's defaults, as for a spec */
	c->mode = c->cell.method == METHOD_POROS ? MODE_BLOCKWISE : MODE_RESIDENT;
	c->backend = xstrdup("auto");
	c->lora_ext = 1;
	c->data_prefetch = 1;
	c->attn_ckpt = ATTN_CKPT_AUTO;
	c->disk_records_forced = -1;
	c->disk_direct = 1;
}

void train_config_free(struct train_config *c)
{
	cell_free(&c->cell);
	free(c->configs_dir);
	free(c->backend);
	free(c->out_dir);
	free(c->init_adapter);
	free(c->resume);
	free(c->checkpoint_dir);
	memset(c, 0, sizeof *c);
}

static void replace(char **field, const char *s)
{
	free(*field);
	*field = s ? xstrdup(s) : NULL;
}

int train_config_from_cell(struct train_config *c, const struct cell *cell, char *err, size_t errsz)
{
	if (cell->method != METHOD_POROS && cell->method != METHOD_RESIDENT) {
		snprintf(err, errsz, "poros-train runs methods poros and resident; use poros-arm for %s",
		         method_names[cell->method]);
		return -1;
	}
	cell_free(&c->cell);
	cell_copy(&c->cell, cell);
	c->mode = cell->method == METHOD_POROS ? MODE_BLOCKWISE : MODE_RESIDENT;
	free(c->out_dir);
	c->out_dir = xasprintf("%s/runs/%s", cell->output_dir, cell->cell_id);
	return 0;
}

/* --eval-only: an evaluation set, and nothing a training run alone does. */
static int eval_only_check(const struct train_config *c, char *err, size_t errsz)
{
	const struct cell *cl = &c->cell;

	if (cl->training.eval_dataset == NULL && cl->training.eval_fraction == 0)
		return snprintf(err, errsz, "--eval-only: needs an evaluation set: --eval-dataset SPEC, or --dataset SPEC "
		                "with --eval-fraction F (the documents a training run holds out)"), -1;
	if (c->resume)
		return snprintf(err, errsz, "--eval-only and --resume: an evaluation trains nothing; give the adapter "
		                "with --init-adapter"), -1;
	if (c->save_every > 0)
		return snprintf(err, errsz, "--eval-only and --save-every: an evaluation saves nothing"), -1;
	if (cl->training.eval_every > 0)
		return snprintf(err, errsz, "--eval-only and --eval-every: an evaluation runs once"), -1;
	if (c->epochs > 0)
		return snprintf(err, errsz, "--eval-only and --epochs: an evaluation makes one pass over its set"), -1;
	if (c->checkpoint_dir)
		return snprintf(err, errsz, "--eval-only and --checkpoint-dir: an evaluation keeps no checkpoints"), -1;
	return 0;
}

int train_config_check(const struct train_config *c, char *err, size_t errsz)
{
	if (c->cell.model.model_id == NULL) /* an empty one is refused as --model's text */
		return snprintf(err, errsz, "no model: give --cell FILE or --model ID"), -1;
	/* each value's range is its cell field's (cell_field_parse, cell_from_json) */
	if ((long long)c->cell.training.seq_len * c->cell.training.batch_size > (1LL << 24))
		return snprintf(err, errsz, "--batch-size x --seq-len: %lld tokens per micro-batch is more than %lld",
		                (long long)c->cell.training.seq_len * c->cell.training.batch_size, 1LL << 24), -1;
	if (strcmp(c->backend, "cpu") && strcmp(c->backend, "cuda") && strcmp(c->backend, "auto"))
		return snprintf(err, errsz, "--backend: unknown backend \"%s\" (expected one of: cpu, cuda, auto)",
		                c->backend), -1;
	if (c->mode == MODE_RESIDENT && c->cell.poros.checkpoints == CKPT_BLOCK)
		return snprintf(err, errsz, "--checkpoints block: the resident schedule keeps every layer's input on the "
		                "device; block checkpoints are blockwise's (--mode blockwise)"), -1;
	if (c->checkpoint_dir && c->mode == MODE_RESIDENT)
		return snprintf(err, errsz, "--checkpoint-dir: the resident schedule keeps every layer's input on the "
		                "device; checkpoints on disk are blockwise's (--mode blockwise)"), -1;
	if (c->checkpoint_dir && *c->checkpoint_dir == '\0')
		return snprintf(err, errsz, "--checkpoint-dir: empty directory name"), -1;
	if (c->out_dir == NULL || *c->out_dir == '\0')
		return snprintf(err, errsz, "--out: empty run directory"), -1;
	/* a resumed run's adapter is the checkpoint's: a warm start on top of
	 * it would be ignored, so it is refused */
	if (c->resume && c->init_adapter)
		return snprintf(err, errsz, "--resume and --init-adapter: a resumed run continues the checkpoint's "
		                "adapter; give one of them"), -1;
	if (!cell_eval_set_given(&c->cell))
		return snprintf(err, errsz, "--eval-every: needs an evaluation dataset (--eval-dataset or "
		                "--eval-fraction)"), -1;
	if (c->cell.training.split && !name_is_safe(c->cell.training.split))
		return snprintf(err, errsz, "--split: \"%s\" is no split name (letters, digits, '.', '_', '-')",
		                c->cell.training.split), -1;
	if (c->cell.training.eval_split && !name_is_safe(c->cell.training.eval_split))
		return snprintf(err, errsz, "--eval-split: \"%s\" is no split name (letters, digits, '.', '_', '-')",
		                c->cell.training.eval_split), -1;
	if (c->cell.training.eval_split && c->cell.training.eval_dataset == NULL)
		return snprintf(err, errsz, "--eval-split: needs an evaluation dataset (--eval-dataset)"), -1;
	if (c->cell.training.eval_fraction > 0 && c->cell.training.eval_dataset)
		return snprintf(err, errsz, "--eval-fraction and --eval-dataset: the fraction holds out part of "
		                "--dataset as the evaluation set; give one of them"), -1;
	return c->eval_only ? eval_only_check(c, err, errsz) : 0;
}

/* The environment's knobs, read here and nowhere else. */
static int config_from_env(struct train_config *c, char *err, size_t errsz)
{
	const char *ext = getenv("POROS_LORA_EXT"), *noprefetch = getenv("POROS_NO_DATA_PREFETCH");
	const char *prof = getenv("POROS_PROFILE"), *chunk = getenv("POROS_MLP_CHUNK"), *why;
	const char *attn = getenv("POROS_ATTN_CKPT"), *mem = getenv("POROS_MEM_AVAILABLE");
	const char *route = getenv("POROS_ATTENTION"), *opt_chunk = getenv("POROS_OPT_CHUNK");
	const char *comm = getenv("POROS_COMM"), *lanes = getenv("POROS_LANES"), *group = getenv("POROS_GROUP");
	const char *sets = getenv("POROS_CKPT_SETS");
	static const char *const comm_kinds[] = { "auto", "single", "mpi", "nccl", "tcp" }; /* comm.h's order */
	const char *after = getenv("POROS_PROGRESS_AFTER"), *shared = getenv("POROS_SHARED_BASE");
	long rows = 0, floats = 0;
	char *end;
	const char *v;

	/* the ranks' transport: a typo must not silently train on one rank */
	for (c->comm_kind = 0; comm && *comm && c->comm_kind < 5 && strcmp(comm, comm_kinds[c->comm_kind]); c->comm_kind++)
		;
	if (c->comm_kind == 5)
		return snprintf(err, errsz, "POROS_COMM: unknown value \"%s\" (expected one of: auto, single, mpi, nccl, "
		                "tcp)", comm), -1;

	/* the CUDA attention's route (kernels/ops.h) rounds otherwise: a typo
	 * must not silently take the other one */
	if (route && *route && strcmp(route, "mma") && strcmp(route, "cudnn"))
		return snprintf(err, errsz, "POROS_ATTENTION: unknown value \"%s\" (expected mma or cudnn)", route), -1;
	c->attention = route && *route ? route : NULL;

	/* the per-document cuDNN route's floor (kernels/ops.h): a typo must not
	 * silently keep the default */
	if (getenv("POROS_CUDNN_DOC_MIN") && *getenv("POROS_CUDNN_DOC_MIN")) {
		long n = strtol(getenv("POROS_CUDNN_DOC_MIN"), &end, 10);
		if (*end || n < 1 || n > 1 << 30)
			return snprintf(err, errsz, "POROS_CUDNN_DOC_MIN: \"%s\" is not a token count >= 1",
			                getenv("POROS_CUDNN_DOC_MIN")), -1;
	}

	/* the CPU backend's lazy copies (kernels/cpu/backend_cpu.c), a test of
	 * the stream order: a typo must not silently test nothing */
	if ((v = getenv("POROS_CPU_LAZY_COPIES")) && *v && strcmp(v, "0") && strcmp(v, "1"))
		return snprintf(err, errsz, "POROS_CPU_LAZY_COPIES: unknown value \"%s\" (expected 0 or 1)", v), -1;

	/* the cuDNN backward's workspace cap (kernels/ops.h): a typo must not
	 * silently keep the default */
	if ((v = getenv("POROS_CUDNN_WORKSPACE")) && *v) {
		long n = strtol(v, &end, 10);
		if (*end || n < 64 || n > 65536)
			return snprintf(err, errsz, "POROS_CUDNN_WORKSPACE: \"%s\" is not a number of MiB from 64 to 65536",
			                v), -1;
		c->cudnn_workspace_mb = n;
	}

	/* the cuDNN backward's tile length on long rows (kernels/ops.h), a
	 * test setting: a typo must not silently keep the default */
	if ((v = getenv("POROS_CUDNN_TILE")) && *v && strcmp(v, "auto") == 0) {
		c->cudnn_tile = -1;
	} else if (v && *v) {
		long n = strtol(v, &end, 10);
		if (*end || n < 64 || n % 64 || n > 1 << 24)
			return snprintf(err, errsz, "POROS_CUDNN_TILE: \"%s\" is not auto or a token count, a multiple of 64",
			                v), -1;
		c->cudnn_tile = n;
	}

	/* kernels/ops.h's LoRA extension: a typo must not silently leave it on */
	if (ext && *ext && strcmp(ext, "0") && strcmp(ext, "1"))
		return snprintf(err, errsz, "POROS_LORA_EXT: unknown value \"%s\" (expected 0 or 1)", ext), -1;
	c->lora_ext = !(ext && strcmp(ext, "0") == 0);
	/* blockwise's attention checkpoints change no bit, only memory and time */
	if (attn && *attn && strcmp(attn, "0") && strcmp(attn, "1") && strcmp(attn, "2"))
		return snprintf(err, errsz, "POROS_ATTN_CKPT: unknown value \"%s\" (expected 0, 1 or 2)", attn), -1;
	c->attn_ckpt = attn && *attn ? attn[0] - '0' : ATTN_CKPT_AUTO;
	/* blockwise's compute lanes change no bit, only memory and time */
	if (lanes && *lanes && strcmp(lanes, "1") && strcmp(lanes, "2"))
		return snprintf(err, errsz, "POROS_LANES: unknown value \"%s\" (expected 1 or 2)", lanes), -1;
	c->lanes = lanes && *lanes ? atoi(lanes) : 0;
	/* the device sets of layer checkpoints change no bit, only memory and time */
	if (sets && *sets && strcmp(sets, "1") && strcmp(sets, "2"))
		return snprintf(err, errsz, "POROS_CKPT_SETS: unknown value \"%s\" (expected 1 or 2)", sets), -1;
	c->ckpt_sets = sets && *sets ? atoi(sets) : 0;
	/* blockwise's micro-batch groups change no bit, only memory and time */
	if (group && *group) {
		long n = strtol(group, &end, 10);
		if (*end || n < 1 || n > GROUP_MAX)
			return snprintf(err, errsz, "POROS_GROUP: \"%s\" is not a number of micro-batches from 1 to %d",
			                group, GROUP_MAX), -1;
		c->group = (int)n;
	}
	/* the GEMMs' algorithms: chosen at a micro-batch's rows or a group's */
	if ((v = getenv("POROS_GEMM_CHOICE")) && *v && strcmp(v, "micro-batch") && strcmp(v, "group"))
		return snprintf(err, errsz, "POROS_GEMM_CHOICE: unknown value \"%s\" (expected micro-batch or group)", v), -1;
	c->gemm_choice_group = !(v && strcmp(v, "micro-batch") == 0);
	/* one copy of the base per host, or one a rank (memory only, no bits) */
	if (shared && *shared && strcmp(shared, "0") && strcmp(shared, "1"))
		return snprintf(err, errsz, "POROS_SHARED_BASE: unknown value \"%s\" (expected 0 or 1)", shared), -1;
	c->shared_base = !(shared && strcmp(shared, "0") == 0);
	c->data_prefetch = !(noprefetch && *noprefetch && strcmp(noprefetch, "0") != 0);
	c->profile = prof && *prof && strcmp(prof, "0") != 0;
	/* the MLP's rows per chunk (the sums' order, so bits): an ablation and test knob */
	if (chunk && *chunk && parse_long(chunk, 1, 1L << 30, &rows, &why) < 0)
		return snprintf(err, errsz, "POROS_MLP_CHUNK: %s: %s", why, chunk), -1;
	c->mlp_chunk = (int)rows;
	/* --optimizer-state host's parameters per chunk (no bits change): a test knob */
	if (opt_chunk && *opt_chunk && parse_long(opt_chunk, 1, 1L << 30, &floats, &why) < 0)
		return snprintf(err, errsz, "POROS_OPT_CHUNK: %s: %s", why, opt_chunk), -1;
	c->opt_chunk = floats;
	/* when the dataset's progress lines start: a test knob (0: at once) */
	c->progress_after = 1.0;
	if (after && *after) {
		errno = 0;
		c->progress_after = strtod(after, &end);
		if (*end || errno || !(c->progress_after >= 0 && c->progress_after <= 86400))
			return snprintf(err, errsz, "POROS_PROGRESS_AFTER: not a number of seconds in [0, 86400]: %s",
			                after), -1;
	}
	/* --checkpoint-dir's test knobs: the records on disk whatever the host
	 * has, the free space the disk check takes, buffered I/O where O_DIRECT
	 * would do (a filesystem that refuses it takes that path) */
	if ((v = getenv("POROS_DISK_CHECKPOINTS")) && *v) {
		if (parse_long(v, 0, 1L << 30, &c->disk_records_forced, &why) < 0)
			return snprintf(err, errsz, "POROS_DISK_CHECKPOINTS: %s: %s", why, v), -1;
		if (c->checkpoint_dir == NULL)
			return snprintf(err, errsz, "POROS_DISK_CHECKPOINTS: needs --checkpoint-dir"), -1;
	}
	if ((v = getenv("POROS_DISK_AVAILABLE")) && *v &&
	    (c->disk_available = opt_bytes("POROS_DISK_AVAILABLE", v)) == 0)
		return snprintf(err, errsz, "POROS_DISK_AVAILABLE: must be more than 0, got %s", v), -1;
	if ((v = getenv("POROS_DISK_DIRECT")) && *v && strcmp(v, "0") && strcmp(v, "1"))
		return snprintf(err, errsz, "POROS_DISK_DIRECT: unknown value \"%s\" (expected 0 or 1)", v), -1;
	c->disk_direct = !(v && strcmp(v, "0") == 0);
	/* what the host memory checks compare with: a test knob, never 0 (that would be no check) */
	c->mem_available = mem && *mem ? opt_bytes("POROS_MEM_AVAILABLE", mem) : 0;
	if (mem && *mem && c->mem_available == 0)
		return snprintf(err, errsz, "POROS_MEM_AVAILABLE: must be more than 0, got %s", mem), -1;
	return 0;
}

/* The whole of stdin, for --cell -. */
static char *read_stdin(void)
{
	size_t len = 0, cap = 65536, n;
	char *buf = xmalloc(cap);

	while ((n = fread(buf + len, 1, cap - len - 1, stdin)) > 0) {
		len += n;
		if (cap - len - 1 == 0)
			buf = xrealloc(buf, cap *= 2);
	}
	if (ferror(stdin))
		diesys(EXIT_RUNTIME, "<stdin>: read error");
	buf[len] = '\0';
	return buf;
}

static void load_cell(struct train_config *c, const char *path)
{
	const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
	char err[512];
	struct cell cell;
	cJSON *obj;

	if (strcmp(path, "-") == 0) {
		char *text = read_stdin();
		const char *end = NULL;

		/* a cell file or one JSONL line: one object, then only whitespace */
		obj = cJSON_ParseWithOpts(text, &end, 1);
		free(text);
		if (obj == NULL)
			die(EXIT_USAGE, "<stdin>: not one valid JSON object");
	} else if ((obj = json_read_file(path, err, sizeof err)) == NULL) {
		die(EXIT_USAGE, "%s", err);
	}
	memset(&cell, 0, sizeof cell);
	if (cell_from_json(&cell, obj, err, sizeof err) < 0) {
		cJSON_Delete(obj);
		die(EXIT_USAGE, "%s: %s", name, err);
	}
	cJSON_Delete(obj);
	if (train_config_from_cell(c, &cell, err, sizeof err) < 0) {
		cell_free(&cell);
		die(EXIT_USAGE, "%s: %s", name, err);
	}
	cell_free(&cell);
}

static int pick(const char *opt, const char *s, const char *const *names, int n)
{
	char list[256] = "";

	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	for (int i = 0; i < n; i++) {
		strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
		strncat(list, names[i], sizeof list - strlen(list) - 1);
	}
	die(EXIT_USAGE, "%s: unknown value \"%s\" (expected one of: %s)", opt, s, list);
}

/* The option named flag ("--steps"), or -1. */
static int option_of(const char *flag)
{
	for (int i = 0; i < OPT_COUNT; i++)
		if (strncmp(flag, "--", 2) == 0 && strcmp(flag + 2, train_opt_names[i]) == 0)
			return i;
	return -1;
}

static void apply_flags(struct train_config *c, char *const v[OPT_COUNT])
{
	char err[512];

	/* The flags that set a cell field, by the cell's table: a flag takes
	 * what a cell's field takes, with the same range. */
	for (int i = 0; i < cell_field_count; i++) {
		const struct cell_field *f = &cell_fields[i];
		int o = f->flag ? option_of(f->flag) : -1;

		if (f->flag && o < 0)
			die(EXIT_RUNTIME, "%s: the cell table names %s, which is no option", f->path, f->flag);
		if (o >= 0 && v[o] && cell_field_parse(&c->cell, f, f->flag, v[o], err, sizeof err) < 0)
			die(EXIT_USAGE, "%s", err);
	}
	if (v[OPT_MODE]) {
		c->mode = (enum train_mode)pick("--mode", v[OPT_MODE], train_mode_names, 2);
		c->cell.method = c->mode == MODE_BLOCKWISE ? METHOD_POROS : METHOD_RESIDENT;
	}
	if (v[OPT_BACKEND])
		replace(&c->backend, v[OPT_BACKEND]);
	if (v[OPT_VRAM_BUDGET])
		c->vram_budget = opt_bytes("--vram-budget", v[OPT_VRAM_BUDGET]);
	if (v[OPT_OPTIMIZER_STATE]) {
		static const char *const places[] = { "device", "host" };
		c->optimizer_on_host = pick("--optimizer-state", v[OPT_OPTIMIZER_STATE], places, 2);
	}
	if (v[OPT_OUT])
		replace(&c->out_dir, v[OPT_OUT]);
	if (v[OPT_CHECKPOINT_DIR])
		replace(&c->checkpoint_dir, v[OPT_CHECKPOINT_DIR]);
	if (v[OPT_INIT_ADAPTER])
		replace(&c->init_adapter, v[OPT_INIT_ADAPTER]);
	if (v[OPT_SAVE_EVERY])
		c->save_every = (int)opt_long("--save-every", v[OPT_SAVE_EVERY], 0, 1000000);
	if (v[OPT_NPROC] && v[OPT_GPUS])
		die(EXIT_USAGE, "--nproc and --gpus: give one (--gpus N is --nproc N on the cuda backend)");
	if (v[OPT_GPUS] && strcmp(v[OPT_GPUS], "all") == 0)
		c->nproc = GPUS_ALL; /* spawn.c counts them */
	else if (v[OPT_NPROC] || v[OPT_GPUS])
		c->nproc = (int)opt_long(v[OPT_GPUS] ? "--gpus" : "--nproc", v[OPT_GPUS] ? v[OPT_GPUS] : v[OPT_NPROC], 1, 256);
	c->nproc_gpus = v[OPT_GPUS] != NULL;
	if (v[OPT_SAVE_TOTAL_LIMIT])
		c->save_total_limit = (int)opt_long("--save-total-limit", v[OPT_SAVE_TOTAL_LIMIT], 1, 1000000);
	c->dataset_named = v[OPT_DATASET] != NULL || v[OPT_CELL] != NULL;
	if (v[OPT_EPOCHS])
		c->epochs = opt_double("--epochs", v[OPT_EPOCHS], 1e-6, 100000);
	c->steps_given = v[OPT_STEPS] != NULL;
	if (v[OPT_QUIET])
		c->quiet = 1;
	if (v[OPT_PLAN])
		c->plan = 1;
	if (v[OPT_EVAL_ONLY])
		c->eval_only = 1;
	if (c->eval_only && v[OPT_DATASET] && c->cell.training.eval_dataset)
		die(EXIT_USAGE, "--eval-only with --eval-dataset reads no training data: --dataset %s would change "
		    "nothing (--dataset with --eval-fraction evaluates the documents it holds out)", v[OPT_DATASET]);
	if (v[OPT_RESUME])
		replace(&c->resume, v[OPT_RESUME]);
}

/* configs/models lives beside the binary when run from the source tree
 * (bin/../configs) and under share/poros when installed. */
static char *default_configs_dir(void)
{
	return poros_resource("configs");
}

/* "q_proj,v_proj": the modules of mask, in buf. */
static const char *module_list(char *buf, size_t n, unsigned mask)
{
	buf[0] = '\0';
	for (int m = 0; m < CELL_MAX_TARGETS; m++)
		if ((mask >> m) & 1u)
			snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", *buf ? "," : "", lora_module_names[m]);
	return buf;
}

/* --eval-only --init-adapter DIR: the LoRA's rank, alpha and targets are
 * the adapter's (its scale alpha/rank is part of what is evaluated); a
 * flag or a cell that says otherwise is refused. */
static void shape_from_adapter(struct train_config *c, char *const v[OPT_COUNT])
{
	struct adapter a;
	char err[512];
	int given_rank = v[OPT_RANK] || v[OPT_CELL], given_alpha = v[OPT_ALPHA] || v[OPT_CELL];
	int given_targets = v[OPT_TARGETS] || v[OPT_CELL];
	const char *by = v[OPT_CELL] ? "the cell" : NULL;

	if (adapter_load(c->init_adapter, &a, err, sizeof err) < 0)
		die(EXIT_USAGE, "--init-adapter: %s", err);
	if (given_rank && a.rank != c->cell.lora.rank)
		die(EXIT_USAGE, "--init-adapter %s: rank %d, but %s says %d", c->init_adapter, a.rank,
		    v[OPT_RANK] ? "--rank" : by, c->cell.lora.rank);
	if (given_alpha && a.alpha != c->cell.lora.alpha)
		die(EXIT_USAGE, "--init-adapter %s: lora_alpha %g, but %s says %g", c->init_adapter, a.alpha,
		    v[OPT_ALPHA] ? "--alpha" : by, c->cell.lora.alpha);
	if (given_targets && a.target_mask != c->cell.lora.target_mask) {
		char have[160], want[160];

		die(EXIT_USAGE, "--init-adapter %s: targets %s, but %s says %s", c->init_adapter,
		    module_list(have, sizeof have, a.target_mask), v[OPT_TARGETS] ? "--targets" : by,
		    module_list(want, sizeof want, c->cell.lora.target_mask));
	}
	c->cell.lora.rank = a.rank;
	c->cell.lora.alpha = a.alpha;
	c->cell.lora.target_mask = a.target_mask;
	c->cell.lora.n_targets = __builtin_popcount(a.target_mask);
	adapter_free(&a);
}

void train_config_from_options(struct train_config *c, char *const v[OPT_COUNT])
{
	char err[512], *configs;

	train_config_defaults(c);
	if (v[OPT_CELL])
		load_cell(c, v[OPT_CELL]);
	apply_flags(c, v);
	/* a cell's GPU count is one run's: never silently one GPU (a rank of it is started as one) */
	if (c->cell.hardware.gpus > 1 && c->nproc == 0 && !comm_env_launched())
		die(EXIT_USAGE, "--cell: hardware.gpus is %d: give --gpus %d (one rank a GPU)", c->cell.hardware.gpus,
		    c->cell.hardware.gpus);
	if (c->cell.hardware.gpus > 1 && c->nproc_gpus && c->nproc > 0 && c->nproc != c->cell.hardware.gpus)
		die(EXIT_USAGE, "--gpus %d: the cell's hardware.gpus is %d", c->nproc, c->cell.hardware.gpus);
	if (c->eval_only && c->init_adapter)
		shape_from_adapter(c, v);
	if (c->resume && !c->eval_only && checkpoint_take(c, v, err, sizeof err) < 0) /* --eval-only refuses it below */
		die(EXIT_USAGE, "%s", err);
	if (c->cell.cell_id == NULL && c->cell.model.model_id) {
		char *slug = slugify(c->cell.model.model_id, 1);

		c->cell.cell_id = cell_make_id(c->cell.method, slug, c->cell.precision);
		free(slug);
	}
	c->cell.tokens_per_step = cell_tokens_per_step(&c->cell);
	if (c->out_dir == NULL && c->cell.cell_id)
		c->out_dir = xasprintf("out/runs/%s", c->cell.cell_id);
	configs = v[OPT_CONFIGS] ? xstrdup(v[OPT_CONFIGS]) : default_configs_dir();
	if (configs) {
		c->configs_dir = xasprintf("%s/models", configs);
		free(configs);
	}
	if (train_config_check(c, err, sizeof err) < 0 || config_from_env(c, err, sizeof err) < 0)
		die(EXIT_USAGE, "%s", err);
}
