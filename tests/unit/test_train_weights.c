/* tests/unit/test_train_weights.c: host weights.
 *   - synthetic weights are the same for one seed and differ for another
 *     (bf16 and NF4), and the layer layout is aligned and non-overlapping;
 *   - a tiny HF checkpoint (config.json + model.safetensors with HF names,
 *     bf16 and f32 tensors) loads value for value (NF4: exactly what
 *     nf4_quantize gives), a missing or misshapen tensor is an error naming
 *     it, and poros-train's run trains from it with "weights": "real".
 * `test_train_weights --write-checkpoint DIR` only writes the checkpoint
 * (tests/train.bats uses it as a fixture generator). */
#include <unistd.h>

#include "test_train_common.h"

#include "jsonl.h"
#include "nf4.h"
#include "safetensors.h"

/* --- synthetic ------------------------------------------------------------ */

static void check_layout(const struct layer_layout *lay)
{
	size_t begin[32], size[32];
	int n = 0;
	const size_t norms[4] = { lay->in_norm, lay->post_norm, lay->q_norm, lay->k_norm };

	CHECKF(lay->stride % LAYOUT_ALIGN == 0, "stride %zu is not %d-aligned", lay->stride, LAYOUT_ALIGN);
	for (int i = 0; i < 4; i++)
		if (norms[i] != LAYOUT_NONE) {
			begin[n] = norms[i];
			size[n++] = 2; /* at least one element; alignment is what we check */
		}
	for (int m = 0; m < N_PROJ; m++) {
		size_t numel = (size_t)lay->n_out[m] * lay->n_in[m];

		begin[n] = lay->weight[m];
		size[n++] = lay->nf4 ? numel / 2 : numel * 2;
		if (lay->nf4) {
			begin[n] = lay->absmax[m];
			size[n++] = numel / 64 * 4;
		}
	}
	for (int i = 0; i < n; i++) {
		CHECKF(begin[i] % LAYOUT_ALIGN == 0, "offset %zu is not aligned", begin[i]);
		CHECKF(begin[i] + size[i] <= lay->stride, "piece at %zu runs past the record", begin[i]);
		for (int j = 0; j < i; j++)
			CHECKF(begin[i] + size[i] <= begin[j] || begin[j] + size[j] <= begin[i], "pieces at %zu and %zu overlap",
			         begin[i], begin[j]);
	}
}

static void check_synthetic(const char *model, int nf4)
{
	struct model_config mc;
	struct host_weights a, b, c;
	char err[512];
	size_t layers;

	if (model_config_resolve(&mc, model, "configs/models", err, sizeof err) < 0) {
		CHECKF(0, "%s", err);
		return;
	}
	CHECKF(host_weights_load(&a, backend_cpu(), &mc, nf4, 42, err, sizeof err) == 0, "%s", err);
	CHECKF(host_weights_load(&b, backend_cpu(), &mc, nf4, 42, err, sizeof err) == 0, "%s", err);
	CHECKF(host_weights_load(&c, backend_cpu(), &mc, nf4, 43, err, sizeof err) == 0, "%s", err);
	layers = a.lay.stride * (size_t)a.n_layers;
	CHECKF(!a.real, "%s: synthetic weights must say so", model);
	CHECKF(memcmp(a.layers, b.layers, layers) == 0 && memcmp(a.globals, b.globals, a.glob.bytes) == 0,
	         "%s %s: seed 42 twice gives different weights", model, nf4 ? "nf4" : "bf16");
	CHECKF(memcmp(a.layers, c.layers, layers) != 0 && memcmp(a.globals, c.globals, a.glob.bytes) != 0,
	         "%s %s: seeds 42 and 43 give the same weights", model, nf4 ? "nf4" : "bf16");
	/* norms near one, unit-norm embedding rows: what the generator promises */
	{
		const bf16 *norm = (const bf16 *)(a.layers + a.lay.in_norm);
		const bf16 *embed = (const bf16 *)(a.globals + a.glob.embed);
		double sum = 0, sq = 0;
		long n = (long)mc.vocab_size * mc.hidden_size;

		CHECKF(fabsf(f32_from_bf16(norm[0]) - 1.0f) < 0.2f, "input_layernorm[0] = %g", f32_from_bf16(norm[0]));
		for (long i = 0; i < n; i++) {
			double v = f32_from_bf16(embed[i]);

			sum += v;
			sq += v * v;
		}
		/* N(0, 1/C): 1/8 for the 64-wide tiny models */
		CHECKF(fabs(sum / n) < 0.005 && fabs(sqrt(sq / n) - 1.0 / sqrt(mc.hidden_size)) < 0.005,
		         "embedding mean %g std %g", sum / n, sqrt(sq / n));
	}
	check_layout(&a.lay);
	host_weights_free(&a);
	host_weights_free(&b);
	host_weights_free(&c);
	model_config_free(&mc);
}

/* --- a tiny HF checkpoint --------------------------------------------------- */

static float value_of(const char *name, long i)
{
	uint64_t h = 1469598103934665603ull;

	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return 0.05f * (float)tt_uniform(h, (uint64_t)i);
}

struct ck_tensor {
	char name[128];
	long long rows, cols; /* cols 0: a vector */
	int f32;              /* stored as F32 (norms, biases), else BF16 */
	float offset;         /* norms sit near one */
};

/* Every tensor of the model, HF names; skip (may be NULL) is left out. */
static int list_tensors(const struct model_config *mc, struct ck_tensor *t, const char *skip)
{
	static const char *const proj[N_PROJ] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
		                                      "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
		                                      "mlp.down_proj" };
	int n = 0, c = mc->hidden_size;

#define ADD(r, cl, isf32, off, ...)                                         \
	do {                                                                \
		snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__);         \
		t[n].rows = (r);                                            \
		t[n].cols = (cl);                                           \
		t[n].f32 = (isf32);                                         \
		t[n].offset = (off);                                        \
		if (skip == NULL || strcmp(skip, t[n].name) != 0)           \
			n++;                                                \
	} while (0)
	ADD(mc->vocab_size, c, 0, 0.0f, "model.embed_tokens.weight");
	ADD(c, 0, 1, 1.0f, "model.norm.weight");
	if (!mc->tie_word_embeddings)
		ADD(mc->vocab_size, c, 0, 0.0f, "lm_head.weight");
	for (int l = 0; l < mc->num_hidden_layers; l++) {
		ADD(c, 0, 1, 1.0f, "model.layers.%d.input_layernorm.weight", l);
		ADD(c, 0, 1, 1.0f, "model.layers.%d.post_attention_layernorm.weight", l);
		if (mc->qk_norm) {
			ADD(mc->head_dim, 0, 1, 1.0f, "model.layers.%d.self_attn.q_norm.weight", l);
			ADD(mc->head_dim, 0, 1, 1.0f, "model.layers.%d.self_attn.k_norm.weight", l);
		}
		for (int m = 0; m < N_PROJ; m++) {
			int no, ni;

			model_config_module_shape(mc, m, &no, &ni);
			ADD(no, ni, 0, 0.0f, "model.layers.%d.%s.weight", l, proj[m]);
			if (mc->attention_bias && m < 3)
				ADD(no, 0, 1, 0.0f, "model.layers.%d.%s.bias", l, proj[m]);
		}
	}
#undef ADD
	return n;
}

/* Writes DIR/config.json (the tiny Qwen2's) and DIR/model.safetensors;
 * skip leaves one tensor out, bad_shape gives that tensor one row less. */
static int write_checkpoint(const char *dir, const char *skip, const char *bad_shape)
{
	struct model_config mc;
	struct ck_tensor *t = xcalloc(512, sizeof *t);
	struct st_out *out = xcalloc(512, sizeof *out);
	char err[512], *json, *cfg_path, *st_path;
	size_t len;
	int n, rc = -1;

	if (model_config_resolve(&mc, "poros/tiny-qwen2", "configs/models", err, sizeof err) < 0 ||
	    (json = read_whole_file(mc.config_path, &len)) == NULL) {
		fprintf(stderr, "write_checkpoint: %s\n", err);
		return -1;
	}
	if (mkdir_p(dir, 0755) < 0)
		return -1;
	cfg_path = xasprintf("%s/config.json", dir);
	st_path = xasprintf("%s/model.safetensors", dir);
	if (atomic_write(cfg_path, json, len) < 0)
		goto out;
	n = list_tensors(&mc, t, skip);
	for (int i = 0; i < n; i++) {
		long long numel = t[i].rows * (t[i].cols ? t[i].cols : 1);
		void *data = xmalloc((size_t)numel * 4);

		if (bad_shape && strcmp(bad_shape, t[i].name) == 0)
			t[i].rows--;
		numel = t[i].rows * (t[i].cols ? t[i].cols : 1);
		for (long long j = 0; j < numel; j++) {
			float v = t[i].offset + value_of(t[i].name, (long)j);

			if (t[i].f32)
				((float *)data)[j] = v;
			else
				((bf16 *)data)[j] = bf16_from_f32(v);
		}
		out[i].name = t[i].name;
		out[i].dtype = t[i].f32 ? ST_F32 : ST_BF16;
		out[i].ndim = t[i].cols ? 2 : 1;
		out[i].shape[0] = t[i].rows;
		out[i].shape[1] = t[i].cols;
		out[i].data = data;
	}
	if (st_write(st_path, out, n, NULL, err, sizeof err) < 0)
		fprintf(stderr, "write_checkpoint: %s\n", err);
	else
		rc = 0;
	for (int i = 0; i < n; i++)
		free((void *)out[i].data);
out:
	free(json);
	free(cfg_path);
	free(st_path);
	free(t);
	free(out);
	model_config_free(&mc);
	return rc;
}

static int bf16_matches(const bf16 *got, const char *name, long n, float offset)
{
	for (long i = 0; i < n; i++)
		if (got[i] != bf16_from_f32(offset + value_of(name, i)))
			return 0;
	return 1;
}

static void check_checkpoint_values(const char *dir, int nf4)
{
	struct model_config mc;
	struct host_weights w;
	char err[1024], name[128];
	int ok = 1;

	if (model_config_resolve(&mc, dir, NULL, err, sizeof err) < 0 || mc.checkpoint_dir == NULL) {
		CHECKF(0, "checkpoint %s not recognised: %s", dir, err);
		return;
	}
	if (host_weights_load(&w, backend_cpu(), &mc, nf4, 42, err, sizeof err) < 0) {
		CHECKF(0, "loading %s: %s", dir, err);
		model_config_free(&mc);
		return;
	}
	CHECKF(w.real, "a checkpoint is real weights");
	CHECKF(bf16_matches((const bf16 *)(w.globals + w.glob.embed), "model.embed_tokens.weight",
	                      (long)mc.vocab_size * mc.hidden_size, 0.0f), "embedding values");
	CHECKF(bf16_matches((const bf16 *)(w.globals + w.glob.lm_head), "lm_head.weight",
	                      (long)mc.vocab_size * mc.hidden_size, 0.0f), "lm_head values");
	CHECKF(bf16_matches((const bf16 *)(w.globals + w.glob.final_norm), "model.norm.weight", mc.hidden_size, 1.0f),
	         "final norm (f32 in the file) values");
	for (int l = 0; l < mc.num_hidden_layers; l++) {
		const unsigned char *rec = w.layers + (size_t)l * w.lay.stride;

		snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
		ok &= bf16_matches((const bf16 *)(rec + w.lay.post_norm), name, mc.hidden_size, 1.0f);
		snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.bias", l);
		ok &= bf16_matches((const bf16 *)(rec + w.lay.bias[1]), name, w.lay.n_out[1], 0.0f);
		for (int m = 0; m < N_PROJ; m++) {
			static const char *const proj[N_PROJ] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
				                                      "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
				                                      "mlp.down_proj" };
			long n = (long)w.lay.n_out[m] * w.lay.n_in[m];

			snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, proj[m]);
			if (!nf4) {
				ok &= bf16_matches((const bf16 *)(rec + w.lay.weight[m]), name, n, 0.0f);
			} else {
				bf16 *src = xmalloc((size_t)n * sizeof *src);
				uint8_t *packed = xmalloc((size_t)n / 2);
				float *absmax = xmalloc((size_t)n / 64 * sizeof *absmax);

				for (long i = 0; i < n; i++)
					src[i] = bf16_from_f32(value_of(name, i));
				nf4_quantize_bf16(packed, absmax, src, n);
				ok &= memcmp(packed, rec + w.lay.weight[m], (size_t)n / 2) == 0 &&
				      memcmp(absmax, rec + w.lay.absmax[m], (size_t)n / 64 * sizeof *absmax) == 0;
				free(src);
				free(packed);
				free(absmax);
			}
		}
	}
	CHECKF(ok, "%s layer values from the checkpoint", nf4 ? "nf4" : "bf16");
	host_weights_free(&w);
	model_config_free(&mc);
}

static void check_bad_checkpoint(const char *base, const char *skip, const char *bad_shape, const char *expect)
{
	char *dir = xasprintf("%s/bad-%s", base, skip ? "missing" : "shape");
	struct model_config mc;
	struct host_weights w;
	char err[1024];

	if (write_checkpoint(dir, skip, bad_shape) < 0 || model_config_resolve(&mc, dir, NULL, err, sizeof err) < 0) {
		CHECKF(0, "cannot build the broken checkpoint %s", dir);
		free(dir);
		return;
	}
	CHECKF(host_weights_load(&w, backend_cpu(), &mc, 0, 42, err, sizeof err) == -1, "%s must not load", dir);
	CHECKF(strstr(err, skip ? skip : bad_shape) != NULL && strstr(err, expect) != NULL, "message: \"%s\"", err);
	model_config_free(&mc);
	free(dir);
}

/* The whole run (what poros-train's main calls) on the checkpoint. */
static void check_train_from_checkpoint(const char *dir)
{
	struct train_config cfg;
	FILE *out = tmpfile();
	char line[4096] = "", *events;
	cJSON *sum, *w;
	size_t n;

	tt_config(&cfg, dir);
	free(cfg.configs_dir);
	cfg.configs_dir = NULL;
	cfg.precision = PRECISION_NF4;
	cfg.mode = MODE_BLOCKWISE;
	cfg.method = METHOD_POROS;
	cfg.out_dir = xasprintf("%s/run", dir);
	CHECKF(train_run(&cfg, out) == 0, "train_run on the checkpoint failed");
	rewind(out);
	n = fread(line, 1, sizeof line - 1, out);
	line[n] = '\0';
	fclose(out);
	sum = cJSON_Parse(line);
	w = cJSON_GetObjectItemCaseSensitive(sum, "weights");
	CHECKF(cJSON_IsString(w) && strcmp(w->valuestring, "real") == 0, "summary: %s", line);
	CHECKF(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(sum, "steps")) == 3, "summary: %s", line);
	cJSON_Delete(sum);
	events = xasprintf("%s/events.jsonl", cfg.out_dir);
	{
		char *text = read_whole_file(events, &n);
		int lines = 0;

		for (size_t i = 0; text && i < n; i++)
			lines += text[i] == '\n';
		CHECKF(lines == 3, "events.jsonl has %d lines", lines);
		free(text);
	}
	free(events);
	train_config_free(&cfg);
}

int main(int argc, char **argv)
{
	char base[] = "/tmp/poros-test-train-weights-XXXXXX", *good, cmd[128];

	set_progname("test_train_weights");
	if (argc == 3 && strcmp(argv[1], "--write-checkpoint") == 0)
		return write_checkpoint(argv[2], NULL, NULL) < 0;
	setenv("HF_HOME", "/nonexistent-poros-hf-home", 1);
	unsetenv("HF_HUB_CACHE");
	check_synthetic("poros/tiny-qwen2", 0);
	check_synthetic("poros/tiny-qwen2", 1);
	check_synthetic("poros/tiny-qwen3", 1);
	check_synthetic("poros/tiny-llama", 0);
	if (mkdtemp(base) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	good = xasprintf("%s/good", base);
	CHECKF(write_checkpoint(good, NULL, NULL) == 0, "cannot write the checkpoint");
	check_checkpoint_values(good, 0);
	check_checkpoint_values(good, 1);
	check_bad_checkpoint(base, "model.layers.2.mlp.up_proj.weight", NULL, "not found");
	check_bad_checkpoint(base, NULL, "model.layers.1.self_attn.v_proj.weight", "has shape [31,64] (expected [32,64])");
	check_train_from_checkpoint(good);
	free(good);
	snprintf(cmd, sizeof cmd, "rm -rf %s", base);
	if (system(cmd) != 0)
		fprintf(stderr, "test_train_weights: could not remove %s\n", base);
	fprintf(stderr, "test_train_weights: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
