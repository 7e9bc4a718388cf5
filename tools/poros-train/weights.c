/* tools/poros-train/weights.c: host weight layout, synthetic weights and
 * HF checkpoint loading. */
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "model/model.h"
#include "ops.h"
#include "util/util.h"

static size_t align_up(size_t n)
{
	return (n + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
}

/* Reserves bytes at *off and returns where they start. */
static size_t reserve(size_t *off, size_t bytes)
{
	size_t at = *off;

	*off = align_up(*off + bytes);
	return at;
}

int layer_layout_init(struct layer_layout *lay, const struct model_config *mc, int nf4, int ext, char *err,
                      size_t errsz)
{
	size_t off = 0;
	int c = mc->hidden_size, d = mc->head_dim;
	int q = mc->num_attention_heads * d, kv = mc->num_key_value_heads * d;

	memset(lay, 0, sizeof *lay);
	lay->nf4 = nf4;
	lay->ext = nf4 ? 0 : ext;
	lay->in_norm = reserve(&off, (size_t)c * 2);
	lay->post_norm = reserve(&off, (size_t)c * 2);
	lay->q_norm = mc->qk_norm ? reserve(&off, (size_t)d * 2) : LAYOUT_NONE;
	lay->k_norm = mc->qk_norm ? reserve(&off, (size_t)d * 2) : LAYOUT_NONE;
	lay->bias[0] = mc->attention_bias ? reserve(&off, (size_t)q * 2) : LAYOUT_NONE;
	lay->bias[1] = mc->attention_bias ? reserve(&off, (size_t)kv * 2) : LAYOUT_NONE;
	lay->bias[2] = mc->attention_bias ? reserve(&off, (size_t)kv * 2) : LAYOUT_NONE;
	lay->bias[3] = model_config_o_bias(mc) ? reserve(&off, (size_t)c * 2) : LAYOUT_NONE;
	for (int m = 0; m < N_PROJ; m++) {
		size_t numel;

		model_config_module_shape(mc, m, &lay->n_out[m], &lay->n_in[m]);
		numel = (size_t)lay->n_out[m] * (size_t)lay->n_in[m];
		if (nf4) {
			if (numel % POROS_NF4_BLOCK != 0)
				return set_error(err, errsz, "%s: %s has %zu elements, not a multiple of the NF4 block (%d)",
				              mc->model_id, lora_module_names[m], numel, POROS_NF4_BLOCK);
			lay->weight[m] = reserve(&off, numel / 2);
			lay->absmax[m] = reserve(&off, numel / POROS_NF4_BLOCK * sizeof(float));
		} else {
			lay->ld[m] = lay->n_in[m] + lay->ext;
			lay->weight[m] = reserve(&off, (size_t)(lay->n_out[m] + lay->ext) * (size_t)lay->ld[m] * 2);
			lay->absmax[m] = LAYOUT_NONE;
		}
	}
	lay->stride = off;
	return 0;
}

void global_layout_init(struct global_layout *g, const struct model_config *mc)
{
	size_t off = 0, table = (size_t)mc->vocab_size * (size_t)mc->hidden_size * 2;

	g->embed = reserve(&off, table);
	g->final_norm = reserve(&off, (size_t)mc->hidden_size * 2);
	g->lm_head = mc->tie_word_embeddings ? g->embed : reserve(&off, table);
	g->bytes = off;
}

/* --- synthetic weights ---------------------------------------------------
 * Counter-based: element i of tensor `id` depends only on (seed, id, i), so
 * any thread may fill any part and the result never depends on the thread
 * count.  Tensor ids: layer * 64 + slot inside a layer; 1 << 40 upwards
 * for the global tensors. */

/* slots inside a layer: 0..6 the projections, then the norms, the biases */
enum { SLOT_NORMS = 10, SLOT_BIASES = 20 };
#define GLOBAL_ID (1ull << 40)

static uint64_t tensor_key(uint64_t seed, uint64_t id)
{
	return poros_mix64(seed ^ poros_mix64(id + 0x5eed5eed5eedull));
}

/* Roughly N(0,1): the sum of four 16-bit uniforms, centred and scaled
 * (Irwin-Hall), one hash per element; bounded at +-3.46. */
static inline float normalish(uint64_t key, uint64_t i)
{
	uint64_t h = poros_mix64(key ^ i);
	float s = 0;

	for (int k = 0; k < 4; k++)
		s += ((float)((h >> (16 * k)) & 0xffff) + 0.5f) * (1.0f / 65536.0f);
	return (s - 2.0f) * 1.7320508f;
}

/* Elements [first, first + n) of the tensor into out.  Vectorised where
 * the CPU has AVX-512 (its 64-bit multiplies): 5x faster, the same bits, as
 * every step is an integer or a single IEEE operation in a fixed order. */
__attribute__((target_clones("arch=x86-64-v4", "default"), optimize("O3")))
static void fill_normal_run(bf16 *out, long n, uint64_t key, long first, float mean, float std)
{
	for (long i = 0; i < n; i++)
		out[i] = bf16_from_f32(mean + std * normalish(key, (uint64_t)(first + i)));
}

static void fill_normal(bf16 *out, long n, uint64_t key, float mean, float std)
{
	const long run = 1 << 16;

#pragma omp parallel for schedule(static) if (n > run)
	for (long i = 0; i < n; i += run)
		fill_normal_run(out + i, n - i < run ? n - i : run, key, i, mean, std);
}

/* NF4 drawn directly (codes uniform over the 16 levels, absmax giving the
 * standard deviation std): values do not matter for speed and memory, and
 * quantizing 70B random weights on the host would take minutes. */
static void fill_nf4(uint8_t *packed, float *absmax, long n, uint64_t key, float std)
{
	long nbytes = n / 2, nblocks = n / POROS_NF4_BLOCK;
	uint64_t scale_key = poros_mix64(key ^ 0xab5ab5ab5ull);

#pragma omp parallel for schedule(static) if (nbytes > 65536)
	for (long w = 0; w < (nbytes + 7) / 8; w++) {
		uint64_t h = poros_mix64(key ^ (uint64_t)w);

		for (long j = w * 8; j < nbytes && j < w * 8 + 8; j++)
			packed[j] = (uint8_t)(h >> (8 * (j - w * 8)));
	}
#pragma omp parallel for schedule(static) if (nblocks > 65536)
	for (long b = 0; b < nblocks; b++) {
		uint32_t r = (uint32_t)(poros_mix64(scale_key ^ (uint64_t)b) >> 40);

		/* uniform codes have a standard deviation of 0.52 absmax */
		absmax[b] = std / 0.52f * (0.8f + 0.4f * (float)r * (1.0f / 16777216.0f));
	}
}

static void synth_layer(unsigned char *rec, const struct layer_layout *lay, const struct model_config *mc, int layer,
                        uint64_t seed)
{
	uint64_t base = (uint64_t)layer * 64;
	int c = mc->hidden_size, d = mc->head_dim;
	const size_t norm_off[4] = { lay->in_norm, lay->post_norm, lay->q_norm, lay->k_norm };
	const long norm_len[4] = { c, c, d, d };

	/* norms near one (not exactly: a weight of one would hide a bug that
	 * drops it), biases N(0, 0.02), each projection N(0, 1/K) so
	 * activations stay O(1) at any width (0.02 would make a 64-wide tiny
	 * model's logits too small to ever predict anything) */
	for (int i = 0; i < 4; i++)
		if (norm_off[i] != LAYOUT_NONE)
			fill_normal((bf16 *)(rec + norm_off[i]), norm_len[i], tensor_key(seed, base + SLOT_NORMS + i), 1.0f,
			            0.05f);
	for (int i = 0; i < 4; i++)
		if (lay->bias[i] != LAYOUT_NONE)
			fill_normal((bf16 *)(rec + lay->bias[i]), lay->n_out[i], tensor_key(seed, base + SLOT_BIASES + i), 0.0f,
			            0.02f);
	for (int m = 0; m < N_PROJ; m++) {
		long n = (long)lay->n_out[m] * lay->n_in[m];

		float std = 1.0f / sqrtf((float)lay->n_in[m]);

		if (lay->nf4)
			fill_nf4(rec + lay->weight[m], (float *)(rec + lay->absmax[m]), n, tensor_key(seed, base + m), std);
		else if (lay->ext == 0)
			fill_normal((bf16 *)(rec + lay->weight[m]), n, tensor_key(seed, base + m), 0.0f, std);
		else /* row by row into the pitched layout: element (r, k) is the same draw */
#pragma omp parallel for schedule(static)
			for (long r = 0; r < lay->n_out[m]; r++)
				fill_normal_run((bf16 *)(rec + lay->weight[m]) + r * lay->ld[m], lay->n_in[m],
				                tensor_key(seed, base + m), r * lay->n_in[m], 0.0f, std);
	}
}

static void synth_globals(unsigned char *g, const struct global_layout *gl, const struct model_config *mc,
                          uint64_t seed)
{
	long table = (long)mc->vocab_size * mc->hidden_size;

	float unit = 1.0f / sqrtf((float)mc->hidden_size);

	/* embeddings N(0, 1/C): rows of unit norm, like the layers' outputs;
	 * the lm_head the same, so logits can be confident */
	fill_normal((bf16 *)(g + gl->embed), table, tensor_key(seed, GLOBAL_ID + 0), 0.0f, unit);
	fill_normal((bf16 *)(g + gl->final_norm), mc->hidden_size, tensor_key(seed, GLOBAL_ID + 1), 1.0f, 0.05f);
	if (gl->lm_head != gl->embed)
		fill_normal((bf16 *)(g + gl->lm_head), table, tensor_key(seed, GLOBAL_ID + 2), 0.0f, unit);
}

/* --- checkpoint -----------------------------------------------------------
 * Two passes over the same names: every tensor is found and its shape and
 * dtype checked against the headers before a byte of the host copy is
 * allocated (a config that claims a larger model than its checkpoint
 * costs nothing), then the values are read. */

/* The tensor `name` of shape (rows[, cols]) in a dtype we convert from;
 * NULL with err otherwise. */
static const struct st_tensor *checked_tensor(const struct st_checkpoint *ck, const char *name, long long rows,
                                              long long cols, const struct st_file **f, char *err, size_t errsz)
{
	const struct st_tensor *t = st_checkpoint_find(ck, name, f);
	int ndim = cols > 0 ? 2 : 1;
	char shape[96];
	int n = 0;

	if (t == NULL)
		return set_error(err, errsz, "%s: tensor \"%s\" not found", ck->dir, name), NULL;
	if (t->ndim != ndim || t->shape[0] != rows || (ndim == 2 && t->shape[1] != cols)) {
		shape[0] = '\0';
		for (int i = 0; i < t->ndim && n < (int)sizeof shape - 24; i++)
			n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", i ? "," : "", t->shape[i]);
		if (ndim == 2)
			return set_error(err, errsz, "%s: tensor \"%s\" has shape [%s] (expected [%lld,%lld] from config.json)",
			              ck->dir, name, shape, rows, cols), NULL;
		return set_error(err, errsz, "%s: tensor \"%s\" has shape [%s] (expected [%lld] from config.json)", ck->dir,
		              name, shape, rows), NULL;
	}
	if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F32)
		return set_error(err, errsz, "%s: tensor \"%s\": dtype %s is not supported (poros-train reads BF16, F16 and "
		              "F32 weights)", ck->dir, name, st_dtype_name(t->dtype)), NULL;
	return t;
}

/* Checks (out == NULL) or reads as bf16, rounding to nearest even once. */
static int read_tensor(const struct st_checkpoint *ck, const char *name, long long rows, long long cols, bf16 *out,
                       char *err, size_t errsz)
{
	const struct st_file *f;
	const struct st_tensor *t = checked_tensor(ck, name, rows, cols, &f, err, errsz);
	char lerr[256];

	if (t == NULL)
		return -1;
	if (out != NULL && st_read_bf16(f, t, out, (size_t)(rows * (cols > 0 ? cols : 1)), lerr, sizeof lerr) < 0)
		return set_error(err, errsz, "%s: %s", ck->dir, lerr);
	return 0;
}

/* rec == NULL: check only. */
static int load_layer(unsigned char *rec, const struct layer_layout *lay, const struct model_config *mc,
                      const struct st_checkpoint *ck, int layer, bf16 *tmp, char *err, size_t errsz)
{
	const size_t norm_off[4] = { lay->in_norm, lay->post_norm, lay->q_norm, lay->k_norm };
	const long norm_len[4] = { mc->hidden_size, mc->hidden_size, mc->head_dim, mc->head_dim };
	char name[160];
	int at;

	at = snprintf(name, sizeof name, ARCH_LAYER_PREFIX, layer);
	for (int i = 0; i < 4; i++) {
		if (norm_off[i] == LAYOUT_NONE)
			continue;
		snprintf(name + at, sizeof name - (size_t)at, "%s.weight", arch_norm_name[i]);
		if (read_tensor(ck, name, norm_len[i], 0, rec ? (bf16 *)(rec + norm_off[i]) : NULL, err, errsz) < 0)
			return -1;
	}
	for (int i = 0; i < 4; i++) {
		if (lay->bias[i] == LAYOUT_NONE)
			continue;
		snprintf(name + at, sizeof name - (size_t)at, "%s.bias", arch_proj_name[i]);
		if (read_tensor(ck, name, lay->n_out[i], 0, rec ? (bf16 *)(rec + lay->bias[i]) : NULL, err, errsz) < 0)
			return -1;
	}
	for (int m = 0; m < N_PROJ; m++) {
		long n = (long)lay->n_out[m] * lay->n_in[m];
		bf16 *dst = rec == NULL ? NULL : lay->nf4 || lay->ext ? tmp : (bf16 *)(rec + lay->weight[m]);

		snprintf(name + at, sizeof name - (size_t)at, "%s.weight", arch_proj_name[m]);
		if (read_tensor(ck, name, lay->n_out[m], lay->n_in[m], dst, err, errsz) < 0)
			return -1;
		/* QLoRA quantizes the bf16 checkpoint values, so do we */
		if (rec != NULL && lay->nf4)
			nf4_quantize_bf16(rec + lay->weight[m], (float *)(rec + lay->absmax[m]), tmp, n);
		else if (rec != NULL && lay->ext) /* into the pitched layout */
			for (long r = 0; r < lay->n_out[m]; r++)
				memcpy((bf16 *)(rec + lay->weight[m]) + r * lay->ld[m], tmp + r * lay->n_in[m],
				       (size_t)lay->n_in[m] * sizeof *tmp);
	}
	return 0;
}

/* The globals: check (w == NULL) or read. */
static int load_globals(const struct host_weights *w, const struct global_layout *glob, const struct model_config *mc,
                        const struct st_checkpoint *ck, char *err, size_t errsz)
{
	long long rows = mc->vocab_size, c = mc->hidden_size;
	unsigned char *g = w ? w->globals : NULL;

	if (read_tensor(ck, ARCH_EMBED, rows, c, g ? (bf16 *)(g + glob->embed) : NULL, err, errsz) < 0 ||
	    read_tensor(ck, ARCH_FINAL_NORM, c, 0, g ? (bf16 *)(g + glob->final_norm) : NULL, err, errsz) < 0)
		return -1;
	/* tied: lm_head is the embedding, as transformers ties it (a stored
	 * lm_head.weight is then not read, there as here) */
	if (glob->lm_head != glob->embed &&
	    read_tensor(ck, ARCH_LM_HEAD, rows, c, g ? (bf16 *)(g + glob->lm_head) : NULL, err, errsz) < 0)
		return -1;
	return 0;
}

static int check_checkpoint(const struct st_checkpoint *ck, const struct layer_layout *lay,
                            const struct global_layout *glob, const struct model_config *mc, char *err, size_t errsz)
{
	if (load_globals(NULL, glob, mc, ck, err, errsz) < 0)
		return -1;
	for (int l = 0; l < mc->num_hidden_layers; l++)
		if (load_layer(NULL, lay, mc, ck, l, NULL, err, errsz) < 0)
			return -1;
	return 0;
}

static int load_checkpoint(struct host_weights *w, const struct st_checkpoint *ck, const struct model_config *mc,
                           char *err, size_t errsz)
{
	size_t tmp_elems = 0;
	int failed = 0;

	if (load_globals(w, &w->glob, mc, ck, err, errsz) < 0)
		return -1;
	if (w->lay.nf4 || w->lay.ext)
		for (int m = 0; m < N_PROJ; m++)
			if ((size_t)w->lay.n_out[m] * (size_t)w->lay.n_in[m] > tmp_elems)
				tmp_elems = (size_t)w->lay.n_out[m] * (size_t)w->lay.n_in[m];
	/* layers in parallel: reading is page faults on the mapped files and
	 * NF4 quantization is CPU work, both scale with threads */
#pragma omp parallel
	{
		bf16 *tmp = tmp_elems ? malloc(tmp_elems * sizeof *tmp) : NULL;
		char lerr[512];

		if (tmp_elems && tmp == NULL) {
#pragma omp critical(weights_err)
			if (!failed) {
				failed = 1;
				snprintf(err, errsz, "%s: out of host memory for a staging buffer", mc->checkpoint_dir);
			}
		}
#pragma omp for schedule(dynamic, 1)
		for (int l = 0; l < w->n_layers; l++) {
			int stop;

#pragma omp atomic read
			stop = failed;
			if (stop || (tmp_elems && tmp == NULL))
				continue;
			if (load_layer(w->layers + (size_t)l * w->lay.stride, &w->lay, mc, ck, l, tmp, lerr, sizeof lerr) < 0) {
#pragma omp critical(weights_err)
				if (!failed) {
					failed = 1;
					snprintf(err, errsz, "%s", lerr);
				}
			}
		}
		free(tmp);
	}
	return failed ? -1 : 0;
}

/* Tens of GB on big models: one thread would take seconds. */
static void parallel_zero(unsigned char *p, size_t bytes)
{
	const size_t chunk = (size_t)64 << 20;
	long n = (long)((bytes + chunk - 1) / chunk);

#pragma omp parallel for schedule(static)
	for (long i = 0; i < n; i++) {
		size_t at = (size_t)i * chunk;

		memset(p + at, 0, bytes - at < chunk ? bytes - at : chunk);
	}
}

int host_weights_size(size_t *bytes, const struct model_config *mc, int nf4, int ext, char *err, size_t errsz)
{
	struct layer_layout lay;
	struct global_layout glob;

	if (layer_layout_init(&lay, mc, nf4, ext, err, errsz) < 0)
		return -1;
	global_layout_init(&glob, mc);
	*bytes = lay.stride * (size_t)mc->num_hidden_layers + glob.bytes;
	return 0;
}

static size_t host_memory_given; /* POROS_MEM_AVAILABLE; 0: read /proc/meminfo */

void host_memory_set_available(size_t bytes)
{
	host_memory_given = bytes;
}

const char *host_memory_source(void)
{
	return host_memory_given ? "POROS_MEM_AVAILABLE" : "MemAvailable";
}

/* MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read (no
 * check is then made: the allocation itself still fails cleanly or not). */
size_t host_memory_available(void)
{
	FILE *f;
	char line[128];
	unsigned long long kib = 0;

	if (host_memory_given)
		return host_memory_given;
	if ((f = fopen("/proc/meminfo", "r")) == NULL)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (size_t)kib * 1024;
}

/* Host memory for the layers and the globals: the backend's own, or the
 * host's shared copy (share); rc the caller's check so far, agreed on over
 * the ranks when shared.  0, or -2/-3 with err. */
static int alloc_base(struct host_weights *w, struct base_share *share, size_t total, int rc, char *err,
                      size_t errsz)
{
	size_t at = (total + 4095) & ~(size_t)4095;
	unsigned char *p;
	char sz[32];

	if (share != NULL) {
		if ((rc = shared_base_agree(share, rc, "the host memory check", err, errsz)) < 0 ||
		    (rc = shared_base_map(share, w->be, at + w->glob.bytes, &p, err, errsz)) < 0)
			return rc;
		w->share = share;
		w->layers = p;
		w->globals = p + at;
		return 0;
	}
	if (rc < 0)
		return rc;
	if (w->be->host_alloc((void **)&w->layers, total) != 0) {
		w->layers = NULL;
		return set_error(err, errsz, "allocating host memory for %d layers' weights (%s) failed", w->n_layers,
		                 format_bytes(sz, sizeof sz, (double)total)), -2;
	}
	if (w->be->host_alloc((void **)&w->globals, w->glob.bytes) != 0) {
		w->globals = NULL;
		host_weights_free(w);
		return set_error(err, errsz, "allocating host memory for the embedding and lm_head (%s) failed",
		                 format_bytes(sz, sizeof sz, (double)w->glob.bytes)), -2;
	}
	/* the alignment gaps too, so no copy ever carries uninitialised bytes
	 * (a shared object starts as zeros) */
	memset(w->globals, 0, w->glob.bytes);
	parallel_zero(w->layers, total);
	return 0;
}

/* Fills the base: from the checkpoint, or synthetic.  0, or -1 with err. */
static int fill_base(struct host_weights *w, struct st_checkpoint *ck, const struct model_config *mc, uint64_t seed,
                     char *err, size_t errsz)
{
	if (mc->checkpoint_dir)
		return load_checkpoint(w, ck, mc, err, errsz);
	for (int l = 0; l < w->n_layers; l++)
		synth_layer(w->layers + (size_t)l * w->lay.stride, &w->lay, mc, l, seed);
	synth_globals(w->globals, &w->glob, mc, seed);
	return 0;
}

int host_weights_load(struct host_weights *w, const struct backend *be, const struct model_config *mc, int nf4,
                      int ext, uint64_t seed, struct base_share *share, char *err, size_t errsz)
{
	struct st_checkpoint ck;
	char sz[32];
	size_t total, avail;
	double t0;
	int rc = 0, fills = share == NULL || share->local_rank == 0;

	memset(w, 0, sizeof *w);
	w->be = be;
	w->n_layers = mc->num_hidden_layers;
	if (layer_layout_init(&w->lay, mc, nf4, ext, err, errsz) < 0)
		return -1;
	global_layout_init(&w->glob, mc);
	/* a checkpoint directory's weights load or the run stops: never
	 * synthetic weights in place of a missing or unreadable file */
	if (mc->checkpoint_dir && (st_checkpoint_open(&ck, mc->checkpoint_dir, err, errsz) < 0))
		return -1;
	if (mc->checkpoint_dir && check_checkpoint(&ck, &w->lay, &w->glob, mc, err, errsz) < 0) {
		st_checkpoint_close(&ck);
		return -1;
	}
	total = w->lay.stride * (size_t)w->n_layers;
	/* pinning or touching more than the host has ends in the kernel's
	 * out-of-memory killer, not in a failed allocation: refuse first (the
	 * rank that fills a shared copy takes it for its host) */
	avail = host_memory_available();
	if (fills && avail && total + w->glob.bytes > avail) {
		char have[32];

		set_error(err, errsz, "the base needs %s of host memory, %s available (%s)",
		          format_bytes(sz, sizeof sz, (double)(total + w->glob.bytes)),
		          format_bytes(have, sizeof have, (double)avail), host_memory_source());
		rc = -3;
	}
	t0 = now_seconds();
	if ((rc = alloc_base(w, share, total, rc, err, errsz)) < 0) {
		if (mc->checkpoint_dir)
			st_checkpoint_close(&ck);
		return rc;
	}
	w->alloc_s = now_seconds() - t0;
	t0 = now_seconds();
	w->real = mc->checkpoint_dir != NULL;
	rc = fills ? fill_base(w, &ck, mc, seed, err, errsz) : 0;
	if (mc->checkpoint_dir)
		st_checkpoint_close(&ck);
	if (share != NULL && (rc = shared_base_agree(share, rc, "loading the base", err, errsz)) == 0)
		rc = shared_base_register(share, err, errsz);
	if (rc < 0) {
		host_weights_free(w);
		return rc;
	}
	w->fill_s = now_seconds() - t0;
	return 0;
}

void host_weights_free(struct host_weights *w)
{
	if (w->share != NULL)
		shared_base_unmap(w->share);
	else if (w->layers)
		w->be->host_free(w->layers);
	if (w->globals && w->share == NULL)
		w->be->host_free(w->globals);
	w->share = NULL;
	w->layers = NULL;
	w->globals = NULL;
}
