/* tools/poros-train/host_plan.c: the run's host memory by purpose, from
 * the same sizes the allocations use (weights.c, staging.c, eval.c,
 * engine.c, plan.c's uploads, the adapter and checkpoint saves). */
#include "host_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "alloc.h"
#include "engine.h"
#include "engine_impl.h"
#include "util/util.h"
#include "weights.h"

/* Per tensor, an upper bound on its safetensors header entry. */
#define HEADER_BYTES_PER_TENSOR 256
/* The trainer's own small allocations after the plan (JSON, the prefetch
 * and OpenMP threads' stacks as touched, allocator slack): 0.3 MiB
 * measured at tiny shapes (docs/engine.md, "Host memory"). */
#define PROCESS_BYTES ((size_t)8 << 20)
/* What the CUDA backend's libraries (runtime, cuBLAS, cuDNN) add to the
 * host's resident set after the plan: 237-267 MiB measured on the H200
 * at 7B-72B shapes, whatever the model (docs/engine.md, "Host memory"). */
#define CUDA_RUNTIME_BYTES ((size_t)320 << 20)
/* events.jsonl's longest line (run.c's append_event buffer, made by events.c): a checkpoint
 * copies the whole file. */
#define EVENT_LINE_MAX 6144

static void add(struct host_plan *hp, const char *name, size_t bytes)
{
	if (bytes == 0 || hp->n == HOST_PLAN_MAX)
		return;
	hp->name[hp->n] = name;
	hp->bytes[hp->n++] = bytes;
}

/* weights.c's load_checkpoint: one bf16 copy of the largest projection per
 * thread, where NF4 quantizes or bf16 pads to the extension. */
static size_t weight_load_bytes(const struct layer_layout *lay, const struct model_config *mc)
{
	size_t most = 0;

	if (mc->checkpoint_dir == NULL || !(lay->nf4 || lay->ext))
		return 0;
	for (int m = 0; m < N_PROJ; m++)
		if ((size_t)lay->n_out[m] * lay->n_in[m] > most)
			most = (size_t)lay->n_out[m] * lay->n_in[m];
	return (size_t)omp_get_max_threads() * most * sizeof(bf16);
}

/* The largest of the transient host copies, none of which live at once:
 * plan_upload's rope tables, initial LoRA and iota; an adapter save (the
 * parameters and st_write's file image); --init-adapter's file and
 * parameters; a checkpoint's optimizer state and copy of events.jsonl. */
static size_t host_copies_bytes(const struct train_config *c, const struct model_config *mc,
                                const struct lora_layout *lo)
{
	size_t S = (size_t)c->cell.training.seq_len, T = S * (size_t)c->cell.training.batch_size;
	size_t lora = (size_t)lo->total * sizeof(float);
	size_t header = (size_t)lo->n_layers * N_PROJ * 2 * HEADER_BYTES_PER_TENSOR;
	size_t upload = 2 * S * (size_t)(mc->head_dim / 2) * sizeof(float) + lora + T * sizeof(int32_t);
	size_t adapter = 2 * lora + header, most = upload > adapter ? upload : adapter;
	size_t ckpt = c->save_every > 0 ? 3 * lora + (size_t)c->cell.training.steps * EVENT_LINE_MAX : 0;

	return ckpt > most ? ckpt : most;
}

/* staging.c: tokens, targets and positions (int32) and embedding rows
 * (bf16) of k micro-batches; two sets (the step's and the next one's). */
static size_t staging_set_bytes(const struct train_config *c, const struct model_config *mc)
{
	size_t kT = (size_t)c->cell.training.gradient_accumulation_steps * c->cell.training.batch_size *
	            c->cell.training.seq_len;

	return 3 * kT * sizeof(int32_t) + kT * (size_t)mc->hidden_size * sizeof(bf16);
}

/* engine.c's per-token losses and the token sources' sequence scratch. */
static size_t step_buffers_bytes(const struct train_config *c)
{
	size_t S = (size_t)c->cell.training.seq_len, k = (size_t)c->cell.training.gradient_accumulation_steps;
	size_t sources = c->cell.training.eval_dataset ? 2 : 1;

	return k * S * (size_t)c->cell.training.batch_size * sizeof(float) + sources * (S + 1) * sizeof(int32_t) +
	       2 * k * 2 * sizeof(int); /* n_pred, pos_plain, stages' n_pred */
}

int host_plan_make(struct host_plan *hp, const struct train_config *c, const struct model_config *mc,
                   size_t device_bytes, int cpu_backend, const struct ckpt_tier *tier, char *err, size_t errsz)
{
	size_t host_ckpt = tier ? tier->host : 0, bounce = tier ? tier->bounce : 0;
	struct layer_layout lay;
	struct global_layout glob;
	struct lora_layout lo;
	size_t base, train = 0, n, nb;
	int nf4 = c->cell.precision == PRECISION_NF4;

	memset(hp, 0, sizeof *hp);
	if (layer_layout_init(&lay, mc, nf4, engine_host_ext_cols(c), err, errsz) < 0)
		return -1;
	global_layout_init(&glob, mc);
	lora_layout_init(&lo, &lay, mc->num_hidden_layers, c->cell.lora.rank, c->cell.lora.target_mask);
	/* per host: the base and its load once where the ranks share it, every
	 * other part once a rank */
	hp->local_ranks = c->local_ranks > 1 ? c->local_ranks : 1;
	hp->base_shared = hp->local_ranks > 1 && c->shared_base;
	n = (size_t)hp->local_ranks;
	nb = hp->base_shared ? 1 : n;
	base = lay.stride * (size_t)mc->num_hidden_layers;
	add(hp, "base_layers", nb * base);
	add(hp, "base_globals", nb * glob.bytes);
	add(hp, "weight_load", nb * weight_load_bytes(&lay, mc));
	add(hp, "device", cpu_backend ? n * device_bytes : 0);
	add(hp, engine_block_ckpt(c, mc->num_hidden_layers) ? "block_checkpoints" : "checkpoints", n * host_ckpt);
	add(hp, "checkpoint_bounce", n * bounce);
	add(hp, "staging", n * 2 * staging_set_bytes(c, mc));
	add(hp, "eval_staging", c->cell.training.eval_dataset ? n * staging_set_bytes(c, mc) : 0);
	add(hp, "step_buffers", n * step_buffers_bytes(c));
	add(hp, "host_copies", n * host_copies_bytes(c, mc, &lo));
	add(hp, "optimizer_state", c->optimizer_on_host ? n * 2 * (size_t)lo.total * sizeof(float) : 0);
	add(hp, "process", n * PROCESS_BYTES);
	add(hp, "cuda_runtime", cpu_backend ? 0 : n * CUDA_RUNTIME_BYTES);
	free(lo.slot);
	base += glob.bytes;
	hp->base = nb * base;
	hp->checkpoints = n * (host_ckpt + bounce);
	hp->load_peak = nb * (base + weight_load_bytes(&lay, mc));
	for (int i = 0; i < hp->n; i++)
		if (strcmp(hp->name[i], "weight_load") != 0)
			train += hp->bytes[i];
	hp->train = train;
	hp->total = train > hp->load_peak ? train : hp->load_peak;
	return 0;
}

int host_plan_for_run(struct host_plan *hp, const struct train_config *c, const struct model_config *mc,
                      const struct dev_alloc *plan, const char *backend, const struct ckpt_tier *tier, char *err,
                      size_t errsz)
{
	return host_plan_make(hp, c, mc, plan->peak, strcmp(backend, "cpu") == 0, tier, err, errsz);
}

void host_plan_add_json(cJSON *o, const struct host_plan *hp)
{
	char buf[1024];

	cJSON_AddNumberToObject(o, "host_plan_mb", (double)hp->total / MIB);
	cJSON_AddItemToObject(o, "host_breakdown_mb",
	                      host_plan_json(hp, buf, sizeof buf) > 0 ? cJSON_Parse(buf) : cJSON_CreateNull());
}

int host_plan_json(const struct host_plan *hp, char *buf, size_t n)
{
	size_t off = 0;

	for (int i = 0; i <= hp->n; i++) {
		int w = i == hp->n ? snprintf(buf + off, n - off, "%s}", hp->n ? "" : "{")
		                   : snprintf(buf + off, n - off, "%s\"%s\":%.3f", i ? "," : "{", hp->name[i],
		                              (double)hp->bytes[i] / MIB);

		if (w < 0 || (size_t)w >= n - off)
			return -1;
		off += (size_t)w;
	}
	return (int)off;
}

/* "base_layers 41.4 GiB, checkpoints 80.0 GiB, staging 1.0 GiB": the k
 * largest, largest first (a tie to the first listed). */
static const char *largest(const struct host_plan *hp, int k, char *buf, size_t bufsz)
{
	int taken[HOST_PLAN_MAX] = { 0 };
	size_t off = 0;

	buf[0] = '\0';
	for (int i = 0; i < k && i < hp->n && off < bufsz; i++) {
		int best = -1;
		char sz[32];

		for (int j = 0; j < hp->n; j++)
			if (!taken[j] && (best < 0 || hp->bytes[j] > hp->bytes[best]))
				best = j;
		taken[best] = 1;
		off += (size_t)snprintf(buf + off, bufsz - off, "%s%s %s", i ? ", " : "", hp->name[best],
		                        format_bytes(sz, sizeof sz, (double)hp->bytes[best]));
	}
	return buf;
}

int host_plan_check(const struct host_plan *hp, char *err, size_t errsz)
{
	size_t avail = host_memory_available();
	char need[32], have[32], big[256];

	if (avail == 0 || hp->total <= avail)
		return 0;
	/* one rank's base or checkpoints alone over it: their own checks name them */
	if (hp->base / (size_t)(hp->base_shared ? 1 : hp->local_ranks) > avail ||
	    hp->checkpoints / (size_t)hp->local_ranks > avail)
		return 0;
	snprintf(err, errsz, "the run needs %s of host memory, %s available (%s); the largest: %s",
	         format_bytes(need, sizeof need, (double)hp->total), format_bytes(have, sizeof have, (double)avail),
	         host_memory_source(), largest(hp, 3, big, sizeof big));
	return -1;
}

/* A "Key:   123 kB" line of /proc/self/status, in bytes; 0 when absent. */
static size_t status_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[128];
	size_t len = strlen(key);
	unsigned long long kib = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, len) == 0 && line[len] == ':' && sscanf(line + len + 1, "%llu", &kib) == 1)
			break;
	fclose(f);
	return (size_t)kib * 1024;
}

size_t host_rss_now(void)
{
	return status_kib("VmRSS");
}

size_t host_rss_peak(void)
{
	return status_kib("VmHWM");
}
