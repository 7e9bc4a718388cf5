/* tools/poros-export/gguf_out.c: --format gguf: the merged model as one
 * GGUF v3 file, tensors named as llama.cpp's converter names them.
 *
 * Each tensor's values are the merged checkpoint's (bf16, as the
 * safetensors export writes them), then: Llama's q_proj and k_proj rows
 * (weights and biases) permuted per head from transformers' rotate-half
 * order to the interleaved pairs llama.cpp's Llama RoPE rotates (Qwen2 and
 * Qwen3 run NEOX RoPE there: no permutation); 1-D tensors widened to F32;
 * matrices stored as --outtype: BF16 as they are, F16 rounded to nearest
 * even, Q8_0 quantized (gguf.h). */
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "ops.h"
#include "util/util.h"

static const struct { const char *hf, *gguf; } layer_names[] = {
	{ "self_attn.q_proj.weight", "attn_q.weight" },   { "self_attn.q_proj.bias", "attn_q.bias" },
	{ "self_attn.k_proj.weight", "attn_k.weight" },   { "self_attn.k_proj.bias", "attn_k.bias" },
	{ "self_attn.v_proj.weight", "attn_v.weight" },   { "self_attn.v_proj.bias", "attn_v.bias" },
	{ "self_attn.o_proj.weight", "attn_output.weight" }, { "self_attn.o_proj.bias", "attn_output.bias" },
	{ "self_attn.q_norm.weight", "attn_q_norm.weight" }, { "self_attn.k_norm.weight", "attn_k_norm.weight" },
	{ "mlp.gate_proj.weight", "ffn_gate.weight" },    { "mlp.up_proj.weight", "ffn_up.weight" },
	{ "mlp.down_proj.weight", "ffn_down.weight" },
	{ "input_layernorm.weight", "attn_norm.weight" }, { "post_attention_layernorm.weight", "ffn_norm.weight" },
};
static const struct { const char *hf, *gguf; } model_names[] = {
	{ "model.embed_tokens.weight", "token_embd.weight" },
	{ "model.norm.weight", "output_norm.weight" },
	{ "lm_head.weight", "output.weight" },
};
#define COUNT(a) (sizeof (a) / sizeof *(a))

int gguf_name(char *out, size_t n, const char *hf)
{
	int layer, at = 0;

	for (size_t i = 0; i < COUNT(model_names); i++)
		if (strcmp(hf, model_names[i].hf) == 0)
			return snprintf(out, n, "%s", model_names[i].gguf), 1;
	if (strstr(hf, "rotary_emb.inv_freq") != NULL)
		return 0;
	if (sscanf(hf, "model.layers.%d.%n", &layer, &at) != 1 || at == 0 || layer < 0)
		return -1;
	for (size_t i = 0; i < COUNT(layer_names); i++)
		if (strcmp(hf + at, layer_names[i].hf) == 0)
			return snprintf(out, n, "blk.%d.%s", layer, layer_names[i].gguf), 1;
	return -1;
}

static enum ggml_type matrix_type(enum gguf_outtype t)
{
	return t == OUTTYPE_F16 ? GGML_TYPE_F16 : t == OUTTYPE_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_BF16;
}

/* llama.cpp's Llama RoPE rotates adjacent pairs, transformers' the two
 * halves of each head: q and k rows are reordered to match. */
int heads_to_permute(const struct job *j, const char *hf)
{
	if (strcmp(j->mc.model_type, "llama") != 0)
		return 0;
	if (strstr(hf, ".self_attn.q_proj.") != NULL)
		return j->mc.num_attention_heads;
	if (strstr(hf, ".self_attn.k_proj.") != NULL)
		return j->mc.num_key_value_heads;
	return 0;
}

static int plan_tensor(struct job *j, const struct out_tensor *o, struct gguf_tensor *g)
{
	const struct st_tensor *t = o->t;
	int named = gguf_name(g->name, sizeof g->name, t->name);

	if (named < 0)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\" has no llama.cpp name for %s", o->f->path, t->name,
		            j->mc.model_type);
	if (named == 0)
		return 0;
	if (!is_float(t->dtype) || t->ndim < 1 || t->ndim > 2)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\": a %s tensor of %d dimensions, not a float vector or matrix",
		            o->f->path, t->name, st_dtype_name(t->dtype), t->ndim);
	g->o = o;
	g->ndim = t->ndim;
	for (int d = 0; d < t->ndim; d++)
		g->ne[d] = t->shape[t->ndim - 1 - d];
	g->type = t->ndim == 1 ? GGML_TYPE_F32 : matrix_type(j->o->outtype);
	if (g->type == GGML_TYPE_Q8_0 && g->ne[0] % Q8_0_BLOCK != 0)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\": rows of %lld values do not split into Q8_0 blocks of %d",
		            o->f->path, t->name, (long long)g->ne[0], Q8_0_BLOCK);
	g->permute_heads = heads_to_permute(j, t->name);
	if (g->permute_heads > 0 && t->shape[0] % (2LL * g->permute_heads) != 0)
		return fail(j, EXIT_USAGE, "%s: tensor \"%s\": %lld rows do not split into %d heads of pairs", o->f->path,
		            t->name, t->shape[0], g->permute_heads);
	return 0;
}

void permute_rows(void *out, const void *in, long rows, long cols, int heads, size_t elsize)
{
	size_t row = (size_t)cols * elsize;
	long D = rows / heads, half = D / 2;

	for (long h = 0; h < heads; h++)
		for (long i = 0; i < half; i++)
			for (int s = 0; s < 2; s++)
				memcpy((unsigned char *)out + (size_t)(h * D + 2 * i + s) * row,
				       (const unsigned char *)in + (size_t)(h * D + s * half + i) * row, row);
}

/* n bf16 values as type into out (ggml_nbytes(type, n) bytes). */
static void convert(unsigned char *out, const uint16_t *v, size_t n, enum ggml_type type)
{
	float *f;

	switch (type) {
	case GGML_TYPE_BF16:
		memcpy(out, v, n * sizeof *v);
		return;
	case GGML_TYPE_F16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h = st_f16_from_f32(f32_from_bf16(v[i]));

			memcpy(out + 2 * i, &h, 2);
		}
		return;
	default:
		f = xmalloc(n * sizeof *f);
		for (size_t i = 0; i < n; i++)
			f[i] = f32_from_bf16(v[i]);
		if (type == GGML_TYPE_F32)
			memcpy(out, f, n * sizeof *f);
		else
			q8_0_quantize(out, f, n);
		free(f);
	}
}

/* A model tensor's merged values, permuted and converted, into out. */
static int model_tensor_data(struct job *j, const struct gguf_tensor *g, unsigned char *out)
{
	const struct st_tensor *t = g->o->t;
	size_t n = (size_t)st_numel(t);
	uint16_t *v = xmalloc(n * sizeof *v), *p;
	int rc = tensor_bf16(j, g->o, v);

	if (rc == 0 && g->permute_heads > 0) {
		p = xmalloc(n * sizeof *p);
		permute_rows(p, v, (long)t->shape[0], t->ndim == 2 ? (long)t->shape[1] : 1, g->permute_heads, sizeof *p);
		free(v);
		v = p;
	}
	if (rc == 0)
		convert(out, v, n, g->type);
	free(v);
	return rc;
}

static int write_tensor(struct job *j, int fd, const char *path, const struct gguf_tensor *g)
{
	static const unsigned char zeros[GGUF_ALIGNMENT];
	size_t n = 1, nbytes;
	unsigned char *out;
	int rc;

	for (int d = 0; d < g->ndim; d++)
		n *= (size_t)g->ne[d];
	nbytes = ggml_nbytes(g->type, n);
	out = xmalloc(nbytes);
	if (g->values != NULL)
		memcpy(out, g->values, nbytes), rc = 0;
	else
		rc = g->pair != NULL ? lora_tensor_data(j, g, out) : model_tensor_data(j, g, out);
	if (rc == 0 && (write_all(fd, out, nbytes) < 0 || write_all(fd, zeros, gguf_padding(nbytes)) < 0))
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	free(out);
	return rc;
}

int gguf_write_file(struct job *j, const char *path, struct gguf_writer *w, const struct gguf_tensor *g, int n,
                    size_t *file_size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc = 0;
	size_t hlen;
	unsigned char *header;
	struct stat st;

	if (fd < 0)
		return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	header = gguf_header(w, &hlen);
	if (write_all(fd, header, hlen) < 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	free(header);
	for (int i = 0; rc == 0 && i < n; i++)
		rc = write_tensor(j, fd, path, &g[i]);
	if (rc == 0 && (fsync(fd) < 0 || fstat(fd, &st) < 0))
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	if (close(fd) < 0 && rc == 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	if (rc == 0 && (size_t)st.st_size != hlen + w->data_size)
		rc = fail(j, EXIT_RUNTIME, "%s: %lld bytes written, %zu planned", path, (long long)st.st_size,
		          hlen + w->data_size);
	*file_size = hlen + w->data_size;
	return rc;
}

/* Llama-3 RoPE scaling as llama.cpp takes it: rope_freqs.weight (D/2) F32,
 * the factor each rotary frequency is divided by: 1 for wavelengths under
 * original / high_freq_factor, factor above original / low_freq_factor,
 * between them 1 / ((1 - s) / factor + s), s = (original / wavelength - low)
 * / (high - low); transformers' llama3 inv_freq is inv_freq / this.  In
 * double, stored rounded to fp32. */
static void llama3_rope_freqs(const struct model_config *m, struct gguf_tensor *g)
{
	const double pi = 3.14159265358979323846;
	double orig = m->rope_original_max_position, low = m->rope_low_freq_factor, high = m->rope_high_freq_factor;
	double factor = m->rope_scaling_factor;
	int half = m->head_dim / 2;

	snprintf(g->name, sizeof g->name, "rope_freqs.weight");
	g->type = GGML_TYPE_F32;
	g->ndim = 1;
	g->ne[0] = half;
	g->values = xmalloc((size_t)half * sizeof *g->values);
	for (int i = 0; i < half; i++) {
		double wavelen = 2 * pi * pow(m->rope_theta, 2.0 * i / m->head_dim), f;

		if (wavelen < orig / high) {
			f = 1;
		} else if (wavelen > orig / low) {
			f = factor;
		} else {
			double smooth = (orig / wavelen - low) / (high - low);

			f = 1 / ((1 - smooth) / factor + smooth);
		}
		g->values[i] = (float)f;
	}
}

int write_gguf(struct job *j, size_t *file_size, int *ntensors)
{
	struct gguf_tensor *g = xcalloc((size_t)j->n + 2, sizeof *g);
	struct gguf_writer w = { 0 };
	int n = 0, rc = 0;
	char *path;

	if (strcmp(j->mc.rope_scaling_type, "llama3") == 0)
		llama3_rope_freqs(&j->mc, &g[n++]);
	for (int i = 0; rc == 0 && i < j->n; i++)
		if ((rc = plan_tensor(j, &j->t[i], &g[n])) == 0 && g[n].o != NULL)
			n++;
	if (rc == 0)
		rc = gguf_metadata(j, &w);
	for (int i = 0; rc == 0 && i < n; i++)
		gguf_add_tensor(&w, g[i].name, g[i].type, g[i].ndim, g[i].ne);
	if (rc == 0)
		rc = scratch_create(j, 1);
	if (rc == 0) {
		path = scratch_path("model.gguf");
		rc = gguf_write_file(j, path, &w, g, n, file_size);
		if (rc == 0)
			rc = commit_file(j, path);
	}
	*ntensors = n;
	gguf_writer_free(&w);
	for (int i = 0; i < n; i++)
		free(g[i].values);
	free(g);
	return rc;
}
