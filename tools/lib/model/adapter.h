/* tools/lib/model/adapter.h: a LoRA adapter in PEFT's directory format
 * (adapter_config.json + adapter_model.safetensors) so PEFT, transformers
 * and vLLM load what Poros trains, and Poros loads theirs. */
#ifndef POROS_ADAPTER_H
#define POROS_ADAPTER_H

#include <stddef.h>

struct adapter_tensor { char *name; int rows, cols; float *data; };  /* PEFT key, e.g.
   base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight (R,K) / lora_B.weight (N,R); mlp.* for gate/up/down */
struct adapter {
	int rank;
	double alpha, dropout;
	unsigned target_mask;    /* bit i: lora_module_names[i] (tools/lib/records/cell.h) */
	char *base_model;
	int n;
	struct adapter_tensor *t;
};

/* malloc'd PEFT key of layer's module (index into lora_module_names), lora_A or (is_b) lora_B. */
char *adapter_key(int layer, int module, int is_b);
/* Parses a PEFT key back; 0 and the parts, or -1 if it is not one. */
int adapter_key_parse(const char *key, int *layer, int *module, int *is_b);
/* The LoRA ranks vLLM serves (its max_lora_rank choices); a PEFT adapter
 * of another rank is refused there. */
extern const int vllm_lora_ranks[8];
int vllm_rank_ok(int rank);
/* "8, 16, 32, 64, 128, 256, 320, 512" */
const char *vllm_rank_list(void);

/* The tensor named key, or NULL. */
const struct adapter_tensor *adapter_find(const struct adapter *a, const char *key);
/* Each file atomic, F32; dir is made as needed and must not be a symbolic
 * link (refused: it would send the files elsewhere). */
int adapter_save(const char *dir, const struct adapter *a, char *err, size_t errsz);
/* Removes what killed saves left in run_dir's adapter/ and adapter-stepN/
 * (see remove_dead_tmp): a run directory has one trainer at a time. */
void adapter_remove_leftovers(const char *run_dir);
int adapter_load(const char *dir, struct adapter *a, char *err, size_t errsz);        /* F32/BF16/F16 accepted */
void adapter_free(struct adapter *a);

#endif
