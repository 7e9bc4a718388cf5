/* tools/poros-export/export.c: a PEFT LoRA adapter merged into its base
 * checkpoint, written as a bf16 Hugging Face checkpoint directory.
 *
 * Merge: W' = bf16(W + scale * (B @ A)) with every step in fp32 (the sum
 * over r in order 0..R-1), scale = lora_alpha / r (alpha / sqrt(r) with
 * use_rslora), round to nearest even; PEFT's own merge computes the same
 * up to its GEMM's summation order.  Every other tensor is copied, BF16
 * bit for bit, F32/F16 rounded to BF16.  The output is built in a
 * temporary directory beside --out and renamed into place at the end, so
 * a failed or killed export leaves no partial checkpoint behind.
 *
 * The library's st_write builds a whole file in memory; a 5 GB shard would
 * need that much again, so shards are streamed here, then re-read with
 * st_open as a check of what was written. */
#include "export.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "adapter.h"
#include "cell.h"
#include "jsonl.h"
#include "model_config.h"
#include "ops.h"
#include "safetensors.h"
#include "util.h"

#define ADAPTER_CONFIG "adapter_config.json"
#define ADAPTER_WEIGHTS "adapter_model.safetensors"
#define N_MODULES CELL_MAX_TARGETS

/* Copied from the base when present: what transformers' tokenizer and
 * generate() read next to the weights. */
static const char *const tokenizer_files[] = {
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
	"chat_template.jinja", "chat_template.json", "generation_config.json", "vocab.json",
	"merges.txt", "tokenizer.model",
};
#define N_TOKENIZER_FILES (sizeof tokenizer_files / sizeof *tokenizer_files)

struct lora_pair {
	const struct st_tensor *a, *b;   /* (R,K), (N,R) in the adapter file */
	const struct st_tensor *w;       /* (N,K) in the base */
	const struct st_file *wf;
};

struct out_tensor {
	const struct st_file *f;
	const struct st_tensor *t;
	enum st_dtype dtype;             /* as written */
	size_t nbytes;                   /* as written */
	const struct lora_pair *lora;    /* NULL: copied */
	int shard;
};

struct shard { int first, count; size_t bytes; char *name; };

struct job {
	const struct export_opts *o;
	char *err;
	size_t errsz;
	/* the base */
	struct model_config mc;
	cJSON *config;
	struct st_checkpoint ck;
	/* the adapter */
	char *acfg_path, *aweights_path;
	int rank, rslora;
	double alpha;
	float scale;
	unsigned mask;
	unsigned char *layer_on;         /* layers_to_transform, or NULL: every layer */
	char *adapter_base;              /* base_model_name_or_path, or NULL */
	struct st_file af;
	int af_open;
	struct lora_pair *pairs;         /* [layer * N_MODULES + module]; a == NULL: none */
	int npairs;
	/* the output */
	char *out, *parent, *name;       /* --out without trailing '/', its directory and name */
	struct out_tensor *t;
	int n;
	struct shard *shards;
	int nshards;
	size_t total_size;
};

static int fail(struct job *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct job *j, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->err, j->errsz, fmt, ap);
	va_end(ap);
	return code;
}

static int is_float(enum st_dtype d)
{
	return d == ST_F32 || d == ST_F16 || d == ST_BF16;
}

static char *human_bytes(char *buf, size_t n, double b)
{
	static const char *const unit[] = { "B", "KB", "MB", "GB", "TB" };
	int u = 0;

	while (b >= 1000 && u < 4) {
		b /= 1000;
		u++;
	}
	snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
	return buf;
}

/* --- sizes --------------------------------------------------------------- */

int export_parse_size(const char *s, long long *out, const char **why)
{
	static const struct { const char *suffix; long long mult; } units[] = {
		{ "KiB", 1LL << 10 }, { "MiB", 1LL << 20 }, { "GiB", 1LL << 30 }, { "TiB", 1LL << 40 },
		{ "KB", 1000LL }, { "MB", 1000000LL }, { "GB", 1000000000LL }, { "TB", 1000000000000LL },
	};
	size_t len = strlen(s), digits = 0;
	long long mult = 1, v = 0;

	while (digits < len && isdigit((unsigned char)s[digits]))
		digits++;
	if (digits == 0)
		return *why = "not a size (e.g. 5GB, 500MB, 2GiB or a byte count)", -1;
	if (digits < len) {
		const char *suf = s + digits;
		size_t i;

		/* transformers reads "5Gb" as bits: say so rather than guess */
		if (suf[strlen(suf) - 1] == 'b' && strlen(suf) == 2)
			return *why = "a unit ending in lower-case b means bits to transformers (write GB, MB, KB, or GiB ...)", -1;
		for (i = 0; i < sizeof units / sizeof *units; i++)
			if (strcasecmp(suf, units[i].suffix) == 0)
				break;
		if (i == sizeof units / sizeof *units)
			return *why = "unknown unit (expected KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB)", -1;
		mult = units[i].mult;
	}
	for (size_t i = 0; i < digits; i++) {
		if (v > (LLONG_MAX - 9) / 10)
			return *why = "too large", -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v == 0)
		return *why = "must be at least 1 byte", -1;
	if (v > LLONG_MAX / mult)
		return *why = "too large", -1;
	*out = v * mult;
	return 0;
}

/* --- the adapter's configuration ----------------------------------------- */

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

static int parse_lora_config(struct job *j)
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

/* --- the adapter's weights ----------------------------------------------- */

static const char *const module_group[N_MODULES] = { "self_attn", "self_attn", "self_attn", "self_attn",
	                                                   "mlp", "mlp", "mlp" };

static int not_lora(struct job *j, const char *name)
{
	const char *p = j->aweights_path;

	if (strstr(name, "lora_magnitude_vector") != NULL)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\": DoRA is not supported", p, name);
	if (strstr(name, "lora_embedding_") != NULL)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\": LoRA on embeddings is not supported", p, name);
	if (strstr(name, "modules_to_save") != NULL || strstr(name, "trainable_tokens") != NULL)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\": fully trained modules are not supported", p, name);
	return fail(j, EXIT_USAGE, "%s: tensor \"%s\" is not a lora_A/lora_B weight of q/k/v/o/gate/up/down_proj "
	            "(base_model.model.model.layers.<L>.self_attn.q_proj.lora_A.weight ...)", p, name);
}

static void shape_text(char *buf, size_t n, const struct st_tensor *t)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int i = 0; i < t->ndim && at + 24 < n; i++)
		at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? "," : "", t->shape[i]);
}

/* Each tensor a LoRA A (R,K) or B (N,R) of a targeted module in an adapted
 * layer; each adapted module with both. */
static int load_pairs(struct job *j)
{
	const char *p = j->aweights_path;
	int L = j->mc.num_hidden_layers;
	char shape[96];

	j->pairs = xcalloc((size_t)L * N_MODULES, sizeof *j->pairs);
	for (int i = 0; i < j->af.n; i++) {
		const struct st_tensor *t = &j->af.t[i];
		int layer, module, is_b;
		struct lora_pair *pr;

		if (adapter_key_parse(t->name, &layer, &module, &is_b) < 0)
			return not_lora(j, t->name);
		if (!(j->mask >> module & 1u))
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\": %s is not in target_modules", p, t->name,
			            lora_module_names[module]);
		if (layer >= L)
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\": layer %d, but the base has %d layers", p, t->name, layer, L);
		if (j->layer_on != NULL && !j->layer_on[layer])
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\": layer %d is not in layers_to_transform", p, t->name, layer);
		shape_text(shape, sizeof shape, t);
		if (t->ndim != 2 || !is_float(t->dtype))
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\": a %s tensor of shape [%s], not a float matrix", p, t->name,
			            st_dtype_name(t->dtype), shape);
		if (t->shape[is_b ? 1 : 0] != j->rank)
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\" has shape [%s]: rank %lld, but %s has r = %d", p, t->name,
			            shape, t->shape[is_b ? 1 : 0], j->acfg_path, j->rank);
		pr = &j->pairs[layer * N_MODULES + module];
		if (is_b)
			pr->b = t;
		else
			pr->a = t;
	}
	for (int l = 0; l < L; l++) {
		if (j->layer_on != NULL && !j->layer_on[l])
			continue;
		for (int m = 0; m < N_MODULES; m++) {
			struct lora_pair *pr = &j->pairs[l * N_MODULES + m];

			if (!(j->mask >> m & 1u))
				continue;
			if (pr->a == NULL || pr->b == NULL)
				return fail(j, EXIT_USAGE, "%s: layer %d's %s has no lora_%c (target_modules names it, so every "
				            "adapted layer needs both A and B)", p, l, lora_module_names[m], pr->a == NULL ? 'A' : 'B');
			j->npairs++;
		}
	}
	return 0;
}

/* The base weight each pair merges into: there, a float (N,K) with the
 * config's shape, and the pair's (R,K) and (N,R) around it. */
static int find_weights(struct job *j)
{
	char name[160], ws[96], as[96], bs[96];

	for (int l = 0; l < j->mc.num_hidden_layers; l++)
		for (int m = 0; m < N_MODULES; m++) {
			struct lora_pair *pr = &j->pairs[l * N_MODULES + m];
			int n, k;

			if (pr->a == NULL)
				continue;
			snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, module_group[m], lora_module_names[m]);
			pr->w = st_checkpoint_find(&j->ck, name, &pr->wf);
			if (pr->w == NULL)
				return fail(j, EXIT_USAGE, "%s: tensor \"%s\" not found (the adapter has a LoRA for it)", j->ck.dir, name);
			model_config_module_shape(&j->mc, m, &n, &k);
			shape_text(ws, sizeof ws, pr->w);
			if (pr->w->ndim != 2 || !is_float(pr->w->dtype) || pr->w->shape[0] != n || pr->w->shape[1] != k)
				return fail(j, EXIT_USAGE, "%s: tensor \"%s\": a %s tensor of shape [%s], but config.json makes it a "
				            "float [%d,%d]", j->ck.dir, name, st_dtype_name(pr->w->dtype), ws, n, k);
			if (pr->a->shape[1] != k || pr->b->shape[0] != n) {
				shape_text(as, sizeof as, pr->a);
				shape_text(bs, sizeof bs, pr->b);
				return fail(j, EXIT_USAGE, "%s: layer %d's %s: lora_A [%s] and lora_B [%s] do not fit the base's "
				            "[%d,%d] (an adapter of another model?)", j->aweights_path, l, lora_module_names[m], as, bs,
				            n, k);
			}
		}
	return 0;
}

/* --- the base ------------------------------------------------------------ */

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

/* Resolves --base; a config without weights (a configs/models shape, or a
 * directory with only config.json) is refused: poros-train trains those
 * on synthetic weights, and there is nothing real to export. */
static int open_base(struct job *j)
{
	const char *base = j->o->base;
	char lerr[768], *pickle;
	const cJSON *q;
	int rc;

	if (is_file(base))
		return fail(j, EXIT_USAGE, "--base %s: a file, not a checkpoint directory (config.json + safetensors); a "
		            "configs/models shape has synthetic weights, which cannot be exported", base);
	if (model_config_resolve(&j->mc, base, j->o->configs_dir, lerr, sizeof lerr) < 0)
		return fail(j, EXIT_USAGE, "--base: %s", lerr);
	if (j->mc.checkpoint_dir == NULL) {
		if (!is_dir(base))
			return fail(j, EXIT_USAGE, "--base %s: %s is a model shape that poros-train fills with synthetic weights: "
			            "synthetic weights cannot be exported (give a checkpoint directory)", base, j->mc.config_path);
		pickle = xasprintf("%s/pytorch_model.bin", base);
		rc = is_file(pickle);
		free(pickle);
		if (rc)
			return fail(j, EXIT_USAGE, "--base %s: only pytorch_model.bin (a pickle): poros-export reads safetensors",
			            base);
		return fail(j, EXIT_USAGE, "--base %s: config.json but no model.safetensors or model.safetensors.index.json: "
		            "without weights (synthetic weights) there is nothing to export", base);
	}
	j->config = json_read_file(j->mc.config_path, lerr, sizeof lerr);
	if (j->config == NULL)
		return fail(j, EXIT_USAGE, "%s", lerr);
	q = cJSON_GetObjectItemCaseSensitive(j->config, "quantization_config");
	if (q != NULL && !cJSON_IsNull(q))
		return fail(j, EXIT_USAGE, "%s: \"quantization_config\": a quantized base cannot be merged into (export from "
		            "the unquantized checkpoint)", j->mc.config_path);
	if (st_checkpoint_open(&j->ck, j->mc.checkpoint_dir, lerr, sizeof lerr) < 0)
		return fail(j, EXIT_USAGE, "%s", lerr);
	return 0;
}

static int open_adapter(struct job *j)
{
	const char *dir = j->o->adapter;
	char lerr[768], *bin;
	struct stat st;
	int rc;

	if (stat(dir, &st) < 0)
		return fail(j, EXIT_USAGE, "--adapter %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail(j, EXIT_USAGE, "--adapter %s: not a directory", dir);
	j->acfg_path = xasprintf("%s/" ADAPTER_CONFIG, dir);
	j->aweights_path = xasprintf("%s/" ADAPTER_WEIGHTS, dir);
	if (!is_file(j->acfg_path))
		return fail(j, EXIT_USAGE, "--adapter %s: no " ADAPTER_CONFIG " (not a PEFT adapter directory)", dir);
	if ((rc = parse_lora_config(j)) != 0)
		return rc;
	if (!is_file(j->aweights_path)) {
		bin = xasprintf("%s/adapter_model.bin", dir);
		rc = is_file(bin);
		free(bin);
		return fail(j, EXIT_USAGE, "--adapter %s: %s", dir,
		            rc ? "only adapter_model.bin (a pickle): poros-export reads " ADAPTER_WEIGHTS
		               : "no " ADAPTER_WEIGHTS);
	}
	if (st_open(&j->af, j->aweights_path, lerr, sizeof lerr) < 0)
		return fail(j, EXIT_USAGE, "%s", lerr);
	j->af_open = 1;
	return 0;
}

/* The path as the adapter records it names the same checkpoint as --base. */
static int same_base(const struct job *j)
{
	char *a, *b;
	int same;

	if (j->adapter_base == NULL || strcmp(j->adapter_base, j->o->base) == 0)
		return 1;
	a = realpath(j->adapter_base, NULL);
	b = realpath(j->mc.checkpoint_dir, NULL);
	same = a != NULL && b != NULL && strcmp(a, b) == 0;
	free(a);
	free(b);
	return same;
}

/* --- the plan: tensors in order, shards ---------------------------------- */

/* Digit runs compared as numbers, so layers.2 comes before layers.10. */
static int natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			const char *ea = a, *eb = b, *sa, *sb;
			int c;

			while (isdigit((unsigned char)*ea))
				ea++;
			while (isdigit((unsigned char)*eb))
				eb++;
			for (sa = a; *sa == '0' && sa + 1 < ea; sa++)
				;
			for (sb = b; *sb == '0' && sb + 1 < eb; sb++)
				;
			if (ea - sa != eb - sb)
				return ea - sa < eb - sb ? -1 : 1;
			if ((c = strncmp(sa, sb, (size_t)(ea - sa))) != 0)
				return c;
			if (ea - a != eb - b)
				return ea - a < eb - b ? -1 : 1;
			a = ea;
			b = eb;
		} else if (*a != *b) {
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		} else {
			a++;
			b++;
		}
	}
	return (unsigned char)*a - (unsigned char)*b;
}

static int cmp_out(const void *x, const void *y)
{
	return natural_cmp(((const struct out_tensor *)x)->t->name, ((const struct out_tensor *)y)->t->name);
}

static int plan(struct job *j)
{
	int total = 0;

	for (int i = 0; i < j->ck.nfiles; i++)
		total += j->ck.files[i].n;
	j->t = xcalloc((size_t)total + 1, sizeof *j->t);
	for (int i = 0; i < j->ck.nfiles; i++)
		for (int k = 0; k < j->ck.files[i].n; k++) {
			struct out_tensor *o = &j->t[j->n++];

			o->f = &j->ck.files[i];
			o->t = &j->ck.files[i].t[k];
			if (o->t->dtype == ST_F64)
				return fail(j, EXIT_USAGE, "%s: tensor \"%s\": dtype F64 is not supported", o->f->path, o->t->name);
			o->dtype = is_float(o->t->dtype) ? ST_BF16 : o->t->dtype;
			o->nbytes = (size_t)st_numel(o->t) * st_dtype_size(o->dtype);
		}
	qsort(j->t, (size_t)j->n, sizeof *j->t, cmp_out);
	for (int i = 1; i < j->n; i++)
		if (strcmp(j->t[i].t->name, j->t[i - 1].t->name) == 0)
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\" is in two shards (%s and %s)", j->ck.dir, j->t[i].t->name,
			            j->t[i - 1].f->path, j->t[i].f->path);
	for (int l = 0; l < j->mc.num_hidden_layers; l++)
		for (int m = 0; m < N_MODULES; m++) {
			const struct lora_pair *pr = &j->pairs[l * N_MODULES + m];

			if (pr->a == NULL)
				continue;
			for (int i = 0; i < j->n; i++)
				if (j->t[i].t == pr->w)
					j->t[i].lora = pr;
		}
	/* transformers' rule: a new shard when the next tensor would pass the
	 * limit; a tensor larger than the limit gets a shard of its own */
	j->shards = xcalloc((size_t)j->n + 1, sizeof *j->shards);
	for (int i = 0; i < j->n; i++) {
		struct shard *s = j->nshards ? &j->shards[j->nshards - 1] : NULL;
		size_t b = j->t[i].nbytes;

		if (s == NULL || (s->count > 0 && s->bytes + b > (size_t)j->o->max_shard_size)) {
			s = &j->shards[j->nshards++];
			s->first = i;
		}
		s->count++;
		s->bytes += b;
		j->t[i].shard = j->nshards - 1;
		j->total_size += b;
	}
	for (int s = 0; s < j->nshards; s++)
		j->shards[s].name = j->nshards == 1 ? xstrdup("model.safetensors")
		                                    : xasprintf("model-%05d-of-%05d.safetensors", s + 1, j->nshards);
	return 0;
}

/* --- the scratch directory ------------------------------------------------
 * Everything is written into a fresh directory beside --out; at exit or on
 * a signal, unless committed, its files (each registered before it is
 * created) and the directory are removed.  The handler only unlinks
 * strings allocated before any signal can need them. */

static struct {
	char *dir;
	char **files;
	int cap;
	volatile sig_atomic_t nfiles, active;
} scratch;

static void scratch_remove(void)
{
	if (!scratch.active)
		return;
	scratch.active = 0;
	for (int i = 0; i < scratch.nfiles; i++)
		unlink(scratch.files[i]);
	rmdir(scratch.dir);
}

static void on_signal(int sig)
{
	scratch_remove();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int scratch_create(struct job *j, int nfiles)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };
	char *tmpl = xasprintf("%s/.%s.poros-export-XXXXXX", j->parent, j->name);

	scratch.files = xcalloc((size_t)nfiles, sizeof *scratch.files);
	scratch.cap = nfiles;
	if (mkdtemp(tmpl) == NULL) {
		fail(j, EXIT_RUNTIME, "%s: creating a temporary directory: %s", j->parent, strerror(errno));
		free(tmpl);
		return EXIT_RUNTIME;
	}
	chmod(tmpl, 0755);
	scratch.dir = tmpl;
	scratch.active = 1;
	atexit(scratch_remove);
	for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
		signal(sigs[i], on_signal);
	/* past a file size limit, a write error to report (and clean up after)
	 * rather than a kill */
	signal(SIGXFSZ, SIG_IGN);
	return 0;
}

/* Registers name inside the scratch directory; the path, owned by scratch. */
static char *scratch_path(const char *name)
{
	char *p = xasprintf("%s/%s", scratch.dir, name);

	if (scratch.nfiles >= scratch.cap)
		die(EXIT_RUNTIME, "internal error: more output files than planned");
	scratch.files[scratch.nfiles] = p;
	scratch.nfiles = scratch.nfiles + 1;
	return p;
}

static int write_all(int fd, const void *data, size_t len)
{
	const unsigned char *p = data;

	while (len > 0) {
		ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* A small file into the scratch directory, fsync'd. */
static int scratch_write(struct job *j, const char *name, const void *data, size_t len)
{
	char *path = scratch_path(name);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	if (fd < 0 || write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(e));
	}
	if (close(fd) < 0)
		return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	return 0;
}

/* --- writing tensors ----------------------------------------------------- */

/* Element i of a float tensor's data, as fp32 (data need not be aligned). */
static float load_f32(const unsigned char *p, enum st_dtype dt, size_t i)
{
	uint16_t h;
	float x;

	switch (dt) {
	case ST_F32:
		memcpy(&x, p + 4 * i, 4);
		return x;
	case ST_BF16:
		memcpy(&h, p + 2 * i, 2);
		return f32_from_bf16(h);
	default:
		memcpy(&h, p + 2 * i, 2);
		return st_f32_from_f16(h);
	}
}

/* out (N,K) = bf16(W + scale * (B @ A)); W (N,K) any float dtype at w,
 * B (N,R), A (R,K) fp32.  Per element: acc = sum over r = 0..R-1 of
 * B[n,r] * A[r,k], each product and sum rounded to fp32, then
 * W + scale * acc in fp32, then round to nearest even.  Rows in parallel:
 * each element's arithmetic is the same whatever the thread count. */
static void merge_lora(uint16_t *out, const unsigned char *w, enum st_dtype wdt, const float *b, const float *a,
                       float scale, long N, long K, int R)
{
#pragma omp parallel
	{
		float *acc = xmalloc((size_t)K * sizeof *acc);

#pragma omp for schedule(static)
		for (long n = 0; n < N; n++) {
			for (long k = 0; k < K; k++)
				acc[k] = 0.0f;
			for (int r = 0; r < R; r++) {
				const float br = b[n * R + r], *ar = a + (size_t)r * K;

				/* columns are independent: vector lanes change no result */
#pragma omp simd
				for (long k = 0; k < K; k++)
					acc[k] += br * ar[k];
			}
			for (long k = 0; k < K; k++) {
				float delta = scale * acc[k];

				out[n * K + k] = bf16_from_f32(load_f32(w, wdt, (size_t)(n * K + k)) + delta);
			}
		}
		free(acc);
	}
}

static int write_merged(struct job *j, int fd, const char *path, const struct out_tensor *o)
{
	const struct lora_pair *pr = o->lora;
	long N = (long)pr->w->shape[0], K = (long)pr->w->shape[1];
	int R = j->rank;
	float *a = xmalloc((size_t)R * (size_t)K * sizeof *a), *b = xmalloc((size_t)N * (size_t)R * sizeof *b);
	uint16_t *out = xmalloc((size_t)N * (size_t)K * sizeof *out);
	char lerr[512];
	int rc = 0;

	if (st_read_f32(&j->af, pr->a, a, (size_t)R * (size_t)K, lerr, sizeof lerr) < 0 ||
	    st_read_f32(&j->af, pr->b, b, (size_t)N * (size_t)R, lerr, sizeof lerr) < 0) {
		rc = fail(j, EXIT_USAGE, "%s", lerr);
		goto out;
	}
	merge_lora(out, st_data(pr->wf, pr->w), pr->w->dtype, b, a, j->scale, N, K, R);
	if (write_all(fd, out, o->nbytes) < 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
out:
	free(a);
	free(b);
	free(out);
	return rc;
}

/* A copied tensor: BF16 and non-float bytes as they are, F32/F16 rounded
 * to BF16 a chunk at a time. */
static int write_copied(struct job *j, int fd, const char *path, const struct out_tensor *o)
{
	const unsigned char *src = st_data(o->f, o->t);
	size_t n = (size_t)st_numel(o->t), chunk = (size_t)1 << 20;
	uint16_t *buf;

	if (o->t->dtype == o->dtype) {
		if (write_all(fd, src, o->nbytes) < 0)
			return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
		return 0;
	}
	buf = xmalloc(chunk * sizeof *buf);
	for (size_t at = 0; at < n; at += chunk) {
		size_t m = n - at < chunk ? n - at : chunk;

		for (size_t i = 0; i < m; i++)
			buf[i] = bf16_from_f32(load_f32(src, o->t->dtype, at + i));
		if (write_all(fd, buf, m * sizeof *buf) < 0) {
			free(buf);
			return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
		}
	}
	free(buf);
	return 0;
}

/* The shard's safetensors header: tensors in order, data packed, the
 * length padded with spaces to a multiple of 8 (as safetensors does). */
static char *shard_header(const struct job *j, const struct shard *s, size_t *len)
{
	cJSON *root = cJSON_CreateObject(), *meta, *e, *arr;
	size_t off = 0, hlen, padded;
	char *json, *out;

	/* transformers refuses a safetensors file without format "pt" */
	meta = cJSON_AddObjectToObject(root, "__metadata__");
	cJSON_AddStringToObject(meta, "format", "pt");
	for (int i = s->first; i < s->first + s->count; i++) {
		const struct out_tensor *o = &j->t[i];

		e = cJSON_AddObjectToObject(root, o->t->name);
		cJSON_AddStringToObject(e, "dtype", st_dtype_name(o->dtype));
		arr = cJSON_AddArrayToObject(e, "shape");
		for (int d = 0; d < o->t->ndim; d++)
			cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)o->t->shape[d]));
		arr = cJSON_AddArrayToObject(e, "data_offsets");
		cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)off));
		cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)(off + o->nbytes)));
		off += o->nbytes;
	}
	json = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (json == NULL)
		die(EXIT_RUNTIME, "out of memory");
	hlen = strlen(json);
	padded = (hlen + 7) & ~(size_t)7;
	out = xmalloc(8 + padded);
	for (int i = 0; i < 8; i++)
		out[i] = (char)((uint64_t)padded >> (8 * i) & 0xff);
	memcpy(out + 8, json, hlen);
	memset(out + 8 + hlen, ' ', padded - hlen);
	free(json);
	*len = 8 + padded;
	return out;
}

/* What was written, read back with the library's reader: the header parses
 * and names every tensor with its dtype, shape and size. */
static int verify_shard(struct job *j, const char *path, const struct shard *s)
{
	struct st_file f;
	char lerr[512];
	int rc = 0;

	if (st_open(&f, path, lerr, sizeof lerr) < 0)
		return fail(j, EXIT_RUNTIME, "reading back what was written: %s", lerr);
	if (f.n != s->count)
		rc = fail(j, EXIT_RUNTIME, "%s: read back %d tensors, wrote %d", path, f.n, s->count);
	for (int i = s->first; rc == 0 && i < s->first + s->count; i++) {
		const struct out_tensor *o = &j->t[i];
		const struct st_tensor *t = st_find(&f, o->t->name);

		if (t == NULL || t->dtype != o->dtype || t->nbytes != o->nbytes || t->ndim != o->t->ndim ||
		    memcmp(t->shape, o->t->shape, sizeof t->shape[0] * (size_t)t->ndim) != 0)
			rc = fail(j, EXIT_RUNTIME, "%s: tensor \"%s\" does not read back as written", path, o->t->name);
	}
	st_close(&f);
	return rc;
}

static int write_shard(struct job *j, const struct shard *s)
{
	char *path = scratch_path(s->name), sz[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc = 0, merged = 0;
	size_t hlen;
	char *header;

	if (fd < 0)
		return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	header = shard_header(j, s, &hlen);
	if (write_all(fd, header, hlen) < 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	free(header);
	for (int i = s->first; rc == 0 && i < s->first + s->count; i++) {
		rc = j->t[i].lora ? write_merged(j, fd, path, &j->t[i]) : write_copied(j, fd, path, &j->t[i]);
		merged += j->t[i].lora != NULL;
	}
	if (rc == 0 && fsync(fd) < 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	if (close(fd) < 0 && rc == 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	if (rc == 0)
		rc = verify_shard(j, path, s);
	if (rc == 0)
		warnmsg("%s: %d tensors (%d merged), %s", s->name, s->count, merged, human_bytes(sz, sizeof sz, (double)s->bytes));
	return rc;
}

/* --- the other files ----------------------------------------------------- */

static int cmp_name(const void *x, const void *y)
{
	return strcmp((*(const struct out_tensor *const *)x)->t->name, (*(const struct out_tensor *const *)y)->t->name);
}

/* model.safetensors.index.json as transformers writes it: total_size and
 * the weight_map, keys sorted. */
static int write_index(struct job *j)
{
	const struct out_tensor **by_name = xcalloc((size_t)j->n + 1, sizeof *by_name);
	cJSON *root = cJSON_CreateObject(), *meta, *map;
	char *text;
	int rc;

	for (int i = 0; i < j->n; i++)
		by_name[i] = &j->t[i];
	qsort(by_name, (size_t)j->n, sizeof *by_name, cmp_name);
	meta = cJSON_AddObjectToObject(root, "metadata");
	cJSON_AddNumberToObject(meta, "total_size", (double)j->total_size);
	map = cJSON_AddObjectToObject(root, "weight_map");
	for (int i = 0; i < j->n; i++)
		cJSON_AddStringToObject(map, by_name[i]->t->name, j->shards[by_name[i]->shard].name);
	text = cJSON_Print(root);
	cJSON_Delete(root);
	free(by_name);
	if (text == NULL)
		die(EXIT_RUNTIME, "out of memory");
	text = xrealloc(text, strlen(text) + 2);
	strcat(text, "\n");
	rc = scratch_write(j, "model.safetensors.index.json", text, strlen(text));
	free(text);
	return rc;
}

/* config.json is edited as text, so everything but the dtype stays as the
 * base wrote it (10000.0 stays a float: cJSON would print 10000).  The
 * scanner walks the top-level object of text cJSON has already accepted. */
static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* p at '"': past the closing quote, or NULL. */
static const char *skip_string(const char *p)
{
	for (p++; *p != '\0' && *p != '"'; p++)
		if (*p == '\\' && p[1] != '\0')
			p++;
	return *p == '"' ? p + 1 : NULL;
}

static const char *skip_value(const char *p)
{
	int depth = 0;

	if (*p == '"')
		return skip_string(p);
	if (*p != '{' && *p != '[') {
		while (*p != '\0' && *p != ',' && *p != '}' && *p != ']' && !isspace((unsigned char)*p))
			p++;
		return p;
	}
	while (*p != '\0') {
		if (*p == '"') {
			if ((p = skip_string(p)) == NULL)
				return NULL;
			continue;
		}
		if (*p == '{' || *p == '[')
			depth++;
		else if ((*p == '}' || *p == ']') && --depth == 0)
			return p + 1;
		p++;
	}
	return NULL;
}

/* The value of the top-level key in [*vb, *ve); 0, or -1 when absent. */
static int find_key(const char *text, const char *key, const char **vb, const char **ve)
{
	const char *p = skip_ws(text), *ks, *ke;

	if (*p != '{')
		return -1;
	for (p = skip_ws(p + 1); *p == '"'; p = skip_ws(p)) {
		ks = p + 1;
		if ((ke = skip_string(p)) == NULL)
			return -1;
		p = skip_ws(ke);
		if (*p != ':')
			return -1;
		*vb = p = skip_ws(p + 1);
		if ((*ve = p = skip_value(p)) == NULL)
			return -1;
		if ((size_t)(ke - 1 - ks) == strlen(key) && strncmp(ks, key, strlen(key)) == 0)
			return 0;
		p = skip_ws(p);
		if (*p == ',')
			p++;
	}
	return -1;
}

/* text with key's value made "bfloat16", or the key added before the
 * first one (with its indentation); malloc'd, or NULL when the text is not
 * an object the scanner can follow. */
static char *set_dtype_key(const char *text, const char *key)
{
	const char *vb, *ve, *open, *first;

	if (find_key(text, key, &vb, &ve) == 0)
		return xasprintf("%.*s\"bfloat16\"%s", (int)(vb - text), text, ve);
	open = skip_ws(text);
	if (*open != '{')
		return NULL;
	first = skip_ws(open + 1);
	if (*first == '}')
		return xasprintf("%.*s\"%s\": \"bfloat16\"%s", (int)(open + 1 - text), text, key, open + 1);
	return xasprintf("%.*s\"%s\": \"bfloat16\",%.*s%s", (int)(first - text), text, key, (int)(first - open - 1),
	                 open + 1, first);
}

/* config.json is the base's with the dtype it now has, under the key its
 * transformers version reads: "dtype" from 5 on, "torch_dtype" before
 * (and when the config does not say); both when it has both. */
static int write_config(struct job *j)
{
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j->config, "transformers_version");
	int has_dtype = cJSON_HasObjectItem(j->config, "dtype"), has_torch = cJSON_HasObjectItem(j->config, "torch_dtype");
	char *text = read_whole_file(j->mc.config_path, NULL), *next;
	int rc;

	if (text == NULL)
		return fail(j, EXIT_RUNTIME, "%s: %s", j->mc.config_path, strerror(errno));
	if (!has_dtype && !has_torch) {
		if (cJSON_IsString(ver) && atoi(ver->valuestring) >= 5)
			has_dtype = 1;
		else
			has_torch = 1;
	}
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "torch_dtype" : "dtype";

		if (!(k ? has_torch : has_dtype))
			continue;
		next = set_dtype_key(text, key);
		free(text);
		if (next == NULL)
			return fail(j, EXIT_USAGE, "%s: not a JSON object poros-export can edit", j->mc.config_path);
		text = next;
	}
	rc = scratch_write(j, "config.json", text, strlen(text));
	free(text);
	return rc;
}

static int copy_tokenizer(struct job *j, int *copied)
{
	*copied = 0;
	for (size_t i = 0; i < N_TOKENIZER_FILES; i++) {
		char *src = xasprintf("%s/%s", j->mc.checkpoint_dir, tokenizer_files[i]), *data;
		size_t len;
		int rc;

		if (!is_file(src)) {
			free(src);
			continue;
		}
		data = read_whole_file(src, &len);
		if (data == NULL) {
			rc = fail(j, EXIT_RUNTIME, "%s: %s", src, strerror(errno));
			free(src);
			return rc;
		}
		rc = scratch_write(j, tokenizer_files[i], data, len);
		free(data);
		free(src);
		if (rc != 0)
			return rc;
		++*copied;
	}
	return 0;
}

/* --- --out --------------------------------------------------------------- */

/* 0 absent, 1 an empty directory, 2 a directory of files only, 3 one with
 * subdirectories, -1 not a directory (or unreadable: errno). */
static int out_state(const char *out)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	int state = 1;

	if (lstat(out, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode) || (d = opendir(out)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char *p;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		p = xasprintf("%s/%s", out, e->d_name);
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			state = 3;
		else if (state < 2)
			state = 2;
		free(p);
	}
	closedir(d);
	return state;
}

/* Inside or equal to dir (both resolved). */
static int path_within(const char *path, const char *dir)
{
	char *p = realpath(path, NULL), *d = realpath(dir, NULL);
	size_t n = d ? strlen(d) : 0;
	int in = p != NULL && d != NULL && strncmp(p, d, n) == 0 && (p[n] == '\0' || p[n] == '/' || strcmp(d, "/") == 0);

	free(p);
	free(d);
	return in;
}

static int check_out(struct job *j)
{
	const char *out = j->out;
	int st = out_state(out);

	if (st < 0)
		return fail(j, EXIT_USAGE, "--out %s: exists and is not a directory", out);
	if (st > 1 && (path_within(j->mc.checkpoint_dir, out) || path_within(j->o->adapter, out)))
		return fail(j, EXIT_USAGE, "--out %s holds the %s: replacing it would delete its input", out,
		            path_within(j->mc.checkpoint_dir, out) ? "base" : "adapter");
	if (st > 1 && !j->o->force)
		return fail(j, EXIT_USAGE, "--out %s: exists and is not empty (--force replaces it)", out);
	if (st == 3)
		return fail(j, EXIT_USAGE, "--out %s: holds subdirectories, so it is not a checkpoint --force would replace "
		            "(remove it yourself)", out);
	return 0;
}

static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* Removes a directory of plain files (what check_out let --force replace). */
static void remove_flat_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (d != NULL) {
		while ((e = readdir(d)) != NULL)
			if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && unlinkat(dirfd(d), e->d_name, 0) < 0)
				warnsys("%s/%s: not removed", dir, e->d_name);
		closedir(d);
	}
	if (rmdir(dir) < 0)
		warnsys("%s: the replaced checkpoint was not removed", dir);
}

/* The scratch directory becomes --out: a rename (over an empty directory
 * too); a non-empty one, with --force, is moved aside first and removed
 * after. */
static int commit(struct job *j)
{
	char *old = NULL;
	int rc;

	if ((rc = check_out(j)) != 0)
		return rc;
	sync_dir(scratch.dir);
	if (out_state(j->out) == 2) {
		old = xasprintf("%s/.%s.poros-export-old-%ld", j->parent, j->name, (long)getpid());
		if (rename(j->out, old) < 0) {
			rc = fail(j, EXIT_RUNTIME, "--out %s: moving it aside: %s", j->out, strerror(errno));
			free(old);
			return rc;
		}
	}
	if (rename(scratch.dir, j->out) < 0) {
		rc = fail(j, EXIT_RUNTIME, "%s: renaming to %s: %s", scratch.dir, j->out, strerror(errno));
		if (old != NULL && rename(old, j->out) < 0)
			warnsys("%s: could not be moved back to %s", old, j->out);
		free(old);
		return rc;
	}
	scratch.active = 0;
	sync_dir(j->parent);
	if (old != NULL) {
		remove_flat_dir(old);
		free(old);
	}
	return 0;
}

/* --out without trailing slashes, split into its directory and name. */
static int split_out(struct job *j)
{
	char *slash;
	size_t len;

	j->out = xstrdup(j->o->out);
	len = strlen(j->out);
	while (len > 1 && j->out[len - 1] == '/')
		j->out[--len] = '\0';
	slash = strrchr(j->out, '/');
	j->name = xstrdup(slash ? slash + 1 : j->out);
	j->parent = slash == NULL ? xstrdup(".") : slash == j->out ? xstrdup("/") : strndup(j->out, (size_t)(slash - j->out));
	if (j->parent == NULL)
		die(EXIT_RUNTIME, "out of memory");
	if (*j->name == '\0' || strcmp(j->name, ".") == 0 || strcmp(j->name, "..") == 0)
		return fail(j, EXIT_USAGE, "--out %s: give the checkpoint directory's own name", j->o->out);
	if (mkdir_p(j->parent, 0755) < 0)
		return fail(j, EXIT_RUNTIME, "--out %s: creating %s: %s", j->o->out, j->parent, strerror(errno));
	return 0;
}

/* --- the run ------------------------------------------------------------- */

static void job_free(struct job *j)
{
	model_config_free(&j->mc);
	cJSON_Delete(j->config);
	if (j->ck.dir != NULL)
		st_checkpoint_close(&j->ck);
	if (j->af_open)
		st_close(&j->af);
	for (int s = 0; s < j->nshards; s++)
		free(j->shards[s].name);
	free(j->shards);
	free(j->t);
	free(j->pairs);
	free(j->layer_on);
	free(j->adapter_base);
	free(j->acfg_path);
	free(j->aweights_path);
	free(j->out);
	free(j->parent);
	free(j->name);
}

static void print_summary(const struct job *j, FILE *summary, int copied)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "out", j->out);
	cJSON_AddStringToObject(o, "base", j->mc.checkpoint_dir);
	cJSON_AddStringToObject(o, "adapter", j->o->adapter);
	cJSON_AddNumberToObject(o, "rank", j->rank);
	cJSON_AddNumberToObject(o, "scale", j->scale);
	cJSON_AddNumberToObject(o, "tensors", j->n);
	cJSON_AddNumberToObject(o, "merged", j->npairs);
	cJSON_AddNumberToObject(o, "shards", j->nshards);
	cJSON_AddNumberToObject(o, "total_size", (double)j->total_size);
	cJSON_AddNumberToObject(o, "tokenizer_files", copied);
	if (jsonl_write(summary, o) < 0)
		diesys(EXIT_RUNTIME, "writing output failed");
	cJSON_Delete(o);
}

int export_run(const struct export_opts *o, FILE *summary, char *err, size_t errsz)
{
	struct job j;
	char sz[32];
	int rc, copied = 0;

	memset(&j, 0, sizeof j);
	j.o = o;
	j.err = err;
	j.errsz = errsz;
	if ((rc = split_out(&j)) != 0 || (rc = open_base(&j)) != 0 || (rc = open_adapter(&j)) != 0 ||
	    (rc = load_pairs(&j)) != 0 || (rc = find_weights(&j)) != 0 || (rc = check_out(&j)) != 0 || (rc = plan(&j)) != 0)
		goto out;
	if (!same_base(&j))
		warnmsg("note: the adapter was trained on \"%s\" (its base_model_name_or_path), merging into %s",
		        j.adapter_base, j.mc.checkpoint_dir);
	if ((rc = scratch_create(&j, j.nshards + 2 + (int)N_TOKENIZER_FILES)) != 0)
		goto out;
	for (int s = 0; s < j.nshards && rc == 0; s++)
		rc = write_shard(&j, &j.shards[s]);
	if (rc == 0 && j.nshards > 1)
		rc = write_index(&j);
	if (rc == 0)
		rc = write_config(&j);
	if (rc == 0)
		rc = copy_tokenizer(&j, &copied);
	if (rc == 0)
		rc = commit(&j);
	scratch_remove();
	if (rc == 0) {
		warnmsg("wrote %s: %d tensors (%d merged, scale %g), %d shard%s, %s, %d tokenizer file%s", j.out, j.n,
		        j.npairs, (double)j.scale, j.nshards, j.nshards == 1 ? "" : "s",
		        human_bytes(sz, sizeof sz, (double)j.total_size), copied, copied == 1 ? "" : "s");
		print_summary(&j, summary, copied);
	}
out:
	job_free(&j);
	return rc;
}
