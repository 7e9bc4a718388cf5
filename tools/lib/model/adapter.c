/* tools/lib/model/adapter.c: LoRA adapters in PEFT's on-disk format.  What PEFT
 * options Poros cannot reproduce (rsLoRA scaling, DoRA, per-module ranks,
 * fan_in_fan_out, trained biases) are refused on load rather than ignored,
 * so an adapter is never silently applied with the wrong math. */
#include "adapter.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "arch.h"
#include "records/records.h"
#include "util/util.h"
#include "safetensors.h"

#define KEY_PREFIX ARCH_ADAPTER_PREFIX ARCH_LAYERS
#define CONFIG_NAME "adapter_config.json"
#define WEIGHTS_NAME "adapter_model.safetensors"
#define ALL_MODULES ((1u << CELL_MAX_TARGETS) - 1)

const int vllm_lora_ranks[8] = { 8, 16, 32, 64, 128, 256, 320, 512 };

int vllm_rank_ok(int rank)
{
	for (size_t i = 0; i < sizeof vllm_lora_ranks / sizeof *vllm_lora_ranks; i++)
		if (rank == vllm_lora_ranks[i])
			return 1;
	return 0;
}

const char *vllm_rank_list(void)
{
	return "8, 16, 32, 64, 128, 256, 320, 512";
}

char *adapter_key(int layer, int module, int is_b)
{
	if (layer < 0 || module < 0 || module >= CELL_MAX_TARGETS)
		return NULL;
	/* the projection's HF name (arch.c): self_attn.q_proj ... mlp.down_proj */
	return xasprintf(KEY_PREFIX "%d.%s.lora_%c.weight", layer, arch_proj_name[module], is_b ? 'B' : 'A');
}

int adapter_key_parse(const char *key, int *layer, int *module, int *is_b)
{
	const char *p = key, *dot;
	long l = 0;
	size_t plen;

	if (strncmp(p, KEY_PREFIX, strlen(KEY_PREFIX)) != 0)
		return -1;
	p += strlen(KEY_PREFIX);
	/* a plain decimal, no sign, no leading zero: the form PEFT writes */
	if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
		return -1;
	while (*p >= '0' && *p <= '9') {
		l = l * 10 + (*p++ - '0');
		if (l > 1000000)
			return -1;
	}
	if (*p++ != '.')
		return -1;
	for (int m = 0; m < CELL_MAX_TARGETS; m++) {
		plen = strlen(arch_proj_name[m]);
		if (strncmp(p, arch_proj_name[m], plen) != 0)
			continue;
		dot = p + plen;
		if (strcmp(dot, ".lora_A.weight") != 0 && strcmp(dot, ".lora_B.weight") != 0)
			continue;
		*layer = (int)l;
		*module = m;
		*is_b = dot[6] == 'B';
		return 0;
	}
	return -1;
}

const struct adapter_tensor *adapter_find(const struct adapter *a, const char *key)
{
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->t[i].name, key) == 0)
			return &a->t[i];
	return NULL;
}

/* Every tensor is a LoRA A (R,K) or B (N,R) of a targeted module, and each
 * A has its B with matching in/out sizes. */
static int check_tensors(const struct adapter *a, const char *where, char *err, size_t errsz)
{
	for (int i = 0; i < a->n; i++) {
		const struct adapter_tensor *t = &a->t[i], *other;
		int layer, module, is_b;
		char *pair;

		if (t->name == NULL || adapter_key_parse(t->name, &layer, &module, &is_b) < 0)
			return set_error(err, errsz, "%s: tensor \"%s\" is not a LoRA weight of q/k/v/o/gate/up/down_proj (%s<L>.self_attn.q_proj.lora_A.weight ...)",
			                 where, t->name ? t->name : "(null)", KEY_PREFIX);
		if (!(a->target_mask >> module & 1u))
			return set_error(err, errsz, "%s: tensor \"%s\": %s is not in target_modules", where, t->name,
			                 lora_module_names[module]);
		if (t->rows <= 0 || t->cols <= 0)
			return set_error(err, errsz, "%s: tensor \"%s\": shape [%d, %d] is empty", where, t->name, t->rows, t->cols);
		if ((is_b ? t->cols : t->rows) != a->rank)
			return set_error(err, errsz, "%s: tensor \"%s\": shape [%d, %d] does not have rank %d in its %s dimension", where,
			                 t->name, t->rows, t->cols, a->rank, is_b ? "second" : "first");
		if (is_b)
			continue;
		pair = adapter_key(layer, module, 1);
		other = adapter_find(a, pair);
		free(pair);
		if (other == NULL)
			return set_error(err, errsz, "%s: tensor \"%s\" has no lora_B", where, t->name);
	}
	for (int i = 0; i < a->n; i++) {
		int layer, module, is_b;
		char *pair;

		adapter_key_parse(a->t[i].name, &layer, &module, &is_b);
		if (!is_b)
			continue;
		pair = adapter_key(layer, module, 0);
		if (adapter_find(a, pair) == NULL) {
			set_error(err, errsz, "%s: tensor \"%s\" has no lora_A", where, a->t[i].name);
			free(pair);
			return -1;
		}
		free(pair);
	}
	return 0;
}

/* adapter_config.json with PEFT's LoraConfig fields, keys sorted as PEFT's
 * own save_pretrained writes them. */
static cJSON *config_to_json(const struct adapter *a)
{
	cJSON *o = cJSON_CreateObject(), *targets = cJSON_CreateArray();

	for (int i = 0; i < CELL_MAX_TARGETS; i++)
		if (a->target_mask >> i & 1u)
			cJSON_AddItemToArray(targets, cJSON_CreateString(lora_module_names[i]));
	if (a->base_model != NULL)
		cJSON_AddStringToObject(o, "base_model_name_or_path", a->base_model);
	else
		cJSON_AddNullToObject(o, "base_model_name_or_path");
	cJSON_AddStringToObject(o, "bias", "none");
	cJSON_AddFalseToObject(o, "fan_in_fan_out");
	cJSON_AddTrueToObject(o, "inference_mode");
	cJSON_AddTrueToObject(o, "init_lora_weights");
	cJSON_AddNullToObject(o, "layers_to_transform");
	cJSON_AddNumberToObject(o, "lora_alpha", a->alpha);
	cJSON_AddNumberToObject(o, "lora_dropout", a->dropout);
	cJSON_AddNullToObject(o, "modules_to_save");
	cJSON_AddStringToObject(o, "peft_type", "LORA");
	cJSON_AddNumberToObject(o, "r", a->rank);
	cJSON_AddNullToObject(o, "revision");
	cJSON_AddItemToObject(o, "target_modules", targets);
	cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
	cJSON_AddFalseToObject(o, "use_rslora");
	return o;
}

static int check_header(const struct adapter *a, const char *dir, char *err, size_t errsz)
{
	if (a->rank < 1)
		return set_error(err, errsz, "%s: rank %d: must be >= 1", dir, a->rank);
	if (!isfinite(a->alpha))
		return set_error(err, errsz, "%s: lora_alpha is not finite", dir);
	if (!(a->dropout >= 0 && a->dropout < 1))
		return set_error(err, errsz, "%s: lora_dropout %g: must be in [0, 1)", dir, a->dropout);
	if (a->target_mask == 0 || (a->target_mask & ~ALL_MODULES) != 0)
		return set_error(err, errsz, "%s: target mask 0x%x: must name some of the %d projections", dir, a->target_mask,
		                 CELL_MAX_TARGETS);
	return 0;
}

int adapter_save(const char *dir, const struct adapter *a, char *err, size_t errsz)
{
	struct st_out *out;
	cJSON *meta, *cfg;
	char *wpath, *cpath, *text;
	int rc = -1;

	if (check_header(a, dir, err, errsz) < 0 || check_tensors(a, dir, err, errsz) < 0)
		return -1;
	/* the adapter directory is the trainer's own: a planted link is refused */
	if (mkdir_owned(dir, 0755) < 0)
		return set_error(err, errsz, "%s: %s", dir,
			         errno == ELOOP ? "is a symbolic link; refusing to write through it" : strerror(errno));
	remove_dead_tmp(dir); /* what a killed save of this directory left */
	out = xcalloc((size_t)a->n + 1, sizeof *out);
	for (int i = 0; i < a->n; i++) {
		out[i].name = a->t[i].name;
		out[i].dtype = ST_F32;
		out[i].ndim = 2;
		out[i].shape[0] = a->t[i].rows;
		out[i].shape[1] = a->t[i].cols;
		out[i].data = a->t[i].data;
	}
	/* transformers refuses a safetensors file without format "pt" */
	meta = cJSON_CreateObject();
	cJSON_AddStringToObject(meta, "format", "pt");
	wpath = xasprintf("%s/" WEIGHTS_NAME, dir);
	cpath = xasprintf("%s/" CONFIG_NAME, dir);
	cfg = config_to_json(a);
	text = cJSON_Print(cfg);
	if (st_write(wpath, out, a->n, meta, err, errsz) < 0)
		goto out;
	if (text == NULL) {
		set_error(err, errsz, "%s: out of memory", cpath);
		goto out;
	}
	text = xrealloc(text, strlen(text) + 2);
	strcat(text, "\n");
	if (atomic_write(cpath, text, strlen(text)) < 0) {
		set_error(err, errsz, "%s: %s", cpath, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(text);
	cJSON_Delete(cfg);
	cJSON_Delete(meta);
	free(wpath);
	free(cpath);
	free(out);
	return rc;
}

void adapter_remove_leftovers(const char *run_dir)
{
	DIR *d = opendir(run_dir);
	struct dirent *ent;

	while (d && (ent = readdir(d)) != NULL) {
		struct stat st;
		char *sub;

		if (strcmp(ent->d_name, "adapter") != 0 && strncmp(ent->d_name, "adapter-step", 12) != 0)
			continue;
		sub = xasprintf("%s/%s", run_dir, ent->d_name);
		if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
			remove_dead_tmp(sub);
		free(sub);
	}
	if (d)
		closedir(d);
}

/* --- loading ------------------------------------------------------------- */

static int config_number(const cJSON *cfg, const char *key, double def, double *out, const char *path, char *err,
                         size_t errsz)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);

	if (v == NULL || cJSON_IsNull(v)) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return set_error(err, errsz, "%s: \"%s\" is not a number", path, key);
	*out = v->valuedouble;
	return 0;
}

/* target_modules: a list of names, or "all-linear" (PEFT's shorthand, which
 * for these decoders is all seven projections). */
static int parse_targets(struct adapter *a, const cJSON *cfg, const char *path, char *err, size_t errsz)
{
	const cJSON *tm = cJSON_GetObjectItemCaseSensitive(cfg, "target_modules"), *v;

	a->target_mask = 0;
	if (cJSON_IsString(tm) && strcmp(tm->valuestring, "all-linear") == 0) {
		a->target_mask = ALL_MODULES;
		return 0;
	}
	if (cJSON_IsString(tm))
		return set_error(err, errsz, "%s: target_modules \"%s\": a regular expression is not supported (give a list)", path,
		                 tm->valuestring);
	if (!cJSON_IsArray(tm))
		return set_error(err, errsz, "%s: \"target_modules\" is missing or not a list", path);
	cJSON_ArrayForEach(v, tm) {
		int m = cJSON_IsString(v) ? lora_module_from_name(v->valuestring) : -1;

		if (m < 0)
			return set_error(err, errsz, "%s: target module %s%s%s is not supported (expected: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
			                 path, cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "(not a string)",
			                 cJSON_IsString(v) ? "\"" : "");
		a->target_mask |= 1u << m;
	}
	return 0;
}

/* The PEFT options whose math Poros does not implement. */
static int refuse_unsupported(const cJSON *cfg, const char *path, char *err, size_t errsz)
{
	static const char *const must_be_false[] = { "use_rslora", "use_dora", "fan_in_fan_out", "lora_bias", "use_qalora" };
	static const char *const must_be_empty[] = { "rank_pattern", "alpha_pattern" };
	const cJSON *v;

	for (size_t i = 0; i < sizeof must_be_false / sizeof *must_be_false; i++)
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, must_be_false[i])))
			return set_error(err, errsz, "%s: \"%s\": true is not supported", path, must_be_false[i]);
	for (size_t i = 0; i < sizeof must_be_empty / sizeof *must_be_empty; i++) {
		v = cJSON_GetObjectItemCaseSensitive(cfg, must_be_empty[i]);
		if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsObject(v) && v->child == NULL))
			return set_error(err, errsz, "%s: \"%s\": per-module values are not supported", path, must_be_empty[i]);
	}
	v = cJSON_GetObjectItemCaseSensitive(cfg, "bias");
	if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0))
		return set_error(err, errsz, "%s: \"bias\": only \"none\" is supported", path);
	return 0;
}

static int load_config(struct adapter *a, const char *path, char *err, size_t errsz)
{
	char jerr[512];
	cJSON *cfg = json_read_file(path, jerr, sizeof jerr);
	const cJSON *v;
	double r;
	int rc = -1;

	if (cfg == NULL)
		return set_error(err, errsz, "%s", jerr);
	if (!cJSON_IsObject(cfg)) {
		set_error(err, errsz, "%s: not a JSON object", path);
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(cfg, "peft_type");
	if (v != NULL && !(cJSON_IsString(v) && strcmp(v->valuestring, "LORA") == 0)) {
		set_error(err, errsz, "%s: peft_type %s%s%s is not supported (expected \"LORA\")", path, cJSON_IsString(v) ? "\"" : "",
		          cJSON_IsString(v) ? v->valuestring : "(not a string)", cJSON_IsString(v) ? "\"" : "");
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(cfg, "r");
	r = cJSON_IsNumber(v) ? v->valuedouble : 0;
	if (!(r >= 1 && r <= 65536 && r == floor(r))) {
		set_error(err, errsz, "%s: \"r\" is missing or not an integer in [1, 65536]", path);
		goto out;
	}
	a->rank = (int)r;
	/* PEFT's LoraConfig defaults: lora_alpha 8, lora_dropout 0 */
	if (config_number(cfg, "lora_alpha", 8.0, &a->alpha, path, err, errsz) < 0 ||
	    config_number(cfg, "lora_dropout", 0.0, &a->dropout, path, err, errsz) < 0 ||
	    parse_targets(a, cfg, path, err, errsz) < 0 || refuse_unsupported(cfg, path, err, errsz) < 0)
		goto out;
	if (!(a->dropout >= 0 && a->dropout < 1)) {
		set_error(err, errsz, "%s: \"lora_dropout\" %g: must be in [0, 1)", path, a->dropout);
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(cfg, "base_model_name_or_path");
	if (cJSON_IsString(v))
		a->base_model = xstrdup(v->valuestring);
	rc = 0;
out:
	cJSON_Delete(cfg);
	return rc;
}

static int load_weights(struct adapter *a, const char *path, char *err, size_t errsz)
{
	struct st_file f;

	if (st_open(&f, path, err, errsz) < 0)
		return -1;
	a->t = xcalloc((size_t)f.n + 1, sizeof *a->t);
	for (int i = 0; i < f.n; i++) {
		const struct st_tensor *s = &f.t[i];
		struct adapter_tensor *t = &a->t[i];

		t->name = xstrdup(s->name);
		a->n = i + 1;
		if (s->ndim != 2 || s->shape[0] > 1 << 30 || s->shape[1] > 1 << 30) {
			set_error(err, errsz, "%s: tensor \"%s\": not a 2-D matrix", path, s->name);
			goto fail;
		}
		t->rows = (int)s->shape[0];
		t->cols = (int)s->shape[1];
		t->data = xmalloc((size_t)st_numel(s) * sizeof *t->data + 1);
		if (st_read_f32(&f, s, t->data, (size_t)st_numel(s), err, errsz) < 0)
			goto fail;
	}
	st_close(&f);
	return 0;
fail:
	st_close(&f);
	return -1;
}

int adapter_load(const char *dir, struct adapter *a, char *err, size_t errsz)
{
	char *cpath = xasprintf("%s/" CONFIG_NAME, dir);
	char *wpath = xasprintf("%s/" WEIGHTS_NAME, dir);
	char *bin = xasprintf("%s/adapter_model.bin", dir);
	struct stat st;
	int rc = -1;

	memset(a, 0, sizeof *a);
	if (load_config(a, cpath, err, errsz) < 0)
		goto out;
	if (stat(wpath, &st) < 0 && stat(bin, &st) == 0) {
		set_error(err, errsz, "%s: only adapter_model.bin (a pickle); Poros reads " WEIGHTS_NAME " only", dir);
		goto out;
	}
	if (load_weights(a, wpath, err, errsz) < 0 || check_tensors(a, wpath, err, errsz) < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		adapter_free(a);
	free(cpath);
	free(wpath);
	free(bin);
	return rc;
}

void adapter_free(struct adapter *a)
{
	for (int i = 0; i < a->n; i++) {
		free(a->t[i].name);
		free(a->t[i].data);
	}
	free(a->t);
	free(a->base_model);
	memset(a, 0, sizeof *a);
}
