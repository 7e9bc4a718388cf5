/* tools/lib/model/arch.h: the decoder families Poros implements, one row per HF
 * model_type, with what transformers (4.4x and 5.x) builds for each:
 * biases, q/k norm, activation, defaults, and the checkpoint's tensor
 * names.  model_config.c, weights.c and the messages that list the
 * supported types read it; docs/checkpoints.md is its table in prose. */
#ifndef POROS_ARCH_H
#define POROS_ARCH_H

#include <stddef.h>

struct arch {
	const char *model_type;     /* config.json "model_type" */
	const char *architecture;   /* config.json "architectures"[0] of a causal LM */
	int head_dim_default;       /* absent head_dim: 0 = hidden_size / num_attention_heads */
	int qkv_bias;               /* -1: config's attention_bias decides; 1: always (Qwen2) */
	int o_bias_follows_qkv;     /* o_proj has a bias whenever q/k/v do (Llama, Qwen3; Qwen2 never) */
	int qk_norm;                /* per-head RMSNorm on q and k before RoPE (Qwen3) */
	int tie_default;            /* tie_word_embeddings when absent */
	/* keys transformers reads for this type (the others are ignored by it) */
	int reads_mlp_bias, reads_sliding_window, reads_pretraining_tp;
	const char *hidden_act;     /* the only activation the MLP implements */
};

/* The row for model_type, or NULL. */
const struct arch *arch_find(const char *model_type);
/* "llama, qwen2, qwen3": for "expected one of" messages. */
const char *arch_type_list(void);

/* HF tensor names (checkpoint and PEFT adapter keys are built from these). */
#define ARCH_EMBED "model.embed_tokens.weight"
#define ARCH_FINAL_NORM "model.norm.weight"
#define ARCH_LM_HEAD "lm_head.weight"
#define ARCH_LAYERS "model.layers."
/* printf pattern over the layer index */
#define ARCH_LAYER_PREFIX ARCH_LAYERS "%d."
/* PEFT's key of a base tensor in an adapter file: this + the HF name */
#define ARCH_ADAPTER_PREFIX "base_model.model."
extern const char *const arch_proj_name[7];  /* "self_attn.q_proj" ... "mlp.down_proj", cell.h's order */
extern const char *const arch_norm_name[4];  /* input, post-attention, q, k norms */

#endif
