/* tools/poros-train/weights.h: the frozen base model in host memory.
 *
 * Every base weight of one layer lives in one contiguous, aligned record
 * (norms, biases, then the seven projections: bf16, or NF4 codes + fp32
 * absmax), the records of all layers back to back in one host allocation
 * from backend->host_alloc (pinned on CUDA).  A block of layers is
 * therefore ONE copy, and the device copy has the same layout, so the
 * offsets below address a layer on the host, in a slab or in the
 * resident copy alike.  With the LoRA extension on bf16 weights
 * (kernels/ops.h), each projection is stored (N + E, K + E), rows K + E
 * apart, the weight in its top-left (N, K) and zeros elsewhere, which
 * the engine fills with the adapter's parts on the device.  Embedding,
 * final norm and lm_head (never quantized) live in a second, smaller
 * record. */
#ifndef POROS_TRAIN_WEIGHTS_H
#define POROS_TRAIN_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "records/records.h"
#include "model/model.h"
#include "shared_base.h"

#define LAYOUT_NONE ((size_t)-1)
#define LAYOUT_ALIGN 256
#define N_PROJ CELL_MAX_TARGETS /* q k v o gate up down, cell.h's order */

struct layer_layout {
	int nf4;
	/* byte offsets inside a layer record; LAYOUT_NONE when absent */
	size_t in_norm, post_norm, q_norm, k_norm; /* bf16 (C), (C), (D), (D) */
	size_t bias[4];                            /* bf16 q (H*D), k, v (G*D), o (C) */
	size_t weight[N_PROJ];                     /* bf16 (N+E, K+E) rows ld apart, or NF4 codes (N*K/2) */
	size_t absmax[N_PROJ];                     /* NF4 only: fp32 (N*K/64) */
	int n_out[N_PROJ], n_in[N_PROJ];
	int ext;                                   /* bf16: E, the extension's rows and columns (0: none); NF4: 0 */
	int ld[N_PROJ];                            /* bf16: a projection's row pitch, K + E */
	size_t stride;                             /* bytes of one layer record */
};

struct global_layout {
	size_t embed, final_norm, lm_head; /* lm_head == embed when tied */
	size_t bytes;
};

struct host_weights {
	const struct backend *be;
	struct layer_layout lay;
	struct global_layout glob;
	int n_layers;
	unsigned char *layers;  /* n_layers * lay.stride bytes */
	unsigned char *globals; /* glob.bytes */
	int real;               /* 1: read from a checkpoint, 0: synthetic */
	double alloc_s, fill_s; /* seconds to allocate (and pin) and to fill */
	struct base_share *share; /* the host's shared copy (shared_base.h), or NULL: the backend's host_alloc */
};

/* Offsets for the model, ext the LoRA extension's columns of bf16
 * projections (0: none; NF4 ignores it: its extension lives in the
 * engine's dequantization buffer); -1 with err when NF4 cannot represent
 * a projection (element count not a multiple of 64). */
int layer_layout_init(struct layer_layout *lay, const struct model_config *mc, int nf4, int ext, char *err,
                      size_t errsz);
void global_layout_init(struct global_layout *g, const struct model_config *mc);

/* MemAvailable of /proc/meminfo in bytes, or what host_memory_set_available
 * gave (not 0); 0 where it cannot be read.  host_memory_source names which
 * ("MemAvailable" or "POROS_MEM_AVAILABLE") for a message. */
size_t host_memory_available(void);
const char *host_memory_source(void);
void host_memory_set_available(size_t bytes);

/* The host memory host_weights_load takes for the model (the layers and
 * the embedding, final norm and lm_head), without allocating it; -1 with
 * err as layer_layout_init. */
int host_weights_size(size_t *bytes, const struct model_config *mc, int nf4, int ext, char *err, size_t errsz);
/* Allocates and fills the host weights: from mc->checkpoint_dir when set,
 * else synthetic from seed; into share's one copy for the host's ranks
 * when share is not NULL (collective over its ranks; its leader fills).  Returns 0; -1 with err for bad input (a
 * missing tensor, a wrong shape or dtype: exit 2); -2 with err when host
 * memory could not be had, -3 when the base is larger than the host's
 * available memory (nothing allocated; status "oom"; both exit 1). */
int host_weights_load(struct host_weights *w, const struct backend *be, const struct model_config *mc, int nf4,
                      int ext, uint64_t seed, struct base_share *share, char *err, size_t errsz);
void host_weights_free(struct host_weights *w);

#endif
