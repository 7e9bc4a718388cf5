/* tools/lib/records/artifact.h: the RunArtifact, what one arm produced for one
 * cell.  The one definition of its JSON schema ("poros.artifact/1",
 * documented in man/poros-artifact.5 and
 * share/poros/schema/artifact.schema.json): poros-arm writes it,
 * poros-merge and poros-render read it.  Also reads the trainer summary
 * ("poros.summary/1") that poros-train and the Python arms print last.
 *
 * "Not measured" is null in JSON; in C it is NaN for a double, -1 for a
 * count and NULL for a string. */
#ifndef POROS_ARTIFACT_H
#define POROS_ARTIFACT_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "cell.h"
#include "cell_hash.h"

#define ARTIFACT_SCHEMA "poros.artifact/1"
#define SUMMARY_SCHEMA "poros.summary/1"
#define PLAN_SCHEMA "poros.plan/1" /* poros-train --plan's line */
#define EVAL_SCHEMA "poros.eval/1" /* poros-train --eval-only's line */

enum artifact_status { STATUS_OK, STATUS_OOM, STATUS_ERROR, STATUS_SKIPPED, STATUS_COUNT };
extern const char *const artifact_status_names[STATUS_COUNT]; /* "ok", "oom", "error", "skipped" */

/* One pass: one trainer process's timed (post-warmup) steps. */
struct artifact_pass {
	int n;
	double *step_s;                            /* (n) seconds per step */
	double median_s;
};

/* The timing fields are computed from passes (timing.h); passes is owned. */
struct artifact_metrics {
	double vram_plan_mb;                       /* MiB, the trainer's plan before any work (NaN: none) */
	double host_weights_mb;                    /* MiB, the base's host copy (poros-train; NaN: none) */
	double host_checkpoints_mb;                /* MiB, blockwise's layer checkpoints, pinned (NaN: none) */
	double vram_peak_mb, vram_avg_mb;          /* MiB, device allocator peak / per-step mean */
	double process_peak_rss_mb;                /* MiB, the training process's maximum RSS, all passes (NaN: none) */
	double s_per_step, s_per_step_min, s_per_step_max;
	double s_per_step_spread, s_per_step_mad;  /* across passes / the steps' noise */
	int passes_agree;                          /* 1 true, 0 false, -1 null */
	double tokens_per_s;
	int steps_measured, warmup_steps;          /* -1: null */
	double loss_first, loss_last;
	int n_passes;
	struct artifact_pass *passes;              /* (n_passes); NULL: null */
};
/* Frees m's passes and leaves m all null. */
void artifact_metrics_free(struct artifact_metrics *m);

struct artifact_parity {
	double loss_max_abs_delta, adapter_max_abs_delta;
	int bitwise_exact;                         /* 1 true, 0 false, -1 null */
};

struct artifact_env {
	char *hostname, *os, *kernel, *cpu;
	double host_mem_gb;
	char *gpu_name;
	double gpu_mem_mb;
	char *driver, *cuda_runtime;
	char *poros_version, *git_sha;
	char *python, *torch, *transformers, *peft;
	char *weights;                             /* "real", "synthetic" or NULL */
	char *backend;                             /* what computed: "cpu" or "cuda" (the child's summary) */
	char *device;                              /* its name: the GPU's, or the host CPU's for cpu */
	char *cuda_visible_devices;                /* poros-arm's CUDA_VISIBLE_DEVICES: the GPU a scheduler gave the cell */
	/* the trainer's processes (data-parallel ranks, one a GPU with --gpus),
	 * from the child's summary; -1: null (it did not say) */
	int ranks;
};

struct artifact {
	char *cell_id;
	/* cell_config_hash of the cell it measured (artifact_set_cell sets it);
	 * "" is null: an artifact from before config hashes, matching no cell. */
	char config_hash[CELL_HASH_LEN + 1];
	struct cell cell;                          /* the whole cell, as validated */
	enum artifact_status status;
	char *error;                               /* NULL when status is ok */
	struct artifact_metrics metrics;
	struct artifact_parity parity;
	struct artifact_env env;
	char started_at[32], finished_at[32];      /* UTC ISO-8601; "" is null */
	double wall_s;
	int argc;                                  /* the child's argv; 0 and NULL: null */
	char **argv;
	char *log;                                 /* "logs/<cell_id>.log", relative to the output dir */
	char *run_dir;                             /* "runs/<cell_id>" */
};

/* --- the table -------------------------------------------------------------- */

/* How a key is held in C and written in JSON. */
enum artifact_kind {
	AK_CONST,     /* "schema": ARTIFACT_SCHEMA */
	AK_STR,       /* char *; NULL is null */
	AK_STAMP,     /* char[32], UTC ISO-8601; "" is null */
	AK_HASH,      /* config_hash: char[], "sha256:" and 64 hex digits; "" is null */
	AK_CELL_COPY, /* a copy of cell.<cell_path> at the top level, for jq */
	AK_CELL,      /* the whole cell (cell_to_json) */
	AK_STATUS,    /* enum artifact_status, by name */
	AK_OBJECT,    /* a nested object: the rows "<path>.<key>" that follow */
	AK_NUM,       /* double; NaN is null */
	AK_TIME,      /* double, exact digits (timing_json_number); NaN is null */
	AK_COUNT,     /* int; -1 is null */
	AK_FLAG,      /* int, a boolean; -1 is null */
	AK_PASSES,    /* metrics.passes: n_passes, passes; NULL is null */
	AK_ARGV,      /* argc, argv; NULL is null */
};
/* Row flags. */
enum {
	AF_NULLABLE = 1, /* a written artifact may hold null here (the schema's "null" type) */
	AF_LATER = 2,    /* added to poros.artifact/1 later: older artifacts lack it (not "required") */
	AF_NONNEG = 4,   /* a measurement: a number read must not be negative (the schema's minimum 0) */
};
/* Who fills a key. */
enum {
	AW_ARM = 1,      /* poros-arm: the host, its clock, the cell, timing from the passes */
	AW_SUMMARY = 2,  /* the child's summary (poros.summary/1), key summary_key */
	AW_PARITY = 4,   /* poros-parity --artifacts */
};

/* One row per key of poros.artifact/1, in the order artifact_to_json
 * writes them.  The writer, artifact_from_json (its key lists, types and
 * messages), the null state and freeing of each part, and what is taken
 * from a summary go by it; share/poros/schema/artifact.schema.json and
 * man/poros-artifact.5 are held against it by tests/unit/test_record_schema.c. */
struct artifact_field {
	const char *path;          /* "metrics.s_per_step"; top-level keys have no dot */
	enum artifact_kind kind;
	size_t offset;             /* in the struct of its object: artifact, artifact_metrics, _parity, _env */
	unsigned flags;            /* AF_* */
	const char *unit;          /* "MiB", "GiB", "s", "tokens/s"; NULL: none */
	unsigned writers;          /* AW_* */
	const char *summary_key;   /* AW_SUMMARY: its key in the summary ("env.gpu_name") */
	const char *const *names;  /* AK_STATUS, AK_CELL_COPY of an enum, a named AK_STR: its values */
	int n_names;
	const char *cell_path;     /* AK_CELL_COPY: the cell field it copies */
	const char *column;        /* the report column that shows it (tools/poros-render/table.c), or NULL */
};
extern const struct artifact_field artifact_fields[];
extern const int artifact_field_count;
/* The row of path, or NULL. */
const struct artifact_field *artifact_field_find(const char *path);

/* The trainer summary's keys (tools/lib/records/summary_fields.c), in the order
 * both writers print them; "env.<key>" for env's. */
enum summary_kind {
	SK_CONST,      /* "schema" */
	SK_NAME,       /* a string from a fixed list (status, method, mode, backend, weights) */
	SK_STR,        /* a string */
	SK_COUNT,      /* an integer >= 0 */
	SK_NUM,        /* a number */
	SK_MEASURE,    /* a number >= 0 */
	SK_TIMES,      /* an array of seconds */
	SK_BY_PURPOSE, /* an object of measures by purpose (which purposes is poros-train's) */
	SK_OBJECT,     /* an object: config, env (its rows follow) */
};
enum { SF_NULLABLE = 1, SF_ALWAYS = 2 /* every writer prints it (the schema's "required") */ };
enum { SW_TRAIN = 1, SW_ARMS = 2 };  /* poros-train, the Python arms (armlib.py) */
struct summary_field {
	const char *path;
	enum summary_kind kind;
	unsigned flags;                /* SF_* */
	unsigned writers;              /* SW_* */
	const char *unit;              /* "MiB", "s", "tokens/s"; NULL: none */
};
extern const struct summary_field summary_fields[];
extern const int summary_field_count;
const struct summary_field *summary_field_find(const char *path); /* NULL if none */

/* Every field null / empty, status error.  artifact_free releases what
 * the artifact owns (the cell included) and leaves it initialised. */
void artifact_init(struct artifact *a);
void artifact_free(struct artifact *a);

/* Sets cell and cell_id to a deep copy of c, which must be valid
 * (cell_validate); -1 with err set if it is not. */
int artifact_set_cell(struct artifact *a, const struct cell *c, char *err, size_t errsz);
/* Replaces a string field (frees the old, copies s; s may be NULL). */
void artifact_set_str(char **field, const char *s);
/* Copies argv (argc entries). */
void artifact_set_argv(struct artifact *a, int argc, char *const argv[]);

/* The JSON object, every key present, stable order as in docs/schemas.md.
 * The timing figures are raw number items (timing_json_number: exact
 * digits), which print as numbers but are not cJSON_IsNumber in memory;
 * artifact_from_json reads both. */
cJSON *artifact_to_json(const struct artifact *a);
/* Reads and validates an artifact object.  Returns 0, or -1 with err set
 * to a one-line reason naming the field ("metrics.s_per_step: not a number"). */
int artifact_from_json(struct artifact *a, const cJSON *obj, char *err, size_t errsz);

int artifact_status_from_name(const char *s); /* -1 if unknown */

/* Fills the host half of env: hostname, os (/etc/os-release PRETTY_NAME),
 * kernel (uname -srm), cpu (/proc/cpuinfo "model name"), host_mem_gb
 * (/proc/meminfo MemTotal), poros_version and git_sha (compile time).
 * Fields it cannot learn stay null. */
void artifact_env_collect_host(struct artifact_env *env);

/* Applies a trainer summary ("poros.summary/1") to the artifact: status
 * (ok / oom / error / skipped), error, metrics, and the child's half of
 * env (gpu_*, driver, cuda_runtime, python, torch, transformers, peft,
 * weights).  Returns 0, or -1 with err set when the summary is malformed
 * (wrong schema, unknown status, a field of the wrong type); the artifact
 * is then left unchanged. */
int artifact_apply_summary(struct artifact *a, const cJSON *summary, char *err, size_t errsz);

#endif
