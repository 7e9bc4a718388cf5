/* tools/lib/records/artifact.c: the RunArtifact ("poros.artifact/1"): the table of
 * its keys (artifact_fields), its null and freed states by the table, the
 * writer by the table, and the host half of its env; reading one back, and
 * the trainer summary, are artifact_read.c's. */
#include "artifact.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "artifact_int.h"
#include "util/util.h"
#include "timing.h"

#ifndef POROS_GIT_SHA
#define POROS_GIT_SHA "unknown"
#endif

const char *const artifact_status_names[STATUS_COUNT] = {"ok", "oom", "error", "skipped"};

int artifact_status_from_name(const char *s)
{
	for (int i = 0; s && i < STATUS_COUNT; i++)
		if (strcmp(s, artifact_status_names[i]) == 0)
			return i;
	return -1;
}

static const char *const weights_names[] = { "real", "synthetic" };
static const char *const backend_names[] = { "cpu", "cuda" };

#define TOP(k, kd, member) .path = #k, .kind = kd, .offset = offsetof(struct artifact, member)
#define OBJ(k) .path = #k, .kind = AK_OBJECT, .offset = offsetof(struct artifact, k), .writers = AW_ARM
#define MET(k, kd) .path = "metrics." #k, .kind = kd, .offset = offsetof(struct artifact_metrics, k)
#define PAR(k, kd) .path = "parity." #k, .kind = kd, .offset = offsetof(struct artifact_parity, k)
#define ENV(k, kd) .path = "env." #k, .kind = kd, .offset = offsetof(struct artifact_env, k)
#define NUL AF_NULLABLE
#define MEASURE (AF_NULLABLE | AF_NONNEG)
#define FROM(key) .writers = AW_SUMMARY, .summary_key = key
/* poros-arm computes it from the passes, checking the summary's figure */
#define TIMED(key) .writers = AW_ARM | AW_SUMMARY, .summary_key = key
#define NAMED(list) .names = list, .n_names = (int)(sizeof list / sizeof list[0])

/* The artifact, key by key, in the order it is written.  A new key is a
 * row here (AF_LATER: older artifacts still read), a property in
 * share/poros/schema/artifact.schema.json and a line in man/poros-artifact.5;
 * tests/unit/test_record_schema.c fails until the three agree. */
const struct artifact_field artifact_fields[] = {
	{ .path = "schema", .kind = AK_CONST, .writers = AW_ARM },
	{ TOP(cell_id, AK_STR, cell_id), .writers = AW_ARM },
	{ TOP(config_hash, AK_HASH, config_hash), .flags = NUL, .writers = AW_ARM },
	{ TOP(method, AK_CELL_COPY, cell), .writers = AW_ARM, .cell_path = "method", .column = "Method" },
	{ TOP(model_id, AK_CELL_COPY, cell), .writers = AW_ARM, .cell_path = "model.model_id" },
	{ TOP(precision, AK_CELL_COPY, cell), .writers = AW_ARM, .cell_path = "precision", .column = "Precision" },
	{ TOP(cell, AK_CELL, cell), .writers = AW_ARM },
	{ TOP(status, AK_STATUS, status), .writers = AW_ARM | AW_SUMMARY, .summary_key = "status",
	  .names = artifact_status_names, .n_names = STATUS_COUNT, .column = "Status" },
	{ TOP(error, AK_STR, error), .flags = NUL, .writers = AW_ARM | AW_SUMMARY, .summary_key = "error" },

	{ OBJ(metrics) },
	{ MET(vram_plan_mb, AK_NUM), .flags = MEASURE | AF_LATER, .unit = "MiB", FROM("vram_plan_mb") },
	{ MET(host_weights_mb, AK_NUM), .flags = MEASURE | AF_LATER, .unit = "MiB", FROM("host_weights_mb"),
	  .column = "Host memory" },
	{ MET(host_checkpoints_mb, AK_NUM), .flags = MEASURE | AF_LATER, .unit = "MiB", FROM("host_checkpoints_mb"),
	  .column = "Host memory" },
	{ MET(process_peak_rss_mb, AK_NUM), .flags = MEASURE | AF_LATER, .unit = "MiB", .writers = AW_ARM,
	  .column = "Host memory" },
	{ MET(vram_peak_mb, AK_NUM), .flags = MEASURE, .unit = "MiB", FROM("vram_peak_mb"), .column = "Memory peak" },
	{ MET(vram_avg_mb, AK_NUM), .flags = MEASURE, .unit = "MiB", FROM("vram_avg_mb") },
	{ MET(s_per_step, AK_TIME), .flags = MEASURE, .unit = "s", TIMED("s_per_step"), .column = "s/step (median)" },
	{ MET(s_per_step_min, AK_TIME), .flags = MEASURE, .unit = "s", TIMED("s_per_step_min"), .column = "Step range" },
	{ MET(s_per_step_max, AK_TIME), .flags = MEASURE, .unit = "s", TIMED("s_per_step_max"), .column = "Step range" },
	{ MET(tokens_per_s, AK_TIME), .flags = MEASURE, .unit = "tokens/s", TIMED("tokens_per_s"), .column = "tokens/s" },
	{ MET(steps_measured, AK_COUNT), .flags = NUL, FROM("steps_measured") },
	{ MET(warmup_steps, AK_COUNT), .flags = NUL, FROM("warmup_steps") },
	{ MET(loss_first, AK_NUM), .flags = NUL, FROM("loss_first"), .column = "Loss first -> last" },
	{ MET(loss_last, AK_NUM), .flags = NUL, FROM("loss_last"), .column = "Loss first -> last" },
	{ MET(s_per_step_spread, AK_TIME), .flags = MEASURE | AF_LATER, .unit = "s", .writers = AW_ARM },
	{ MET(s_per_step_mad, AK_TIME), .flags = MEASURE | AF_LATER, .unit = "s", .writers = AW_ARM,
	  .column = "Noise (MAD)" },
	{ MET(passes_agree, AK_FLAG), .flags = NUL | AF_LATER, .writers = AW_ARM, .column = "Passes" },
	{ MET(passes, AK_PASSES), .flags = NUL | AF_LATER, TIMED("step_s"), .column = "Passes" },

	{ OBJ(parity) },
	{ PAR(loss_max_abs_delta, AK_NUM), .flags = MEASURE, .writers = AW_PARITY, .column = "loss max abs delta" },
	{ PAR(adapter_max_abs_delta, AK_NUM), .flags = MEASURE, .writers = AW_PARITY,
	  .column = "adapter max abs delta" },
	{ PAR(bitwise_exact, AK_FLAG), .flags = NUL, .writers = AW_PARITY, .column = "bitwise" },

	{ OBJ(env) },
	{ ENV(hostname, AK_STR), .flags = NUL, .writers = AW_ARM },
	{ ENV(os, AK_STR), .flags = NUL, .writers = AW_ARM },
	{ ENV(kernel, AK_STR), .flags = NUL, .writers = AW_ARM },
	{ ENV(cpu, AK_STR), .flags = NUL, .writers = AW_ARM },
	{ ENV(host_mem_gb, AK_NUM), .flags = MEASURE, .unit = "GiB", .writers = AW_ARM },
	{ ENV(gpu_name, AK_STR), .flags = NUL, FROM("env.gpu_name") },
	{ ENV(gpu_mem_mb, AK_NUM), .flags = MEASURE, .unit = "MiB", FROM("env.gpu_mem_mb") },
	{ ENV(driver, AK_STR), .flags = NUL, FROM("env.driver") },
	{ ENV(cuda_runtime, AK_STR), .flags = NUL, FROM("env.cuda_runtime") },
	{ ENV(poros_version, AK_STR), .writers = AW_ARM },
	{ ENV(git_sha, AK_STR), .writers = AW_ARM },
	{ ENV(python, AK_STR), .flags = NUL, FROM("env.python") },
	{ ENV(torch, AK_STR), .flags = NUL, FROM("env.torch") },
	{ ENV(transformers, AK_STR), .flags = NUL, FROM("env.transformers") },
	{ ENV(peft, AK_STR), .flags = NUL, FROM("env.peft") },
	{ ENV(weights, AK_STR), .flags = NUL, FROM("weights"), NAMED(weights_names) },
	{ ENV(cuda_visible_devices, AK_STR), .flags = NUL | AF_LATER, .writers = AW_ARM },
	{ ENV(backend, AK_STR), .flags = NUL | AF_LATER, FROM("backend"), NAMED(backend_names) },
	/* backend's device: the GPU's name, or for cpu the host's CPU */
	{ ENV(device, AK_STR), .flags = NUL | AF_LATER, .writers = AW_ARM, .column = "Device" },
	/* the trainer's processes (data-parallel ranks, one a GPU with --gpus) */
	{ ENV(ranks, AK_COUNT), .flags = NUL | AF_LATER, FROM("ranks") },

	{ TOP(started_at, AK_STAMP, started_at), .writers = AW_ARM },
	{ TOP(finished_at, AK_STAMP, finished_at), .writers = AW_ARM },
	{ TOP(wall_s, AK_NUM, wall_s), .flags = AF_NONNEG, .unit = "s", .writers = AW_ARM },
	{ TOP(argv, AK_ARGV, argv), .flags = NUL, .writers = AW_ARM },
	{ TOP(log, AK_STR, log), .flags = NUL, .writers = AW_ARM },
	{ TOP(run_dir, AK_STR, run_dir), .writers = AW_ARM },
};
const int artifact_field_count = (int)(sizeof artifact_fields / sizeof artifact_fields[0]);

const struct artifact_field *artifact_field_find(const char *path)
{
	for (int i = 0; i < artifact_field_count; i++)
		if (strcmp(artifact_fields[i].path, path) == 0)
			return &artifact_fields[i];
	return NULL;
}

/* The key of a row inside its object ("s_per_step" of "metrics.s_per_step"). */
const char *field_key(const struct artifact_field *f)
{
	const char *dot = strchr(f->path, '.');

	return dot ? dot + 1 : f->path;
}

/* Is f a key of object section ("" the top level, "metrics", ...)? */
int field_in(const struct artifact_field *f, const char *section)
{
	const char *dot = strchr(f->path, '.');
	size_t n = strlen(section);

	if (n == 0)
		return dot == NULL;
	return dot != NULL && (size_t)(dot - f->path) == n && strncmp(f->path, section, n) == 0;
}

/* The rows of section set to null in the struct at base (strings and
 * passes dropped, not freed: section_free frees them). */
void section_null(void *base, const char *section)
{
	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];
		char *p = (char *)base + f->offset;

		if (!field_in(f, section))
			continue;
		switch (f->kind) {
		case AK_STR: *(char **)p = NULL; break;
		case AK_NUM: case AK_TIME: *(double *)p = NAN; break;
		case AK_COUNT: case AK_FLAG: *(int *)p = -1; break;
		case AK_PASSES: ((struct artifact_metrics *)base)->n_passes = 0; *(struct artifact_pass **)p = NULL; break;
		default: break;
		}
	}
}

/* Frees what the rows of section own in the struct at base, and nulls them. */
void section_free(void *base, const char *section)
{
	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];
		char *p = (char *)base + f->offset;

		if (!field_in(f, section))
			continue;
		if (f->kind == AK_STR)
			free(*(char **)p);
		if (f->kind == AK_PASSES) {
			struct artifact_metrics *m = base;

			for (int k = 0; k < m->n_passes; k++)
				free(m->passes[k].step_s);
			free(m->passes);
		}
	}
	section_null(base, section);
}

void metrics_init(struct artifact_metrics *m)
{
	section_null(m, "metrics");
}

void artifact_metrics_free(struct artifact_metrics *m)
{
	section_free(m, "metrics");
}

void env_init(struct artifact_env *e)
{
	memset(e, 0, sizeof *e);
	section_null(e, "env");
}

void env_free(struct artifact_env *e)
{
	section_free(e, "env");
}

void artifact_init(struct artifact *a)
{
	memset(a, 0, sizeof *a);
	a->status = STATUS_ERROR;
	metrics_init(&a->metrics);
	section_null(&a->parity, "parity");
	env_init(&a->env);
	a->wall_s = NAN;
}

int have_cell(const struct artifact *a)
{
	return a->cell.cell_id != NULL;
}

void artifact_free(struct artifact *a)
{
	free(a->cell_id);
	if (have_cell(a))
		cell_free(&a->cell);
	free(a->error);
	artifact_metrics_free(&a->metrics);
	env_free(&a->env);
	for (int i = 0; i < a->argc; i++)
		free(a->argv[i]);
	free(a->argv);
	free(a->log);
	free(a->run_dir);
	artifact_init(a);
}

void artifact_set_str(char **field, const char *s)
{
	char *copy = s ? xstrdup(s) : NULL;

	free(*field);
	*field = copy;
}

void artifact_set_argv(struct artifact *a, int argc, char *const argv[])
{
	for (int i = 0; i < a->argc; i++)
		free(a->argv[i]);
	free(a->argv);
	a->argc = 0;
	a->argv = NULL;
	if (argc <= 0)
		return;
	a->argv = xcalloc((size_t)argc, sizeof *a->argv);
	for (int i = 0; i < argc; i++)
		a->argv[i] = xstrdup(argv[i]);
	a->argc = argc;
}

int artifact_set_cell(struct artifact *a, const struct cell *c, char *err, size_t errsz)
{
	struct cell copy;

	if (cell_validate(c, err, errsz) < 0)
		return -1;
	cell_copy(&copy, c);
	if (have_cell(a))
		cell_free(&a->cell);
	a->cell = copy;
	artifact_set_str(&a->cell_id, c->cell_id);
	cell_config_hash(a->config_hash, c);
	return 0;
}

/* --- to JSON -------------------------------------------------------------- */

static cJSON *passes_json(const struct artifact_metrics *m)
{
	cJSON *passes = cJSON_CreateArray();

	for (int i = 0; i < m->n_passes; i++) {
		const struct artifact_pass *ps = &m->passes[i];
		cJSON *po = cJSON_CreateObject(), *steps = cJSON_AddArrayToObject(po, "step_s");

		for (int k = 0; k < ps->n; k++)
			cJSON_AddItemToArray(steps, timing_json_number(ps->step_s[k]));
		cJSON_AddItemToObject(po, "median_s", timing_json_number(ps->median_s));
		cJSON_AddItemToArray(passes, po);
	}
	return passes;
}

static cJSON *argv_json(const struct artifact *a)
{
	cJSON *argv = cJSON_CreateArray();

	for (int i = 0; i < a->argc; i++)
		cJSON_AddItemToArray(argv, cJSON_CreateString(a->argv[i]));
	return argv;
}

/* cell.<path> as text: a string field, or an enum's name. */
const char *cell_copy_value(const struct cell *c, const char *path)
{
	const struct cell_field *cf = cell_field_find(path);
	const char *p = (const char *)c + cf->offset;

	if (cf->kind == CK_ENUM)
		return cf->names[*(const int *)p - cf->base];
	return *(char *const *)p;
}

/* The JSON of row f, whose value lies in the struct at base. */
static cJSON *field_json(const struct artifact *a, const struct artifact_field *f, const char *base)
{
	const char *p = base + f->offset;

	switch (f->kind) {
	case AK_CONST: return cJSON_CreateString(ARTIFACT_SCHEMA);
	case AK_STR: return *(char *const *)p ? cJSON_CreateString(*(char *const *)p) : cJSON_CreateNull();
	case AK_STAMP: case AK_HASH: return *p ? cJSON_CreateString(p) : cJSON_CreateNull();
	case AK_CELL_COPY:
		return have_cell(a) ? cJSON_CreateString(cell_copy_value(&a->cell, f->cell_path)) : cJSON_CreateNull();
	case AK_CELL: return have_cell(a) ? cell_to_json(&a->cell) : cJSON_CreateNull();
	case AK_STATUS: return cJSON_CreateString(f->names[*(const int *)p]);
	case AK_OBJECT: return cJSON_CreateObject();
	case AK_NUM: return json_number_or_null(*(const double *)p);
	case AK_TIME: return timing_json_number(*(const double *)p);
	case AK_COUNT: return *(const int *)p >= 0 ? cJSON_CreateNumber(*(const int *)p) : cJSON_CreateNull();
	case AK_FLAG: return *(const int *)p >= 0 ? cJSON_CreateBool(*(const int *)p) : cJSON_CreateNull();
	case AK_PASSES: return a->metrics.passes ? passes_json(&a->metrics) : cJSON_CreateNull();
	case AK_ARGV: return a->argv ? argv_json(a) : cJSON_CreateNull();
	}
	return cJSON_CreateNull();
}

cJSON *artifact_to_json(const struct artifact *a)
{
	cJSON *o = cJSON_CreateObject(), *in = o;
	const char *base = (const char *)a;

	for (int i = 0; i < artifact_field_count; i++) {
		const struct artifact_field *f = &artifact_fields[i];
		cJSON *v;

		if (!strchr(f->path, '.'))
			in = o, base = (const char *)a;
		v = field_json(a, f, base);
		cJSON_AddItemToObject(in, field_key(f), v);
		if (f->kind == AK_OBJECT) /* the rows after it are its keys */
			in = v, base = (const char *)a + f->offset;
	}
	return o;
}

/* --- the host ------------------------------------------------------------- */

/* The value of "key<sep>value" from the first matching line of a text
 * file, trimmed and unquoted; NULL if absent. */
static char *file_field(const char *path, const char *key, char sep)
{
	FILE *f = fopen(path, "re");
	char *line = NULL, *val = NULL;
	size_t cap = 0, klen = strlen(key);

	if (f == NULL)
		return NULL;
	while (val == NULL && getline(&line, &cap, f) > 0) {
		char *p = line, *end;
		if (strncmp(p, key, klen) != 0)
			continue;
		p += klen;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p != sep)
			continue;
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		end = p + strlen(p);
		while (end > p && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
			end--;
		if (end - p >= 2 && (*p == '"' || *p == '\'') && end[-1] == *p) {
			p++;
			end--;
		}
		*end = '\0';
		if (*p)
			val = xstrdup(p);
	}
	free(line);
	fclose(f);
	return val;
}

void artifact_env_collect_host(struct artifact_env *env)
{
	char host[256];
	struct utsname u;
	char *mem;

	if (gethostname(host, sizeof host) == 0) {
		host[sizeof host - 1] = '\0';
		artifact_set_str(&env->hostname, host);
	}
	free(env->os);
	env->os = file_field("/etc/os-release", "PRETTY_NAME", '=');
	if (env->os == NULL)
		env->os = file_field("/usr/lib/os-release", "PRETTY_NAME", '=');
	if (uname(&u) == 0) {
		free(env->kernel);
		env->kernel = xasprintf("%s %s %s", u.sysname, u.release, u.machine);
	}
	free(env->cpu);
	env->cpu = file_field("/proc/cpuinfo", "model name", ':');
	mem = file_field("/proc/meminfo", "MemTotal", ':');
	if (mem) {
		/* "131072000 kB": kibibytes, reported in GiB to 0.1 */
		double kib = strtod(mem, NULL);
		if (kib > 0)
			env->host_mem_gb = round(kib / (1024.0 * 1024.0) * 10.0) / 10.0;
		free(mem);
	}
	artifact_set_str(&env->poros_version, POROS_VERSION);
	artifact_set_str(&env->git_sha, POROS_GIT_SHA);
	/* Which GPU a scheduler (poros --gpus, Slurm's gres) pinned this cell to. */
	artifact_set_str(&env->cuda_visible_devices, getenv("CUDA_VISIBLE_DEVICES"));
}
