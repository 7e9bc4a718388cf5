/* tools/lib/model_config.c: HF config.json -> struct model_config, and
 * where a model_id's config lives on this machine. */
#include "model_config.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cell.h"
#include "util.h"

static const char *const supported_types[] = { "llama", "qwen2", "qwen3" };
#define N_SUPPORTED (sizeof supported_types / sizeof *supported_types)

/* Upper bounds far above any released model, low enough that the products
 * in the parameter counts and buffer sizes stay well inside 64 bits. */
#define MAX_HIDDEN (1 << 17)
#define MAX_INTERMEDIATE (1 << 20)
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 1024
#define MAX_VOCAB (1 << 24)

static void seterr(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errsz == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

/* A field that is absent or JSON null counts as absent: HF writes null for
 * "use the default" (head_dim, rope_scaling, sliding_window). */
static const cJSON *field(const cJSON *root, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);

	return cJSON_IsNull(v) ? NULL : v;
}

/* An integer field in [min, max]; def when absent (def < min: required). */
static int get_int(const cJSON *root, const char *key, long min, long max, long def, int *out, const char *name,
                   char *err, size_t errsz)
{
	const cJSON *v = field(root, key);
	double d;

	if (v == NULL) {
		if (def < min)
			return seterr(err, errsz, "%s: \"%s\" is missing", name, key), -1;
		*out = (int)def;
		return 0;
	}
	if (!cJSON_IsNumber(v))
		return seterr(err, errsz, "%s: \"%s\" is not a number", name, key), -1;
	d = v->valuedouble;
	if (!isfinite(d) || d != floor(d))
		return seterr(err, errsz, "%s: \"%s\" is not an integer: %g", name, key, d), -1;
	if (d < (double)min || d > (double)max)
		return seterr(err, errsz, "%s: \"%s\" is %.0f, outside [%ld, %ld]", name, key, d, min, max), -1;
	*out = (int)d;
	return 0;
}

/* A finite number in (min, max); def when absent. */
static int get_double(const cJSON *root, const char *key, double min, double max, double def, double *out,
                      const char *name, char *err, size_t errsz)
{
	const cJSON *v = field(root, key);

	if (v == NULL) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return seterr(err, errsz, "%s: \"%s\" is not a finite number", name, key), -1;
	if (!(v->valuedouble > min && v->valuedouble < max))
		return seterr(err, errsz, "%s: \"%s\" is %g, outside (%g, %g)", name, key, v->valuedouble, min, max), -1;
	*out = v->valuedouble;
	return 0;
}

static int get_bool(const cJSON *root, const char *key, int def, int *out, const char *name, char *err, size_t errsz)
{
	const cJSON *v = field(root, key);

	if (v == NULL) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(v))
		return seterr(err, errsz, "%s: \"%s\" is not true or false", name, key), -1;
	*out = cJSON_IsTrue(v);
	return 0;
}

/* bos/eos: an id, or a list of ids (Llama 3.1 lists several eos ids; the
 * first is the one generation and padding use); -1 when absent. */
static int get_token_id(const cJSON *root, const char *key, int *out, const char *name, char *err, size_t errsz)
{
	const cJSON *v = field(root, key);
	const cJSON *holder = root;
	cJSON *tmp = NULL;
	int rc;

	if (v == NULL) {
		*out = -1;
		return 0;
	}
	if (cJSON_IsArray(v)) {
		if (cJSON_GetArraySize(v) == 0) {
			*out = -1;
			return 0;
		}
		tmp = cJSON_CreateObject();
		cJSON_AddItemToObject(tmp, key, cJSON_Duplicate(cJSON_GetArrayItem(v, 0), 1));
		holder = tmp;
	}
	rc = get_int(holder, key, 0, MAX_VOCAB - 1, -1, out, name, err, errsz);
	cJSON_Delete(tmp);
	return rc;
}

/* cJSON keeps both copies of a repeated key and finds the first, Python's
 * json the last: refuse the ambiguity instead of disagreeing with HF. */
static int check_unique_keys(const cJSON *root, const char *name, char *err, size_t errsz)
{
	for (const cJSON *a = root->child; a != NULL; a = a->next)
		for (const cJSON *b = a->next; b != NULL; b = b->next)
			if (strcmp(a->string, b->string) == 0)
				return seterr(err, errsz, "%s: key \"%s\" appears twice", name, a->string), -1;
	return 0;
}

static int parse_type(struct model_config *m, const cJSON *root, const char *name, char *err, size_t errsz)
{
	const cJSON *v = field(root, "model_type");

	if (v == NULL)
		return seterr(err, errsz, "%s: \"model_type\" is missing (expected one of: llama, qwen2, qwen3)", name), -1;
	if (!cJSON_IsString(v))
		return seterr(err, errsz, "%s: \"model_type\" is not a string", name), -1;
	for (size_t i = 0; i < N_SUPPORTED; i++) {
		if (strcmp(v->valuestring, supported_types[i]) == 0) {
			snprintf(m->model_type, sizeof m->model_type, "%s", supported_types[i]);
			return 0;
		}
	}
	return seterr(err, errsz, "%s: model_type \"%.64s\" is not supported (expected one of: llama, qwen2, qwen3)", name,
	              v->valuestring), -1;
}

/* Records a rope_scaling object; the trainer decides what it supports. */
static int parse_rope_scaling(struct model_config *m, const cJSON *root, const char *name, char *err, size_t errsz)
{
	const cJSON *rs = field(root, "rope_scaling"), *type;

	m->rope_scaling_type[0] = '\0';
	m->rope_scaling_factor = 1.0;
	m->rope_low_freq_factor = 1.0;
	m->rope_high_freq_factor = 1.0;
	m->rope_original_max_position = 0;
	if (rs == NULL)
		return 0;
	if (!cJSON_IsObject(rs))
		return seterr(err, errsz, "%s: \"rope_scaling\" is not an object", name), -1;
	/* transformers accepts the older "type" key as well as "rope_type" */
	type = field(rs, "rope_type");
	if (type == NULL)
		type = field(rs, "type");
	if (!cJSON_IsString(type))
		return seterr(err, errsz, "%s: \"rope_scaling.rope_type\" is missing or not a string", name), -1;
	snprintf(m->rope_scaling_type, sizeof m->rope_scaling_type, "%.31s", type->valuestring);
	if (get_double(rs, "factor", 0, 1e6, 1.0, &m->rope_scaling_factor, name, err, errsz) < 0 ||
	    get_double(rs, "low_freq_factor", 0, 1e6, 1.0, &m->rope_low_freq_factor, name, err, errsz) < 0 ||
	    get_double(rs, "high_freq_factor", 0, 1e6, 1.0, &m->rope_high_freq_factor, name, err, errsz) < 0 ||
	    get_int(rs, "original_max_position_embeddings", 0, 1L << 30, 0, &m->rope_original_max_position, name, err, errsz) < 0)
		return -1;
	return 0;
}

int model_config_parse(struct model_config *m, const char *json, const char *name, char *err, size_t errsz)
{
	cJSON *root;
	const cJSON *act;
	int rc = -1, head_dim_given, flag;

	memset(m, 0, sizeof *m);
	root = cJSON_Parse(json);
	if (root == NULL)
		return seterr(err, errsz, "%s: not valid JSON", name), -1;
	if (!cJSON_IsObject(root)) {
		seterr(err, errsz, "%s: not a JSON object", name);
		goto out;
	}
	if (check_unique_keys(root, name, err, errsz) < 0 || parse_type(m, root, name, err, errsz) < 0)
		goto out;
	act = field(root, "hidden_act");
	if (act != NULL && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0)) {
		seterr(err, errsz, "%s: \"hidden_act\" must be \"silu\" (the SwiGLU MLP of %s)", name, m->model_type);
		goto out;
	}
	if (get_int(root, "hidden_size", 1, MAX_HIDDEN, -1, &m->hidden_size, name, err, errsz) < 0 ||
	    get_int(root, "intermediate_size", 1, MAX_INTERMEDIATE, -1, &m->intermediate_size, name, err, errsz) < 0 ||
	    get_int(root, "num_hidden_layers", 1, MAX_LAYERS, -1, &m->num_hidden_layers, name, err, errsz) < 0 ||
	    get_int(root, "num_attention_heads", 1, MAX_HEADS, -1, &m->num_attention_heads, name, err, errsz) < 0 ||
	    get_int(root, "num_key_value_heads", 1, MAX_HEADS, m->num_attention_heads, &m->num_key_value_heads, name, err, errsz) < 0 ||
	    get_int(root, "vocab_size", 1, MAX_VOCAB, -1, &m->vocab_size, name, err, errsz) < 0 ||
	    get_int(root, "max_position_embeddings", 0, 1L << 30, 0, &m->max_position_embeddings, name, err, errsz) < 0)
		goto out;
	head_dim_given = field(root, "head_dim") != NULL;
	if (!head_dim_given && m->hidden_size % m->num_attention_heads != 0) {
		seterr(err, errsz, "%s: \"hidden_size\" %d is not a multiple of \"num_attention_heads\" %d (and no \"head_dim\")",
		       name, m->hidden_size, m->num_attention_heads);
		goto out;
	}
	if (get_int(root, "head_dim", 2, MAX_HEAD_DIM, m->hidden_size / m->num_attention_heads, &m->head_dim, name, err, errsz) < 0)
		goto out;
	if (m->head_dim % 2 != 0 || m->head_dim < 2) {
		seterr(err, errsz, "%s: \"head_dim\" %d is not even (RoPE rotates pairs)", name, m->head_dim);
		goto out;
	}
	if (m->num_attention_heads % m->num_key_value_heads != 0) {
		seterr(err, errsz, "%s: \"num_attention_heads\" %d is not a multiple of \"num_key_value_heads\" %d", name,
		       m->num_attention_heads, m->num_key_value_heads);
		goto out;
	}
	if (get_double(root, "rope_theta", 0, 1e12, 10000.0, &m->rope_theta, name, err, errsz) < 0 ||
	    get_double(root, "rms_norm_eps", 0, 1, 1e-6, &m->rms_norm_eps, name, err, errsz) < 0 ||
	    get_bool(root, "tie_word_embeddings", 0, &m->tie_word_embeddings, name, err, errsz) < 0 ||
	    /* HF's Qwen2 always has q/k/v biases and its config.json omits the
	     * field, so for qwen2 only an explicit false turns them off */
	    get_bool(root, "attention_bias", strcmp(m->model_type, "qwen2") == 0, &m->attention_bias, name, err, errsz) < 0 ||
	    get_bool(root, "use_qk_norm", strcmp(m->model_type, "qwen3") == 0, &m->qk_norm, name, err, errsz) < 0 ||
	    get_token_id(root, "bos_token_id", &m->bos_token_id, name, err, errsz) < 0 ||
	    get_token_id(root, "eos_token_id", &m->eos_token_id, name, err, errsz) < 0 ||
	    parse_rope_scaling(m, root, name, err, errsz) < 0)
		goto out;
	/* features the trainer does not implement: refused, not ignored */
	if (get_bool(root, "use_sliding_window", 0, &flag, name, err, errsz) < 0)
		goto out;
	if (flag) {
		seterr(err, errsz, "%s: \"use_sliding_window\": true is not supported (full causal attention only)", name);
		goto out;
	}
	if (get_bool(root, "mlp_bias", 0, &flag, name, err, errsz) < 0)
		goto out;
	if (flag) {
		seterr(err, errsz, "%s: \"mlp_bias\": true is not supported", name);
		goto out;
	}
	/* qwen3's q/k norms are part of the architecture whatever the field says */
	if (strcmp(m->model_type, "qwen3") == 0)
		m->qk_norm = 1;
	rc = 0;
out:
	cJSON_Delete(root);
	return rc;
}

/* --- resolution ---------------------------------------------------------- */

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int has_weights(const char *dir)
{
	char *a = xasprintf("%s/model.safetensors", dir);
	char *b = xasprintf("%s/model.safetensors.index.json", dir);
	int yes = is_file(a) || is_file(b);

	free(a);
	free(b);
	return yes;
}

/* Reads and parses path into m; on success sets config_path, model_id and,
 * when weights_dir is given and holds weights, checkpoint_dir. */
static int load_config(struct model_config *m, const char *path, const char *model_id, const char *weights_dir,
                       char *err, size_t errsz)
{
	char *text = read_whole_file(path, NULL);

	if (text == NULL)
		return seterr(err, errsz, "%s: %s", path, strerror(errno)), -1;
	if (model_config_parse(m, text, path, err, errsz) < 0) {
		free(text);
		return -1;
	}
	free(text);
	m->model_id = xstrdup(model_id);
	m->config_path = xstrdup(path);
	m->checkpoint_dir = weights_dir != NULL && has_weights(weights_dir) ? xstrdup(weights_dir) : NULL;
	return 0;
}

/* The hub cache root, as huggingface_hub finds it. */
static char *hub_cache_dir(void)
{
	const char *v;

	if ((v = getenv("HF_HUB_CACHE")) != NULL && *v)
		return xstrdup(v);
	if ((v = getenv("HF_HOME")) != NULL && *v)
		return xasprintf("%s/hub", v);
	if ((v = getenv("XDG_CACHE_HOME")) != NULL && *v)
		return xasprintf("%s/huggingface/hub", v);
	if ((v = getenv("HOME")) != NULL && *v)
		return xasprintf("%s/.cache/huggingface/hub", v);
	return NULL;
}

/* The snapshot of a cached repo: the one refs/main names when it exists
 * (what huggingface_hub itself loads), else the newest snapshot holding a
 * config.json by mtime.  Returns a malloc'd directory or NULL. */
static char *pick_snapshot(const char *repo_dir)
{
	char *snaps = xasprintf("%s/snapshots", repo_dir);
	char *ref = xasprintf("%s/refs/main", repo_dir);
	char *text = read_whole_file(ref, NULL), *best = NULL;
	struct timespec best_t = { 0, 0 };
	DIR *d;
	struct dirent *e;

	free(ref);
	if (text != NULL) {
		text[strcspn(text, " \t\r\n")] = '\0';
		if (name_is_safe(text)) {
			char *cfg = xasprintf("%s/%s/config.json", snaps, text);

			if (is_file(cfg))
				best = xasprintf("%s/%s", snaps, text);
			free(cfg);
		}
		free(text);
		if (best != NULL) {
			free(snaps);
			return best;
		}
	}
	if ((d = opendir(snaps)) == NULL) {
		free(snaps);
		return NULL;
	}
	while ((e = readdir(d)) != NULL) {
		char *dir, *cfg;
		struct stat st;

		if (!name_is_safe(e->d_name))
			continue;
		dir = xasprintf("%s/%s", snaps, e->d_name);
		cfg = xasprintf("%s/config.json", dir);
		if (is_file(cfg) && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
		    (best == NULL || st.st_mtim.tv_sec > best_t.tv_sec ||
		     (st.st_mtim.tv_sec == best_t.tv_sec && st.st_mtim.tv_nsec > best_t.tv_nsec))) {
			free(best);
			best = dir;
			dir = NULL;
			best_t = st.st_mtim;
		}
		free(dir);
		free(cfg);
	}
	closedir(d);
	free(snaps);
	return best;
}

/* "Org/Name" -> "models--Org--Name", or NULL when model_id is not a repo id. */
static char *hub_repo_name(const char *model_id)
{
	const char *slash = strchr(model_id, '/');
	char *org, *name, *out;

	if (slash == NULL || strchr(slash + 1, '/') != NULL || slash == model_id)
		return NULL;
	org = xstrdup(model_id);
	org[slash - model_id] = '\0';
	name = org + (slash - model_id) + 1;
	out = name_is_safe(org) && name_is_safe(name) ? xasprintf("models--%s--%s", org, name) : NULL;
	free(org);
	return out;
}

/* Appends "; place" to the list of places looked at. */
static void looked(char **list, const char *place)
{
	char *joined = *list ? xasprintf("%s; %s", *list, place) : xstrdup(place);

	free(*list);
	*list = joined;
}

/* Each step returns 1 found (m filled), 0 not there (list extended), -1 a
 * config that exists but is bad (err set). */
static int try_local_dir(struct model_config *m, const char *model_id, char **list, char *err, size_t errsz)
{
	char *cfg = xasprintf("%s/config.json", model_id);
	int rc = 0;

	if (is_dir(model_id) && is_file(cfg))
		rc = load_config(m, cfg, model_id, model_id, err, errsz) < 0 ? -1 : 1;
	else
		looked(list, cfg);
	free(cfg);
	return rc;
}

static int try_hub_cache(struct model_config *m, const char *model_id, char **list, char *err, size_t errsz)
{
	char *cache = hub_cache_dir(), *repo = hub_repo_name(model_id), *repo_dir, *snap, *cfg;
	int rc;

	if (cache == NULL || repo == NULL) {
		if (cache == NULL)
			looked(list, "the HF cache (no HF_HUB_CACHE, HF_HOME or HOME)");
		free(cache);
		free(repo);
		return 0;
	}
	repo_dir = xasprintf("%s/%s", cache, repo);
	snap = pick_snapshot(repo_dir);
	if (snap == NULL) {
		char *place = xasprintf("%s/snapshots/*/config.json", repo_dir);

		looked(list, place);
		free(place);
		free(cache);
		free(repo);
		free(repo_dir);
		return 0;
	}
	cfg = xasprintf("%s/config.json", snap);
	rc = load_config(m, cfg, model_id, snap, err, errsz) < 0 ? -1 : 1;
	free(cfg);
	free(snap);
	free(cache);
	free(repo);
	free(repo_dir);
	return rc;
}

static int try_configs_dir(struct model_config *m, const char *model_id, const char *configs_dir, char **list,
                           char *err, size_t errsz)
{
	char *slug, *cfg;
	int rc = 0;

	if (configs_dir == NULL)
		return 0;
	slug = slugify(model_id, 1);
	if (*slug == '\0') {
		free(slug);
		return 0;
	}
	cfg = xasprintf("%s/%s.json", configs_dir, slug);
	if (is_file(cfg))
		rc = load_config(m, cfg, model_id, NULL, err, errsz) < 0 ? -1 : 1;
	else
		looked(list, cfg);
	free(cfg);
	free(slug);
	return rc;
}

int model_config_resolve(struct model_config *m, const char *model_id, const char *configs_dir, char *err, size_t errsz)
{
	char *list = NULL;
	int rc;

	memset(m, 0, sizeof *m);
	if (model_id == NULL || *model_id == '\0')
		return seterr(err, errsz, "empty model id"), -1;
	rc = try_local_dir(m, model_id, &list, err, errsz);
	if (rc == 0)
		rc = try_hub_cache(m, model_id, &list, err, errsz);
	if (rc == 0)
		rc = try_configs_dir(m, model_id, configs_dir, &list, err, errsz);
	if (rc == 0)
		seterr(err, errsz, "model \"%s\": no config.json found (looked in: %s)", model_id, list ? list : "nowhere");
	free(list);
	if (rc < 0 || rc == 0) {
		model_config_free(m);
		return -1;
	}
	return 0;
}

void model_config_free(struct model_config *m)
{
	free(m->model_id);
	free(m->config_path);
	free(m->checkpoint_dir);
	memset(m, 0, sizeof *m);
}

/* --- sizes --------------------------------------------------------------- */

void model_config_module_shape(const struct model_config *m, int module, int *out_features, int *in_features)
{
	int q = m->num_attention_heads * m->head_dim, kv = m->num_key_value_heads * m->head_dim;
	int c = m->hidden_size, f = m->intermediate_size;
	/* q_proj k_proj v_proj o_proj gate_proj up_proj down_proj */
	const int out[CELL_MAX_TARGETS] = { q, kv, kv, c, f, f, c };
	const int in[CELL_MAX_TARGETS] = { c, c, c, q, c, c, f };

	if (module < 0 || module >= CELL_MAX_TARGETS) {
		*out_features = *in_features = 0;
		return;
	}
	*out_features = out[module];
	*in_features = in[module];
}

long long model_config_linear_param_count(const struct model_config *m)
{
	long long per_layer = 0;

	for (int i = 0; i < CELL_MAX_TARGETS; i++) {
		int n, k;

		model_config_module_shape(m, i, &n, &k);
		per_layer += (long long)n * k;
	}
	return per_layer * m->num_hidden_layers;
}

long long model_config_param_count(const struct model_config *m)
{
	long long c = m->hidden_size, d = m->head_dim;
	long long q = m->num_attention_heads * d, kv = m->num_key_value_heads * d;
	long long embed = (long long)m->vocab_size * c;
	long long per_layer = 2 * c; /* input and post-attention RMSNorm */

	if (m->attention_bias) {
		per_layer += q + 2 * kv;
		/* Llama and Qwen3 put a bias on o_proj too; Qwen2 never does */
		if (strcmp(m->model_type, "qwen2") != 0)
			per_layer += c;
	}
	if (m->qk_norm)
		per_layer += 2 * d;
	return model_config_linear_param_count(m) + per_layer * m->num_hidden_layers + embed + c /* final norm */ +
	       (m->tie_word_embeddings ? 0 : embed);
}
