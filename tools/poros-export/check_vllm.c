/* tools/poros-export/check_vllm.c: --check vllm: whether vLLM would load a
 * PEFT adapter directory as a LoRA, and every reason it would not. */
#include "export.h"

#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/util.h"

struct reasons { cJSON *list; const char *config; };

static void reason(struct reasons *r, const char *fmt, const char *a, const char *b)
{
	char *text = xasprintf(fmt, a, b);

	cJSON_AddItemToArray(r->list, cJSON_CreateString(text));
	free(text);
}

static int is_string(const cJSON *cfg, const char *key, const char *want)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);

	return cJSON_IsString(v) && (want == NULL || strcmp(v->valuestring, want) == 0);
}

/* The keys PEFT and vLLM read, each present with a value vLLM takes. */
static void check_config(struct reasons *r, const cJSON *cfg)
{
	const cJSON *rank = cJSON_GetObjectItemCaseSensitive(cfg, "r"), *tm, *v;
	char num[32];

	if (!is_string(cfg, "peft_type", "LORA"))
		reason(r, "%s: \"peft_type\" is not \"LORA\"%s", r->config, "");
	if (!is_string(cfg, "task_type", "CAUSAL_LM"))
		reason(r, "%s: \"task_type\" is not \"CAUSAL_LM\"%s", r->config, "");
	snprintf(num, sizeof num, "%g", cJSON_IsNumber(rank) ? rank->valuedouble : 0.0);
	if (!cJSON_IsNumber(rank))
		reason(r, "%s: no integer \"r\"%s", r->config, "");
	else if (rank->valuedouble != (int)rank->valuedouble || !vllm_rank_ok((int)rank->valuedouble))
		reason(r, "r = %s: vLLM serves ranks %s", num, vllm_rank_list());
	if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cfg, "lora_alpha")))
		reason(r, "%s: no number \"lora_alpha\"%s", r->config, "");
	tm = cJSON_GetObjectItemCaseSensitive(cfg, "target_modules");
	if (!(cJSON_IsArray(tm) && tm->child != NULL) && !is_string(cfg, "target_modules", NULL))
		reason(r, "%s: no \"target_modules\" (a list of module names)%s", r->config, "");
	if (!cJSON_IsArray(tm))
		tm = NULL;
	cJSON_ArrayForEach(v, tm)
		if (!cJSON_IsString(v) || lora_module_from_name(v->valuestring) < 0)
			reason(r, "target module \"%s\" is not a q/k/v/o/gate/up/down projection%s",
			       cJSON_IsString(v) ? v->valuestring : "?", "");
	if (!cJSON_HasObjectItem(cfg, "base_model_name_or_path"))
		reason(r, "%s: no \"base_model_name_or_path\"%s", r->config, "");
	v = cJSON_GetObjectItemCaseSensitive(cfg, "fan_in_fan_out");
	if (!cJSON_IsFalse(v))
		reason(r, "%s: \"fan_in_fan_out\" is %s (vLLM needs false)", r->config, v ? "not false" : "missing");
	if (!is_string(cfg, "bias", "none"))
		reason(r, "%s: \"bias\" is not \"none\"%s", r->config, " (vLLM loads no LoRA bias)");
	v = cJSON_GetObjectItemCaseSensitive(cfg, "modules_to_save");
	if (v == NULL || !cJSON_IsNull(v))
		reason(r, "%s: \"modules_to_save\" is %s", r->config, v ? "set (vLLM loads only lora_A / lora_B)" : "missing (PEFT writes null)");
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "use_dora")))
		reason(r, "%s: \"use_dora\" is true%s", r->config, " (vLLM has no DoRA)");
}

/* Only lora_A / lora_B of the projections, of rank r. */
static void check_weights(struct reasons *r, const struct st_file *f, const cJSON *cfg)
{
	const cJSON *rank = cJSON_GetObjectItemCaseSensitive(cfg, "r");

	for (int i = 0; i < f->n; i++) {
		const struct st_tensor *t = &f->t[i];
		int layer, module, is_b;

		if (adapter_key_parse(t->name, &layer, &module, &is_b) < 0)
			reason(r, "%s: tensor \"%s\" is not a lora_A / lora_B weight (vLLM refuses full module weights)",
			       f->path, t->name);
		else if (cJSON_IsNumber(rank) && (t->ndim != 2 || t->shape[is_b ? 1 : 0] != (long long)rank->valuedouble))
			reason(r, "%s: tensor \"%s\" does not have the config's rank", f->path, t->name);
	}
}

int check_vllm(const char *dir, FILE *out, char *err, size_t errsz)
{
	char *cpath = xasprintf("%s/adapter_config.json", dir), *wpath = xasprintf("%s/adapter_model.safetensors", dir);
	struct reasons r = { cJSON_CreateArray(), cpath };
	cJSON *cfg = NULL, *o;
	struct st_file f;
	int rc = EXIT_USAGE, n;

	if (!is_dir(dir))
		snprintf(err, errsz, "--check vllm %s: not a directory", dir);
	else if (!is_file(cpath))
		snprintf(err, errsz, "--check vllm %s: no adapter_config.json (not a PEFT adapter directory)", dir);
	else if ((cfg = json_read_file(cpath, err, errsz)) != NULL && cJSON_IsObject(cfg)) {
		check_config(&r, cfg);
		if (!is_file(wpath))
			reason(&r, "%s: missing (vLLM reads adapter_model.safetensors)%s", wpath, "");
		else if (st_open(&f, wpath, err, errsz) < 0)
			goto out;
		else {
			check_weights(&r, &f, cfg);
			st_close(&f);
		}
		n = cJSON_GetArraySize(r.list);
		for (int i = 0; i < n; i++)
			warnmsg("not vLLM-ready: %s", cJSON_GetArrayItem(r.list, i)->valuestring);
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "adapter", dir);
		cJSON_AddStringToObject(o, "check", "vllm");
		cJSON_AddBoolToObject(o, "ok", n == 0);
		cJSON_AddItemToObject(o, "reasons", r.list);
		r.list = NULL;
		if (jsonl_write(out, o) < 0)
			diesys(EXIT_RUNTIME, "writing output failed");
		cJSON_Delete(o);
		rc = n == 0 ? EXIT_OK : EXIT_RUNTIME;
	} else if (cfg != NULL)
		snprintf(err, errsz, "%s: not a JSON object", cpath);
out:
	cJSON_Delete(r.list);
	cJSON_Delete(cfg);
	free(cpath);
	free(wpath);
	return rc;
}
