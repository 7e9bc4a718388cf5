/* tests/unit/test_model_config.c: config.json parsing against published
 * configs (Qwen2.5-7B, Llama-3.1-8B, Qwen3-8B) and their published
 * parameter counts, defaults, rejections, and the resolve order over a fake
 * HF cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "records/records.h"
#include "util/util.h"
#include "test_common.h"

static const char *fixtures = "tests/fixtures/formats";
static char tmpdir[] = "/tmp/poros-test-mc-XXXXXX";

static int parse_fixture(struct model_config *m, const char *file)
{
	char *path = xasprintf("%s/%s", fixtures, file), err[512];
	char *text = read_whole_file(path, NULL);
	int rc;

	if (text == NULL) {
		CHECKF(0, "cannot read %s (run from the repository root)", path);
		free(path);
		return -1;
	}
	rc = model_config_parse(m, text, path, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", file, err);
	free(text);
	free(path);
	return rc;
}

static void test_qwen25_7b(void)
{
	struct model_config m;
	int n, k;

	if (parse_fixture(&m, "qwen2.5-7b.config.json") < 0)
		return;
	CHECKF(strcmp(m.model_type, "qwen2") == 0, "model_type %s", m.model_type);
	CHECKF(m.hidden_size == 3584 && m.intermediate_size == 18944 && m.num_hidden_layers == 28, "sizes");
	CHECKF(m.num_attention_heads == 28 && m.num_key_value_heads == 4, "heads %d/%d", m.num_attention_heads, m.num_key_value_heads);
	CHECKF(m.head_dim == 128, "head_dim %d (3584/28)", m.head_dim);
	CHECKF(m.vocab_size == 152064, "vocab %d", m.vocab_size);
	CHECKF(m.rope_theta == 1000000.0 && m.rms_norm_eps == 1e-6, "rope %g eps %g", m.rope_theta, m.rms_norm_eps);
	CHECKF(m.tie_word_embeddings == 0, "untied");
	CHECKF(m.attention_bias == 1, "qwen2 has q/k/v bias although config.json omits it");
	CHECKF(m.qk_norm == 0, "no qk norm");
	CHECKF(m.bos_token_id == 151643 && m.eos_token_id == 151643, "bos/eos %d/%d", m.bos_token_id, m.eos_token_id);
	CHECKF(m.max_position_embeddings == 131072 && m.rope_scaling_type[0] == '\0', "positions / rope_scaling");
	CHECKF(m.model_id == NULL && m.config_path == NULL && m.checkpoint_dir == NULL, "parse alone resolves nothing");
	/* 7.61B parameters, 6.53B outside the embeddings (Qwen2.5 model card):
	 * 28 x (2*3584^2 + 2*3584*512 + 3*3584*18944) linear weights,
	 * 28 x (3584+2*512 bias + 2*3584 norm), 2 x 152064*3584 untied, 3584 */
	CHECKF(model_config_linear_param_count(&m) == 6525288448LL, "linear %lld", model_config_linear_param_count(&m));
	CHECKF(model_config_param_count(&m) == 7615616512LL, "params %lld", model_config_param_count(&m));
	model_config_module_shape(&m, 1, &n, &k);
	CHECKF(n == 512 && k == 3584, "k_proj (%d, %d)", n, k);
	model_config_module_shape(&m, 3, &n, &k);
	CHECKF(n == 3584 && k == 3584, "o_proj (%d, %d)", n, k);
	model_config_module_shape(&m, 6, &n, &k);
	CHECKF(n == 3584 && k == 18944, "down_proj (%d, %d)", n, k);
	model_config_free(&m);
}

static void test_llama31_8b(void)
{
	struct model_config m;

	if (parse_fixture(&m, "llama-3.1-8b.config.json") < 0)
		return;
	CHECKF(strcmp(m.model_type, "llama") == 0 && m.attention_bias == 0 && m.qk_norm == 0, "llama flags");
	CHECKF(m.head_dim == 128 && m.num_key_value_heads == 8 && m.rms_norm_eps == 1e-5 && m.rope_theta == 500000.0, "llama sizes");
	CHECKF(m.eos_token_id == 128001, "eos list -> first id, got %d", m.eos_token_id);
	CHECKF(strcmp(m.rope_scaling_type, "llama3") == 0 && m.rope_scaling_factor == 8.0 && m.rope_low_freq_factor == 1.0 &&
	           m.rope_high_freq_factor == 4.0 && m.rope_original_max_position == 8192,
	       "rope_scaling recorded");
	/* 8,030,261,248: Llama 3 8B's published count */
	CHECKF(model_config_param_count(&m) == 8030261248LL, "params %lld", model_config_param_count(&m));
	model_config_free(&m);
}

static void test_qwen3_8b(void)
{
	struct model_config m;

	if (parse_fixture(&m, "qwen3-8b.config.json") < 0)
		return;
	CHECKF(strcmp(m.model_type, "qwen3") == 0 && m.qk_norm == 1 && m.attention_bias == 0, "qwen3 flags");
	CHECKF(m.head_dim == 128 && m.num_hidden_layers == 36 && m.rope_theta == 1e6, "qwen3 sizes");
	/* 8.2B, 6.95B non-embedding (model card); q/k norms 2*128 per layer */
	CHECKF(model_config_param_count(&m) == 8190735360LL, "params %lld", model_config_param_count(&m));
	CHECKF(model_config_linear_param_count(&m) == 6945767424LL, "linear %lld", model_config_linear_param_count(&m));
	model_config_free(&m);
}

/* A minimal config of model_type with the keys of overrides (a JSON
 * object) replaced or added; the returned text lives until the next call. */
static const char *minimal(const char *type, const char *overrides)
{
	static char *text;
	cJSON *o = cJSON_CreateObject(), *ov = cJSON_Parse(overrides), *e;

	cJSON_AddStringToObject(o, "model_type", type);
	cJSON_AddNumberToObject(o, "hidden_size", 64);
	cJSON_AddNumberToObject(o, "intermediate_size", 128);
	cJSON_AddNumberToObject(o, "num_hidden_layers", 2);
	cJSON_AddNumberToObject(o, "num_attention_heads", 4);
	cJSON_AddNumberToObject(o, "vocab_size", 100);
	cJSON_AddNumberToObject(o, "rope_theta", 10000);
	if (ov == NULL) {
		fprintf(stderr, "test bug: bad overrides %s\n", overrides);
		exit(1);
	}
	for (e = ov->child; e != NULL; e = e->next) {
		cJSON_DeleteItemFromObjectCaseSensitive(o, e->string);
		cJSON_AddItemToObject(o, e->string, cJSON_Duplicate(e, 1));
	}
	free(text);
	text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	cJSON_Delete(ov);
	return text;
}

static void test_defaults(void)
{
	struct model_config m;
	char err[512];

	CHECKF(model_config_parse(&m, minimal("llama", "{}"), "min.json", err, sizeof err) == 0, "minimal llama: %s", err);
	CHECKF(m.num_key_value_heads == 4 && m.head_dim == 16, "kv heads default to heads (%d), head_dim to 64/4 (%d)",
	       m.num_key_value_heads, m.head_dim);
	CHECKF(m.rope_theta == 10000.0 && m.rms_norm_eps == 1e-6, "rope/eps defaults");
	CHECKF(m.tie_word_embeddings == 0 && m.attention_bias == 0 && m.qk_norm == 0, "flag defaults");
	CHECKF(m.bos_token_id == -1 && m.eos_token_id == -1, "absent token ids are -1");
	CHECKF(m.max_position_embeddings == 0 && m.rope_scaling_factor == 1.0, "no positions, no scaling");
	/* 2 x (3*64*64... q,o 64x64, k,v 64x64 (kv heads = heads), mlp 3*64*128) */
	CHECKF(model_config_linear_param_count(&m) == 2LL * (4 * 64 * 64 + 3 * 64 * 128), "tiny linear count");
	CHECKF(model_config_param_count(&m) == 2LL * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 2 * 100 * 64 + 64, "tiny count");
	model_config_free(&m);

	CHECKF(model_config_parse(&m, minimal("llama", "{\"tie_word_embeddings\": true, \"attention_bias\": true, "
	                                               "\"head_dim\": null, \"num_key_value_heads\": 2}"),
	                          "tied.json", err, sizeof err) == 0, "tied llama: %s", err);
	/* tied: one embedding; llama's attention_bias covers q, k, v and o */
	CHECKF(model_config_param_count(&m) ==
	           2LL * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64 + (64 + 2 * 32 + 64)) + 100 * 64 + 64,
	       "tied llama with bias: %lld", model_config_param_count(&m));
	model_config_free(&m);

	CHECKF(model_config_parse(&m, minimal("qwen2", "{}"), "q2.json", err, sizeof err) == 0 && m.attention_bias == 1,
	       "qwen2 bias default");
	model_config_free(&m);
	CHECKF(model_config_parse(&m, minimal("qwen3", "{\"use_qk_norm\": false, \"head_dim\": 32}"), "q3.json", err, sizeof err) == 0 &&
	           m.qk_norm == 1 && m.head_dim == 32,
	       "qwen3 always has qk norm; explicit head_dim kept");
	model_config_free(&m);
	/* Qwen3Config's head_dim default is 128, not hidden/heads */
	CHECKF(model_config_parse(&m, minimal("qwen3", "{}"), "q3.json", err, sizeof err) == 0 && m.head_dim == 128,
	       "qwen3 head_dim default: %d", m.head_dim);
	model_config_free(&m);
	CHECKF(model_config_parse(&m, minimal("qwen2", "{}"), "q2.json", err, sizeof err) == 0 && m.head_dim == 16,
	       "qwen2 head_dim default hidden/heads: %d", m.head_dim);
	model_config_free(&m);
	/* keys transformers ignores for a family are ignored here too */
	CHECKF(model_config_parse(&m, minimal("qwen2", "{\"mlp_bias\": true, \"pretraining_tp\": 2}"), "q2.json", err,
	                          sizeof err) == 0,
	       "qwen2 ignores llama-only keys: %s", err);
	model_config_free(&m);
	CHECKF(model_config_parse(&m, minimal("llama", "{\"use_sliding_window\": true, \"sliding_window\": 4}"), "l.json",
	                          err, sizeof err) == 0,
	       "llama ignores qwen's sliding window keys: %s", err);
	model_config_free(&m);
	/* Qwen2.5 ships use_sliding_window false with a sliding_window and max_window_layers */
	CHECKF(model_config_parse(&m, minimal("qwen2", "{\"use_sliding_window\": false, \"sliding_window\": 131072, "
	                                               "\"max_window_layers\": 28, \"layer_types\": [\"full_attention\", "
	                                               "\"full_attention\"]}"), "q2.json", err, sizeof err) == 0,
	       "qwen2 sliding window off: %s", err);
	model_config_free(&m);
}

/* Counts transformers 5.17 reports (sum of parameters().numel(), and of
 * every nn.Linear weight but lm_head) for tiny configs of each family. */
static void test_counts_match_transformers(void)
{
	static const struct {
		const char *type, *overrides;
		long long params, linear;
	} cases[] = {
		{ "llama", "{\"attention_bias\": true}", 78528, 61440 },
		{ "llama", "{\"tie_word_embeddings\": true}", 69952, 61440 },
		{ "qwen2", "{}", 78400, 61440 },
		{ "qwen3", "{\"head_dim\": 32}", 102848, 86016 },
		{ "qwen3", "{\"head_dim\": 32, \"attention_bias\": true}", 103488, 86016 },
	};
	struct model_config m;
	char err[512];

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const char *json = minimal(cases[i].type, cases[i].overrides);
		cJSON *o = cJSON_Parse(json);
		char *text;

		/* the configs HF measured: intermediate 96, 2 kv heads, vocab 128 */
		cJSON_ReplaceItemInObject(o, "intermediate_size", cJSON_CreateNumber(96));
		cJSON_ReplaceItemInObject(o, "vocab_size", cJSON_CreateNumber(128));
		cJSON_AddNumberToObject(o, "num_key_value_heads", 2);
		text = cJSON_PrintUnformatted(o);
		if (model_config_parse(&m, text, "tiny.json", err, sizeof err) < 0) {
			CHECKF(0, "case %zu: %s", i, err);
		} else {
			CHECKF(model_config_param_count(&m) == cases[i].params && model_config_linear_param_count(&m) == cases[i].linear,
			       "case %zu (%s %s): %lld/%lld, transformers %lld/%lld", i, cases[i].type, cases[i].overrides,
			       model_config_param_count(&m), model_config_linear_param_count(&m), cases[i].params, cases[i].linear);
		}
		free(text);
		cJSON_Delete(o);
	}
}

/* The family table: each row found by its name, the projection names in
 * cell.h's order (adapter keys and checkpoint names are built from them). */
static void test_arch_table(void)
{
	const struct arch *a = arch_find("qwen2");

	CHECKF(a != NULL && a->qkv_bias == 1 && !a->o_bias_follows_qkv && !a->qk_norm, "qwen2 row");
	a = arch_find("qwen3");
	CHECKF(a != NULL && a->qk_norm && a->head_dim_default == 128 && a->qkv_bias == -1, "qwen3 row");
	CHECKF(arch_find("mistral") == NULL && strcmp(arch_type_list(), "llama, qwen2, qwen3") == 0, "type list %s",
	       arch_type_list());
	for (int m = 0; m < CELL_MAX_TARGETS; m++) {
		size_t n = strlen(arch_proj_name[m]), k = strlen(lora_module_names[m]);

		CHECKF(n > k + 1 && strcmp(arch_proj_name[m] + n - k, lora_module_names[m]) == 0 &&
		           arch_proj_name[m][n - k - 1] == '.',
		       "projection %d: %s ends with .%s", m, arch_proj_name[m], lora_module_names[m]);
	}
}

/* config.json files transformers 5.17's save_pretrained wrote (the tiny
 * models of tests/gpu/hf_agreement.py): rope_parameters, dtype,
 * layer_types, no rope_theta at the top. */
static void test_transformers5_written(void)
{
	struct model_config m;

	if (parse_fixture(&m, "tf5-qwen2.config.json") == 0) {
		CHECKF(m.rope_theta == 1e6 && m.rope_scaling_type[0] == '\0' && m.attention_bias == 1 && m.head_dim == 32,
		       "tf5 qwen2: theta %g", m.rope_theta);
		model_config_free(&m);
	}
	if (parse_fixture(&m, "tf5-qwen3.config.json") == 0) {
		CHECKF(m.rope_theta == 1e6 && m.qk_norm == 1 && m.attention_bias == 0 && m.head_dim == 32, "tf5 qwen3");
		model_config_free(&m);
	}
	if (parse_fixture(&m, "tf5-llama.config.json") == 0) {
		CHECKF(m.rope_theta == 5e5 && m.rope_scaling_type[0] == '\0' && m.tie_word_embeddings == 1, "tf5 llama");
		model_config_free(&m);
	}
	if (parse_fixture(&m, "tf5-llama3_rope.config.json") == 0) {
		CHECKF(m.rope_theta == 5e5 && strcmp(m.rope_scaling_type, "llama3") == 0 && m.rope_scaling_factor == 8 &&
		           m.rope_low_freq_factor == 1 && m.rope_high_freq_factor == 4 && m.rope_original_max_position == 16,
		       "tf5 llama3 rope");
		model_config_free(&m);
	}
}

/* The same model as transformers 4 and 5 write it: one struct. */
static void test_rope_v4_v5(void)
{
	static const struct {
		const char *type, *v4, *v5;
	} cases[] = {
		{ "llama", "{\"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, "
		           "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}",
		  "{\"rope_parameters\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
		  "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\", \"rope_theta\": 500000.0}}" },
		{ "llama", "{\"rope_theta\": 500000.0, \"rope_scaling\": null}",
		  "{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}}" },
		{ "qwen2", "{\"rope_theta\": 1000000.0, \"rope_scaling\": null, \"torch_dtype\": \"bfloat16\"}",
		  "{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}, \"dtype\": \"bfloat16\"}" },
		{ "qwen3", "{\"rope_theta\": 1000000, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}",
		  "{\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2, \"rope_theta\": 1000000}}" },
	};
	struct model_config a, b, both;
	char err[512];

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		cJSON *v4 = cJSON_Parse(cases[i].v4), *v5 = cJSON_Parse(cases[i].v5), *e;
		char *merged;
		int ok;

		ok = model_config_parse(&a, minimal(cases[i].type, cases[i].v4), "v4.json", err, sizeof err) == 0;
		CHECKF(ok, "case %zu v4: %s", i, err);
		/* minimal() adds rope_theta: the transformers 5 config has none at the top */
		{
			cJSON *o = cJSON_Parse(minimal(cases[i].type, cases[i].v5));
			char *text;

			cJSON_DeleteItemFromObject(o, "rope_theta");
			text = cJSON_PrintUnformatted(o);
			ok = model_config_parse(&b, text, "v5.json", err, sizeof err) == 0;
			CHECKF(ok, "case %zu v5: %s", i, err);
			free(text);
			cJSON_Delete(o);
		}
		for (e = v5->child; e != NULL; e = e->next)
			cJSON_AddItemToObject(v4, e->string, cJSON_Duplicate(e, 1));
		merged = cJSON_PrintUnformatted(v4);
		CHECKF(model_config_parse(&both, minimal(cases[i].type, merged), "both.json", err, sizeof err) == 0,
		       "case %zu: both styles, agreeing: %s", i, err);
		CHECKF(a.rope_theta == b.rope_theta && strcmp(a.rope_scaling_type, b.rope_scaling_type) == 0 &&
		           a.rope_scaling_factor == b.rope_scaling_factor && a.rope_low_freq_factor == b.rope_low_freq_factor &&
		           a.rope_high_freq_factor == b.rope_high_freq_factor &&
		           a.rope_original_max_position == b.rope_original_max_position,
		       "case %zu: v4 (%g %s %g) and v5 (%g %s %g) differ", i, a.rope_theta, a.rope_scaling_type,
		       a.rope_scaling_factor, b.rope_theta, b.rope_scaling_type, b.rope_scaling_factor);
		CHECKF(both.rope_theta == a.rope_theta && strcmp(both.rope_scaling_type, a.rope_scaling_type) == 0, "case %zu both", i);
		CHECKF(a.rope_theta != 10000.0, "case %zu: theta read, not defaulted", i);
		free(merged);
		cJSON_Delete(v4);
		cJSON_Delete(v5);
		model_config_free(&a);
		model_config_free(&b);
		model_config_free(&both);
	}
	CHECKF(model_config_parse(&a, minimal("llama", cases[0].v4), "v4.json", err, sizeof err) == 0 &&
	           strcmp(a.rope_scaling_type, "llama3") == 0 && a.rope_scaling_factor == 8 && a.rope_high_freq_factor == 4 &&
	           a.rope_original_max_position == 8192 && a.rope_theta == 500000,
	       "llama3 fields");
	model_config_free(&a);
}

static void test_rejections(void)
{
	/* min: the text is overrides of a minimal llama config */
	static const struct {
		int min;
		const char *json, *want;
	} cases[] = {
		{ 0, "{\"model_type\": \"mistral\"}", "bad.json: model_type \"mistral\" is not supported (expected one of: llama, qwen2, qwen3)" },
		{ 0, "{\"hidden_size\": 64}", "bad.json: \"model_type\" is missing" },
		{ 0, "[1]", "bad.json: not a JSON object" },
		{ 0, "{\"model_type\": \"llama\",", "bad.json: not valid JSON" },
		{ 0, "{\"model_type\": \"llama\", \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
		  "bad.json: \"hidden_size\" is missing" },
		{ 1, "{\"hidden_size\": -64}", "\"hidden_size\" is -64, outside [1, " },
		{ 1, "{\"hidden_size\": 64.5}", "\"hidden_size\" is not an integer: 64.5" },
		{ 1, "{\"hidden_size\": \"64\"}", "\"hidden_size\" is not a number" },
		{ 1, "{\"vocab_size\": 1e12}", "\"vocab_size\" is 1000000000000, outside" },
		{ 1, "{\"num_hidden_layers\": 0}", "\"num_hidden_layers\" is 0, outside [1, 1024]" },
		{ 1, "{\"num_key_value_heads\": 3}", "\"num_attention_heads\" 4 is not a multiple of \"num_key_value_heads\" 3" },
		{ 1, "{\"head_dim\": 15}", "\"head_dim\" 15 is not even" },
		{ 1, "{\"num_attention_heads\": 5}", "\"hidden_size\" 64 is not a multiple of \"num_attention_heads\" 5" },
		{ 1, "{\"rms_norm_eps\": 0}", "\"rms_norm_eps\" is 0, outside (0, 1)" },
		{ 1, "{\"rope_theta\": -1}", "\"rope_theta\" is -1, outside" },
		{ 0, "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
		       "\"num_attention_heads\": 4, \"vocab_size\": 100, \"rope_theta\": 1e999}", "\"rope_theta\" is not a finite number" },
		{ 0, "{\"model_type\": \"llama\", \"hidden_size\": 64, \"hidden_size\": 128}", "key \"hidden_size\" appears twice" },
		{ 0, "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
		       "\"num_attention_heads\": 4, \"vocab_size\": 100}", "\"rope_theta\" is missing" },
		{ 1, "{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e6}}",
		  "\"rope_theta\" 10000 and \"rope_parameters.rope_theta\" 1e+06 disagree" },
		{ 1, "{\"rope_parameters\": {\"rope_theta\": 1e4}}", "\"rope_parameters.rope_type\" is missing" },
		{ 1, "{\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 1e4, \"factor\": 8, "
		       "\"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 64}}",
		  "\"rope_scaling\" says rope_type default but \"rope_parameters.rope_type\" says llama3" },
		{ 1, "{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}, \"rope_parameters\": "
		       "{\"rope_type\": \"linear\", \"factor\": 4, \"rope_theta\": 1e4}}",
		  "\"rope_scaling.factor\" 2 and \"rope_parameters.factor\" 4 disagree" },
		{ 1, "{\"rope_scaling\": {\"rope_type\": \"linear\", \"type\": \"dynamic\", \"factor\": 2}}",
		  "\"rope_scaling.rope_type\" \"linear\" and \"rope_scaling.type\" \"dynamic\" disagree" },
		{ 1, "{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2}}", "\"rope_scaling.rope_type\" \"yarn\" is not supported" },
		{ 1, "{\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}}", "\"rope_scaling.type\" \"dynamic\" is not supported" },
		{ 1, "{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2, \"attention_factor\": 1}}",
		  "\"rope_scaling.attention_factor\" is not supported" },
		{ 1, "{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}",
		  "\"rope_scaling.low_freq_factor\" is missing (rope_type llama3 needs it)" },
		{ 1, "{\"rope_scaling\": {\"rope_type\": \"default\", \"factor\": 8}}",
		  "\"rope_scaling.factor\" is not used by rope_type default" },
		{ 1, "{\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\"}}}", "per-layer-type RoPE" },
		{ 1, "{\"partial_rotary_factor\": 0.5}", "\"partial_rotary_factor\" other than 1 is not supported" },
		{ 1, "{\"torch_dtype\": \"bfloat16\", \"dtype\": \"float32\"}", "\"torch_dtype\" \"bfloat16\" and \"dtype\" \"float32\" disagree" },
		{ 1, "{\"dtype\": \"float8_e4m3fn\"}", "\"dtype\" \"float8_e4m3fn\" is not supported" },
		{ 1, "{\"quantization_config\": {\"quant_method\": \"awq\"}}", "\"quantization_config\": pre-quantized" },
		{ 1, "{\"attention_dropout\": 0.1}", "\"attention_dropout\" other than 0 is not supported" },
		{ 1, "{\"pretraining_tp\": 2}", "\"pretraining_tp\" other than 1" },
		{ 1, "{\"use_qk_norm\": true}", "\"use_qk_norm\": true is not supported for llama" },
		{ 1, "{\"architectures\": [\"LlamaForSequenceClassification\"]}", "\"architectures\" [\"LlamaForSequenceClassification\"] is not supported" },
		{ 0, "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
		       "\"num_attention_heads\": 4, \"vocab_size\": 100, \"rope_theta\": 1e4, \"attention_bias\": false}",
		  "\"attention_bias\": false is not supported for qwen2" },
		{ 0, "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
		       "\"num_attention_heads\": 4, \"vocab_size\": 100, \"rope_theta\": 1e4, \"use_sliding_window\": true}",
		  "\"use_sliding_window\": true is not supported" },
		{ 0, "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
		       "\"num_attention_heads\": 4, \"vocab_size\": 100, \"rope_theta\": 1e4, \"layer_types\": [\"full_attention\"]}",
		  "\"layer_types\" is not a list of 2 names" },
		{ 1, "{\"mlp_bias\": true}", "\"mlp_bias\": true is not supported" },
		{ 1, "{\"hidden_act\": \"gelu\"}", "\"hidden_act\" must be \"silu\"" },
		{ 1, "{\"tie_word_embeddings\": 1}", "\"tie_word_embeddings\" is not true or false" },
		{ 1, "{\"eos_token_id\": -2}", "\"eos_token_id\" is -2, outside" },
		{ 1, "{\"rope_scaling\": {\"factor\": 2}}", "\"rope_scaling.rope_type\" is missing" },
		{ 1, "{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0}}", "\"factor\" is 0, outside" },
	};
	struct model_config m;
	char err[512];

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const char *json = cases[i].min ? minimal("llama", cases[i].json) : cases[i].json;

		err[0] = '\0';
		CHECKF(model_config_parse(&m, json, "bad.json", err, sizeof err) < 0, "case %zu accepted: %s", i, json);
		CHECKF(strstr(err, cases[i].want) != NULL && strncmp(err, "bad.json: ", 10) == 0, "case %zu: \"%s\" lacks \"%s\"", i,
		       err, cases[i].want);
	}
}

static void set_mtime(const char *path, long sec)
{
	struct timeval tv[2] = { { sec, 0 }, { sec, 0 } };

	CHECKF(utimes(path, tv) == 0, "utimes %s", path);
}

static void test_resolve(void)
{
	char *hf_home = xasprintf("%s/hf", tmpdir), *repo = xasprintf("%s/hub/models--Qwen--Qwen2.5-7B", hf_home);
	char *old = xasprintf("%s/snapshots/1111aaaa", repo), *new = xasprintf("%s/snapshots/2222bbbb", repo);
	char *configs = xasprintf("%s/configs", tmpdir), *local = xasprintf("%s/local-model", tmpdir), *p, err[1024];
	struct model_config m;

	CHECKF(mkdir_p(old, 0755) == 0 && mkdir_p(new, 0755) == 0 && mkdir_p(configs, 0755) == 0 && mkdir_p(local, 0755) == 0,
	       "mkdir");
	unsetenv("HF_HUB_CACHE");
	setenv("HF_HOME", hf_home, 1);
	/* older snapshot: 2 layers; newer: 4 layers, with weights */
	p = xasprintf("%s/config.json", old);
	write_fixture(p, minimal("qwen2", "{\"num_hidden_layers\": 2}"));
	free(p);
	p = xasprintf("%s/config.json", new);
	write_fixture(p, minimal("qwen2", "{\"num_hidden_layers\": 4}"));
	free(p);
	p = xasprintf("%s/model.safetensors", new);
	write_fixture(p, "");
	free(p);
	set_mtime(old, 1000000000);
	set_mtime(new, 1100000000);
	p = xasprintf("%s/qwen2_5_7b.json", configs);
	write_fixture(p, minimal("qwen2", "{\"num_hidden_layers\": 6}"));
	free(p);

	CHECKF(model_config_resolve(&m, "Qwen/Qwen2.5-7B", configs, err, sizeof err) == 0, "cache: %s", err);
	CHECKF(m.num_hidden_layers == 4, "newest snapshot by mtime, got %d layers", m.num_hidden_layers);
	CHECKF(m.checkpoint_dir != NULL && strcmp(m.checkpoint_dir, new) == 0, "checkpoint_dir %s", m.checkpoint_dir);
	CHECKF(m.model_id != NULL && strcmp(m.model_id, "Qwen/Qwen2.5-7B") == 0, "model_id kept");
	CHECKF(m.config_path != NULL && strstr(m.config_path, "2222bbbb/config.json"), "config_path %s", m.config_path);
	model_config_free(&m);

	/* the snapshot refs/main names wins over mtime, as in huggingface_hub */
	p = xasprintf("%s/refs", repo);
	mkdir(p, 0755);
	free(p);
	p = xasprintf("%s/refs/main", repo);
	write_fixture(p, "1111aaaa");
	/* a snapshot is a checkpoint whether or not its weights are there:
	 * loading them then fails, never falls back to synthetic weights */
	CHECKF(model_config_resolve(&m, "Qwen/Qwen2.5-7B", configs, err, sizeof err) == 0 && m.num_hidden_layers == 2 &&
	           m.checkpoint_dir != NULL && strcmp(m.checkpoint_dir, old) == 0,
	       "refs/main snapshot (no weights there): %d layers", m.num_hidden_layers);
	model_config_free(&m);
	write_fixture(p, "no-such-commit\n");
	CHECKF(model_config_resolve(&m, "Qwen/Qwen2.5-7B", configs, err, sizeof err) == 0 && m.num_hidden_layers == 4,
	       "stale refs/main falls back to mtime");
	model_config_free(&m);
	unlink(p);
	free(p);

	/* HF_HUB_CACHE beats HF_HOME: an empty cache there means configs_dir */
	p = xasprintf("%s/other-cache", tmpdir);
	mkdir(p, 0755);
	setenv("HF_HUB_CACHE", p, 1);
	CHECKF(model_config_resolve(&m, "Qwen/Qwen2.5-7B", configs, err, sizeof err) == 0 && m.num_hidden_layers == 6 &&
	           m.checkpoint_dir == NULL && strstr(m.config_path, "configs/qwen2_5_7b.json"),
	       "configs_dir fallback: %s", err);
	model_config_free(&m);
	free(p);

	/* a local directory comes first */
	p = xasprintf("%s/config.json", local);
	write_fixture(p, minimal("llama", "{}"));
	free(p);
	p = xasprintf("%s/model.safetensors.index.json", local);
	write_fixture(p, "{}");
	free(p);
	CHECKF(model_config_resolve(&m, local, configs, err, sizeof err) == 0 && strcmp(m.model_type, "llama") == 0 &&
	           m.checkpoint_dir != NULL && strcmp(m.checkpoint_dir, local) == 0,
	       "local dir: %s", err);
	model_config_free(&m);

	/* nowhere: the message lists each place */
	CHECKF(model_config_resolve(&m, "Org/Missing-1B", configs, err, sizeof err) < 0, "missing model resolved");
	CHECKF(strstr(err, "model \"Org/Missing-1B\": no config.json found") && strstr(err, "Org/Missing-1B/config.json") &&
	           strstr(err, "other-cache/models--Org--Missing-1B/snapshots/*/config.json") && strstr(err, "configs/missing_1b.json"),
	       "places looked: %s", err);
	CHECKF(m.model_id == NULL && m.config_path == NULL, "failed resolve leaves nothing");

	/* refs/main's snapshot with a dangling config.json (an interrupted
	 * download) is an error naming it, not the older snapshot */
	unsetenv("HF_HUB_CACHE");
	p = xasprintf("%s/refs/main", repo);
	write_fixture(p, "1111aaaa");
	free(p);
	p = xasprintf("%s/config.json", old);
	unlink(p);
	CHECKF(symlink("../../blobs/cfg.incomplete", p) == 0, "symlink");
	CHECKF(model_config_resolve(&m, "Qwen/Qwen2.5-7B", configs, err, sizeof err) < 0 &&
	           strstr(err, "1111aaaa/config.json: a dangling symbolic link"),
	       "dangling snapshot config: %s", err);
	free(p);
	p = xasprintf("%s/refs/main", repo);
	unlink(p);
	free(p);
	/* a local directory's config.json that is a FIFO: refused, not waited on */
	p = xasprintf("%s/fifo-model", tmpdir);
	mkdir(p, 0755);
	{
		char *cfg = xasprintf("%s/config.json", p);

		CHECKF(mkfifo(cfg, 0644) == 0, "mkfifo");
		CHECKF(model_config_resolve(&m, p, configs, err, sizeof err) < 0 && strstr(err, "config.json: not a regular file"),
		       "fifo config: %s", err);
		unlink(cfg);
		free(cfg);
	}
	free(p);

	/* a config that is there but bad is reported, not skipped */
	unsetenv("HF_HUB_CACHE");
	p = xasprintf("%s/config.json", new);
	write_fixture(p, "{\"model_type\": \"gpt2\"}");
	free(p);
	CHECKF(model_config_resolve(&m, "Qwen/Qwen2.5-7B", configs, err, sizeof err) < 0 &&
	           strstr(err, "2222bbbb/config.json: model_type \"gpt2\" is not supported"),
	       "bad cached config: %s", err);
	free(hf_home);
	free(repo);
	free(old);
	free(new);
	free(configs);
	free(local);
}

int main(void)
{
	const char *fx = getenv("POROS_FIXTURES");

	if (fx != NULL && *fx)
		fixtures = fx;
	if (scratch_make(tmpdir) < 0)
		return 1;
	test_qwen25_7b();
	test_llama31_8b();
	test_qwen3_8b();
	test_defaults();
	test_counts_match_transformers();
	test_arch_table();
	test_transformers5_written();
	test_rope_v4_v5();
	test_rejections();
	test_resolve();
	scratch_remove(tmpdir);
	return test_verdict("test_model_config");
}
