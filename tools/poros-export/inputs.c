/* tools/poros-export/inputs.c: the base checkpoint and the adapter opened,
 * and each of the adapter's LoRA pairs matched to the base weight it
 * merges into; anything that does not fit is refused naming the tensor. */
#include "export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "util/util.h"

#define ADAPTER_CONFIG "adapter_config.json"
#define ADAPTER_WEIGHTS "adapter_model.safetensors"

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
int load_pairs(struct job *j)
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
int find_weights(struct job *j)
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

/* Resolves --base; a config without weights (a configs/models shape, or a
 * directory with only config.json) is refused: poros-train trains those
 * on synthetic weights, and there is nothing real to export. */
int open_base(struct job *j)
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

int open_adapter(struct job *j)
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
int same_base(const struct job *j)
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
