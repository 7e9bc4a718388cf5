/* tests/unit/test_adapter.c: PEFT key names, adapter save/load round trip,
 * the adapter_config.json fields PEFT reads, BF16/F16 adapters from other
 * tools, and what load refuses. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "util/util.h"
#include "ops.h"
#include "test_common.h"

static char tmpdir[] = "/tmp/poros-test-ad-XXXXXX";

static void test_keys(void)
{
	static const char *const names[] = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" };
	/* layer, module, is_b, the key PEFT writes */
	static const struct {
		int layer, module, is_b;
		const char *key;
	} keys[] = {
		{ 3, 0, 0, "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight" },
		{ 0, 6, 1, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight" },
		{ 63, 3, 1, "base_model.model.model.layers.63.self_attn.o_proj.lora_B.weight" },
		{ 10, 4, 0, "base_model.model.model.layers.10.mlp.gate_proj.lora_A.weight" },
	};
	char *k;
	int layer, module, is_b, ok = 1;

	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
		k = adapter_key(keys[i].layer, keys[i].module, keys[i].is_b);
		CHECKF(k && strcmp(k, keys[i].key) == 0, "%s %s: %s", names[keys[i].module], keys[i].is_b ? "B" : "A", k);
		free(k);
	}
	CHECKF(adapter_key(0, 7, 0) == NULL && adapter_key(0, -1, 0) == NULL && adapter_key(-1, 0, 0) == NULL, "bad arguments");
	for (int l = 0; l < 100; l += 33)
		for (int m = 0; m < 7; m++)
			for (int b = 0; b < 2; b++) {
				k = adapter_key(l, m, b);
				ok &= adapter_key_parse(k, &layer, &module, &is_b) == 0 && layer == l && module == m && is_b == b &&
				      strstr(k, names[m]) != NULL;
				free(k);
			}
	CHECKF(ok, "every key parses back to its parts");
	{
		static const char *const bad[] = {
			"base_model.model.model.layers.03.self_attn.q_proj.lora_A.weight",
			"base_model.model.model.layers.-1.self_attn.q_proj.lora_A.weight",
			"base_model.model.model.layers.1.self_attn.gate_proj.lora_A.weight",
			"base_model.model.model.layers.1.mlp.q_proj.lora_A.weight",
			"base_model.model.model.layers.1.self_attn.q_proj.lora_C.weight",
			"base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight.x",
			"base_model.model.model.layers.1.self_attn.q_proj.lora_A.default.weight",
			"base_model.model.model.layers..self_attn.q_proj.lora_A.weight",
			"base_model.model.lm_head.lora_A.weight",
			"model.layers.1.self_attn.q_proj.lora_A.weight",
		};

		for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
			CHECKF(adapter_key_parse(bad[i], &layer, &module, &is_b) < 0, "accepted %s", bad[i]);
	}
}

/* Two layers of q_proj, v_proj and down_proj at rank 4 on a toy model
 * with hidden 16, kv width 8, intermediate 32. */
static void make_adapter(struct adapter *a)
{
	const int mods[3] = { 0, 2, 6 }, out[3] = { 16, 8, 16 }, in[3] = { 16, 16, 32 };
	int t = 0;

	memset(a, 0, sizeof *a);
	a->rank = 4;
	a->alpha = 8;
	a->dropout = 0.05;
	a->target_mask = 1u << 0 | 1u << 2 | 1u << 6;
	a->base_model = xstrdup("Qwen/Qwen2.5-0.5B");
	a->n = 12;
	a->t = xcalloc(12, sizeof *a->t);
	for (int l = 0; l < 2; l++)
		for (int m = 0; m < 3; m++)
			for (int b = 0; b < 2; b++, t++) {
				struct adapter_tensor *x = &a->t[t];

				x->name = adapter_key(l, mods[m], b);
				x->rows = b ? out[m] : 4;
				x->cols = b ? 4 : in[m];
				x->data = xmalloc((size_t)x->rows * x->cols * sizeof *x->data);
				for (int i = 0; i < x->rows * x->cols; i++)
					x->data[i] = (float)sin(1.0 + t * 100 + i) / 3.0f;
			}
}

static void test_roundtrip(void)
{
	char *dir = xasprintf("%s/run/adapter", tmpdir), *p, err[512], jerr[512];
	struct adapter a, b;
	struct st_file f;
	cJSON *cfg;
	const cJSON *tm;

	make_adapter(&a);
	CHECKF(adapter_save(dir, &a, err, sizeof err) == 0, "save: %s", err);
	CHECKF(adapter_load(dir, &b, err, sizeof err) == 0, "load: %s", err);
	CHECKF(b.rank == 4 && b.alpha == 8 && b.dropout == 0.05 && b.target_mask == a.target_mask, "header fields");
	CHECKF(b.base_model && strcmp(b.base_model, "Qwen/Qwen2.5-0.5B") == 0, "base model");
	CHECKF(b.n == a.n, "n %d", b.n);
	for (int i = 0; i < a.n && i < b.n; i++) {
		const struct adapter_tensor *x = adapter_find(&b, a.t[i].name);

		CHECKF(x != NULL, "%s missing after load", a.t[i].name);
		if (x == NULL)
			continue;
		CHECKF(x->rows == a.t[i].rows && x->cols == a.t[i].cols, "%s shape", x->name);
		CHECKF(memcmp(x->data, a.t[i].data, (size_t)x->rows * x->cols * sizeof *x->data) == 0, "%s: data not bit-exact",
		       x->name);
	}
	adapter_free(&b);

	/* adapter_config.json as PEFT reads it */
	p = xasprintf("%s/adapter_config.json", dir);
	cfg = json_read_file(p, jerr, sizeof jerr);
	CHECKF(cfg != NULL, "config: %s", jerr);
	if (cfg != NULL) {
#define STR(k, v) CHECKF(cJSON_IsString(cJSON_GetObjectItem(cfg, k)) && strcmp(cJSON_GetObjectItem(cfg, k)->valuestring, v) == 0, "%s", k)
#define NUM(k, v) CHECKF(cJSON_IsNumber(cJSON_GetObjectItem(cfg, k)) && cJSON_GetObjectItem(cfg, k)->valuedouble == (v), "%s", k)
#define IS(k, pred) CHECKF(pred(cJSON_GetObjectItem(cfg, k)), "%s", k)
		STR("peft_type", "LORA");
		STR("task_type", "CAUSAL_LM");
		STR("bias", "none");
		STR("base_model_name_or_path", "Qwen/Qwen2.5-0.5B");
		NUM("r", 4);
		NUM("lora_alpha", 8);
		NUM("lora_dropout", 0.05);
		IS("fan_in_fan_out", cJSON_IsFalse);
		IS("use_rslora", cJSON_IsFalse);
		IS("inference_mode", cJSON_IsTrue);
		IS("init_lora_weights", cJSON_IsTrue);
		IS("modules_to_save", cJSON_IsNull);
		IS("layers_to_transform", cJSON_IsNull);
		IS("revision", cJSON_IsNull);
		tm = cJSON_GetObjectItem(cfg, "target_modules");
		CHECKF(cJSON_GetArraySize(tm) == 3 && strcmp(cJSON_GetArrayItem(tm, 0)->valuestring, "q_proj") == 0 &&
		           strcmp(cJSON_GetArrayItem(tm, 1)->valuestring, "v_proj") == 0 &&
		           strcmp(cJSON_GetArrayItem(tm, 2)->valuestring, "down_proj") == 0,
		       "target_modules");
		cJSON_Delete(cfg);
	}
	free(p);
	p = xasprintf("%s/adapter_model.safetensors", dir);
	CHECKF(st_open(&f, p, err, sizeof err) == 0, "weights: %s", err);
	if (f.map != NULL) {
		CHECKF(f.n == 12 && f.t[0].dtype == ST_F32 && f.t[1].ndim == 2, "F32 2-D tensors");
		CHECKF(f.metadata && strcmp(cJSON_GetObjectItem(f.metadata, "format")->valuestring, "pt") == 0, "format pt");
		st_close(&f);
	}
	free(p);
	adapter_free(&a);
	free(dir);
}

/* An adapter written by another tool in a half-precision dtype. */
static void test_half_precision(enum st_dtype dtype)
{
	char *dir = xasprintf("%s/half-%s", tmpdir, st_dtype_name(dtype)), *p, err[512];
	uint16_t a_data[2 * 3], b_data[5 * 2];
	float want_a[6], want_b[10], got;
	char *ka = adapter_key(1, 1, 0), *kb = adapter_key(1, 1, 1);
	const struct st_out outs[] = { { kb, dtype, 2, { 5, 2 }, b_data }, { ka, dtype, 2, { 2, 3 }, a_data } };
	struct adapter a;
	int ok = 1;

	mkdir(dir, 0755);
	for (int i = 0; i < 6; i++) {
		float v = (float)(i - 3) * 0.3f;

		a_data[i] = dtype == ST_BF16 ? bf16_from_f32(v) : st_f16_from_f32(v);
		want_a[i] = dtype == ST_BF16 ? f32_from_bf16(a_data[i]) : st_f32_from_f16(a_data[i]);
	}
	for (int i = 0; i < 10; i++) {
		float v = (float)i / 7.0f;

		b_data[i] = dtype == ST_BF16 ? bf16_from_f32(v) : st_f16_from_f32(v);
		want_b[i] = dtype == ST_BF16 ? f32_from_bf16(b_data[i]) : st_f32_from_f16(b_data[i]);
	}
	p = xasprintf("%s/adapter_model.safetensors", dir);
	CHECKF(st_write(p, outs, 2, NULL, err, sizeof err) == 0, "write: %s", err);
	free(p);
	p = xasprintf("%s/adapter_config.json", dir);
	{
		const char *cfg = "{\"peft_type\": \"LORA\", \"r\": 2, \"lora_alpha\": 16, \"target_modules\": [\"k_proj\"]}";

		CHECKF(atomic_write(p, cfg, strlen(cfg)) == 0, "config");
	}
	free(p);
	CHECKF(adapter_load(dir, &a, err, sizeof err) == 0, "%s adapter: %s", st_dtype_name(dtype), err);
	if (a.n == 2) {
		const struct adapter_tensor *ta = adapter_find(&a, ka), *tb = adapter_find(&a, kb);

		for (int i = 0; i < 6; i++)
			ok &= ta->data[i] == want_a[i];
		for (int i = 0; i < 10; i++)
			ok &= tb->data[i] == want_b[i];
		got = tb->data[7];
		CHECKF(ok && ta->rows == 2 && ta->cols == 3 && tb->rows == 5 && tb->cols == 2 && a.alpha == 16 && a.dropout == 0 &&
		           a.base_model == NULL && a.target_mask == 2u,
		       "%s values/shapes (b[7] = %g)", st_dtype_name(dtype), got);
	}
	adapter_free(&a);
	free(ka);
	free(kb);
	free(dir);
}

/* Writes an adapter directory from a config text and the standard toy
 * weights with one tensor renamed / dropped, then expects load to fail. */
static void expect_load_error(const char *label, const char *config, const char *rename_from, const char *rename_to,
                              const char *want)
{
	char *dir = xasprintf("%s/bad-%s", tmpdir, label), *p, err[512];
	struct adapter a, b;

	make_adapter(&a);
	CHECKF(adapter_save(dir, &a, err, sizeof err) == 0, "%s: save: %s", label, err);
	if (rename_from != NULL) {
		/* rewrite the weights with one tensor renamed or (rename_to NULL) dropped */
		struct st_out outs[12];
		int n = 0;

		for (int i = 0; i < a.n; i++) {
			const char *name = a.t[i].name;

			if (strcmp(name, rename_from) == 0) {
				if (rename_to == NULL)
					continue;
				name = rename_to;
			}
			outs[n] = (struct st_out){ name, ST_F32, 2, { a.t[i].rows, a.t[i].cols }, a.t[i].data };
			n++;
		}
		p = xasprintf("%s/adapter_model.safetensors", dir);
		CHECKF(st_write(p, outs, n, NULL, err, sizeof err) == 0, "%s: rewrite: %s", label, err);
		free(p);
	}
	if (config != NULL) {
		p = xasprintf("%s/adapter_config.json", dir);
		CHECKF(atomic_write(p, config, strlen(config)) == 0, "%s: config", label);
		free(p);
	}
	err[0] = '\0';
	CHECKF(adapter_load(dir, &b, err, sizeof err) < 0, "%s: accepted", label);
	CHECKF(strstr(err, want) != NULL, "%s: \"%s\" lacks \"%s\"", label, err, want);
	CHECKF(b.n == 0 && b.t == NULL && b.base_model == NULL, "%s: failed load left state", label);
	adapter_free(&a);
	free(dir);
}

#define CFG(extra) "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\", \"down_proj\"]" extra "}"

static void test_load_errors(void)
{
	const char *qa = "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight";
	const char *qb = "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight";
	char err[512], *dir, *p;
	struct adapter a;

	expect_load_error("no-b", NULL, qb, NULL, "\"base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight\" has no lora_B");
	expect_load_error("no-a", NULL, qa, NULL, "has no lora_A");
	expect_load_error("lm-head", NULL, qa, "base_model.model.lm_head.lora_A.weight",
	                  "tensor \"base_model.model.lm_head.lora_A.weight\" is not a LoRA weight");
	expect_load_error("untargeted", CFG("") , qa, "base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight",
	                  "k_proj is not in target_modules");
	expect_load_error("rank", "{\"r\": 8, \"target_modules\": [\"q_proj\", \"v_proj\", \"down_proj\"]}", NULL, NULL,
	                  "does not have rank 8 in its first dimension");
	expect_load_error("rslora", CFG(", \"use_rslora\": true"), NULL, NULL, "\"use_rslora\": true is not supported");
	expect_load_error("dora", CFG(", \"use_dora\": true"), NULL, NULL, "\"use_dora\": true is not supported");
	expect_load_error("rank-pattern", CFG(", \"rank_pattern\": {\"q_proj\": 8}"), NULL, NULL,
	                  "\"rank_pattern\": per-module values are not supported");
	expect_load_error("lora-bias", CFG(", \"lora_bias\": true"), NULL, NULL, "\"lora_bias\": true is not supported");
	expect_load_error("bias", CFG(", \"bias\": \"all\""), NULL, NULL, "\"bias\": only \"none\" is supported");
	expect_load_error("ia3", "{\"peft_type\": \"IA3\", \"r\": 4, \"target_modules\": [\"q_proj\"]}", NULL, NULL,
	                  "peft_type \"IA3\" is not supported");
	expect_load_error("no-r", "{\"peft_type\": \"LORA\", \"target_modules\": [\"q_proj\"]}", NULL, NULL,
	                  "\"r\" is missing or not an integer");
	expect_load_error("regex", "{\"r\": 4, \"target_modules\": \".*proj\"}", NULL, NULL,
	                  "target_modules \".*proj\": a regular expression is not supported");
	expect_load_error("embed", "{\"r\": 4, \"target_modules\": [\"q_proj\", \"embed_tokens\"]}", NULL, NULL,
	                  "target module \"embed_tokens\" is not supported");
	expect_load_error("dropout", CFG(", \"lora_dropout\": 1.5"), NULL, NULL, "\"lora_dropout\" 1.5: must be in [0, 1)");
	expect_load_error("json", "{\"r\": 4,", NULL, NULL, "adapter_config.json");

	/* "all-linear" targets every projection: what fails is the dropped B */
	expect_load_error("all-linear", "{\"r\": 4, \"target_modules\": \"all-linear\"}", qb, NULL, "has no lora_B");

	/* a pickle-only adapter, and a missing directory */
	dir = xasprintf("%s/pickle", tmpdir);
	mkdir(dir, 0755);
	p = xasprintf("%s/adapter_config.json", dir);
	atomic_write(p, CFG(""), strlen(CFG("")));
	free(p);
	p = xasprintf("%s/adapter_model.bin", dir);
	atomic_write(p, "PK", 2);
	free(p);
	CHECKF(adapter_load(dir, &a, err, sizeof err) < 0 && strstr(err, "only adapter_model.bin (a pickle)"), "pickle: %s", err);
	free(dir);
	dir = xasprintf("%s/nowhere", tmpdir);
	CHECKF(adapter_load(dir, &a, err, sizeof err) < 0 && strstr(err, "nowhere/adapter_config.json"), "missing dir: %s", err);
	free(dir);
}

/* An adapter PEFT 0.21 saved itself (get_peft_model on a tiny Qwen2 from
 * tests/fixtures/formats/tiny-qwen2.config.json, r 4, alpha 8, q/v/down,
 * random B; base_model_name_or_path rewritten to "tiny-qwen2").  Its
 * config carries every field current PEFT writes. */
static void test_peft_written(void)
{
	const char *fx = getenv("POROS_FIXTURES");
	char *dir = xasprintf("%s/peft-0.21-adapter", fx && *fx ? fx : "tests/fixtures/formats"), err[512];
	const struct adapter_tensor *t;
	struct adapter a;
	double sum = 0;

	if (adapter_load(dir, &a, err, sizeof err) < 0) {
		CHECKF(0, "PEFT adapter: %s", err);
		free(dir);
		return;
	}
	CHECKF(a.rank == 4 && a.alpha == 8 && a.dropout == 0 && a.target_mask == (1u << 0 | 1u << 2 | 1u << 6) && a.n == 12,
	       "PEFT header: r %d alpha %g dropout %g mask 0x%x n %d", a.rank, a.alpha, a.dropout, a.target_mask, a.n);
	CHECKF(a.base_model && strcmp(a.base_model, "tiny-qwen2") == 0, "base model");
	t = adapter_find(&a, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
	CHECKF(t && t->rows == 64 && t->cols == 4 && t->data[0] == -0.21712398529052734f && t->data[1] == 0.19459205865859985f &&
	           t->data[2] == 0.04489481449127197f,
	       "down_proj B values");
	t = adapter_find(&a, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
	CHECKF(t && t->rows == 4 && t->cols == 64 && t->data[0] == -0.10695716738700867f && t->data[2] == 0.09399043023586273f,
	       "q_proj A values");
	for (int i = 0; i < a.n; i++)
		for (int j = 0; j < a.t[i].rows * a.t[i].cols; j++)
			sum += a.t[i].data[j];
	/* the sum PEFT's own tensors give, in double */
	CHECKF(fabs(sum - 20.664966720814846) < 1e-9, "sum of all weights %.15g", sum);
	adapter_free(&a);
	free(dir);
}

static void test_save_errors(void)
{
	char *dir = xasprintf("%s/save-bad", tmpdir), *p, err[512];
	struct adapter a;
	struct stat st;

	make_adapter(&a);
	a.rank = 0;
	CHECKF(adapter_save(dir, &a, err, sizeof err) < 0 && strstr(err, "rank 0: must be >= 1"), "rank 0: %s", err);
	a.rank = 4;
	a.dropout = 1;
	CHECKF(adapter_save(dir, &a, err, sizeof err) < 0 && strstr(err, "lora_dropout 1: must be in [0, 1)"), "dropout: %s", err);
	a.dropout = 0;
	a.target_mask = 1u << 7;
	CHECKF(adapter_save(dir, &a, err, sizeof err) < 0 && strstr(err, "target mask 0x80"), "mask: %s", err);
	a.target_mask = 1u << 0 | 1u << 2 | 1u << 6;
	a.t[1].cols = 3; /* a q_proj B of rank 3 */
	CHECKF(adapter_save(dir, &a, err, sizeof err) < 0 && strstr(err, "does not have rank 4 in its second dimension"),
	       "rank mismatch: %s", err);
	p = xasprintf("%s/adapter_model.safetensors", dir);
	CHECKF(stat(dir, &st) < 0 && stat(p, &st) < 0, "a refused save created files");
	free(p);
	adapter_free(&a);
	free(dir);
}

int main(void)
{
	if (scratch_make(tmpdir) < 0)
		return 1;
	test_keys();
	test_roundtrip();
	test_half_precision(ST_BF16);
	test_half_precision(ST_F16);
	test_load_errors();
	test_peft_written();
	test_save_errors();
	scratch_remove(tmpdir);
	return test_verdict("test_adapter");
}
