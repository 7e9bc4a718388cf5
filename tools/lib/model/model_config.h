/* tools/lib/model/model_config.h: a decoder's shape from a Hugging Face
 * config.json (Llama, Qwen2/2.5, Qwen3), and where to find it: a local
 * directory, the local HF cache, or Poros' own configs/models/ (synthetic
 * weights).  Never touches the network. */
#ifndef POROS_MODEL_CONFIG_H
#define POROS_MODEL_CONFIG_H

#include <stddef.h>

struct model_config {
	char *model_id;          /* as asked */
	char model_type[32];     /* "llama", "qwen2", "qwen3"; any other is rejected */
	int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, vocab_size;
	double rope_theta, rms_norm_eps;
	int tie_word_embeddings, attention_bias, qk_norm;  /* qk_norm: model_type qwen3 or use_qk_norm true */
	int bos_token_id, eos_token_id;                    /* -1 when absent */
	char *config_path;       /* the config.json read */
	char *checkpoint_dir;    /* the checkpoint directory (weights must load from it), or NULL: synthetic weights */
	char *tokenizer_path;    /* a tokenizer.json or its directory given for this run (--tokenizer), or NULL:
	                          * the model's own; set by the caller, freed by model_config_free */
	int max_position_embeddings;  /* 0 when absent */
	/* RoPE scaling from rope_scaling or rope_parameters: rope_type "" for
	 * plain RoPE, else linear or llama3 (the only ones accepted) with the
	 * fields that type uses (1.0 / 0 for the others). */
	char rope_scaling_type[32];
	double rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor;
	int rope_original_max_position;
};

/* Parses config.json text as transformers 4.4x and 5.x read it (rules per
 * model_type in arch.c; docs/checkpoints.md lists every key): RoPE from
 * "rope_theta"/"rope_scaling" or "rope_parameters" (both may be present and
 * must agree; rope_theta is required), defaults as the family's config class
 * (head_dim hidden/heads, qwen3 128; kv heads = heads; rms_norm_eps 1e-6;
 * tie false), and every key that changes the math and is not implemented
 * refused by name.  name (a path) prefixes messages.  0, or -1 with err. */
int model_config_parse(struct model_config *m, const char *json, const char *name, char *err, size_t errsz);
/* Resolves a model_id: (1) a local directory with config.json, (2) the HF cache: $HF_HUB_CACHE, else $HF_HOME/hub,
   else ~/.cache/huggingface/hub: models--Org--Name/snapshots/<rev>/config.json (refs/main's snapshot, else the
   newest by mtime); both set checkpoint_dir to that directory, whose weights must then load (weights are never
   made up for a real checkpoint); (3) configs_dir/<slugify(model_id,1)>.json: checkpoint_dir NULL, synthetic
   weights (configs_dir may be NULL).  Error lists every place looked. */
int model_config_resolve(struct model_config *m, const char *model_id, const char *configs_dir, char *err, size_t errsz);
void model_config_free(struct model_config *m);
/* Parameter count (all weights, embeddings included) and the linear-layer parameter count
 * (q/k/v/o and gate/up/down of every layer, biases excluded). */
long long model_config_param_count(const struct model_config *m);
long long model_config_linear_param_count(const struct model_config *m);
/* 1 when o_proj has a bias: attention_bias on a family that puts one there
 * (Llama, Qwen3; Qwen2 biases q/k/v only). */
int model_config_o_bias(const struct model_config *m);
/* (out, in) features of a LoRA target module (index into lora_module_names). */
void model_config_module_shape(const struct model_config *m, int module, int *out_features, int *in_features);

#endif
