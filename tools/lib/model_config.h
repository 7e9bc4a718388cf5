/* tools/lib/model_config.h: a decoder's shape from a Hugging Face
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
	char *checkpoint_dir;    /* directory with safetensors weights, or NULL: synthetic weights */
	int max_position_embeddings;  /* 0 when absent */
	/* rope_scaling as given (rope_type "" when none: plain RoPE); recorded,
	 * not applied here: the trainer refuses what it does not implement. */
	char rope_scaling_type[32];
	double rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor;
	int rope_original_max_position;
};

/* Parses config.json text; name (a path) prefixes messages.  Missing optional
 * fields get HF's defaults (head_dim = hidden/heads, kv heads = heads,
 * rope_theta 10000, rms_norm_eps 1e-6, tie false; qwen2: attention_bias
 * true).  0, or -1 with err naming the field. */
int model_config_parse(struct model_config *m, const char *json, const char *name, char *err, size_t errsz);
/* Resolves a model_id: (1) a local directory with config.json (checkpoint_dir set if it has model.safetensors or
   model.safetensors.index.json), (2) the HF cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
   models--Org--Name/snapshots/<any>/config.json (newest snapshot by mtime; checkpoint_dir as in 1),
   (3) configs_dir/<slugify(model_id,1)>.json (synthetic weights; configs_dir may be NULL).  Error lists every place looked. */
int model_config_resolve(struct model_config *m, const char *model_id, const char *configs_dir, char *err, size_t errsz);
void model_config_free(struct model_config *m);
/* Parameter count (all weights, embeddings included) and the linear-layer parameter count
 * (q/k/v/o and gate/up/down of every layer, biases excluded). */
long long model_config_param_count(const struct model_config *m);
long long model_config_linear_param_count(const struct model_config *m);
/* (out, in) features of a LoRA target module (index into lora_module_names). */
void model_config_module_shape(const struct model_config *m, int module, int *out_features, int *in_features);

#endif
