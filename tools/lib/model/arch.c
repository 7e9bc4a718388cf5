/* tools/lib/model/arch.c: the supported decoder families (see arch.h). */
#include "arch.h"

#include <string.h>

static const struct arch arches[] = {
	/* LlamaConfig: attention_bias and mlp_bias default false, head_dim hidden/heads */
	{ .model_type = "llama", .architecture = "LlamaForCausalLM", .hidden_act = "silu",
	  .head_dim_default = 0, .qkv_bias = -1, .o_bias_follows_qkv = 1, .qk_norm = 0, .tie_default = 0,
	  .reads_mlp_bias = 1, .reads_sliding_window = 0, .reads_pretraining_tp = 1 },
	/* Qwen2Attention builds q/k/v with bias=True whatever the config says, o_proj without */
	{ .model_type = "qwen2", .architecture = "Qwen2ForCausalLM", .hidden_act = "silu",
	  .head_dim_default = 0, .qkv_bias = 1, .o_bias_follows_qkv = 0, .qk_norm = 0, .tie_default = 0,
	  .reads_mlp_bias = 0, .reads_sliding_window = 1, .reads_pretraining_tp = 0 },
	/* Qwen3Config: head_dim 128 when absent, attention_bias false, q/k norms always */
	{ .model_type = "qwen3", .architecture = "Qwen3ForCausalLM", .hidden_act = "silu",
	  .head_dim_default = 128, .qkv_bias = -1, .o_bias_follows_qkv = 1, .qk_norm = 1, .tie_default = 0,
	  .reads_mlp_bias = 0, .reads_sliding_window = 1, .reads_pretraining_tp = 0 },
};

const char *const arch_proj_name[7] = {
	"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};

const char *const arch_norm_name[4] = {
	"input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm",
};

const struct arch *arch_find(const char *model_type)
{
	for (size_t i = 0; i < sizeof arches / sizeof *arches; i++)
		if (strcmp(model_type, arches[i].model_type) == 0)
			return &arches[i];
	return NULL;
}

const char *arch_type_list(void)
{
	static char list[128];

	if (list[0] == '\0')
		for (size_t i = 0; i < sizeof arches / sizeof *arches; i++) {
			if (i)
				strcat(list, ", ");
			strcat(list, arches[i].model_type);
		}
	return list;
}
