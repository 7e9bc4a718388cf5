/* tools/poros-export/lora_config.c: the adapter's adapter_config.json.
 * What it asks for is implemented exactly or refused by name (exit 2),
 * never ignored: a key poros-export does not know is refused unless it is
 * off. */
#include "export.h"

#include <math.h>
#include <string.h>

#include "util/util.h"

/* PEFT writes a feature that is off as null, false, {} or [] (or an object
 * of such values). */
static int is_off(const cJSON *v)
{
	const cJSON *c;

	if (v == NULL || cJSON_IsNull(v) || cJSON_IsFalse(v))
		return 1;
	if (cJSON_IsArray(v))
		return v->child == NULL;
	if (cJSON_IsObject(v)) {
		cJSON_ArrayForEach(c, v)
			if (!is_off(c))
				return 0;
		return 1;
	}
	return 0;
}

static int in_list(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s, list[i]) == 0)
			return 1;
	return 0;
}

/* LoraConfig fields whose merge poros-export does not implement: refused
 * by name when they are on. */
static const struct { const char *key, *what; } refused_features[] = {
	{ "use_dora", "DoRA (a learned magnitude per output)" },
	{ "fan_in_fan_out", "fan_in_fan_out (transposed Conv1D weights)" },
	{ "lora_bias", "a trained LoRA bias" },
	{ "use_qalora", "QALoRA" },
	{ "modules_to_save", "modules_to_save (fully trained copies of whole modules)" },
	{ "rank_pattern", "per-module ranks" },
	{ "alpha_pattern", "per-module alphas" },
	{ "exclude_modules", "exclude_modules" },
	{ "layer_replication", "layer_replication" },
	{ "target_parameters", "LoRA on bare parameters" },
	{ "trainable_token_indices", "trainable token embeddings" },
	{ "loftq_config", "LoftQ (a quantized, modified base)" },
	{ "corda_config", "CorDA" },
	{ "lora_ga_config", "LoRA-GA" },
	{ "megatron_config", "Megatron parallel layers" },
	{ "arrow_config", "arrow_config" },
	{ "kasa_config", "kasa_config" },
	{ "monteclora_config", "monteclora_config" },
	{ "velora_config", "velora_config" },
	{ "use_bdlora", "use_bdlora" },
	{ "alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)" },
};
/* Fields that do not change the merged weights. */
static const char *const informational[] = {
	"base_model_name_or_path", "revision", "inference_mode", "lora_dropout", "peft_version", "auto_mapping",
	"megatron_core", "qalora_group_size", "ensure_weight_tying", "eva_config", "runtime_config",
};
/* Fields read by parse_lora_config. */
static const char *const handled[] = {
	"peft_type", "r", "lora_alpha", "use_rslora", "target_modules", "layers_to_transform", "layers_pattern",
	"bias", "init_lora_weights", "task_type",
};
#define COUNT(a) (sizeof (a) / sizeof *(a))

static int check_features(struct job *j, const cJSON *cfg)
{
	const char *p = j->acfg_path;
	const cJSON *v;

	for (const cJSON *a = cfg->child; a != NULL; a = a->next)
		for (const cJSON *b = a->next; b != NULL; b = b->next)
			if (strcmp(a->string, b->string) == 0)
				return fail(j, EXIT_USAGE, "%s: key \"%s\" appears twice", p, a->string);
	cJSON_ArrayForEach(v, cfg) {
		size_t i;

		if (in_list(v->string, handled, COUNT(handled)) || in_list(v->string, informational, COUNT(informational)))
			continue;
		for (i = 0; i < COUNT(refused_features); i++)
			if (strcmp(v->string, refused_features[i].key) == 0)
				break;
		if (is_off(v))
			continue;
		if (i < COUNT(refused_features))
			return fail(j, EXIT_USAGE, "%s: \"%s\" is set: %s is not supported by poros-export", p, v->string,
			            refused_features[i].what);
		return fail(j, EXIT_USAGE, "%s: \"%s\" is set and is not a LoRA setting poros-export knows (refused rather "
		            "than ignored)", p, v->string);
	}
	return 0;
}

/* A JSON integer in [lo, hi]. */
static int json_int(const cJSON *v, long lo, long hi, long *out)
{
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
	    v->valuedouble < (double)lo || v->valuedouble > (double)hi)
		return -1;
	*out = (long)v->valuedouble;
	return 0;
}

static int parse_targets(struct job *j, const cJSON *cfg)
{
	const cJSON *tm = cJSON_GetObjectItemCaseSensitive(cfg, "target_modules"), *v;
	const char *p = j->acfg_path;

	j->mask = 0;
	if (cJSON_IsString(tm) && strcmp(tm->valuestring, "all-linear") == 0) {
		/* PEFT's all-linear: every linear layer but the output head */
		j->mask = (1u << N_MODULES) - 1;
		return 0;
	}
	if (cJSON_IsString(tm))
		return fail(j, EXIT_USAGE, "%s: target_modules \"%s\": a regular expression is not supported (give a list)", p,
		            tm->valuestring);
	if (!cJSON_IsArray(tm) || tm->child == NULL)
		return fail(j, EXIT_USAGE, "%s: \"target_modules\" is missing, empty or not a list", p);
	cJSON_ArrayForEach(v, tm) {
		int m = cJSON_IsString(v) ? lora_module_from_name(v->valuestring) : -1;

		if (!cJSON_IsString(v))
			return fail(j, EXIT_USAGE, "%s: target_modules holds a value that is not a string", p);
		if (m < 0)
			return fail(j, EXIT_USAGE, "%s: target module \"%s\" is not supported (poros-export merges q_proj, k_proj, "
			            "v_proj, o_proj, gate_proj, up_proj, down_proj)", p, v->valuestring);
		j->mask |= 1u << m;
	}
	return 0;
}

static int parse_layers(struct job *j, const cJSON *cfg)
{
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layers_to_transform");
	const cJSON *lp = cJSON_GetObjectItemCaseSensitive(cfg, "layers_pattern"), *v;
	const char *p = j->acfg_path;
	int L = j->mc.num_hidden_layers;
	long l;

	/* the pattern names the ModuleList the indices count in: for these
	 * decoders that is "layers" */
	if (!(lp == NULL || cJSON_IsNull(lp) || (cJSON_IsString(lp) && strcmp(lp->valuestring, "layers") == 0) ||
	      (cJSON_IsArray(lp) && cJSON_GetArraySize(lp) == 1 && cJSON_IsString(lp->child) &&
	       strcmp(lp->child->valuestring, "layers") == 0)))
		return fail(j, EXIT_USAGE, "%s: \"layers_pattern\" other than \"layers\" is not supported", p);
	if (lt == NULL || cJSON_IsNull(lt))
		return 0;
	j->layer_on = xcalloc((size_t)L, 1);
	if (cJSON_IsNumber(lt)) {
		if (json_int(lt, 0, L - 1, &l) < 0)
			return fail(j, EXIT_USAGE, "%s: \"layers_to_transform\" is not a layer of this %d-layer base", p, L);
		j->layer_on[l] = 1;
		return 0;
	}
	if (!cJSON_IsArray(lt))
		return fail(j, EXIT_USAGE, "%s: \"layers_to_transform\" is not a layer index or a list of them", p);
	cJSON_ArrayForEach(v, lt) {
		if (json_int(v, 0, L - 1, &l) < 0)
			return fail(j, EXIT_USAGE, "%s: \"layers_to_transform\" holds a value that is not a layer of this %d-layer "
			            "base", p, L);
		j->layer_on[l] = 1;
	}
	return 0;
}

int parse_lora_config(struct job *j)
{
	static const char *const plain_init[] = { "gaussian", "eva" };
	const char *p = j->acfg_path;
	char jerr[512];
	cJSON *cfg = json_read_file(p, jerr, sizeof jerr);
	const cJSON *v;
	long r = 8;
	int rc;

	if (cfg == NULL)
		return fail(j, EXIT_USAGE, "%s", jerr);
	rc = EXIT_USAGE;
	if (!cJSON_IsObject(cfg)) {
		fail(j, rc, "%s: not a JSON object", p);
		goto out;
	}
	if (check_features(j, cfg) != 0)
		goto out;
	v = cJSON_GetObjectItemCaseSensitive(cfg, "peft_type");
	if (v != NULL && !(cJSON_IsString(v) && strcmp(v->valuestring, "LORA") == 0)) {
		fail(j, rc, "%s: \"peft_type\" is not \"LORA\": only LoRA adapters can be merged", p);
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(cfg, "task_type");
	if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "CAUSAL_LM") == 0)) {
		fail(j, rc, "%s: \"task_type\" is not \"CAUSAL_LM\": only causal LM adapters can be merged", p);
		goto out;
	}
	/* LoraConfig's defaults: r 8, lora_alpha 8, use_rslora false, bias "none" */
	v = cJSON_GetObjectItemCaseSensitive(cfg, "r");
	if (v != NULL && json_int(v, 1, 65536, &r) < 0) {
		fail(j, rc, "%s: \"r\" is not an integer in [1, 65536]", p);
		goto out;
	}
	j->rank = (int)r;
	v = cJSON_GetObjectItemCaseSensitive(cfg, "lora_alpha");
	j->alpha = 8;
	if (v != NULL) {
		if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
			fail(j, rc, "%s: \"lora_alpha\" is not a finite number", p);
			goto out;
		}
		j->alpha = v->valuedouble;
	}
	v = cJSON_GetObjectItemCaseSensitive(cfg, "use_rslora");
	if (v != NULL && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
		fail(j, rc, "%s: \"use_rslora\" is not true or false", p);
		goto out;
	}
	j->rslora = cJSON_IsTrue(v);
	v = cJSON_GetObjectItemCaseSensitive(cfg, "bias");
	if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0)) {
		fail(j, rc, "%s: \"bias\" is not \"none\": trained biases are not supported", p);
		goto out;
	}
	/* PiSSA, OLoRA, CorDA, LoftQ ... move part of W into the adapter at
	 * init: such an adapter belongs to a modified base, not this one */
	v = cJSON_GetObjectItemCaseSensitive(cfg, "init_lora_weights");
	if (cJSON_IsString(v) && !in_list(v->valuestring, plain_init, COUNT(plain_init))) {
		fail(j, rc, "%s: init_lora_weights \"%s\": this adapter expects a base PEFT modified at init, not the "
		     "checkpoint itself (convert it to a plain LoRA with PEFT first)", p, v->valuestring);
		goto out;
	}
	if (v != NULL && !cJSON_IsNull(v) && !cJSON_IsBool(v) && !cJSON_IsString(v)) {
		fail(j, rc, "%s: \"init_lora_weights\" is not true, false or a method name", p);
		goto out;
	}
	if (parse_targets(j, cfg) != 0 || parse_layers(j, cfg) != 0)
		goto out;
	v = cJSON_GetObjectItemCaseSensitive(cfg, "base_model_name_or_path");
	if (cJSON_IsString(v))
		j->adapter_base = xstrdup(v->valuestring);
	j->scale = (float)(j->rslora ? j->alpha / sqrt((double)j->rank) : j->alpha / j->rank);
	rc = 0;
out:
	cJSON_Delete(cfg);
	return rc;
}
