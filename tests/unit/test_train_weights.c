/* tests/unit/test_train_weights.c: host weights.
 *   - synthetic weights are the same for one seed and differ for another
 *     (bf16 and NF4), and the layer layout is aligned and non-overlapping;
 *   - a tiny HF checkpoint (config.json + model.safetensors with HF names,
 *     bf16 and f32 tensors) loads value for value (NF4: exactly what
 *     nf4_quantize gives), a missing or misshapen tensor is an error naming
 *     it, and poros-train's run trains from it with "weights": "real";
 *   - BF16, F16 and F32 files of the same values load to the same bits,
 *     F64 is refused; a dangling link, a FIFO, a directory or no weights
 *     at all are errors naming the file (never synthetic weights); a
 *     config claiming a larger model than its checkpoint is refused from
 *     the headers with a small peak RSS.
 * `test_train_weights --write-checkpoint DIR` only writes the checkpoint
 * (tests/train.bats uses it as a fixture generator). */
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_train_common.h"

#include "util/util.h"
#include "model/model.h"

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
		size[n++] = lay->nf4 ? numel / 2 : (size_t)(lay->n_out[m] + lay->ext) * lay->ld[m] * 2;
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
	CHECKF(host_weights_load(&a, backend_cpu(), &mc, nf4, 0, 42, NULL, err, sizeof err) == 0, "%s", err);
	CHECKF(host_weights_load(&b, backend_cpu(), &mc, nf4, 0, 42, NULL, err, sizeof err) == 0, "%s", err);
	CHECKF(host_weights_load(&c, backend_cpu(), &mc, nf4, 0, 43, NULL, err, sizeof err) == 0, "%s", err);
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

/* How tensors are stored: MIXED as HF mixes them (norms and biases F32,
 * the rest BF16); the others every tensor in one dtype, with values that
 * BF16, F16 and F32 all hold exactly (the same checkpoint three ways). */
enum ck_dtype { CK_MIXED, CK_BF16, CK_F16, CK_F32, CK_F64 };

/* A value BF16 and F16 both represent: the bf16 rounding, kept only when
 * F16 holds it exactly (else 0, which both hold). */
static float exact_value(float v)
{
	float b = f32_from_bf16(bf16_from_f32(v));

	return st_f32_from_f16(st_f16_from_f32(b)) == b ? b : 0.0f;
}

static int write_checkpoint_as(const char *dir, const char *skip, const char *bad_shape, enum ck_dtype dt);

/* Writes DIR/config.json (the tiny Qwen2's) and DIR/model.safetensors;
 * skip leaves one tensor out, bad_shape gives that tensor one row less. */
static int write_checkpoint(const char *dir, const char *skip, const char *bad_shape)
{
	return write_checkpoint_as(dir, skip, bad_shape, CK_MIXED);
}

static int write_checkpoint_as(const char *dir, const char *skip, const char *bad_shape, enum ck_dtype dt)
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
		void *data = xmalloc((size_t)numel * 8);
		enum st_dtype sd = dt == CK_MIXED ? (t[i].f32 ? ST_F32 : ST_BF16) :
		                   dt == CK_BF16 ? ST_BF16 : dt == CK_F16 ? ST_F16 : dt == CK_F32 ? ST_F32 : ST_F64;

		if (bad_shape && strcmp(bad_shape, t[i].name) == 0)
			t[i].rows--;
		numel = t[i].rows * (t[i].cols ? t[i].cols : 1);
		for (long long j = 0; j < numel; j++) {
			float v = t[i].offset + value_of(t[i].name, (long)j);

			if (dt != CK_MIXED)
				v = exact_value(v);
			if (sd == ST_F32)
				((float *)data)[j] = v;
			else if (sd == ST_BF16)
				((bf16 *)data)[j] = bf16_from_f32(v);
			else if (sd == ST_F16)
				((uint16_t *)data)[j] = st_f16_from_f32(v);
			else
				((double *)data)[j] = v;
		}
		out[i].name = t[i].name;
		out[i].dtype = sd;
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
	if (host_weights_load(&w, backend_cpu(), &mc, nf4, 0, 42, NULL, err, sizeof err) < 0) {
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
	CHECKF(host_weights_load(&w, backend_cpu(), &mc, 0, 0, 42, NULL, err, sizeof err) == -1, "%s must not load", dir);
	CHECKF(strstr(err, skip ? skip : bad_shape) != NULL && strstr(err, expect) != NULL, "message: \"%s\"", err);
	model_config_free(&mc);
	free(dir);
}

/* The host copy of a checkpoint, or NULL with a failed check. */
static int load_dir(struct host_weights *w, struct model_config *mc, const char *dir, int nf4, int ext, char *err,
                    size_t errsz)
{
	if (model_config_resolve(mc, dir, NULL, err, errsz) < 0)
		return -1;
	if (host_weights_load(w, backend_cpu(), mc, nf4, ext, 42, NULL, err, errsz) < 0) {
		model_config_free(mc);
		return -1;
	}
	return 0;
}

/* BF16, F16 and F32 files of the same values give the same host bytes
 * (each converted to bf16 once, round to nearest even); F64 is refused. */
static void check_dtypes(const char *base)
{
	static const char *const names[3] = { "bf16", "f16", "f32" };
	static const enum ck_dtype dts[3] = { CK_BF16, CK_F16, CK_F32 };
	struct host_weights w[3];
	struct model_config mc[3], m64;
	struct host_weights w64;
	char err[1024], *dir;
	int loaded = 0;

	for (int i = 0; i < 3; i++) {
		dir = xasprintf("%s/dtype-%s", base, names[i]);
		CHECKF(write_checkpoint_as(dir, NULL, NULL, dts[i]) == 0, "write %s", dir);
		if (load_dir(&w[i], &mc[i], dir, 0, 0, err, sizeof err) < 0)
			CHECKF(0, "%s checkpoint: %s", names[i], err);
		else
			loaded |= 1 << i;
		free(dir);
	}
	if (loaded == 7) {
		for (int i = 1; i < 3; i++) {
			size_t layers = w[0].lay.stride * (size_t)w[0].n_layers;

			CHECKF(w[i].real && memcmp(w[0].layers, w[i].layers, layers) == 0 &&
			           memcmp(w[0].globals, w[i].globals, w[0].glob.bytes) == 0,
			       "%s checkpoint loads to the bf16 checkpoint's bits", names[i]);
		}
		/* and the values are not all the zeros exact_value falls back to */
		CHECKF(((const bf16 *)(w[0].globals + w[0].glob.embed))[1] != 0, "embedding values are not zero");
	}
	for (int i = 0; i < 3; i++)
		if (loaded & (1 << i)) {
			host_weights_free(&w[i]);
			model_config_free(&mc[i]);
		}
	dir = xasprintf("%s/dtype-f64", base);
	CHECKF(write_checkpoint_as(dir, NULL, NULL, CK_F64) == 0, "write %s", dir);
	CHECKF(load_dir(&w64, &m64, dir, 0, 0, err, sizeof err) < 0 &&
	           strstr(err, "tensor \"model.embed_tokens.weight\": dtype F64 is not supported") != NULL,
	       "F64 refused by name: %s", err);
	free(dir);
}

/* Weights that are not there or not a file: an error naming the file,
 * never synthetic weights; a FIFO does not block the open. */
static void check_unreadable(const char *base)
{
	static const char *const cases[] = { "dangling", "fifo", "missing", "dangling-index", "dir" };
	struct host_weights w;
	struct model_config mc;
	char err[1024];

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char *dir = xasprintf("%s/unreadable-%s", base, cases[i]);
		char *st = xasprintf("%s/model.safetensors", dir), *index = xasprintf("%s/model.safetensors.index.json", dir);
		const char *want = NULL;

		CHECKF(write_checkpoint(dir, NULL, NULL) == 0, "write %s", dir);
		unlink(st);
		switch (i) {
		case 0:
			CHECKF(symlink("../blobs/0123abcd.incomplete", st) == 0, "symlink");
			want = "model.safetensors: a dangling symbolic link";
			break;
		case 1:
			CHECKF(mkfifo(st, 0644) == 0, "mkfifo");
			want = "model.safetensors: not a regular file";
			break;
		case 2:
			want = "no model.safetensors or model.safetensors.index.json (a checkpoint directory must hold its weights)";
			break;
		case 3:
			CHECKF(symlink("../blobs/feed.incomplete", index) == 0, "symlink");
			want = "model.safetensors.index.json: a dangling symbolic link";
			break;
		default:
			CHECKF(mkdir(st, 0755) == 0, "mkdir");
			want = "model.safetensors: not a regular file";
			break;
		}
		err[0] = '\0';
		CHECKF(load_dir(&w, &mc, dir, 0, 0, err, sizeof err) < 0 && strstr(err, want) != NULL, "%s: \"%s\" lacks \"%s\"",
		       cases[i], err, want);
		free(dir);
		free(st);
		free(index);
	}
}

/* The process's peak RSS counts everything the earlier checks (and the
 * CUDA runtime's start) touched: reset it (Linux: clear_refs 5) so the
 * check measures the refusal alone. */
static void reset_peak_rss(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");

	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

/* A /proc/self/status field in KiB (VmRSS, VmHWM), -1 when absent. */
static long status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t n = strlen(field);
	long kib = -1;

	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, field, n) == 0 && line[n] == ':') {
			kib = strtol(line + n + 1, NULL, 10);
			break;
		}
	if (f)
		fclose(f);
	return kib;
}

/* How far the resident set grew (KiB) since reset_peak_rss at base_kib;
 * getrusage's lifetime peak where /proc has no VmHWM. */
static long peak_rss_kib(struct rusage *ru, long base_kib)
{
	long hwm = status_kib("VmHWM");

	if (hwm < 0 && getrusage(RUSAGE_SELF, ru) == 0)
		return ru->ru_maxrss;
	return hwm - (base_kib > 0 ? base_kib : 0);
}

/* A config that claims a far larger model than its small checkpoint: the
 * shapes are refused from the headers, before the host copy is allocated
 * (peak RSS stays far below the 3.8 GB the claimed model would take). */
static void check_oversized_config(const char *base)
{
	char *dir = xasprintf("%s/oversized", base), *cfg = xasprintf("%s/oversized/config.json", base);
	struct host_weights w;
	struct model_config mc;
	struct rusage ru;
	char err[1024], *text;
	long peak, base_kib;
	cJSON *o;

	CHECKF(write_checkpoint(dir, NULL, NULL) == 0, "write %s", dir);
	o = json_read_file(cfg, err, sizeof err);
	if (o == NULL) {
		CHECKF(0, "%s", err);
		return;
	}
	cJSON_ReplaceItemInObject(o, "hidden_size", cJSON_CreateNumber(4096));
	cJSON_ReplaceItemInObject(o, "intermediate_size", cJSON_CreateNumber(11008));
	cJSON_ReplaceItemInObject(o, "vocab_size", cJSON_CreateNumber(32000));
	cJSON_ReplaceItemInObject(o, "head_dim", cJSON_CreateNumber(1024));
	text = cJSON_PrintUnformatted(o);
	CHECKF(atomic_write(cfg, text, strlen(text)) == 0, "rewrite config");
	/* the CUDA build maps cuBLAS at start (~150 MB resident): count the growth */
	reset_peak_rss();
	base_kib = status_kib("VmRSS");
	CHECKF(load_dir(&w, &mc, dir, 0, 0, err, sizeof err) < 0 &&
	           strstr(err, "tensor \"model.embed_tokens.weight\" has shape [256,64] (expected [32000,4096]") != NULL,
	       "oversized config refused: %s", err);
	/* the peak since the reset (KiB); the claimed model's host copy would be GBs */
	peak = peak_rss_kib(&ru, base_kib);
	CHECKF(peak >= 0 && peak < 100 * 1024, "RSS grew %ld KiB by the refusal", peak);
	free(text);
	cJSON_Delete(o);
	free(dir);
	free(cfg);
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
	cfg.cell.precision = PRECISION_NF4;
	cfg.mode = MODE_BLOCKWISE;
	cfg.cell.method = METHOD_POROS;
	cfg.out_dir = xasprintf("%s/run", dir);
	cfg.dataset_named = 1; /* --dataset synthetic: random tokens through real weights, by name */
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

/* bf16 with the LoRA extension's rows and columns (ext): each projection
 * (N + E, K + E) rows K + E apart holds the compact layout's values in
 * its top-left (N, K) and zeros elsewhere, synthetic or read; everything
 * else in the record is the same bytes.  NF4 ignores ext. */
static void check_pitched(const char *model_or_dir, const char *configs)
{
	enum { EXT = 32 };
	struct model_config mc;
	struct host_weights a, b, q;
	char err[1024];
	int ok = 1;

	if (model_config_resolve(&mc, model_or_dir, configs, err, sizeof err) < 0) {
		CHECKF(0, "%s", err);
		return;
	}
	if (host_weights_load(&a, backend_cpu(), &mc, 0, 0, 42, NULL, err, sizeof err) < 0 ||
	    host_weights_load(&b, backend_cpu(), &mc, 0, EXT, 42, NULL, err, sizeof err) < 0 ||
	    host_weights_load(&q, backend_cpu(), &mc, 1, EXT, 42, NULL, err, sizeof err) < 0) {
		CHECKF(0, "%s: %s", model_or_dir, err);
		model_config_free(&mc);
		return;
	}
	CHECKF(b.lay.ext == EXT && q.lay.ext == 0 && b.lay.stride > a.lay.stride, "%s: ext %d, NF4 %d, stride %zu vs %zu",
	       model_or_dir, b.lay.ext, q.lay.ext, b.lay.stride, a.lay.stride);
	check_layout(&b.lay);
	for (int l = 0; l < a.n_layers; l++) {
		const unsigned char *ra = a.layers + (size_t)l * a.lay.stride, *rb = b.layers + (size_t)l * b.lay.stride;

		ok &= memcmp(ra, rb, a.lay.weight[0]) == 0; /* norms and biases come first, at the same offsets */
		for (int m = 0; m < N_PROJ; m++) {
			const bf16 *wa = (const bf16 *)(ra + a.lay.weight[m]), *wb = (const bf16 *)(rb + b.lay.weight[m]);
			int N = a.lay.n_out[m], K = a.lay.n_in[m], ld = b.lay.ld[m];

			ok &= a.lay.ld[m] == K && ld == K + EXT;
			for (long r = 0; r < N + EXT; r++)
				for (long k = 0; k < ld; k++)
					ok &= wb[r * ld + k] == (r < N && k < K ? wa[r * K + k] : 0);
		}
	}
	CHECKF(ok, "%s: the pitched bf16 layout holds the compact one's values and zeros", model_or_dir);
	host_weights_free(&a);
	host_weights_free(&b);
	host_weights_free(&q);
	model_config_free(&mc);
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
	/* first, while the process has touched little memory */
	check_oversized_config(base);
	good = xasprintf("%s/good", base);
	CHECKF(write_checkpoint(good, NULL, NULL) == 0, "cannot write the checkpoint");
	check_checkpoint_values(good, 0);
	check_checkpoint_values(good, 1);
	check_pitched(good, NULL);
	check_pitched("poros/tiny-qwen3", "configs/models");
	check_bad_checkpoint(base, "model.layers.2.mlp.up_proj.weight", NULL, "not found");
	check_bad_checkpoint(base, NULL, "model.layers.1.self_attn.v_proj.weight",
	                     "has shape [31,64] (expected [32,64] from config.json)");
	check_dtypes(base);
	check_unreadable(base);
	check_train_from_checkpoint(good);
	free(good);
	snprintf(cmd, sizeof cmd, "rm -rf %s", base);
	if (system(cmd) != 0)
		fprintf(stderr, "test_train_weights: could not remove %s\n", base);
	fprintf(stderr, "test_train_weights: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
