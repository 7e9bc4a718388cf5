/* tests/unit/test_artifact.c: the RunArtifact to and from JSON, the trainer
 * summary applied to it, the host's half of env. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "util/util.h"
#include "test_common.h"

static void check_str(const char *got, const char *want, const char *what)
{
	if ((got == NULL) != (want == NULL) || (got && strcmp(got, want) != 0)) {
		fprintf(stderr, "FAILED: %s: got \"%s\", want \"%s\"\n", what, got ? got : "(null)",
		        want ? want : "(null)");
		failures++;
	}
}

static const char *const CELL_TEXT =
	"{\"schema\":\"poros.cell/1\",\"cell_id\":\"peft_qwen2_5_32b_bf16\",\"spec_id\":\"unit\","
	"\"method\":\"peft\",\"precision\":\"bf16\","
	"\"model\":{\"model_id\":\"Qwen/Qwen2.5-32B\",\"display_name\":\"Qwen2.5 32B\",\"param_count_b\":32.8,"
	"\"arch\":\"qwen2_5_32b\"},"
	"\"hardware\":{\"gpu_name\":\"RTX 3090\",\"vram_gb\":24,\"pcie_gen\":4},"
	"\"training\":{\"steps\":20,\"seq_len\":512,\"batch_size\":1,\"gradient_accumulation_steps\":8,"
	"\"warmup_steps\":3,\"dataset\":\"synthetic\",\"seed\":42,\"learning_rate\":0.0002,"
	"\"lr_schedule\":\"constant\",\"weight_decay\":0.0,\"max_grad_norm\":1.0,\"timeout_s\":3600},"
	"\"lora\":{\"rank\":16,\"alpha\":32,\"dropout\":0.05,\"target_modules\":[\"q_proj\",\"v_proj\"]},"
	"\"poros\":{\"block_size\":4,\"enable_prefetch\":true},"
	"\"output_dir\":\"out/unit\",\"tokens_per_step\":4096}";

static const char *const SUMMARY_OK =
	"{\"schema\":\"poros.summary/1\",\"status\":\"ok\",\"error\":null,\"method\":\"peft\",\"mode\":\"peft\","
	"\"steps\":20,\"warmup_steps\":3,\"steps_measured\":17,\"backend\":\"cuda\","
	"\"step_s\":[1.5,1.49,1.5,1.5,1.5,1.51,1.51,1.51,1.52,1.52,1.53,1.53,1.54,1.55,1.57,1.6,1.61],"
	"\"s_per_step\":1.52,\"s_per_step_min\":1.49,"
	"\"s_per_step_max\":1.61,\"tokens_per_s\":2694.7,\"vram_peak_mb\":7012.4,\"vram_avg_mb\":6500.1,"
	"\"loss_first\":11.93,\"loss_last\":11.2,\"weights\":\"synthetic\","
	"\"env\":{\"gpu_name\":\"NVIDIA H200\",\"gpu_mem_mb\":143771,\"driver\":\"580.1\",\"cuda_runtime\":\"13.0\","
	"\"python\":\"3.12.3\",\"torch\":\"2.11.0\",\"transformers\":\"5.17.0\",\"peft\":\"0.21.0\"}}";

/* An artifact with a cell and every field set. */
static void make_full(struct artifact *a)
{
	cJSON *cj = cJSON_Parse(CELL_TEXT), *sj = cJSON_Parse(SUMMARY_OK);
	struct cell c;
	char err[256];
	char *argv[] = {"python3", "peft_arm.py", "--cell", "c.json", "--out", "out/unit/runs/x"};

	artifact_init(a);
	CHECK(cj != NULL && sj != NULL);
	if (cell_from_json(&c, cj, err, sizeof err) < 0) {
		fprintf(stderr, "FAILED: the unit cell does not read: %s\n", err);
		exit(1);
	}
	CHECK(artifact_set_cell(a, &c, err, sizeof err) == 0);
	cell_free(&c);
	artifact_env_collect_host(&a->env);
	CHECK(artifact_apply_summary(a, sj, err, sizeof err) == 0);
	a->parity.loss_max_abs_delta = 0.0;
	a->parity.bitwise_exact = 1;
	strcpy(a->started_at, "2026-11-29T15:21:41Z");
	strcpy(a->finished_at, "2026-11-29T15:22:22Z");
	a->wall_s = 41.2;
	artifact_set_argv(a, 6, argv);
	artifact_set_str(&a->log, "logs/peft_qwen2_5_32b_bf16.log");
	artifact_set_str(&a->run_dir, "runs/peft_qwen2_5_32b_bf16");
	cJSON_Delete(cj);
	cJSON_Delete(sj);
}

static void test_round_trip(void)
{
	struct artifact a, b;
	cJSON *j1, *j2;
	char *s1, *s2, err[256];

	make_full(&a);
	j1 = artifact_to_json(&a);
	s1 = jsonl_format(j1);
	CHECK(artifact_from_json(&b, j1, err, sizeof err) == 0);
	j2 = artifact_to_json(&b);
	s2 = jsonl_format(j2);
	check_str(s2, s1, "to_json(from_json(to_json(a)))");
	check_str(b.cell_id, "peft_qwen2_5_32b_bf16", "cell_id");
	CHECK(b.cell.method == METHOD_PEFT);
	CHECK(b.status == STATUS_OK && b.error == NULL);
	CHECK(b.metrics.steps_measured == 17 && b.metrics.warmup_steps == 3);
	/* every timing figure is C's, from step_s: tokens_per_step / median */
	CHECK(b.metrics.vram_peak_mb == 7012.4 && b.metrics.tokens_per_s == 4096 / 1.52);
	CHECK(b.metrics.s_per_step == 1.52 && b.metrics.s_per_step_min == 1.49 && b.metrics.s_per_step_max == 1.61);
	CHECK(b.metrics.n_passes == 1 && b.metrics.passes[0].n == 17 && b.metrics.passes[0].median_s == 1.52);
	CHECK(b.metrics.s_per_step_spread == 0 && b.metrics.passes_agree == 1);
	check_str(b.env.backend, "cuda", "env.backend");
	check_str(b.env.device, "NVIDIA H200", "env.device");
	CHECK(isnan(b.parity.adapter_max_abs_delta) && b.parity.bitwise_exact == 1);
	check_str(b.env.gpu_name, "NVIDIA H200", "env.gpu_name");
	CHECK(b.env.gpu_mem_mb == 143771);
	check_str(b.env.peft, "0.21.0", "env.peft");
	check_str(b.env.weights, "synthetic", "env.weights");
	check_str(b.env.poros_version, POROS_VERSION, "env.poros_version");
	CHECK(b.argc == 6);
	check_str(b.argc == 6 ? b.argv[5] : NULL, "out/unit/runs/x", "argv[5]");
	CHECK(b.wall_s == 41.2);
	check_str(b.started_at, "2026-11-29T15:21:41Z", "started_at");
	/* stable key order, as docs/schemas.md lists it */
	CHECK(strncmp(s1, "{\"schema\":\"poros.artifact/1\",\"cell_id\":\"peft_qwen2_5_32b_bf16\",\"config_hash\":\"sha256:", 80) == 0);
	CHECK(strstr(s1, "\",\"method\":\"peft\",\"model_id\":\"Qwen/Qwen2.5-32B\",\"precision\":\"bf16\",\"cell\":{") != NULL);
	check_str(b.config_hash, a.config_hash, "config_hash read back");
	/* a Python arm's summary has no plan, no host copy and no checkpoints: null, the first metrics */
	CHECK(isnan(b.metrics.vram_plan_mb) && isnan(b.metrics.host_checkpoints_mb));
	CHECK(strstr(s1, "\"status\":\"ok\",\"error\":null,\"metrics\":{\"vram_plan_mb\":null,\"host_weights_mb\":null,"
	             "\"host_checkpoints_mb\":null,\"process_peak_rss_mb\":null,\"vram_peak_mb\":7012.4,") != NULL);
	CHECK(strstr(s1, "\"parity\":{\"loss_max_abs_delta\":0,\"adapter_max_abs_delta\":null,\"bitwise_exact\":true}") != NULL);
	CHECK(strstr(s1, "\"log\":\"logs/peft_qwen2_5_32b_bf16.log\",\"run_dir\":\"runs/peft_qwen2_5_32b_bf16\"}\n") != NULL);
	free(s1);
	free(s2);
	cJSON_Delete(j1);
	cJSON_Delete(j2);
	artifact_free(&a);
	artifact_free(&b);
}

static void test_nulls(void)
{
	struct artifact a;
	cJSON *j;
	char *s;

	artifact_init(&a);
	a.metrics.s_per_step = NAN;
	a.metrics.loss_last = INFINITY; /* JSON has no infinity: null */
	j = artifact_to_json(&a);
	s = jsonl_format(j);
	CHECK(strstr(s, "\"cell\":null") != NULL);
	CHECK(strstr(s, "\"status\":\"error\"") != NULL);
	CHECK(strstr(s, "\"s_per_step\":null") != NULL);
	CHECK(strstr(s, "\"loss_last\":null") != NULL);
	CHECK(strstr(s, "\"steps_measured\":null") != NULL);
	CHECK(strstr(s, "\"argv\":null") != NULL);
	CHECK(strstr(s, "\"started_at\":null") != NULL);
	CHECK(strstr(s, "\"hostname\":null") != NULL);
	free(s);
	cJSON_Delete(j);
	artifact_free(&a);
}

/* artifact_from_json on a full artifact with one field replaced. */
static void expect_bad(const char *path, const char *json_value, const char *want_err)
{
	struct artifact a, b;
	cJSON *j;
	char err[256] = "";

	make_full(&a);
	j = artifact_to_json(&a);
	json_put_path(j, path, cJSON_Parse(json_value));
	if (artifact_from_json(&b, j, err, sizeof err) == 0) {
		fprintf(stderr, "FAILED: %s = %s was accepted\n", path, json_value);
		failures++;
		artifact_free(&b);
	} else if (strstr(err, want_err) == NULL) {
		fprintf(stderr, "FAILED: %s = %s: error \"%s\" does not say \"%s\"\n", path, json_value, err, want_err);
		failures++;
	}
	cJSON_Delete(j);
	artifact_free(&a);
}

static void test_bad_artifacts(void)
{
	expect_bad("schema", "\"poros.artifact/2\"", "schema: \"poros.artifact/2\"");
	expect_bad("status", "\"fine\"", "status: unknown \"fine\"");
	expect_bad("method", "\"poros\"", "method: \"poros\" differs from cell.method \"peft\"");
	expect_bad("model_id", "\"Qwen/Qwen2.5-7B\"", "model_id: \"Qwen/Qwen2.5-7B\" differs from cell.model.model_id");
	expect_bad("precision", "\"nf4\"", "precision: \"nf4\" differs from cell.precision \"bf16\"");
	expect_bad("config_hash", "\"md5:abc\"", "config_hash: not \"sha256:\" and 64 hex digits");
	expect_bad("cell_id", "\"other\"", "cell_id: \"other\" differs");
	expect_bad("cell", "[]", "cell: missing or not an object");
	expect_bad("metrics.s_per_step", "\"fast\"", "metrics.s_per_step: not a number");
	expect_bad("metrics.steps_measured", "2.5", "metrics.steps_measured: not a count");
	expect_bad("parity.bitwise_exact", "1", "parity.bitwise_exact: not a boolean");
	expect_bad("env.gpu_name", "7", "env.gpu_name: not a string");
	expect_bad("argv", "[\"a\",1]", "argv[1]: not a string");
	expect_bad("wall_s", "\"41\"", "wall_s: not a number");
	expect_bad("env", "\"linux\"", "env: not an object");
}

/* Applies the summary text to a: artifact_apply_summary's result (the
 * text itself must parse). */
static int apply_summary(struct artifact *a, const char *text, char *err, size_t errsz)
{
	cJSON *s = cJSON_Parse(text);
	int rc;

	CHECKF(s != NULL, "summary does not parse: %s", text);
	rc = artifact_apply_summary(a, s, err, errsz);
	cJSON_Delete(s);
	return rc;
}

/* The summary text is refused with exactly the error want (what: the case). */
static void expect_refused(struct artifact *a, const char *text, const char *want, const char *what)
{
	char err[256];

	CHECK(apply_summary(a, text, err, sizeof err) < 0);
	check_str(err, want, what);
}

static void test_summary(void)
{
	struct artifact a;
	char err[256];

	make_full(&a);
	/* a malformed summary changes nothing */
	expect_refused(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"great\"}",
	               "status: unknown \"great\" (expected one of: ok, oom, error, skipped)", "bad status");
	CHECK(a.status == STATUS_OK && a.metrics.vram_peak_mb == 7012.4);
	expect_refused(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"ok\",\"vram_peak_mb\":\"lots\"}",
	               "vram_peak_mb: not a number", "bad metric");
	CHECK(a.metrics.vram_peak_mb == 7012.4);
	CHECK(apply_summary(&a, "{\"schema\":\"poros.event/1\",\"status\":\"ok\"}", err, sizeof err) < 0);
	CHECK(strstr(err, "expected \"poros.summary/1\"") != NULL);
	expect_refused(&a, "{\"status\":\"ok\"}", "schema: missing (expected \"poros.summary/1\")", "no schema");

	/* poros-train's plan is taken, and refused when negative */
	expect_refused(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"oom\",\"error\":\"over\",\"vram_plan_mb\":-1}",
	               "vram_plan_mb: must not be negative, got -1", "negative plan");
	CHECK(apply_summary(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"oom\",\"error\":\"over\","
	                    "\"vram_plan_mb\":12160.5}", err, sizeof err) == 0);
	CHECK(a.status == STATUS_OOM && a.metrics.vram_plan_mb == 12160.5 && isnan(a.metrics.vram_peak_mb));
	{
		cJSON *j = artifact_to_json(&a), *m = cJSON_GetObjectItemCaseSensitive(j, "metrics");
		struct artifact back;

		CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "vram_plan_mb")) == 12160.5);
		CHECK(artifact_from_json(&back, j, err, sizeof err) == 0 && back.metrics.vram_plan_mb == 12160.5);
		artifact_free(&back);
		cJSON_Delete(j);
	}

	/* the host memory it pins: the base's copy and blockwise's layer checkpoints, refused when negative */
	expect_refused(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"oom\",\"error\":\"over\","
	               "\"host_checkpoints_mb\":-1}", "host_checkpoints_mb: must not be negative, got -1",
	               "negative checkpoints");
	CHECK(apply_summary(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"oom\",\"error\":\"over\","
	                    "\"host_weights_mb\":512.5,\"host_checkpoints_mb\":96.25}", err, sizeof err) == 0);
	CHECK(a.metrics.host_weights_mb == 512.5 && a.metrics.host_checkpoints_mb == 96.25);
	{
		cJSON *j = artifact_to_json(&a), *m = cJSON_GetObjectItemCaseSensitive(j, "metrics");
		struct artifact back;

		CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "host_checkpoints_mb")) == 96.25);
		CHECK(artifact_from_json(&back, j, err, sizeof err) == 0 && back.metrics.host_checkpoints_mb == 96.25);
		artifact_free(&back);
		/* an artifact written before the field: the key absent, read as not known */
		cJSON_DeleteItemFromObjectCaseSensitive(m, "host_checkpoints_mb");
		CHECK(artifact_from_json(&back, j, err, sizeof err) == 0 && isnan(back.metrics.host_checkpoints_mb) &&
		      back.metrics.host_weights_mb == 512.5);
		artifact_free(&back);
		cJSON_Delete(j);
	}

	/* oom without a reason still gets one; absent metrics become null */
	CHECK(apply_summary(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"oom\",\"vram_peak_mb\":24000}", err,
	                    sizeof err) == 0);
	CHECK(a.status == STATUS_OOM);
	check_str(a.error, "the child reported status oom without a reason", "oom error");
	CHECK(a.metrics.vram_peak_mb == 24000 && isnan(a.metrics.s_per_step) && a.metrics.steps_measured == -1);
	CHECK(isnan(a.metrics.vram_plan_mb));
	CHECK(a.env.gpu_name == NULL && a.env.hostname != NULL); /* the child's half only */

	/* skipped keeps its reason; ok drops any */
	CHECK(apply_summary(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"skipped\","
	                    "\"error\":\"unsloth is not installed\"}", err, sizeof err) == 0);
	CHECK(a.status == STATUS_SKIPPED);
	check_str(a.error, "unsloth is not installed", "skipped reason");
	CHECK(apply_summary(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"ok\",\"error\":\"a note\"}", err,
	                    sizeof err) == 0);
	CHECK(a.status == STATUS_OK && a.error == NULL);

	/* poros-train's own keys are summary keys; anything else, or a value
	 * the schema (share/poros/schema/summary.schema.json) refuses, is not */
	CHECK(apply_summary(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"error\",\"error\":\"step 2: x\","
	                    "\"method\":\"poros\",\"mode\":\"blockwise\",\"steps\":2,\"vram_plan_mb\":1.5,"
	                    "\"vram_breakdown_mb\":{\"slabs\":0.5,\"lm_head\":1},\"eval_loss\":null,\"eval_tokens\":0,"
	                    "\"run_dir\":\"r\",\"events\":\"r/events.jsonl\",\"adapter\":null}", err, sizeof err) == 0 &&
	      a.status == STATUS_ERROR);
	{
		static const char *const refused[][2] = {
			{ "\"passes\":null", "passes: unknown field" },
			{ "\"s_per_step_mad\":0.1", "s_per_step_mad: unknown field" },
			{ "\"env\":{\"hostname\":\"h\"}", "env.hostname: unknown field" },
			{ "\"weights\":\"random\"", "weights: unknown \"random\" (expected real or synthetic)" },
			{ "\"backend\":\"rocm\"", "backend: unknown \"rocm\" (expected cpu or cuda)" },
			{ "\"method\":\"lora\"", "method: unknown \"lora\"" },
			{ "\"mode\":1", "mode: not a string" },
			{ "\"mode\":\"sideways\"", "mode: unknown \"sideways\"" },
			{ "\"events\":true", "events: not a string" },
			{ "\"steps\":1.5", "steps: not a count: 1.5" },
			{ "\"eval_tokens\":-1", "eval_tokens: not a count: -1" },
			{ "\"eval_loss\":\"low\"", "eval_loss: not a number" },
			{ "\"vram_breakdown_mb\":[]", "vram_breakdown_mb: not an object" },
			{ "\"vram_breakdown_mb\":{\"slabs\":-1}", "vram_breakdown_mb.slabs: must not be negative, got -1" },
			{ "\"env\":{\"gpu_mem_mb\":-5}", "env.gpu_mem_mb: must not be negative, got -5" },
		};
		char text[256];

		for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
			snprintf(text, sizeof text, "{\"schema\":\"poros.summary/1\",\"status\":\"oom\",\"error\":\"x\",%s}",
			         refused[i][0]);
			expect_refused(&a, text, refused[i][1], refused[i][0]);
		}
	}
	CHECK(a.status == STATUS_ERROR); /* unchanged by every refused one */
	artifact_free(&a);
}

/* A summary for one pass whose steps are base + k * 0.001 s, k = 0..4. */
static cJSON *pass_summary(double base)
{
	char buf[512];

	snprintf(buf, sizeof buf,
	         "{\"schema\":\"poros.summary/1\",\"status\":\"ok\",\"backend\":\"cpu\",\"steps_measured\":5,"
	         "\"step_s\":[%.3f,%.3f,%.3f,%.3f,%.3f]}", base + 0.004, base, base + 0.001, base + 0.003, base + 0.002);
	return cJSON_Parse(buf);
}

struct fake_passes {
	double base[4];
	int fail_at; /* -1: none */
	int pass;    /* the next pass, from 0 */
};

static void fake_pass(struct artifact *a, void *ctx)
{
	struct fake_passes *f = ctx;
	int pass = f->pass++;
	cJSON *s = pass == f->fail_at
	           ? cJSON_Parse("{\"schema\":\"poros.summary/1\",\"status\":\"oom\",\"error\":\"no room\"}")
	           : pass_summary(f->base[pass]);
	char err[256];

	CHECK(artifact_apply_summary(a, s, err, sizeof err) == 0);
	a->wall_s = 2.0;
	cJSON_Delete(s);
}

static void test_timing(void)
{
	double v[] = { 3, 1, 2, 10 }, one = 7;
	struct fake_passes f = { { 1.0, 1.2, 1.1, 0 }, -1, 0 };
	struct artifact a;

	CHECK(timing_median(v, 4) == 2.5 && timing_median(v, 3) == 2 && timing_median(&one, 1) == 7);
	CHECK(isnan(timing_median(v, 0)) && v[0] == 3); /* not sorted in place */
	CHECK(timing_mad(v, 3, 2) == 1);

	/* three passes: each its own median, s_per_step the median of those */
	make_full(&a);
	a.cell.training.passes = 3;
	timing_run_passes(&a, fake_pass, &f);
	CHECK(a.status == STATUS_OK && a.metrics.n_passes == 3);
	CHECK(fabs(a.metrics.passes[0].median_s - 1.002) < 1e-12 && fabs(a.metrics.passes[1].median_s - 1.202) < 1e-12);
	CHECK(a.metrics.s_per_step == a.metrics.passes[2].median_s); /* 1.102: the middle one */
	CHECK(a.metrics.s_per_step_min == 1.0 && a.metrics.s_per_step_max == 1.204);
	CHECK(fabs(a.metrics.s_per_step_spread - 0.2) < 1e-12);
	/* 0.1 s between passes against 1 ms of noise: they disagree */
	CHECK(fabs(a.metrics.s_per_step_mad - 0.001) < 1e-12 && a.metrics.passes_agree == 0);
	CHECK(a.wall_s == 6.0 && a.metrics.steps_measured == 5);
	CHECK(fabs(a.metrics.tokens_per_s - 4096 / a.metrics.s_per_step) < 1e-9);
	check_str(a.env.backend, "cpu", "env.backend");
	CHECK((a.env.cpu == NULL && a.env.device == NULL) || strcmp(a.env.device, a.env.cpu) == 0);
	artifact_free(&a);

	/* passes within the noise agree */
	f.base[0] = 1.0;
	f.base[1] = 1.001;
	f.base[2] = 1.0;
	f.pass = 0;
	make_full(&a);
	a.cell.training.passes = 3;
	timing_run_passes(&a, fake_pass, &f);
	CHECK(a.metrics.passes_agree == 1 && a.metrics.s_per_step == 1.002);
	artifact_free(&a);

	/* a failing pass ends the loop and says which */
	f.fail_at = 1;
	f.pass = 0;
	make_full(&a);
	a.cell.training.passes = 3;
	timing_run_passes(&a, fake_pass, &f);
	CHECK(a.status == STATUS_OOM && a.metrics.n_passes == 0 && a.wall_s == 4.0);
	check_str(a.error, "pass 2 of 3: no room", "failed pass");
	artifact_free(&a);

	/* a summary's own s_per_step must be the median of its step_s */
	make_full(&a);
	expect_refused(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"ok\",\"steps_measured\":3,"
	               "\"step_s\":[1,2,6],\"s_per_step\":3}",
	               "s_per_step: 3 is not the median of step_s (2)", "mean, not median");
	expect_refused(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"ok\",\"steps_measured\":3,\"s_per_step\":2}",
	               "step_s: missing (a run that timed 3 steps must list their times)", "no step list");
	expect_refused(&a, "{\"schema\":\"poros.summary/1\",\"status\":\"ok\",\"steps_measured\":2,\"step_s\":[1,-2]}",
	               "step_s[1]: not a time in seconds", "negative step");
	CHECK(a.metrics.s_per_step == 1.52); /* unchanged by all three */
	artifact_free(&a);
}

static void test_host_env(void)
{
	struct artifact_env e;
	struct artifact a;

	artifact_init(&a);
	e = a.env;
	artifact_env_collect_host(&e);
	CHECK(e.hostname != NULL && *e.hostname);
	CHECK(e.kernel != NULL && strncmp(e.kernel, "Linux ", 6) == 0);
	CHECK(e.host_mem_gb > 0);
	check_str(e.poros_version, POROS_VERSION, "poros_version");
	CHECK(e.git_sha != NULL);
	a.env = e;
	artifact_free(&a);
}

static void test_status_names(void)
{
	for (int i = 0; i < STATUS_COUNT; i++)
		CHECK(artifact_status_from_name(artifact_status_names[i]) == i);
	CHECK(artifact_status_from_name("OK") == -1);
	CHECK(artifact_status_from_name(NULL) == -1);
}

int main(void)
{
	test_round_trip();
	test_nulls();
	test_bad_artifacts();
	test_summary();
	test_timing();
	test_host_env();
	test_status_names();
	return test_verdict("test_artifact");
}
