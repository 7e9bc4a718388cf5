/* tools/lib/records/summary_fields.c: the table of the trainer summary
 * ("poros.summary/1"), the one line poros-train and the Python arms print
 * last.  artifact_apply_summary (artifact_read.c) refuses a key it does
 * not hold; tests/unit/test_record_schema.c holds
 * share/poros/schema/summary.schema.json against it, and tests/summary.bats
 * holds both writers against the schema. */
#include "artifact.h"

#include <string.h>

#define BOTH (SW_TRAIN | SW_ARMS)
/* every writer writes it, null where it has no value (the schema's "required") */
#define ALWAYS(k, kd, fl) .path = k, .kind = kd, .flags = (fl) | SF_ALWAYS, .writers = BOTH
/* poros-train's alone (or, eval_*, only with an evaluation set) */
#define TRAIN(k, kd, fl) .path = k, .kind = kd, .flags = fl, .writers = SW_TRAIN
#define NUL SF_NULLABLE

/* The summary, key by key, in the order both writers print them.  A new
 * key is a row here, a property in summary.schema.json and an ".It Li"
 * item in man/poros-summary.5's key list (both in this order) and, for
 * poros-arm to take it, a row of artifact_fields naming it. */
const struct summary_field summary_fields[] = {
	{ ALWAYS("schema", SK_CONST, 0) },
	{ ALWAYS("status", SK_NAME, 0) },
	{ ALWAYS("error", SK_STR, NUL) },
	{ ALWAYS("method", SK_NAME, 0) },
	{ ALWAYS("mode", SK_NAME, 0) },       /* poros-train's schedule, or a Python arm's method again */
	{ ALWAYS("backend", SK_NAME, NUL) },
	{ TRAIN("ranks", SK_COUNT, 0) },      /* the run's data-parallel processes; 1 alone */
	{ TRAIN("schedule", SK_OBJECT, NUL) }, /* {lanes, group, checkpoint_sets, attention_checkpoints, attention_sublayer} */
	{ ALWAYS("steps", SK_COUNT, NUL) },
	{ ALWAYS("warmup_steps", SK_COUNT, NUL) },
	{ ALWAYS("steps_measured", SK_COUNT, NUL) },
	{ ALWAYS("step_s", SK_TIMES, NUL), .unit = "s" },
	{ ALWAYS("s_per_step", SK_MEASURE, NUL), .unit = "s" },
	{ ALWAYS("s_per_step_min", SK_MEASURE, NUL), .unit = "s" },
	{ ALWAYS("s_per_step_max", SK_MEASURE, NUL), .unit = "s" },
	{ ALWAYS("tokens_per_s", SK_MEASURE, NUL), .unit = "tokens/s" },
	{ TRAIN("vram_plan_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ ALWAYS("vram_peak_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ ALWAYS("vram_avg_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ TRAIN("vram_breakdown_mb", SK_BY_PURPOSE, NUL), .unit = "MiB" },
	{ TRAIN("host_weights_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ TRAIN("host_checkpoints_mb", SK_MEASURE, NUL), .unit = "MiB" },
	/* only with --checkpoint-dir: the file, the last step's bytes to and from it */
	{ TRAIN("disk_checkpoints_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ TRAIN("disk_write_mb_per_step", SK_MEASURE, NUL), .unit = "MiB" },
	{ TRAIN("disk_read_mb_per_step", SK_MEASURE, NUL), .unit = "MiB" },
	{ TRAIN("host_plan_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ TRAIN("host_breakdown_mb", SK_BY_PURPOSE, NUL), .unit = "MiB" },
	{ TRAIN("host_rss_at_plan_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ TRAIN("host_peak_rss_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ ALWAYS("loss_first", SK_NUM, NUL) },
	{ ALWAYS("loss_last", SK_NUM, NUL) },
	{ TRAIN("eval_loss", SK_NUM, NUL) },
	{ TRAIN("eval_tokens", SK_COUNT, 0) },
	{ TRAIN("seq_len_beyond_max_position", SK_OBJECT, 0) }, /* {seq_len, max_position_embeddings}, only when beyond */
	{ ALWAYS("weights", SK_NAME, NUL) },
	{ ALWAYS("run_dir", SK_STR, NUL) },
	{ ALWAYS("events", SK_STR, NUL) },
	{ ALWAYS("adapter", SK_STR, NUL) },
	{ TRAIN("config", SK_OBJECT, 0) },    /* RUN_DIR/train_config.json's object */
	{ ALWAYS("env", SK_OBJECT, 0) },
	{ ALWAYS("env.gpu_name", SK_STR, NUL) },
	{ ALWAYS("env.gpu_mem_mb", SK_MEASURE, NUL), .unit = "MiB" },
	{ ALWAYS("env.driver", SK_STR, NUL) },
	{ ALWAYS("env.cuda_runtime", SK_STR, NUL) },
	{ ALWAYS("env.python", SK_STR, NUL) },
	{ ALWAYS("env.torch", SK_STR, NUL) },
	{ ALWAYS("env.transformers", SK_STR, NUL) },
	{ ALWAYS("env.peft", SK_STR, NUL) },
};
const int summary_field_count = (int)(sizeof summary_fields / sizeof summary_fields[0]);

const struct summary_field *summary_field_find(const char *path)
{
	for (int i = 0; i < summary_field_count; i++)
		if (strcmp(summary_fields[i].path, path) == 0)
			return &summary_fields[i];
	return NULL;
}
