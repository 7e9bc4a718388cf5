/* tools/lib/model/model_config.c: HF config.json -> struct model_config, and
 * where a model_id's config lives on this machine. */
#include "model_config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "arch.h"
#include "records/records.h"
#include "hf_cache.h"
#include "safetensors.h"
#include "util/util.h"

/* Upper bounds far above any released model, low enough that the products
 * in the parameter counts and buffer sizes stay well inside 64 bits. */
#define MAX_HIDDEN (1 << 17)
#define MAX_INTERMEDIATE (1 << 20)
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 1024
#define MAX_VOCAB (1 << 24)

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
			return set_error(err, errsz, "%s: \"%s\" is missing", name, key);
		*out = (int)def;
		return 0;
	}
	if (!cJSON_IsNumber(v))
		return set_error(err, errsz, "%s: \"%s\" is not a number", name, key);
	d = v->valuedouble;
	if (!isfinite(d) || d != floor(d))
		return set_error(err, errsz, "%s: \"%s\" is not an integer: %g", name, key, d);
	if (d < (double)min || d > (double)max)
		return set_error(err, errsz, "%s: \"%s\" is %.0f, outside [%ld, %ld]", name, key, d, min, max);
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
		return set_error(err, errsz, "%s: \"%s\" is not a finite number", name, key);
	if (!(v->valuedouble > min && v->valuedouble < max))
		return set_error(err, errsz, "%s: \"%s\" is %g, outside (%g, %g)", name, key, v->valuedouble, min, max);
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
		return set_error(err, errsz, "%s: \"%s\" is not true or false", name, key);
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
				return set_error(err, errsz, "%s: key \"%s\" appears twice", name, a->string);
	return 0;
}

static int parse_type(struct model_config *m, const struct arch **a, const cJSON *root, const char *name, char *err,
                      size_t errsz)
{
	const cJSON *v = field(root, "model_type"), *archs;

	if (v == NULL)
		return set_error(err, errsz, "%s: \"model_type\" is missing (expected one of: %s)", name, arch_type_list());
	if (!cJSON_IsString(v))
		return set_error(err, errsz, "%s: \"model_type\" is not a string", name);
	if ((*a = arch_find(v->valuestring)) == NULL)
		return set_error(err, errsz, "%s: model_type \"%.64s\" is not supported (expected one of: %s)", name,
		                 v->valuestring, arch_type_list());
	snprintf(m->model_type, sizeof m->model_type, "%s", (*a)->model_type);
	/* a classification or other head has no lm_head to train against */
	archs = field(root, "architectures");
	if (archs != NULL) {
		const cJSON *first = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;

		if (cJSON_GetArraySize(archs) != 1 || !cJSON_IsString(first))
			return set_error(err, errsz, "%s: \"architectures\" is not a list of one name", name);
		if (strcmp(first->valuestring, (*a)->architecture) != 0)
			return set_error(err, errsz, "%s: \"architectures\" [\"%.64s\"] is not supported for model_type %s "
			                 "(expected [\"%s\"])", name, first->valuestring, (*a)->model_type, (*a)->architecture);
	}
	return 0;
}

/* --- RoPE -------------------------------------------------------------------
 * transformers 4 writes "rope_theta" and "rope_scaling" (type under
 * "rope_type", or "type" before 4.42); transformers 5 writes one
 * "rope_parameters" object holding rope_type, rope_theta and the scaling
 * fields.  Both are read; where both say something they must agree. */

struct rope_src {
	int present;
	int have_theta, have_type, have_factor, have_low, have_high, have_orig;
	double theta, factor, low, high;
	int orig;
	char type[32];
	char theta_key[48], type_key[48];   /* where each came from, for messages */
};

static int rope_number(const cJSON *obj, const cJSON *v, const char *label, double max, double *out, int *have,
                       const char *name, char *err, size_t errsz)
{
	if (get_double(obj, v->string, 0, max, 0, out, name, err, errsz) < 0) {
		/* get_double names the bare key; say which object it is in */
		char inner[400];

		snprintf(inner, sizeof inner, "%s", err);
		return set_error(err, errsz, "%s: in \"%s\": %s", name, label, inner + strlen(name) + 2);
	}
	*have = 1;
	return 0;
}

/* One rope_scaling / rope_parameters object into s; every key is known
 * or refused by name. */
static int read_rope_object(struct rope_src *s, const cJSON *obj, const char *label, const char *name, char *err,
                            size_t errsz)
{
	const cJSON *v;

	if (!cJSON_IsObject(obj))
		return set_error(err, errsz, "%s: \"%s\" is not an object", name, label);
	if (check_unique_keys(obj, name, err, errsz) < 0)
		return -1;
	s->present = 1;
	cJSON_ArrayForEach(v, obj) {
		const char *k = v->string;

		if (cJSON_IsNull(v))
			continue;
		if (cJSON_IsObject(v))
			return set_error(err, errsz, "%s: \"%s\" holds per-layer-type RoPE settings (\"%.40s\"): not supported",
			                 name, label, k);
		if (strcmp(k, "rope_type") == 0 || strcmp(k, "type") == 0) {
			if (!cJSON_IsString(v))
				return set_error(err, errsz, "%s: \"%s.%s\" is not a string", name, label, k);
			if (s->have_type && strcmp(s->type, v->valuestring) != 0)
				return set_error(err, errsz, "%s: \"%s\" \"%s\" and \"%s.%s\" \"%.31s\" disagree", name, s->type_key,
				                 s->type, label, k, v->valuestring);
			snprintf(s->type, sizeof s->type, "%.31s", v->valuestring);
			snprintf(s->type_key, sizeof s->type_key, "%.30s.%.12s", label, k);
			s->have_type = 1;
		} else if (strcmp(k, "rope_theta") == 0) {
			if (rope_number(obj, v, label, 1e12, &s->theta, &s->have_theta, name, err, errsz) < 0)
				return -1;
			snprintf(s->theta_key, sizeof s->theta_key, "%.30s.rope_theta", label);
		} else if (strcmp(k, "factor") == 0) {
			if (rope_number(obj, v, label, 1e6, &s->factor, &s->have_factor, name, err, errsz) < 0)
				return -1;
		} else if (strcmp(k, "low_freq_factor") == 0) {
			if (rope_number(obj, v, label, 1e6, &s->low, &s->have_low, name, err, errsz) < 0)
				return -1;
		} else if (strcmp(k, "high_freq_factor") == 0) {
			if (rope_number(obj, v, label, 1e6, &s->high, &s->have_high, name, err, errsz) < 0)
				return -1;
		} else if (strcmp(k, "original_max_position_embeddings") == 0) {
			if (get_int(obj, k, 1, 1L << 30, 0, &s->orig, name, err, errsz) < 0)
				return -1;
			s->have_orig = 1;
		} else if (strcmp(k, "partial_rotary_factor") == 0 && cJSON_IsNumber(v) && v->valuedouble == 1.0) {
			continue; /* the whole head rotates: what poros-train does */
		} else {
			return set_error(err, errsz, "%s: \"%s.%.40s\" is not supported (poros-train reads rope_type, rope_theta, "
			                 "factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)",
			                 name, label, k);
		}
	}
	return 0;
}

/* The scaling fields a rope type uses: exactly these, all required (as
 * transformers' rope validation requires them). */
static int check_rope_fields(const struct rope_src *s, const char *label, const char *name, char *err, size_t errsz)
{
	const char *type = s->have_type ? s->type : "default";
	int linear = strcmp(type, "linear") == 0, llama3 = strcmp(type, "llama3") == 0;
	const struct { int have, used; const char *key; } f[] = {
		{ s->have_factor, linear || llama3, "factor" },
		{ s->have_low, llama3, "low_freq_factor" },
		{ s->have_high, llama3, "high_freq_factor" },
		{ s->have_orig, llama3, "original_max_position_embeddings" },
	};

	if (!linear && !llama3 && strcmp(type, "default") != 0)
		return set_error(err, errsz, "%s: \"%s\" \"%.31s\" is not supported (poros-train implements default, linear, "
		                 "llama3)", name, s->type_key, type);
	for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
		if (f[i].used && !f[i].have)
			return set_error(err, errsz, "%s: \"%s.%s\" is missing (rope_type %s needs it)", name, label, f[i].key,
			                 type);
		if (!f[i].used && f[i].have)
			return set_error(err, errsz, "%s: \"%s.%s\" is not used by rope_type %s: refused rather than ignored",
			                 name, label, f[i].key, type);
	}
	return 0;
}

static int rope_agree(int have_a, double a, int have_b, double b, const char *key, const char *name, char *err,
                      size_t errsz)
{
	if (have_a && have_b && a != b)
		return set_error(err, errsz, "%s: \"rope_scaling.%s\" %g and \"rope_parameters.%s\" %g disagree", name, key, a,
		                 key, b);
	return 0;
}

static int parse_rope(struct model_config *m, const cJSON *root, const char *name, char *err, size_t errsz)
{
	struct rope_src old, new;
	const struct rope_src *use;
	const cJSON *theta = field(root, "rope_theta"), *scaling = field(root, "rope_scaling");
	const cJSON *params = field(root, "rope_parameters"), *prf = field(root, "partial_rotary_factor");

	memset(&old, 0, sizeof old);
	memset(&new, 0, sizeof new);
	if (prf != NULL && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0))
		return set_error(err, errsz, "%s: \"partial_rotary_factor\" other than 1 is not supported (RoPE rotates the "
		                 "whole head)", name);
	if (theta != NULL) {
		if (get_double(root, "rope_theta", 0, 1e12, 0, &old.theta, name, err, errsz) < 0)
			return -1;
		old.present = old.have_theta = 1;
		snprintf(old.theta_key, sizeof old.theta_key, "rope_theta");
	}
	if (scaling != NULL && read_rope_object(&old, scaling, "rope_scaling", name, err, errsz) < 0)
		return -1;
	if (params != NULL && read_rope_object(&new, params, "rope_parameters", name, err, errsz) < 0)
		return -1;
	if (old.present && !old.have_type) {
		/* no rope_scaling (or one without a type): plain RoPE */
		if (scaling != NULL)
			return set_error(err, errsz, "%s: \"rope_scaling.rope_type\" is missing or not a string", name);
		snprintf(old.type, sizeof old.type, "default");
		snprintf(old.type_key, sizeof old.type_key, "rope_scaling");
		old.have_type = 1;
	}
	if (new.present && !new.have_type)
		return set_error(err, errsz, "%s: \"rope_parameters.rope_type\" is missing", name);
	if ((old.present && check_rope_fields(&old, "rope_scaling", name, err, errsz) < 0) ||
	    (new.present && check_rope_fields(&new, "rope_parameters", name, err, errsz) < 0))
		return -1;
	if (old.present && new.present) {
		if (strcmp(old.type, new.type) != 0)
			return set_error(err, errsz, "%s: \"%s\" says rope_type %s but \"rope_parameters.rope_type\" says %s",
			                 name, old.type_key, old.type, new.type);
		if (old.have_theta && new.have_theta && old.theta != new.theta)
			return set_error(err, errsz, "%s: \"%s\" %g and \"rope_parameters.rope_theta\" %g disagree", name,
			                 old.theta_key, old.theta, new.theta);
		if (rope_agree(old.have_factor, old.factor, new.have_factor, new.factor, "factor", name, err, errsz) < 0 ||
		    rope_agree(old.have_low, old.low, new.have_low, new.low, "low_freq_factor", name, err, errsz) < 0 ||
		    rope_agree(old.have_high, old.high, new.have_high, new.high, "high_freq_factor", name, err, errsz) < 0 ||
		    rope_agree(old.have_orig, old.orig, new.have_orig, new.orig, "original_max_position_embeddings", name, err,
		               errsz) < 0)
			return -1;
	}
	use = new.present ? &new : &old;
	if (!(old.have_theta || new.have_theta))
		return set_error(err, errsz, "%s: \"rope_theta\" is missing (neither \"rope_theta\" nor "
		                 "\"rope_parameters.rope_theta\"): poros-train does not guess it", name);
	m->rope_theta = new.have_theta ? new.theta : old.theta;
	m->rope_scaling_type[0] = '\0';
	if (strcmp(use->type, "default") != 0)
		snprintf(m->rope_scaling_type, sizeof m->rope_scaling_type, "%s", use->type);
	m->rope_scaling_factor = use->have_factor ? use->factor : 1.0;
	m->rope_low_freq_factor = use->have_low ? use->low : 1.0;
	m->rope_high_freq_factor = use->have_high ? use->high : 1.0;
	m->rope_original_max_position = use->have_orig ? use->orig : 0;
	return 0;
}

/* --- keys that change the math ------------------------------------------- */

/* dtype (transformers 5) and torch_dtype (4): the checkpoint's own
 * precision; the tensors' dtypes are what is read, so this only has to be
 * one poros-train converts from. */
static int parse_dtype(const cJSON *root, const char *name, char *err, size_t errsz)
{
	static const char *const keys[2] = { "torch_dtype", "dtype" };
	const char *seen = NULL;

	for (int i = 0; i < 2; i++) {
		const cJSON *v = field(root, keys[i]);

		if (v == NULL)
			continue;
		if (!cJSON_IsString(v))
			return set_error(err, errsz, "%s: \"%s\" is not a string", name, keys[i]);
		if (strcmp(v->valuestring, "bfloat16") && strcmp(v->valuestring, "float16") &&
		    strcmp(v->valuestring, "float32"))
			return set_error(err, errsz, "%s: \"%s\" \"%.32s\" is not supported (expected bfloat16, float16 or float32)",
			                 name, keys[i], v->valuestring);
		if (seen != NULL && strcmp(seen, v->valuestring) != 0)
			return set_error(err, errsz, "%s: \"torch_dtype\" \"%s\" and \"dtype\" \"%s\" disagree", name, seen,
			                 v->valuestring);
		seen = v->valuestring;
	}
	return 0;
}

/* Sliding-window attention (Qwen2/Qwen3): off is accepted whatever
 * sliding_window and max_window_layers say (transformers then ignores
 * them); on is refused. */
static int parse_sliding(const struct arch *a, const struct model_config *m, const cJSON *root, const char *name,
                         char *err, size_t errsz)
{
	const cJSON *types = field(root, "layer_types"), *v;
	int on;

	if (!a->reads_sliding_window)
		return 0;
	if (get_bool(root, "use_sliding_window", 0, &on, name, err, errsz) < 0)
		return -1;
	if (on)
		return set_error(err, errsz, "%s: \"use_sliding_window\": true is not supported (full causal attention only)",
		                 name);
	if (types == NULL)
		return 0;
	if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != m->num_hidden_layers)
		return set_error(err, errsz, "%s: \"layer_types\" is not a list of %d names", name, m->num_hidden_layers);
	cJSON_ArrayForEach(v, types)
		if (!cJSON_IsString(v) ||
		    (strcmp(v->valuestring, "full_attention") && strcmp(v->valuestring, "sliding_attention")))
			return set_error(err, errsz, "%s: \"layer_types\" entry %s%.32s%s is not supported (expected "
			                 "full_attention; sliding_attention is full while use_sliding_window is false)", name,
			                 cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "(not a string)",
			                 cJSON_IsString(v) ? "\"" : "");
	return 0;
}

/* Keys of other architectures' configs or of training that poros-train
 * would otherwise silently not do. */
static int parse_refused(const struct arch *a, const cJSON *root, const char *name, char *err, size_t errsz)
{
	const cJSON *v;
	int flag;

	if ((v = field(root, "hidden_act")) != NULL && !(cJSON_IsString(v) && strcmp(v->valuestring, a->hidden_act) == 0))
		return set_error(err, errsz, "%s: \"hidden_act\" must be \"%s\" (the SwiGLU MLP of %s)", name, a->hidden_act,
		                 a->model_type);
	if (field(root, "quantization_config") != NULL)
		return set_error(err, errsz, "%s: \"quantization_config\": pre-quantized checkpoints are not supported (give "
		                 "the bf16, fp16 or fp32 checkpoint; poros-train quantizes it to NF4 itself)", name);
	if ((v = field(root, "attention_dropout")) != NULL && !(cJSON_IsNumber(v) && v->valuedouble == 0))
		return set_error(err, errsz, "%s: \"attention_dropout\" other than 0 is not supported", name);
	if (a->reads_mlp_bias) {
		if (get_bool(root, "mlp_bias", 0, &flag, name, err, errsz) < 0)
			return -1;
		if (flag)
			return set_error(err, errsz, "%s: \"mlp_bias\": true is not supported", name);
	}
	if (a->reads_pretraining_tp && (v = field(root, "pretraining_tp")) != NULL &&
	    !(cJSON_IsNumber(v) && v->valuedouble == 1))
		return set_error(err, errsz, "%s: \"pretraining_tp\" other than 1 is not supported", name);
	return 0;
}

int model_config_parse(struct model_config *m, const char *json, const char *name, char *err, size_t errsz)
{
	const struct arch *a = NULL;
	cJSON *root;
	int rc = -1, head_dim_default, flag;

	memset(m, 0, sizeof *m);
	root = cJSON_Parse(json);
	if (root == NULL)
		return set_error(err, errsz, "%s: not valid JSON", name);
	if (!cJSON_IsObject(root)) {
		set_error(err, errsz, "%s: not a JSON object", name);
		goto out;
	}
	if (check_unique_keys(root, name, err, errsz) < 0 || parse_type(m, &a, root, name, err, errsz) < 0 ||
	    parse_refused(a, root, name, err, errsz) < 0 || parse_dtype(root, name, err, errsz) < 0)
		goto out;
	if (get_int(root, "hidden_size", 1, MAX_HIDDEN, -1, &m->hidden_size, name, err, errsz) < 0 ||
	    get_int(root, "intermediate_size", 1, MAX_INTERMEDIATE, -1, &m->intermediate_size, name, err, errsz) < 0 ||
	    get_int(root, "num_hidden_layers", 1, MAX_LAYERS, -1, &m->num_hidden_layers, name, err, errsz) < 0 ||
	    get_int(root, "num_attention_heads", 1, MAX_HEADS, -1, &m->num_attention_heads, name, err, errsz) < 0 ||
	    get_int(root, "num_key_value_heads", 1, MAX_HEADS, m->num_attention_heads, &m->num_key_value_heads, name, err, errsz) < 0 ||
	    get_int(root, "vocab_size", 1, MAX_VOCAB, -1, &m->vocab_size, name, err, errsz) < 0 ||
	    get_int(root, "max_position_embeddings", 0, 1L << 30, 0, &m->max_position_embeddings, name, err, errsz) < 0)
		goto out;
	head_dim_default = a->head_dim_default;
	if (head_dim_default == 0 && field(root, "head_dim") == NULL) {
		if (m->hidden_size % m->num_attention_heads != 0) {
			set_error(err, errsz, "%s: \"hidden_size\" %d is not a multiple of \"num_attention_heads\" %d (and no "
			          "\"head_dim\")", name, m->hidden_size, m->num_attention_heads);
			goto out;
		}
	}
	if (head_dim_default == 0)
		head_dim_default = m->hidden_size / m->num_attention_heads;
	if (get_int(root, "head_dim", 2, MAX_HEAD_DIM, head_dim_default, &m->head_dim, name, err, errsz) < 0)
		goto out;
	if (m->head_dim % 2 != 0 || m->head_dim < 2) {
		set_error(err, errsz, "%s: \"head_dim\" %d is not even (RoPE rotates pairs)", name, m->head_dim);
		goto out;
	}
	if (m->num_attention_heads % m->num_key_value_heads != 0) {
		set_error(err, errsz, "%s: \"num_attention_heads\" %d is not a multiple of \"num_key_value_heads\" %d", name,
		          m->num_attention_heads, m->num_key_value_heads);
		goto out;
	}
	if (parse_rope(m, root, name, err, errsz) < 0 || parse_sliding(a, m, root, name, err, errsz) < 0 ||
	    get_double(root, "rms_norm_eps", 0, 1, 1e-6, &m->rms_norm_eps, name, err, errsz) < 0 ||
	    get_bool(root, "tie_word_embeddings", a->tie_default, &m->tie_word_embeddings, name, err, errsz) < 0 ||
	    get_bool(root, "attention_bias", a->qkv_bias > 0, &m->attention_bias, name, err, errsz) < 0 ||
	    get_bool(root, "use_qk_norm", a->qk_norm, &flag, name, err, errsz) < 0 ||
	    get_token_id(root, "bos_token_id", &m->bos_token_id, name, err, errsz) < 0 ||
	    get_token_id(root, "eos_token_id", &m->eos_token_id, name, err, errsz) < 0)
		goto out;
	/* transformers' Qwen2 builds the q/k/v biases whatever attention_bias says */
	if (a->qkv_bias > 0 && !m->attention_bias) {
		set_error(err, errsz, "%s: \"attention_bias\": false is not supported for %s (its q/k/v projections always "
		          "have biases)", name, a->model_type);
		goto out;
	}
	/* q/k norms belong to the architecture (Qwen3) or not at all: no
	 * transformers class of these types reads use_qk_norm */
	if (flag && !a->qk_norm) {
		set_error(err, errsz, "%s: \"use_qk_norm\": true is not supported for %s (transformers' %s has no q/k norm)",
		          name, a->model_type, a->architecture);
		goto out;
	}
	m->qk_norm = a->qk_norm;
	rc = 0;
out:
	cJSON_Delete(root);
	return rc;
}

/* --- resolution ---------------------------------------------------------- */

/* Reads and parses path into m; on success sets config_path, model_id and
 * checkpoint_dir = weights_dir (NULL for a shipped shape). */
static int load_config(struct model_config *m, const char *path, const char *model_id, const char *weights_dir,
                       char *err, size_t errsz)
{
	char *text = read_whole_file(path, NULL);

	if (text == NULL)
		return set_error(err, errsz, "%s: %s", path, strerror(errno));
	if (model_config_parse(m, text, path, err, errsz) < 0) {
		free(text);
		return -1;
	}
	free(text);
	m->model_id = xstrdup(model_id);
	m->config_path = xstrdup(path);
	m->checkpoint_dir = weights_dir != NULL ? xstrdup(weights_dir) : NULL;
	return 0;
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

	struct stat st;

	/* a config.json that is there but a dangling link, a FIFO or unreadable
	 * is an error naming it (and never blocks), not "not found" */
	if (is_dir(model_id) && lstat(cfg, &st) == 0)
		rc = st_check_regular(cfg, err, errsz) < 0 || load_config(m, cfg, model_id, model_id, err, errsz) < 0 ? -1 : 1;
	else
		looked(list, cfg);
	free(cfg);
	return rc;
}

static int try_hub_cache(struct model_config *m, const char *model_id, char **list, char *err, size_t errsz)
{
	char *cache = hf_hub_cache_dir(), *repo_dir, *snap, *cfg;
	int rc;

	if (cache == NULL) {
		looked(list, "the HF cache (no HF_HUB_CACHE, HF_HOME or HOME)");
		return 0;
	}
	repo_dir = hf_cache_repo_dir(cache, "model", model_id);
	free(cache);
	if (repo_dir == NULL)
		return 0;
	snap = hf_cache_pick_snapshot(repo_dir, "config.json");
	if (snap == NULL) {
		char *place = xasprintf("%s/snapshots/*/config.json", repo_dir);

		looked(list, place);
		free(place);
		free(repo_dir);
		return 0;
	}
	cfg = xasprintf("%s/config.json", snap);
	rc = st_check_regular(cfg, err, errsz) < 0 || load_config(m, cfg, model_id, snap, err, errsz) < 0 ? -1 : 1;
	free(cfg);
	free(snap);
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
		return set_error(err, errsz, "empty model id");
	rc = try_local_dir(m, model_id, &list, err, errsz);
	if (rc == 0)
		rc = try_hub_cache(m, model_id, &list, err, errsz);
	if (rc == 0)
		rc = try_configs_dir(m, model_id, configs_dir, &list, err, errsz);
	if (rc == 0)
		set_error(err, errsz, "model \"%s\": no config.json found (looked in: %s)", model_id, list ? list : "nowhere");
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
	free(m->tokenizer_path);
	memset(m, 0, sizeof *m);
}

/* --- sizes --------------------------------------------------------------- */

int model_config_o_bias(const struct model_config *m)
{
	const struct arch *a = arch_find(m->model_type);

	return m->attention_bias && a != NULL && a->o_bias_follows_qkv;
}

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
		if (model_config_o_bias(m))
			per_layer += c;
	}
	if (m->qk_norm)
		per_layer += 2 * d;
	return model_config_linear_param_count(m) + per_layer * m->num_hidden_layers + embed + c /* final norm */ +
	       (m->tie_word_embeddings ? 0 : embed);
}
