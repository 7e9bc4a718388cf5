/* tools/poros-export/gguf_lora.c: --format gguf-lora: the adapter alone as
 * the LoRA GGUF file llama.cpp loads beside its base (--lora FILE).
 *
 * llama.cpp reads general.type "adapter", general.architecture (it must be
 * the base's), adapter.type "lora" and adapter.lora.alpha, and scales each
 * pair by alpha / r with r the rank lora_a carries.  Each adapted weight
 * W (N,K), llama.cpp's name NAME, gets NAME.lora_a holding PEFT's lora_A
 * (R,K), ne [K, R], and NAME.lora_b holding lora_B (N,R), ne [R, N]: the
 * PEFT tensors as they are, dimensions in ggml order.  Llama's q and k
 * rows are permuted per head as the merged GGUF's are; as rows of W are
 * rows of B, only lora_b is permuted. */
#include "export.h"

#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "util/util.h"

static enum ggml_type lora_type(enum gguf_outtype t)
{
	return t == OUTTYPE_F32 ? GGML_TYPE_F32 : t == OUTTYPE_F16 ? GGML_TYPE_F16 : GGML_TYPE_BF16;
}

static int plan_side(struct job *j, const struct lora_pair *pr, int lora_b, struct gguf_tensor *g)
{
	const struct st_tensor *t = lora_b ? pr->b : pr->a;
	char base[64];

	if (gguf_name(base, sizeof base, pr->w->name) != 1)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\" has no llama.cpp name for %s", pr->wf->path, pr->w->name,
		            j->mc.model_type);
	snprintf(g->name, sizeof g->name, "%s.%s", base, lora_b ? "lora_b" : "lora_a");
	g->pair = pr;
	g->lora_b = lora_b;
	g->type = lora_type(j->o->outtype);
	g->ndim = 2;
	g->ne[0] = t->shape[1];
	g->ne[1] = t->shape[0];
	g->permute_heads = lora_b ? heads_to_permute(j, pr->w->name) : 0;
	if (g->permute_heads > 0 && t->shape[0] % (2LL * g->permute_heads) != 0)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\": %lld rows do not split into %d heads of pairs", pr->wf->path,
		            pr->w->name, t->shape[0], g->permute_heads);
	return 0;
}

int lora_tensor_data(struct job *j, const struct gguf_tensor *g, unsigned char *out)
{
	const struct st_tensor *t = g->lora_b ? g->pair->b : g->pair->a;
	size_t n = (size_t)st_numel(t);
	float *v = xmalloc(n * sizeof *v), *p;
	char lerr[512];

	if (st_read_f32(&j->af, t, v, n, lerr, sizeof lerr) < 0) {
		free(v);
		return fail(j, EXIT_USAGE, "%s", lerr);
	}
	if (g->permute_heads > 0) {
		p = xmalloc(n * sizeof *p);
		permute_rows(p, v, (long)t->shape[0], (long)t->shape[1], g->permute_heads, sizeof *p);
		free(v);
		v = p;
	}
	for (size_t i = 0; i < n; i++) {
		uint16_t h;

		switch (g->type) {
		case GGML_TYPE_F32:
			memcpy(out + 4 * i, &v[i], 4);
			continue;
		case GGML_TYPE_F16:
			h = st_f16_from_f32(v[i]);
			break;
		default:
			h = bf16_from_f32(v[i]);
		}
		memcpy(out + 2 * i, &h, 2);
	}
	free(v);
	return 0;
}

static void lora_metadata(const struct job *j, struct gguf_writer *w)
{
	gguf_kv_string(w, "general.architecture", j->mc.model_type);
	gguf_kv_string(w, "general.type", "adapter");
	gguf_kv_uint32(w, "general.alignment", GGUF_ALIGNMENT);
	gguf_kv_uint32(w, "general.file_type", gguf_file_type(j->o->outtype));
	gguf_kv_string(w, "adapter.type", "lora");
	gguf_kv_float32(w, "adapter.lora.alpha", (float)j->alpha);
}

int write_gguf_lora(struct job *j, size_t *file_size, int *ntensors)
{
	struct gguf_tensor *g = xcalloc(2 * (size_t)j->npairs + 1, sizeof *g);
	struct gguf_writer w = { 0 };
	int n = 0, rc = 0;
	char *path;

	/* llama.cpp scales by alpha / r: an rsLoRA's alpha / sqrt(r) it cannot say */
	if (j->rslora)
		rc = fail(j, EXIT_USAGE, "%s: use_rslora: llama.cpp scales a LoRA GGUF by alpha / r, not alpha / sqrt(r)",
		          j->acfg_path);
	for (int l = 0; rc == 0 && l < j->mc.num_hidden_layers; l++)
		for (int m = 0; rc == 0 && m < N_MODULES; m++) {
			const struct lora_pair *pr = &j->pairs[l * N_MODULES + m];

			if (pr->a == NULL)
				continue;
			if ((rc = plan_side(j, pr, 0, &g[n])) == 0 && (rc = plan_side(j, pr, 1, &g[n + 1])) == 0)
				n += 2;
		}
	if (rc == 0) {
		lora_metadata(j, &w);
		for (int i = 0; i < n; i++)
			gguf_add_tensor(&w, g[i].name, g[i].type, g[i].ndim, g[i].ne);
		rc = scratch_create(j, 1);
	}
	if (rc == 0) {
		path = scratch_path("adapter.gguf");
		rc = gguf_write_file(j, path, &w, g, n, file_size);
		if (rc == 0)
			rc = commit_file(j, path);
	}
	*ntensors = n;
	gguf_writer_free(&w);
	free(g);
	return rc;
}
