/* tools/lib/artifact.c: the RunArtifact ("poros.artifact/1") built in
 * memory and written to JSON, and the host half of its env; reading one
 * back, and the trainer summary, are artifact_read.c's. */
#include "artifact.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "artifact_int.h"
#include "jsonl.h"
#include "timing.h"
#include "util.h"

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

void metrics_init(struct artifact_metrics *m)
{
	m->vram_plan_mb = m->host_weights_mb = m->host_checkpoints_mb = m->vram_peak_mb = m->vram_avg_mb = NAN;
	m->process_peak_rss_mb = NAN;
	m->s_per_step = m->s_per_step_min = m->s_per_step_max = NAN;
	m->tokens_per_s = NAN;
	m->steps_measured = m->warmup_steps = -1;
	m->loss_first = m->loss_last = NAN;
	m->s_per_step_spread = m->s_per_step_mad = NAN;
	m->passes_agree = -1;
	m->n_passes = 0;
	m->passes = NULL;
}

void artifact_metrics_free(struct artifact_metrics *m)
{
	for (int i = 0; i < m->n_passes; i++)
		free(m->passes[i].step_s);
	free(m->passes);
	metrics_init(m);
}

void env_init(struct artifact_env *e)
{
	memset(e, 0, sizeof *e);
	e->host_mem_gb = NAN;
	e->gpu_mem_mb = NAN;
	e->ranks = -1;
}

/* Every string of an env, for freeing and copying in one place. */
#define ENV_STRINGS(X) X(hostname) X(os) X(kernel) X(cpu) X(gpu_name) X(driver) \
	X(cuda_runtime) X(poros_version) X(git_sha) X(python) X(torch) X(transformers) X(peft) X(weights) \
	X(cuda_visible_devices) X(backend) X(device)

void env_free(struct artifact_env *e)
{
#define FREE_FIELD(f) free(e->f);
	ENV_STRINGS(FREE_FIELD)
#undef FREE_FIELD
	env_init(e);
}

void artifact_init(struct artifact *a)
{
	memset(a, 0, sizeof *a);
	a->status = STATUS_ERROR;
	metrics_init(&a->metrics);
	a->parity.loss_max_abs_delta = NAN;
	a->parity.adapter_max_abs_delta = NAN;
	a->parity.bitwise_exact = -1;
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

static void add_str(cJSON *o, const char *k, const char *s)
{
	cJSON_AddItemToObject(o, k, s ? cJSON_CreateString(s) : cJSON_CreateNull());
}

static void add_num(cJSON *o, const char *k, double v)
{
	cJSON_AddItemToObject(o, k, json_number_or_null(v));
}

static void add_count(cJSON *o, const char *k, int v)
{
	cJSON_AddItemToObject(o, k, v >= 0 ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

cJSON *artifact_to_json(const struct artifact *a)
{
	cJSON *o = cJSON_CreateObject(), *m, *p, *e, *argv;

	cJSON_AddStringToObject(o, "schema", ARTIFACT_SCHEMA);
	add_str(o, "cell_id", a->cell_id);
	/* Copies of the cell's identity at the top level, for jq and grep. */
	add_str(o, "config_hash", a->config_hash[0] ? a->config_hash : NULL);
	add_str(o, "method", have_cell(a) ? method_names[a->cell.method] : NULL);
	add_str(o, "model_id", have_cell(a) ? a->cell.model.model_id : NULL);
	add_str(o, "precision", have_cell(a) ? precision_names[a->cell.precision] : NULL);
	cJSON_AddItemToObject(o, "cell", have_cell(a) ? cell_to_json(&a->cell) : cJSON_CreateNull());
	cJSON_AddStringToObject(o, "status", artifact_status_names[a->status]);
	add_str(o, "error", a->error);

	m = cJSON_AddObjectToObject(o, "metrics");
	add_num(m, "vram_plan_mb", a->metrics.vram_plan_mb);
	add_num(m, "host_weights_mb", a->metrics.host_weights_mb);
	add_num(m, "host_checkpoints_mb", a->metrics.host_checkpoints_mb);
	add_num(m, "process_peak_rss_mb", a->metrics.process_peak_rss_mb);
	add_num(m, "vram_peak_mb", a->metrics.vram_peak_mb);
	add_num(m, "vram_avg_mb", a->metrics.vram_avg_mb);
	cJSON_AddItemToObject(m, "s_per_step", timing_json_number(a->metrics.s_per_step));
	cJSON_AddItemToObject(m, "s_per_step_min", timing_json_number(a->metrics.s_per_step_min));
	cJSON_AddItemToObject(m, "s_per_step_max", timing_json_number(a->metrics.s_per_step_max));
	cJSON_AddItemToObject(m, "tokens_per_s", timing_json_number(a->metrics.tokens_per_s));
	add_count(m, "steps_measured", a->metrics.steps_measured);
	add_count(m, "warmup_steps", a->metrics.warmup_steps);
	add_num(m, "loss_first", a->metrics.loss_first);
	add_num(m, "loss_last", a->metrics.loss_last);
	cJSON_AddItemToObject(m, "s_per_step_spread", timing_json_number(a->metrics.s_per_step_spread));
	cJSON_AddItemToObject(m, "s_per_step_mad", timing_json_number(a->metrics.s_per_step_mad));
	cJSON_AddItemToObject(m, "passes_agree",
	                      a->metrics.passes_agree < 0 ? cJSON_CreateNull() : cJSON_CreateBool(a->metrics.passes_agree));
	if (a->metrics.passes) {
		cJSON *passes = cJSON_AddArrayToObject(m, "passes");

		for (int i = 0; i < a->metrics.n_passes; i++) {
			const struct artifact_pass *ps = &a->metrics.passes[i];
			cJSON *po = cJSON_CreateObject(), *steps = cJSON_AddArrayToObject(po, "step_s");

			for (int k = 0; k < ps->n; k++)
				cJSON_AddItemToArray(steps, timing_json_number(ps->step_s[k]));
			cJSON_AddItemToObject(po, "median_s", timing_json_number(ps->median_s));
			cJSON_AddItemToArray(passes, po);
		}
	} else {
		cJSON_AddNullToObject(m, "passes");
	}

	p = cJSON_AddObjectToObject(o, "parity");
	add_num(p, "loss_max_abs_delta", a->parity.loss_max_abs_delta);
	add_num(p, "adapter_max_abs_delta", a->parity.adapter_max_abs_delta);
	cJSON_AddItemToObject(p, "bitwise_exact",
	                      a->parity.bitwise_exact < 0 ? cJSON_CreateNull()
	                                                  : cJSON_CreateBool(a->parity.bitwise_exact));

	e = cJSON_AddObjectToObject(o, "env");
	add_str(e, "hostname", a->env.hostname);
	add_str(e, "os", a->env.os);
	add_str(e, "kernel", a->env.kernel);
	add_str(e, "cpu", a->env.cpu);
	add_num(e, "host_mem_gb", a->env.host_mem_gb);
	add_str(e, "gpu_name", a->env.gpu_name);
	add_num(e, "gpu_mem_mb", a->env.gpu_mem_mb);
	add_str(e, "driver", a->env.driver);
	add_str(e, "cuda_runtime", a->env.cuda_runtime);
	add_str(e, "poros_version", a->env.poros_version);
	add_str(e, "git_sha", a->env.git_sha);
	add_str(e, "python", a->env.python);
	add_str(e, "torch", a->env.torch);
	add_str(e, "transformers", a->env.transformers);
	add_str(e, "peft", a->env.peft);
	add_str(e, "weights", a->env.weights);
	add_str(e, "cuda_visible_devices", a->env.cuda_visible_devices);
	add_str(e, "backend", a->env.backend);
	add_str(e, "device", a->env.device);
	add_count(e, "ranks", a->env.ranks);

	add_str(o, "started_at", a->started_at[0] ? a->started_at : NULL);
	add_str(o, "finished_at", a->finished_at[0] ? a->finished_at : NULL);
	add_num(o, "wall_s", a->wall_s);
	if (a->argv) {
		argv = cJSON_AddArrayToObject(o, "argv");
		for (int i = 0; i < a->argc; i++)
			cJSON_AddItemToArray(argv, cJSON_CreateString(a->argv[i]));
	} else {
		cJSON_AddNullToObject(o, "argv");
	}
	add_str(o, "log", a->log);
	add_str(o, "run_dir", a->run_dir);
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
